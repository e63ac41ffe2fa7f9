"""A local simulated Ascend cluster: one ipyparallel controller and N MPI engines, engine id = rank.

Lifecycle: ``Cluster(engines="mpi", n=N)`` does nothing until first use (``start()``, ``view``,
``client``); it is then reused until ``stop()`` (or the end of a ``with`` block, or interpreter
exit), which leaves no process behind: controller, ``mpiexec``, ``hydra_pmi_proxy`` and engines.

Each engine runs :mod:`npu_migrate_nb.sim.engine`, which gives the rank its Ascend environment
(``RANK_SIZE``, ``RANK_ID`` = MPI rank, ``ASCEND_DEVICE_ID``, ``DEVICE_ID``, ``JOB_ID``,
``RANK_TABLE_FILE`` -> a generated rank table) and imports TensorFlow before registering.

``Cluster(profile="name")`` uses an existing ipyparallel profile instead (MPI across hosts, Slurm,
SSH...): a running cluster of that profile is connected to, otherwise one is started with the
profile's own launchers; the ranks are then set up by a first execute, before any user code.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import psutil

from .. import i18n
from ..i18n import _
from .engine import SETTINGS_VARIABLE
from .rank_env import devices_per_server, machine_cores, write_rank_table

DEFAULT_STARTUP_TIMEOUT = 180.0
_live_clusters: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


class ClusterError(RuntimeError):
    """The cluster could not start (the CLI exits with code 2)."""


def find_mpiexec() -> str:
    """The ``mpiexec`` of the ``mpich`` wheel, next to this Python; a PATH shim costs a bash and a fork."""
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside_python, os.X_OK):
        return beside_python
    found = shutil.which("mpiexec")
    if not found:
        raise ClusterError(_("mpiexec not found: install the 'mpich' wheel (pip install 'npu-migrate-nb[sim]')"))
    return found


def mpi_wait_settings(ranks: int) -> Dict[str, str]:
    """MPICH settings for the ranks' environment: how a rank waits inside an MPI call.

    MPICH polls while it waits. The simulator's collectives already nap while ranks wait for each
    other (comm._wait_politely); inside the data call, with more ranks than cores (an 8-device
    server on 2 cores) a polling rank would keep the core that the rank it waits for needs:
    "heavy yield" makes each poll give the core away (nanosleep). Not below that: it adds tens of
    microseconds to every small message. A value already in the environment is kept.
    """
    wanted = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"} if ranks > machine_cores() else {}
    return {name: os.environ.get(name, value) for name, value in wanted.items()}


class Cluster:
    def __init__(
        self,
        engines: str = "mpi",
        n: int = 2,
        profile: Optional[str] = None,
        tf1: bool = False,
        seed: int = 1000,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        setup: Optional[Callable[["Cluster"], None]] = None,
    ):
        """``setup(cluster)``: called once the ranks are up, before any cell, on every start (a
        program that runs notebooks in a prepared environment, such as the corpus benchmark's
        offline datasets; the single-card runs started from this cluster's settings get it too)."""
        if engines != "mpi" and profile is None:
            raise ValueError("only MPI engines are launched locally; pass profile= for other launchers")
        if n < 1:
            raise ValueError("a cluster needs at least one rank")
        self.n = n
        self.profile = profile
        self.tf1 = tf1
        self.seed = seed
        self.startup_timeout = startup_timeout
        self.setup = setup
        self.folder_before = None  # (the notebook's folder, the names it held) when a run entered it
        self.job_id = str(10000 + os.getpid() % 50000)
        self.state_dir: Optional[str] = None
        self.rank_table_path: Optional[str] = None
        self.devices_per_server = devices_per_server(n)  # NPU_SIM_DEVICES_PER_SERVER, read once
        self.rank_pids: Dict[int, int] = {}
        self._ipp_cluster = None
        self._client = None
        self._view = None
        self._launched_pids: List[int] = []  # controller and mpiexec, our direct children
        self._fork_server = None  # the zygote's process (a Popen), when ranks are forked from it
        self.launcher_pids: Dict[int, int] = {}  # rank -> the process mpiexec started (hydra names it)
        self._owns_processes = False
        self._death_watch: Optional[_DeathWatch] = None
        self._oom_kills_at_start: Optional[int] = None  # the kernel's count when the ranks started
        self._shared_memory: List[str] = []
        self._watchdog = None  # stops the cluster if this process dies without stopping it

    def with_ranks(self, n: int) -> "Cluster":
        """A new local cluster of ``n`` ranks with this one's settings (mode, seeds, setup)."""
        return Cluster(n=n, tf1=self.tf1, seed=self.seed, startup_timeout=self.startup_timeout, setup=self.setup)

    # ------------------------------------------------------------------------------- lifecycle

    @property
    def started(self) -> bool:
        return self._client is not None

    def start(self) -> "Cluster":
        if self.started:
            return self
        self.state_dir = tempfile.mkdtemp(prefix="npu-sim-")
        self.rank_table_path = write_rank_table(
            os.path.join(self.state_dir, "rank_table.json"), self.n, self.devices_per_server
        )
        _live_clusters.add(self)
        try:
            self._start_watchdog()
            # ipyparallel reports progress ("Waiting for connection file...") on stdout, which
            # belongs to the run's output (JSON with --format json): send it to stderr. Not from a
            # background thread (a one-card rerun in a kernel): sys.stdout is the whole process's,
            # and the cell running meanwhile would print to stderr.
            foreground = threading.current_thread() is threading.main_thread()
            with contextlib.redirect_stdout(sys.stderr) if foreground else contextlib.nullcontext():
                if self.profile:
                    self._start_from_profile()
                else:
                    self._start_local_mpi()
                self._learn_ranks()
            if self.setup is not None:
                self.setup(self)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process of the cluster; safe to call twice, and after a crash."""
        client, self._client, self._view = self._client, None, None
        self._stop_watchdog()
        if self._death_watch is not None:
            self._death_watch.close()
            self._death_watch = None
        if client is not None:
            try:
                client.close(linger=0)
            except Exception:
                pass
        if self._owns_processes:
            self._kill_processes()
        self._ipp_cluster = None
        self.rank_pids = {}
        self._oom_kills_at_start = None
        self.launcher_pids = {}
        self._launched_pids = []
        if self._fork_server is not None:
            try:
                self._fork_server.wait(timeout=1.0)  # killed with the rest: reap it
            except Exception:
                pass
            self._fork_server = None
        if self.state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def client(self):
        self.start()
        return self._client

    @property
    def view(self):
        """A non-blocking DirectView on all ranks, in rank order."""
        self.start()
        return self._view

    @property
    def ranks(self) -> List[int]:
        return list(range(self.n))

    def apply(self, function, *args) -> list:
        """``function(*args)`` on every rank; its results in rank order."""
        return apply_and_wait(self.view, function, *args)

    # ----------------------------------------------------------------------------- watchdog

    def _start_watchdog(self) -> None:
        import subprocess

        self._pid_file = os.path.join(self.state_dir, "pids")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "npu_migrate_nb.sim.watchdog", str(os.getpid()), self._pid_file, self.state_dir],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a kill of our process group must not take it along
        )

    def _note_pids(self, pids) -> None:
        """Tell the watchdog what to stop should this process die first."""
        with open(self._pid_file, "a", encoding="utf-8") as stream:
            stream.write("".join(f"{pid}\n" for pid in pids))

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None:
            return
        watchdog.terminate()
        try:
            watchdog.wait(timeout=2.0)
        except Exception:
            watchdog.kill()

    # ----------------------------------------------------------------------------- starting

    def engine_settings(self) -> dict:
        return {
            "job_id": self.job_id,
            "rank_table": self.rank_table_path,
            "devices_per_server": self.devices_per_server,
            "state_dir": self.state_dir,
            "tf1": self.tf1,
            "seed": self.seed,
            "language": i18n.current(),  # the ranks' own messages are said in the controller's language
        }

    def _start_local_mpi(self) -> None:
        import ipyparallel as ipp
        from traitlets.config import Config

        environment = {SETTINGS_VARIABLE: json.dumps(self.engine_settings()), **mpi_wait_settings(self.n)}
        config = Config()
        config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
        config.MPIEngineSetLauncher.engine_cmd = self._engine_command(environment)
        # The nanny is one more Python process per rank; we watch the ranks ourselves.
        config.MPIEngineSetLauncher.engine_args = [
            "--IPEngine.enable_nanny=False",
            f"--IPEngine.wait_for_url_file={self.startup_timeout}",
        ]
        cluster = self._ipp_cluster = ipp.Cluster(
            engines="mpi",
            n=self.n,
            profile_dir=os.path.join(self.state_dir, "profile"),
            cluster_id="npu-sim",
            controller_ip="127.0.0.1",
            # Threads instead of eight scheduler processes: much faster to start on two cores. An
            # engine counts as registered after its first heartbeat: beat every second, not every 3 s.
            controller_args=["--usethreads", "--HeartMonitor.period=1000"],
            # Launch the engines at once: they import TensorFlow while the controller starts.
            send_engines_connection_env=False,
            shutdown_atexit=False,
            log_level=40,
            config=config,
        )
        self._owns_processes = True
        cluster.start_controller_sync()
        self._launched_pids.append(cluster.controller.process.pid)
        self._note_pids(self._launched_pids)
        cluster.start_engines_sync(self.n, environment=environment)
        for engine_set in cluster.engines.values():
            self._launched_pids.append(engine_set.process.pid)
        self._note_pids(self._launched_pids[1:])
        self._client = self._connect(cluster)
        self._wait_for_engines()

    def _fork_socket(self) -> str:
        return os.path.join(self.state_dir, "fork.sock")

    def _engine_command(self, environment: dict) -> List[str]:
        """What mpiexec runs per rank: a stand-in that has the fork server fork the rank (TensorFlow
        imported once for all ranks, see :mod:`zygote`), or the engine itself."""
        from . import zygote

        path = self._fork_socket()
        if not zygote.enabled() or len(path) > 100:  # a Unix socket's path is short
            return [sys.executable, "-m", "npu_migrate_nb.sim.engine"]
        with open(os.path.join(self.state_dir, "fork-server.log"), "wb") as log:
            server = subprocess.Popen([sys.executable, "-m", "npu_migrate_nb.sim.zygote", "serve", path],
                                      env={**os.environ, **environment}, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=subprocess.STDOUT)
        self._fork_server = server
        self._owns_processes = True  # stopped with the rest, even if the start fails after this
        self._note_pids([server.pid])
        environment[zygote.SERVER_PID_VARIABLE] = str(server.pid)
        return [sys.executable, "-m", "npu_migrate_nb.sim.zygote", "rank", path]

    def _connect(self, cluster):
        deadline = time.monotonic() + self.startup_timeout
        while True:
            self._fail_if_launcher_died()
            try:
                return cluster.connect_client_sync()
            except (TimeoutError, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise ClusterError(_("the ipyparallel controller did not start in {seconds} s").format(
                        seconds=f"{self.startup_timeout:.0f}"))
                time.sleep(0.05)

    def _wait_for_engines(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while len(self._client.ids) < self.n:
            self._fail_if_launcher_died()
            if time.monotonic() > deadline:
                raise ClusterError(
                    _("only {registered} of {ranks} ranks registered in {seconds} s").format(
                        registered=len(self._client.ids), ranks=self.n, seconds=f"{self.startup_timeout:.0f}")
                    + self._launcher_output_tail()
                )
            time.sleep(0.05)

    def _fail_if_launcher_died(self) -> None:
        for pid in self._launched_pids:
            if not _is_alive(pid):
                raise ClusterError(_("the cluster stopped while starting") + self._launcher_output_tail())

    def _launcher_output_tail(self, lines: int = 15) -> str:
        cluster = self._ipp_cluster
        if cluster is None:
            return ""
        launchers = [cluster.controller] + list(cluster.engines.values())
        text = []
        for launcher in launchers:
            try:
                with open(launcher.output_file, encoding="utf-8", errors="replace") as stream:
                    text.extend(stream.read().splitlines()[-lines:])
            except (OSError, AttributeError, TypeError):
                continue
        return (":\n" + "\n".join(text)) if text else ""

    def _start_from_profile(self) -> None:
        import ipyparallel as ipp

        try:
            self._client = ipp.Client(profile=self.profile, timeout=10)
        except (OSError, TimeoutError):
            cluster = self._ipp_cluster = ipp.Cluster(profile=self.profile, n=self.n, shutdown_atexit=False)
            self._owns_processes = True
            self._client = cluster.start_and_connect_sync(n=self.n)
            for launcher in [cluster.controller] + list(cluster.engines.values()):
                pid = getattr(launcher, "pid", None) or getattr(getattr(launcher, "process", None), "pid", None)
                if pid:
                    self._launched_pids.append(pid)
            self._note_pids(self._launched_pids)
        self._wait_for_engines()
        ids = sorted(self._client.ids)[: self.n]
        view = self._view_of(ids)
        apply_and_wait(view, _prepare_remote_rank, self.n, self.engine_settings())

    def _view_of(self, ids: List[int]):
        """A direct view of ``ids``. The client's notification thread adds an engine to ``ids``
        a moment before it records the engine's identity, which the view needs: retry briefly."""
        deadline = time.monotonic() + 5.0
        while True:
            try:
                return self._client[ids]
            except KeyError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _learn_ranks(self) -> None:
        ids = sorted(self._client.ids)[: self.n]
        self._view = self._view_of(ids)
        self._view.block = False
        identities = apply_and_wait(self._view, _rank_identity)
        for engine_id, (rank, pid, launcher_pid) in zip(ids, identities):
            if self.profile is None and rank != engine_id:
                raise ClusterError(_("engine {engine} has RANK_ID {rank}: engine ids must equal MPI ranks").format(
                    engine=engine_id, rank=rank))
            self.rank_pids[rank] = pid
            self.launcher_pids[rank] = launcher_pid
        if self._owns_processes:
            self._note_pids(self.rank_pids.values())
        self._death_watch = _DeathWatch(self.rank_pids)
        self._oom_kills_at_start = system_oom_kills()
        # Noted now: after a rank dies, hydra kills the rest and their mappings can no longer be read.
        self._shared_memory = _shared_memory_files(psutil.Process(pid) for pid in self.rank_pids.values())

    # ----------------------------------------------------------------------------- watching

    def dead_ranks(self) -> Dict[int, str]:
        """Ranks whose process is gone, in the order they went, with how they ended when known."""
        dead = {}
        if self._death_watch is not None:
            for rank in self._death_watch.order():
                dead[rank] = _("process ended")
        for rank, pid in self.rank_pids.items():
            ended = _how_it_ended(pid)
            if ended is not None:
                dead[rank] = ended
        return dead

    def ran_out_of_memory(self) -> bool:
        """Has the kernel killed a process for want of memory since the ranks started? Each rank holds
        its own copy of what the notebook loads, so N ranks need N times one card's memory here."""
        start, now = self._oom_kills_at_start, system_oom_kills()
        return start is not None and now is not None and now > start

    def first_death_is_certain(self) -> bool:
        """Did the death watch see one rank exit before any other (not several at once)?"""
        return self._death_watch is None or self._death_watch.first_is_certain

    def reported_failure(self, wait: float = 1.0) -> Optional[Tuple[int, str]]:
        """The rank MPI saw fail first and how, from hydra's "BAD TERMINATION" report.

        Hydra kills the other ranks at once, so by the time we look several may be gone; only its
        report says which one went first. Waits up to ``wait`` s for the report to be written.
        With ranks forked by the fork server, its record says it instead: it sees each rank end
        before the rank's stand-in (what hydra watches) does.
        """
        deadline = time.monotonic() + wait
        while True:
            if self._fork_server is not None:
                first = self._first_fork_server_exit()
                if first is not None:
                    return first
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.05)
                continue
            report = _parse_bad_termination(self._engine_output())
            if report is not None:
                pid, how = report
                for rank, rank_pid in self.rank_pids.items():
                    if pid in (rank_pid, self.launcher_pids.get(rank)):
                        return rank, how
                return None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def _first_fork_server_exit(self) -> Optional[Tuple[int, str]]:
        """The first rank the fork server saw end, and how (in hydra's words), from its record."""
        from .zygote import exits_path

        try:
            with open(exits_path(self._fork_socket()), encoding="utf-8") as stream:
                line = stream.readline()
        except OSError:
            return None
        if not line.endswith("\n"):
            return None
        first = json.loads(line)
        rank = next((r for r, pid in self.rank_pids.items() if pid == first["pid"]), None)
        if rank is None:
            return None
        if "signal" in first:
            return rank, _("killed (signal {signal})").format(signal=first["signal"])
        return rank, _("exit code {code}").format(code=first["code"])

    def _engine_output(self) -> str:
        cluster = self._ipp_cluster
        if cluster is None:
            return ""
        text = []
        for launcher in cluster.engines.values():
            try:
                with open(launcher.output_file, encoding="utf-8", errors="replace") as stream:
                    text.append(stream.read())
            except (OSError, TypeError):
                continue
        return "\n".join(text)

    def collective_of(self, rank: int) -> Optional[str]:
        """The collective ``rank`` is inside, as reported by the simulated communicator, or None."""
        if not self.state_dir:
            return None
        try:
            with open(os.path.join(self.state_dir, f"rank-{rank}.collective"), encoding="utf-8") as stream:
                return json.load(stream).get("collective")
        except (OSError, ValueError):
            return None

    def stacks_of(self, ranks: List[int], wait: float = 0.3) -> Dict[int, str]:
        """The Python stacks of busy ranks (faulthandler: answers even inside a blocked MPI call)."""
        if not self.state_dir:
            return {}
        offsets = {}
        for rank in ranks:
            path = os.path.join(self.state_dir, f"rank-{rank}.stack")
            try:
                offsets[rank] = os.path.getsize(path)
                os.kill(self.rank_pids[rank], signal.SIGUSR1)
            except (OSError, KeyError):
                continue
        if offsets:
            time.sleep(wait)
        stacks = {}
        for rank, offset in offsets.items():
            try:
                with open(os.path.join(self.state_dir, f"rank-{rank}.stack"), encoding="utf-8", errors="replace") as stream:
                    stream.seek(offset)
                    stacks[rank] = stream.read()
            except OSError:
                continue
        return stacks

    def interrupt(self) -> None:
        """SIGINT to every rank: a busy rank raises KeyboardInterrupt when it next runs Python."""
        for pid in self.rank_pids.values():
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass

    # ------------------------------------------------------------------------------ stopping

    def _our_processes(self) -> List[psutil.Process]:
        found: Dict[int, psutil.Process] = {}
        server = [self._fork_server.pid] if self._fork_server is not None else []
        for pid in list(self._launched_pids) + server + list(self.rank_pids.values()):
            try:
                process = psutil.Process(pid)
                found[pid] = process
                for child in process.children(recursive=True):
                    found[child.pid] = child
            except psutil.Error:
                continue
        return list(found.values())

    def _kill_processes(self) -> None:
        processes = self._our_processes()
        # The ranks hold no state worth saving: KILL them; then TERM lets hydra and the controller
        # clean up after themselves; KILL whatever is left.
        rank_pids = set(self.rank_pids.values())
        shared_memory = set(self._shared_memory) | set(_shared_memory_files(p for p in processes if p.pid in rank_pids))
        for process in processes:
            _signal(process, signal.SIGKILL if process.pid in rank_pids else signal.SIGTERM)
        alive = _still_running(processes, timeout=2.0)
        for process in alive:
            _signal(process, signal.SIGKILL)
        _still_running(alive, timeout=5.0)
        self._reap_launchers()
        # MPICH unlinks its shared-memory segment only when the ranks finalize; killed ranks cannot.
        for path in shared_memory:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _reap_launchers(self) -> None:
        # Our direct children stay zombies until waited for. ipyparallel's waiter thread of each
        # launcher reaps its process and then calls Popen.wait(0): a wait of ours at that moment
        # holds Popen's wait lock, and theirs raises TimeoutExpired in their thread. Let a live
        # waiter do it; wait ourselves only where it is gone.
        cluster = self._ipp_cluster
        if cluster is None:
            return
        for launcher in [cluster.controller] + list(cluster.engines.values()):
            waiter = getattr(launcher, "_wait_thread", None)
            if waiter is not None and waiter.is_alive():
                waiter.join(timeout=1.0)
            popen = getattr(launcher, "_popen_process", None)
            if popen is not None and (waiter is None or not waiter.is_alive()):
                try:
                    popen.wait(timeout=1.0)
                except Exception:
                    pass


