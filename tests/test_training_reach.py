"""Datasets that only show an API are not training data (tensorflow.org's tf.function guide: the fix
sharded a three-element dataset consumed by next() three times, and rank 1 ran past its one element):
the fix leaves them whole, and a notebook whose datasets are all such says shard unknown, with why."""

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook
from npu_migrate_nb.rules.shard import NO_DATASET_REASON
from tests.conftest import joined, notebook_from

SETUP = "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
SHOWN = ("@tf.function\ndef show(iterator):\n    tf.print(next(iterator))\n"
         "ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\niterator = iter(ds)\nshow(iterator)\nshow(iterator)\n# %%\n")
CONSTANT_STEP = ("w = tf.Variable(2.)\nx = tf.constant([-1.])\n"
                 "with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(tf.square(w * x))\n"
                 "grads = tape.gradient(loss, [w])\n")


def test_a_shown_dataset_is_left_whole_and_shard_is_unknown_with_the_reason():
    notebook = notebook_from(SETUP + SHOWN + CONSTANT_STEP)
    analysis = analyze(notebook)
    assert analysis.steps["shard"] == "unknown"
    assert analysis.reasons["shard"] == NO_DATASET_REASON
    assert not [f for f in analysis.findings if f.code == "missing-shard"]
    assert ".shard(" not in joined(notebook, fix_notebook(notebook, analysis).sources)


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
