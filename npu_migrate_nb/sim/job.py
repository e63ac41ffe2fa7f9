"""A simulated run of a notebook in a process of its own, reporting as JSON lines on stdout.

    python -m npu_migrate_nb.sim.job NOTEBOOK_PATH --ranks N --timeout S [--cwd DIR] [--parent-pid PID]
                                     [--remove-at-exit DIR] [--no-one-card] [--lang LANGUAGE]

The Jupyter server extension starts one of these per simulation; any other program can read its
events the same way. It runs the notebook like ``npu-migrate-nb run`` (a :class:`.Cluster` of N
ranks, a :class:`.Runner`, every cell in order, stopping at the first one that fails, then the
checks) and writes one JSON object per line to stdout:

* ``{"event": "started", "ranks": N, "cells_total": C, "cells": [indices], "tf1": bool}`` once the
  ranks are up (``cells``: the code cells' indices into the notebook's ``cells`` list, ``C`` of them);
* ``{"event": "cell", "cell": index, "status": "running"}`` when a code cell starts, then
  ``{"event": "cell", "cell": index, "status": "ok"|"error"|"timeout"|"skipped", "message": ...}``
  when it ended (cells skipped after a failing one get theirs after the run);
* ``{"event": "output", "rank": r, "stream": "stdout"|"stderr", "text": ...}``: a rank's output,
  whole lines, without the runner's ``[rank R] `` prefix (an error shared by several ranks, which
  the runner prints once as ``[ranks 0,1] ...``, comes once per rank);
* ``{"event": "message", "text": ...}``: one line of the runner's own, not from a rank (faults:
  a rank died, a timeout, an interrupt);
* ``{"event": "progress", "rank": r, "data": {...}}``: a rank's training progress, when the
  Runner reports it (see :class:`.Runner`'s ``progress``);
* ``{"event": "one_card", "one_card": {"cell": index, "status": "running", "detail": ...}}`` when a
  cell failed on the ranks: they are stopped and the cells up to it rerun on one card (unless
  ``--no-one-card``), then ``{"event": "one_card", "one_card": OneCard.to_json()}`` with its verdict
  (``status`` "fails": it fails on one card too, "runs": the distributed run breaks it, "unknown";
  ``after_cut``: it failed after proof mode cut a training short, so ``--full`` may run it);
* ``{"event": "result", "result": RunResult.to_json()}`` after the last cell (its ``one_card`` is
  the verdict, or null);
* ``{"event": "error", "message": ...}``: the run could not happen (unusable notebook, the cluster
  did not start); exit code 2;
* ``{"event": "stopped", "message": ...}``: SIGTERM or SIGINT stopped every rank; exit code 130.

The events' messages are said in ``--lang`` (``en``, ``zh_CN``), else in the environment's language;
their keys and codes stay English.

Exit code 0 when the run is ok (cells and checks), 1 when it ran but failed. Everything else the
process or a library prints goes to stderr: stdout carries only events. The process also stops
its ranks and exits when its parent goes away (the server was killed), and leaves no process behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from typing import List, Optional, TextIO

from .. import i18n
from ..i18n import _
from .runner import Runner

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_STOPPED = 0, 1, 2, 130
PARENT_POLL_SECONDS = 0.5
_RANK_LINE = re.compile(r"\[rank (\d+)\] (.*)\Z", re.DOTALL)
_RANKS_LINE = re.compile(r"\[ranks (\d+(?:,\d+)*)\] (.*)\Z", re.DOTALL)


class EventWriter:
    """One JSON object per line on a stream of its own; safe from several threads. A reader that
    went away (the server was killed) is not an error: the events are then dropped."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._lock = threading.Lock()
        self.broken = False

    def emit(self, event: dict) -> None:
        line = json.dumps(event, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self.broken:
                return
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                self.broken = True


class RankSplitter:
    """A text stream for the Runner's ``echo`` or ``errors``: its ``[rank R] text`` lines become
    ``output`` events of rank R, ``[ranks 0,1] text`` lines one for each of those ranks, any other
    line a ``message`` event. Consecutive lines of one rank within one write make one event."""

    def __init__(self, events: EventWriter, stream: str):
        self.events = events
        self.stream = stream
        self._partial = ""

    def write(self, text: str) -> int:
        if not text:
            return 0
        whole = self._partial + text
        end = whole.rfind("\n") + 1
        self._partial = whole[end:]
        if end:
            self._emit_lines(whole[:end].split("\n")[:-1])
        return len(text)

    def flush(self) -> None:
        """Complete lines are sent as they come; a partial line waits for its end (``finish``)."""

    def finish(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._emit_lines([partial])

    def isatty(self) -> bool:
        return False

    def _emit_lines(self, lines: List[str]) -> None:
        ranks: Optional[List[int]] = None  # the ranks of the lines gathered in ``pending``
        pending: List[str] = []
        for line in lines:
            line_ranks, text = _split_prefix(line)
            if line_ranks is None:
                self._send(ranks, pending)
                ranks, pending = None, []
                self.events.emit({"event": "message", "text": line})
                continue
            if line_ranks != ranks:
                self._send(ranks, pending)
                ranks, pending = line_ranks, []
            pending.append(text + "\n")
        self._send(ranks, pending)

    def _send(self, ranks: Optional[List[int]], pending: List[str]) -> None:
        if ranks is None or not pending:
            return
        text = "".join(pending)
        for rank in ranks:
            self.events.emit({"event": "output", "rank": rank, "stream": self.stream, "text": text})


def _split_prefix(line: str):
    found = _RANK_LINE.match(line)
    if found:
        return [int(found.group(1))], found.group(2)
    found = _RANKS_LINE.match(line)
    if found:
        return [int(rank) for rank in found.group(1).split(",")], found.group(2)
    return None, line


class Interrupts:
    """SIGTERM and SIGINT raise KeyboardInterrupt in the main thread, where the Runner turns it into
    "stop every rank". Only while ``armed``: a signal during the final cleanup is only noted (the
    process is about to exit anyway), so that it cannot cut the cluster's stop short."""

    def __init__(self):
        self.armed = False
        self.received: Optional[int] = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        self.armed = True

    def _handle(self, signum, frame) -> None:
        first = self.received is None
        self.received = signum
        if self.armed and first:
            self.armed = False  # one is enough: the second would interrupt the stopping
            raise KeyboardInterrupt(signal.Signals(signum).name)


def watch_parent(parent_pid: int) -> threading.Thread:
    """SIGTERM to ourselves once ``parent_pid`` is no longer our parent (it died: we were
    re-parented), so that a killed server leaves no simulation running."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(PARENT_POLL_SECONDS)

    thread = threading.Thread(target=watch, name="npu-job-parent-watch", daemon=True)
    thread.start()
    return thread


def take_stdout() -> EventWriter:
    """The real stdout for events only; file descriptor 1 and ``sys.stdout`` now go to stderr, so
    that nothing else (a library's print, a child process) can mix into the events."""
    sys.stdout.flush()
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return EventWriter(os.fdopen(events_fd, "w", encoding="utf-8", buffering=1))


def kill_descendants(timeout: float = 3.0) -> None:
    """TERM, then KILL, whatever child processes are left (the cluster normally stopped them)."""
    try:
        import psutil
    except ImportError:
        return
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _unused, alive = psutil.wait_procs(children, timeout=timeout)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m npu_migrate_nb.sim.job", description=__doc__.splitlines()[0])
    parser.add_argument("path", metavar="NOTEBOOK_PATH")
    parser.add_argument("--ranks", type=int, default=2, metavar="N")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S", help=_("per-cell timeout in seconds"))
    parser.add_argument("--cwd", metavar="DIR", help=_("the ranks' working directory (default: the notebook's)"))
    parser.add_argument("--parent-pid", type=int, metavar="PID",
                        help=_("stop when this process is no longer the parent (default: the parent at start)"))
    parser.add_argument("--remove-at-exit", metavar="DIR",
                        help=_("a directory to remove on the way out (the one the server wrote the notebook to)"))
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help=_("proof mode (the default): every training call stops once the checks are decided, "
                               "after at most N more steps (default 1)"))
    parser.add_argument("--full", action="store_true", help=_("train as written: every epoch and step of every "
                                                             "training call (no proof mode)"))
    parser.add_argument("--no-one-card", action="store_true",
                        help=_("when a cell fails on the ranks, do not rerun the cells up to it on one card"))
    parser.add_argument("--lang", metavar="LANGUAGE", choices=i18n.LANGUAGES,
                        help=_("the language of the events' messages (default: the environment's)"))
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if getattr(args, "lang", None):
        i18n.set_language(args.lang)  # the ranks get it from the cluster's settings
    events = take_stdout()
    interrupts = Interrupts()
    interrupts.install()
    watch_parent(args.parent_pid if args.parent_pid is not None else os.getppid())
    try:
        return run(args, events, interrupts)
    except KeyboardInterrupt:
        interrupts.armed = False
        if interrupts.received:
            message = _("stopped by {signal}: all ranks stopped").format(signal=signal.Signals(interrupts.received).name)
        else:
            message = _("stopped by an interrupt: all ranks stopped")
        events.emit({"event": "stopped", "message": message})
        return EXIT_STOPPED
    finally:
        interrupts.armed = False
        kill_descendants()
        if args.remove_at_exit:  # the server removes it too, unless it was killed
            shutil.rmtree(args.remove_at_exit, ignore_errors=True)


def run(args: argparse.Namespace, events: EventWriter, interrupts: Interrupts) -> int:
    from ..notebook import InputError, load
    from .cluster import Cluster, ClusterError
    from .runner import detect_tf1, proof_steps_of

    try:
        notebook = load(args.path)
    except InputError as error:
        events.emit({"event": "error", "message": str(error)})
        return EXIT_INPUT
    if not notebook.is_python:
        events.emit({"event": "error", "message": _("not a Python notebook (language {language})").format(
            language=repr(notebook.language))})
        return EXIT_INPUT
    if args.ranks < 1:
        events.emit({"event": "error", "message": _("--ranks must be at least 1")})
        return EXIT_INPUT
    if args.cwd:
        # The Runner enters the notebook's directory (relative paths in a notebook mean its own
        # directory, as in Jupyter); the notebook file itself is a copy somewhere else.
        notebook.path = os.path.join(os.path.abspath(args.cwd), os.path.basename(notebook.path))
    code_cells = [cell.index for cell in notebook.cells if cell.cell_type == "code"]
    started = time.monotonic()
    tf1 = detect_tf1(notebook)
    cluster = Cluster(n=args.ranks, tf1=tf1)
    echo, errors = RankSplitter(events, "stdout"), RankSplitter(events, "stderr")
    try:
        try:
            cluster.start()
        except ClusterError as error:
            events.emit({"event": "error", "message": _("the cluster could not start: {error}").format(error=error)})
            return EXIT_INPUT
        events.emit({"event": "started", "ranks": args.ranks, "cells_total": len(code_cells),
                     "cells": code_cells, "tf1": tf1})
        runner = EventRunner(events, cluster, timeout=args.timeout, echo=echo, errors=errors,
                             proof_steps=proof_steps_of(args))
        result = runner.run_notebook(notebook)
        echo.finish()
        errors.finish()
        for outcome in result.cells:  # the cells not run after a failing one
            if outcome.cell in code_cells and outcome.cell not in runner.reported:
                events.emit(cell_event(outcome))
        if not args.no_one_card:
            result.one_card = rerun_failed_cell_on_one_card(events, notebook, result, cluster)
        result.elapsed_s = time.monotonic() - started
        events.emit({"event": "result", "result": result.to_json()})
    finally:
        interrupts.armed = False  # stopping the cluster is not to be interrupted
        echo.finish()
        errors.finish()
        cluster.stop()
    return EXIT_OK if result.ok else EXIT_FAILED


def rerun_failed_cell_on_one_card(events: EventWriter, notebook, result, cluster):
    """After a cell failed on the ranks: stop them (their cores go to the rerun) and rerun the cells
    up to it on one card, saying so before and after; None when no cell failed. A SIGTERM meanwhile
    stops the one-card rank as it stops the ranks."""
    from .one_card import bound_for, rerun_on_one_card

    failed = result.failed_cell
    if failed is None or cluster.profile is not None:
        return None
    cluster.stop()
    bound = bound_for(result.elapsed_s)
    events.emit({"event": "one_card", "one_card": {
        "cell": failed.cell, "status": "running", "after_cut": False,
        "detail": _("rerunning the cells up to cell {cell} on one card (at most {seconds} s)").format(
            cell=failed.cell, seconds=f"{bound:.0f}")}})
    one_card = rerun_on_one_card(notebook, failed.cell, cluster, bound, proof_steps=result.proof_steps)
    events.emit({"event": "one_card", "one_card": one_card.to_json()})
    return one_card


def cell_event(outcome) -> dict:
    event = {"event": "cell", "cell": outcome.cell, "status": outcome.status}
    if outcome.message:
        event["message"] = outcome.message
    return event


class EventRunner(Runner):
    """A Runner that tells when each code cell starts and ends, and passes training progress on."""

    def __init__(self, events: EventWriter, cluster, timeout: float, echo: RankSplitter, errors: RankSplitter,
                 proof_steps: Optional[int] = None):
        super().__init__(cluster, timeout=timeout, echo=echo, errors=errors, progress=self._progress,
                         proof_steps=proof_steps)
        self.events = events
        self.reported = set()

    def run_cell(self, index: int, source: str, cell_type: str = "code"):
        if cell_type == "code":
            self.events.emit({"event": "cell", "cell": index, "status": "running"})
        outcome = super().run_cell(index, source, cell_type)
        if cell_type == "code":
            self.echo.finish()  # the cell's output comes before its end
            self.errors.finish()
            self.reported.add(index)
            self.events.emit(cell_event(outcome))
        return outcome

    def _progress(self, rank: int, data: dict) -> None:
        self.events.emit({"event": "progress", "rank": rank, "data": data})


if __name__ == "__main__":
    sys.exit(main())
