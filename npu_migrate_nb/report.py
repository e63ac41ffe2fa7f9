"""Render analyses for people and programs: one line per finding, a steps summary, JSON, diffs."""

from __future__ import annotations

import json
from typing import Dict, List, Mapping, Sequence

from .analysis import Analysis
from .findings import STEPS
from .notebook import Notebook

_STEP_TITLES = {
    "broadcast": "variable broadcast (变量广播)",
    "allreduce": "gradient aggregation (梯度聚合)",
    "shard": "dataset sharding (数据集分片)",
}
_STATUS_MARKS = {"present": "ok", "missing": "MISSING", "not-applicable": "n/a"}


def finding_lines(analysis: Analysis) -> List[str]:
    """``PATH:cell N:LINE:COL: severity: message [code]``, like tf_upgrade_v2 but naming the cell."""
    lines = [
        f"{analysis.path}:cell {error.cell}:{error.line}:{error.column}: error: {error.message} [unreadable-cell]"
        for error in analysis.errors
    ]
    for finding in analysis.findings:
        lines.append(
            f"{analysis.path}:cell {finding.cell}:{finding.line}:{finding.column}: "
            f"{finding.severity}: {finding.message} [{finding.code}]"
        )
    return lines


def summary_lines(analysis: Analysis) -> List[str]:
    if not analysis.python:
        return [f"{analysis.path}: not a Python notebook ({analysis.language}); nothing analyzed"]
    adapter = analysis.adapter or "none"
    lines = [f"{analysis.path}: framework {analysis.framework}, adapter {adapter}"]
    for step in STEPS:
        status = analysis.steps[step]
        lines.append(f"  {_STATUS_MARKS[status]:>7}  {_STEP_TITLES[step]}: {status}")
    return lines


def text_report(analyses: Sequence[Analysis]) -> str:
    """Findings and steps of each Python notebook (a non-Python one is reported on stderr only)."""
    blocks = ["\n".join(finding_lines(a) + summary_lines(a)) for a in analyses if a.python]
    return "\n\n".join(blocks) + "\n" if blocks else ""


def json_report(analyses: Sequence[Analysis]) -> str:
    documents = [analysis.to_json() for analysis in analyses]
    payload = documents[0] if len(documents) == 1 else documents
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


def cell_diffs(notebook: Notebook, new_sources: Mapping[int, str]) -> str:
    """A unified diff per changed cell, named ``PATH:cell N``."""
    import difflib

    by_index: Dict[int, str] = {cell.index: cell.source for cell in notebook.cells}
    parts = []
    for index in sorted(new_sources):
        name = f"{notebook.path}:cell {index}"
        diff = difflib.unified_diff(
            _lines(by_index[index]), _lines(new_sources[index]), fromfile=f"a/{name}", tofile=f"b/{name}"
        )
        parts.append("".join(diff))
    return "".join(parts)


def _lines(text: str) -> List[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines
