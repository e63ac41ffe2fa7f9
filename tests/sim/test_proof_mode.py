"""Proof mode (issue 35): every training shape stops once the three checks are decided (2 steps) and at
most N more (here 1), on every rank at the same step; the notebook goes on from there. Each test would
fail without the mode: it reads how many steps really ran in the ranks."""

import io

import pytest

from npu_migrate_nb.sim.runner import Runner, shortened_text

from sim_notebooks import write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim
BUDGET = 3  # the 2 steps the checks need, and 1 more (--steps 1, the default)
TF2_SETUP = "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()"
# Each test's graph of its own: the cluster's ranks keep theirs from test to test.
TF1_SETUP = ("import numpy as np\nimport tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\n"
             "tf.disable_v2_behavior()\ntf.reset_default_graph()\ntf.keras.backend.clear_session()")
ARRAYS = ("rng = np.random.RandomState(0)\nx = rng.rand(2048, 4).astype('float32')\n"
          "y = (x.sum(axis=1, keepdims=True) > 2).astype('float32')")


def run(cluster, tmp_path, cells, proof_steps=1):
    output = io.StringIO()
    runner = Runner(cluster, timeout=300, echo=output, errors=output, proof_steps=proof_steps)
    result = runner.run_notebook(_load(write_notebook(tmp_path / "proof.ipynb", cells)))
    assert result.cells_ok, output.getvalue()
    return result


def _load(path):
    from npu_migrate_nb.notebook import load

    return load(str(path))


def on_every_rank(cluster, expression):
    """``expression``'s value in every rank's namespace (where the cells ran)."""
    cluster.view.execute(f"_proof_test_value = {expression}").get()
    return cluster.view.pull("_proof_test_value").get()


def shortened(result):
    return [(record["cell"], record["source"], record["taken"], record["written"], bool(record["ran_as_written"]))
            for record in result.shortened]


# ------------------------------------------------------------------------------------------- Keras

KERAS_MODEL = ("model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation='relu', input_shape=(4,)),\n"
               "                             tf.keras.layers.Dense(1)])\n"
               "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1)),"
               " loss='mse')\nnpu.distribute.broadcast(model.trainable_variables)")


def test_keras_fit_of_many_epochs_with_validation_stops_after_the_proof(tf2_cluster, tmp_path):
    fit = ("rank_size, rank_id = int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])\n"
           "history = model.fit(x[rank_id::rank_size], y[rank_id::rank_size], batch_size=16, epochs=50,\n"
           "                    validation_data=(x[:512], y[:512]), verbose=0)")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP + "\nimport os", ARRAYS, KERAS_MODEL, fit])
    assert on_every_rank(tf2_cluster, "int(model.optimizer.iterations)") == [BUDGET, BUDGET]
    # One epoch ran, validated; the History is as long as written, the epochs that did not run NaN.
    assert on_every_rank(tf2_cluster, "len(history.history['val_loss']), int(np.isfinite(history.history['val_loss']).sum())") == [(50, 1), (50, 1)]
    assert on_every_rank(tf2_cluster, "history.epoch == list(range(50))") == [True, True]
    assert on_every_rank(tf2_cluster, "int(model._test_counter)") == [BUDGET, BUDGET]  # validation capped
    assert shortened(result) == [(3, "keras fit", BUDGET, 50 * 64, False)]
    assert {check.status for check in result.checks.values()} == {"pass"}


def test_a_learning_rate_sweep_plotted_against_its_rates_runs_on(tf2_cluster, tmp_path):
    # The courses' sweep: 100 epochs, one rate each, then the losses against the rates (shapes must agree).
    sweep = ("rank_size, rank_id = int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])\n"
             "schedule = tf.keras.callbacks.LearningRateScheduler(lambda epoch: 1e-8 * 10 ** (epoch / 20))\n"
             "history = model.fit(x[rank_id::rank_size], y[rank_id::rank_size], epochs=100, callbacks=[schedule], verbose=0)\n"
             "lrs = 1e-8 * (10 ** (np.arange(100) / 20))\n"
             "curve = np.stack([lrs, np.array(history.history['loss'])])\n"
             "best = lrs[np.nanargmin(history.history['loss'])]")
    run(tf2_cluster, tmp_path, [TF2_SETUP + "\nimport os", ARRAYS, KERAS_MODEL, sweep])
    assert on_every_rank(tf2_cluster, "curve.shape, int(model.optimizer.iterations)") == [((2, 100), BUDGET)] * 2


