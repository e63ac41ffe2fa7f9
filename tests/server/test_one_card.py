"""After a cell fails on the ranks, a simulation job reruns the cells up to it on one card: its status
says so while it runs and then the verdict (``one_card``, also in the result); DELETE meanwhile
stops the one-card rank too."""

import time

import pytest

from .conftest import descendants, reply, still_running
from .test_simulate import FINAL, job_processes, wait_until

pytestmark = pytest.mark.sim


def notebook(*sources):
    return {
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}
                  for source in sources],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


async def test_a_cell_only_rank_1_fails_runs_on_one_card_and_the_status_says_so(post, job_request):
    before = descendants()
    body = {"notebook": notebook("import os", "if os.environ['RANK_ID'] == '1':\n    raise ValueError('only rank 1')",
                                 "print('never run')"),
            "ranks": 2, "path": "rank_one.ipynb", "timeout": 120}
    job_id = reply(await post("simulate", body))["id"]
    status = await wait_until(job_request, job_id, lambda s: s["state"] in FINAL, "end")
    assert status["state"] == "done", status
    expected = {"cell": 1, "status": "runs",
                "detail": "runs on one card: the distributed run breaks it (cells up to 1 ran at rank size 1)",
                "after_cut": False}
    assert status["one_card"] == expected, status
    result = status["result"]
    assert result["one_card"] == expected and result["ok"] is False
    assert [cell["status"] for cell in result["cells"]] == ["ok", "error", "skipped"]
    assert still_running(job_processes(before)) == []


async def test_delete_during_the_one_card_rerun_stops_its_rank(post, job_request, tmp_path):
    before = descendants()
    marker = tmp_path / "one-card-sleeps"
    cell = ("import os, time\nif os.environ['RANK_ID'] == '1':\n    raise ValueError('only rank 1')\n"
            f"if os.environ['RANK_SIZE'] == '1':\n    open({str(marker)!r}, 'w').close()\n    time.sleep(120)\n")
    body = {"notebook": notebook(cell), "ranks": 2, "path": "sleeps_on_one_card.ipynb", "timeout": 120}
    job_id = reply(await post("simulate", body))["id"]
    status = await wait_until(job_request, job_id, lambda s: marker.exists(), "the one-card rank sleeping")
    assert status["one_card"]["status"] == "running" and status["one_card"]["cell"] == 0, status
    assert "rerunning the cells up to cell 0 on one card" in status["one_card"]["detail"]
    running = job_processes(before)
    assert len(running) >= 3, running  # the job, and the one-card rank's controller, mpiexec, rank
    asked = time.monotonic()
    code, status = await job_request(job_id, "DELETE")
    assert code == 200 and status["state"] == "stopped", status
    assert time.monotonic() - asked < 60, "the stop waited for the one-card rank's sleep"
    assert status["result"] is None
    assert status["one_card"] == {"cell": 0, "status": "unknown",
                                  "detail": "not known: the simulation ended before the one-card rerun did",
                                  "after_cut": False}
    assert still_running(running) == []
    assert job_processes(before) == set()
