"""Faults stop every rank with a clear message, and leave no process behind."""

import io
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from npu_migrate_nb.sim.cluster import Cluster
from tests.conftest import interruptible
from npu_migrate_nb.sim.runner import Runner

pytestmark = pytest.mark.sim


def _descendants():
    return {p.pid for p in psutil.Process().children(recursive=True)}


def run_cells(cells, timeout=60):
    """Run ``cells`` on a fresh 2-rank cluster; return (outcomes, printed text, leftover pids)."""
    before = _descendants()
    echo = io.StringIO()
    cluster = Cluster(n=2)
    try:
        runner = Runner(cluster, timeout=timeout, echo=echo, errors=echo)
        outcomes = [runner.run_cell(index, source) for index, source in enumerate(cells)]
    finally:
        cluster.stop()
    return outcomes, echo.getvalue(), _descendants() - before


def test_an_exception_on_one_rank_names_it_and_stops_the_ranks_waiting_for_it():
    cells = [
        "import os\nimport npu_device as npu\nnpu.open().as_default()\nimport tensorflow as tf",
        "print('step one', flush=True)\nif os.environ['RANK_ID'] == '1':\n    raise ValueError('bad batch on rank 1')\n"
        "npu.distribute.all_reduce([tf.ones(3)])",
        "print('never runs')",
    ]
    outcomes, output, leftover = run_cells(cells)
    assert [o.status for o in outcomes] == ["ok", "error", "skipped"]
    assert "[rank 1] ValueError: bad batch on rank 1" in output
    assert "rank 1 failed in cell 1 (ValueError: bad batch on rank 1)" in outcomes[1].message
    assert "rank 0 waits in" in outcomes[1].message
    assert outcomes[1].ranks[1].error.strip().endswith("ValueError: bad batch on rank 1")
    assert leftover == set()


@pytest.mark.parametrize("how", ["os._exit(3)", "os.kill(os.getpid(), signal.SIGKILL)"])
def test_a_rank_that_dies_is_named_with_its_last_output(how):
    cells = [
        "import os, signal, time\nprint('rank', os.environ['RANK_ID'], 'ready', flush=True)\ntime.sleep(0.5)\n"
        f"if os.environ['RANK_ID'] == '1':\n    {how}\ntime.sleep(60)",
        "print('never runs')",
    ]
    outcomes, output, leftover = run_cells(cells)
    assert [o.status for o in outcomes] == ["error", "skipped"]
    message = outcomes[0].message
    assert message.startswith("rank 1 died during cell 0")
    assert "its last output: rank 1 ready" in message and "Stopped the other ranks (0)" in message
    assert "out of memory" not in message  # killed by a person, not by the kernel's OOM killer
    assert leftover == set()


@pytest.mark.parametrize("how,sigkill", [
    ("killed (signal 9)", True),  # the fork server's words
    ("killed by SIGKILL", True),  # psutil's, through _how_it_ended
    ("KILLED BY SIGNAL: 9 (Killed)", True),  # hydra's
    ("killed (signal 15)", False), ("exit code 9", False), ("killed by SIGTERM", False),
])
def test_sigkill_is_told_from_other_deaths_in_every_wording(how, sigkill):
    from npu_migrate_nb.sim.cluster import killed_by_sigkill

    assert killed_by_sigkill(how) is sigkill


def test_the_out_of_memory_kills_are_read_from_the_kernels_counter(tmp_path):
    from npu_migrate_nb.sim.cluster import system_oom_kills

    assert isinstance(system_oom_kills(), int)  # this machine's /proc/vmstat
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 10\noom_kill 7\nthp_fault_alloc 0\n")
    assert system_oom_kills(str(vmstat)) == 7
    assert system_oom_kills(str(tmp_path / "absent")) is None


DIES_IN_A_SHARED_SUM = {
    "eager": "lambda: npu.distribute.all_reduce([big])",
    "graph": "tf.function(lambda: npu.distribute.all_reduce([big]) and None)",
}


