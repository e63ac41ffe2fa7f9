"""The analysis does not depend on PYTHONHASHSEED.

The order of a set of strings changes with the hash seed; where the analyzer iterated over one and
took the first or the last call it met (which estimator a name is bound to, which training call is
the notebook's first), its verdicts changed from one run to the next. ``check`` runs here in fresh
interpreters under several seeds, on the bundled notebooks and on realistic ones, and must print
the same JSON every time.
"""

import json
import os
import random
import subprocess
import sys

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.facts import NotebookFacts

from . import test_realistic_notebooks as realistic
from . import test_seeds as seeds
from .conftest import EXAMPLES, ROOT, notebook_from, notebook_json

SEEDS = ["0", "1", "2", "3", "4", "5", "6", "7", str(random.randrange(8, 2**32 - 1))]

# A TF1 script migrated the vendor's way: NPUEstimator (which broadcasts by itself in TRAIN mode),
# its NPURunConfig, the dataset sharded by RANK_SIZE/RANK_ID, the optimizer wrapped; off the NPU,
# the same script trains a plain Estimator (one device: nothing to broadcast).
NPU_ESTIMATOR_SCRIPT = """\
import os
import tensorflow as tf
from npu_bridge.npu_init import *

rank_size = int(os.getenv('RANK_SIZE', '1'))
rank_id = int(os.getenv('RANK_ID', '0'))
on_npu = os.getenv('ASCEND_DEVICE_ID') is not None
# %%
def input_fn():
    dataset = tf.data.TFRecordDataset(files)
    dataset = dataset.shard(rank_size, rank_id)
    dataset = dataset.map(parse).shuffle(1024).repeat().batch(256 // rank_size, drop_remainder=True)
    return dataset
# %%
def model_fn(features, labels, mode):
    logits = tf.layers.dense(tf.layers.flatten(features), 10)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.TRAIN:
        optimizer = tf.train.MomentumOptimizer(learning_rate=0.01, momentum=0.9)
        optimizer = npu_distributed_optimizer_wrapper(optimizer)
        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss)
# %%
if on_npu:
    estimator = NPUEstimator(
        model_fn=model_fn,
        config=NPURunConfig(model_dir='/cache/model_%d' % rank_id, save_checkpoints_steps=1000),
    )
else:
    estimator = tf.estimator.Estimator(model_fn=model_fn)
estimator.train(input_fn, max_steps=1000)
"""

# The same, NPUEstimator only, trained through train_and_evaluate.
NPU_ESTIMATOR_TRAIN_AND_EVALUATE = """\
import os
import tensorflow as tf
from npu_bridge.npu_init import *
# %%
def train_input_fn():
    dataset = tf.data.TFRecordDataset(files).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))
    return dataset.map(parse).shuffle(1024).repeat().batch(32)
# %%
def model_fn(features, labels, mode):
    loss = tf.reduce_mean(tf.layers.dense(features, 1))
    optimizer = NPUDistributedOptimizer(tf.train.AdamOptimizer(1e-3))
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)
# %%
estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig(model_dir='/cache/model'))
train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=1000)
eval_spec = tf.estimator.EvalSpec(input_fn=eval_input_fn)
tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
"""

# One name bound to an NPUEstimator, then to a plain Estimator, which is the one trained.
ESTIMATOR_REPLACED = """\
import tensorflow as tf
from npu_bridge.npu_init import *
# %%
estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig())
estimator = tf.estimator.Estimator(model_fn=model_fn)
estimator.train(input_fn, max_steps=1000)
"""

WRITTEN = {
    "estimator_replaced": ESTIMATOR_REPLACED,
    "npu_estimator_script": NPU_ESTIMATOR_SCRIPT,
    "npu_estimator_train_and_evaluate": NPU_ESTIMATOR_TRAIN_AND_EVALUATE,
    "subclassed_keras": realistic.SUBCLASSED_KERAS,
    "helpers_across_cells": realistic.HELPERS_ACROSS_CELLS,
    "numpy_input_estimator": realistic.NUMPY_INPUT_ESTIMATOR,
    "multi_input_fit": realistic.MULTI_INPUT_FIT,
    "ctl_tutorial": realistic.CTL_TUTORIAL,
    "estimator_seed": seeds.ESTIMATOR_SINGLE_CARD,
    "estimator_method_one": seeds.METHOD_ONE,
}


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    directory = tmp_path_factory.mktemp("determinism")
    paths = sorted(str(path) for path in EXAMPLES.glob("*.ipynb"))
    paths += sorted(str(path) for path in (ROOT / "tests" / "sim" / "data").glob("*.ipynb"))
    for name, text in WRITTEN.items():
        path = directory / f"{name}.ipynb"
        cells = [("code", part) for part in text.split("# %%\n")]
        path.write_text(json.dumps(notebook_json(cells), indent=1) + "\n")
        paths.append(str(path))
    return paths


def check_json(paths, seed):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    result = subprocess.run(
        [sys.executable, "-m", "npu_migrate_nb", "check", "--format", "json", *paths],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    return {report["path"]: report for report in reports}


def test_check_prints_the_same_json_under_every_hash_seed(notebooks):
    runs = {seed: check_json(notebooks, seed) for seed in SEEDS}
    reference_seed = SEEDS[0]
    reference = runs[reference_seed]
    assert sorted(reference) == sorted(notebooks)
    differences = [
        f"{os.path.basename(path)}: PYTHONHASHSEED={reference_seed} and {seed} differ "
        f"(steps {reference[path]['steps']} vs {report['steps']})"
        for seed, reports in runs.items()
        for path, report in reports.items()
        if report != reference[path]
    ]
    assert not differences, "\n".join(differences)


def test_the_npu_estimator_script_has_all_three_steps():
    analysis = analyze(notebook_from(NPU_ESTIMATOR_SCRIPT))
    assert analysis.framework == "estimator" and analysis.adapter == "npu_bridge"
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert [finding.code for finding in analysis.problems] == []


def test_npu_estimator_through_train_and_evaluate_broadcasts_by_itself():
    analysis = analyze(notebook_from(NPU_ESTIMATOR_TRAIN_AND_EVALUATE))
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert "missing-broadcast" not in [finding.code for finding in analysis.findings]


def test_a_replaced_npu_estimator_does_not_broadcast():
    analysis = analyze(notebook_from(ESTIMATOR_REPLACED))
    assert analysis.steps["broadcast"] == "missing"
    assert [f.line for f in analysis.findings if f.code == "missing-broadcast"] == [3]


def test_calls_of_several_methods_come_in_source_order_whatever_the_order_asked():
    notebook = notebook_from(
        "import tensorflow as tf\n"
        "est = tf.estimator.Estimator(model_fn)\nest = NPUEstimator(model_fn)\nest.train(f)\nmodel.fit(x)\n"
        "# %%\nmodel.fit(y)\nest.train(g)\n"
    )
    facts = NotebookFacts(notebook)
    expected = [(0, 4, "train"), (0, 5, "fit"), (1, 1, "fit"), (1, 2, "train")]
    for methods in (("train", "fit"), ("fit", "train"), ("fit", "train", "fit")):
        assert [(cell, site.node.lineno, site.method) for cell, _, site in facts.calls(*methods)] == expected
    qualified = {"tensorflow.estimator.Estimator", "npu_bridge.NPUEstimator"}
    for order in (sorted(qualified), sorted(qualified, reverse=True)):
        assert [site.node.lineno for _, _, site in facts.calls_to(*order)] == [2, 3]
