"""Simulated runs through the server: a job process per run, its progress and result over GET, one
job per notebook, DELETE and the server's own stop ending every rank with no process left."""

import asyncio
import os
import signal
import time

import psutil
import pytest

from ..jupyter_app import JupyterApp
from .conftest import descendants, example, reply, still_running

pytestmark = pytest.mark.sim

FINAL = ("done", "failed", "stopped")
SLEEPER = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["A cell that sleeps"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import os, time\n", "print('cwd', os.getcwd())"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["print('sleeping', flush=True)\n", "time.sleep(60)\n", "print('woke up')"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": ["print('after')"]},
    ],
    "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    "nbformat": 4, "nbformat_minor": 5,
}
SLEEPING_CELL = 2


async def wait_until(job_request, job_id, predicate, what, timeout=240.0):
    deadline = time.monotonic() + timeout
    while True:
        code, status = await job_request(job_id)
        assert code == 200, status
        if predicate(status):
            return status
        assert status["state"] not in FINAL, f"ended before {what}: {status}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s: {status}"
        await asyncio.sleep(0.3)


def sleeping_on_every_rank(status) -> bool:
    return (status["current_cell"] == SLEEPING_CELL
            and all("sleeping" in status["output"].get(str(rank), "") for rank in range(status["ranks"])))


def job_directories(processes) -> list:
    """The temporary directories the server wrote the notebooks to, from the job processes' command lines."""
    found = []
    for process in processes:
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        if "npu_migrate_nb.sim.job" in command:
            found.append(os.path.dirname(command[command.index("npu_migrate_nb.sim.job") + 1]))
    return found


def job_processes(before: set) -> set:
    """The job process and the cluster under it: what appeared under this test process."""
    return descendants() - before


async def test_simulate_the_fixed_keras_example_on_two_ranks_passes_the_three_checks(post, job_request):
    before = descendants()
    fixed = reply(await post("fix", {"notebook": example("keras_single_card.ipynb")}))["notebook"]
    path = "keras_distributed.ipynb"
    response = await post("simulate", {"notebook": fixed, "ranks": 2, "path": path, "timeout": 180})
    assert response.code == 202, response.body
    job_id = reply(response)["id"]
    assert response.headers["Location"].endswith(f"/npu-migrate/simulate/{job_id}")

    second = await post("simulate", {"notebook": fixed, "ranks": 2, "path": path})
    assert second.code == 409
    assert reply(second)["id"] == job_id and path in reply(second)["message"]

    job_directory = None
    while job_directory is None:
        status = await wait_until(job_request, job_id, lambda s: True, "a status")
        job_directory = next(iter(job_directories(job_processes(before))), None)
        assert job_directory is not None or status["state"] not in FINAL, status
    assert os.path.isfile(os.path.join(job_directory, "notebook.ipynb"))
    status = await wait_until(job_request, job_id, lambda s: s["state"] in FINAL, "end")
    assert status["state"] == "done", status
    result = status["result"]
    assert result["ok"] is True, result
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
    assert status["ranks"] == 2 and status["cells_total"] == 5 and status["cells_done"] == 5
    assert status["current_cell"] is None and status["error"] is None
    for rank in ("0", "1"):  # proof mode, the panel's default: the fit of 2 epochs stops in the first
        assert "Epoch 1/2" in status["output"][rank] and "Epoch 2/2" not in status["output"][rank]
        assert "[rank" not in status["output"][rank]
    assert [cell["status"] for cell in result["cells"]] == ["skipped"] + ["ok"] * 5
    assert result["proof"]["steps"] == 1
    [fit] = result["proof"]["shortened"]
    assert fit["taken"] == 3 and fit["written"] > 3 and not fit["ran_as_written"], fit
    assert f"3 of {fit['written']} steps" in fit["text"]
    for rank in ("0", "1"):
        final = status["progress"][rank]
        assert final["kind"] == "keras" and final["epoch"] == 1 and final["running"] is False, final
    assert still_running(job_processes(before)) == []
    assert job_directory is not None and not os.path.exists(job_directory)


