"""Rank values are known by their value (RANK_ID, get_rank_id(), hvd.rank(), ...), followed through
assignments across cells, not by their name; a split by the device id is a shard, with a warning."""

import ast

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.facts import NotebookFacts
from npu_migrate_nb.ranks import computes_rank_size, has_rank_shard, rank_free_shards, shard_uses
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from

SHARDS = {
    # by the rank: present
    "environment across cells": ("import os\nidx = int(os.environ['RANK_ID'])\n# %%\n"
                                 "n = int(os.getenv('RANK_SIZE'))\nfiles = files[idx::n]\n", "rank"),
    "environ.get": ("import os\nds = ds.shard(int(os.environ.get('RANK_SIZE', 1)), int(os.environ.get('RANK_ID', 0)))\n",
                    "rank"),
    "from os import getenv": ("from os import getenv\nwho = getenv('RANK_ID')\nds = ds.shard(2, int(who))\n", "rank"),
    "hccl getters": ("from hccl.manage.api import get_rank_size, get_rank_id\nds = ds.shard(get_rank_size(), get_rank_id())\n",
                     "rank"),
    "star-imported getters": ("from npu_bridge.npu_init import *\nworker = get_rank_id()\nds = ds.shard(get_rank_size(), worker)\n",
                              "rank"),
    "horovod": ("import horovod.tensorflow.keras as hvd\nds = ds.shard(hvd.size(), hvd.rank())\n", "rank"),
    "npu device handle": ("import npu_device as npu\ndevice = npu.open().as_default()\n"
                          "ds = ds.shard(device.workers_num, device.worker_id)\n", "rank"),
    "tuple of the fix": ("import os\nrank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
                         "model.fit(x[rank_id::rank_size], y[rank_id::rank_size])\n", "rank"),
    "own function": ("import os\ndef my_rank():\n    return int(os.environ['RANK_ID'])\n# %%\nds = ds.shard(2, my_rank())\n",
                     "rank"),
    "parameter given by its calls": ("import os\ndef make(n, i):\n    return ds.shard(n, i)\n# %%\n"
                                     "train = make(int(os.getenv('RANK_SIZE')), int(os.getenv('RANK_ID')))\n", "rank"),
    "contiguous block": ("import os\nr = int(os.environ['RANK_ID'])\npart = data[r * 100:(r + 1) * 100]\n", "rank"),
    "device id offset by its server (model zoo BERT)": (
        "import os\ndevice_id = int(os.getenv('DEVICE_ID'))\nrank_index = int(os.getenv('RANK_INDEX'))\n"
        "local_rank = device_id + rank_index * 8\nd = d.shard(int(os.getenv('RANK_SIZE')), local_rank)\n", "rank"),
    # by the device id: present, but device-id-shard warns
    "device id": ("import os\nrank = int(os.getenv('DEVICE_ID'))\n# %%\nds = ds.shard(8, rank)\n", "device"),
    "attribute set in __init__": ("import os\nclass Data:\n    def __init__(self):\n"
                                  "        self.rank_id = int(os.getenv('ASCEND_DEVICE_ID'))\n"
                                  "    def train(self):\n        return ds.shard(8, self.rank_id)\n", "device"),
    "local rank": ("import horovod.tensorflow as hvd\nds = ds.shard(hvd.local_size(), hvd.local_rank())\n", "device"),
    # not by rank
    "constants": ("ds = ds.shard(2, 0)\n", "other"),
    "unrelated variables": ("idx = 0\nparts = 2\nds = ds.shard(parts, idx)\n", "other"),
    "a name that only sounds like the rank": ("rank_id = 0\nrank_size = 4\nds = ds.shard(rank_size, rank_id)\n", "other"),
    "device id plus a constant": ("import os\nds = ds.shard(8, int(os.getenv('DEVICE_ID')) + 1)\n", "device"),
    # cannot be seen
    "device id offset by a value that cannot be seen": ("import os\nds = ds.shard(16, int(os.getenv('DEVICE_ID')) + base)\n",
                                                       "unknown"),
    "flags": ("ds = ds.shard(FLAGS.num_workers, FLAGS.task_index)\n", "unknown"),
    "a launcher's own variable": ("import os\nds = ds.shard(2, int(os.environ['WORKER_INDEX']))\n", "unknown"),
}


@pytest.mark.parametrize("name", list(SHARDS))
def test_a_shard_is_known_by_the_value_of_its_index(name):
    text, by = SHARDS[name]
    facts = NotebookFacts(notebook_from(text))
    assert {use.by for use in shard_uses(facts)} == {by}
    assert has_rank_shard(facts) == (by in ("rank", "device"))


