"""Run notebook cells on every rank of a simulated cluster, in order and statefully (like ``%%px``).

Output streams live, each line prefixed ``[rank R]``; a failing rank's traceback is shown with its
rank. Faults stop the whole cluster and say what happened:

* a rank dies (exception that leaves the others stuck, ``os._exit``, killed): the rank, how it
  ended and its last output, within a second or two;
* a cell runs past its timeout (typically: one rank skipped a collective): which ranks wait in
  which collective, and which finished;
* an interrupt (Ctrl-C, or Jupyter's stop button, which is SIGINT to the kernel): every rank stops.

While a cell runs, an optional ``progress(rank, data)`` callback hears each rank's training progress
(Keras ``fit``, ``Estimator.train``) whenever it changes: ``data`` is the rank's progress file, see
:func:`.engine.start_progress_watcher`.

After the cells, the probes' records from every rank are judged by :mod:`.checks`.
``run_command`` is the ``npu-migrate-nb run`` door.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, TextIO

from .. import i18n
from ..analysis import analyze
from ..i18n import N_, _
from ..ipython_syntax import mask
from ..notebook import InputError, Notebook, load
from . import DEFAULT_PROOF_STEPS
from . import checks as checks_module
from .cluster import Cluster, ClusterError, killed_by_sigkill
from .engine import progress_path
from .one_card import OneCard, bound_for, rerun_on_one_card

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2
POLL_SECONDS = 0.05
# After one rank raised, how long the others may still run before they count as stuck (in SPMD
# code they are usually waiting in a collective the failed rank will never join).
GRACE_AFTER_ERROR = 3.0
# Cell magics that only mean "on every rank": the runner already does that.
_RANK_CELL_MAGICS = ("px", "npu_distribute", "autopx")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_USER_FRAME = re.compile(r'File "(?:[^"]*ipykernel_\d+/\d+\.py|<ipython-input-[^"]*>)", line (\d+)')
# A cell's status as shown to a person (the status itself stays English data, as in JSON).
CELL_STATUS_LABELS = {"ok": N_("ok"), "error": N_("error"), "timeout": N_("timeout"), "skipped": N_("skipped")}


def cell_status_label(status: str) -> str:
    return _(CELL_STATUS_LABELS[status]) if status in CELL_STATUS_LABELS else status


@dataclass
class RankOutcome:
    rank: int
    stdout: str = ""
    stderr: str = ""
    error: Optional[str] = None

    def to_json(self) -> dict:
        return {"rank": self.rank, "stdout": self.stdout, "stderr": self.stderr, "error": self.error}


@dataclass
class CellOutcome:
    cell: int
    status: str  # "ok" | "error" | "timeout" | "skipped"
    ranks: List[RankOutcome] = field(default_factory=list)
    message: Optional[str] = None
    # At a timeout, where each rank was: the collective it waited in, or None while it ran the
    # notebook's code; a rank that had finished the cell is not listed.
    waiting: Dict[int, Optional[str]] = field(default_factory=dict)

    @property
    def slow(self) -> bool:
        """A timeout with every rank still running the notebook's code, none waiting in a collective nor
        done: the cell is longer than the limit, not stuck."""
        return (self.status == "timeout" and len(self.waiting) == len(self.ranks)
                and not any(self.waiting.values()))

    def to_json(self) -> dict:
        data = {"cell": self.cell, "status": self.status, "ranks": [r.to_json() for r in self.ranks]}
        if self.message:
            data["message"] = self.message
        if self.waiting:
            data["waiting"] = {str(rank): collective for rank, collective in self.waiting.items()}
        return data


@dataclass
class RunResult:
    ranks: int
    cells: List[CellOutcome]
    checks: Dict[str, checks_module.Check]
    elapsed_s: float
    tf1: bool = False
    # Whether N ranks reach one card's weights (``--compare-single-card``); None: not run.
    single_card: Optional[checks_module.Check] = None
    # Whether the cell that failed on the ranks fails on one card too; None: no cell failed (or not asked).
    one_card: Optional["OneCard"] = None
    file_clashes: List[dict] = field(default_factory=list)  # files several ranks wrote in one cell
    # Proof mode's extra steps (None: trained as written), and the calls it shortened (rank 0's records).
    proof_steps: Optional[int] = None
    shortened: List[dict] = field(default_factory=list)

    @property
    def failed_cell(self) -> Optional[CellOutcome]:
        return next((cell for cell in self.cells if cell.status in ("error", "timeout")), None)

    @property
    def cells_ok(self) -> bool:
        return all(cell.status in ("ok", "skipped") for cell in self.cells) and not self.interrupted_or_lost

    @property
    def interrupted_or_lost(self) -> bool:
        return any(cell.status in ("error", "timeout") for cell in self.cells)

    @property
    def ok(self) -> bool:
        judged = list(self.checks.values()) + ([self.single_card] if self.single_card else [])
        return self.cells_ok and all(c.status != checks_module.FAIL for c in judged)

    def to_json(self) -> dict:
        details = {name: check.to_json() for name, check in self.checks.items()}
        if self.single_card is not None:
            details[checks_module.SINGLE_CARD] = self.single_card.to_json()
        return {
            "ok": self.ok,
            "ranks": self.ranks,
            "checks": {name: check.status for name, check in self.checks.items()},
            checks_module.SINGLE_CARD: self.single_card.status if self.single_card else "skipped",
            "check_details": details,
            "cells": [cell.to_json() for cell in self.cells],
            "elapsed_s": round(self.elapsed_s, 3),
            "tf1": self.tf1,
            "one_card": self.one_card.to_json() if self.one_card is not None else None,
            "file_clashes": self.file_clashes,
            "proof": None if self.proof_steps is None else {
                "steps": self.proof_steps,
                "shortened": [dict({key: record.get(key) for key in ("cell", "source", "taken", "written", "unit", "ran_as_written")},
                                   text=shortened_text(record)) for record in self.shortened]},
        }


class _Fault(Exception):
    """Something that stops every rank: the cell gets ``status`` and the run stops."""

    def __init__(self, status: str, message: str, waiting: Optional[Dict[int, Optional[str]]] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.waiting = waiting or {}


class Runner:
    """Cells to ranks. One Runner per cluster session; records accumulate across cells."""

    def __init__(self, cluster: Cluster, timeout: float = 300.0, echo: Optional[TextIO] = None,
                 errors: Optional[TextIO] = None, progress: Optional[Callable[[int, dict], None]] = None,
                 proof_steps: Optional[int] = None):
        """``progress(rank, data)``: called while a cell runs, each time a rank's training progress
        changed (``data``: see :func:`.engine.start_progress_watcher`); its exceptions are ignored.
        ``proof_steps``: proof mode (every training call stops once the checks are decided, after at
        most this many more steps); None trains as written."""
        self.cluster = cluster
        self.proof_steps = proof_steps
        self.timeout = timeout
        self.echo = echo if echo is not None else sys.stdout
        self.errors = errors if errors is not None else sys.stderr
        self.records: Dict[int, List[dict]] = {rank: [] for rank in range(cluster.n)}
        self.file_clashes: List[dict] = []  # files several ranks wrote in one cell (checks.file_clashes)
        self.stopped_after: Optional[int] = None  # the cell after which the cluster was stopped
        self.progress = progress
        self._progress_files = _ProgressFiles(cluster) if progress is not None else None
        self._progress_failed = False

    # --------------------------------------------------------------------------- notebooks

    def run_notebook(self, notebook: Notebook, compare_single_card: bool = False) -> RunResult:
        """Run every cell on every rank and judge the checks; with ``compare_single_card``, then run
        the notebook on one card too and judge whether the N ranks reproduced its math."""
        started = time.monotonic()
        self.prepare_for(notebook)
        outcomes = self._run_cells_until_one_fails(notebook)
        result = RunResult(
            ranks=self.cluster.n,
            cells=outcomes,
            checks=checks_module.not_applicable_where_the_analysis_says(self.evaluate_checks(), analyze(notebook)),
            elapsed_s=time.monotonic() - started,
            tf1=self.cluster.tf1,
            file_clashes=list(self.file_clashes),
            proof_steps=self.proof_steps,
            shortened=self.shortened(),
        )
        if compare_single_card:
            result.single_card = self.compare_single_card(notebook, result)
            result.elapsed_s = time.monotonic() - started
        return result

    def _run_cells_until_one_fails(self, notebook: Notebook) -> List[CellOutcome]:
        """Like Jupyter's "Run All": after a cell fails or times out, the later cells are not run
        (they would only fail on what it did not define); they are reported as skipped."""
        outcomes: List[CellOutcome] = []
        failed: Optional[int] = None
        for cell in notebook.cells:
            if failed is not None:
                outcomes.append(CellOutcome(cell.index, "skipped",
                                            message=_("not run: cell {cell} failed").format(cell=failed)))
                continue
            outcome = self.run_cell(cell.index, cell.source, cell.cell_type)
            outcomes.append(outcome)
            if outcome.status in ("error", "timeout"):
                failed = cell.index
        return outcomes

    def compare_single_card(self, notebook: Notebook, result: Optional[RunResult] = None,
                            stop_ranks: bool = False) -> checks_module.Check:
        """Run ``notebook`` again on these ranks, then on one rank (RANK_SIZE=1, seeded like rank 0,
        so it starts from rank 0's initial weights), both with the randomness that would make them
        read or drop different rows held fixed (:func:`.engine.hold_randomness_fixed`), and compare
        their training. The main run (``result``) and its checks saw the notebook as it is.
        ``stop_ranks``: stop this cluster before the single-card run (its cores go to that run)."""
        name = checks_module.SINGLE_CARD
        if self.cluster.n < 2:
            return checks_module.Check(name, checks_module.NOT_OBSERVED, _("one rank: nothing to compare"))
        if result is not None and not result.cells_ok:
            return checks_module.Check(name, checks_module.NOT_OBSERVED,
                                       _("not run: the {ranks}-rank run did not complete").format(ranks=self.cluster.n))
        print(_("single-card comparison: the notebook again on {ranks} ranks, then on 1 rank seeded like "
                "rank 0, shuffles after the shard and training-mode randomness held fixed...").format(
            ranks=self.cluster.n), file=self.errors)
        self.errors.flush()
        try:
            ranks_records, failure = _run_held_fixed(self.cluster, notebook, self.timeout, self.errors,
                                                     _("[{ranks} ranks, comparison] ").format(ranks=self.cluster.n),
                                                     proof_steps=self.proof_steps)
        finally:
            if stop_ranks:
                self.cluster.stop()
        if failure is not None:
            return failure
        single = self.cluster.with_ranks(1)
        try:
            try:
                single.start()
            except ClusterError as error:
                return checks_module.Check(name, checks_module.NOT_OBSERVED,
                                           _("the single-card run could not start: {error}").format(error=error))
            single_records, failure = _run_held_fixed(single, notebook, self.timeout, self.errors, _("[single card] "),
                                                      shuffle_sites=_held_shuffle_sites(ranks_records),
                                                      proof_steps=self.proof_steps)
        finally:
            single.stop()
        if failure is not None:
            return failure
        return checks_module.check_single_card(ranks_records, self.cluster.n, single_records.get(0, []))

    def prepare_for(self, notebook: Notebook) -> None:
        """Before a notebook's first cell: no records, the ranks' seeds as at start, and the
        notebook's folder as the working directory."""
        self._reset_probes()
        self._enter_directory(os.path.dirname(os.path.abspath(notebook.path)))

    def evaluate_checks(self) -> Dict[str, checks_module.Check]:
        return checks_module.evaluate(self.records, self.cluster.n)

    def shortened(self) -> List[dict]:
        """The training calls proof mode shortened (or could not), as rank 0 saw them (every rank
        stops at the same step)."""
        return [record for record in self.records.get(0, []) if record["kind"] == "shortened"]

    def set_proof(self, steps: Optional[int]) -> None:
        """Proof mode (``steps`` more after those the checks need) or not (None) for the cells to come."""
        from . import probes

        self.proof_steps = steps
        self.cluster.apply(probes.set_proof, steps)

    def _reset_probes(self) -> None:
        from . import engine, probes

        self.records = {rank: [] for rank in range(self.cluster.n)}
        self.file_clashes = []
        try:
            self.cluster.apply(probes.reset)
            self.cluster.apply(probes.set_proof, self.proof_steps)
        except Exception:
            pass
        try:  # a notebook run starts from the rank's seeds, however many ran before in this cluster
            self.cluster.apply(engine.reseed_rank, self.cluster.seed)
        except Exception:
            pass

    def _enter_directory(self, directory: str) -> None:
        # Relative paths in the notebook mean its own directory, as in Jupyter.
        self.cluster.apply(os.chdir, directory)
        try:  # what was there before the ranks wrote anything: where a one-card rerun starts from
            self.cluster.folder_before = (directory, frozenset(os.listdir(directory)))
        except OSError:
            self.cluster.folder_before = None

    # ------------------------------------------------------------------------------- cells

    def run_cell(self, index: int, source: str, cell_type: str = "code") -> CellOutcome:
        if self.stopped_after is not None:
            return CellOutcome(index, "skipped", message=_("not run: the ranks were stopped at cell {cell}").format(
                cell=self.stopped_after))
        code = runnable_code(source) if cell_type == "code" else None
        if code is None:
            return CellOutcome(index, "skipped", message=_("not Python code"))
        if not code.strip():
            return CellOutcome(index, "ok", [RankOutcome(rank) for rank in self.cluster.ranks])
        try:
            return self._execute(index, code)
        except KeyboardInterrupt:
            self._stop(index)
            print(_("interrupted during cell {cell}: stopped all {ranks} ranks").format(cell=index, ranks=self.cluster.n),
                  file=self.errors)
            raise

    def _execute(self, index: int, code: str) -> CellOutcome:
        from . import probes

        view = self.cluster.view
        if self._progress_files is not None:
            self._progress_files.mark()  # what the ranks wrote before this cell is not news
        view.apply(probes.begin_cell, index, i18n.current())  # the ranks speak the controller's language
        result = view.execute(code, silent=False)
        watch = _Watch(self, index, result)
        try:
            watch.wait()
        except _Fault as fault:
            watch.stream_output(final=True)
            watch.show_errors()
            outcome = watch.outcome(fault.status, fault.message, fault.waiting)
            self._stop(index)
            print(fault.message, file=self.errors)
            return outcome
        outcome = watch.outcome()
        clashes = self._collect_records(probes)  # the ranks write their last progress first
        if clashes:
            texts = [checks_module.clash_text(clash) for clash in clashes]
            print("\n".join(texts), file=self.errors)
            if outcome.status == "error":  # the race is the likely cause: say it where the failure is said
                outcome.message = "; ".join(texts)
        self.poll_progress()
        return outcome

    def _collect_records(self, probes) -> List[dict]:
        """Take the cell's records from every rank; returns the files several ranks wrote in it."""
        try:
            per_rank = self.cluster.apply(probes.end_cell)
        except Exception as error:  # probes unavailable (no TensorFlow in the ranks): nothing recorded
            print(_("(no run-time checks: {error})").format(error=error), file=self.errors)
            return []
        for rank, records in zip(self.cluster.ranks, per_rank):
            self.records[rank].extend(records)
        clashes = checks_module.file_clashes(dict(zip(self.cluster.ranks, per_rank)), self.cluster.n)
        self.file_clashes.extend(clashes)
        return clashes

    def _stop(self, index: int) -> None:
        self.stopped_after = index
        self.cluster.stop()

    def poll_progress(self) -> None:
        """Call ``progress`` for each rank whose progress file changed since the last look."""
        if self._progress_files is None:
            return
        try:
            changes = self._progress_files.changes()
        except Exception:
            return
        for rank, data in changes:
            try:
                self.progress(rank, data)
            except Exception as error:  # a UI's problem must not stop the ranks
                if not self._progress_failed:
                    self._progress_failed = True
                    print(_("(progress display failed, ignored from now on: {kind}: {error})").format(
                        kind=type(error).__name__, error=error), file=self.errors)


def runnable_code(source: str) -> Optional[str]:
    """The code to send to the ranks' IPython, or None for a cell that is not Python (%%bash...)."""
    masked = mask(source)
    if masked.code is None:
        return None
    if masked.cell_magic in _RANK_CELL_MAGICS:
        lines = source.splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.strip())
        return "".join(lines[first + 1:])
    return source