@pytest.mark.parametrize("mode", DIES_IN_A_SHARED_SUM)
def test_a_rank_that_dies_inside_a_shared_memory_sum_is_named_and_the_other_stopped(mode, monkeypatch):
    """Small slots make a 16 MB sum 64 chunks, two barriers each: rank 1 dies among them."""
    monkeypatch.setenv("NPU_SIM_SHARED_MIN_BYTES", "65536")
    monkeypatch.setenv("NPU_SIM_SHARED_SLOT_BYTES", str(256 * 1024))
    cells = [
        "import os, threading\nimport npu_device as npu\nnpu.open().as_default()\nimport tensorflow as tf\n"
        f"from npu_migrate_nb.sim import comm\nbig = tf.ones([1 << 22])\nreduce_big = {DIES_IN_A_SHARED_SUM[mode]}\n"
        "reduce_big()\n"
        "print('shared sums', comm.shared_sums + (comm._native.lib.npu_sim_shared_sums() if comm._native else 0))",
        "if os.environ['RANK_ID'] == '1':\n    threading.Timer(1.0, lambda: os._exit(3)).start()\n"
        "for _ in range(100000):\n    reduce_big()",
        "print('never runs')",
    ]
    outcomes, output, leftover = run_cells(cells)
    assert [o.status for o in outcomes] == ["ok", "error", "skipped"], output
    assert "[rank 0] shared sums 1" in output and "[rank 1] shared sums 1" in output
    assert outcomes[1].message.startswith("rank 1 died during cell 1"), outcomes[1].message
    assert "Stopped the other ranks (0)" in outcomes[1].message
    assert leftover == set()


SKIPPED_BY_RANK_1 = {
    "eager": "if os.environ['RANK_ID'] == '0':\n    npu.distribute.all_reduce([tf.ones(3)])\nprint('done')",
    # in a graph the all-reduce runs in the native kernel, on a TensorFlow thread
    "graph": "if os.environ['RANK_ID'] == '0':\n    tf.function(lambda: npu.distribute.all_reduce([tf.ones(3)]))()\n"
             "print('done')",
}


@pytest.mark.parametrize("mode", SKIPPED_BY_RANK_1)
def test_a_skipped_collective_times_out_naming_who_waits_where(mode):
    cells = [
        "import os\nimport npu_device as npu\nnpu.open().as_default()\nimport tensorflow as tf",
        SKIPPED_BY_RANK_1[mode],
    ]
    outcomes, output, leftover = run_cells(cells, timeout=5)
    assert [o.status for o in outcomes] == ["ok", "timeout"]
    message = outcomes[1].message
    assert message.startswith("cell 1 timed out after 5 s: rank 0 waits in all_reduce #"), message
    assert "at line 2 of the cell" in message
    assert "rank(s) 1 finished the cell" in message
    assert outcomes[1].waiting[0].startswith("all_reduce #") and 1 not in outcomes[1].waiting
    assert not outcomes[1].slow  # stuck, not slow
    assert leftover == set()


def test_a_cell_longer_than_the_timeout_on_every_rank_is_slow_not_stuck():
    cells = ["import time\nfor _ in range(600):\n    time.sleep(0.1)"]
    outcomes, output, leftover = run_cells(cells, timeout=3)
    assert [o.status for o in outcomes] == ["timeout"], output
    assert outcomes[0].waiting == {0: None, 1: None}
    assert outcomes[0].slow
    assert outcomes[0].to_json()["waiting"] == {"0": None, "1": None}
    assert leftover == set()


def _tagged_processes(tag):
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("NPU_SIM_TEST_TAG") == tag:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_ctrl_c_stops_every_rank_and_leaves_nothing(tmp_path):
    script = tmp_path / "long.py"
    script.write_text("import os, time\nprint('started', os.environ['RANK_ID'], flush=True)\ntime.sleep(120)\n")
    tag = uuid.uuid4().hex
    env = dict(os.environ, NPU_SIM_TEST_TAG=tag)
    command = [sys.executable, "-m", "npu_migrate_nb", "run", str(script), "-n", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=interruptible)
    seen = []
    for line in process.stdout:  # wait until both ranks are in the cell
        seen.append(line)
        if sum("started" in item for item in seen) == 2:
            break
    assert len(_tagged_processes(tag)) >= 5  # controller, mpiexec, hydra, two engines (and the CLI)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "interrupted during cell 0: stopped all 2 ranks" in stderr
    deadline = time.monotonic() + 10
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _tagged_processes(tag) == []
