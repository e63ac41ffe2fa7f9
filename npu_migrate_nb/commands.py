"""What ``check`` and ``fix`` do, between the argument parser and the analysis half."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace as with_changes
from typing import List, Optional, Tuple

from .analysis import Analysis, Options, analyze
from .i18n import _
from .notebook import InputError, Notebook, atomic_write, load, loads_notebook, read_text, render
from .modules import MAX_PROJECT_MODULES
from .project import SKIPPED_FOLDERS, entry_folder_and_root, find_root, open_project, project_files
from .report import cell_diffs, json_report, summary_lines, text_report, unified_diff

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2


def options_from(args) -> Options:
    return Options(ranks=args.ranks, broadcast_style=args.broadcast_style, reduction=args.reduction,
                   max_modules=MAX_PROJECT_MODULES)


def entry_options(options: Options, path: str, root: Optional[str]) -> Options:
    """``options`` for one entry of a project: its modules looked up from its folder, then the root."""
    return with_changes(options, **entry_folder_and_root(path, root))


def targets(path: str, root: Optional[str]) -> Tuple[List[str], Optional[str]]:
    """The notebooks and scripts ``path`` stands for: itself, or a directory's entries (project.py);
    and the project's root (given, else found above ``path``)."""
    if os.path.isdir(path):
        project = open_project(path, root)
        return project.entries, project.root
    return [path], os.path.abspath(root) if root else find_root(path)


def exit_code_for(analysis: Analysis) -> int:
    if not analysis.python:
        return EXIT_OK  # skipped, as linters skip files they do not handle (reported on stderr)
    missing = any(status == "missing" for status in analysis.steps.values())
    return EXIT_FINDINGS if (missing or analysis.problems or analysis.errors) else EXIT_OK


def check_command(args) -> int:
    analyses: List[Analysis] = []
    quiet = 0  # a directory's entries without training and without findings: counted, not shown
    status = EXIT_OK
    for path in args.paths:
        try:
            entries, root = targets(path, args.root)
        except InputError as error:
            _complain(error)
            status = EXIT_INPUT
            continue
        directory = os.path.isdir(path)
        for entry in entries:
            analysis, code = _analyze_path(entry, entry_options(options_from(args), entry, root))
            status = max(status, code)
            if analysis is None:
                continue
            if directory and args.format == "text" and _nothing_to_say(analysis):
                quiet += 1
                continue
            analyses.append(analysis)
    once_per_module(analyses)
    if analyses:
        sys.stdout.write(json_report(analyses) if args.format == "json" else text_report(analyses))
    if quiet:
        sys.stdout.write(_("{count} more file(s): no training, nothing to report").format(count=quiet) + "\n")
    return status


def _nothing_to_say(analysis: Analysis) -> bool:
    return analysis.framework == "none" and not analysis.findings and not analysis.errors


def once_per_module(analyses: List[Analysis]) -> None:
    """A module two entries import is reported once, with the first entry that reaches it."""
    said = set()
    for analysis in analyses:
        kept = []
        for finding in analysis.findings:
            key = (finding.path, finding.line, finding.column, finding.code)
            if finding.path is None or key not in said:
                kept.append(finding)
                said.add(key)
        analysis.findings = kept


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
    if os.path.isdir(args.path):
        return fix_project_command(args)
    try:
        notebook = load(args.path)
    except InputError as error:
        _complain(error)
        return EXIT_INPUT
    options = entry_options(options_from(args), args.path, args.root)
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


def fix_project_command(args) -> int:
    """``fix DIR``: every entry of the project fixed, in a working copy of its notebooks and scripts
    (an entry sees what the entries before it changed in a module they share: fixed once), then the
    changed files written back (``--in-place``, each keeping a ``.orig``), or the project's tree copied
    to ``-o OUT`` with them, or their diffs printed."""
    try:
        project = open_project(args.path, args.root)
        _refuse_output(args.output)
    except InputError as error:
        _complain(error)
        return EXIT_INPUT
    with tempfile.TemporaryDirectory(prefix="npu-migrate-nb-") as work:
        copy = ProjectCopy(project.root, work, args.path)
        changed, fixes = {}, 0  # project file -> (its text before, after every entry's fixes)
        for entry in project.entries:
            outcome = _fix_entry_in(copy, entry, options_from(args))
            if outcome is None:
                continue
            fixes += outcome[0]
            for original, (old, new) in outcome[1].items():
                changed[original] = (changed.get(original, (old,))[0], new)
        status = max([EXIT_OK] + [_report_remaining(copy, entry, options_from(args)) for entry in project.entries])
    if args.diff or not (args.output or args.in_place):
        sys.stdout.write("".join(_file_diff(path, old, new, os.path.relpath(path, project.root))
                                 for path, (old, new) in changed.items()))
    written = _write_project(args, project.root, changed)
    print("npu-migrate-nb: " + _("{path}: applied {fixes} fix(es) in {files} file(s){where}").format(
        path=args.path, fixes=fixes, files=len(changed), where=written), file=sys.stderr)
    return status


