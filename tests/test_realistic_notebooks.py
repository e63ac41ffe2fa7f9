"""Notebooks written the way users write them: split across cells, helpers, aliases, magics."""

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from


def fixed_and_reanalyzed(text):
    notebook = notebook_from(text)
    analysis = analyze(notebook)
    result = fix_notebook(notebook, analysis)
    assert not result.failed
    fixed_text = joined(notebook, result.sources)
    return analysis, fixed_text, analyze(notebook_from(fixed_text))


SUBCLASSED_KERAS = """\
%load_ext autoreload
import tensorflow as tf
from tensorflow import keras
import npu_device
npu_device.open().as_default()
# %%
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)
# %%
!ls data
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
model = Net()
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse')
history = model.fit(ds, epochs=1, callbacks=[keras.callbacks.TerminateOnNaN()])
"""


def test_subclassed_keras_model_is_broadcast_after_its_first_batch():
    before, fixed, after = fixed_and_reanalyzed(SUBCLASSED_KERAS)
    assert before.adapter == "npu_device" and before.framework == "keras"
    assert "callbacks=[keras.callbacks.TerminateOnNaN(), keras.callbacks.LambdaCallback(" in fixed
    assert "npu_device.distribute.broadcast(model.trainable_variables)" in fixed  # the notebook's own alias
    assert "ds, rank_batch_size = npu_device.distribute.shard_and_rebatch_dataset(ds, 32)" in fixed
    assert "%load_ext autoreload\n" in fixed and "!ls data\n" in fixed
    assert after.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert after.problems == []


HELPERS_ACROSS_CELLS = """\
import tensorflow as tf
GLOBAL_BATCH = 64
# %%
def create_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(8,))])

def make_optimizer(lr):
    return tf.keras.optimizers.SGD(lr)
# %%
def compute_loss(labels, logits):
    per_example = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
# %%
model = create_model()
optimizer = make_optimizer(0.1)
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(100).batch(GLOBAL_BATCH)

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = compute_loss(y, model(x))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
# %%
%%time
for epoch in range(3):
    for x, y in dataset:
        train_step(x, y)
"""


def test_custom_loop_with_helpers_in_other_cells():
    before, fixed, after = fixed_and_reanalyzed(HELPERS_ACROSS_CELLS)
    assert before.framework == "custom-loop" and before.adapter == "npu_device"
    allreduce = next(f for f in before.findings if f.code == "missing-allreduce")
    assert '"sum"' in allreduce.fix and "compute_average_loss" in allreduce.message
    # The helper returns a model built at construction: broadcast right after it is made, as in the seed.
    assert "model = create_model()\nnpu.distribute.broadcast(model.trainable_variables)\n" in fixed
    assert after.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}


NUMPY_INPUT_ESTIMATOR = """\
import tensorflow as tf
def model_fn(features, labels, mode):
    opt = tf.compat.v1.train.AdamOptimizer()
    return tf.estimator.EstimatorSpec(mode, loss=l, train_op=opt.minimize(l))
est = tf.estimator.Estimator(model_fn)
input_fn = tf.compat.v1.estimator.inputs.pandas_input_fn(frame, y=labels, batch_size=32, shuffle=True)
est.train(input_fn, steps=10)
"""


def test_a_step_that_cannot_be_located_is_still_reported_where_training_happens():
    # An input_fn of the notebook's own that hands the Estimator a DataFrame's columns: nothing to slice in sight.
    made = NUMPY_INPUT_ESTIMATOR.replace("tf.compat.v1.estimator.inputs.pandas_input_fn(", "make_input_fn(")
    before, fixed, after = fixed_and_reanalyzed(
        "def make_input_fn(frame, y, **options):\n    return lambda: (dict(frame), y)\n" + made)
    shard = [f for f in after.findings if f.code == "missing-shard"]
    train_line = fixed.splitlines().index(next(l for l in fixed.splitlines() if l.startswith("est.train("))) + 1
    assert len(shard) == 1 and shard[0].fix is None and shard[0].line == train_line
    assert "were recognized" in shard[0].message and "by hand" in shard[0].message
    assert after.steps == {"broadcast": "present", "allreduce": "present", "shard": "missing"}


