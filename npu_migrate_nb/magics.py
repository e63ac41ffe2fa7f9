"""The notebook door: ``%%npu_distribute``, ``%npu_cluster``, ``%npu_sim`` and ``%npu_panel``.

Thin by design: the analysis is :func:`analysis.analyze` on the cells this kernel has run
(:mod:`.kernel_cells`), fixes are :func:`rewrite.fix_cell`, reports are :mod:`.report`, runs are a
:class:`sim.session.ClusterSession`. Loading the extension imports no TensorFlow.
"""

from __future__ import annotations

import sys
from typing import Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .analysis import BROADCAST_STYLES, REDUCTIONS, Analysis, Options, analyze
from .kernel_cells import ExecutedCells, ran_in_kernel
from .report import cell_diffs, cell_report_html, cell_report_text

MAGIC_LINE = "%%npu_distribute"
# Our own line magics: never sent to the ranks when cells are replayed there.
_OWN_LINE_MAGICS = ("%npu_cluster", "%npu_sim", "%npu_panel", "%load_ext npu_migrate_nb", "%reload_ext npu_migrate_nb")


class _Failed(Exception):
    """Marks the cell as failed (so Run All stops) after a message was already shown."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def _render_traceback_(self):
        return [self.message]


@magics_class
class NpuMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.cells = ExecutedCells(shell)
        self._session = None  # sim.session.ClusterSession, made on first use (imports ipyparallel)
        self.autorun = False
        self._frontend = None

    # ----------------------------------------------------------------------------- analysis

    @magic_arguments()
    @argument("--check", action="store_true", help="report only; the cell is not run")
    @argument("--diff", action="store_true", help="show the adapted code of this cell as a diff; not run")
    @argument("--apply", action="store_true",
              help="replace the cell's text with the adapted code (this line kept) and run the adapted code")
    @argument("--run", action="store_true", help="run the cell on the simulated ranks instead of this kernel")
    @argument("-n", "--np", dest="np", type=int, default=None, metavar="N",
              help="ranks of the simulated cluster started by --run (default 2)")
    @argument("--timeout", type=float, default=None, metavar="S", help="--run: seconds before the cell is stopped")
    @argument("--no-one-card", action="store_true",
              help="--run: if the cell fails on the ranks, no rerun on one card (to tell if it fails there too)")
    @argument("--reduction", choices=REDUCTIONS, default=None,
              help="the all-reduce custom loops need (default: from the loss)")
    @argument("--broadcast-style", choices=BROADCAST_STYLES, default="hooks-append",
              help="Estimator broadcast: hooks=npu_hooks_append(...) or an explicit NPUBroadcastGlobalVariablesHook")
    @argument("--ranks", type=int, default=8, metavar="N",
              help="rank count literal batch sizes are checked against (default 8)")
    @argument("--plain", action="store_true", help="plain text and HTML only, no widgets")
    @cell_magic
    def npu_distribute(self, line: str, cell: str):
        """Analyze this cell in the context of the cells run so far, show what is missing or wrong,
        and run it (here, adapted, or on simulated ranks)."""
        args = _parse(self.npu_distribute, line)
        if args is None:
            return None
        self._say_one_card()
        if args.np is not None and args.np < 1:
            raise UsageError("-n must be at least 1")
        full_source = f"{MAGIC_LINE} {line}".rstrip() + "\n" + cell
        notebook, index, labels = self.cells.notebook(full_source)
        options = Options(ranks=args.ranks, broadcast_style=args.broadcast_style, reduction=args.reduction,
                          current_cell=index)
        analysis = analyze(notebook, options)
        label = labels[index]

        if args.diff:
            return self._show_diff(notebook, analysis, index, label)
        body = cell
        if args.apply:
            body = self._apply(notebook, analysis, index, line, cell)
            if body != cell:  # report on what now runs
                notebook, index, labels = self.cells.notebook(f"{MAGIC_LINE} {line}".rstrip() + "\n" + body)
                analysis = analyze(notebook, options)
        self._show_report(notebook, analysis, index, labels, args.plain)
        if args.check:
            return None
        # Line numbers in tracebacks and timeouts as the editor shows them: the magic's line is line 1.
        current = self.cells.current
        if current is not None and current.source.lstrip().startswith(MAGIC_LINE):
            body = f"# {MAGIC_LINE} {line}".rstrip() + "\n" + body  # IPython drops leading blank lines
        if args.run:
            return self._run_on_ranks(body, args.np, args.timeout, analysis, args.plain, not args.no_one_card)
        return self._run_here(body)

    def _show_report(self, notebook, analysis: Analysis, index: int, labels, plain: bool) -> None:
        from IPython.display import display

        widgets = None if plain or not self._in_kernel() else _widgets_module()
        if widgets is not None:
            current = self.cells.current
            display(widgets.AnalysisView(notebook, analysis, index, labels,
                                         cell_id=current.cell_id if current is not None else None,
                                         frontend=self.frontend))
            return
        source, label = notebook.cells[index].source, labels[index]
        display({"text/plain": cell_report_text(analysis, index, label, labels),
                 "text/html": cell_report_html(analysis, index, source, label, labels)}, raw=True)

    def _show_diff(self, notebook, analysis: Analysis, index: int, label: str) -> None:
        from .rewrite import fix_cell

        fixed = fix_cell(notebook, analysis, index)
        if fixed.failed:
            print(f"npu_distribute: {label}: not fixed: {fixed.failed}", file=sys.stderr)
        if fixed.source is None:
            print(f"npu_distribute: {label}: nothing to change")
            return
        diff = cell_diffs(notebook, {index: fixed.source}).replace(f"{notebook.path}:cell {index}", label)
        print(diff, end="")

    def _apply(self, notebook, analysis: Analysis, index: int, line: str, body: str) -> str:
        """The adapted body; the cell's text is replaced where the frontend can (Lab, Notebook 7)."""
        from .rewrite import fix_cell

        fixed = fix_cell(notebook, analysis, index)
        for finding in fixed.elsewhere:
            print(f"npu_distribute: line {finding.line}: {finding.code} needs a change outside this cell: "
                  f"{finding.fix}", file=sys.stderr)
        if fixed.failed:
            print(f"npu_distribute: not fixed: {fixed.failed}", file=sys.stderr)
        if fixed.source is None:
            return body
        header, _, new_body = fixed.source.partition("\n")
        new_text = f"{MAGIC_LINE} {line}".rstrip() + "\n" + new_body
        if fixed.setup_moved_here:
            print("npu_distribute: the adapter's setup was added at the top of this cell, because the cell "
                  "with `import tensorflow` has already run", file=sys.stderr)
        if self._in_kernel():
            self.shell.set_next_input(new_text, replace=True)
        else:
            print("npu_distribute: the adapted cell (paste it in place of the old one):")
            print(new_text)
        self.cells.replace_current(new_text)
        return new_body

    def _run_here(self, body: str):
        self.cells.paused = True
        try:
            result = self.shell.run_cell(body, store_history=False)
        finally:
            self.cells.paused = False
        if not result.success:
            raise _Failed("npu_distribute: the cell failed (see above)")
        return None

    @staticmethod
    def _in_kernel() -> bool:
        from IPython import get_ipython

        return getattr(get_ipython(), "kernel", None) is not None

    # ------------------------------------------------------------------------------- ranks

    @property
    def session(self):
        if self._session is None:
            from .sim.session import ClusterSession

            self._session = ClusterSession()
        return self._session

    def _run_on_ranks(self, body: str, n: Optional[int], timeout: Optional[float], analysis: Analysis,
                      plain: bool = False, one_card: bool = True):
        from .sim.cluster import ClusterError
        from .sim.session import SessionError

        try:
            self.session.ensure(n, tf1=analysis.tf1)
        except (SessionError, ClusterError) as error:
            raise UsageError(f"npu_distribute: {error}") from None
        current = self.cells.current
        index = current.execution_count if current is not None and current.execution_count else len(self.session.cells_run)
        view = None if plain else self._run_view()
        try:
            outcome = self.session.run_cell(index, body, timeout=timeout, one_card=one_card)
        finally:
            if view is not None:
                view.finish(self.session)
        if view is None:  # the widget shows them, and the one-card verdict when it comes
            self._print_checks()
            self._say_one_card_started()
        if outcome.status in ("error", "timeout"):
            raise _Failed(outcome.message or f"npu_distribute: cell {index} failed on the ranks (see above)")
        return None

    def _run_view(self):
        widgets = _widgets_module()
        if widgets is None or not self._in_kernel():
            return None
        from IPython.display import display

        view = widgets.RunView(self.session)
        display(view)
        return view

    def _print_checks(self) -> None:
        from .sim.session import checks_text

        print(checks_text(self.session.checks()))

    # Plain text has no line to update: the verdict is said by the next magic run (never printed from
    # the rerun's thread, which would write into whatever cell runs then), and by status and checks.

    def _say_one_card_started(self) -> None:
        check = self._session.one_card if self._session is not None else None
        if check is not None and not check.done() and not check.shown:
            print(f"{check.text}\n  the next %%npu_distribute, %npu_cluster status and checks say the verdict")

    def _say_one_card(self) -> None:
        """The verdict of the last one-card rerun, once, if it came and was not shown yet."""
        text = self._session.unshown_one_card() if self._session is not None else None
        if text is not None:
            print(f"cell {self._session.one_card.cell} failed on the ranks; {text}")

    @magic_arguments()
    @argument("action", choices=("start", "stop", "status", "restart", "autorun", "checks"))
    @argument("switch", nargs="?", choices=("on", "off"), help="autorun on|off")
    @argument("-n", "--np", dest="np", type=int, default=None, metavar="N", help="number of ranks (default 2)")
    @argument("--profile", default=None, metavar="NAME", help="an existing ipyparallel profile (MPI, Slurm, SSH)")
    @argument("--replay", action="store_true", help="start: first run the cells already run in this kernel")
    @argument("--tf1", action="store_true", help="TensorFlow 1 compatibility mode (found from the cells otherwise)")
    @argument("--timeout", type=float, default=None, metavar="S", help="seconds before a cell on the ranks is stopped")
    @argument("--reset", action="store_true", help="checks: forget what was observed so far (the ranks keep their state)")
    @line_magic
    def npu_cluster(self, line: str):
        """The simulated cluster's life cycle: start [-n N] [--replay] | stop | status | restart |
        autorun on|off | checks."""
        args = _parse(self.npu_cluster, line)
        if args is None:
            return None
        if args.action not in ("status", "checks"):
            self._say_one_card()
        if args.action == "autorun":
            return self._autorun(args.switch)
        if args.switch is not None:
            raise UsageError(f"%npu_cluster {args.action} takes no on/off")
        if args.action in ("start", "restart"):
            return self._start(args)
        if args.action == "stop":
            was = self.session.ranks if self.session.running else 0
            check = self.session.one_card
            rerunning = check is not None and not check.done()
            self.session.stop()
            print(f"stopped the simulated cluster ({was} ranks)" if was else "no simulated cluster was running")
            if rerunning:
                print(f"stopped the one-card rerun of the cells up to cell {check.cell}")
            return None
        if args.action == "status":
            print(self.session.status_text())
            return None
        if args.reset:
            from .sim.session import SessionError

            try:
                self.session.reset_checks()
            except SessionError as error:
                raise UsageError(f"npu_cluster: {error}") from None
            print("checks reset: the next training on the ranks is judged afresh")
            return None
        self._print_checks()
        one_card = self.session.one_card_text()
        if one_card is not None:
            print(one_card)
        return None

    def _start(self, args) -> None:
        from .sim.cluster import ClusterError
        from .sim.runner import detect_tf1

        n = args.np or (self.session.ranks if args.action == "restart" and self.session.ranks else 2)
        if n < 1:
            raise UsageError("-n must be at least 1")
        notebook, _, _ = self.cells.notebook()
        tf1 = args.tf1 or detect_tf1(notebook)
        print(f"starting {n} simulated ranks{' (TF1 mode)' if tf1 else ''}...", file=sys.stderr)
        try:
            self.session.start(n, profile=args.profile, tf1=tf1, timeout=args.timeout)
        except ClusterError as error:
            raise UsageError(f"npu_cluster: the cluster could not start: {error}") from None
        print(self.session.status_text())
        if args.replay:
            self._replay()

    def _replay(self) -> None:
        cells = [(cell.execution_count or number, source) for number, cell in self.cells.labelled()
                 if (source := replayable(cell.source)).strip()]
        if cells and self.cells.current is not None and replayable(self.cells.current.source) == cells[-1][1]:
            cells = cells[:-1]  # the cell running %npu_cluster start itself
        print(f"replaying {len(cells)} cell(s) on the ranks", file=sys.stderr)
        outcomes = self.session.replay(cells)
        failed = [o for o in outcomes if o.status in ("error", "timeout")]
        self._print_checks()
        self._say_one_card_started()
        if failed:
            raise _Failed(failed[0].message or f"npu_cluster: replay stopped: cell {failed[0].cell} failed on the ranks")

    def _autorun(self, switch: Optional[str]) -> None:
        if switch is None:
            raise UsageError("%npu_cluster autorun on|off")
        transformers = self.shell.input_transformers_cleanup
        if switch == "on":
            if _autorun_transform not in transformers:
                transformers.append(_autorun_transform)
            self.autorun = True
            print("autorun on: every following cell runs on the simulated ranks (%npu_cluster autorun off to stop)")
        else:
            while _autorun_transform in transformers:
                transformers.remove(_autorun_transform)
            self.autorun = False
            print("autorun off: cells run in this kernel again")

    # -------------------------------------------------------------------------- simulation

    @magic_arguments()
    @argument("switch", choices=("on", "off"))
    @argument("--force", action="store_true", help="even where a real Ascend adapter is importable")
    @line_magic
    def npu_sim(self, line: str):
        """Make the simulated npu_bridge / npu_device importable in this kernel at rank size 1 (every
        distributed call a no-op, as on one card)."""
        from .sim import adapter

        args = _parse(self.npu_sim, line)
        if args is None:
            return None
        if args.switch == "off":
            adapter.disable()
            print("simulated adapter off: import npu_device / npu_bridge finds the real one, if any")
            return
        if not adapter.enable(force=args.force):
            raise UsageError("a real Ascend adapter is importable here; %npu_sim on --force shadows it in this kernel")
        print("simulated adapter on (rank size 1: broadcast, all-reduce and sharding are no-ops, as on one card)")

    # ------------------------------------------------------------------------------- panel

    @line_magic
    def npu_panel(self, line: str = ""):
        """The report for the whole notebook so far."""
        return panel(self)

    # ---------------------------------------------------------------------------- frontend

    @property
    def frontend(self):
        if self._frontend is None:
            from .frontend import Frontend

            self._frontend = Frontend()
        return self._frontend

    def close(self) -> None:
        if self._session is not None:
            self._session.stop()
        transformers = self.shell.input_transformers_cleanup
        while _autorun_transform in transformers:
            transformers.remove(_autorun_transform)
        if self._frontend is not None:
            self._frontend.close()