class _Watch:
    """One cell in flight on every rank: streams output, notices faults."""

    def __init__(self, runner: Runner, index: int, result):
        self.runner = runner
        self.cluster = runner.cluster
        self.index = index
        self.result = result
        self.client = self.cluster.client
        self.msg_ids = dict(zip(self.cluster.ranks, result.msg_ids))
        self.futures = dict(zip(self.cluster.ranks, result._children))
        self.printed = {(rank, name): 0 for rank in self.cluster.ranks for name in ("stdout", "stderr")}
        self.rank_errors: Dict[int, str] = {}

    # ----------------------------------------------------------------------------- waiting

    def wait(self) -> None:
        started = time.monotonic()
        first_error_at = None
        while True:
            finished = self.finished_ranks()
            self.stream_output()
            self.runner.poll_progress()
            if len(finished) == len(self.msg_ids):
                self.stream_output(final=True)
                self.show_errors()
                return
            dead = self.cluster.dead_ranks()
            if dead:
                raise _Fault("error", self.death_message(dead))
            now = time.monotonic()
            if first_error_at is None and any(self.error_of(rank) for rank in finished):
                first_error_at = now
            if first_error_at is not None and now - first_error_at > GRACE_AFTER_ERROR:
                raise _Fault("error", self.stuck_after_error_message(finished))
            if now - started > self.runner.timeout:
                waiting = self.waiting_of(finished)  # read once: the message and the outcome agree
                raise _Fault("timeout", self.timeout_message(finished, waiting), waiting)
            time.sleep(POLL_SECONDS)

    def finished_ranks(self) -> List[int]:
        """Ranks whose reply AND all output arrived (ipyparallel: the reply future and its output
        future, resolved by the engine's "idle" status, which comes after the last output)."""
        return [rank for rank, future in self.futures.items() if future.done() and _output_done(future)]

    def metadata(self, rank: int) -> dict:
        output = getattr(self.futures[rank], "output", None)
        return getattr(output, "metadata", None) or {}

    def error_of(self, rank: int) -> Optional[str]:
        if rank in self.rank_errors:
            return self.rank_errors[rank]
        future = self.futures[rank]
        if not future.done():
            return None
        try:
            result = future.result()
        except BaseException as raised:  # a future may carry the error instead of returning it
            result = raised
        if isinstance(result, BaseException):
            self.rank_errors[rank] = format_remote_error(result)
            return self.rank_errors[rank]
        return None

    # ------------------------------------------------------------------------------ output

    def text(self, rank: int, name: str) -> str:
        return self.metadata(rank).get(name) or ""

    def stream_output(self, final: bool = False) -> None:
        for (rank, name), done in self.printed.items():
            text = self.text(rank, name)
            end = len(text) if final else text.rfind("\n", done) + 1
            if end > done:
                target = self.runner.echo if name == "stdout" else self.runner.errors
                target.write(prefix_lines(text[done:end], f"[rank {rank}] "))
                target.flush()
                self.printed[(rank, name)] = end

    def show_errors(self) -> None:
        by_text: Dict[str, List[int]] = {}
        for rank in self.cluster.ranks:
            error = self.error_of(rank)
            if error:
                by_text.setdefault(error, []).append(rank)
        for error, ranks in by_text.items():
            label = f"[rank {ranks[0]}] " if len(ranks) == 1 else f"[ranks {','.join(map(str, ranks))}] "
            self.runner.errors.write(prefix_lines(error, label))
        self.runner.errors.flush()

    def outcome(self, status: Optional[str] = None, message: Optional[str] = None,
                waiting: Optional[Dict[int, Optional[str]]] = None) -> CellOutcome:
        ranks = []
        for rank in self.cluster.ranks:
            stdout = self.text(rank, "stdout") + self.execute_result_text(rank)
            ranks.append(RankOutcome(rank, stdout, self.text(rank, "stderr"), self.error_of(rank)))
        if status is None:
            status = "error" if any(r.error for r in ranks) else "ok"
        elif message:
            for rank_outcome in ranks:
                rank_outcome.error = rank_outcome.error or message
        return CellOutcome(self.index, status, ranks, message, waiting or {})

    def execute_result_text(self, rank: int) -> str:
        result = self.metadata(rank).get("execute_result") or {}
        text = (result.get("data") or {}).get("text/plain")
        return f"{text}\n" if text else ""

    # ---------------------------------------------------------------------------- messages

    def last_output(self, rank: int, lines: int = 5) -> str:
        text = (self.text(rank, "stdout") + self.text(rank, "stderr")).strip()
        tail = text.splitlines()[-lines:]
        return " | ".join(tail) if tail else _("(no output)")

    def death_message(self, dead: Dict[int, str]) -> str:
        # Hydra's report names the rank that failed first. Wait longer for it when the death watch
        # saw several ranks go at once (hydra kills the rest within milliseconds): its order is a guess then.
        wait = 0.5 if self.cluster.first_death_is_certain() else 5.0
        reported = self.cluster.reported_failure(wait=wait)
        if reported is not None:
            culprit, how = reported
            dead = {**dead, culprit: how}
        else:
            culprit = next(iter(dead))  # dead_ranks() lists them in the order they went
        others = [r for r in self.cluster.ranks if r != culprit]
        if killed_by_sigkill(dead[culprit]) and self.cluster.ran_out_of_memory():
            dead = {**dead, culprit: _("{how}: the system ran out of memory; each of the {ranks} ranks holds its "
                                       "own copy of the notebook's data, try fewer ranks").format(
                how=dead[culprit], ranks=len(self.cluster.ranks))}
        return _("rank {rank} died during cell {cell} ({how}); its last output: "
                 "{output}. Stopped the other ranks ({others}).").format(
            rank=culprit, cell=self.index, how=dead[culprit], output=self.last_output(culprit),
            others=",".join(map(str, others)) or _("none"))

    def stuck_after_error_message(self, finished: List[int]) -> str:
        failed = [r for r in finished if self.error_of(r)]
        running = [r for r in self.cluster.ranks if r not in finished]
        first_line = _last_line(self.error_of(failed[0]))
        return _("rank {rank} failed in cell {cell} ({error}); {seconds} s later "
                 "{where}. Stopped all ranks.").format(
            rank=failed[0], cell=self.index, error=first_line, seconds=f"{GRACE_AFTER_ERROR:g}",
            where=self._where_running(running))

    def waiting_of(self, finished: List[int]) -> Dict[int, Optional[str]]:
        return {rank: self.cluster.collective_of(rank) for rank in self.cluster.ranks if rank not in finished}

    def timeout_message(self, finished: List[int], waiting: Dict[int, Optional[str]]) -> str:
        running = [r for r in self.cluster.ranks if r not in finished]
        where = self._where_running(running, waiting)
        seconds = f"{self.runner.timeout:g}"
        if not finished:
            return _("cell {cell} timed out after {seconds} s: {where}. Stopped all ranks.").format(
                cell=self.index, seconds=seconds, where=where)
        done = ",".join(map(str, finished))
        if any(waiting.values()):
            return _("cell {cell} timed out after {seconds} s: {where}; rank(s) {finished} finished the cell "
                     "(a rank that skips a collective leaves the others waiting in it). Stopped all ranks.").format(
                cell=self.index, seconds=seconds, where=where, finished=done)
        return _("cell {cell} timed out after {seconds} s: {where}; rank(s) {finished} finished the cell. "
                 "Stopped all ranks.").format(cell=self.index, seconds=seconds, where=where, finished=done)

    def _where_running(self, running: List[int], waiting: Optional[Dict[int, Optional[str]]] = None) -> str:
        stacks = self.cluster.stacks_of(running)
        parts = []
        for rank in running:
            collective = waiting[rank] if waiting is not None else self.cluster.collective_of(rank)
            line = _user_line(stacks.get(rank, ""))
            where = _(" at line {line} of the cell").format(line=line) if line else ""
            if collective:
                parts.append(_("rank {rank} waits in {collective}{where}").format(
                    rank=rank, collective=collective, where=where))
            else:
                parts.append(_("rank {rank} is still running{where}").format(rank=rank, where=where))
        return _("; ").join(parts)


