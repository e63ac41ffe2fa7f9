"""Loss scaling as on the cards, on 2 ranks: the data rank 1 reads in its last step is 100 times
larger, so only rank 1's scaled gradients pass float16's range there and only its float status
says the step overflowed. Without ``is_distributed=True`` (TF1) only rank 1 skips that update,
the weights drift apart and the allreduce check names the step and the rank; with it, and with
TF2's NpuLossScaleOptimizer (which always sums the status over workers), every rank skips it and
all three checks pass."""

import json

import pytest

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
BATCH, STEPS = 8, 8  # per rank; the last step (index 7) overflows on rank 1

DATA = (
    "rng = np.random.RandomState(0)\n"
    f"x = rng.rand({2 * BATCH * STEPS}, 4).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True).astype('float32')\n"
    f"for i in range({BATCH}):  # the rows rank 1 reads in its last batch\n"
    f"    x[({(STEPS - 1) * BATCH} + i) * 2 + 1] *= 100.0\n"
)


def tf1_cells(is_distributed):
    return [
        "import os\nimport numpy as np\nimport tensorflow as tf\nfrom npu_bridge.npu_init import *",
        DATA + "RANK_SIZE, RANK_ID = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
        "def input_fn():\n"
        f"    return tf.data.Dataset.from_tensor_slices((x, y)).shard(RANK_SIZE, RANK_ID).batch({BATCH})",
        "def model_fn(features, labels, mode):\n"
        "    w = tf.compat.v1.get_variable('w', [4, 1])\n"
        "    loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))\n"
        "    inner = NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01))\n"
        f"    opt = NPULossScaleOptimizer(inner, FixedLossScaleManager(1024), is_distributed={is_distributed})\n"
        "    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())\n"
        "    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)",
        "estimator = tf.estimator.Estimator(model_fn, model_dir=os.path.join(os.getcwd(), 'ckpt', str(RANK_ID)))\n"
        "estimator.train(input_fn, hooks=npu_hooks_append([]))\n"
        "print('global step', estimator.get_variable_value('global_step'))",
    ]


TF2_CELLS = [
    "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()",
    DATA + "dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(\n"
    f"    tf.data.Dataset.from_tensor_slices((x, y)), {2 * BATCH})\n"
    "dataset = dataset.batch(batch_size)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "npu.distribute.broadcast(model.trainable_variables)\n"
    "inner = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.01))\n"
    "optimizer = npu.train.optimizer.NpuLossScaleOptimizer(inner, initial_scale=1024)\n"
    "model.compile(optimizer=optimizer, loss='mse')",
    "model.fit(dataset, epochs=1, verbose=0)\n"
    "print('loss scale', float(optimizer.loss_scale), 'iterations', int(optimizer.iterations),\n"
    "      'last step finite', bool(optimizer.last_step_finite.numpy()))",
]


def run_on_two_ranks(tmp_path, cells, *extra):
    """Trained as written (``--full``): the overflow comes at the 8th step, after proof mode would stop."""
    notebook = write_notebook(tmp_path / "mixed_precision.ipynb", cells)
    code, out, err = cli("run", str(notebook), "-n", "2", "--format", "json", "--full", *extra, cwd=str(tmp_path))
    assert out, err[-3000:]
    return json.loads(out), err


def rank_output(result, cell, rank):
    return result["cells"][cell]["ranks"][rank]["stdout"]


def test_tf1_without_is_distributed_only_the_rank_that_overflowed_skips_and_the_weights_drift(tmp_path):
    result, err = run_on_two_ranks(tmp_path, tf1_cells(is_distributed=False), "--tf1")
    assert result["checks"]["allreduce"] == "fail", (result.get("check_details"), err[-3000:])
    detail = result["check_details"]["allreduce"]["detail"]
    assert f"rank 1 skipped its update at step {STEPS - 1}" in detail, detail
    assert "is_distributed=True" in detail and "rank 0 skipped" not in detail
    # the skipped update does not move the global step either: the ranks no longer agree on it
    assert f"global step {STEPS}" in rank_output(result, 3, 0)
    assert f"global step {STEPS - 1}" in rank_output(result, 3, 1)


def test_tf1_with_is_distributed_every_rank_skips_the_same_step(tmp_path):
    result, err = run_on_two_ranks(tmp_path, tf1_cells(is_distributed=True), "--tf1")
    assert result["checks"] == ALL_PASS, (result.get("check_details"), err[-3000:])
    for rank in (0, 1):
        assert f"global step {STEPS - 1}" in rank_output(result, 3, rank)


def test_tf2_npu_loss_scale_optimizer_sums_the_status_and_every_rank_skips_the_same_step(tmp_path):
    result, err = run_on_two_ranks(tmp_path, TF2_CELLS)
    assert result["checks"] == ALL_PASS, (result.get("check_details"), err[-3000:])
    for rank in (0, 1):  # the dynamic scale halved once; the skipped step still counts
        assert f"loss scale 512.0 iterations {STEPS} last step finite False" in rank_output(result, 3, rank)
