"""Datasets that only show an API are not training data (tensorflow.org's tf.function guide: the fix
sharded a three-element dataset consumed by next() three times, and rank 1 ran past its one element):
the fix leaves them whole, and a notebook whose datasets are all such says shard unknown, with why."""

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook
from npu_migrate_nb.rules.not_data_parallel import CONSTANT_SOURCES_REASON
from npu_migrate_nb.rules.shard import NO_DATASET_REASON
from tests.conftest import joined, notebook_from

SETUP = "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
SHOWN = ("@tf.function\ndef show(iterator):\n    tf.print(next(iterator))\n"
         "ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\niterator = iter(ds)\nshow(iterator)\nshow(iterator)\n# %%\n")
CONSTANT_STEP = ("w = tf.Variable(2.)\nx = tf.constant([-1.])\n"
                 "with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(tf.square(w * x))\n"
                 "grads = tape.gradient(loss, [w])\n")
UNRECOGNIZED_STEP = CONSTANT_STEP.replace("tf.constant([-1.])", "make_inputs()")


def test_a_shown_dataset_is_left_whole_and_shard_is_unknown_with_the_reason():
    notebook = notebook_from(SETUP + SHOWN + UNRECOGNIZED_STEP)
    analysis = analyze(notebook)
    assert analysis.steps["shard"] == "unknown"
    assert analysis.reasons["shard"] == NO_DATASET_REASON
    assert not [f for f in analysis.findings if f.code == "missing-shard"]
    assert ".shard(" not in joined(notebook, fix_notebook(notebook, analysis).sources)


def test_a_step_on_tensors_made_from_constants_reads_no_data_beside_a_shown_dataset():
    notebook = notebook_from(SETUP + SHOWN + CONSTANT_STEP)
    analysis = analyze(notebook)
    assert (analysis.steps["shard"], analysis.steps["allreduce"]) == ("not-applicable", "not-applicable")
    assert ".shard(" not in joined(notebook, fix_notebook(notebook, analysis).sources)


# TensorFlow's tf.function guide: steps given their tensors as parameters, called directly, through
# tf.function(f), and as a tf.Module's __call__; every call passes tensors made from constants.
PARAMETER_STEPS = (
    "def train_step(w, x, y, optimizer):\n    with tf.GradientTape() as tape:\n"
    "        L = tf.reduce_sum(tf.square(w * x - y))\n    gradients = tape.gradient(L, [w])\n"
    "    optimizer.apply_gradients(zip(gradients, [w]))\n"
    "class TrainStep(tf.Module):\n    def __init__(self, optimizer):\n        self.optimizer = optimizer\n"
    "    def __call__(self, w, x, y):\n        with tf.GradientTape() as tape:\n"
    "            L = tf.reduce_sum(tf.square(w * x - y))\n        gradients = tape.gradient(L, [w])\n"
    "        self.optimizer.apply_gradients(zip(gradients, [w]))\n# %%\n"
    "w = tf.Variable(2.)\nx = tf.constant([-1.])\ny = tf.constant([2.])\nopt = tf.keras.optimizers.Adam()\n"
    "step = tf.function(train_step)\nstep(w, x, y, opt)\ntrain_step(w, x, y, opt)\n"
    "train_o1 = TrainStep(opt)\ntrain_o1(w, x, y)\n"
)


def test_steps_given_constant_tensors_as_parameters_read_no_data_and_start_alike():
    # A layer made only to time it (the guide's Conv2D) is not trained: its weights need no broadcast.
    analysis = analyze(notebook_from(SETUP + "conv = tf.keras.layers.Conv2D(100, 3)\n# %%\n" + PARAMETER_STEPS))
    assert analysis.steps == {"broadcast": "not-applicable", "allreduce": "not-applicable", "shard": "not-applicable"}
    assert analysis.reasons["broadcast"] == CONSTANT_SOURCES_REASON


def test_a_step_given_a_variable_of_random_values_needs_a_broadcast():
    code = SETUP + PARAMETER_STEPS + "v = tf.Variable(tf.random.normal([1]))\ntrain_step(v, x, y, opt)\n"
    assert analyze(notebook_from(code)).steps["broadcast"] == "missing"


def test_a_step_given_data_by_any_one_call_reads_data():
    for reading in ("train_step(w, features, y, opt)\n", "train_o1(w, features, y)\n", "step(w, features, y, opt)\n"):
        analysis = analyze(notebook_from(SETUP + PARAMETER_STEPS + "features = load_features()\n" + reading))
        assert analysis.steps["allreduce"] != "not-applicable", reading


def test_a_dataset_given_to_a_training_function_is_sharded():
    code = SETUP + SHOWN + (
        "def step(x):\n    with tf.GradientTape() as tape:\n        loss = tf.reduce_sum(model(x))\n"
        "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n"
        "def loop(dataset):\n    for x in dataset:\n        step(x)\n"
        "train = tf.data.Dataset.from_tensor_slices(features)\nloop(train)\n")
    notebook = notebook_from(code)
    analysis = analyze(notebook)
    assert [f.cell for f in analysis.findings if f.code == "missing-shard"] == [2]
    fixed = joined(notebook, fix_notebook(notebook, analysis).sources)
    assert "from_tensor_slices([1, 2, 3])\n" in fixed  # the shown one stays whole
    assert "from_tensor_slices(features).shard(" in fixed


def test_a_dataset_whose_use_is_not_understood_counts_as_training():
    code = SETUP + "ds = tf.data.Dataset.from_tensor_slices(features)\ndist = strategy.experimental_distribute_dataset(ds)\n"
    code += "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(dist)\n"
    assert [f for f in analyze(notebook_from(code)).findings if f.code == "missing-shard"]