class _ProgressFiles:
    """The ranks' progress files (``rank-{rank}.progress`` in the cluster's state directory), read
    only when their stat changed (each write replaces the file: a new inode and mtime) and reported
    only when their text did."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._stats: Dict[int, tuple] = {}
        self._texts: Dict[int, str] = {}

    def _stat(self, rank: int) -> Optional[tuple]:
        state_dir = self.cluster.state_dir
        if not state_dir:
            return None
        try:
            stat = os.stat(progress_path(state_dir, rank))
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def mark(self) -> None:
        """Take the files as they are now as already reported."""
        for rank in self.cluster.ranks:
            stat = self._stat(rank)
            if stat is not None and stat != self._stats.get(rank):
                self._stats[rank] = stat
                self._texts[rank] = self._read(rank) or ""

    def _read(self, rank: int) -> Optional[str]:
        try:
            with open(progress_path(self.cluster.state_dir, rank), encoding="utf-8") as stream:
                return stream.read()
        except (OSError, TypeError):
            return None

    def changes(self) -> List[tuple]:
        """(rank, data) for each rank whose progress changed since the last call (or mark)."""
        changed = []
        for rank in self.cluster.ranks:
            stat = self._stat(rank)
            if stat is None or stat == self._stats.get(rank):
                continue
            self._stats[rank] = stat
            text = self._read(rank)
            if not text or text == self._texts.get(rank):
                continue
            try:
                data = json.loads(text)
            except ValueError:
                continue
            if isinstance(data, dict):
                self._texts[rank] = text
                changed.append((rank, data))
        return changed


def _run_held_fixed(cluster: Cluster, notebook: Notebook, timeout: float, errors: TextIO, label: str,
                    shuffle_sites: Optional[list] = None, proof_steps: Optional[int] = None):
    """(records by rank, None), or (None, a not-observed Check) when a cell failed. The ranks'
    output is shown (prefixed with ``label``) only then."""
    from . import engine

    captured = io.StringIO()
    cluster.apply(engine.hold_randomness_fixed, True, shuffle_sites)
    runner = Runner(cluster, timeout=timeout, echo=captured, errors=captured, proof_steps=proof_steps)
    try:
        outcome = runner.run_notebook(notebook)
    finally:
        if runner.stopped_after is None:
            cluster.apply(engine.hold_randomness_fixed, False)
    failed = [cell for cell in outcome.cells if cell.status in ("error", "timeout")]
    if not failed:
        return runner.records, None
    errors.write(prefix_lines(captured.getvalue(), label))
    where = _("the single-card run") if cluster.n == 1 else _("the {ranks}-rank comparison run").format(ranks=cluster.n)
    return None, checks_module.Check(checks_module.SINGLE_CARD, checks_module.NOT_OBSERVED,
                                     _("{where} failed at cell {cell} ({status})").format(
                                         where=where, cell=failed[0].cell, status=cell_status_label(failed[0].status)),
                                     failed[0].cell)


def _held_shuffle_sites(records: Dict[int, List[dict]]) -> list:
    """The sites of the shuffles the ranks passed through (after their shard), for the single card."""
    sites = {tuple(r["site"]) for rank_records in records.values() for r in rank_records
             if r["kind"] == "held" and r["what"] == "shuffle"}
    return sorted(sites, key=repr)


def _output_done(future) -> bool:
    output = getattr(future, "output", None)
    return output is None or output.done()


def format_remote_error(error: BaseException) -> str:
    text = getattr(error, "traceback", None)
    if not text:
        render = getattr(error, "render_traceback", None)
        text = "\n".join(render()) if render else f"{type(error).__name__}: {error}"
    return _ANSI.sub("", text).rstrip() + "\n"


def prefix_lines(text: str, prefix: str) -> str:
    lines = text.splitlines()
    return "".join(f"{prefix}{line}\n" for line in lines)


def _last_line(text: Optional[str]) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else _("error")


def _user_line(stack: str) -> Optional[int]:
    found = _USER_FRAME.search(stack)  # faulthandler lists the innermost frame first
    return int(found.group(1)) if found else None


# ---------------------------------------------------------------------------------------- door


def detect_tf1(notebook: Notebook) -> bool:
    """Whether the ranks run in TF1 mode: the analyzer's decision (``tf_mode.py``), the one ``fix`` follows."""
    return analyze(notebook).tf1


