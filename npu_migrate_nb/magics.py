"""The notebook door: ``%%npu_distribute``, ``%npu_cluster``, ``%npu_sim``, ``%npu_panel`` and ``%npu_lang``.

Thin by design: the analysis is :func:`analysis.analyze` on the cells this kernel has run
(:mod:`.kernel_cells`), fixes are :func:`rewrite.fix_cell`, reports are :mod:`.report`, runs are a
:class:`sim.session.ClusterSession`. Loading the extension imports no TensorFlow.

What the magics say follows the kernel's language (:mod:`.i18n`: the kernel's environment, or
``%npu_lang``); help texts are translated when shown (``%%npu_distribute --help``), while IPython's
``magic?`` keeps the English text built at import.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser, argument, kwds, magic_arguments, parse_argstring

from . import i18n
from .analysis import BROADCAST_STYLES, REDUCTIONS, Analysis, Options, analyze
from .i18n import N_, _
from .kernel_cells import ExecutedCells, ran_in_kernel
from .project import find_root
from .report import cell_diffs, cell_report_html, cell_report_text
from .sim import DEFAULT_PROOF_STEPS

MAGIC_LINE = "%%npu_distribute"
# Our own line magics: never sent to the ranks when cells are replayed there.
_OWN_LINE_MAGICS = ("%npu_cluster", "%npu_sim", "%npu_panel", "%npu_lang", "%load_ext npu_migrate_nb",
                    "%reload_ext npu_migrate_nb")
_LINE_MAGICS = ("npu_cluster", "npu_sim", "npu_panel", "npu_lang")
AUTO = "auto"  # %npu_lang auto: follow the kernel's environment again
LANGUAGE_NAMES = {"en": N_("English"), "zh_CN": N_("Simplified Chinese")}


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

    # Descriptions and help texts are marked here and translated when the help is shown (_help).
    @magic_arguments()
    @kwds(description=N_("Analyze this cell in the context of the cells run so far, show what is missing or wrong,\n"
                         "and run it (here, adapted, or on simulated ranks)."))
    @argument("--check", action="store_true", help=N_("report only; the cell is not run"))
    @argument("--diff", action="store_true", help=N_("show the adapted code of this cell as a diff; not run"))
    @argument("--apply", action="store_true",
              help=N_("replace the cell's text with the adapted code (this line kept) and run the adapted code"))
    @argument("--run", action="store_true", help=N_("run the cell on the simulated ranks instead of this kernel"))
    @argument("-n", "--np", dest="np", type=int, default=None, metavar="N",
              help=N_("ranks of the simulated cluster started by --run (default 2)"))
    @argument("--timeout", type=float, default=None, metavar="S", help=N_("--run: seconds before the cell is stopped"))
    @argument("--steps", type=int, default=None, metavar="N",
              help=N_("--run: proof mode (the default): every training call stops once the checks are decided, "
                      "after at most N more steps (default 1)"))
    @argument("--full", action="store_true", help=N_("--run: train as written (no proof mode)"))
    @argument("--no-one-card", action="store_true",
              help=N_("--run: if the cell fails on the ranks, no rerun on one card (to tell if it fails there too)"))
    @argument("--reduction", choices=REDUCTIONS, default=None,
              help=N_("the all-reduce custom loops need (default: from the loss)"))
    @argument("--broadcast-style", choices=BROADCAST_STYLES, default="hooks-append",
              help=N_("Estimator broadcast: hooks=npu_hooks_append(...) or an explicit NPUBroadcastGlobalVariablesHook"))
    @argument("--ranks", type=int, default=8, metavar="N",
              help=N_("rank count literal batch sizes are checked against (default 8)"))
    @argument("--plain", action="store_true", help=N_("plain text and HTML only, no widgets"))
    @cell_magic
    def npu_distribute(self, line: str, cell: str):
        # Analyze this cell in the context of the cells run so far, show what is missing or wrong,
        # and run it (here, adapted, or on simulated ranks).
        args = _parse(self.npu_distribute, line)
        if args is None:
            return None
        self._say_one_card()
        if args.np is not None and args.np < 1:
            raise UsageError(_("-n must be at least 1"))
        full_source = f"{MAGIC_LINE} {line}".rstrip() + "\n" + cell
        notebook, index, labels = self.cells.notebook(full_source)
        options = Options(ranks=args.ranks, broadcast_style=args.broadcast_style, reduction=args.reduction,
                          current_cell=index, root=find_root(os.getcwd()))
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
            if args.steps is not None and (args.steps < 0 or args.full):
                raise UsageError(_("--steps must be at least 0, and is not for --full"))
            from .sim.runner import proof_steps_of

            proof_steps = proof_steps_of(args)
            return self._run_on_ranks(body, args.np, args.timeout, analysis, args.plain, not args.no_one_card,
                                      proof_steps)
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
            print(_("npu_distribute: {label}: not fixed: {reason}").format(label=label, reason=fixed.failed),
                  file=sys.stderr)
        if fixed.source is None:
            print(_("npu_distribute: {label}: nothing to change").format(label=label))
            return
        diff = cell_diffs(notebook, {index: fixed.source}).replace(f"{notebook.path}:cell {index}", label)
        print(diff, end="")

    def _apply(self, notebook, analysis: Analysis, index: int, line: str, body: str) -> str:
        """The adapted body; the cell's text is replaced where the frontend can (Lab, Notebook 7)."""
        from .rewrite import fix_cell

        fixed = fix_cell(notebook, analysis, index)
        for finding in fixed.elsewhere:
            print(_("npu_distribute: line {line}: {code} needs a change outside this cell: {fix}").format(
                line=finding.line, code=finding.code, fix=finding.fix), file=sys.stderr)
        if fixed.failed:
            print(_("npu_distribute: not fixed: {reason}").format(reason=fixed.failed), file=sys.stderr)
        if fixed.source is None:
            return body
        _header, _sep, new_body = fixed.source.partition("\n")
        new_text = f"{MAGIC_LINE} {line}".rstrip() + "\n" + new_body
        if fixed.setup_moved_here:
            print(_("npu_distribute: the adapter's setup was added at the top of this cell, because the cell "
                    "with `import tensorflow` has already run"), file=sys.stderr)
        if self._in_kernel():
            self.shell.set_next_input(new_text, replace=True)
        else:
            print(_("npu_distribute: the adapted cell (paste it in place of the old one):"))
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
            raise _Failed(_("npu_distribute: the cell failed (see above)"))
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
                      plain: bool = False, one_card: bool = True, proof_steps: Optional[int] = DEFAULT_PROOF_STEPS):
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
            outcome = self.session.run_cell(index, body, timeout=timeout, one_card=one_card, proof_steps=proof_steps)
        finally:
            if view is not None:
                view.finish(self.session)
        self._print_shortened(index)
        if view is None:  # the widget shows them, and the one-card verdict when it comes
            self._print_checks()
            self._say_one_card_started()
        if outcome.status in ("error", "timeout"):
            raise _Failed(outcome.message or _("npu_distribute: cell {cell} failed on the ranks (see above)").format(
                cell=index))
        return None

    def _run_view(self):
        widgets = _widgets_module()
        if widgets is None or not self._in_kernel():
            return None
        from IPython.display import display

        view = widgets.RunView(self.session)
        display(view)
        return view

    def _print_shortened(self, index: int) -> None:
        from .sim.runner import shortened_text

        lines = [shortened_text(record) for record in self.session.shortened_in(index)]
        if lines:
            print(_("proof mode (--full trains as written):") + "\n  " + "\n  ".join(lines))

    def _print_checks(self) -> None:
        from .sim.session import checks_text

        print(checks_text(self.session.checks()))

    # Plain text has no line to update: the verdict is said by the next magic run (never printed from
    # the rerun's thread, which would write into whatever cell runs then), and by status and checks.

    def _say_one_card_started(self) -> None:
        check = self._session.one_card if self._session is not None else None
        if check is not None and not check.done() and not check.shown:
            print(check.text + "\n  " + _("the next %%npu_distribute, %npu_cluster status and checks say the verdict"))

    def _say_one_card(self) -> None:
        """The verdict of the last one-card rerun, once, if it came and was not shown yet."""
        text = self._session.unshown_one_card() if self._session is not None else None
        if text is not None:
            print(_("cell {cell} failed on the ranks; {verdict}").format(cell=self._session.one_card.cell, verdict=text))

    @magic_arguments()
    @kwds(description=N_("The simulated cluster's life cycle: start [-n N] [--replay] | stop | status | restart |\n"
                         "autorun on|off | checks."))
    @argument("action", choices=("start", "stop", "status", "restart", "autorun", "checks"))
    @argument("switch", nargs="?", choices=("on", "off"), help=N_("autorun on|off"))
    @argument("-n", "--np", dest="np", type=int, default=None, metavar="N", help=N_("number of ranks (default 2)"))
    @argument("--profile", default=None, metavar="NAME", help=N_("an existing ipyparallel profile (MPI, Slurm, SSH)"))
    @argument("--replay", action="store_true", help=N_("start: first run the cells already run in this kernel"))
    @argument("--tf1", action="store_true", help=N_("TensorFlow 1 compatibility mode (found from the cells otherwise)"))
    @argument("--timeout", type=float, default=None, metavar="S", help=N_("seconds before a cell on the ranks is stopped"))
    @argument("--reset", action="store_true",
              help=N_("checks: forget what was observed so far (the ranks keep their state)"))
    @line_magic
    def npu_cluster(self, line: str):
        # The simulated cluster's life cycle: start [-n N] [--replay] | stop | status | restart |
        # autorun on|off | checks.
        args = _parse(self.npu_cluster, line)
        if args is None:
            return None
        if args.action not in ("status", "checks"):
            self._say_one_card()
        if args.action == "autorun":
            return self._autorun(args.switch)
        if args.switch is not None:
            raise UsageError(_("%npu_cluster {action} takes no on/off").format(action=args.action))
        if args.action in ("start", "restart"):
            return self._start(args)
        if args.action == "stop":
            was = self.session.ranks if self.session.running else 0
            check = self.session.one_card
            rerunning = check is not None and not check.done()
            self.session.stop()
            print(_("stopped the simulated cluster ({ranks} ranks)").format(ranks=was) if was
                  else _("no simulated cluster was running"))
            if rerunning:
                print(_("stopped the one-card rerun of the cells up to cell {cell}").format(cell=check.cell))
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
            print(_("checks reset: the next training on the ranks is judged afresh"))
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
            raise UsageError(_("-n must be at least 1"))
        notebook, _index, _labels = self.cells.notebook()
        tf1 = args.tf1 or detect_tf1(notebook)
        print(_("starting {count} simulated ranks (TF1 mode)...").format(count=n) if tf1
              else _("starting {count} simulated ranks...").format(count=n), file=sys.stderr)
        try:
            self.session.start(n, profile=args.profile, tf1=tf1, timeout=args.timeout)
        except ClusterError as error:
            raise UsageError(_("npu_cluster: the cluster could not start: {error}").format(error=error)) from None
        print(self.session.status_text())
        if args.replay:
            self._replay()

    def _replay(self) -> None:
        cells = [(cell.execution_count or number, source) for number, cell in self.cells.labelled()
                 if (source := replayable(cell.source)).strip()]
        if cells and self.cells.current is not None and replayable(self.cells.current.source) == cells[-1][1]:
            cells = cells[:-1]  # the cell running %npu_cluster start itself
        print(_("replaying {count} cell(s) on the ranks").format(count=len(cells)), file=sys.stderr)
        outcomes = self.session.replay(cells)
        failed = [o for o in outcomes if o.status in ("error", "timeout")]
        self._print_checks()
        self._say_one_card_started()
        if failed:
            raise _Failed(failed[0].message or _("npu_cluster: replay stopped: cell {cell} failed on the ranks").format(
                cell=failed[0].cell))

    def _autorun(self, switch: Optional[str]) -> None:
        if switch is None:
            raise UsageError("%npu_cluster autorun on|off")
        transformers = self.shell.input_transformers_cleanup
        if switch == "on":
            if _autorun_transform not in transformers:
                transformers.append(_autorun_transform)
            self.autorun = True
            print(_("autorun on: every following cell runs on the simulated ranks (%npu_cluster autorun off to stop)"))
        else:
            while _autorun_transform in transformers:
                transformers.remove(_autorun_transform)
            self.autorun = False
            print(_("autorun off: cells run in this kernel again"))

    # -------------------------------------------------------------------------- simulation

    @magic_arguments()
    @kwds(description=N_("Make the simulated npu_bridge / npu_device importable in this kernel at rank size 1 (every\n"
                         "distributed call a no-op, as on one card)."))
    @argument("switch", choices=("on", "off"))
    @argument("--force", action="store_true", help=N_("even where a real Ascend adapter is importable"))
    @line_magic
    def npu_sim(self, line: str):
        # Make the simulated npu_bridge / npu_device importable in this kernel at rank size 1 (every
        # distributed call a no-op, as on one card).
        from .sim import adapter

        args = _parse(self.npu_sim, line)
        if args is None:
            return None
        if args.switch == "off":
            adapter.disable()
            print(_("simulated adapter off: import npu_device / npu_bridge finds the real one, if any"))
            return
        if not adapter.enable(force=args.force):
            raise UsageError(_("a real Ascend adapter is importable here; %npu_sim on --force shadows it in this kernel"))
        print(_("simulated adapter on (rank size 1: broadcast, all-reduce and sharding are no-ops, as on one card)"))

    # ------------------------------------------------------------------------------- panel

    @line_magic
    def npu_panel(self, line: str = ""):
        """The report for the whole notebook so far."""
        return panel(self)

    # ---------------------------------------------------------------------------- language

    @magic_arguments()
    @kwds(description=N_("The language of what this kernel's magics and widgets say: zh_CN (zh-CN) or en for this\n"
                         "session, auto to follow the kernel's environment again (LANGUAGE, LC_ALL, LC_MESSAGES,\n"
                         "LANG); without an argument, the current language and the choices."))
    @argument("language", nargs="?", default=None, metavar="LANGUAGE", help=N_("zh_CN, zh-CN, en or auto"))
    @line_magic
    def npu_lang(self, line: str = ""):
        # The language of what this kernel's magics and widgets say (i18n.set_language for the kernel process).
        args = _parse(self.npu_lang, line)
        if args is None:
            return None
        if args.language is None:
            print(_language_line())
            print(_("choices: {choices}, or {auto} to follow the kernel's environment").format(
                choices=", ".join(i18n.LANGUAGES), auto=AUTO))
            return None
        if args.language.lower() == AUTO:
            i18n.set_language(None)
        else:
            try:
                chosen = i18n.choose(args.language)
            except ValueError:
                raise UsageError(_("unknown language {name!r}: choose one of {choices}").format(
                    name=args.language, choices=", ".join(i18n.LANGUAGES + (AUTO,)))) from None
            i18n.set_language(chosen)
        self._tell_ranks()
        print(_language_line())  # in the language just chosen
        return None

    def _tell_ranks(self) -> None:
        """Running ranks say their own messages in the kernel's new language too (ranks started later
        are given it by the cluster's engine settings)."""
        session = self._session
        if session is None or not session.running:
            return
        try:
            session.cluster.view.apply_async(i18n.set_language, i18n.current()).get(timeout=10)
        except Exception:  # a busy or dead rank keeps its language; what the kernel says has changed
            pass

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
    shows the same text, in English)."""
    if {"-h", "--help"} & set(line.split()):
        print(_help(magic))
        return None
    return parse_argstring(magic, line)


# argparse's own headings, as it names them (Python 3.10 renamed "optional arguments" to "options").
_ARGPARSE_TITLES = {"positional arguments": N_("positional arguments"), "options": N_("options"),
                    "optional arguments": N_("optional arguments")}


def _help(magic) -> str:
    """The magic's help in the current language: its parser made again with the description and the
    help texts translated (the English one, built at import, is ``magic.__doc__``)."""
    function = getattr(magic, "__func__", magic)
    english = function.parser
    parser = MagicArgumentParser(english.prog, description=_(english.description) if english.description else None)
    for group in (parser._positionals, parser._optionals):
        if group.title in _ARGPARSE_TITLES:
            group.title = _(_ARGPARSE_TITLES[group.title])
    group = None
    for decorator in function.decorators[::-1]:
        result = decorator.add_to_parser(parser, group)
        if result is not None:
            group = result
    for action in parser._actions:
        if action.help:
            action.help = _(action.help)  # marked with N_ where the argument is declared
    return parser.format_help()


def _language_line() -> str:
    language = i18n.current()
    name = _(LANGUAGE_NAMES[language]) if language in LANGUAGE_NAMES else language
    # i18n keeps the process's choice to itself; None: the language comes from the environment.
    if i18n._process_language is None:
        return _("language: {language} ({name}), from the kernel's environment").format(language=language, name=name)
    return _("language: {language} ({name}), chosen with %npu_lang").format(language=language, name=name)


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
    notebook, _index, labels = magics.cells.notebook()
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
        raise RuntimeError(_("npu_migrate_nb.panel() runs in IPython: %load_ext npu_migrate_nb first"))
    magics = shell.magics_manager.registry.get("NpuMagics")
    if magics is None:
        raise RuntimeError(_("%load_ext npu_migrate_nb first"))
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
        for name in ("npu_distribute",) + _LINE_MAGICS:
            shell.magics_manager.magics[kind].pop(name, None)
    del shell.magics_manager.registry["NpuMagics"]
