"""Simulation jobs of the server extension: one process per job (``python -m npu_migrate_nb.sim.job``),
its JSON-lines events folded into a status the handlers hand out.

A job's process runs in a session of its own (a Ctrl-C in the server's terminal is the server's,
not the simulation's). Stopping it is SIGTERM (the job stops every rank and exits), and after a
grace period SIGKILL to it and to every process it had started; whatever way a job ends, the
processes seen under it are then killed if still there and its temporary directory is removed.

A job speaks the language of the request that started it: its process gets it as ``LANGUAGE`` (which
the package reads first), and the messages said here are said in it.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from typing import Dict, List, Optional

from .. import i18n
from ..sim import DEFAULT_PROOF_STEPS
from ..i18n import N_, _

STOP_GRACE_SECONDS = 15.0  # the job stops its cluster in about 2 s; then it is killed
MAX_OUTPUT_CHARS = 1_000_000  # per rank, returned by every GET: older output is dropped beyond this
MAX_MESSAGES = 1000
MAX_FINISHED_JOBS = 32  # finished jobs kept for GET, oldest dropped first
MAX_RUNNING_JOBS = 4  # a simulation is N processes of TensorFlow: more at once helps nobody
# A job nobody asked about for this long was left behind (the browser tab that polls it every second
# was closed): it is stopped rather than left to burn the cores until its timeout.
ABANDONED_AFTER_SECONDS = 60.0
STDERR_TAIL_LINES = 40
LEFTOVER_GRACE_SECONDS = 3.0
_TRIMMED = N_("[... earlier output dropped ...]")
_live_managers: "weakref.WeakSet[JobManager]" = weakref.WeakSet()


class JobConflict(Exception):
    """A job for the same notebook is running (409), or too many are (429)."""

    def __init__(self, message: str, status: int = 409, job_id: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.job_id = job_id


class Job:
    def __init__(self, job_id: str, key: Optional[str], ranks: int, timeout: float, log: logging.Logger,
                 cells_total: Optional[int] = None, language: Optional[str] = None,
                 proof_steps: Optional[int] = DEFAULT_PROOF_STEPS):
        self.id = job_id
        self.proof_steps = proof_steps  # proof mode's extra steps; None: trained as written
        self.language = i18n.choose(language) if language is not None else i18n.current()
        self.key = key
        self.ranks = ranks
        self.timeout = timeout
        self.log = log
        self.state = "starting"
        self.cells_total = cells_total  # the code cells; confirmed by the job's "started" event
        self.cells_done = 0
        self.current_cell: Optional[int] = None
        self.output: Dict[int, List[str]] = {rank: [] for rank in range(ranks)}
        self._output_chars: Dict[int, int] = {rank: 0 for rank in range(ranks)}
        self.messages: List[str] = []
        self.progress: Dict[int, dict] = {}
        self.result: Optional[dict] = None
        self.one_card: Optional[dict] = None  # after a failed cell: the one-card rerun, running or its verdict
        self.error: Optional[str] = None
        self.exit_code: Optional[int] = None
        self.stop_requested = False
        self.last_asked = time.monotonic()  # the last GET of its status
        self.directory: Optional[str] = None
        self.process: Optional[subprocess.Popen] = None
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._stderr_tail: "collections.deque[str]" = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._seen: Dict[int, object] = {}  # pid -> psutil.Process: every process seen under the job
        self._remembered_at = 0.0
        self._threads: List[threading.Thread] = []

    # ------------------------------------------------------------------------------ starting

    def start(self, notebook_text: str, cwd: Optional[str]) -> None:
        self.directory = tempfile.mkdtemp(prefix="npu-migrate-job-")
        path = os.path.join(self.directory, "notebook.ipynb")
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(notebook_text)
        command = [sys.executable, "-m", "npu_migrate_nb.sim.job", path, "--ranks", str(self.ranks),
                   "--timeout", repr(float(self.timeout)), "--parent-pid", str(os.getpid()),
                   "--remove-at-exit", self.directory]
        if cwd:
            command += ["--cwd", cwd]
        command += ["--full"] if self.proof_steps is None else ["--steps", str(self.proof_steps)]
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.directory, start_new_session=True, close_fds=True,
                env=dict(os.environ, LANGUAGE=self.language),  # its ranks inherit it too
            )
        except OSError:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self._remember(self.process.pid)
        for target, name in ((self._read_events, "events"), (self._read_stderr, "stderr"), (self._wait, "wait")):
            thread = threading.Thread(target=target, name=f"npu-job-{self.id[:8]}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return not self.finished.is_set()

    # ------------------------------------------------------------------------------- events

    def _read_events(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with self.process.stdout:
            for raw in self.process.stdout:
                self._on_line(raw.decode("utf-8", errors="replace").rstrip("\n"))

    def _on_line(self, line: str) -> None:
        if not line:
            return
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self._message(line)
            return
        try:
            self.on_event(event)
        except Exception:  # a malformed event must not end the reading
            self.log.exception("npu-migrate: bad event from job %s: %r", self.id, line[:200])

    def on_event(self, event: dict) -> None:
        kind = event.get("event")
        with self._lock, i18n.language(self.language):
            if kind == "output":
                self._add_output(int(event["rank"]), str(event.get("text", "")))
            elif kind == "cell":
                status = event.get("status")
                if status == "running":
                    self.current_cell = event.get("cell")
                else:
                    self.cells_done += 1
                    if self.current_cell == event.get("cell"):
                        self.current_cell = None
            elif kind == "progress":
                self.progress[int(event["rank"])] = event.get("data")
            elif kind == "message":
                self._add_message(str(event.get("text", "")))
            elif kind == "started":
                self.cells_total = event.get("cells_total", self.cells_total)
                if self.state == "starting":
                    self.state = "running"
            elif kind == "one_card":
                self.one_card = event.get("one_card")
            elif kind == "result":
                self.result = event.get("result")
                self.current_cell = None
            elif kind == "error":
                self.error = str(event.get("message", _("the simulation failed")))
                self._add_message(self.error)
            elif kind == "stopped":
                self._add_message(str(event.get("message", _("stopped"))))
        if time.monotonic() - self._remembered_at > 0.5:  # events come while the cluster is up
            self._remember_descendants()

    def _message(self, text: str) -> None:
        with self._lock:
            self._add_message(text)

    def _add_message(self, text: str) -> None:
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(text)

    def _add_output(self, rank: int, text: str) -> None:
        chunks = self.output.setdefault(rank, [])
        chunks.append(text)
        self._output_chars[rank] = self._output_chars.get(rank, 0) + len(text)
        if self._output_chars[rank] > MAX_OUTPUT_CHARS:
            joined = "".join(chunks)
            kept = joined[-(MAX_OUTPUT_CHARS // 2):]
            kept = kept[kept.find("\n") + 1:] if "\n" in kept else kept
            trimmed = _(_TRIMMED) + "\n"
            self.output[rank] = [trimmed, kept]
            self._output_chars[rank] = len(trimmed) + len(kept)

    def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        with self.process.stderr:
            for raw in self.process.stderr:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self._stderr_tail.append(line)
                self.log.debug("npu-migrate job %s: %s", self.id[:8], line)

    # ------------------------------------------------------------------------------- ending

    def _wait(self) -> None:
        assert self.process is not None
        while True:
            try:
                code = self.process.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                self._remember_descendants()
        for thread in self._threads[:2]:
            thread.join(timeout=5.0)  # the last events and stderr lines
        self._kill_leftovers()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        with self._lock, i18n.language(self.language):
            self.exit_code = code
            self.current_cell = None
            if self.one_card is not None and self.one_card.get("status") == "running":
                self.one_card = dict(self.one_card, status="unknown",
                                     detail=_("not known: the simulation ended before the one-card rerun did"))
            if self.result is not None:
                self.state = "done"
            elif self.stop_requested:
                self.state = "stopped"
            else:
                self.state = "failed"
                if self.error is None:
                    how = (_("signal {name}").format(name=signal.Signals(-code).name) if code < 0
                           else _("exit code {code}").format(code=code))
                    tail = "\n".join(line for line in self._stderr_tail if line.strip())
                    self.error = _("the simulation process ended ({how})").format(how=how) + (
                        f":\n{tail}" if tail else "")
                    self._add_message(self.error)
        self.finished.set()
        self.log.info("npu-migrate: simulation %s %s", self.id, self.state)

    def request_stop(self) -> None:
        """SIGTERM to the job: it stops every rank and exits. Returns at once."""
        with self._lock:
            if self.finished.is_set():
                return
            self.stop_requested = True
        self._remember_descendants()
        _signal(self.pid, signal.SIGTERM)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop the job and wait until it and every process it started are gone."""
        self.request_stop()
        if not self.finished.wait(grace):
            self.log.warning("npu-migrate: simulation %s did not stop in %.0f s: killing it", self.id, grace)
            self.kill()
            self.finished.wait(10.0)

    def kill(self) -> None:
        self._remember_descendants()
        for process in list(self._seen.values()):
            _kill(process)  # the job first: it would otherwise go on starting processes

    def _remember(self, pid: int) -> None:
        try:
            import psutil

            self._seen.setdefault(pid, psutil.Process(pid))
        except Exception:
            pass

    def _remember_descendants(self) -> None:
        """Note every process under the job while it runs: once it is gone, its orphans are no
        longer anyone's descendants, and these notes are how they are found."""
        self._remembered_at = time.monotonic()
        try:
            import psutil

            for child in psutil.Process(self.pid).children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except Exception:
            pass

    def _kill_leftovers(self) -> None:
        alive = [process for pid, process in list(self._seen.items()) if pid != self.pid and _running(process)]
        if not alive:
            return
        try:  # a job killed outright: the cluster's own watchdog stops its processes, give it a moment
            import psutil

            _gone, alive = psutil.wait_procs(alive, timeout=LEFTOVER_GRACE_SECONDS)
        except Exception:
            pass
        alive = [process for process in alive if _running(process)]
        if not alive:
            return
        self.log.warning("npu-migrate: simulation %s left %d process(es): killing them", self.id, len(alive))
        for process in alive:
            _kill(process)
        try:
            import psutil

            psutil.wait_procs(alive, timeout=5.0)
        except Exception:
            pass

    # ------------------------------------------------------------------------------- status

    def status(self) -> dict:
        with self._lock:
            return {
                "id": self.id,
                "path": self.key,
                "state": self.state,
                "ranks": self.ranks,
                "cells_total": self.cells_total,
                "cells_done": self.cells_done,
                "current_cell": self.current_cell,
                "output": {str(rank): "".join(chunks) for rank, chunks in sorted(self.output.items())},
                "messages": list(self.messages),
                "progress": {str(rank): data for rank, data in sorted(self.progress.items())},
                "result": self.result,
                "one_card": self.one_card,
                "error": self.error,
            }