def proof_steps_of(args) -> Optional[int]:
    """Proof mode's extra steps from ``--steps N`` (default 1), None with ``--full``."""
    if getattr(args, "full", False):
        return None
    steps = getattr(args, "steps", None)
    return DEFAULT_PROOF_STEPS if steps is None else steps


def program_setup(path: str, root: Optional[str], arguments: List[str]):
    """The cluster's setup for ``path`` in its project: its folder and root on the ranks' path, its
    arguments in ``sys.argv`` (the one-card reruns started from the cluster get it too)."""
    from ..project import find_root
    from . import engine

    folder = os.path.dirname(os.path.abspath(path))
    root = os.path.abspath(root) if root else find_root(path)
    paths = [folder] if root == folder else [folder, root]
    argv = [os.path.abspath(path), *arguments]

    def setup(cluster) -> None:
        cluster.apply(engine.enter_program, paths, argv)

    return setup


def run_command(args) -> int:
    try:
        notebook = load(args.path)
    except InputError as error:
        print(str(error), file=sys.stderr)
        return EXIT_INPUT
    if not notebook.is_python:
        print(_("{path}: not a Python notebook (language {language})").format(
            path=args.path, language=repr(notebook.language)), file=sys.stderr)
        return EXIT_INPUT
    if args.ranks < 1:
        print(_("{path}: -n must be at least 1").format(path=args.path), file=sys.stderr)
        return EXIT_INPUT
    started = time.monotonic()
    json_output = args.format == "json"
    tf1 = bool(args.tf1) or detect_tf1(notebook)
    cluster = Cluster(n=args.ranks, profile=getattr(args, "profile", None), tf1=tf1,
                      setup=program_setup(args.path, getattr(args, "root", None), getattr(args, "arguments", [])))
    try:
        try:
            cluster.start()
        except ClusterError as error:
            print(_("npu-migrate-nb run: the cluster could not start: {error}").format(error=error), file=sys.stderr)
            return EXIT_INPUT
        echo = sys.stderr if json_output else sys.stdout
        runner = Runner(cluster, timeout=args.timeout, echo=echo, errors=sys.stderr, proof_steps=proof_steps_of(args))
        result = runner.run_notebook(notebook)
        failed = result.failed_cell
        if failed is not None and not getattr(args, "no_one_card", False) and cluster.profile is None:
            cluster.stop()  # its cores go to the one-card rerun
            print(_("cell {cell} failed on the ranks: rerunning the cells up to it on one card...").format(
                cell=failed.cell), file=sys.stderr)
            result.one_card = rerun_on_one_card(notebook, failed.cell, cluster, bound_for(result.elapsed_s),
                                                proof_steps=runner.proof_steps)
        if getattr(args, "compare_single_card", False):
            # the ranks' cores go to the single-card run once the ranks' comparison run is over
            result.single_card = runner.compare_single_card(notebook, result, stop_ranks=True)
    finally:
        cluster.stop()
    result.elapsed_s = time.monotonic() - started  # the whole run, cluster start and stop included
    if json_output:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render_text(result))
    return EXIT_OK if result.ok else EXIT_FAILED


