"""End to end on real TensorFlow, MPI and ipyparallel: the hand-fixed notebooks pass the three
checks, the single-card ones fail them (Keras fit, custom loop, TF1 Estimator)."""

import io
import json
import os
import subprocess
import sys

import pytest

from npu_migrate_nb.notebook import load
from npu_migrate_nb.sim.runner import Runner

pytestmark = pytest.mark.sim
DATA = os.path.join(os.path.dirname(__file__), "data")
ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}


def run(cluster, name):
    echo = io.StringIO()
    result = Runner(cluster, timeout=120, echo=echo, errors=echo).run_notebook(load(os.path.join(DATA, name)))
    assert result.cells_ok, echo.getvalue()
    return result, echo.getvalue()


def statuses(result):
    return {name: check.status for name, check in result.checks.items()}


@pytest.mark.parametrize("name", ["keras_fixed.ipynb", "loop_fixed.ipynb"])
def test_fixed_tf2_notebooks_pass_every_check(tf2_cluster, name):
    result, output = run(tf2_cluster, name)
    assert statuses(result) == ALL_PASS, result.checks
    assert "[rank 0] loss" in output and "[rank 1] loss" in output


@pytest.mark.parametrize("name", ["keras_single.ipynb", "loop_single.ipynb"])
def test_single_card_tf2_notebooks_fail_shard_and_broadcast(tf2_cluster, name):
    result, _ = run(tf2_cluster, name)
    checks = statuses(result)
    assert checks["shard"] == "fail" and checks["broadcast"] == "fail", result.checks
    assert checks["allreduce"] != "pass"
    assert "npu.distribute.broadcast" in result.checks["broadcast"].detail
    assert result.checks["shard"].cell == 3


def test_fixed_estimator_passes_every_check(tf1_cluster):
    result, _ = run(tf1_cluster, "estimator_fixed.ipynb")
    assert statuses(result) == ALL_PASS, result.checks
    assert "estimator" in result.checks["broadcast"].detail


def test_single_card_estimator_fails_shard_and_broadcast(tf1_cluster):
    result, _ = run(tf1_cluster, "estimator_single.ipynb")
    checks = statuses(result)
    assert checks["shard"] == "fail" and checks["broadcast"] == "fail", result.checks
    assert "NPUBroadcastGlobalVariablesHook" in result.checks["broadcast"].detail


def _cli(*args):
    command = [sys.executable, "-m", "npu_migrate_nb", "run", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_cli_json_at_four_ranks_passes_the_fixed_custom_loop():
    completed = _cli(os.path.join(DATA, "loop_fixed.ipynb"), "-n", "4", "--format", "json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["ok"] is True and report["ranks"] == 4
    assert report["checks"] == ALL_PASS
    assert report["single_card_math"] == "skipped"
    assert [cell["status"] for cell in report["cells"]] == ["ok"] * 4
    assert [r["rank"] for r in report["cells"][3]["ranks"]] == [0, 1, 2, 3]
    assert all("loss" in r["stdout"] and r["error"] is None for r in report["cells"][3]["ranks"])
    assert report["elapsed_s"] > 0
    assert "[rank 3]" in completed.stderr  # live output goes to stderr when stdout is JSON


def test_cli_text_exits_1_when_a_check_fails_and_skips_markdown():
    completed = _cli(os.path.join(DATA, "keras_single.ipynb"), "-n", "2")
    assert completed.returncode == 1, completed.stderr
    assert "cell 0: skipped" in completed.stdout
    assert "shard      fail" in completed.stdout
    assert "single-card math: skipped (--compare-single-card" in completed.stdout


def test_cli_exits_2_for_unusable_input(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    completed = _cli(str(broken))
    assert completed.returncode == 2
    assert "broken.ipynb" in completed.stderr and "invalid JSON" in completed.stderr


def test_cells_after_a_failed_cell_are_not_run(tf2_cluster):
    from npu_migrate_nb.notebook import Cell, Notebook

    notebook = Notebook("<errors>", [
        Cell(0, "code", "x = 1\nprint('first', flush=True)"),
        Cell(1, "code", "import not_a_module_anywhere"),
        Cell(2, "markdown", "# notes"),
        Cell(3, "code", "print(x + undefined_name)"),
    ])
    echo = io.StringIO()
    result = Runner(tf2_cluster, timeout=60, echo=echo, errors=echo).run_notebook(notebook)
    assert [cell.status for cell in result.cells] == ["ok", "error", "skipped", "skipped"]
    assert result.cells[3].message == "not run: cell 1 failed"
    assert "ModuleNotFoundError" in echo.getvalue() and "undefined_name" not in echo.getvalue()
    assert not result.cells_ok