def test_a_loop_until_training_converges_ends_its_repeats_run_as_written(tf2_cluster, tmp_path):
    """``while not done: model.fit(...)`` (a course's XOR until it is learned): cut every time, it would
    never end; after CUT_REPEATS cuts at one line, the repeats train as written and the report says so."""
    loop = ("import os\nrank_size, rank_id = int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])\n"
            "fits = 0\nwhile True:\n"
            "    fits += 1\n"
            "    history = model.fit(x[rank_id::rank_size], y[rank_id::rank_size], batch_size=256, epochs=5, verbose=0)\n"
            "    if not np.isnan(history.history['loss']).any():  # trained as written: converged\n"
            "        break")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, KERAS_MODEL, loop])
    assert on_every_rank(tf2_cluster, "fits") == [4, 4]
    as_written = [record for record in shortened(result) if record[4]]
    assert as_written == [(3, "keras fit", 20, 20, True)], shortened(result)


def test_a_for_loop_over_folds_keeps_every_fit_cut(tf2_cluster, tmp_path):
    """A cross-validation (``for train, test in folds:``) ends by itself: its fifth fit at one line is
    cut as the first was (as written, each trained its 40 epochs)."""
    folds = ("import os\nrank_size, rank_id = int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])\n"
             "steps_per_fold = []\n"
             "for fold in range(5):\n"
             "    before = int(model.optimizer.iterations)\n"
             "    model.fit(x[rank_id::rank_size], y[rank_id::rank_size], batch_size=256, epochs=40, verbose=0)\n"
             "    steps_per_fold.append(int(model.optimizer.iterations) - before)")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, KERAS_MODEL, folds])
    assert on_every_rank(tf2_cluster, "steps_per_fold") == [[BUDGET] * 5] * 2
    assert not [record for record in shortened(result) if record[4]], shortened(result)


def test_a_hyperparameter_search_ends_after_the_trials_the_checks_need(tf2_cluster, tmp_path):
    """keras-tuner: every trial's fit is cut, and the search ends after the first trials (one of
    dlwp's chapter 13 searches, 100 trials, took more than 15 minutes with its fits cut alone)."""
    search = ("import os\nimport keras_tuner as kt\n"
              "rank_size, rank_id = int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])\n"
              "def build_model(hp):\n"
              "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 2, 32, step=2), activation='relu'),\n"
              "                                 tf.keras.layers.Dense(1)])\n"
              "    optimizer = tf.keras.optimizers.SGD(hp.Choice('lr', [0.01, 0.001]))\n"
              "    model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer), loss='mse')\n"
              "    return model\n"
              f"tuner = kt.RandomSearch(build_model, objective='val_loss', max_trials=10, seed=1, overwrite=True,\n"
              f"                        directory=os.path.join({str(tmp_path)!r}, 'rank_' + str(rank_id)))\n"
              "tuner.search(x[rank_id::rank_size], y[rank_id::rank_size], batch_size=16, epochs=20,\n"
              "             validation_split=0.25, verbose=0)\n"
              "trials = sorted(trial.status for trial in tuner.oracle.trials.values())\n"
              "best_units = tuner.get_best_hyperparameters(1)[0].get('units')\n"
              "steps = int(tuner.get_best_models(1)[0].optimizer.iterations)")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, search])
    assert on_every_rank(tf2_cluster, "trials") == [["COMPLETED", "COMPLETED"]] * 2
    # Every trial's fit was cut too; the best model is one the search trained (its History is NaN after the cut).
    assert on_every_rank(tf2_cluster, "steps") == [BUDGET] * 2
    assert len(set(on_every_rank(tf2_cluster, "best_units"))) == 1  # the ranks' oracles agree (one seed)
    searches = [record for record in shortened(result) if record[1] == "tuner search"]
    assert searches == [(2, "tuner search", 2, 10, False)], shortened(result)
    said = [shortened_text(record) for record in result.shortened if record["source"] == "tuner search"]
    assert said == ["cell 2, tuner search: 2 of 10 trials, stopped once the checks were decided"]
    fits = [record for record in shortened(result) if record[1] == "keras fit"]
    assert [record[2] for record in fits] == [BUDGET, BUDGET], shortened(result)


