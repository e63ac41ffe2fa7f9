"""``npu-migrate-nb check | fix | run``: the command-line door.

Exit codes: 0 nothing to report, 1 findings (or a failed run), 2 unusable input. ``check`` and ``fix``
skip a non-Python notebook with one line on stderr (exit 0), as linters skip files they do not handle.

``--lang en|zh_CN`` (before or after the command) chooses the language of everything said, help
included; without it the environment decides (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``).
``--format json`` keeps its keys and codes in English; its messages are in the chosen language.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from typing import Iterator, List, Optional, Tuple

from . import __version__, i18n
from .docs_url import ENVIRONMENT_VARIABLE, package_docs_url
from .i18n import N_, _

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2
LANG_OPTION = "--lang"

# argparse's own words, in our catalog (argparse says them through the "messages" domain, which has no Chinese).
_POSITIONALS_TITLE = N_("positional arguments")
_OPTIONALS_TITLE = N_("options")


class _HelpFormatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):
        return super().add_usage(usage, actions, groups, _("usage: ") if prefix is None else prefix)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose own words (usage, section titles, -h, the error line) are in our catalog."""

    def __init__(self, *args, **kwargs):
        add_help = kwargs.pop("add_help", True)
        parents = kwargs.pop("parents", [])
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, add_help=False, **kwargs)
        self._positionals.title = _(_POSITIONALS_TITLE)
        self._optionals.title = _(_OPTIONALS_TITLE)
        if add_help:
            self.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS,
                              help=_("show this help message and exit"))
        for parent in parents:  # after -h, as argparse places them
            self._add_container_actions(parent)
            self._defaults.update(parent._defaults)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, _("{prog}: error: {message}").format(prog=self.prog, message=message) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="npu-migrate-nb",
        description=_("Find, insert and prove the three distributed steps of Ascend NPU training "
                      "(variable broadcast, gradient aggregation, dataset sharding) in notebooks and scripts."),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help=_("show program's version number and exit"))
    parser.add_argument(LANG_OPTION, type=language_argument, default=None, metavar="{en,zh_CN}",
                        help=_lang_help())
    # Accepted after the command too; SUPPRESS: a subcommand without it keeps the value given before it.
    language = _Parser(add_help=False)
    language.add_argument(LANG_OPTION, type=language_argument, default=argparse.SUPPRESS, metavar="{en,zh_CN}",
                          help=_lang_help())
    commands = parser.add_subparsers(dest="command", metavar="{check,fix,run,export}", required=True)

    check = commands.add_parser("check", parents=[language], help=_("report missing or wrong distributed steps"))
    check.add_argument("paths", nargs="+", metavar="PATH",
                       help=_(".ipynb notebooks, .py scripts, or directories (every notebook and entry script "
                              "in it, with the modules they import)"))
    check.add_argument("--format", choices=("text", "json"), default="text",
                       help=_("text: a line per finding, then the steps; json: each finding with the url of its "
                              "code's page (the site: {variable}, else {url})").format(
                           variable=ENVIRONMENT_VARIABLE, url=package_docs_url()))
    _add_analysis_options(check)

    fix = commands.add_parser("fix", parents=[language], help=_("insert the distributed steps in place (libcst)"))
    fix.add_argument("path", metavar="PATH")
    target = fix.add_mutually_exclusive_group()
    target.add_argument("-o", "--output", metavar="OUT", help=_("write the adapted file here"))
    target.add_argument(
        "--in-place", action="store_true", help=_("overwrite PATH, keeping the original as PATH.orig")
    )
    fix.add_argument("--diff", action="store_true", help=_("print a unified diff per changed cell"))
    _add_analysis_options(fix)

    run = commands.add_parser("run", parents=[language],
                              help=_("execute the cells on N simulated ranks and check the steps"),
                              epilog=_("arguments after -- go to the script, in sys.argv: run train.py -n 2 -- "
                                       "--epochs 1"))
    run.add_argument("path", metavar="PATH")
    run.add_argument("-n", "--ranks", type=positive_int, default=2, metavar="N",
                     help=_("number of ranks (default 2)"))
    _add_root_option(run)
    run.add_argument("--timeout", type=float, default=300.0, metavar="S", help=_("per-cell timeout in seconds"))
    run.add_argument("--format", choices=("text", "json"), default="text")
    run.add_argument("--tf1", action="store_true", help=_("run in TensorFlow 1 compatibility mode"))
    proof = run.add_mutually_exclusive_group()
    proof.add_argument("--steps", type=non_negative_int, default=None, metavar="N",
                       help=_("proof mode (the default): every training call stops once the checks are decided, "
                              "after at most N more steps (default 1)"))
    proof.add_argument("--full", action="store_true", help=_("train as written: every epoch and step of every "
                                                            "training call (no proof mode)"))
    run.add_argument(
        "--compare-single-card", action="store_true",
        help=_("also run on one card and check that N ranks reach its weights (doubles the run time)"),
    )
    run.add_argument(
        "--profile", metavar="NAME", help=_("use an existing ipyparallel profile (MPI, Slurm, SSH...)")
    )
    run.add_argument(
        "--no-one-card", action="store_true",
        help=_("when a cell fails on the ranks, do not rerun the cells up to it on one card to tell whether "
               "the failure comes from the distributed run"),
    )
    export = commands.add_parser(
        "export", parents=[language],
        help=_("write the notebook as a multi-card job: train.py, run_distributed.sh, README.md"),
    )
    export.add_argument("path", metavar="NOTEBOOK")  # or a project's entry script, with its arguments after --
    export.add_argument("-o", "--output", metavar="DIR", required=True, help=_("the folder to write the job to"))
    export.add_argument("--devices-per-server", type=positive_int, default=8, metavar="N",
                        help=_("Ascend devices (one process each) per server (default 8)"))
    export.add_argument("--servers", type=positive_int, default=1, metavar="N",
                        help=_("servers in the job (default 1)"))
    export.add_argument("--force", action="store_true",
                        help=_("export even when a step is missing or a pitfall is found"))
    _add_root_option(export)
    return parser


