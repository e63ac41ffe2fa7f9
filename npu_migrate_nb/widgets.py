"""ipywidgets views of what :mod:`.report` and :mod:`.sim.checks` already say.

* :class:`AnalysisView`: a cell's report, each finding with its diff and an **Apply** button that
  replaces the cell's text through our JupyterLab extension (:mod:`.frontend`); where no extension
  answers, the button gives way to the code to paste.
* :class:`PanelView`: the same for every cell run so far.
* :class:`RunView`: while the ranks run, one progress bar per rank and each rank's output in a tab;
  then the three checks, and after a failure a line that says, once the one-card rerun has told,
  whether the cell fails on one card too.

Each view also carries the HTML and plain-text report in its display data, for frontends and
files that cannot render widgets.
"""

from __future__ import annotations

import html
import re
from typing import Dict, List, Mapping, Optional

import ipywidgets as W

from .analysis import Analysis
from .i18n import N_, _
from .kernel_cells import ExecutedCells
from .notebook import Notebook
from .report import (_CSS, cell_findings, cells_with_findings, cell_report_html, cell_report_text, cell_section_html, checklist_html,
                     elsewhere_html, module_section_html, notebook_report_html, notebook_report_text, unified_diff)

NO_FRONTEND = N_("This frontend has no npu-migrate-nb extension that can edit the cell, so paste the "
                 "adapted cell below in place of the old one (or run it with %%npu_distribute --apply).")


class _WithFallback:
    """Display data = the widget, plus HTML and plain text for frontends without widgets."""

    fallback_html = ""
    fallback_text = ""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data = dict(data or {})
        data["text/plain"] = self.fallback_text
        if self.fallback_html:
            data["text/html"] = self.fallback_html
        return data


class FindingFix(W.VBox):
    """One finding (or all of a cell's) with Apply, and its diff folded away."""

    def __init__(self, title_html: str, cell_id: Optional[str], old: str, new: Optional[str], label: str,
                 frontend, failed: Optional[str] = None):
        self.cell_id, self.old, self.new, self.frontend = cell_id, old, new, frontend
        self.title = W.HTML(title_html)
        self.status = W.HTML("")
        self.button = W.Button(description=_("Apply"), button_style="primary", icon="wrench",
                               tooltip=_("replace the cell's text with the adapted code (Undo reverts it)"))
        self.button.on_click(self._apply)
        self.action: Optional[W.HBox] = None
        children: List[W.Widget] = [self.title]
        if new is None:
            note = (_("not fixed automatically: {reason}").format(reason=failed) if failed
                    else _("no automatic fix: see the message"))
            children.append(W.HTML(f"<i>{html.escape(note)}</i>"))
        else:
            self.action = W.HBox([self.button, _folded(_("diff"), W.HTML(f"<pre>{html.escape(unified_diff(old, new, label))}</pre>")),
                                  self.status])
            children.append(self.action)
        super().__init__(children)
        if self.action is not None:
            if cell_id is None or (frontend is not None and frontend.present is False):
                self._show_paste()
            elif frontend is not None:
                frontend.on_presence(lambda present: present is False and self._show_paste())

    def _apply(self, _button=None) -> None:
        if self.cell_id is None or self.frontend is None:
            self._show_paste()
            return
        self.button.disabled = True
        self.status.value = html.escape(_("applying..."))
        self.frontend.replace_cell(self.cell_id, self.old, self.new, self._replied)

    def _replied(self, reply: Mapping[str, object]) -> None:
        if reply.get("ok"):
            self.status.value = _("<b>applied</b>: run the cell again to re-check (Undo in the editor reverts it)")
            self.button.button_style = "success"
            return
        if reply.get("no_extension"):
            self._show_paste()
            return
        reason = str(reply.get("reason") or _("the frontend refused"))
        self.button.disabled = False
        self.status.value = _("not applied: {reason}").format(reason=html.escape(reason))

    def _show_paste(self) -> None:
        if self.action is None:
            return
        lines = self.new.count("\n") + 2
        paste = W.Textarea(value=self.new, layout=W.Layout(width="98%", height=f"{min(30, lines) * 1.4}em"))
        self.action.children = [_folded(_("the adapted cell, to paste"),
                                        W.VBox([W.HTML(f"<i>{html.escape(_(NO_FRONTEND))}</i>"), paste]))]


def _folded(title: str, content: W.Widget) -> W.Accordion:
    accordion = W.Accordion(children=[content], selected_index=None, layout=W.Layout(width="auto", min_width="40%"))
    accordion.set_title(0, title)
    return accordion


