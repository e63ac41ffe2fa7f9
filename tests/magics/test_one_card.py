"""After a cell fails on the ranks, the magics rerun the cells up to it on one card in the background
and say whether it fails there too: in a real kernel, the prompt back at once, the verdict in the
widget's line as it comes, in plain text at the next magic and in ``%npu_cluster status``, and a
rerun stopped by ``%npu_cluster stop`` or the kernel's shutdown leaves no process."""

import io
import time

import psutil
import pytest

from npu_migrate_nb.sim.one_card import OneCard
from npu_migrate_nb.sim.session import ClusterSession

from .kernel import Kernel
from .test_cluster_magics import _descendants, _descendants_alive, kernel, run  # noqa: F401 (kernel: a fixture)

pytestmark = pytest.mark.sim
RANK_ONE_FAILS = "%%npu_distribute --run\nif os.environ['RANK_ID'] == '1':\n    raise ValueError('only rank 1 fails')\n"
EVERY_RANK_FAILS = "%%npu_distribute --run\nraise RuntimeError('broken everywhere')\n"
WAIT_FOR_VERDICT = "import npu_migrate_nb\nprint(npu_migrate_nb.one_card().result(240).status)"


def verdict_in_status(kernel, words, timeout=240.0):
    """``%npu_cluster status`` until its one-card line says ``words`` (the rerun is in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        text = run(kernel, "%npu_cluster status").text()
        if words in text or time.monotonic() > deadline:
            return text
        assert "one card: rerunning the cells up to cell" in text, text
        time.sleep(1.0)


def test_a_cell_only_rank_1_fails_runs_on_one_card_and_status_says_so(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "%npu_cluster start -n 2")
    run(kernel, "%%npu_distribute --run\nimport os")
    failed = run(kernel, RANK_ONE_FAILS, status="error").text()
    assert "ValueError: only rank 1 fails" in failed, failed
    assert "one card: rerunning the cells up to cell 4 at rank size 1 in the background" in failed, failed
    # The prompt is back while it reruns: this kernel and the ranks still serve cells.
    assert run(kernel, "print(6 * 7)").stream("stdout").strip() == "42"  # not moved to stderr meanwhile
    status = verdict_in_status(kernel, "runs on one card")
    assert "one card: runs on one card: the distributed run breaks it (cells up to 4 ran at rank size 1)" in status, status
    assert "simulated cluster: 2 ranks" in status  # the ranks of the session were kept
    assert "one card: runs on one card" in run(kernel, "%npu_cluster checks").text()
    later = run(kernel, "%%npu_distribute --run\nprint('after', os.environ['RANK_ID'])").text()
    assert "one card" not in later, later  # status has shown it: not said again in a later cell


def test_a_cell_that_fails_everywhere_fails_on_one_card_too_said_once_by_the_next_magic(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "%npu_cluster start -n 2")
    failed = run(kernel, EVERY_RANK_FAILS, status="error").text()
    assert "RuntimeError: broken everywhere" in failed and "one card: rerunning" in failed, failed
    assert run(kernel, WAIT_FOR_VERDICT, timeout=300).stream().strip() == "fails"
    nothing_said = run(kernel, "print('a cell of this kernel')").text()
    assert "one card" not in nothing_said  # never printed into an unrelated cell
    said = run(kernel, "%%npu_distribute --run\nprint('next')").text()
    assert ("cell 3 failed on the ranks; one card: fails on one card too: not a distribution problem "
            "(cell 3: RuntimeError: broken everywhere)") in said, said
    assert "one card" not in run(kernel, "%%npu_distribute --run\nprint('next again')").text()


def test_a_collective_only_rank_0_calls_times_out_and_the_widget_line_says_it_runs_on_one_card():
    kernel = Kernel()  # widgets on
    try:
        run(kernel, "%load_ext npu_migrate_nb")
        run(kernel, "%npu_cluster start -n 2")
        run(kernel, "%%npu_distribute --run\nimport os\nimport tensorflow as tf\nimport npu_device as npu\n"
                    "npu.open().as_default()")
        stuck = run(kernel, "%%npu_distribute --run --timeout 4\nif os.environ['RANK_ID'] == '0':\n"
                            "    npu.distribute.all_reduce([tf.ones(3)])\n", status="error")
        assert "timed out after 4 s" in stuck.text(), stuck.text()
        lines = one_card_lines(kernel)
        assert lines and "one card: rerunning the cells up to cell 4" in lines[0], lines
        deadline = time.monotonic() + 240
        while not any("runs on one card" in line for line in lines) and time.monotonic() < deadline:
            kernel.settle(1.0)  # the update comes from the rerun's thread, with no cell running
            lines = one_card_lines(kernel)
        assert 'data-status="runs"' in lines[-1] and "runs on one card: the distributed run breaks it" in lines[-1], lines
        status = run(kernel, "%npu_cluster status").text()
        assert "the ranks were stopped at cell 4 (timeout)" in status and "runs on one card" in status, status
        assert not _descendants_alive(kernel.pid)  # the fault stopped the ranks, the rerun stopped its rank
    finally:
        pid = kernel.pid
        kernel.shutdown()
        assert not _descendants_alive(pid)


def one_card_lines(kernel):
    """The values the kernel gave the RunView's one-card line, in order."""
    opened = {m["content"]["comm_id"] for m in kernel.comm_opens
              if m["content"].get("target_name") == "jupyter.widget"}
    values = []
    for message in kernel.comm_msgs:
        content = message["content"]
        value = content["data"].get("state", {}).get("value") if content["data"].get("method") == "update" else None
        if content["comm_id"] in opened and isinstance(value, str) and "npu-one-card" in value:
            values.append(value)
    return values


