"""Render analyses for people and programs: one line per finding, a steps summary, JSON, diffs."""

from __future__ import annotations

import json
from typing import Dict, List, Mapping, Optional, Sequence

from .analysis import Analysis
from .docs_url import code_url
from .findings import STEPS
from . import i18n
from .i18n import N_, _, ngettext
from .notebook import Notebook

_STEP_TITLES = {
    "broadcast": N_("variable broadcast (变量广播)"),
    "allreduce": N_("gradient aggregation (梯度聚合)"),
    "shard": N_("dataset sharding (数据集分片)"),
}
_STATUS_MARKS = {"present": N_("ok"), "missing": N_("MISSING"), "not-applicable": N_("n/a"), "unknown": N_("?")}
# A step's status as the summary prints it after the step (the JSON keeps the English key).
_STATUS_KEYS = {"present": N_("present"), "missing": N_("missing"), "not-applicable": N_("not-applicable"),
                "unknown": N_("unknown")}
# A finding's severity where a person reads it (the JSON, and the linter-style lines, keep the English word).
_SEVERITIES = {"error": N_("error"), "warning": N_("warning"), "info": N_("info")}


def finding_lines(analysis: Analysis) -> List[str]:
    """``PATH:cell N:LINE:COL: severity: message [code]``, like tf_upgrade_v2 but naming the cell."""
    lines = [
        f"{analysis.path}:cell {error.cell}:{error.line}:{error.column}: error: {error.message} [unreadable-cell]"
        for error in analysis.errors
    ]
    for finding in analysis.findings:
        lines.append(f"{finding.where(analysis.path)}: {finding.severity}: {finding.message} [{finding.code}]")
    return lines


def summary_lines(analysis: Analysis) -> List[str]:
    if not analysis.python:
        return [_("{path}: not a Python notebook ({language}); nothing analyzed").format(
            path=analysis.path, language=analysis.language)]
    adapter = analysis.adapter or "none"
    version = "TensorFlow 1" if analysis.tf1 else "TensorFlow 2"
    lines = [_("{path}: framework {framework}, adapter {adapter}, {version} ({reason})").format(
        path=analysis.path, framework=analysis.framework, adapter=adapter, version=version,
        reason=analysis.mode.reason)]
    for step in STEPS:
        status = analysis.steps[step]
        reason = analysis.reasons.get(step)
        title, said = _(_STEP_TITLES[step]), _(_STATUS_KEYS[status])
        if reason and analysis.framework != "none":
            line = _("{step}: {status} ({reason})").format(step=title, status=said, reason=reason)
        else:
            line = _("{step}: {status}").format(step=title, status=said)
        lines.append(f"  {i18n.rjust(_(_STATUS_MARKS[status]), 7)}  {line}")
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
    by_index: Dict[int, str] = {cell.index: cell.source for cell in notebook.cells}
    return "".join(
        unified_diff(by_index[index], new_sources[index], f"{notebook.path}:cell {index}") for index in sorted(new_sources)
    )


def unified_diff(old: str, new: str, name: str) -> str:
    """``old`` against ``new`` as a unified diff of ``a/NAME`` and ``b/NAME``."""
    import difflib

    return "".join(difflib.unified_diff(_lines(old), _lines(new), fromfile=f"a/{name}", tofile=f"b/{name}"))