def test_an_estimators_numpy_input_fn_is_sharded_by_slicing_its_arrays():
    text = NUMPY_INPUT_ESTIMATOR.replace("pandas_input_fn(frame, y=labels,", "numpy_input_fn(x={'x': X}, y=Y,")
    _, fixed, after = fixed_and_reanalyzed(text)
    rows = "[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))][:len(Y) // int(os.getenv('RANK_SIZE', '1'))]"
    assert (f"numpy_input_fn(x={{'x': X{rows}}}, y=Y{rows}, "
            "batch_size=32 // int(os.getenv('RANK_SIZE', '1')), shuffle=True)") in fixed
    assert after.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}


def test_broken_cell_does_not_stop_the_rest():
    text = "import tensorflow as tf\n# %%\nfor x in :\n# %%\n" + HELPERS_ACROSS_CELLS.split("# %%\n", 1)[1]
    analysis = analyze(notebook_from(text))
    assert [(e.cell, e.line) for e in analysis.errors] == [(1, 1)]
    assert {"missing-allreduce", "missing-broadcast", "missing-shard"} <= {f.code for f in analysis.findings}


def reduction_fix(loss_lines: str, extra: str = "") -> str:
    text = (
        "import tensorflow as tf\n" + extra +
        "def train_step(x, y):\n"
        "    with tf.GradientTape() as tape:\n" + loss_lines +
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
    )
    analysis = analyze(notebook_from(text))
    return next(f.fix for f in analysis.findings if f.code == "missing-allreduce")


def test_reduction_of_a_sum_divided_by_this_ranks_own_count_is_mean():
    assert '"mean"' in reduction_fix("        loss = tf.reduce_sum(l) / tf.cast(tf.shape(x)[0], tf.float32)\n")
    assert '"mean"' in reduction_fix("        loss = tf.reduce_sum(l * mask) / tf.reduce_sum(mask)\n")


def test_reduction_of_a_sum_loss_object_divided_by_the_global_batch_is_sum():
    extra = "loss_fn = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.SUM)\n"
    assert '"sum"' in reduction_fix("        loss = loss_fn(y, model(x)) / BATCH_SIZE\n", extra)


def test_an_explicit_mean_loss_wins_over_a_reporting_reduce_op_sum():
    extra = "total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)\n"
    assert '"mean"' in reduction_fix("        loss = tf.reduce_mean(tf.square(model(x) - y))\n", extra)


MULTI_INPUT_FIT = """\
import tensorflow as tf
model.compile(optimizer='adam', loss='mse')
model.fit({"a": a, "b": b}, y, batch_size=16)
model.fit(x=[a, b], y=y, batch_size=16)
"""


def test_multi_input_arrays_are_sliced_one_by_one_with_one_rank_line():
    _, fixed, after = fixed_and_reanalyzed(MULTI_INPUT_FIT)
    rows = "[rank_id::rank_size][:len(y) // rank_size]"
    assert f'model.fit({{"a": a{rows}, "b": b{rows}}}, y{rows}, batch_size=16 // rank_size' in fixed
    assert f"model.fit(x=[a{rows}, b{rows}], y=y{rows}, batch_size=16 // rank_size" in fixed
    assert fixed.count("rank_size, rank_id = ") == 1
    assert after.steps["shard"] == "present"


def test_inputs_bound_to_a_list_are_not_sliced_as_a_whole():
    text = "import tensorflow as tf\ninputs = [a, b]\nmodel.compile(optimizer='adam', loss='mse')\nmodel.fit(inputs, y)\n"
    analysis = analyze(notebook_from(text))
    shard = next(f for f in analysis.findings if f.code == "missing-shard")
    assert shard.fix is None and "slice each input array" in shard.message


def test_a_built_model_returned_by_a_helper_is_broadcast_before_fit():
    text = (
        "import tensorflow as tf\n"
        "def make():\n    return tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "model = make()\nmodel.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"
    )
    _, fixed, _ = fixed_and_reanalyzed(text)
    assert "npu.distribute.broadcast(model.trainable_variables)\nmodel.fit(ds)" in fixed