def finding_fixes(notebook: Notebook, analysis: Analysis, index: int, label: str, cell_id: Optional[str],
                  frontend) -> List[W.Widget]:
    from .report import finding_html
    from .rewrite import fix_cell

    old = notebook.cells[index].source
    rows: List[W.Widget] = []
    findings = cell_findings(analysis, index)
    for finding in findings:
        fixed = fix_cell(notebook, analysis, index, codes={finding.code})
        rows.append(FindingFix(finding_html(finding), cell_id, old, fixed.source, label, frontend, fixed.failed))
    fixable = [row for row in rows if row.new is not None]
    if len(fixable) > 1:
        everything = fix_cell(notebook, analysis, index)
        if everything.source is not None:
            title = "<b>" + html.escape(_("All the fixes of this cell")) + "</b>"
            rows.append(FindingFix(title, cell_id, old, everything.source, label, frontend))
    return rows


class AnalysisView(_WithFallback, W.VBox):
    def __init__(self, notebook: Notebook, analysis: Analysis, index: int, labels: Mapping[int, str],
                 cell_id: Optional[str] = None, frontend=None):
        source, label = notebook.cells[index].source, labels[index]
        head = _CSS + '<div class="npu-report">' + _code_section(analysis, index, source, label) + "</div>"
        children = [W.HTML(head)]
        children += finding_fixes(notebook, analysis, index, label, cell_id, frontend)
        tail = elsewhere_html(analysis, index, labels) + checklist_html(analysis)
        children.append(W.HTML(_CSS + '<div class="npu-report">' + tail + "</div>"))
        super().__init__(children)
        self.fallback_html = cell_report_html(analysis, index, source, label, labels)
        self.fallback_text = cell_report_text(analysis, index, label, labels)
        self.analysis = analysis


def _code_section(analysis: Analysis, index: int, source: str, label: str) -> str:
    """The cell's header and code with marks, without the findings (they come with their buttons)."""
    return cell_section_html(analysis, index, source, label, with_findings=False)


class PanelView(_WithFallback, W.VBox):
    """Every cell run so far that has findings, then the checklist."""

    def __init__(self, cells: ExecutedCells, analysis: Analysis, frontend=None):
        notebook, _index, _labels = cells.notebook()
        labelled = dict(cells.labelled())
        children: List[W.Widget] = []
        for index in cells_with_findings(analysis):
            cell = labelled.get(index)
            if cell is None:  # one of the notebook's own modules: shown, fixed with ``npu-migrate-nb fix``
                children.append(W.HTML(_CSS + '<div class="npu-report">' + module_section_html(analysis, index)
                                       + "</div>"))
                continue
            children.append(W.HTML(_CSS + '<div class="npu-report">'
                                   + _code_section(analysis, index, cell.source, cell.label) + "</div>"))
            children += finding_fixes(notebook, analysis, index, cell.label, cell.cell_id, frontend)
        children.append(W.HTML(_CSS + '<div class="npu-report">' + checklist_html(analysis) + "</div>"))
        super().__init__(children)
        labels = {index: cell.label for index, cell in labelled.items()}
        sources = {index: cell.source for index, cell in labelled.items()}
        self.fallback_text = notebook_report_text(analysis, labels)
        self.fallback_html = notebook_report_html(analysis, sources, labels)
        self.analysis = analysis


# ------------------------------------------------------------------------------------- ranks

_PREFIX = re.compile(r"^\[ranks? ([\d,]+)\] ?(.*)$", re.DOTALL)


class RankProgress(W.HBox):
    def __init__(self, rank: int):
        self.rank = rank
        self.bar = W.IntProgress(value=0, min=0, max=1, description=_("rank {rank}").format(rank=rank),
                                 bar_style="info")
        self.text = W.HTML(html.escape(_("waiting")))
        self.last: Mapping[str, object] = {}
        super().__init__([self.bar, self.text])

    def show(self, cells_done: int, data: Mapping[str, object]) -> None:
        self.last = data
        parts = [_("cells done {count}").format(count=cells_done)]
        epoch, epochs = data.get("epoch"), data.get("epochs")
        step, steps = data.get("step"), data.get("steps")
        if epoch == 0:
            parts.append(_("fit starting"))
        elif epoch is not None:
            parts.append(_("epoch {epoch}/{epochs}").format(epoch=epoch, epochs=epochs or "?"))
        loss = (data.get("metrics") or {}).get("loss")
        if isinstance(loss, (int, float)):
            parts.append(_("loss {loss:.4g}").format(loss=loss))
        if step is not None:
            parts.append(_("step {step}/{steps}").format(step=step, steps=steps or "?"))
            if steps:
                self.bar.max = int(steps)
                self.bar.value = min(int(step), int(steps))
        self.text.value = " · ".join(parts)