def test_keras_fit_on_an_endless_dataset_and_evaluate_stop_but_predict_does_not(tf2_cluster, tmp_path):
    cells = [TF2_SETUP, ARRAYS, KERAS_MODEL,
             "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, int(__import__('os').environ['RANK_ID']))"
             ".repeat().batch(16)\nmodel.fit(ds, steps_per_epoch=100, epochs=20, verbose=0)",
             "loss = model.evaluate(x, y, batch_size=16, verbose=0)\npredictions = model.predict(x, verbose=0)"]
    result = run(tf2_cluster, tmp_path, cells)
    assert on_every_rank(tf2_cluster, "int(model.optimizer.iterations)") == [BUDGET, BUDGET]
    assert on_every_rank(tf2_cluster, "len(predictions)") == [2048, 2048]  # its output is used: never cut
    assert [(cell, what) for cell, what, *_ in shortened(result)] == [(3, "keras fit"), (4, "keras evaluate")]


def test_a_keras_models_own_train_step_stops_too(tf2_cluster, tmp_path):
    model = ("class Regressor(tf.keras.Model):\n"
             "    def __init__(self):\n        super().__init__()\n        self.dense = tf.keras.layers.Dense(1)\n"
             "    def call(self, x):\n        return self.dense(x)\n"
             "    def train_step(self, data):\n        x, y = data\n"
             "        with tf.GradientTape() as tape:\n            loss = tf.reduce_mean((self(x) - y) ** 2)\n"
             "        grads = tape.gradient(loss, self.trainable_variables)\n"
             "        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))\n"
             "        return {'loss': loss}\n"
             "model = Regressor()\nmodel.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper("
             "tf.keras.optimizers.SGD(0.1)))\nmodel.fit(x, y, batch_size=8, epochs=10, verbose=0)")
    run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, model])
    assert on_every_rank(tf2_cluster, "int(model.optimizer.iterations)") == [BUDGET, BUDGET]


def test_full_mode_trains_as_written(tf2_cluster, tmp_path):
    fit = "model.fit(x[:256], y[:256], batch_size=64, epochs=3, verbose=0)"
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, KERAS_MODEL, fit], proof_steps=None)
    assert on_every_rank(tf2_cluster, "int(model.optimizer.iterations)") == [12, 12]
    assert result.shortened == [] and result.proof_steps is None


# ------------------------------------------------------------------------------------- TF2 loops

LOOP_MODEL = ("model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
              "optimizer = tf.keras.optimizers.SGD(0.1)\n"
              "npu.distribute.broadcast(model.trainable_variables)\n"
              "@tf.function\ndef train_step(xb, yb):\n    with tf.GradientTape() as tape:\n"
              "        loss = tf.reduce_mean((model(xb) - yb) ** 2)\n"
              "    grads = npu.distribute.all_reduce(tape.gradient(loss, model.trainable_variables))\n"
              "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n    return loss")
SHARDED = ("ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, int(__import__('os').environ['RANK_ID']))"
           ".shuffle(100000).batch(16)")