def _parse(magic, line: str):
    """The magic's arguments; None after printing its help for ``-h``/``--help`` (IPython's ``magic?``
    shows the same text)."""
    if {"-h", "--help"} & set(line.split()):
        print(magic.__doc__)
        return None
    return parse_argstring(magic, line)


def replayable(source: str) -> str:
    """A cell as the ranks should run it again: our own magics' lines left out, and nothing of a
    ``%%npu_distribute --check``/``--diff`` cell (its code never ran)."""
    if not ran_in_kernel(source):
        return ""
    lines = source.splitlines(keepends=True)
    kept = [line for line in lines if not line.lstrip().startswith(_OWN_LINE_MAGICS)]
    text = "".join(kept)
    return text if any(line.strip() for line in kept) else ""


def _autorun_transform(lines):
    """``%npu_cluster autorun on``: a cell becomes ``%%npu_distribute --run`` of itself (ipyparallel's
    ``%autopx``), except cells of our own magics, so that ``autorun off`` still runs here."""
    text = "".join(lines)
    stripped = text.lstrip()
    if not stripped or stripped.startswith(_OWN_LINE_MAGICS) or stripped.startswith("%%npu_distribute"):
        return lines
    return [f"get_ipython().run_cell_magic('npu_distribute', '--run', {text!r})\n"]