class RunView(_WithFallback, W.VBox):
    """Per-rank progress and output while a cell runs on the ranks, then the checks."""

    def __init__(self, session):
        self.session = session
        ranks = list(range(session.ranks))
        self.bars: Dict[int, RankProgress] = {rank: RankProgress(rank) for rank in ranks}
        self.outputs: Dict[int, W.Output] = {rank: W.Output() for rank in ranks}
        self.tabs = W.Tab(children=[self.outputs[rank] for rank in ranks])
        for rank in ranks:
            self.tabs.set_title(rank, _("rank {rank}").format(rank=rank))
        self.checks = W.HTML("")
        self.one_card = W.HTML("")  # filled in place when the one-card rerun answers
        super().__init__([W.VBox(list(self.bars.values())), self.tabs, self.checks, self.one_card])
        self.fallback_text = _("running on {count} simulated ranks").format(count=len(ranks))
        self._one_card_before = getattr(session, "one_card", None)
        session.progress = self.on_progress
        self._streams = _Demux(self, "stdout"), _Demux(self, "stderr")
        runner = session.runner
        self._saved = (runner.echo, runner.errors) if runner is not None else None
        if runner is not None:
            runner.echo, runner.errors = self._streams

    def on_progress(self, rank: int, data: Mapping[str, object]) -> None:
        if rank in self.bars:
            self.bars[rank].show(len(self.session.cells_run), data)

    def append(self, rank: int, name: str, text: str) -> None:
        output = self.outputs.get(rank)
        if output is None:
            return
        (output.append_stdout if name == "stdout" else output.append_stderr)(text)

    def finish(self, session) -> None:
        from .sim.session import checks_text

        for stream in self._streams:
            stream.flush()
        if session.runner is not None and self._saved is not None:
            session.runner.echo, session.runner.errors = self._saved
        session.progress = None
        done = len(session.cells_run)
        for bar in self.bars.values():
            bar.show(done, bar.last)  # the last epoch and loss stay in view
            bar.bar.value = bar.bar.max
            bar.bar.bar_style = "success"
        checks = session.checks()
        self.checks.value = _checks_html(checks)
        self.fallback_text = checks_text(checks)
        check = getattr(session, "one_card", None)
        if check is not None and check is not self._one_card_before:  # this cell failed: a rerun started
            self._show_one_card(check)
            check.add_done_callback(self._show_one_card)

    def _show_one_card(self, check) -> None:
        """The one-card line; called again from the rerun's thread with the verdict (a widget's
        update reaches the frontend from any thread, and lands in this view, not the cell running now)."""
        status = check.result().status if check.done() else "running"
        self.one_card.value = (f'<div class="npu-one-card" data-status="{status}" style="margin-top:4px;'
                               f'color:{_ONE_CARD_COLOURS.get(status, "inherit")}">{html.escape(check.text)}</div>')
        if check.done():
            check.shown = True


class _Demux:
    """The runner's ``[rank R] ...`` lines to rank R's tab; other lines to the cell's own output."""

    def __init__(self, view: RunView, name: str):
        self.view, self.name, self._partial = view, name, ""

    def write(self, text: str) -> int:
        import sys

        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            match = _PREFIX.match(line)
            if match:
                for rank in match.group(1).split(","):
                    self.view.append(int(rank), self.name, match.group(2) + "\n")
            else:
                getattr(sys, self.name).write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.write("\n")


_ONE_CARD_COLOURS = {"fails": "#b8860b", "runs": "#d33", "unknown": "#888"}


def _checks_html(checks) -> str:
    # A check's name and status are data (English); sim.checks says them in the kernel's language.
    from .sim.checks import check_label, status_label

    colours = {"pass": "#2a8a2a", "fail": "#d33", "not-observed": "#888", "not-applicable": "#888"}
    rows = "".join(
        f'<tr><td>{html.escape(check_label(name))}</td><td><span style="color:#fff;background:{colours.get(check.status, "#888")};'
        f'border-radius:3px;padding:0 6px"><b>{html.escape(status_label(check.status))}</b></span></td>'
        f"<td>{html.escape(check.detail)}</td></tr>"
        for name, check in checks.items()
    )
    return f"<table>{rows}</table>" if rows else "<i>" + html.escape(_("nothing has run on the ranks yet")) + "</i>"