SLEEPS_ON_ONE_CARD = ("%%npu_distribute --run\nimport os, time\nif os.environ['RANK_ID'] == '1':\n"
                      "    raise ValueError('only rank 1 fails')\nif os.environ['RANK_SIZE'] == '1':\n"
                      "    open({marker!r}, 'w').close()\n    time.sleep(120)\n")


def wait_for(path, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} in {timeout:.0f} s"
        time.sleep(0.2)


def test_stop_and_the_kernels_shutdown_end_a_rerun_on_one_card_and_leave_no_process(tmp_path):
    kernel = Kernel(extra_env={"NPU_MIGRATE_NB_WIDGETS": "0"})
    try:
        run(kernel, "%load_ext npu_migrate_nb")
        run(kernel, "%npu_cluster start -n 2")
        ranks = set(_descendants(kernel.pid))
        first = tmp_path / "first"
        run(kernel, SLEEPS_ON_ONE_CARD.format(marker=str(first)), status="error")
        wait_for(first)  # the one-card rank sleeps in the failed cell
        both = set(_descendants(kernel.pid))
        assert len(both - ranks) >= 3, (both, ranks)  # its controller, mpiexec and rank
        stopped = run(kernel, "%npu_cluster stop").text()
        assert "stopped the one-card rerun of the cells up to cell 3" in stopped, stopped
        _, alive = psutil.wait_procs(list(both), timeout=15)
        assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
        assert "one card: not known: the one-card rerun was stopped" in run(kernel, "%npu_cluster status").text()

        run(kernel, "%npu_cluster start -n 2")
        second = tmp_path / "second"
        run(kernel, SLEEPS_ON_ONE_CARD.format(marker=str(second)), status="error")
        wait_for(second)
        everything = set(_descendants(kernel.pid))
        kernel.client.stop_channels()
        kernel.manager.shutdown_kernel(now=False)  # a shutdown request: the kernel's atexit runs
        _, alive = psutil.wait_procs(list(everything), timeout=30)
        assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
    finally:
        if kernel.manager.is_alive():
            kernel.shutdown()


def test_the_session_reruns_the_cells_in_the_order_they_ran_leaving_out_those_that_failed(tmp_path):
    """What the magics hand the rerun: a kernel's cells keep their execution counts, which replay can
    run out of order ([5] then [4]); a cell that failed earlier is not rerun."""
    session = ClusterSession(echo=io.StringIO(), errors=io.StringIO())
    session.start(2, directory=str(tmp_path))
    try:
        assert session.run_cell(5, "x = 0").status == "ok"
        assert session.run_cell(3, "raise RuntimeError('an earlier failure')", one_card=False).status == "error"
        assert session.run_cell(4, "y = 1 / x").status == "error"
        verdict = session.one_card.result(240)
    finally:
        session.stop()
    assert verdict == OneCard(4, "fails", "fails on one card too: not a distribution problem "
                                          "(cell 4: ZeroDivisionError: division by zero)")
    _, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=10)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