class ProjectCopy:
    """The project's notebooks and scripts copied under ``work``, and the way between their paths."""

    def __init__(self, root: str, work: str, directory: str):
        """The directory's notebooks and scripts, and the root's other scripts (modules it may import)."""
        self.root, self.work = root, work
        inside = os.path.abspath(directory) + os.sep
        for path in project_files(root) if root != os.path.abspath(directory) else project_files(directory):
            if path.endswith(".ipynb") and not os.path.abspath(path).startswith(inside):
                continue
            copied = self.copied(path)
            os.makedirs(os.path.dirname(copied), exist_ok=True)
            shutil.copy2(path, copied)

    def copied(self, path: str) -> str:
        return os.path.join(self.work, os.path.relpath(os.path.abspath(path), self.root))

    def in_project(self, path: str) -> str:
        """The project's file (absolute) for a path of the copy (absolute, or relative to the copy)."""
        return os.path.join(self.root, os.path.relpath(os.path.join(self.work, path), self.work))

    def original(self, path: str) -> str:
        """The project's file for a path of the copy, as the person would name it."""
        return _as_given(self.in_project(path))


def _as_given(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _fix_entry_in(copy: ProjectCopy, entry: str, options: Options):
    """Fix the copy of ``entry``: (fixes applied, {project path: (old, new)}) of the files it changed,
    written into the copy; None when it is not a Python notebook or cannot be read."""
    from .rewrite import fix_notebook  # libcst: only ``fix`` pays for it

    copied = copy.copied(entry)
    try:
        notebook = load(copied)
    except InputError as error:
        _complain(InputError(_as_given(entry), error.message, error.cell, error.line))
        return None
    analysis = analyze(notebook, with_changes(options, base=os.path.dirname(copied), root=copy.work,
                                             paths_from=copy.work))
    if not analysis.python:
        return None
    result = fix_notebook(notebook, analysis)
    for where, reason in result.failed:
        place = copy.original(where) if isinstance(where, str) else f"{_as_given(entry)}:cell {where}"
        print("npu-migrate-nb: " + _("{where}: not fixed: {reason}").format(where=place, reason=reason),
              file=sys.stderr)
    files = {}
    if result.sources:
        text = render(notebook, result.sources)
        files[copy.in_project(copied)] = (read_text(copied), text)
        atomic_write(copied, text)
    for path, (old, new) in result.modules.items():
        files[copy.in_project(path)] = (old, new)
        atomic_write(os.path.join(copy.work, path), new)
    return len(result.applied), files


def _file_diff(path: str, old: str, new: str, name: str) -> str:
    """A script's unified diff, or a notebook's diff per changed cell, named ``name``."""
    if not path.endswith(".ipynb"):
        return unified_diff(old, new, name)
    before, after = loads_notebook(old, name), loads_notebook(new, name)
    sources = {cell.index: cell.source for cell in after.cells
               if cell.index < len(before.cells) and cell.source != before.cells[cell.index].source}
    return cell_diffs(before, sources)


def _report_remaining(copy: ProjectCopy, entry: str, options: Options) -> int:
    """What is left in the fixed copy of ``entry``, said with the project's own paths; its exit code."""
    copied = copy.copied(entry)
    try:
        notebook = load(copied)
    except InputError:
        return EXIT_INPUT
    remaining = analyze(notebook, with_changes(options, base=os.path.dirname(copied), root=copy.work,
                                              paths_from=copy.work))
    if not remaining.python or _nothing_to_say(remaining):
        return exit_code_for(remaining)
    shown = _as_given(entry)
    for finding in remaining.problems:
        place = (copy.original(finding.path) + f":{finding.line}:{finding.column}" if finding.path is not None
                 else f"{shown}:cell {finding.cell}:{finding.line}:{finding.column}")
        print(f"  {place}: {finding.severity}: {finding.message} [{finding.code}]", file=sys.stderr)
    after = _("{path} (after fix):").format(path=shown)
    for line in summary_lines(remaining):
        print(line.replace(f"{remaining.path}:", after, 1), file=sys.stderr)
    return exit_code_for(remaining)


def _refuse_output(output: Optional[str]) -> None:
    if output and os.path.exists(output):
        raise InputError(output, _("already exists: -o writes a new copy of the project"))


def _write_project(args, root: str, changed) -> str:
    """Write the changed files as asked; what was written, said for the summary line. ``-o OUT`` is
    a copy of the directory given (a module of the root outside it is named, not written)."""
    if args.output:
        directory = os.path.abspath(args.path)
        staging = tempfile.mkdtemp(prefix=".npu-migrate-nb-", dir=os.path.dirname(os.path.abspath(args.output)))
        tree = os.path.join(staging, "tree")
        shutil.copytree(directory, tree, ignore=shutil.ignore_patterns(*SKIPPED_FOLDERS))
        for path, (_old, new) in changed.items():
            relative = os.path.relpath(path, directory)
            if relative.startswith(".."):
                print("npu-migrate-nb: " + _("{path}: has fixes too, outside {directory}: not in the copy; use "
                                             "--in-place, or give the project's root").format(
                    path=_as_given(path), directory=args.path), file=sys.stderr)
                continue
            atomic_write(os.path.join(tree, relative), new)
        os.replace(tree, args.output)  # the copy appears whole, or not at all
        os.rmdir(staging)
        return _(", wrote {path}").format(path=args.output)
    if args.in_place:
        for path, (_old, new) in sorted(changed.items()):
            shutil.copy2(path, path + ".orig")
            atomic_write(path, new)
        return _(", fixed in place (each original kept as FILE.orig)") if changed else ""
    return _(", nothing written (use -o OUT or --in-place)") if changed else ""


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
