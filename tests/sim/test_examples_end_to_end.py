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


# bundled example -> whether it runs in TF1 compatibility mode
EXAMPLES_TF1 = {"keras_single_card.ipynb": False, "custom_loop_single_card.ipynb": False,
                "estimator_single_card.ipynb": True}


@pytest.fixture(scope="module")
def cluster_for():
    """One cluster per (ranks, TF1 mode) for the module, started on first use."""
    started = {}

    def get(ranks, tf1):
        if (ranks, tf1) not in started:
            started[(ranks, tf1)] = Cluster(n=ranks, tf1=tf1).start()
        return started[(ranks, tf1)]

    yield get
    for cluster in started.values():
        cluster.stop()


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", sorted(EXAMPLES_TF1))
def test_examples_fixed_by_the_analyzer_pass_all_three_checks(cluster_for, name, ranks):
    fixed, _ = statuses(cluster_for(ranks, EXAMPLES_TF1[name]), example(name, fixed=True))
    assert fixed == ALL_PASS


@pytest.mark.parametrize("name", sorted(EXAMPLES_TF1))
def test_examples_before_the_fix_fail_shard_and_broadcast(cluster_for, name):
    unfixed, result = statuses(cluster_for(2, EXAMPLES_TF1[name]), example(name, fixed=False))
    assert unfixed["shard"] == "fail" and unfixed["broadcast"] == "fail", result.checks
    # Each example shuffles with seed=1 before batching: with no global seed (a real rank sets none),
    # every rank draws the same order, so the ranks read identical first batches.
    assert "ranks read the same first batch" in result.checks["shard"].detail