def test_nested_epoch_loops_over_a_dataset_stop_after_the_proof(tf2_cluster, tmp_path):
    loop = "for epoch in range(20):\n    for xb, yb in ds:\n        train_step(xb, yb)\nepochs_run = epoch + 1"
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, SHARDED, LOOP_MODEL, loop])
    assert on_every_rank(tf2_cluster, "int(optimizer.iterations)") == [BUDGET, BUDGET]
    assert on_every_rank(tf2_cluster, "epochs_run") == [1, 1]  # the epochs after the proof are not run
    assert shortened(result) == [(4, "custom loop", BUDGET, None, False)]
    assert {check.status for check in result.checks.values()} == {"pass"}


def test_a_loop_taking_next_of_an_iterator_in_a_range_stops_and_an_evaluation_loop_does_not(tf2_cluster, tmp_path):
    loop = ("iterator = iter(ds.repeat())\nfor step in range(10000):\n    xb, yb = next(iterator)\n"
            "    train_step(xb, yb)\nevaluated = sum(1 for _batch in ds)")
    run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, SHARDED, LOOP_MODEL, loop])
    assert on_every_rank(tf2_cluster, "int(optimizer.iterations)") == [BUDGET, BUDGET]
    assert on_every_rank(tf2_cluster, "evaluated") == [64, 64]  # 1024 rows per rank, 16 a batch: all of them
    assert on_every_rank(tf2_cluster, "list(range(3)) == [0, 1, 2] and len(range(5)) == 5") == [True, True]


def test_a_large_shuffle_buffer_is_not_filled_to_take_a_few_batches(tf2_cluster, tmp_path):
    run(tf2_cluster, tmp_path, [TF2_SETUP, "ds = tf.data.Dataset.range(200000).shuffle(100000)"])
    assert on_every_rank(tf2_cluster, "int(ds._buffer_size)") == [1024, 1024]


# ----------------------------------------------------------------------------------------- TF1

ESTIMATOR = ("def input_fn():\n"
             "    ds = tf.data.Dataset.from_tensor_slices(({'x': x}, y)).shard(2, int(__import__('os').environ['RANK_ID']))\n"
             "    return ds.repeat().batch(16)\n"
             "def model_fn(features, labels, mode):\n"
             "    prediction = tf.layers.dense(features['x'], 1)\n"
             "    loss = tf.losses.mean_squared_error(labels, prediction)\n"
             "    optimizer = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.1))\n"
             "    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(\n"
             "        loss, global_step=tf.train.get_global_step()))\n"
             "import tempfile\nestimator = tf.estimator.Estimator(model_fn=model_fn, model_dir=tempfile.mkdtemp(),\n"
             "                                   config=npu_run_config_init())")


def test_an_estimator_with_200000_steps_trains_the_proofs_and_evaluates_as_few(tf1_cluster, tmp_path):
    cells = [TF1_SETUP, ARRAYS, ESTIMATOR,
             "estimator.train(input_fn=input_fn, max_steps=200000, hooks=npu_hooks_append())\n"
             "evaluation = estimator.evaluate(input_fn=input_fn)\n"
             "short = estimator.evaluate(input_fn=input_fn, steps=2)"]  # fewer than a proof: as written, unsaid
    result = run(tf1_cluster, tmp_path, cells)
    assert on_every_rank(tf1_cluster, "int(estimator.get_variable_value('global_step'))") == [BUDGET, BUDGET]
    assert [(cell, what, taken, written) for cell, what, taken, written, _ in shortened(result)] == [
        (3, "estimator train", BUDGET, 200000), (3, "estimator evaluate", BUDGET, None)]
    assert {check.status for check in result.checks.values()} == {"pass"}


def test_train_and_evaluate_stops_after_the_proof(tf1_cluster, tmp_path):
    cells = [TF1_SETUP, ARRAYS, ESTIMATOR,
             "train_spec = tf.estimator.TrainSpec(input_fn=input_fn, max_steps=100000, hooks=npu_hooks_append())\n"
             "eval_spec = tf.estimator.EvalSpec(input_fn=input_fn, steps=None, throttle_secs=0)\n"
             "tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)"]
    run(tf1_cluster, tmp_path, cells)
    assert on_every_rank(tf1_cluster, "int(estimator.get_variable_value('global_step'))") == [BUDGET, BUDGET]


