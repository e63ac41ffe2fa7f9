"""Notebooks as the vendor's migration tool leaves a single-card script (issue 22), TF1 and TF2:
``npu_ops.dropout`` for ``tf.nn.dropout``, ``npu_unary_ops.gelu``, the loss-scale optimizers for
mixed precision, ``get_npu_rank_id`` for Horovod's rank, ``NPUEstimator``/``NPURunConfig``,
``batch(..., drop_remainder=True)``. Unfixed, the run is caught; after ``fix``, every cell runs on 2
ranks and the three checks pass (with the loss-scale optimizer told ``is_distributed=True`` and the
optimizer inside it wrapped: it does not aggregate gradients itself)."""

import json

import pytest

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}

DATA = (
    "import numpy as np\n"
    "rng = np.random.RandomState(0)\n"
    "features = rng.rand(512, 8).astype('float32')\n"
    "labels = features.sum(axis=1, keepdims=True).astype('float32')\n"
)

TF1_TOOL_OUTPUT = [
    "from npu_bridge.npu_init import *\nimport tensorflow as tf\n" + DATA,
    "print('rank', get_npu_rank_id())\n"
    "def model_fn(features, labels, mode):\n"
    "    hidden = tf.layers.dense(features, 16)\n"
    "    hidden = npu_ops.dropout(npu_unary_ops.gelu(hidden), keep_prob=0.9)\n"
    "    predictions = tf.layers.dense(hidden, 1)\n"
    "    loss = tf.losses.mean_squared_error(labels, predictions)\n"
    "    optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
    "    manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 10, incr_every_n_steps=100,\n"
    "                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)\n"
    "    optimizer = NPULossScaleOptimizer(optimizer, manager)\n"
    "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
    "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
    "def input_fn():\n"
    "    dataset = tf.data.Dataset.from_tensor_slices((features, labels))\n"
    "    return dataset.repeat().batch(32, drop_remainder=True)",
    "estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig(save_checkpoints_steps=None))\n"
    "estimator.train(input_fn, max_steps=12)",
]

TF2_TOOL_OUTPUT = [
    "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n" + DATA,
    "model = tf.keras.Sequential([tf.keras.layers.Dense(16, input_shape=(8,)),\n"
    "                             tf.keras.layers.Lambda(npu.ops.gelu), tf.keras.layers.Dropout(0.1),\n"
    "                             tf.keras.layers.Dense(1)])\n"
    "optimizer = npu.train.optimizer.NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01))\n"
    "model.compile(optimizer=optimizer, loss='mse')",
    "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32, drop_remainder=True)\n"
    "model.fit(dataset, epochs=2, verbose=0)",
]


@pytest.mark.parametrize("cells,mode", [(TF1_TOOL_OUTPUT, "tf1"), (TF2_TOOL_OUTPUT, "tf2")], ids=["tf1", "tf2"])
def test_the_vendor_tools_output_is_caught_then_fixed_and_proven_on_two_ranks(tmp_path, cells, mode):
    notebook = write_notebook(tmp_path / "tool_output.ipynb", cells)
    code, out, err = cli("check", str(notebook), "--format", "json")
    report = json.loads(out)
    assert report["mode"] == mode, report["mode_reason"]
    code, out, err = cli("run", str(notebook), "-n", "2", "--format", "json", "--no-one-card")
    unfixed = json.loads(out)
    assert code == 1 and all(cell["status"] == "ok" for cell in unfixed["cells"]), err[-3000:]
    assert "fail" in unfixed["checks"].values()  # caught: no NameError, a check says what is missing

    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(notebook), "-o", str(fixed))
    assert code == 0, err
    if mode == "tf1":
        source = "".join(json.loads(fixed.read_text())["cells"][1]["source"])
        assert "optimizer = npu_distributed_optimizer_wrapper(optimizer)" in source
        assert "NPULossScaleOptimizer(optimizer, manager, is_distributed=True)" in source
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json", "--no-one-card")
    result = json.loads(out)
    assert code == 0 and result["checks"] == ALL_PASS, (result["check_details"], err[-3000:])