def _lines(text: str) -> List[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


# --------------------------------------------------------------------------- one cell, in a notebook

STATUS_WORDS = {"present": "present", "missing": "missing", "not-applicable": "not applicable", "unknown": "unknown"}
_STATUS_WORDS_MARKED = {"present": N_("present"), "missing": N_("missing"), "not-applicable": N_("not applicable"),
                        "unknown": N_("unknown")}
_STEP_NAMES = {"broadcast": "variable broadcast", "allreduce": "gradient aggregation", "shard": "dataset sharding"}
_STEP_HANZI = {"broadcast": "变量广播", "allreduce": "梯度聚合", "shard": "数据集分片"}


def checklist(analysis: Analysis) -> List[Dict[str, str]]:
    """The three steps in the words users know: name, 变量广播..., and missing / present / not applicable
    (in English, as data: ``checklist_text`` and ``checklist_html`` say them in the current language)."""
    return [
        {"step": step, "name": _STEP_NAMES[step], "hanzi": _STEP_HANZI[step],
         "status": STATUS_WORDS[analysis.steps[step]], "reason": analysis.reasons.get(step, "")}
        for step in STEPS
    ]


def cell_findings(analysis: Analysis, cell: int) -> List:
    return [finding for finding in analysis.findings if finding.cell == cell]


def cell_errors(analysis: Analysis, cell: int) -> List:
    return [error for error in analysis.errors if error.cell == cell]


def cell_report_text(analysis: Analysis, cell: int, label: str, labels: Optional[Mapping[int, str]] = None) -> str:
    """The magic's plain-text report: this cell's findings (``label`` names the cell, e.g. ``cell [5]``),
    one line for each finding in other cells (``labels`` names them), then the checklist of the
    notebook so far."""
    lines = cell_section_text(analysis, cell, label) + elsewhere_lines(analysis, cell, labels or {})
    return "\n".join(lines + checklist_text(analysis)) + "\n"


def elsewhere_lines(analysis: Analysis, cell: int, labels: Mapping[int, str]) -> List[str]:
    others = _elsewhere(analysis, cell)
    lines = [_("in other cells run so far:")] if others else []
    lines += ["  " + _elsewhere_line(finding, labels) for finding in others]
    return lines


def _elsewhere(analysis: Analysis, cell: int) -> List:
    return [f for f in analysis.findings if f.cell != cell and f.severity != "info"]


def _elsewhere_line(finding, labels: Mapping[int, str]) -> str:
    where = finding.path or (labels[finding.cell] if finding.cell in labels
                             else _("cell {index}").format(index=finding.cell))
    return _("{where} line {line}: {message} [{code}]").format(
        where=where, line=finding.line, message=finding.message, code=finding.code)


def notebook_report_text(analysis: Analysis, labels: Mapping[int, str]) -> str:
    """Every cell with findings (``labels``: cell index -> its name), then the checklist."""
    lines: List[str] = []
    for cell in cells_with_findings(analysis):
        lines += cell_section_text(analysis, cell, label_of(analysis, cell, labels))
    return "\n".join(lines + checklist_text(analysis)) + "\n"


def cell_section_text(analysis: Analysis, cell: int, label: str) -> List[str]:
    findings, errors = cell_findings(analysis, cell), cell_errors(analysis, cell)
    lines = [_("npu_distribute: {label}: {summary}").format(label=label, summary=_count(findings, errors))]
    for error in errors:
        lines.append("  " + _("line {line}:{column}: error: {message}; the cell was not analyzed").format(
            line=error.line, column=error.column, message=error.message))
    for finding in findings:
        lines.append("  " + _("line {line}:{column}: {severity}: {message} [{code}]").format(
            line=finding.line, column=finding.column, severity=_severity(finding.severity),
            message=finding.message, code=finding.code))
        if finding.fix:
            lines += ["      " + _("fix: {code}").format(code=fix_line) for fix_line in finding.fix.splitlines()]
    return lines


def checklist_text(analysis: Analysis) -> List[str]:
    lines = [_checklist_heading(analysis)]
    for item in checklist(analysis):
        title = _(_STEP_TITLES[item["step"]])
        line = _("{step}: {reason}").format(step=title, reason=item["reason"]) if item["reason"] else title
        lines.append(f"  {i18n.rjust(_status_word(analysis.steps[item['step']]), 14)}  {line}")
    return lines


def label_of(analysis: Analysis, cell: int, labels: Mapping[int, str]) -> str:
    """How a report names a cell: its label, or the file of one of the notebook's own modules."""
    module = analysis.context.module_at.get(cell) if analysis.context is not None else None
    if module is not None:
        return module.path
    return labels[cell] if cell in labels else _("cell {index}").format(index=cell)


def source_of(analysis: Analysis, cell: int, sources: Mapping[int, str]) -> str:
    module = analysis.context.module_at.get(cell) if analysis.context is not None else None
    return module.source if module is not None else sources.get(cell, "")


def cells_with_findings(analysis: Analysis) -> List[int]:
    return sorted({f.cell for f in analysis.findings} | {e.cell for e in analysis.errors})


def _count(findings, errors) -> str:
    if errors:
        return _("cannot be analyzed")
    if not findings:
        return _("nothing missing or wrong here")
    return ngettext("{count} finding", "{count} findings", len(findings)).format(count=len(findings))


def _checklist_heading(analysis: Analysis) -> str:
    return _("the notebook so far (framework {framework}, adapter {adapter}):").format(
        framework=analysis.framework, adapter=analysis.adapter or "none")


def _status_word(status: str) -> str:
    """A step's status as the checklist says it: missing / present / not applicable / unknown."""
    return _(_STATUS_WORDS_MARKED[status])


def _severity(severity: str) -> str:
    return _(_SEVERITIES[severity]) if severity in _SEVERITIES else severity


_CSS = """<style>
.npu-report{font-family:var(--jp-ui-font-family,sans-serif);font-size:13px;line-height:1.4}
.npu-report pre{margin:0;font-family:var(--jp-code-font-family,monospace);font-size:12px}
.npu-code{border:1px solid #ddd;border-collapse:collapse;margin:4px 0}
.npu-code td{padding:0 6px;vertical-align:top}
.npu-code .ln{color:#999;text-align:right;user-select:none}
.npu-code tr.error{background:#fde2e1}.npu-code tr.warning{background:#fff4d6}.npu-code tr.info{background:#e6f0ff}
.npu-finding{margin:6px 0;padding:4px 8px;border-left:4px solid #d33}
.npu-finding.warning{border-color:#e6a700}.npu-finding.info{border-color:#3b7dd8}
.npu-code-name{color:#666;font-family:var(--jp-code-font-family,monospace)}
.npu-code-link{text-decoration:none}.npu-code-link:hover .npu-code-name{text-decoration:underline}
.npu-fix{background:#eef8ee;padding:2px 6px;margin-top:2px}
.npu-steps td{padding:1px 8px}
.npu-status{font-weight:bold;border-radius:3px;padding:0 6px;color:#fff}
.npu-status.missing{background:#d33}.npu-status.present{background:#2a8a2a}
.npu-status.not-applicable{background:#888}.npu-status.unknown{background:#b8860b}
.npu-reason{font-size:0.9em;color:#666}
</style>"""


def cell_report_html(analysis: Analysis, cell: int, source: str, label: str,
                     labels: Optional[Mapping[int, str]] = None) -> str:
    """The rich report: the cell's code with the affected lines marked, each finding with its fix,
    the findings of other cells in a line each, and the checklist."""
    return (_CSS + '<div class="npu-report">' + cell_section_html(analysis, cell, source, label)
            + elsewhere_html(analysis, cell, labels or {}) + checklist_html(analysis) + "</div>")


def elsewhere_html(analysis: Analysis, cell: int, labels: Mapping[int, str]) -> str:
    others = _elsewhere(analysis, cell)
    if not others:
        return ""
    items = "".join(f"<li>{_linked(_escape(_elsewhere_line(finding, labels)), finding.code)}</li>" for finding in others)
    heading = _escape(_("in other cells run so far:"))
    return f"<div>{heading}</div><ul>{items}</ul>"


def _linked(said_html: str, code: str) -> str:
    """``said_html`` with its last ``[code]`` linked to the code's page."""
    head, bracketed, tail = said_html.rpartition(f"[{_escape(code)}]")
    return head + code_link_html(code) + tail if bracketed else said_html


def notebook_report_html(analysis: Analysis, sources: Mapping[int, str], labels: Mapping[int, str]) -> str:
    sections = "".join(
        cell_section_html(analysis, cell, source_of(analysis, cell, sources), label_of(analysis, cell, labels))
        for cell in cells_with_findings(analysis)
    )
    return _CSS + '<div class="npu-report">' + sections + checklist_html(analysis) + "</div>"


def module_section_html(analysis: Analysis, cell: int) -> str:
    """The section of one of the notebook's own modules: its findings, fixed by ``npu-migrate-nb fix``."""
    return cell_section_html(analysis, cell, source_of(analysis, cell, {}), label_of(analysis, cell, {}))


def cell_section_html(analysis: Analysis, cell: int, source: str, label: str, with_findings: bool = True) -> str:
    findings, errors = cell_findings(analysis, cell), cell_errors(analysis, cell)
    parts = [f"<div><b>npu_distribute</b>: {_escape(label)}: {_escape(_count(findings, errors))}</div>"]
    marks = {}
    for item in list(errors) + list(findings):
        severity = getattr(item, "severity", "error")
        for line in range(item.line, getattr(item, "end_line", item.line) + 1):
            marks.setdefault(line, (severity, item.message))
    if marks:
        parts.append(code_html(source, marks))
    for error in errors:
        parts.append('<div class="npu-finding error">' + _("line {line}: {message}; the cell was not analyzed").format(
            line=error.line, message=_escape(error.message)) + "</div>")
    if with_findings:
        parts += [finding_html(finding) for finding in findings]
    return "".join(parts)


def code_html(source: str, marks: Mapping[int, tuple]) -> str:
    rows = []
    for number, text in enumerate(source.splitlines() or [""], start=1):
        severity, message = marks.get(number, ("", ""))
        title = f' title="{_escape(message)}"' if message else ""
        rows.append(f'<tr class="{severity}"{title}><td class="ln">{number}</td>'
                    f"<td><pre>{_escape(text) or ' '}</pre></td></tr>")
    return f'<table class="npu-code">{"".join(rows)}</table>'


def finding_html(finding) -> str:
    fix = f'<pre class="npu-fix">{_escape(finding.fix)}</pre>' if finding.fix else ""
    said = _("line {line}: {severity} {message}").format(
        line=finding.line, severity=f"<b>{_escape(_severity(finding.severity))}</b>", message=_escape(finding.message))
    return f'<div class="npu-finding {finding.severity}">{said} {code_link_html(finding.code)}{fix}</div>'


def code_link_html(code: str) -> str:
    """``[code]``, linked to the code's page in the documentation (a new tab)."""
    title = _("what {code} means, in the documentation").format(code=code)
    return (f'<a class="npu-code-link" href="{_escape(code_url(code))}" target="_blank" rel="noopener" '
            f'title="{_escape(title)}"><span class="npu-code-name">[{_escape(code)}]</span></a>')


def checklist_html(analysis: Analysis) -> str:
    rows = "".join(
        f'<tr><td>{_escape(_(_STEP_TITLES[item["step"]]))}</td><td><span class="npu-status {step_class}">'
        f'{_escape(_status_word(step_class))}</span>{_reason_html(item["reason"])}</td></tr>'
        for item, step_class in ((item, analysis.steps[item["step"]]) for item in checklist(analysis))
    )
    return f'<div>{_escape(_checklist_heading(analysis))}</div><table class="npu-steps">{rows}</table>'


def _reason_html(reason: str) -> str:
    return f' <span class="npu-reason">{_escape(reason)}</span>' if reason else ""


def _escape(text: str) -> str:
    import html

    return html.escape(str(text), quote=True)