class _DeathWatch:
    """Notes the order in which ranks exit, the moment they do.

    When one rank dies, hydra kills the others within milliseconds and gives them no catchable
    signal; polling cannot tell who went first. A pidfd (Linux 5.3+) becomes readable when its
    process exits, even for a process that is not our child, so a thread blocked in poll() on all
    of them wakes up on the first exit, before hydra has reacted.
    """

    def __init__(self, rank_pids: Dict[int, int]):
        self._order: List[int] = []
        self.first_is_certain = True  # False when several ranks' exits arrived in the first wake-up
        self._lock = threading.Lock()
        self._fds: Dict[int, int] = {}
        for rank, pid in rank_pids.items():
            try:
                self._fds[os.pidfd_open(pid)] = rank
            except (AttributeError, OSError):  # old kernel or already gone: dead_ranks() still polls
                continue
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="npu-sim-death-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        poller = select.poll()
        for fd in list(self._fds) + [self._wake_read]:
            poller.register(fd, select.POLLIN)
        remaining = set(self._fds)
        while remaining:
            events = poller.poll()
            if any(fd == self._wake_read for fd, _unused in events):
                return
            exits = [fd for fd, _unused in events if fd in remaining]
            if not self._order and len(exits) > 1:
                self.first_is_certain = False  # seen together: which went first is unknown here
            for fd, _unused in sorted(events, key=lambda e: self._fds.get(e[0], 0)):
                if fd in remaining:
                    remaining.discard(fd)
                    poller.unregister(fd)
                    with self._lock:
                        self._order.append(self._fds[fd])

    def order(self) -> List[int]:
        with self._lock:
            return list(self._order)

    def close(self) -> None:
        os.write(self._wake_write, b"x")
        self._thread.join(timeout=1.0)
        for fd in list(self._fds) + [self._wake_read, self._wake_write]:
            try:
                os.close(fd)
            except OSError:
                pass


