"""What analysis produces: findings (what is wrong, where) and the edits that fix them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple

from .docs_url import code_url

STEPS = ("broadcast", "allreduce", "shard")
SEVERITIES = ("error", "warning", "info")

# Setup a fix may need; the rewriter adds each once, where it belongs, only when missing.
NEEDS_OS = "os"
NEEDS_NPU_BRIDGE = "npu_bridge"
NEEDS_NPU_DEVICE = "npu_device"
NEEDS_DENSE_GRADIENTS = "dense_gradients"  # the helper a TF1 fix wraps optimizers with (sparse gradients)

Position = Tuple[int, int]  # (line 1-based, column 0-based in characters), as libcst counts


@dataclass(frozen=True)
class Edit:
    """One change to one cell, addressed by the position of the node it changes.

    kind:
      ``replace``        the expression at [start, end) becomes ``code``
      ``insert_before``  statements ``code`` go before the statement starting at ``start``
      ``insert_after``   statements ``code`` go after the statement starting at ``start``
      ``remove``         the statement starting at ``start`` is removed (``code`` unused)
      ``remove_element`` the list element expression at [start, end) is removed
      ``unwrap``         the ``with`` statement starting at ``start`` gives way to its body (dedented)
      ``guard``          the statement starting at ``start`` runs only when ``code`` (a condition) holds;
                         so do the statements after it in its block that start before ``end``
    """

    cell: int
    kind: str
    start: Position
    end: Position
    code: str = ""
    needs: FrozenSet[str] = frozenset()
    # For ``replace``: ``template`` is ``code`` with holes named ``__npu_hole_N__``; the rewriter fills
    # each hole with the (already rewritten) node at the position in ``holes``, so edits nest.
    template: Optional[str] = None
    holes: Tuple[Tuple[str, Position, Position], ...] = ()


@dataclass
class Finding:
    code: str
    step: Optional[str]
    severity: str
    cell: int
    line: int
    column: int  # 1-based
    end_line: int
    end_column: int  # 1-based, exclusive
    message: str
    fix: Optional[str] = None  # the replacement or inserted text, for people
    edits: Tuple[Edit, ...] = field(default=(), repr=False, compare=False)
    # Set for a finding in one of the notebook's own modules (``model.py``): ``cell`` is then that
    # module's index in the facts model, no cell of the notebook (JSON says ``"cell": null``).
    path: Optional[str] = None

    def to_json(self) -> Dict[str, object]:
        # Field by field: ``asdict`` would deep-copy the edits only to drop them (half the time of a
        # server analysis with hundreds of findings).
        document = {name: getattr(self, name) for name in _FINDING_FIELDS}
        if self.path is not None:
            document["cell"] = None
            document["path"] = self.path
        document["url"] = self.url
        return document

    @property
    def url(self) -> str:
        """The documentation page of this finding's code (``<DOCS_URL>codes/<code>/``)."""
        return code_url(self.code)

    def where(self, notebook_path: str) -> str:
        """``NB.ipynb:cell 3:12:5`` or, in a module, ``model.py:12:5``."""
        place = self.path if self.path is not None else f"{notebook_path}:cell {self.cell}"
        return f"{place}:{self.line}:{self.column}"


_FINDING_FIELDS = ("code", "step", "severity", "cell", "line", "column", "end_line", "end_column", "message", "fix")


@dataclass
class CellError:
    """A cell that could not be analyzed (syntax error, too large); the rest still is."""

    cell: int
    line: int
    column: int
    message: str

    def to_json(self) -> Dict[str, object]:
        return asdict(self)


def sort_key(finding: Finding):
    return (finding.cell, finding.line, finding.column, finding.code)


def unique(findings: List[Finding]) -> List[Finding]:
    seen = set()
    kept = []
    for finding in findings:
        key = (finding.code, finding.cell, finding.line, finding.column)
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept
