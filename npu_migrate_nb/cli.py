"""``npu-migrate-nb check | fix | run``: the command-line door.

Exit codes: 0 nothing to report, 1 findings (or a failed run), 2 unusable input. ``check`` and ``fix``
skip a non-Python notebook with one line on stderr (exit 0), as linters skip files they do not handle.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-migrate-nb",
        description="Find, insert and prove the three distributed steps of Ascend NPU training "
        "(variable broadcast, gradient aggregation, dataset sharding) in notebooks and scripts.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{check,fix,run,export}", required=True)

    check = commands.add_parser("check", help="report missing or wrong distributed steps")
    check.add_argument("paths", nargs="+", metavar="PATH", help=".ipynb notebooks or .py scripts")
    check.add_argument("--format", choices=("text", "json"), default="text")
    _add_analysis_options(check)

    fix = commands.add_parser("fix", help="insert the distributed steps in place (libcst)")
    fix.add_argument("path", metavar="PATH")
    target = fix.add_mutually_exclusive_group()
    target.add_argument("-o", "--output", metavar="OUT", help="write the adapted file here")
    target.add_argument(
        "--in-place", action="store_true", help="overwrite PATH, keeping the original as PATH.orig"
    )
    fix.add_argument("--diff", action="store_true", help="print a unified diff per changed cell")
    _add_analysis_options(fix)

    run = commands.add_parser("run", help="execute the cells on N simulated ranks and check the steps")
    run.add_argument("path", metavar="PATH")
    run.add_argument("-n", "--ranks", type=positive_int, default=2, metavar="N", help="number of ranks (default 2)")
    run.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per-cell timeout in seconds")
    run.add_argument("--format", choices=("text", "json"), default="text")
    run.add_argument("--tf1", action="store_true", help="run in TensorFlow 1 compatibility mode")
    run.add_argument(
        "--compare-single-card", action="store_true",
        help="also run on one card and check that N ranks reach its weights (doubles the run time)",
    )
    run.add_argument(
        "--profile", metavar="NAME", help="use an existing ipyparallel profile (MPI, Slurm, SSH...)"
    )
    run.add_argument(
        "--no-one-card", action="store_true",
        help="when a cell fails on the ranks, do not rerun the cells up to it on one card to tell whether "
        "the failure comes from the distributed run",
    )
    export = commands.add_parser(
        "export", help="write the notebook as a multi-card job: train.py, run_distributed.sh, README.md"
    )
    export.add_argument("path", metavar="NOTEBOOK")
    export.add_argument("-o", "--output", metavar="DIR", required=True, help="the folder to write the job to")
    export.add_argument("--devices-per-server", type=positive_int, default=8, metavar="N",
                        help="Ascend devices (one process each) per server (default 8)")
    export.add_argument("--servers", type=positive_int, default=1, metavar="N", help="servers in the job (default 1)")
    export.add_argument("--force", action="store_true",
                        help="export even when a step is missing or a pitfall is found")
    return parser


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_analysis_options(parser: argparse.ArgumentParser) -> None:
    from .analysis import BROADCAST_STYLES, REDUCTIONS

    parser.add_argument(
        "--ranks",
        type=positive_int,
        default=8,
        metavar="N",
        help="rank count to check literal batch sizes against (default 8, one Ascend server)",
    )
    parser.add_argument(
        "--broadcast-style",
        choices=BROADCAST_STYLES,
        default="hooks-append",
        help="Estimator broadcast: hooks=npu_hooks_append(...) (default) or an explicit "
        "NPUBroadcastGlobalVariablesHook appended to the hook list",
    )
    parser.add_argument(
        "--reduction",
        choices=REDUCTIONS,
        help="the all-reduce custom loops need (default: from the loss: sum when it is already divided "
        "by the global batch size, mean otherwise)",
    )


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
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
        print("npu-migrate-nb: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