def apply_and_wait(view, function, *args) -> list:
    """``view.apply_sync(function, *args)`` that lets an interrupt through: ipyparallel's blocking
    apply catches KeyboardInterrupt and returns the pending AsyncResult instead (``_really_apply``),
    so a stop (SIGTERM to a job, the stop button) that came while it waited was lost and the run
    went on to its end."""
    return view.apply_async(function, *args).get()


def _rank_identity():
    import os

    from npu_migrate_nb.sim.zygote import LAUNCHER_PID_VARIABLE

    return int(os.environ["RANK_ID"]), os.getpid(), int(os.environ.get(LAUNCHER_PID_VARIABLE, os.getpid()))


def _prepare_remote_rank(size, settings):
    import os

    from npu_migrate_nb.sim.engine import prepare_rank

    try:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank() if MPI.COMM_WORLD.Get_size() > 1 else None
    except ImportError:
        rank = None
    if rank is None:
        rank = int(globals().get("_npu_engine_id", os.environ.get("IPP_ENGINE_ID", 0)))
    prepare_rank(rank, size, settings)


def _is_alive(pid: int) -> bool:
    return _how_it_ended(pid) is None


def system_oom_kills(path: str = "/proc/vmstat") -> Optional[int]:
    """How many processes Linux's out-of-memory killer has killed since boot (None where not told)."""
    try:
        with open(path, encoding="ascii") as stream:
            for line in stream:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def killed_by_sigkill(how: str) -> bool:
    """Does ``how`` (the fork server's, psutil's or hydra's words) say SIGKILL, the OOM killer's signal?"""
    return bool(re.search(r"\bsignal:? 9\b|SIGKILL", how, re.IGNORECASE))


