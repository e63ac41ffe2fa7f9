"""The bundled notebooks: check names exactly what is missing, fix makes them pass check."""

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.notebook import load
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import EXAMPLES

EXPECTED = {
    "estimator_single_card.ipynb": (
        "estimator", "npu_bridge", {"missing-broadcast", "missing-allreduce", "missing-shard", "double-step-division"}
    ),
    "keras_single_card.ipynb": ("keras", "npu_device", {"missing-broadcast", "missing-allreduce", "missing-shard"}),
    "custom_loop_single_card.ipynb": (
        "custom-loop", "npu_device", {"missing-broadcast", "missing-allreduce", "missing-shard"}
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_names_exactly_the_missing_steps(name):
    framework, adapter, codes = EXPECTED[name]
    analysis = analyze(load(str(EXAMPLES / name)))
    assert (analysis.framework, analysis.adapter) == (framework, adapter)
    assert {finding.code for finding in analysis.findings} == codes
    assert analysis.errors == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixed_example_passes_check(name):
    notebook = load(str(EXAMPLES / name))
    result = fix_notebook(notebook, analyze(notebook))
    assert not result.failed
    for index, source in result.sources.items():
        notebook.cells[index].source = source
    again = analyze(notebook)
    assert again.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert again.problems == []
