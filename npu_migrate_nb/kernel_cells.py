"""The cells this kernel has run, as the analyzer's notebook: the context ``%%npu_distribute`` is
analyzed in (a ``model_fn`` from an earlier cell, the ``import npu_device as npu`` at the top).

A cell run again replaces its earlier run: JupyterLab and Notebook 7 send each cell's id with its
execution (IPython hands it to ``pre_run_cell``), and cells the frontend reports deleted are
dropped. Where no id comes (a terminal), a run is identified by its text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .i18n import _
from .notebook import Cell, Notebook

KERNEL_PATH = "<kernel>"


@dataclass
class ExecutedCell:
    source: str
    execution_count: Optional[int]
    cell_id: Optional[str] = None

    @property
    def label(self) -> str:
        return _("cell [{count}]").format(count=self.execution_count) if self.execution_count else _("this cell")


class ExecutedCells:
    def __init__(self, shell=None):
        self._cells: Dict[str, ExecutedCell] = {}  # key -> cell, in the order first run
        self.current: Optional[ExecutedCell] = None
        self.paused = False  # True while a magic runs a cell's code itself (a nested run_cell)
        self._shell = shell
        if shell is not None:
            self._seed_from_history(shell)

    def _seed_from_history(self, shell) -> None:
        """Cells run before the extension was loaded (the loading cell included), by text."""
        history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
        for number, source in enumerate(history):
            if number and source.strip():
                self.record(source, number)

    # ------------------------------------------------------------------------------ recording

    def record(self, source: str, execution_count: Optional[int], cell_id: Optional[str] = None,
               deleted: Tuple[str, ...] = ()) -> ExecutedCell:
        for gone in deleted:
            self._cells.pop(f"id:{gone}", None)
        key = f"id:{cell_id}" if cell_id else _text_key(source)
        if cell_id:
            self._cells.pop(_text_key(source), None)  # the same cell, seen before its id was known
        cell = ExecutedCell(source, execution_count, cell_id)
        self._cells[key] = cell  # a cell run again keeps its place: the notebook's order, as far as known
        self.current = cell
        return cell

    def pre_run_cell(self, info) -> None:
        """IPython's ``pre_run_cell`` event: note the cell about to run."""
        if self.paused or getattr(info, "silent", False):
            return  # the magic running a cell's code, or a frontend's silent request: no cell of the notebook
        metadata = _request_metadata(self._shell)
        deleted = tuple(str(cell) for cell in metadata.get("deletedCells") or () if isinstance(cell, str))
        count = running_cell_number(self._shell) if getattr(info, "store_history", True) else None
        self.record(info.raw_cell, count, getattr(info, "cell_id", None) or metadata.get("cellId"), deleted)

    def replace_current(self, source: str) -> None:
        """The current cell now reads ``source`` (``--apply`` replaced it)."""
        if self.current is None:
            return
        for key, cell in self._cells.items():
            if cell is self.current:
                self.current.source = source
                if key.startswith("text:"):
                    del self._cells[key]
                    self._cells[_text_key(source)] = self.current
                return

    # ---------------------------------------------------------------------------------- views

    @property
    def cells(self) -> List[ExecutedCell]:
        return list(self._cells.values())

    def notebook(self, current_source: Optional[str] = None) -> Tuple[Notebook, int, Dict[int, str]]:
        """The cells so far as a notebook, the index of the current cell in it, and each cell's label
        (``cell [N]``, N its execution count). A current cell that was not recorded (a magic called
        from code) is added last."""
        cells = self.cells
        current = self.current if self.current in cells else None
        if current_source is not None and (current is None or not _same_text(current.source, current_source)):
            current = ExecutedCell(current_source, None)
            cells.append(current)
        notebook = Notebook(KERNEL_PATH, [Cell(i, "code", cell.source) for i, cell in enumerate(cells)])
        index = cells.index(current) if current is not None else len(cells) - 1
        return notebook, index, {number: cell.label for number, cell in enumerate(cells)}

    def labelled(self) -> List[Tuple[int, ExecutedCell]]:
        return list(enumerate(self.cells))


_NOT_RUN_OPTIONS = frozenset({"--check", "--diff", "-h", "--help"})


def ran_in_kernel(source: str) -> bool:
    """False for a ``%%npu_distribute --check``/``--diff`` cell: its code was analyzed, never run (it
    stays part of the analysis context, as what the user is writing, but is not replayed on ranks)."""
    first = source.lstrip().split("\n", 1)[0]
    return not (first.startswith("%%npu_distribute") and _NOT_RUN_OPTIONS & set(first.split()[1:]))


def _same_text(recorded: str, rebuilt: str) -> bool:
    """IPython hands a cell magic its body with a newline added: compare without trailing ones."""
    return recorded.rstrip("\n") == rebuilt.rstrip("\n")


def _text_key(source: str) -> str:
    """A cell known by its text only: the same code under other ``%%npu_distribute`` options (``--check``,
    then ``--apply``) is the same cell."""
    first, newline, rest = source.lstrip().partition("\n")
    code = rest if first.startswith("%%npu_distribute") else source
    return f"text:{code}"


def running_cell_number(shell) -> Optional[int]:
    """N of the ``In [N]`` the frontend shows beside the running cell. IPython 9 adds one to
    ``execution_count`` before a cell runs (ipython#15088), earlier releases after it; the display
    hook's ``prompt_count``, which numbers the cell's ``Out[N]``, is that N under both."""
    count = getattr(getattr(shell, "displayhook", None), "prompt_count", None)
    return count if isinstance(count, int) else getattr(shell, "execution_count", None)


def _request_metadata(shell) -> dict:
    """The metadata of the execute request being handled (JupyterLab sends cellId, deletedCells)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return {}
    try:
        parent = kernel.get_parent("shell")
    except TypeError:
        parent = kernel.get_parent()
    except Exception:
        return {}
    metadata = (parent or {}).get("metadata") or {}
    return metadata if isinstance(metadata, dict) else {}
