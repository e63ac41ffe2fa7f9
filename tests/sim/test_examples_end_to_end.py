"""The bundled single-card notebooks, fixed by the analyzer, pass the three run-time checks on real
TensorFlow and MPI; unfixed, they fail the checks they should."""

import io
import os

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.notebook import load
from npu_migrate_nb.rewrite import fix_notebook
from npu_migrate_nb.sim.cluster import Cluster
from npu_migrate_nb.sim.runner import Runner

pytestmark = pytest.mark.sim
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}


def example(name, fixed):
    notebook = load(os.path.join(EXAMPLES, name))
    if fixed:
        result = fix_notebook(notebook, analyze(notebook))
        assert not result.failed
        for index, source in result.sources.items():
            notebook.cells[index].source = source
    return notebook


def statuses(cluster, notebook):
    echo = io.StringIO()
    result = Runner(cluster, timeout=180, echo=echo, errors=echo).run_notebook(notebook)
    assert result.cells_ok, echo.getvalue()
    return {name: check.status for name, check in result.checks.items()}, result


@pytest.fixture(scope="module")
def tf2_cluster():
    with Cluster(n=2) as cluster:
        yield cluster


@pytest.mark.parametrize("name", ["keras_single_card.ipynb", "custom_loop_single_card.ipynb"])
def test_tf2_examples_fixed_by_the_analyzer_pass_and_unfixed_fail(tf2_cluster, name):
    fixed, _ = statuses(tf2_cluster, example(name, fixed=True))
    assert fixed == ALL_PASS
    unfixed, result = statuses(tf2_cluster, example(name, fixed=False))
    assert unfixed["shard"] == "fail" and unfixed["broadcast"] == "fail", result.checks
    assert "read the same samples" in result.checks["shard"].detail


def test_estimator_example_fixed_by_the_analyzer_passes_and_unfixed_fails():
    with Cluster(n=2, tf1=True) as cluster:
        fixed, _ = statuses(cluster, example("estimator_single_card.ipynb", fixed=True))
        assert fixed == ALL_PASS
        unfixed, result = statuses(cluster, example("estimator_single_card.ipynb", fixed=False))
        assert unfixed["shard"] == "fail" and unfixed["broadcast"] == "fail", result.checks


@pytest.fixture(scope="module")
def four_rank_cluster():
    with Cluster(n=4) as cluster:
        yield cluster


@pytest.mark.parametrize("name", ["keras_single_card.ipynb", "custom_loop_single_card.ipynb"])
def test_tf2_examples_fixed_by_the_analyzer_pass_at_four_ranks(four_rank_cluster, name):
    fixed, _ = statuses(four_rank_cluster, example(name, fixed=True))
    assert fixed == ALL_PASS


def test_estimator_example_fixed_by_the_analyzer_passes_at_four_ranks():
    with Cluster(n=4, tf1=True) as cluster:
        fixed, _ = statuses(cluster, example("estimator_single_card.ipynb", fixed=True))
    assert fixed == ALL_PASS