async def test_delete_stops_a_running_simulation_and_every_rank(post, job_request, jp_root_dir):
    before = descendants()
    (jp_root_dir / "project").mkdir()
    response = await post("simulate", {"notebook": SLEEPER, "ranks": 2, "path": "project/sleeper.ipynb"})
    assert response.code == 202
    job_id = reply(response)["id"]
    code, status = await job_request(job_id)
    assert code == 200 and status["state"] in ("starting", "running") and status["cells_total"] == 3, status
    assert status["output"] == {"0": "", "1": ""} or status["state"] == "running", status
    status = await wait_until(job_request, job_id, sleeping_on_every_rank, "sleep on every rank")
    for rank in ("0", "1"):  # in the notebook's directory, as its kernel would be
        assert f"cwd {(jp_root_dir / 'project').resolve()}\n" in status["output"][rank], status["output"]
    running = job_processes(before)
    assert len(running) >= 4, running  # the job, the controller, mpiexec, its proxy and the ranks
    directories = job_directories(running)
    assert len(directories) == 1 and os.path.isdir(directories[0]), directories

    asked = time.monotonic()
    code, status = await job_request(job_id, "DELETE")
    took = time.monotonic() - asked
    assert code == 200 and status["state"] == "stopped", status
    assert took < 40, f"the stop waited for the 60 s cell ({took:.0f} s)"
    assert status["result"] is None and "woke up" not in "".join(status["output"].values())
    assert any("interrupted during cell 2" in message for message in status["messages"]), status["messages"]
    assert still_running(running) == []
    assert job_processes(before) == set()
    assert not os.path.exists(directories[0])
    code, again = await job_request(job_id)
    assert code == 200 and again["state"] == "stopped"


async def test_delete_while_the_ranks_start_leaves_no_process_and_frees_the_notebook(post, job_request):
    before = descendants()
    body = {"notebook": SLEEPER, "ranks": 2, "path": "starting.ipynb"}
    job_id = reply(await post("simulate", body))["id"]
    deadline = time.monotonic() + 60
    while len(job_processes(before)) < 2:  # the job has started launching the cluster
        assert time.monotonic() < deadline, "the job started no process"
        await asyncio.sleep(0.1)
    seen = job_processes(before)
    code, status = await job_request(job_id, "DELETE")
    assert code == 200 and status["state"] == "stopped", status
    assert still_running(seen | job_processes(before)) == []

    response = await post("simulate", body)  # the notebook is free again
    assert response.code == 202, response.body
    code, status = await job_request(reply(response)["id"], "DELETE")  # at once, whatever it is doing
    assert code == 200 and status["state"] == "stopped", status
    assert still_running(job_processes(before)) == []


async def test_a_simulation_nobody_follows_any_more_is_stopped(post, job_request, jp_serverapp):
    from npu_migrate_nb.server import JOBS_SETTING

    jobs = jp_serverapp.web_app.settings[JOBS_SETTING]
    jobs.abandoned_after = 3.0  # the panel polls every second; a closed tab stops polling
    before = descendants()
    job_id = reply(await post("simulate", {"notebook": SLEEPER, "ranks": 2, "path": "abandoned.ipynb"}))["id"]
    job = jobs.jobs[job_id]  # watched directly: a GET would count as following it
    deadline = time.monotonic() + 120
    while job.running:
        assert time.monotonic() < deadline, "an abandoned simulation went on"
        await asyncio.sleep(0.5)
    code, status = await job_request(job_id)
    assert code == 200 and status["state"] == "stopped", status
    assert any("nobody followed this simulation" in message for message in status["messages"]), status
    assert job_processes(before) == set()


# ------------------------------------------------------------------------------------ a real server


@pytest.fixture
def real_server(tmp_path):
    server = JupyterApp(tmp_path, "server", enable_extension=True)
    yield server
    server.stop()


def start_sleeper(server) -> set:
    """A sleeping job on the server, once every rank sleeps; the processes under the server then."""
    code, started = server.request_json("POST", "npu-migrate/simulate", {"notebook": SLEEPER, "ranks": 2,
                                                                     "path": "sleeper.ipynb"})
    assert code == 202
    deadline = time.monotonic() + 240
    while True:
        _, status = server.request_json("GET", f"npu-migrate/simulate/{started['id']}")
        if sleeping_on_every_rank(status):
            break
        assert status["state"] not in FINAL and time.monotonic() < deadline, status
        time.sleep(0.3)
    processes = set(psutil.Process(server.process.pid).children(recursive=True))
    assert len(processes) >= 4, processes
    return processes


def test_stopping_the_server_stops_its_simulations(real_server):
    processes = start_sleeper(real_server)
    directories = job_directories(processes)
    assert len(directories) == 1 and os.path.isdir(directories[0]), directories
    real_server.process.send_signal(signal.SIGTERM)  # what a service manager or `jupyter server stop` does
    assert real_server.process.wait(timeout=60) is not None
    assert still_running(processes) == [], real_server.log_text()
    assert "stopping 1 simulation(s) with the server" in real_server.log_text()
    assert not os.path.exists(directories[0])  # the notebook's copy


def test_a_killed_server_leaves_no_simulation_behind(real_server):
    processes = start_sleeper(real_server)
    directories = job_directories(processes)
    assert len(directories) == 1 and os.path.isdir(directories[0]), directories
    real_server.process.kill()  # no cleanup of its own: each job notices its parent is gone
    real_server.process.wait()
    _, alive = psutil.wait_procs(list(processes), timeout=30)
    assert [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert not os.path.exists(directories[0])  # the notebook's copy