def _lang_help() -> str:
    return _("the language of the messages: en or zh_CN (zh-CN also); default: from LANGUAGE, LC_ALL, "
             "LC_MESSAGES or LANG")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(_("must be at least 1, not {value}").format(value=value))
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(_("must be at least 0, not {value}").format(value=value))
    return value


def language_argument(text: str) -> str:
    try:
        return i18n.choose(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def language_in(argv: List[str]) -> Optional[str]:
    """The language ``--lang`` asks for, wherever it is in ``argv`` (the help texts are said in it, so
    it is known before the parser is built); None without it; ValueError for one we do not have."""
    chosen = None
    for index, word in enumerate(argv):
        if word == "--":
            break
        if word == LANG_OPTION and index + 1 < len(argv):
            chosen = i18n.choose(argv[index + 1])
        elif word.startswith(LANG_OPTION + "="):
            chosen = i18n.choose(word.partition("=")[2])
    return chosen


@contextlib.contextmanager
def speaking(name: Optional[str]) -> Iterator[None]:
    """Say everything in ``name`` (None: as the environment says) until the command returns: the
    process's language (the simulator's threads follow it), restored afterwards for callers of ``main``."""
    if name is None:
        yield
        return
    previous = getattr(i18n, "_process_language", None)
    i18n.set_language(name)
    try:
        with i18n.language(name):
            yield
    finally:
        i18n.set_language(previous)


def _add_root_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", metavar="DIR",
        help=_("the project's root, run with on PYTHONPATH: modules are looked up from the file's folder, "
               "then from it (default: the nearest folder above with pyproject.toml, setup.py, setup.cfg or "
               ".git, else the folder above the top package)"),
    )


def _add_analysis_options(parser: argparse.ArgumentParser) -> None:
    from .analysis import BROADCAST_STYLES, REDUCTIONS

    _add_root_option(parser)
    parser.add_argument(
        "--ranks",
        type=positive_int,
        default=8,
        metavar="N",
        help=_("rank count to check literal batch sizes against (default 8, one Ascend server)"),
    )
    parser.add_argument(
        "--broadcast-style",
        choices=BROADCAST_STYLES,
        default="hooks-append",
        help=_("Estimator broadcast: hooks=npu_hooks_append(...) (default) or an explicit "
               "NPUBroadcastGlobalVariablesHook appended to the hook list"),
    )
    parser.add_argument(
        "--reduction",
        choices=REDUCTIONS,
        help=_("the all-reduce custom loops need (default: from the loss: sum when it is already divided "
               "by the global batch size, mean otherwise)"),
    )


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        chosen = language_in(argv)
    except ValueError as error:
        print(f"npu-migrate-nb: {error}", file=sys.stderr)
        return EXIT_INPUT
    argv, arguments = script_arguments(argv)
    with speaking(chosen):
        parser = build_parser()
        args = parser.parse_args(argv)
        if arguments and args.command not in ("run", "export"):
            parser.error(_("only run and export pass arguments after -- (to the script)"))
        args.arguments = arguments
        with _collecting_rarely():
            return _main(args)


@contextlib.contextmanager
def _collecting_rarely():
    """As mypy does: the analysis makes millions of syntax-tree nodes that live to the end, and at
    Python's default threshold (700 allocations) the collector walks them again and again: a quarter
    of ``check``'s CPU on a directory of 500 scripts (benchmarks/bench_project.py)."""
    before = gc.get_threshold()
    gc.set_threshold(200_000, 30, 30)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def script_arguments(argv: List[str]) -> Tuple[List[str], List[str]]:
    """``argv`` split at its first ``--``: what we parse, and what ``run`` gives the script."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "check":
            from .commands import check_command

            return check_command(args)
        if args.command == "fix":
            from .commands import fix_command

            return fix_command(args)
        if args.command == "export":
            from .export import export_command

            return export_command(args)
        from .sim.runner import run_command

        return run_command(args)
    except KeyboardInterrupt:
        print("npu-migrate-nb: " + _("interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
