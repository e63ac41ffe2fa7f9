"""Notebooks written for tf.distribute (MirroredStrategy with Keras fit, and the custom training loop
of the tf.distribute tutorial) and for Horovod: on 2 ranks the unfixed notebook is caught, the fixed
one passes the three checks (the strategy removed, the adapter's steps added once each)."""

import json

import pytest

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

DATA = (
    "x = np.random.RandomState(0).rand(256, 4).astype('float32')\n"
    "y = (x.sum(axis=1) > 2).astype('int64')\n"
)

KERAS_CELLS = [
    "import numpy as np\nimport tensorflow as tf",
    "strategy = tf.distribute.MirroredStrategy()\n"
    "print('Number of devices: {}'.format(strategy.num_replicas_in_sync))\n"
    "BATCH_SIZE = 8 * strategy.num_replicas_in_sync",
    DATA + "train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=1).batch(BATCH_SIZE)",
    "with strategy.scope():\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])\n"
    "    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),\n"
    "                  optimizer=tf.keras.optimizers.SGD(0.1), metrics=['accuracy'])",
    "model.fit(train_dataset, epochs=2, verbose=0)",
]

LOOP_CELLS = [
    "import numpy as np\nimport tensorflow as tf",
    "strategy = tf.distribute.MirroredStrategy()\n"
    "GLOBAL_BATCH_SIZE = 8 * strategy.num_replicas_in_sync\n" + DATA +
    "train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=1).batch(GLOBAL_BATCH_SIZE)\n"
    "train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)",
    "with strategy.scope():\n"
    "    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(\n"
    "        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)\n"
    "    def compute_loss(labels, predictions):\n"
    "        per_example_loss = loss_object(labels, predictions)\n"
    "        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])\n"
    "    optimizer = tf.keras.optimizers.SGD(0.1)",
    "def train_step(inputs):\n"
    "    features, labels = inputs\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = compute_loss(labels, model(features, training=True))\n"
    "    gradients = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(gradients, model.trainable_variables))\n"
    "    return loss\n"
    "\n"
    "@tf.function\n"
    "def distributed_train_step(dataset_inputs):\n"
    "    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))\n"
    "    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)",
    "for epoch in range(2):\n"
    "    total_loss, batches = 0.0, 0\n"
    "    for batch in train_dist_dataset:\n"
    "        total_loss += distributed_train_step(batch)\n"
    "        batches += 1\n"
    "    print('epoch', epoch, 'loss', float(total_loss / batches))",
]


def source_of(path):
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])


def fixed_and_stable(tmp_path, single):
    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(single), "-o", str(fixed))
    assert fixed.exists(), err
    code, out, err = cli("check", str(fixed), "--format", "json")
    assert code == 0, out  # re-analysis finds nothing
    again = tmp_path / "again.ipynb"
    cli("fix", str(fixed), "-o", str(again))
    assert source_of(again) == source_of(fixed)  # fixing again changes nothing
    return fixed


def run_on_two_ranks(path):
    code, out, err = cli("run", str(path), "-n", "2", "--format", "json")
    assert out, err[-3000:]
    return code, json.loads(out), err


@pytest.mark.parametrize("cells", [KERAS_CELLS, LOOP_CELLS], ids=["keras-fit", "custom-loop"])
def test_a_strategy_notebook_is_caught_then_fixed_and_proven_on_two_ranks(tmp_path, cells):
    single = write_notebook(tmp_path / "single.ipynb", cells)
    _, result, err = run_on_two_ranks(single)
    assert result["checks"]["shard"] == "fail", (result["checks"], err[-2000:])

    fixed = fixed_and_stable(tmp_path, single)
    source = source_of(fixed)
    assert "MirroredStrategy" not in source and "strategy." not in source, source
    assert "npu.distribute.broadcast(model.trainable_variables)" in source
    code, result, err = run_on_two_ranks(fixed)
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, (
        result.get("check_details"), err[-3000:])
    assert code == 0


