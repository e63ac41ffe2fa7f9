"""The ranks' fork server (npu_migrate_nb.sim.zygote): TensorFlow imported once, ranks forked from
it, and mpiexec's view of each rank kept through a stand-in that ends as its rank ends."""

import os
import signal
import time

import psutil
import pytest

from npu_migrate_nb.sim.cluster import Cluster

pytestmark = pytest.mark.sim


def _descendants():
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as stream:
        return stream.read()


def test_ranks_are_forked_from_a_server_that_imported_tensorflow_once():
    with Cluster(n=2) as cluster:
        server = cluster._fork_server.pid
        assert "libtensorflow_framework" in _maps(server)  # the server paid the import
        for rank, pid in cluster.rank_pids.items():
            assert psutil.Process(pid).ppid() == server
            stand_in = psutil.Process(cluster.launcher_pids[rank])
            assert stand_in.pid != pid and stand_in.parent().name() == "hydra_pmi_proxy"
            assert "libtensorflow" not in _maps(stand_in.pid)  # the stand-in stays small
        cluster.view.execute("from mpi4py import MPI\nimport tensorflow as tf\n"
                             "total = MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.Get_rank() + 1)\n"
                             "value = float(tf.reduce_sum(tf.ones(3)))").get()
        assert cluster.view.pull("total", block=True) == [3, 3]
        assert cluster.view.pull("value", block=True) == [3.0, 3.0]


def test_a_rank_killed_by_a_signal_is_reported_by_mpiexec_as_that_rank():
    with Cluster(n=2) as cluster:
        stand_in = cluster.launcher_pids[1]
        os.kill(cluster.rank_pids[1], signal.SIGKILL)
        # the stand-in ends by the same signal, so hydra's report names it, and through it the rank
        assert cluster.reported_failure(wait=10.0) == (1, "killed (signal 9)")
        assert _gone([stand_in, *cluster.rank_pids.values()])


def test_ranks_end_with_their_server_and_with_their_stand_in():
    before = _descendants()
    cluster = Cluster(n=2).start()
    try:
        rank0, rank1 = cluster.rank_pids[0], cluster.rank_pids[1]
        os.kill(cluster.launcher_pids[0], signal.SIGKILL)  # as hydra kills a rank
        assert _gone([rank0])
        os.kill(cluster._fork_server.pid, signal.SIGKILL)
        assert _gone([rank1])  # no orphan: a rank dies with its server
    finally:
        cluster.stop()
    assert _gone(_descendants() - before) and _descendants() - before == set()


def test_the_switch_turns_the_fork_server_off(monkeypatch):
    monkeypatch.setenv("NPU_SIM_FORK", "0")
    with Cluster(n=2) as cluster:
        assert cluster._fork_server is None
        assert cluster.launcher_pids == cluster.rank_pids
        cluster.view.execute("value = 6 * 7").get()
        assert cluster.view.pull("value", block=True) == [42, 42]


def test_a_stand_in_without_a_server_is_the_engine_itself(tmp_path):
    """No server to reach (it never started, or died): the stand-in runs the engine in its place."""
    import subprocess
    import sys

    env = dict(os.environ, NPU_SIM_FORK_SERVER_PID="999999999")  # no such process
    done = subprocess.run([sys.executable, "-m", "npu_migrate_nb.sim.zygote", "rank", str(tmp_path / "fork.sock"),
                           "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Start an IPython engine for parallel computing." in done.stdout
