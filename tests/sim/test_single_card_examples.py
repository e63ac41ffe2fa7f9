"""The single-card comparison on the bundled notebooks as the user has them (each shuffles after the
shard once fixed): it passes on all three, at 2 ranks and at 4 and 8 on the custom loop, and a wrong
reduction fails with the factor it is off by."""

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
# bundled example -> whether it runs in TF1 compatibility mode
EXAMPLES_TF1 = {"keras_single_card.ipynb": False, "custom_loop_single_card.ipynb": False,
                "estimator_single_card.ipynb": True}


def fixed_example(name):
    notebook = load(os.path.join(EXAMPLES, name))
    result = fix_notebook(notebook, analyze(notebook))
    assert not result.failed
    for index, source in result.sources.items():
        notebook.cells[index].source = source
    return notebook


def with_mean_reduction(notebook):
    """The fixed custom loop with the reduction a loss divided by the global batch must not have."""
    changed = [cell for cell in notebook.code_cells if 'reduction="sum"' in cell.source]
    assert len(changed) == 1
    changed[0].source = changed[0].source.replace('reduction="sum"', 'reduction="mean"')
    return notebook


@pytest.fixture(scope="module")
def cluster_for():
    started = {}

    def get(ranks, tf1=False):
        if (ranks, tf1) not in started:
            started[(ranks, tf1)] = Cluster(n=ranks, tf1=tf1).start()
        return started[(ranks, tf1)]

    yield get
    for cluster in started.values():
        cluster.stop()


def compare(cluster, notebook):
    echo = io.StringIO()
    result = Runner(cluster, timeout=300, echo=echo, errors=echo).run_notebook(notebook, compare_single_card=True)
    assert result.cells_ok, echo.getvalue()
    assert {check.status for check in result.checks.values()} == {"pass"}, result.checks
    return result.single_card


@pytest.mark.parametrize("name", sorted(EXAMPLES_TF1))
def test_each_fixed_example_reproduces_one_card_with_its_shuffle_held_fixed(cluster_for, name):
    check = compare(cluster_for(2, EXAMPLES_TF1[name]), fixed_example(name))
    assert check.status == "pass", check
    assert "held fixed in both runs: the shuffle after the shard" in check.detail


@pytest.mark.parametrize("ranks", [4, 8])
def test_the_custom_loop_reproduces_one_card_at_more_ranks(cluster_for, ranks):
    check = compare(cluster_for(ranks), fixed_example("custom_loop_single_card.ipynb"))
    assert check.status == "pass", check
    assert f"{ranks} ranks reached the weights one card reaches" in check.detail
    assert "first update 1.00x one card's" in check.detail


def test_a_mean_reduction_in_the_custom_loop_fails_with_one_over_n(cluster_for):
    check = compare(cluster_for(8), with_mean_reduction(fixed_example("custom_loop_single_card.ipynb")))
    assert check.status == "fail", check
    assert "the first update was 1/8 of one card's" in check.detail and 'reduction="sum"' in check.detail
