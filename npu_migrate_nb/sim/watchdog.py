"""Stops a simulated cluster whose owner died without stopping it.

``Cluster`` starts one watchdog per cluster, in a session of its own (so that a kill of the owner's
process group does not take it too): ``python -m npu_migrate_nb.sim.watchdog OWNER_PID PID_FILE
STATE_DIR``. It waits for the owner (the kernel, the ``run`` command, the server's job) to exit. If
the owner stopped the cluster first, it was told to go (SIGTERM) and did nothing; otherwise the owner
was killed outright (SIGKILL, an OOM kill, ``os._exit``), and the watchdog kills every process listed
in ``PID_FILE`` (controller, ``mpiexec``, ranks) with their children, removes MPICH's shared memory
and the state directory. No rank outlives its notebook.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time


def wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # old kernel, or already gone
        while alive(pid):
            time.sleep(0.5)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll()
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    """Is ``pid`` running (a zombie, dead but not yet reaped by its parent, is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def recorded_pids(path: str):
    try:
        with open(path, encoding="utf-8") as stream:
            return [int(line) for line in stream.read().split() if line.strip().isdigit()]
    except OSError:
        return []


def stop_everything(pids, state_dir: str) -> None:
    import psutil

    processes = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
        except psutil.Error:
            continue
        processes[pid] = process
        try:
            for child in process.children(recursive=True):
                processes[child.pid] = child
        except psutil.Error:
            pass
    shared_memory = set()
    for process in processes.values():
        try:
            shared_memory.update(m.path for m in process.memory_maps() if m.path.startswith("/dev/shm/mpich"))
        except psutil.Error:
            continue
    for process in processes.values():
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(processes.values()), timeout=5.0)
    for path in shared_memory:
        try:
            os.unlink(path)
        except OSError:
            pass
    shutil.rmtree(state_dir, ignore_errors=True)


def main(argv=None) -> int:
    owner, pid_file, state_dir = (argv or sys.argv[1:])[:3]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the owner stopped the cluster itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the owner's terminal is the owner's business
    wait_for_exit(int(owner))
    stop_everything(recorded_pids(pid_file), state_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
