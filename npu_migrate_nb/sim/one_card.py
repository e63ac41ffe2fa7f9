"""After a cell fails on the ranks: does it fail on one card too?

A cell that fails on N ranks either fails the same way on one card (a problem of the notebook or of
this machine, not of the distributed steps) or runs there (the distributed run breaks it: a rank
waiting in a collective the others skipped, ranks writing the same file, a step only the ranks
take). :func:`rerun_on_one_card` reruns the cells up to the failed one on a fresh cluster of one rank
(rank size 1: the adapter's APIs are no-ops, as on one card) within a time bound and says which, in a
scratch copy of the notebook's folder as it was before the ranks wrote in it;
:class:`OneCardRerun` does it in a thread, so that a notebook door can go on and show the answer
when it comes.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from typing import Optional

from .. import i18n
from ..i18n import _
from ..notebook import Notebook
from .cluster import Cluster, ClusterError

FAILS = "fails"  # fails on one card too: not a distribution problem
RUNS = "runs"  # runs on one card: the distributed run breaks it
UNKNOWN = "unknown"  # the rerun could not tell within its bound
MIN_BOUND_SECONDS = 60.0


@dataclass
class OneCard:
    cell: int  # the cell that failed on the ranks
    status: str  # FAILS | RUNS | UNKNOWN
    detail: str  # one line for a person
    after_cut: bool = False  # failed after proof mode cut a training short: --full may run it
    out_of_time: bool = False  # UNKNOWN because one card did not get through the cells within the bound

    def to_json(self) -> dict:
        return {"cell": self.cell, "status": self.status, "detail": self.detail, "after_cut": self.after_cut}


def bound_for(seconds_on_ranks: float) -> float:
    """How long the rerun may take: twice what the ranks took to reach the failure (one rank gets
    every core, and does every rank's share), and at least a minute for a cluster to start."""
    return max(MIN_BOUND_SECONDS, 2.0 * seconds_on_ranks)


def rerun_on_one_card(notebook: Notebook, cell: int, like: Cluster, bound: float,
                      stop: Optional[threading.Event] = None, single: Optional[Cluster] = None,
                      proof_steps: Optional[int] = None) -> OneCard:
    """Run ``notebook``'s cells up to ``cell`` on one rank with ``like``'s settings (mode, seeds,
    setup), stopping at the first that fails, within ``bound`` seconds in all. ``single``: the
    one-rank cluster to use (made from ``like`` when not given); it is stopped on the way out.
    ``proof_steps``: the ranks' proof mode (None: trained as written), so that a cell failing because
    training was cut short fails on one card too, and is told apart as such."""
    from .runner import Runner

    deadline = time.monotonic() + bound
    single = single or like.with_ranks(1)
    scratch = folder_as_before(os.path.dirname(os.path.abspath(notebook.path)), getattr(like, "folder_before", None))
    notebook = replace(notebook, path=os.path.join(scratch, os.path.basename(notebook.path)))
    try:
        try:
            single.start()
        except ClusterError as error:
            return OneCard(cell, UNKNOWN, _("not known: the one-card rerun could not start ({error})").format(
                error=error))
        captured = io.StringIO()
        runner = Runner(single, echo=captured, errors=captured, proof_steps=proof_steps)
        runner.prepare_for(notebook)
        for each in notebook.cells:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                return _out_of_time(cell, bound)
            runner.timeout = remaining
            outcome = runner.run_cell(each.index, each.source, each.cell_type)
            if outcome.status == "timeout":
                return _out_of_time(cell, bound)
            if outcome.status == "error":
                text = _fails_text(cell, each.index, outcome)
                after_cut = proof_steps is not None and bool(runner.shortened())
                if after_cut:
                    text += _(" (in proof mode: training was cut short, which a cell checking accuracy may not "
                              "accept: --full trains as written)")
                return OneCard(cell, FAILS, text, after_cut)
            if each.index == cell:  # in the order run: a kernel's replayed cells keep their execution counts
                break
        return OneCard(cell, RUNS, _("runs on one card: the distributed run breaks it (cells up to {cell} ran "
                                     "at rank size 1)").format(cell=cell))
    finally:
        single.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def folder_as_before(folder: str, before) -> str:
    """A scratch folder that holds ``folder``'s entries as links, leaving out those the distributed
    run made (``before``: (folder, the names it held when the run started)): one card starts where
    the ranks started, not where they left off (a notebook's ``os.mkdir`` would fail on their folder)."""
    scratch = tempfile.mkdtemp(prefix="npu-one-card-")
    try:
        entries = os.listdir(folder)
    except OSError:
        return scratch
    if before is not None and before[0] == folder:
        entries = [name for name in entries if name in before[1]]
    for name in entries:
        try:
            os.symlink(os.path.join(folder, name), os.path.join(scratch, name))
        except OSError:
            continue
    return scratch


def _fails_text(cell: int, failed_at: int, outcome) -> str:
    error = next((rank.error for rank in outcome.ranks if rank.error), None) or outcome.message or _("error")
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    where = (_("cell {cell}") if failed_at == cell else _("already at cell {cell}")).format(cell=failed_at)
    return _("fails on one card too: not a distribution problem ({where}: {error})").format(
        where=where, error=lines[-1] if lines else _("error"))


def _out_of_time(cell: int, bound: float) -> OneCard:
    return OneCard(cell, UNKNOWN, _("not known: the one-card rerun up to cell {cell} did not finish within {seconds} s")
                   .format(cell=cell, seconds=f"{bound:.0f}"), out_of_time=True)


class OneCardRerun:
    """:func:`rerun_on_one_card` in a thread of its own; ``result(wait)`` is its answer once done."""

    def __init__(self, notebook: Notebook, cell: int, like: Cluster, bound: float, proof_steps: Optional[int] = None):
        self.cell = cell
        self._proof_steps = proof_steps
        self._stop = threading.Event()
        self._single = like.with_ranks(1)
        self._answer: Optional[OneCard] = None
        self._language = i18n.current()  # a thread starts without the caller's language: pass it on
        self._thread = threading.Thread(target=self._run, args=(notebook, cell, like, bound),
                                        name="npu-sim-one-card", daemon=True)
        self._thread.start()

    def _run(self, notebook, cell, like, bound) -> None:
        with i18n.language(self._language):
            try:
                self._answer = rerun_on_one_card(notebook, cell, like, bound, self._stop, self._single,
                                                 proof_steps=self._proof_steps)
            except Exception as error:  # the answer is a courtesy: never an exception in the door
                self._answer = OneCard(cell, UNKNOWN, _("not known: the one-card rerun failed ({kind}: {error})").format(
                    kind=type(error).__name__, error=error))

    def result(self, wait: Optional[float] = None) -> Optional[OneCard]:
        self._thread.join(wait)
        return self._answer

    def cancel(self) -> None:
        """Stop the rerun and its rank now (no process is left behind); ``result`` is then UNKNOWN."""
        self._stop.set()
        self._single.stop()
        self._thread.join(10.0)