class JobManager:
    """The jobs of one server: at most one running per notebook (``key``)."""

    def __init__(self, log: Optional[logging.Logger] = None, abandoned_after: float = ABANDONED_AFTER_SECONDS):
        self.log = log or logging.getLogger("npu_migrate_nb.server")
        self.jobs: Dict[str, Job] = {}
        self._lock = threading.Lock()
        self.closed = False
        self.abandoned_after = abandoned_after
        self._watch = threading.Thread(target=self._stop_abandoned_jobs, name="npu-jobs-abandoned", daemon=True)
        self._watch.start()
        _live_managers.add(self)

    def _stop_abandoned_jobs(self) -> None:
        while not self.closed:
            time.sleep(1.0)
            now = time.monotonic()
            for job in [job for job in list(self.jobs.values()) if job.running]:
                idle = now - job.last_asked
                if idle > self.abandoned_after and not job.stop_requested:
                    self.log.warning("npu-migrate: simulation %s: nobody asked about it for %.0f s: stopping it",
                                     job.id, idle)
                    with job._lock, i18n.language(job.language):
                        job._add_message(_("stopped: nobody followed this simulation for {seconds} s "
                                           "(the tab that started it was closed)").format(seconds=f"{idle:.0f}"))
                    job.request_stop()

    def start(self, notebook_text: str, ranks: int, timeout: float, key: Optional[str] = None,
              cwd: Optional[str] = None, cells_total: Optional[int] = None, language: Optional[str] = None,
              proof_steps: Optional[int] = DEFAULT_PROOF_STEPS) -> Job:
        """Start a job; ``language``: the one it speaks (None: the current one); ``proof_steps``: proof
        mode's extra steps (None: train as written)."""
        with self._lock, i18n.language(language):
            if self.closed:
                raise JobConflict(_("the server is stopping"), status=503)
            running = [job for job in self.jobs.values() if job.running]
            if key is not None:
                for job in running:
                    if job.key == key:
                        raise JobConflict(_("a simulation of {path} is already running (job {id}); "
                                            "stop it first (DELETE) or wait for it to end").format(path=key, id=job.id),
                                          job_id=job.id)
            if len(running) >= MAX_RUNNING_JOBS:
                raise JobConflict(_("{count} simulations are running, the most this server runs at "
                                    "once: stop one first").format(count=len(running)), status=429)
            job = Job(uuid.uuid4().hex, key, ranks, timeout, self.log, cells_total, language=i18n.current(),
                      proof_steps=proof_steps)
            job.start(notebook_text, cwd)
            self.jobs[job.id] = job
            self._forget_old()
        self.log.info("npu-migrate: simulation %s of %s on %d ranks (pid %s)", job.id, key or "a notebook",
                      ranks, job.pid)
        return job

    def get(self, job_id: str) -> Optional[Job]:
        job = self.jobs.get(job_id)
        if job is not None:
            job.last_asked = time.monotonic()
        return job

    def _forget_old(self) -> None:
        finished = [job for job in self.jobs.values() if not job.running]
        for job in finished[:max(0, len(finished) - MAX_FINISHED_JOBS)]:
            del self.jobs[job.id]

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop every running job (all at once) and wait for them; no new job starts after this."""
        with self._lock:
            self.closed = True
            running = [job for job in self.jobs.values() if job.running]
        for job in running:
            job.request_stop()
        deadline = time.monotonic() + grace
        for job in running:
            if not job.finished.wait(max(0.0, deadline - time.monotonic())):
                job.kill()
        for job in running:
            job.finished.wait(10.0)


def _signal(pid: Optional[int], signum: int) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _running(process) -> bool:
    try:
        import psutil

        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


def _kill(process) -> None:
    try:
        if process.is_running():  # same pid AND same start time: never someone else's process
            process.kill()
    except Exception:
        pass


@atexit.register
def _stop_live_jobs() -> None:
    """The backstop: whatever way the server's Python ends, its simulations end with it."""
    for manager in list(_live_managers):
        try:
            manager.stop_all(grace=5.0)
        except Exception:
            pass
