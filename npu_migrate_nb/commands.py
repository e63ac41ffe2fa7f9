"""What ``check`` and ``fix`` do, between the argument parser and the analysis half."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace as with_changes
from typing import List, Optional, Tuple

from .analysis import Analysis, Options, analyze
from .i18n import _
from .notebook import InputError, Notebook, atomic_write, load, render
from .report import cell_diffs, json_report, summary_lines, text_report, unified_diff

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2


def options_from(args) -> Options:
    return Options(ranks=args.ranks, broadcast_style=args.broadcast_style, reduction=args.reduction)


def exit_code_for(analysis: Analysis) -> int:
    if not analysis.python:
        return EXIT_OK  # skipped, as linters skip files they do not handle (reported on stderr)
    missing = any(status == "missing" for status in analysis.steps.values())
    return EXIT_FINDINGS if (missing or analysis.problems or analysis.errors) else EXIT_OK


def check_command(args) -> int:
    analyses: List[Analysis] = []
    status = EXIT_OK
    for path in args.paths:
        analysis, code = _analyze_path(path, options_from(args))
        status = max(status, code)
        if analysis is not None:
            analyses.append(analysis)
    if analyses:
        sys.stdout.write(json_report(analyses) if args.format == "json" else text_report(analyses))
    return status


def _analyze_path(path: str, options: Options) -> Tuple[Optional[Analysis], int]:
    try:
        notebook = load(path)
    except InputError as error:
        _complain(error)
        return None, EXIT_INPUT
    analysis = analyze(notebook, options)
    if not analysis.python:
        _skip(path, analysis)
    return analysis, exit_code_for(analysis)


def fix_command(args) -> int:
    try:
        notebook = load(args.path)
    except InputError as error:
        _complain(error)
        return EXIT_INPUT
    options = options_from(args)
    analysis = analyze(notebook, options)
    if not analysis.python:
        _skip(args.path, analysis)  # nothing written, not even with -o
        return exit_code_for(analysis)
    from .rewrite import fix_notebook  # libcst: only ``fix`` pays for it

    result = fix_notebook(notebook, analysis)
    for cell, reason in result.failed:
        where = cell if isinstance(cell, str) else f"{args.path}:cell {cell}"
        print("npu-migrate-nb: " + _("{where}: not fixed: {reason}").format(where=where, reason=reason),
              file=sys.stderr)
    try:
        text = render(notebook, result.sources)
    except InputError as error:
        _complain(error)
        return EXIT_INPUT
    if args.diff or not (args.output or args.in_place):
        sys.stdout.write(cell_diffs(notebook, result.sources))
    if args.diff or not args.in_place:
        sys.stdout.write("".join(unified_diff(old, new, path) for path, (old, new) in result.modules.items()))
    written = _write(args, notebook, text, bool(result.sources))
    _write_modules(args, result.modules)
    remaining = _remaining(notebook, result.sources, options)
    _summarize(args.path, result, remaining, written)
    return exit_code_for(remaining)


def _write(args, notebook: Notebook, text: str, changed: bool) -> Optional[str]:
    if args.output:
        atomic_write(args.output, text)
        return args.output
    if args.in_place and changed:
        backup = args.path + ".orig"
        shutil.copy2(args.path, backup)
        atomic_write(args.path, text)
        return args.path
    return None


def _write_modules(args, modules) -> None:
    """The notebook's own modules are rewritten only with ``--in-place`` (each keeps a ``.orig``);
    otherwise their diff is printed and they are named here."""
    for path, (_old, new) in sorted(modules.items()):
        if args.in_place:
            shutil.copy2(path, path + ".orig")
            atomic_write(path, new)
            print("npu-migrate-nb: " + _("{path}: fixed in place (the original is {path}.orig)").format(path=path),
                  file=sys.stderr)
        else:
            print("npu-migrate-nb: " + _("{path}: has fixes too, not written: use --in-place, or apply its diff")
                  .format(path=path), file=sys.stderr)


def _remaining(notebook: Notebook, sources, options: Options) -> Analysis:
    cells = [with_changes(cell, source=sources.get(cell.index, cell.source)) for cell in notebook.cells]
    return analyze(with_changes(notebook, cells=cells), options)


def _summarize(path: str, result, remaining: Analysis, written: Optional[str]) -> None:
    changed = len(result.sources)
    if written:
        where = _(", wrote {path}").format(path=written)
    else:
        where = _(", nothing written (use -o OUT or --in-place)") if changed else ""
    modules = _(" and {count} module(s)").format(count=len(result.modules)) if result.modules else ""
    print(
        "npu-migrate-nb: " + _("{path}: applied {fixes} fix(es) in {cells} cell(s){modules}{where}").format(
            path=path, fixes=len(result.applied), cells=changed, modules=modules, where=where),
        file=sys.stderr,
    )
    left = remaining.problems
    if left:
        print("npu-migrate-nb: " + _("{count} finding(s) need your attention:").format(count=len(left)),
              file=sys.stderr)
        for finding in left:
            print(f"  {finding.where(path)}: {finding.severity}: {finding.message} [{finding.code}]", file=sys.stderr)
    after = _("{path} (after fix):").format(path=path)
    for line in summary_lines(remaining):
        print(line.replace(f"{path}:", after, 1), file=sys.stderr)


def _skip(path: str, analysis: Analysis) -> None:
    print("npu-migrate-nb: " + _("{path}: not a Python notebook ({language}), skipped").format(
        path=path, language=analysis.language), file=sys.stderr)


def _complain(error: InputError) -> None:
    print(f"npu-migrate-nb: {error}", file=sys.stderr)
