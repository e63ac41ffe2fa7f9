"""What every fix keeps (issue 34), checked on everything the repository holds: every rule's examples
and every corpus notebook (the generated notebooks: tests/test_rewriter_properties.py). After ``fix``:
no name the notebook does not bind where it runs, no batch of 0, nothing but variables broadcast, no
gradient aggregated twice. At two rank counts: two cards and one server of eight."""

import pytest

from npu_migrate_nb.invariants import check_notebook_fix, new_undefined_names, undefined_names
from npu_migrate_nb.notebook import load
from npu_migrate_nb.rules import ALL_RULES

from .conftest import notebook_from
from .test_corpus import PATHS, bench

RANKS = (2, 8)
EXAMPLES = [(rule.code, f"valid-{index}", text) for rule in ALL_RULES for index, text in enumerate(rule.VALID)] + [
    (rule.code, f"invalid-{index}", example.before) for rule in ALL_RULES for index, example in enumerate(rule.INVALID)]


@pytest.mark.parametrize("code,which,text", EXAMPLES, ids=[f"{code}-{which}" for code, which, _ in EXAMPLES])
def test_every_rule_example_keeps_the_invariants_when_fixed(code, which, text):
    for ranks in RANKS:
        report = check_notebook_fix(notebook_from(text), ranks=ranks)
        assert report.ok, (ranks, report.violations)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: str(path.relative_to(bench.CORPUS)))
def test_every_corpus_notebook_keeps_the_invariants_when_fixed_for_two_ranks(path):
    """At eight ranks (the default) tests/test_corpus.py checks them with the corpus benchmark's own record."""
    report = check_notebook_fix(load(str(path)), ranks=2)
    assert report.ok, report.violations


# The checks themselves catch what they are for (each would pass vacuously otherwise).

def test_a_name_read_before_its_import_is_undefined_and_one_read_after_is_not():
    assert undefined_names(["tf.constant(1)\n", "import tensorflow as tf\n"]) == {"tf": 0}
    assert undefined_names(["import tensorflow as tf\n", "tf.constant(1)\n", "%matplotlib inline\ndisplay(1)\n"]) == {}


def test_a_fix_that_writes_a_name_nobody_imports_is_caught():
    violations = new_undefined_names(["import keras\nm.compile('sgd')\n"],
                                     ["import keras\nm.compile(tf.keras.optimizers.SGD())\n"])
    assert [(v.invariant, v.detail) for v in violations] == [("undefined-name", "tf")]


def test_a_name_a_called_function_reads_before_anything_binds_it_is_the_notebooks_own():
    # The cell fails on `model` in train_step() as written; a fix that reads it before the call is no worse.
    defined_then_called = "def train_step():\n    return model(1)\nfor _ in range(2):\n    train_step()\n"
    assert undefined_names([defined_then_called, "model = 1\n"]) == {}
    assert undefined_names([defined_then_called, "model = 1\n"], through_calls=True) == {"model": 0}
    assert new_undefined_names([defined_then_called, "model = 1\n"],
                               ["print(model.weights)\n" + defined_then_called, "model = 1\n"]) == []


def test_a_name_read_only_by_a_function_called_after_it_is_bound_is_still_caught():
    called_after = "def train_step():\n    return model(1)\n"
    assert undefined_names([called_after, "model = 1\ntrain_step()\n"], through_calls=True) == {}
    violations = new_undefined_names([called_after, "model = 1\ntrain_step()\n"],
                                     ["print(model.weights)\n" + called_after, "model = 1\ntrain_step()\n"])
    assert [(v.invariant, v.detail, v.cell) for v in violations] == [("undefined-name", "model", 0)]
    # A function's own parameters, locals and imports are not read from outside.
    local = "def step(x):\n    import numpy as np\n    y = np.ones(1)\n    return x + y\nstep(1)\n"
    assert undefined_names([local], through_calls=True) == {}


def test_a_batch_of_one_divided_by_the_rank_size_is_caught():
    from npu_migrate_nb.invariants import zero_batches

    before = ["model.fit(x, y, batch_size=1)\n"]
    after = ["import os\nrank_size = int(os.getenv('RANK_SIZE', '1'))\nmodel.fit(x, y, batch_size=1 // rank_size)\n"]
    assert [v.invariant for v in zero_batches(before, after, ranks=2)] == ["zero-batch"]
    assert zero_batches(before, [after[0].replace("1 //", "64 //")], ranks=2) == []


def test_a_constant_broadcast_and_a_double_aggregation_are_caught():
    from npu_migrate_nb.analysis import analyze
    from npu_migrate_nb.invariants import broadcasts_of_tensors, double_aggregations

    before = notebook_from("import tensorflow as tf\nimport npu_device as npu\nx = tf.constant(3.0)\n")
    after = notebook_from("import tensorflow as tf\nimport npu_device as npu\nx = tf.constant(3.0)\n"
                          "npu.distribute.broadcast(x)\n")
    assert [v.invariant for v in broadcasts_of_tensors(analyze(before), analyze(after))] == ["broadcast-not-variable"]
    twice = notebook_from(
        "import npu_device as npu\n"
        "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1))\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
        "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n")
    once = notebook_from("import npu_device as npu\n")
    assert [v.invariant for v in double_aggregations(analyze(once), analyze(twice))] == ["double-allreduce"]