SESSION_GRAPH = ("xs = tf.placeholder(tf.float32, [None, 4])\nys = tf.placeholder(tf.float32, [None, 1])\n"
                 "w = tf.Variable(tf.zeros([4, 1]))\nglobal_step = tf.train.get_or_create_global_step()\n"
                 "loss = tf.reduce_mean((tf.matmul(xs, w) - ys) ** 2)\n"
                 "train_op = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.1)).minimize(\n"
                 "    loss, global_step=global_step)\nupdates = tf.Variable(0)\ncount = tf.assign_add(updates, 1)\n"
                 "train_op = tf.group(train_op, count)\n"
                 "broadcast = tf.group([tf.assign(v, hccl_ops.broadcast([v], 0)[0]) for v in tf.trainable_variables()])")
FEED = "{xs: x[offset:offset + 16][int(__import__('os').environ['RANK_ID'])::2], ys: y[offset:offset + 16][int(__import__('os').environ['RANK_ID'])::2]}"


def test_a_session_loop_of_50000_fed_steps_stops_after_the_proof(tf1_cluster, tmp_path):
    loop = ("sess = tf.Session(config=npu_config_proto())\nsess.run(tf.global_variables_initializer())\n"
            "sess.run(broadcast)\nfor step in range(50000):\n    offset = (step * 16) % 2000\n"
            f"    sess.run(train_op, feed_dict={FEED})\n"
            "applied = sess.run(updates)")
    result = run(tf1_cluster, tmp_path, [TF1_SETUP, ARRAYS, SESSION_GRAPH, loop])
    assert on_every_rank(tf1_cluster, "applied") == [BUDGET, BUDGET]
    assert {check.status for check in result.checks.values()} == {"pass"}


def test_a_while_loop_on_the_global_step_ends_and_trains_only_the_proof(tf1_cluster, tmp_path):
    loop = ("sess = tf.Session(config=npu_config_proto())\nsess.run(tf.global_variables_initializer())\n"
            "sess.run(broadcast)\noffset = 0\nwhile sess.run(global_step) < 2000:\n"
            f"    sess.run(train_op, feed_dict={FEED})\n"
            "applied = sess.run(updates)")
    run(tf1_cluster, tmp_path, [TF1_SETUP, ARRAYS, SESSION_GRAPH, loop])
    assert on_every_rank(tf1_cluster, "applied") == [BUDGET, BUDGET]


def test_a_monitored_training_session_stops_after_the_proof(tf1_cluster, tmp_path):
    loop = ("hooks = npu_hooks_append([tf.train.StopAtStepHook(last_step=100000)])\n"
            "with tf.train.MonitoredTrainingSession(hooks=hooks, config=npu_config_proto()) as sess:\n"
            "    offset = 0\n    while not sess.should_stop():\n"
            f"        sess.run(train_op, feed_dict={FEED})\n"
            "    applied = sess.run(updates)")
    result = run(tf1_cluster, tmp_path, [TF1_SETUP, ARRAYS, SESSION_GRAPH, loop])
    # Its runs fetch a dict keyed by its hooks (not sortable by tf.nest): still seen as training runs.
    assert on_every_rank(tf1_cluster, "applied") == [BUDGET, BUDGET]
    assert [(cell, what, taken) for cell, what, taken, *_ in shortened(result)] == [(3, "monitored session", BUDGET)]


def test_keras_in_a_tf1_graph_stops_after_the_proof(tf1_cluster, tmp_path):
    model = ("model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
             "model.compile(optimizer=npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.1)), loss='mse')\n"
             "history = model.fit(x[int(__import__('os').environ['RANK_ID'])::2], y[int(__import__('os').environ['RANK_ID'])::2],\n"
             "                    batch_size=16, epochs=40, verbose=0, callbacks=[NPUBroadcastGlobalVariablesCallback(0)])")
    result = run(tf1_cluster, tmp_path, [TF1_SETUP, ARRAYS, model])
    # One epoch ran; the History as long as written, NaN after it.
    assert on_every_rank(tf1_cluster, "len(history.history['loss']), int(np.isfinite(history.history['loss']).sum())") == [(40, 1), (40, 1)]
    assert [(cell, what, taken) for cell, what, taken, *_ in shortened(result)] == [(2, "keras fit", BUDGET)]