def test_the_local_rank_that_pins_a_device_is_no_shard():
    facts = NotebookFacts(notebook_from(
        "import horovod.tensorflow as hvd\ntf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')\n"))
    assert list(shard_uses(facts)) == [] and not has_rank_shard(facts)


KERAS = "import tensorflow as tf\n{shard}\nmodel.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"


def test_a_shard_by_constants_leaves_the_step_missing():
    text = KERAS.format(shard="ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, 0).batch(32)")
    analysis = analyze(notebook_from(text))
    assert analysis.steps["shard"] == "missing"
    assert "missing-shard" in [finding.code for finding in analysis.findings]
    assert [ast.unparse(use.node) for use in rank_free_shards(NotebookFacts(notebook_from(text)))] == [
        "tf.data.Dataset.from_tensor_slices((x, y)).shard(2, 0)"]


def test_a_shard_by_flags_is_unknown_not_missing():
    text = KERAS.format(shard="ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(FLAGS.n, FLAGS.index).batch(32)")
    analysis = analyze(notebook_from(text))
    assert analysis.steps["shard"] == "unknown"
    assert "FLAGS.index" in analysis.reasons["shard"]
    assert "missing-shard" not in [finding.code for finding in analysis.findings]


def test_a_device_id_shard_is_present_with_a_warning():
    text = KERAS.format(shard="import os\ndevice = int(os.getenv('DEVICE_ID', '0'))\n"
                              "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, device).batch(32)")
    analysis = analyze(notebook_from(text))
    assert analysis.steps["shard"] == "present"
    [finding] = [finding for finding in analysis.findings if finding.code == "device-id-shard"]
    assert finding.severity == "warning" and "`device`" in finding.message and "RANK_ID" in finding.message


def test_the_rank_size_is_known_by_value():
    facts = NotebookFacts(notebook_from(
        "from hccl.manage.api import get_rank_size\nworkers = get_rank_size()\n# %%\nsteps = 1000 // workers\n"
        "# %%\nrank_size = 8\nother = 1000 // rank_size\n"))
    [(_, _, steps)] = facts.assignments("steps")
    [(_, _, other)] = facts.assignments("other")
    assert computes_rank_size(facts, steps.value, None)
    assert not computes_rank_size(facts, other.value, None)


# As in the vendor's model zoo (already distributed TF1 code): the "rank" read from DEVICE_ID in a
# settings cell, the shard in the input function of another cell.
MODEL_ZOO = (
    "import os\nimport tensorflow as tf\nfrom npu_bridge.npu_init import *\n"
    "# %%\n"
    "# Distributed settings, as the model zoo's train.py reads them\n"
    "rank_size = int(os.getenv('RANK_SIZE', '1'))\n"
    "rank_id = int(os.getenv('DEVICE_ID', '0'))\n"
    "batch_size = 256 // rank_size\n"
    "# %%\n"
    "def train_input_fn():\n"
    "    files = sorted(tf.io.gfile.glob('data/train-*.tfrecord'))\n"
    "    ds = tf.data.Dataset.from_tensor_slices(files)\n"
    "    ds = ds.shard(rank_size, rank_id)\n"
    "    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=4)\n"
    "    return ds.map(parse).shuffle(1000).batch(batch_size, drop_remainder=True).repeat()\n"
    "# %%\n"
    "def model_fn(features, labels, mode):\n"
    "    logits = tf.layers.dense(features, 10)\n"
    "    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)\n"
    "    optimizer = NPUDistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9))\n"
    "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
    "    return NPUEstimatorSpec(mode, loss=loss, train_op=train_op)\n"
    "# %%\n"
    "estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig(save_checkpoints_steps=1000))\n"
    "estimator.train(train_input_fn, max_steps=1000)\n"
)


def test_a_model_zoo_notebook_that_shards_by_device_id_is_warned_and_fixed():
    notebook = notebook_from(MODEL_ZOO)
    analysis = analyze(notebook)
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    [finding] = [finding for finding in analysis.findings if finding.step == "shard"]
    assert (finding.code, finding.cell, finding.line) == ("device-id-shard", 2, 4)
    result = fix_notebook(notebook, analysis, {"device-id-shard"})
    fixed = joined(notebook, result.sources)
    assert fixed == MODEL_ZOO.replace("ds.shard(rank_size, rank_id)", "ds.shard(rank_size, int(os.getenv('RANK_ID', '0')))")
    again = analyze(notebook_from(fixed))
    assert again.steps["shard"] == "present"
    assert "device-id-shard" not in [finding.code for finding in again.findings]
