"""One kernel's simulated cluster: started on demand, stateful across cells, stopped on request.

The notebook doors (``%npu_cluster``, ``%%npu_distribute --run``) hold one ``ClusterSession``. It
owns a :class:`.cluster.Cluster` and the :class:`.runner.Runner` that runs cells on it, so the
run-time checks accumulate across the cells run so far, as in ``npu-migrate-nb run``.

When a cell fails on the ranks, the session reruns the cells run on them so far, up to the failed
one, on one card in the background (:class:`OneCardCheck`, over :mod:`.one_card`): the doors show
whether it fails there too while the kernel goes on.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import i18n
from ..i18n import N_, _
from ..notebook import Cell, Notebook
from . import checks as checks_module
from .cluster import Cluster
from .one_card import UNKNOWN, OneCard, OneCardRerun, bound_for
from . import DEFAULT_PROOF_STEPS
from .runner import CellOutcome, Runner, cell_status_label

DEFAULT_RANKS = 2
DEFAULT_TIMEOUT = 300.0


class SessionError(RuntimeError):
    """A request the session cannot serve as asked (one line for the user)."""


class _CurrentStream:
    """Writes to whatever ``sys.stdout``/``sys.stderr`` is when written to: the kernel points them
    at the cell being run, and ``%%capture`` replaces them."""

    def __init__(self, name: str):
        self.name = name

    def write(self, text: str) -> int:
        return getattr(sys, self.name).write(text)

    def flush(self) -> None:
        getattr(sys, self.name).flush()


@dataclass
class _Ran:
    index: int
    source: str
    status: str
    seconds: float


_FAILED = ("error", "timeout")
# How a rank's state and the way the ranks were lost are shown to a person (the keys stay English data).
_RANK_STATES = {"idle": N_("idle"), "busy": N_("busy"), "dead": N_("dead"), "stopped": N_("stopped")}
_LOST = {"error": N_("error"), "timeout": N_("timeout"), "interrupted": N_("interrupted")}
_live_checks: "weakref.WeakSet[OneCardCheck]" = weakref.WeakSet()


class OneCardCheck:
    """The one-card rerun after a cell failed on the ranks, as the doors see it: in the background,
    future-like as ipyparallel's AsyncResult (``done()``, ``result(timeout)``, ``add_done_callback``),
    and ``cancel()`` stops it and its rank. ``text`` is its line for a person; ``shown``: a door has
    shown the verdict (the next magic says it otherwise)."""

    def __init__(self, cells: Sequence[Tuple[int, str]], cell: int, like: Cluster, bound: float, directory: str,
                 proof_steps: Optional[int] = None):
        self.cell = cell
        self.bound = bound
        self.shown = False
        self._future: Future = Future()
        self._future.set_running_or_notify_cancel()
        notebook = Notebook(os.path.join(directory, "kernel.ipynb"),
                            [Cell(index, "code", source) for index, source in cells])
        _live_checks.add(self)
        self._rerun = OneCardRerun(notebook, cell, like, bound, proof_steps)
        threading.Thread(target=self._wait, name="npu-sim-one-card-wait", daemon=True).start()

    def _wait(self) -> None:
        self._settle(self._rerun.result())

    def _settle(self, answer: OneCard) -> None:
        try:
            self._future.set_result(answer)
        except InvalidStateError:  # stopped first: the rerun's own end is not the verdict
            pass
        _live_checks.discard(self)

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: Optional[float] = None) -> OneCard:
        """The verdict; ``concurrent.futures.TimeoutError`` if it is not known within ``timeout``."""
        return self._future.result(timeout)

    def add_done_callback(self, callback: Callable[["OneCardCheck"], None]) -> None:
        """``callback(self)`` once the verdict is known: at once if it is, else in the rerun's thread."""
        self._future.add_done_callback(lambda _future: callback(self))

    def cancel(self) -> None:
        """Stop the rerun and its rank now (no process is left); the verdict is then "not known"."""
        if self.done():
            return
        self._settle(OneCard(self.cell, UNKNOWN, _("not known: the one-card rerun was stopped")))
        self._rerun.cancel()

    @property
    def text(self) -> str:
        if not self.done():
            return _("one card: rerunning the cells up to cell {cell} at rank size 1 in the background "
                     "(at most {seconds} s)...").format(cell=self.cell, seconds=f"{self.bound:.0f}")
        return _("one card: {detail}").format(detail=self.result().detail)


@atexit.register
def _cancel_live_checks() -> None:
    """At the kernel's exit, no one-card rerun goes on (its cluster's watchdog is the backstop)."""
    for check in list(_live_checks):
        try:
            check.cancel()
        except Exception:
            pass


@dataclass
class RankStatus:
    rank: int
    pid: Optional[int]
    state: str  # "idle" | "busy" | "dead" | "stopped"