def _how_it_ended(pid: int) -> Optional[str]:
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return _("process ended")
    try:
        code = process.wait(timeout=0)
    except (psutil.Error, ChildProcessError):
        return _("process ended")
    if code is None:
        return _("process ended")
    if code < 0:
        return _("killed by {signal}").format(signal=signal.Signals(-code).name)
    return _("exit code {code}").format(code=code)


_BAD_TERMINATION = re.compile(r"BAD TERMINATION.*?PID (\d+) RUNNING AT.*?EXIT CODE: (\d+)", re.DOTALL)
_EXIT_STRING = re.compile(r"EXIT STRING: (.+)")


def _parse_bad_termination(text: str) -> Optional[Tuple[int, str]]:
    found = _BAD_TERMINATION.search(text)
    if not found:
        return None
    exit_string = _EXIT_STRING.search(text, found.end())
    how = exit_string.group(1).strip() if exit_string else _("exit code {code}").format(code=found.group(2))
    if how.lower().startswith("killed (signal") or how.lower().startswith("terminated (signal"):
        how = how[0].lower() + how[1:]
    return int(found.group(1)), how


def _shared_memory_files(processes) -> List[str]:
    paths = set()
    for process in processes:
        try:
            paths.update(m.path for m in process.memory_maps() if m.path.startswith("/dev/shm/mpich"))
        except psutil.Error:
            continue
    return sorted(paths)


def _still_running(processes: List[psutil.Process], timeout: float) -> List[psutil.Process]:
    """Those of ``processes`` still running (a zombie has ended) after up to ``timeout`` s. Polled:
    psutil's wait_procs waits on a process that is not our child with sleeps that grow, and on one
    a launcher's thread reaps at the same time, for the whole timeout."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [process for process in processes if _running(process)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(process: psutil.Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except psutil.Error:
        pass


@atexit.register
def _stop_live_clusters() -> None:
    for cluster in list(_live_clusters):
        cluster.stop()
