"""One kernel's simulated cluster: started on demand, stateful across cells, stopped on request.

The notebook doors (``%npu_cluster``, ``%%npu_distribute --run``) hold one ``ClusterSession``. It
owns a :class:`.cluster.Cluster` and the :class:`.runner.Runner` that runs cells on it, so the
run-time checks accumulate across the cells run so far, as in ``npu-migrate-nb run``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import checks as checks_module
from .cluster import Cluster
from .runner import CellOutcome, Runner

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
        self.runner._enter_directory(directory or os.getcwd())
        self.cells_run = []
        return cluster

    def _on_progress(self, rank: int, data: dict) -> None:
        if self.progress is not None:
            self.progress(rank, data)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        self.cluster = None

    def ensure(self, n: Optional[int], tf1: bool = False, profile: Optional[str] = None) -> Cluster:
        """The running cluster, started with ``n`` ranks (default 2) when there is none."""
        if self.running:
            if n is not None and n != self.cluster.n:
                raise SessionError(
                    f"the simulated cluster has {self.cluster.n} ranks, not {n}: "
                    f"%npu_cluster start -n {n} --replay moves the cells run so far to {n} ranks"
                )
            return self.cluster
        if self.lost is not None:
            raise SessionError(f"{self.lost}; %npu_cluster start --replay starts new ranks and runs the cells "
                               "run so far on them")
        return self.start(n or DEFAULT_RANKS, profile=profile, tf1=tf1)

    # ----------------------------------------------------------------------------------- cells

    def run_cell(self, index: int, source: str, timeout: Optional[float] = None) -> CellOutcome:
        if not self.running or self.runner is None:
            raise SessionError("no simulated cluster is running: %npu_cluster start [-n N]")
        self.runner.timeout = timeout if timeout is not None else self.timeout
        try:
            outcome = self.runner.run_cell(index, source)
        except KeyboardInterrupt:
            self._note_lost(index, "interrupted")
            raise
        if outcome.status in ("error", "timeout") and not self.cluster.started:
            self._note_lost(index, outcome.status)
        self.cells_run.append((index, outcome.status))
        return outcome

    def _note_lost(self, index: int, what: str) -> None:
        self.cluster = None  # the runner stopped every rank
        self.lost = f"the ranks were stopped at cell {index} ({what})"

    def replay(self, cells: Sequence[Tuple[int, str]]) -> List[CellOutcome]:
        """Run ``cells`` in order, stopping at the first that fails (like Run All)."""
        outcomes = []
        for index, source in cells:
            outcome = self.run_cell(index, source)
            outcomes.append(outcome)
            if outcome.status in ("error", "timeout"):
                break
        return outcomes

    def pull(self, expression: str) -> list:
        """The value of ``expression`` on every rank, in rank order (for plots: each rank's losses)."""
        if not self.running:
            raise SessionError("no simulated cluster is running: %npu_cluster start [-n N]")
        return self.cluster.view.apply_sync(_evaluate_in_rank, expression)

    def reset_checks(self) -> None:
        """Forget the observations so far (the checks judge the first training they see); the ranks
        keep their variables and state."""
        from . import probes

        if self.runner is None or not self.running:
            raise SessionError("no simulated cluster is running: %npu_cluster start [-n N]")
        self.runner.records = {rank: [] for rank in self.cluster.ranks}
        self.cluster.view.apply_sync(probes.reset)

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
        try:
            queue = self.cluster.client.queue_status()
        except Exception:
            return set()
        return {engine for engine, state in queue.items()
                if isinstance(state, dict) and (state.get("queue") or state.get("tasks"))}

    def status_text(self) -> str:
        if not self.running:
            return "no simulated cluster is running (%npu_cluster start [-n N])"
        cluster = self.cluster
        lines = [f"simulated cluster: {cluster.n} ranks{' (TF1 mode)' if cluster.tf1 else ''}, "
                 f"job {cluster.job_id}, rank table {cluster.rank_table_path}"]
        for status in self.rank_statuses():
            lines.append(f"  rank {status.rank}: {status.state}, pid {status.pid}")
        if self.cells_run:
            done = ", ".join(f"{index} {status}" for index, status in self.cells_run)
            lines.append(f"cells run on the ranks: {done}")
        else:
            lines.append("no cell has run on the ranks yet")
        return "\n".join(lines)


def checks_text(checks: Dict[str, checks_module.Check]) -> str:
    if not checks:
        return "checks: nothing has run on the simulated ranks yet"
    lines = ["checks:"]
    for name, check in checks.items():
        lines.append(f"  {name:<10} {check.status:<13} {check.detail}")
    return "\n".join(lines)


def _evaluate_in_rank(expression):
    """Runs in a rank: ``expression`` in the namespace the cells ran in."""
    from IPython import get_ipython

    return eval(expression, get_ipython().user_ns)
