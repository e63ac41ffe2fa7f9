"""A simulation in Simplified Chinese: what a person reads (the check report, the ranks' own
messages) is Chinese, the data (JSON keys, check names, status codes) stays English.

Needs the compiled zh_CN catalog (``python tools/catalog.py compile``)."""

import io
import json
import os
import re

import pytest

from npu_migrate_nb import i18n
from npu_migrate_nb.notebook import load
from npu_migrate_nb.sim.cluster import Cluster
from npu_migrate_nb.sim.runner import Runner, render_text

pytestmark = pytest.mark.sim
DATA = os.path.join(os.path.dirname(__file__), "data")
ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def cluster():
    with Cluster(n=2) as cluster:  # started in English: the language reaches the ranks with each cell
        yield cluster


def test_a_two_rank_run_in_chinese_reports_in_chinese_and_keeps_its_data_english(cluster):
    echo = io.StringIO()
    with i18n.language("zh_CN"):
        runner = Runner(cluster, timeout=120, echo=echo, errors=echo)
        result = runner.run_notebook(load(os.path.join(DATA, "keras_fixed.ipynb")))
        text = render_text(result)
        # A message made inside the ranks (the simulated adapter's own explanation) is Chinese too.
        failed = runner.run_cell(99, "from hccl.manage.api import get_rank_size\nget_rank_size('other_group')\n")
    assert result.cells_ok, echo.getvalue()

    # The data stays English: check names, status codes, JSON keys.
    assert {name: check.status for name, check in result.checks.items()} == ALL_PASS
    data = json.loads(json.dumps(result.to_json()))
    assert data["checks"] == ALL_PASS
    assert set(data["check_details"]) == set(ALL_PASS)
    assert {"name", "status", "detail", "cell"} <= set(data["check_details"]["broadcast"])
    assert data["check_details"]["shard"]["status"] == "pass"
    assert {"ok", "ranks", "checks", "cells", "elapsed_s", "tf1", "one_card", "file_clashes"} <= set(data)
    assert all(cell["status"] in ("ok", "skipped") for cell in data["cells"])

    # What a person reads is Chinese.
    assert "检查：" in text and "通过" in text and "变量广播" in text, text
    assert "checks:" not in text and " pass " not in text, text
    for check in result.checks.values():
        assert CHINESE.search(check.detail), check.detail
    assert failed.status == "error"
    error = failed.ranks[0].error or ""
    assert "ValueError" in error and CHINESE.search(error.splitlines()[-1]), error

    # English again outside the block: the ranks follow the controller's language cell by cell.
    english = runner.run_cell(100, "from hccl.manage.api import get_rank_size\nget_rank_size('other_group')\n")
    assert english.status == "error"
    assert not CHINESE.search(english.ranks[0].error or ""), english.ranks[0].error