class ClusterSession:
    def __init__(self, echo=None, errors=None):
        self.cluster: Optional[Cluster] = None
        self.runner: Optional[Runner] = None
        self.echo = echo if echo is not None else _CurrentStream("stdout")
        self.errors = errors if errors is not None else _CurrentStream("stderr")
        self.cells_run: List[Tuple[int, str]] = []  # (cell index, status) in the order run
        self._ran: List[_Ran] = []  # the same with each cell's source and time, for the one-card rerun
        self.directory: Optional[str] = None
        self.one_card: Optional[OneCardCheck] = None  # the rerun after the last cell that failed
        self.timeout = DEFAULT_TIMEOUT
        self.progress: Optional[Callable[[int, dict], None]] = None
        # Why the ranks are gone when a fault or an interrupt stopped them: their state is lost, so
        # nothing starts new ranks behind the user's back until they say so.
        self.lost: Optional[str] = None

    # ------------------------------------------------------------------------------ life cycle

    @property
    def running(self) -> bool:
        return self.cluster is not None and self.cluster.started

    @property
    def ranks(self) -> int:
        return self.cluster.n if self.cluster is not None else 0

    def start(self, n: int = DEFAULT_RANKS, profile: Optional[str] = None, tf1: bool = False,
              timeout: Optional[float] = None, directory: Optional[str] = None) -> Cluster:
        """Start ``n`` ranks (a running cluster is stopped first: its state is lost)."""
        self.stop()
        self.lost = None
        cluster = Cluster(n=n, profile=profile, tf1=tf1)
        cluster.start()  # ClusterError: the caller says it in one line
        self.cluster = cluster
        self.timeout = timeout if timeout is not None else self.timeout
        self.runner = Runner(cluster, timeout=self.timeout, echo=self.echo, errors=self.errors,
                             progress=self._on_progress)
        self.runner._reset_probes()
        self.directory = directory or os.getcwd()
        self.runner._enter_directory(self.directory)
        self.cells_run = []
        self._ran = []
        self.one_card = None
        return cluster

    def _on_progress(self, rank: int, data: dict) -> None:
        if self.progress is not None:
            self.progress(rank, data)

    def stop(self) -> None:
        """Stop the ranks, and the one-card rerun if one is going on."""
        if self.one_card is not None:
            self.one_card.cancel()
        if self.cluster is not None:
            self.cluster.stop()
        self.cluster = None

    def ensure(self, n: Optional[int], tf1: bool = False, profile: Optional[str] = None) -> Cluster:
        """The running cluster, started with ``n`` ranks (default 2) when there is none."""
        if self.running:
            if n is not None and n != self.cluster.n:
                raise SessionError(
                    _("the simulated cluster has {ranks} ranks, not {n}: "
                      "%npu_cluster start -n {n} --replay moves the cells run so far to {n} ranks").format(
                        ranks=self.cluster.n, n=n)
                )
            return self.cluster
        if self.lost is not None:
            raise SessionError(_("{lost}; %npu_cluster start --replay starts new ranks and runs the cells "
                                 "run so far on them").format(lost=self.lost))
        return self.start(n or DEFAULT_RANKS, profile=profile, tf1=tf1)

    # ----------------------------------------------------------------------------------- cells

    def run_cell(self, index: int, source: str, timeout: Optional[float] = None, one_card: bool = True,
                 proof_steps: Optional[int] = DEFAULT_PROOF_STEPS) -> CellOutcome:
        """Run a cell on the ranks. ``one_card``: when it fails there, rerun the cells up to it on one
        card in the background (``self.one_card``). ``proof_steps``: proof mode (None: train as written)."""
        if not self.running or self.runner is None:
            raise SessionError(_("no simulated cluster is running: %npu_cluster start [-n N]"))
        self.runner.timeout = timeout if timeout is not None else self.timeout
        if proof_steps != self.runner.proof_steps:
            self.runner.set_proof(proof_steps)
        started = time.monotonic()
        try:
            outcome = self.runner.run_cell(index, source)
        except KeyboardInterrupt:
            self._note_lost(index, "interrupted")
            raise
        if outcome.status in _FAILED and not self.cluster.started:
            self._note_lost(index, outcome.status)
        self.cells_run.append((index, outcome.status))
        self._ran.append(_Ran(index, source, outcome.status, time.monotonic() - started))
        if outcome.status in _FAILED and one_card:
            self._rerun_on_one_card()
        return outcome

    def _rerun_on_one_card(self) -> None:
        """The cells that ran on these ranks without failing, then the one that just failed, on one
        rank with the cluster's settings, in the background; the previous rerun is stopped. Not for
        a cluster of one rank (it is one card) nor one of a profile (it runs elsewhere)."""
        if self.one_card is not None:
            self.one_card.cancel()
            self.one_card = None
        like = self.runner.cluster  # kept by the runner after a fault stopped the ranks
        if like.n == 1 or like.profile is not None:
            return
        failed = self._ran[-1]
        cells = [ran for ran in self._ran[:-1] if ran.status == "ok"] + [failed]
        bound = bound_for(sum(ran.seconds for ran in cells))
        self.one_card = OneCardCheck([(ran.index, ran.source) for ran in cells], failed.index, like, bound,
                                     self.directory or os.getcwd(), self.runner.proof_steps)

    def shortened_in(self, cell: int) -> List[dict]:
        """The training calls proof mode shortened in ``cell`` (rank 0's records)."""
        if self.runner is None:
            return []
        return [record for record in self.runner.shortened() if record.get("cell") == cell]

    def one_card_text(self) -> Optional[str]:
        """The one-card line (rerunning, or its verdict, which then counts as shown), None when no
        cell failed."""
        check = self.one_card
        if check is None:
            return None
        if check.done():
            check.shown = True
        return check.text

    def unshown_one_card(self) -> Optional[str]:
        """The verdict, once, if it came and no door has shown it yet."""
        check = self.one_card
        if check is None or check.shown or not check.done():
            return None
        return self.one_card_text()

    def _note_lost(self, index: int, what: str) -> None:
        self.cluster = None  # the runner stopped every rank
        self.lost = _("the ranks were stopped at cell {cell} ({what})").format(
            cell=index, what=_(_LOST[what]) if what in _LOST else what)

    def replay(self, cells: Sequence[Tuple[int, str]]) -> List[CellOutcome]:
        """Run ``cells`` in order, stopping at the first that fails (like Run All)."""
        outcomes = []
        for index, source in cells:
            outcome = self.run_cell(index, source)
            outcomes.append(outcome)
            if outcome.status in _FAILED:
                break
        return outcomes

    def pull(self, expression: str) -> list:
        """The value of ``expression`` on every rank, in rank order (for plots: each rank's losses)."""
        if not self.running:
            raise SessionError(_("no simulated cluster is running: %npu_cluster start [-n N]"))
        return self.cluster.apply(_evaluate_in_rank, expression)

    def reset_checks(self) -> None:
        """Forget the observations so far (the checks judge the first training they see); the ranks
        keep their variables and state."""
        from . import probes

        if self.runner is None or not self.running:
            raise SessionError(_("no simulated cluster is running: %npu_cluster start [-n N]"))
        self.runner.records = {rank: [] for rank in self.cluster.ranks}
        self.cluster.apply(probes.reset)

    def checks(self) -> Dict[str, checks_module.Check]:
        if self.runner is None:
            return {}
        return self.runner.evaluate_checks()

    # ---------------------------------------------------------------------------------- status

    def rank_statuses(self) -> List[RankStatus]:
        if self.cluster is None:
            return []
        dead = self.cluster.dead_ranks()
        busy = self._busy_ranks()
        statuses = []
        for rank in self.cluster.ranks:
            pid = self.cluster.rank_pids.get(rank)
            state = "dead" if rank in dead else ("busy" if rank in busy else "idle")
            statuses.append(RankStatus(rank, pid, state))
        return statuses

    def _busy_ranks(self) -> set:
        """Ranks with work queued or running. Every request to the ranks comes from this session's
        client, so none is busy while it awaits no reply: the hub's counts can lag behind replies the
        client already has (ipyparallel 9.0 still listed a rank's first request a moment after it ended)."""
        client = self.cluster.client
        if not client.outstanding:
            return set()
        try:
            queue = client.queue_status()
        except Exception:
            return set()
        return {engine for engine, state in queue.items()
                if isinstance(state, dict) and (state.get("queue") or state.get("tasks"))}

    def status_text(self) -> str:
        lines = [self._cluster_text()]
        one_card = self.one_card_text()
        if one_card is not None:
            lines.append(one_card)
        return "\n".join(lines)

    def _cluster_text(self) -> str:
        if not self.running:
            if self.lost:
                return _("no simulated cluster is running ({lost}) (%npu_cluster start [-n N])").format(lost=self.lost)
            return _("no simulated cluster is running (%npu_cluster start [-n N])")
        cluster = self.cluster
        header = (_("simulated cluster: {ranks} ranks (TF1 mode), job {job}, rank table {rank_table}") if cluster.tf1
                  else _("simulated cluster: {ranks} ranks, job {job}, rank table {rank_table}"))
        lines = [header.format(ranks=cluster.n, job=cluster.job_id, rank_table=cluster.rank_table_path)]
        for status in self.rank_statuses():
            lines.append(_("  rank {rank}: {state}, pid {pid}").format(
                rank=status.rank, state=_(_RANK_STATES.get(status.state, status.state)), pid=status.pid))
        if self.cells_run:
            done = ", ".join(f"{index} {cell_status_label(status)}" for index, status in self.cells_run)
            lines.append(_("cells run on the ranks: {cells}").format(cells=done))
        else:
            lines.append(_("no cell has run on the ranks yet"))
        return "\n".join(lines)


def checks_text(checks: Dict[str, checks_module.Check]) -> str:
    if not checks:
        return _("checks: nothing has run on the simulated ranks yet")
    lines = [_("checks:")]
    for name, check in checks.items():
        lines.append(f"  {i18n.ljust(checks_module.check_label(name), 10)} "
                     f"{i18n.ljust(checks_module.status_label(check.status), 13)} {check.detail}")
    return "\n".join(lines)


def _evaluate_in_rank(expression):
    """Runs in a rank: ``expression`` in the namespace the cells ran in."""
    from IPython import get_ipython

    return eval(expression, get_ipython().user_ns)
