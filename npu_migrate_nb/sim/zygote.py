"""A fork server for the ranks: TensorFlow is imported once, and every rank is forked from it.

Importing TensorFlow costs each process about 2.6 s of CPU. Eight ranks on two cores paid it eight
times over, one after another, so a full 8-card server took 2.4-3.5x the 2-rank time to be ready;
forked ranks also share those pages (copy on write) instead of holding eight copies.

How a rank starts (``Cluster`` sets this up; ``NPU_SIM_FORK=0`` goes back to plain processes):

* the server, ``python -m npu_migrate_nb.sim.zygote serve SOCKET``, imports TensorFlow, ipyparallel's
  engine and the simulator (not ``mpi4py.MPI``: MPI starts in each rank, after the fork), then
  answers on a Unix socket. It stays single-threaded in Python and runs no TensorFlow op, so a fork
  is safe;
* ``mpiexec`` starts a small stand-in per rank, ``python -m npu_migrate_nb.sim.zygote rank SOCKET
  ARGS``, which hands the server its environment, arguments, working directory and file
  descriptors (standard streams and hydra's ``PMI_FD``, passed over the socket);
* the server forks; the child takes those streams and that environment and runs
  :func:`npu_migrate_nb.sim.engine.main`, which starts MPI (through the PMI descriptor hydra gave the
  stand-in) and becomes the ipyparallel engine;
* the stand-in waits, forwards the signals it gets to its rank, and ends the way the rank ended
  (same exit code, or killed by the same signal), so mpiexec sees what it would have seen.

Faults: a rank dies with the server (``PR_SET_PDEATHSIG``); a stand-in killed by hydra closes its
socket, and the server kills its rank. A stand-in that cannot reach a server in time runs the
engine itself (``exec``), as without the fork server.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import struct
import sys
import time

SWITCH = "NPU_SIM_FORK"
LAUNCHER_PID_VARIABLE = "NPU_SIM_LAUNCHER_PID"  # the stand-in's pid, which hydra's reports name
SERVER_PID_VARIABLE = "NPU_SIM_FORK_SERVER_PID"  # set by the Cluster for the stand-ins
_CONNECT_TIMEOUT_S = 120.0
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0" and hasattr(socket, "send_fds") and hasattr(os, "pidfd_open")


# ----------------------------------------------------------------------------- messages


def _send_message(connection: socket.socket, message: dict, fds=()) -> None:
    payload = json.dumps(message).encode()
    header = struct.pack("!I", len(payload))
    if fds:
        socket.send_fds(connection, [header + payload], list(fds))
    else:
        connection.sendall(header + payload)


def _receive_message(connection: socket.socket, max_fds: int = 0):
    """(message, fds), or (None, []) when the other side closed the connection."""
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        if max_fds and not fds:
            chunk, received, _, _ = socket.recv_fds(connection, 1 << 16, max_fds)
            fds += received
        else:
            chunk = connection.recv(1 << 16)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        data += chunk
    return json.loads(data[4:]), fds


# ----------------------------------------------------------------------------- the server


def preload() -> None:
    """What every rank would import first, imported once here."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import numpy  # noqa: F401
    import ipyparallel.engine.app  # noqa: F401

    from . import comm, engine  # noqa: F401
    try:
        import tensorflow  # noqa: F401
    except ImportError:  # plain numpy/MPI notebooks: nothing heavy to share
        return
    from . import probes  # noqa: F401


_server_fds: set = set()  # the server's own descriptors: a forked rank closes them
_exits = None  # the open exits file


def exits_path(path: str) -> str:
    """The server's record of how its ranks ended, one JSON line each, in the order they did."""
    return f"{path}.exits"


def serve(path: str) -> None:
    """Fork a rank for each stand-in that connects; report how each rank ended."""
    global _exits
    preload()
    _exits = open(exits_path(path), "a", encoding="utf-8")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = f"{path}.{os.getpid()}"
    listener.bind(partial)
    listener.listen(64)
    os.rename(partial, path)  # stand-ins see the socket only once it accepts
    import selectors

    selector = selectors.DefaultSelector()
    _server_fds.update({listener.fileno(), selector.fileno(), _exits.fileno()})
    selector.register(listener, selectors.EVENT_READ, ("listener", None))
    # Nothing to save, and a normal exit tears TensorFlow down (most of a second, at every cluster stop).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        for key, _ in selector.select():
            kind, rank = key.data
            if kind == "listener":
                _accept(listener, selector)
            elif kind == "stand-in":  # the stand-in went away (hydra killed it): its rank goes too
                _kill(rank["pid"])
                selector.unregister(key.fileobj)
            elif kind == "exit":
                _report_exit(rank, selector)