def panel(magics: Optional[NpuMagics] = None):
    """``npu_migrate_nb.panel()``: the report of the whole notebook so far."""
    from IPython.display import display

    from .report import notebook_report_html, notebook_report_text

    magics = magics or _loaded_magics()
    notebook, _, labels = magics.cells.notebook()
    analysis = analyze(notebook)
    widgets = _widgets_module()
    if widgets is not None and magics._in_kernel():
        display(widgets.PanelView(magics.cells, analysis, frontend=magics.frontend))
        return None
    sources = {cell.index: cell.source for cell in notebook.cells}
    display({"text/plain": notebook_report_text(analysis, labels),
             "text/html": notebook_report_html(analysis, sources, labels)}, raw=True)
    return None


def pull(expression: str) -> list:
    from .sim.session import SessionError

    try:
        return _loaded_magics().session.pull(expression)
    except SessionError as error:
        raise RuntimeError(str(error)) from None


def one_card():
    magics = _loaded_magics()
    return magics._session.one_card if magics._session is not None else None


def _loaded_magics() -> NpuMagics:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("npu_migrate_nb.panel() runs in IPython: %load_ext npu_migrate_nb first")
    magics = shell.magics_manager.registry.get("NpuMagics")
    if magics is None:
        raise RuntimeError("%load_ext npu_migrate_nb first")
    return magics