def shortened_lines(result: RunResult) -> List[str]:
    """What proof mode did: per training call, the steps taken of those written; or that it trained as written."""
    if result.proof_steps is None:
        return [_("trained as written (--full)")]
    if not result.shortened:
        return [_("proof mode: no training call needed shortening")]
    lines = [_("proof mode (every training call stops once the checks are decided, after at most {steps} more "
               "step(s); --full trains as written):").format(steps=result.proof_steps)]
    for record in result.shortened:
        lines.append("  " + shortened_text(record))
    if any(not record.get("ran_as_written") for record in result.shortened):
        lines.append(_("  the cells after a shortened call ran on a model trained for those steps"))
    return lines


def shortened_text(record: dict) -> str:
    written = record.get("written")
    taken = f"{record['taken']:,}"
    if record.get("ran_as_written"):
        return _("cell {cell}, {what}: ran as written ({steps} steps): {why}").format(
            cell=record.get("cell"), what=record["source"], steps=taken, why=record["ran_as_written"])
    if record.get("unit") == "trials":
        if written is None:
            return _("cell {cell}, {what}: {taken} trials, stopped once the checks were decided").format(
                cell=record.get("cell"), what=record["source"], taken=taken)
        return _("cell {cell}, {what}: {taken} of {written} trials, stopped once the checks were decided").format(
            cell=record.get("cell"), what=record["source"], taken=taken, written=f"{written:,}")
    if written is None:
        return _("cell {cell}, {what}: {taken} steps, stopped once the checks were decided").format(
            cell=record.get("cell"), what=record["source"], taken=taken)
    return _("cell {cell}, {what}: {taken} of {written} steps, stopped once the checks were decided").format(
        cell=record.get("cell"), what=record["source"], taken=taken, written=f"{written:,}")


