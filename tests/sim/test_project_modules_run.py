"""A notebook whose model_fn and input_fn live in a module of its own folder: the unfixed project is
caught on 2 ranks; ``fix --in-place`` fixes the notebook and the module, and the fixed project passes
the three checks."""

import json

import pytest

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

MODEL = """\
import tensorflow.compat.v1 as tf
import numpy as np

rng = np.random.RandomState(0)
FEATURES = rng.rand(512, 16).astype(np.float32)
LABELS = (FEATURES.sum(axis=1) * 4 / 16).astype(np.int32) % 4


def train_input_fn(batch_size):
    dataset = tf.data.Dataset.from_tensor_slices((FEATURES, LABELS))
    return dataset.shuffle(512, seed=1).repeat().batch(batch_size, drop_remainder=True)


def model_fn(features, labels, mode):
    hidden = tf.layers.dense(features, 32, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, 4)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.1)
    train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
"""

CELLS = [
    "import os\nimport tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\nfrom model import model_fn, train_input_fn",
    "rank_size = int(os.getenv('RANK_SIZE', '1'))\n"
    "estimator = tf.estimator.Estimator(model_fn=model_fn, config=npu_run_config_init(run_config=tf.estimator.RunConfig()))\n"
    "estimator.train(lambda: train_input_fn(64), max_steps=16 // rank_size)",
]


def write_project(folder):
    (folder / "model.py").write_text(MODEL)
    return write_notebook(folder / "train.ipynb", CELLS)


def test_a_project_with_its_model_in_a_module_is_caught_then_fixed_in_both_files_and_proven(tmp_path):
    notebook = write_project(tmp_path)
    code, out, err = cli("run", str(notebook), "-n", "2", "--tf1", "--format", "json", cwd=tmp_path)
    checks = json.loads(out)["checks"]
    assert code == 1 and checks["allreduce"] == "fail" and checks["broadcast"] == "fail", (checks, err[-2000:])

    code, _, err = cli("fix", str(notebook), "--in-place", cwd=tmp_path)
    assert code == 0, err
    module = (tmp_path / "model.py").read_text()
    assert "optimizer = npu_distributed_optimizer_wrapper(optimizer)" in module
    assert ".shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))" in module

    code, out, err = cli("run", str(notebook), "-n", "2", "--tf1", "--format", "json", cwd=tmp_path)
    result = json.loads(out)
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, (result, err[-2000:])
    assert code == 0


HELPER = """\
import numpy as np


class Digits:
    '''A book's data helper kept beside its notebooks (Hvass-Labs' mnist.py is one).'''

    def __init__(self, count=256):
        rng = np.random.RandomState(0)
        self.x_train = rng.rand(count, 8).astype(np.float32)
        self.y_train = (self.x_train.sum(axis=1) > 4).astype(np.int32)
"""


def test_a_module_beside_the_notebook_is_importable_on_the_ranks_wherever_the_run_starts(tmp_path):
    # As in a Jupyter kernel, '' is first on a rank's sys.path (ipyparallel's engine puts it there) and the
    # rank works in the notebook's folder, not in the one the command ran in.
    folder = tmp_path / "book"
    folder.mkdir()
    (folder / "digits.py").write_text(HELPER)
    notebook = write_notebook(folder / "chapter.ipynb", [
        "import tensorflow as tf\nfrom digits import Digits\ndata = Digits()",
        "model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(8,))])\n"
        "model.compile(optimizer='sgd', loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
        "model.fit(data.x_train, data.y_train, batch_size=32, epochs=1, verbose=0)",
    ])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, err = cli("run", str(notebook), "-n", "2", "--format", "json", cwd=elsewhere)
    cells = json.loads(out)["cells"]
    assert [rank["error"] for cell in cells for rank in cell["ranks"]] == [None] * 4, err[-2000:]