def _widgets_module():
    """The widget views, unless ipywidgets is missing or NPU_MIGRATE_NB_WIDGETS=0 (a frontend that
    cannot render widgets: plain text and HTML then)."""
    import os

    if os.environ.get("NPU_MIGRATE_NB_WIDGETS", "1") == "0":
        return None
    try:
        from . import widgets
    except ImportError:  # no ipywidgets: HTML and plain text only
        return None
    return widgets


# ----------------------------------------------------------------------------- the extension


def load_ipython_extension(shell) -> None:
    magics = NpuMagics(shell)
    shell.register_magics(magics)
    shell.events.register("pre_run_cell", magics.cells.pre_run_cell)
    if getattr(shell, "kernel", None) is not None:
        magics.frontend.connect()  # the lab extension answers once this cell has finished


def unload_ipython_extension(shell) -> None:
    magics = shell.magics_manager.registry.get("NpuMagics")
    if magics is None:
        return
    try:
        shell.events.unregister("pre_run_cell", magics.cells.pre_run_cell)
    except ValueError:
        pass
    magics.close()
    for kind in ("line", "cell"):
        for name in ("npu_distribute", "npu_cluster", "npu_sim", "npu_panel"):
            shell.magics_manager.magics[kind].pop(name, None)
    del shell.magics_manager.registry["NpuMagics"]