def render_text(result: RunResult) -> str:
    header = (_("cells ({ranks} ranks, TF1 mode):") if result.tf1 else _("cells ({ranks} ranks):")).format(
        ranks=result.ranks)
    lines = ["", header]
    for cell in result.cells:
        status = cell_status_label(cell.status)
        if cell.message and cell.status != "skipped":
            lines.append(_("  cell {cell}: {status}: {message}").format(cell=cell.cell, status=status,
                                                                        message=cell.message))
        else:
            lines.append(_("  cell {cell}: {status}").format(cell=cell.cell, status=status))
    if result.one_card is not None:
        lines.append(_("  one card: {detail}").format(detail=result.one_card.detail))
    lines.extend(shortened_lines(result))
    if result.file_clashes:
        lines.append(_("files written by several ranks:"))
        lines.extend(f"  {checks_module.clash_text(clash)}" for clash in result.file_clashes)
    lines.append(_("checks:"))
    for name, check in result.checks.items():
        lines.append(f"  {i18n.ljust(checks_module.check_label(name), 10)} "
                     f"{i18n.ljust(checks_module.status_label(check.status), 13)} {check.detail}")
    if result.single_card is not None:
        lines.append(_("single-card math: {status} {detail}").format(
            status=i18n.ljust(checks_module.status_label(result.single_card.status), 13), detail=result.single_card.detail))
    else:
        lines.append(_("single-card math: skipped (--compare-single-card runs the notebook on one card at the same "
                       "global batch and compares the final weights)"))
    verdict = _("ok in {seconds} s") if result.ok else _("FAILED in {seconds} s")
    lines.append(verdict.format(seconds=f"{result.elapsed_s:.1f}"))
    return "\n".join(lines)