# ---------------------------------------------------------------------- callbacks, loops it cannot cut

def test_a_fit_with_early_stopping_and_checkpoints_stops_after_the_proof_and_keeps_its_callbacks(tf2_cluster,
                                                                                               tmp_path):
    fit = ("import os\nckpt = os.path.join(os.getcwd(), 'ckpt_rank' + os.environ['RANK_ID'] + '.weights.h5')\n"
           "callbacks = [tf.keras.callbacks.EarlyStopping(monitor='val_loss', patience=100),\n"
           "             tf.keras.callbacks.ModelCheckpoint(ckpt, save_weights_only=True)]\n"
           "history = model.fit(x, y, batch_size=16, epochs=40, validation_split=0.25, callbacks=callbacks, verbose=0)\n"
           "saved = os.path.exists(ckpt)")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, KERAS_MODEL, fit])
    assert on_every_rank(tf2_cluster, "int(model.optimizer.iterations)") == [BUDGET, BUDGET]
    assert on_every_rank(tf2_cluster, "saved") == [True, True]  # the epoch's end still ran the callbacks
    assert shortened(result)[0][1:4] == ("keras fit", BUDGET, 40 * 96)


def test_a_loop_it_cannot_end_runs_as_written_and_the_report_says_why(tf2_cluster, tmp_path):
    loop = ("step = 0\nwhile step < 12:\n"
            "    train_step(x[step * 16:(step + 1) * 16], y[step * 16:(step + 1) * 16])\n    step += 1")
    result = run(tf2_cluster, tmp_path, [TF2_SETUP, ARRAYS, LOOP_MODEL, loop])
    assert on_every_rank(tf2_cluster, "int(optimizer.iterations)") == [12, 12]
    [(cell, what, taken, written, as_written)] = shortened(result)
    assert (cell, what, taken, written, as_written) == (3, "custom loop", 12, 12, True)
    from npu_migrate_nb.sim.runner import shortened_text

    assert "ran as written (12 steps)" in shortened_text(result.shortened[0])


# ------------------------------------------------------------------------------------------- the CLI

def test_the_cli_proves_by_default_takes_steps_and_full_and_tells_a_cut_short_assertion_apart(tmp_path):
    from sim_notebooks import cli

    fit = ("import os\nrank, size = int(os.environ['RANK_ID']), int(os.environ['RANK_SIZE'])\n"
           "history = model.fit(x[rank:512:size], y[rank:512:size], batch_size=256 // size, epochs=8, verbose=0)")
    check = "assert int(model.optimizer.iterations) == 16, 'trained too little'"
    path = str(write_notebook(tmp_path / "accuracy.ipynb", [TF2_SETUP, ARRAYS, KERAS_MODEL, fit, check]))

    code, out, err = cli("run", path, "-n", "2")
    assert code == 1, out + err
    assert "cell 3, keras fit: 3 of 16 steps, stopped once the checks were decided" in out, out
    assert "in proof mode: training was cut short" in out, out  # the one-card rerun fails the same way

    code, out, err = cli("run", path, "-n", "2", "--steps", "0", "--format", "json")
    report = __import__("json").loads(out)
    proof = report["proof"]
    assert proof["steps"] == 0 and proof["shortened"][0]["taken"] == 2, proof
    assert report["one_card"]["status"] == "fails" and report["one_card"]["after_cut"] is True, report["one_card"]

    code, out, err = cli("run", path, "-n", "2", "--full")
    assert code == 0, out + err
    assert "trained as written (--full)" in out and "stopped once" not in out

    code, out, err = cli("run", path, "-n", "2", "--steps", "-1")
    assert code == 2 and "must be at least 0" in err