HOROVOD_TF2_CELLS = [
    "import numpy as np\nimport tensorflow as tf\nimport horovod.tensorflow as hvd\nhvd.init()",
    DATA + "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).shuffle(256, seed=1).batch(8)\n"
    "model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])\n"
    "hvd.broadcast_variables(model.variables, root_rank=0)\n"
    "opt = tf.keras.optimizers.SGD(0.01 * hvd.size())\n"
    "loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
    "@tf.function\n"
    "def step(features, labels):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = loss_fn(labels, model(features, training=True))\n"
    "    tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)\n"
    "    grads = tape.gradient(loss, model.trainable_variables)\n"
    "    opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    "    return loss",
    "for features, labels in ds:\n    step(features, labels)",
]

HOROVOD_TF1_CELLS = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\nimport horovod.tensorflow as hvd\nhvd.init()\n"
    "tf.disable_eager_execution()",
    DATA.replace("'int64'", "'float32'") +
    "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).shuffle(256, seed=1).batch(8).repeat()\n"
    "features, labels = tf.data.make_one_shot_iterator(ds).get_next()\n"
    "w = tf.get_variable('w', [4, 1])\n"
    "loss = tf.reduce_mean(tf.square(tf.matmul(features, w)[:, 0] - labels))\n"
    "opt = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.01 * hvd.size()), op=hvd.Sum)\n"
    "train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())\n"
    "hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.train.StopAtStepHook(last_step=20)]",
    "with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:\n"
    "    while not sess.should_stop():\n"
    "        sess.run(train_op)",
]


ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
# A TF1 session loop feeding from an iterator: the probes see the weights, not the input batches.
SESSION_LOOP = {"broadcast": "pass", "allreduce": "not-observed", "shard": "not-observed"}


@pytest.mark.parametrize("cells,kept_sum,expected", [
    (HOROVOD_TF2_CELLS, 'npu.distribute.all_reduce(grads, reduction="sum")', ALL_PASS),
    (HOROVOD_TF1_CELLS, "opt.minimize(loss * int(os.getenv('RANK_SIZE', '1'))", SESSION_LOOP),
], ids=["tf2-tape", "tf1-optimizer"])
def test_a_horovod_notebook_with_op_sum_is_converted_and_runs_on_two_ranks(tmp_path, cells, kept_sum, expected):
    """Horovod is not installed here (nor on Ascend): the converted notebook must run without it."""
    single = write_notebook(tmp_path / "horovod.ipynb", cells)
    fixed = fixed_and_stable(tmp_path, single)
    source = source_of(fixed)
    assert "hvd" not in source and "horovod" not in source, source
    assert kept_sum in source, source
    code, result, err = run_on_two_ranks(fixed)
    assert result["checks"] == expected, (result.get("check_details"), err[-3000:])
    assert "weights changed identically on all" in json.dumps(result["check_details"]["allreduce"])


def test_the_fixed_custom_loop_keeps_the_strategys_sum_and_reaches_one_cards_weights(tmp_path):
    """At a fixed global batch (no shuffle, so one card reads the same samples in the same order), 2
    ranks reach one card's weights: the loss divided by the global batch is all-reduced with a sum,
    once (a mean would halve each update, a second reduce double it)."""
    cells = [cell.replace("8 * strategy.num_replicas_in_sync", "16").replace(".shuffle(256, seed=1)", "")
             for cell in LOOP_CELLS]
    single = write_notebook(tmp_path / "single.ipynb", cells)
    fixed = fixed_and_stable(tmp_path, single)
    assert 'all_reduce(gradients, reduction="sum")' in source_of(fixed)
    code, out, err = cli("run", str(fixed), "-n", "2", "--compare-single-card", "--format", "json")
    result = json.loads(out)
    assert result["single_card_math"] == "pass", (result.get("check_details"), err[-3000:])
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