def test_tf2_callback_imported_from_its_module_is_the_defective_one():
    text = (
        "import tensorflow as tf\nimport npu_device as npu\n"
        "from npu_device.distribute.npu_callbacks import NPUBroadcastGlobalVariablesCallback\n"
        "npu.open().as_default()\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(ds, callbacks=[NPUBroadcastGlobalVariablesCallback(0)])\n"
    )
    codes = [f.code for f in analyze(notebook_from(text)).findings]
    assert "tf2-broadcast-callback" in codes and "missing-broadcast" not in codes


def test_insertion_aimed_at_a_later_statement_of_a_line_splits_the_line():
    text = (
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "xs = tf.zeros((64, 4)); ys = tf.zeros((64, 1)); ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(32)  # data\n"
        "# %%\nmodel.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"
    )
    notebook = notebook_from(text)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook), {"missing-shard"}).sources).split("# %%")[0]
    assert fixed.endswith(
        "xs = tf.zeros((64, 4)); ys = tf.zeros((64, 1))\n"
        "ds = tf.data.Dataset.from_tensor_slices((xs, ys))\n"
        "ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds.take(len(ys) // "
        "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1'))), 32)\n"
        "ds = ds.batch(rank_batch_size)  # data\n"
    )


def test_every_estimator_training_call_must_broadcast():
    text = (
        "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
        "est = tf.estimator.Estimator(model_fn)\n"
        "est.train(input_fn, hooks=(h1, h2))\n"
        "est.train(input_fn, hooks=None, max_steps=10)\n"
        "est.train(input_fn, hooks=npu_hooks_append(hooks_list=None), max_steps=20)\n"
    )
    analysis = analyze(notebook_from(text))
    missing = [f.line for f in analysis.findings if f.code == "missing-broadcast"]
    assert missing == [4, 5] and analysis.steps["broadcast"] == "missing"
    assert [f.line for f in analysis.findings if f.code == "hooks-tuple"] == [6]
    fixed = joined(notebook_from(text), fix_notebook(notebook_from(text), analysis).sources)
    assert "est.train(input_fn, hooks=npu_hooks_append([h1, h2]))\n" in fixed
    assert "est.train(input_fn, hooks=npu_hooks_append(), max_steps=10)\n" in fixed
    assert "hooks=npu_hooks_append(hooks_list=[]), max_steps=20)" in fixed
    assert analyze(notebook_from(fixed)).steps["broadcast"] == "present"


CTL_TUTORIAL = """\
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def create_model():
    return tf.keras.Sequential([tf.keras.layers.Conv2D(32, 3, activation='relu'), tf.keras.layers.Flatten(),
                                tf.keras.layers.Dense(10)])
with strategy.scope():
    model = create_model()
    optimizer = tf.keras.optimizers.Adam()
# %%
def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
# %%
for epoch in range(EPOCHS):
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
"""


def test_the_training_loop_is_found_through_strategy_run():
    before, fixed, _ = fixed_and_reanalyzed(CTL_TUTORIAL)
    broadcast = next(f for f in before.findings if f.code == "missing-broadcast")
    # create_model() builds nothing (no input shape): the broadcast comes after the first step, found
    # through distributed_train_step and strategy.run, not before the loop, where it would find no variables.
    assert broadcast.cell == 2 and broadcast.line == 3 and "after the first step" in broadcast.message
    assert ("        total_loss += distributed_train_step(x)\n        if optimizer.iterations == 1:\n"
            "            npu.distribute.broadcast(model.trainable_variables)\n") in fixed


def test_horovod_keeps_its_per_rank_batch_and_step_counts():
    text = (
        "import tensorflow as tf\nimport horovod.tensorflow.keras as hvd\nhvd.init()\n"
        "dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(10000).batch(128)\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size())), loss='mse')\n"
        "model.fit(dataset, steps_per_epoch=500 // hvd.size(), callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])\n"
    )
    _, fixed, after = fixed_and_reanalyzed(text)
    assert ".shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).repeat().shuffle(10000).batch(128)" in fixed
    assert "steps_per_epoch=500 // int(os.getenv('RANK_SIZE', '1'))" in fixed
    assert "horovod" not in fixed and "hvd" not in fixed
    assert after.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert after.problems == []