def _accept(listener: socket.socket, selector) -> None:
    import selectors

    connection, _ = listener.accept()
    _server_fds.add(connection.fileno())
    request, fds = _receive_message(connection, max_fds=8)
    if request is None:
        _server_fds.discard(connection.fileno())
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        _become_rank(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    rank = {"pid": pid, "connection": connection, "pidfd": os.pidfd_open(pid)}
    _server_fds.add(rank["pidfd"])
    _send_message(connection, {"pid": pid})
    selector.register(connection, selectors.EVENT_READ, ("stand-in", rank))
    selector.register(rank["pidfd"], selectors.EVENT_READ, ("exit", rank))


def _report_exit(rank: dict, selector) -> None:
    _, status = os.waitpid(rank["pid"], 0)
    selector.unregister(rank["pidfd"])
    _server_fds.discard(rank["pidfd"])
    os.close(rank["pidfd"])
    how = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
           else {"code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1})
    # written before the stand-in learns it: the first line is the rank that went first, which
    # hydra's report (naming the first stand-in it saw end) does not always get right
    _exits.write(json.dumps({"pid": rank["pid"], **how}) + "\n")
    _exits.flush()
    connection = rank["connection"]
    try:
        _send_message(connection, how)
    except OSError:
        pass
    try:
        selector.unregister(connection)
    except (KeyError, ValueError):
        pass
    _server_fds.discard(connection.fileno())
    connection.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _become_rank(request: dict, fds: list) -> None:
    """In the forked child: take the stand-in's streams, environment and arguments; run the engine."""
    code = 1
    try:
        _die_with_parent()
        # the received descriptors first out of the way of the numbers they must take
        received = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 256) for fd in fds]
        for fd in set(fds) | _server_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for fd, target in zip(received, request["fds"]):  # the stand-in's numbers: 0, 1, 2, PMI_FD
            os.dup2(fd, target, inheritable=target < 3)
            os.close(fd)
        for number in (signal.SIGTERM, signal.SIGCHLD, *_FORWARDED_SIGNALS):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = request["argv"]  # sys.stdout & co. write to descriptors 0-2, now the stand-in's
        from .engine import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # what a normal exit runs: MPI's finalize among them
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _die_with_parent() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the server died before the line above
        os._exit(1)


# ----------------------------------------------------------------------------- the stand-in


def stand_in(path: str, engine_args: list) -> None:
    """Run by mpiexec as one rank: have the server fork the rank, then end as it ends."""
    connection = _connect(path)
    if connection is None:  # no fork server: be the rank ourselves
        os.execv(sys.executable, [sys.executable, "-m", "npu_migrate_nb.sim.engine", *engine_args])
    fds = [0, 1, 2]
    if os.environ.get("PMI_FD", "").isdigit():
        fds.append(int(os.environ["PMI_FD"]))
    env = dict(os.environ, **{LAUNCHER_PID_VARIABLE: str(os.getpid())})
    engine_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine.py")
    _send_message(connection, {"env": env, "argv": [engine_file, *engine_args], "cwd": os.getcwd(), "fds": fds},
                  fds)
    reply, _ = _receive_message(connection)
    if reply is None:
        sys.exit("npu_migrate_nb: the rank fork server closed the connection")
    pid = reply["pid"]
    for number in _FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _forward(pid, received))
    while True:
        try:
            how, _ = _receive_message(connection)
            break
        except InterruptedError:
            continue
    if how is None:
        sys.exit("npu_migrate_nb: the rank fork server ended before the rank did")
    if "signal" in how:
        for number in _FORWARDED_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        if how["signal"] not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be handled anyway
            signal.signal(how["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), how["signal"])
        time.sleep(1.0)
    os._exit(how.get("code", 1))


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:
        pass


def _connect(path: str):
    """A connection to the server once it listens, or None when it is gone or never came."""
    from .watchdog import alive

    server = os.environ.get(SERVER_PID_VARIABLE, "")
    deadline = time.monotonic() + _CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(path)
            return connection
        except (FileNotFoundError, ConnectionRefusedError):
            connection.close()
            if not server.isdigit() or not alive(int(server)):
                return None
            time.sleep(0.02)
    return None


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "serve":
        serve(argv[1])
    elif len(argv) >= 2 and argv[0] == "rank":
        stand_in(argv[1], argv[2:])
    else:
        sys.exit("usage: python -m npu_migrate_nb.sim.zygote serve SOCKET | rank SOCKET [ENGINE ARGS...]")


if __name__ == "__main__":
    main()
