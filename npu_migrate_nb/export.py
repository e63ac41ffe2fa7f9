"""``npu-migrate-nb export``: a notebook proven on the simulator, as the multi-card job that a real
Ascend server runs: ``train.py`` (the cells as a script), ``run_distributed.sh`` (one process per
device, the rank environment, the rank table) and a ``README.md``.

IPython syntax is translated line by line, never dropped without a note: every line that changed
is reported (``NOTEBOOK:cell N:LINE: kind: what became of it``).
"""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from . import i18n
from .analysis import Analysis, Options, analyze
from .i18n import N_, _
from .ipython_syntax import _split_code_magic, mask
from .notebook import Cell, InputError, Notebook, atomic_write, load
from .report import finding_lines, summary_lines

EXIT_OK, EXIT_REFUSED, EXIT_INPUT = 0, 1, 2
TEMPLATES = os.path.join(os.path.dirname(__file__), "export_templates")
SCRIPT_NAME, LAUNCHER_NAME, README_NAME = "train.py", "run_distributed.sh", "README.md"
PROJECT_README_NAME = "README.project.md"
MARK = "npu-migrate-nb export"  # starts every comment the export writes in place of a line

# Line magics that only change what the notebook shows or how IPython behaves: nothing to run.
DISPLAY_MAGICS = frozenset({
    "matplotlib", "config", "load_ext", "reload_ext", "unload_ext", "autoreload", "aimport", "precision",
    "pprint", "who", "whos", "who_ls", "lsmagic", "history", "pwd", "tensorboard", "xmode", "colors",
    "page", "pinfo", "pinfo2", "psearch", "pdoc", "pdef", "psource", "pfile", "magic", "quickref",
    "automagic", "autocall", "autosave", "autoawait", "doctest_mode", "notebook", "qtconsole",
    "connect_info", "autopx", "npu_cluster", "npu_sim", "npu_panel", "ls", "dhist", "dirs",
})
INSTALL_MAGICS = frozenset({"pip", "conda", "mamba"})
INSTALL_COMMANDS = frozenset({"pip", "pip3", "conda", "mamba", "apt", "apt-get", "yum", "dnf"})
SHELL_MAGICS = frozenset({"sx", "system"})
# Calls that wait for a person; in a rank (stdin is /dev/null) they fail or do nothing.
INTERACTIVE_CALLS = {
    "input": N_("input() reads stdin, which is /dev/null in a rank: it raises EOFError"),
    "getpass": N_("getpass() waits for a person: a batch job has none"),
    "breakpoint": N_("breakpoint() stops for a debugger: a batch job has no one at the prompt"),
    "set_trace": N_("set_trace() stops for a debugger: a batch job has no one at the prompt"),
    "embed": N_("embed() opens an interactive shell: a batch job has no one at the prompt"),
    "interact": N_("an ipywidgets interact() callback needs a browser: in a script it never runs"),
    "interact_manual": N_("an ipywidgets interact_manual() callback needs a browser: in a script it never runs"),
    "get_ipython": N_("get_ipython() is defined only in IPython: the script raises NameError"),
}
_ASSIGNED_SHELL = re.compile(r"^([\w.,\s()\[\]*]+?)\s*=\s*(!{1,2}|%sx\s|%system\s)(.*)$")
_ASSIGNED_MAGIC = re.compile(r"^([\w.,\s()\[\]*]+?)\s*=\s*%(\w+)\s*(.*)$")
_LINE_MAGIC = re.compile(r"^%(\w+)\s*(.*)$")
_TRANSLATION_MODULES = re.compile(r"\b(subprocess|os|runpy)\.(?:run|chdir|environ|path|run_path)\b")
_LOOKS_LIKE_MARKER = re.compile(r"^#[ \t]?%%", re.MULTILINE)
_HELP = re.compile(r"^(\?{1,2}[\w.]+|[\w.]+\s*\?{1,2})\s*$")


@dataclass
class Note:
    """What became of one IPython line (or call) of the notebook."""

    cell: int
    line: int  # 1-based, in the notebook's cell
    kind: str  # removed | kept | translated | subprocess | comment | interactive
    message: str

    @property
    def severity(self) -> str:
        return "warning" if self.kind in ("comment", "interactive") else "info"

    def text(self, path: str) -> str:
        return f"{path}:cell {self.cell}:{self.line}: {self.severity}: {self.kind}: {self.message}"


@dataclass
class Script:
    text: str
    notes: List[Note] = field(default_factory=list)


# ------------------------------------------------------------------------------------- the door


def export_command(args) -> int:
    try:
        notebook = load(args.path)
    except InputError as error:
        print(f"npu-migrate-nb: {error}", file=sys.stderr)
        return EXIT_INPUT
    if not notebook.is_python:
        print("npu-migrate-nb: " + _("{path}: not a Python notebook ({language})").format(
            path=args.path, language=notebook.language), file=sys.stderr)
        return EXIT_INPUT
    from .commands import entry_options

    root = getattr(args, "root", None)
    from .modules import MAX_PROJECT_MODULES

    options = entry_options(Options(ranks=args.devices_per_server * args.servers, max_modules=MAX_PROJECT_MODULES),
                            args.path, root)
    analysis = analyze(notebook, options)
    if not args.force and not ready_to_launch(analysis):
        print("npu-migrate-nb: " + _("{path}: not exported: what is launched must be what was proven "
                                     "(run `npu-migrate-nb fix`, or --force):").format(path=args.path),
              file=sys.stderr)
        print("\n".join(finding_lines(analysis) + summary_lines(analysis)), file=sys.stderr)
        return EXIT_REFUSED
    arguments = getattr(args, "arguments", [])
    if notebook.kind == "script" and (analysis.context.modules.found or root or arguments):
        program = Program.of_project(args.output, args.path, options.root, arguments)
        written = write_project_job(args.output, notebook, program, args.devices_per_server, args.servers)
        print("npu-migrate-nb: " + _("{path}: exported for {servers} server(s) of {devices} device(s): {files}").format(
            path=args.path, servers=args.servers, devices=args.devices_per_server, files=", ".join(written)),
            file=sys.stderr)
        return EXIT_OK
    script = script_from(notebook)
    for note in script.notes:
        print(note.text(args.path))
    written = write_job(args.output, notebook, script, args.devices_per_server, args.servers)
    print("npu-migrate-nb: " + _("{path}: exported for {servers} server(s) of {devices} device(s): {files}").format(
        path=args.path, servers=args.servers, devices=args.devices_per_server, files=", ".join(written)),
        file=sys.stderr)
    return EXIT_OK


def ready_to_launch(analysis: Analysis) -> bool:
    """No step missing, no error or warning, every cell readable: what ``check`` passes."""
    missing = any(status == "missing" for status in analysis.steps.values())
    return not (missing or analysis.problems or analysis.errors)


def write_job(directory: str, notebook: Notebook, script: Script, devices_per_server: int, servers: int) -> List[str]:
    os.makedirs(directory, exist_ok=True)
    source = os.path.basename(notebook.path)
    files = {
        SCRIPT_NAME: script.text,
        LAUNCHER_NAME: launcher_text(source, devices_per_server, servers),
        README_NAME: readme_text(source, devices_per_server, servers),
    }
    written = []
    for name, text in files.items():
        path = os.path.join(directory, name)
        atomic_write(path, text)
        os.chmod(path, 0o755 if name == LAUNCHER_NAME else 0o644)  # atomic_write's temporary file is 0600
        written.append(path)
    return written


def write_project_job(directory: str, entry: Notebook, program: "Program", devices_per_server: int,
                      servers: int) -> List[str]:
    """A project's job: the launcher and its README; the entry script runs in place, in its project."""
    os.makedirs(directory, exist_ok=True)
    source = os.path.basename(entry.path)
    files = {LAUNCHER_NAME: _template(LAUNCHER_NAME, source, devices_per_server, servers, program),
             README_NAME: _template(_translated(PROJECT_README_NAME), source, devices_per_server, servers, program)}
    written = []
    for name, text in files.items():
        path = os.path.join(directory, name)
        atomic_write(path, text)
        os.chmod(path, 0o755 if name == LAUNCHER_NAME else 0o644)
        written.append(path)
    return written


def _translated(name: str) -> str:
    """A template's name in the current language when there is one (``README.zh_CN.md``)."""
    stem, extension = os.path.splitext(name)
    translated = f"{stem}.{i18n.current()}{extension}"
    if i18n.current() != i18n.SOURCE_LANGUAGE and os.path.exists(os.path.join(TEMPLATES, translated)):
        return translated
    return name


def launcher_text(source: str, devices_per_server: int, servers: int) -> str:
    return _template(LAUNCHER_NAME, source, devices_per_server, servers)


def readme_text(source: str, devices_per_server: int, servers: int) -> str:
    """The job's README, in the current language when there is a template in it (``README.zh_CN.md``)."""
    stem, extension = os.path.splitext(README_NAME)
    translated = f"{stem}.{i18n.current()}{extension}"
    if i18n.current() != i18n.SOURCE_LANGUAGE and os.path.exists(os.path.join(TEMPLATES, translated)):
        return _template(translated, source, devices_per_server, servers)
    return _template(README_NAME, source, devices_per_server, servers)


@dataclass(frozen=True)
class Program:
    """What the job's ranks run: the notebook's ``train.py`` in the job's folder (the default), or a
    project's entry script in place, with its arguments and the project's root on ``PYTHONPATH``."""

    folder: str = '"$HERE"'  # shell words, relative to the job's folder where they can be
    path: str = '"$HERE/train.py"'
    arguments: str = ""
    root: str = '""'
    name: str = SCRIPT_NAME

    @classmethod
    def of_project(cls, job: str, entry: str, root: str, arguments: List[str]) -> "Program":
        import shlex

        return cls(_from_job(job, os.path.dirname(os.path.abspath(entry))), _from_job(job, entry),
                   " ".join(shlex.quote(argument) for argument in arguments), _from_job(job, root),
                   os.path.basename(entry))


def _from_job(job: str, path: str) -> str:
    """``path`` as a shell word the launcher reads, from its own folder: the job and the project copied
    together keep working."""
    import shlex

    return '"$HERE"/' + shlex.quote(os.path.relpath(os.path.abspath(path), os.path.abspath(job)))


def _template(name: str, source: str, devices_per_server: int, servers: int, program: Program = Program()) -> str:
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as stream:
        text = stream.read()
    values = {
        "@NOTEBOOK@": source.replace("\n", " "),
        "@DEVICES_PER_SERVER@": str(devices_per_server),
        "@SERVERS@": str(servers),
        "@RANK_SIZE@": str(devices_per_server * servers),
        "@LAST_SERVER@": str(servers - 1),
        "@PROGRAM_DIR@": program.folder,
        "@PROGRAM@": program.path,
        "@PROGRAM_ARGUMENTS@": program.arguments,
        "@PROJECT_ROOT@": program.root,
        "@PROGRAM_NAME@": program.name,
    }
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


# ------------------------------------------------------------------------------------ the script


def script_from(notebook: Notebook) -> Script:
    """Every cell in order behind a ``# %% cell N`` marker (markdown and raw cells as comments, as
    jupytext writes them), IPython syntax translated."""
    header = (
        f"# Generated by `npu-migrate-nb export` from {os.path.basename(notebook.path)}: its cells in order, each\n"
        "# behind a `# %% cell N` marker (N: the cell's index in the notebook). run_distributed.sh starts one\n"
        "# process per Ascend device with this script.\n"
    )
    parts, notes = [header], []
    display_import_cell = notebook.code_cells[0].index if _uses_undefined_display(notebook) else None
    for cell in notebook.cells:
        text, cell_notes = cell_text(cell)
        if cell.index == display_import_cell:
            text = text.replace("\n", "\n" + _DISPLAY_IMPORT, 1)
            cell_notes.append(Note(cell.index, 1, "translated", _("display() comes from IPython.display in a script "
                                                                  "(in a notebook it is a built-in)")))
        parts.append(text)
        notes.extend(cell_notes)
    return Script("".join(parts), sorted(notes, key=lambda note: (note.cell, note.line)))


_DISPLAY_IMPORT = "from IPython.display import display  # a built-in in the notebook\n"


def cell_text(cell: Cell) -> Tuple[str, List[Note]]:
    """The cell's marker and its code (or its text as comments), and the notes on what changed."""
    if cell.cell_type != "code":
        kind = "markdown" if cell.cell_type == "markdown" else "raw"
        return f"# %% cell {cell.index} [{kind}]\n" + _commented(cell.source), []
    code, notes = translate_cell(cell.source, cell.index)
    code = _LOOKS_LIKE_MARKER.sub("#  %%", code)  # a comment of the cell's own must not split it in two
    if not code.endswith("\n"):
        code += "\n"
    masked = mask(cell.source).code  # the cell's own line numbers, IPython lines as ``pass``
    return f"# %% cell {cell.index}\n" + code, notes + (interactive_notes(masked, cell.index) if masked else [])


def translate_cell(source: str, index: int) -> Tuple[str, List[Note]]:
    masked = mask(source)
    if masked.code is None:
        return _translate_foreign_cell(source, masked.cell_magic or "", index)
    lines = source.splitlines(keepends=True)
    notes: List[Note] = []
    imports: List[str] = []
    for number in sorted(masked.originals):
        original = lines[number]
        indent = original[: len(original) - len(original.lstrip())]
        replacement, note = translate_line(original.strip(), masked.cell_magic if number == _first_code_line(lines)
                                           else None)
        notes.append(Note(index, number + 1, note[0], note[1]))
        if replacement is None:
            replacement = ("pass  " if indent else "") + f"# {MARK}: {original.strip()}"
        if note[0] != "kept":  # a kept statement is the user's own: it imports what it uses
            imports.extend(module for module in _TRANSLATION_MODULES.findall(replacement) if module not in imports)
        ending = original[len(original.rstrip("\r\n")):] or "\n"
        lines[number] = indent + replacement + ending
    header = "".join(f"import {name}  # {MARK}: for the lines translated below\n" for name in imports)
    return header + "".join(lines), notes


def _first_code_line(lines: List[str]) -> Optional[int]:
    return next((number for number, line in enumerate(lines) if line.strip()), None)


def translate_line(text: str, cell_magic: Optional[str]) -> Tuple[Optional[str], Tuple[str, str]]:
    """One IPython line as Python (None: a comment in its place) and its note (kind, message)."""
    if cell_magic is not None and text.startswith("%%"):
        return None, _python_cell_magic_note(text, cell_magic)
    if text.startswith("!"):
        return _shell_line(text.lstrip("!"), None)
    assigned = _ASSIGNED_SHELL.match(text)
    if assigned:
        return _shell_line(assigned.group(3), assigned.group(1))
    magic = _LINE_MAGIC.match(text)
    if magic:
        return _line_magic(magic.group(1), magic.group(2), text)
    assigned = _ASSIGNED_MAGIC.match(text)
    if assigned and assigned.group(2) in ("time", "timeit", "prun"):
        return f"{assigned.group(1)} = {assigned.group(3)}", (
            "kept", _("`{line}`: the statement runs, untimed").format(line=text))
    if _HELP.match(text):
        return None, ("removed", _("`{line}`: help display").format(line=text))
    return None, ("comment", _("`{line}`: IPython syntax with no translation, commented out; check what it did")
                  .format(line=text))


def _python_cell_magic_note(text: str, magic: str) -> Tuple[str, str]:
    if magic == "capture":
        words = text.split()
        name = next((word for word in words[1:] if not word.startswith("-")), None)
        if name:
            return "kept", _("`{line}`: the body runs, its output is not captured; `{name}` (the captured output) "
                             "is not defined in the script").format(line=text, name=name)
        return "kept", _("`{line}`: the body runs, its output is not captured").format(line=text)
    return "kept", _("`{line}`: removed, the body runs as is").format(line=text)


def _shell_line(command: str, target: Optional[str]) -> Tuple[Optional[str], Tuple[str, str]]:
    command = command.strip()
    words = command.split()
    if words and words[0] in INSTALL_COMMANDS:
        return None, ("comment", _("`{line}`: install on the server before the launch (every rank would "
                                   "install at once), commented out").format(line="!" + command))
    literal = _command_literal(command)
    if target is None:
        return f"subprocess.run({literal}, shell=True, check=True)", (
            "subprocess", _("`{line}`: subprocess.run(..., shell=True, check=True): a failure stops the rank")
            .format(line="!" + command))
    return (f"{target} = subprocess.run({literal}, shell=True, check=True, capture_output=True, "
            "text=True).stdout.splitlines()"), (
        "subprocess", _("`{line}`: subprocess.run(...).stdout.splitlines()").format(line=f"{target} = !{command}"))


def _command_literal(command: str) -> str:
    """IPython expands ``{expression}`` in shell lines: an f-string does the same."""
    if re.search(r"\{[^{}]+\}", command):
        return "f" + repr(command)
    return repr(command)


def _line_magic(name: str, rest: str, text: str) -> Tuple[Optional[str], Tuple[str, str]]:
    if name in DISPLAY_MAGICS:
        return None, ("removed", _("`{line}`: display or IPython setting only").format(line=text))
    if name in INSTALL_MAGICS:
        return None, ("comment", _("`{line}`: install on the server before the launch (every rank would "
                                   "install at once), commented out").format(line=text))
    if name in SHELL_MAGICS:
        return _shell_line(rest, None)
    if name in ("time", "timeit", "prun", "memit", "capture", "px"):
        return _statement_magic(name, rest, text)
    if name == "cd":
        return f"os.chdir(os.path.expanduser({rest.strip()!r}))", (
            "translated", _("`{line}`: os.chdir").format(line=text))
    if name in ("env", "set_env"):
        return _env_magic(rest, text)
    if name == "run":
        return _run_magic(rest, text)
    if name == "pylab":
        return "from pylab import *", (
            "translated", _("`{line}`: the names it imports, without the display setup").format(line=text))
    return None, ("comment", _("`{line}`: no translation for %{name}, commented out; check what it did")
                  .format(line=text, name=name))


def _statement_magic(name: str, rest: str, text: str) -> Tuple[Optional[str], Tuple[str, str]]:
    if name == "px":
        code = rest
    else:
        _magic, code = _split_code_magic(text)
    if not code or not code.strip():
        return None, ("removed", _("`{line}`: nothing to run").format(line=text))
    return code.strip(), ("kept", _("`{line}`: the statement runs, once, untimed").format(line=text))


def _env_magic(rest: str, text: str) -> Tuple[Optional[str], Tuple[str, str]]:
    setting = re.match(r"^(\w+)(?:\s*=\s*|\s+)(.*)$", rest.strip())
    if not setting:
        return None, ("removed", _("`{line}`: display only").format(line=text))
    name, value = setting.groups()
    return f"os.environ[{name!r}] = {value.strip()!r}", ("translated", _("`{line}`: os.environ").format(line=text))


def _run_magic(rest: str, text: str) -> Tuple[Optional[str], Tuple[str, str]]:
    words = rest.split()
    if len(words) != 1 or words[0].startswith("-"):
        return None, ("comment", _("`{line}`: %run with options or arguments, commented out; run it by hand")
                      .format(line=text))
    return (f"globals().update(runpy.run_path({words[0]!r}, run_name='__main__'))",
            ("translated", _("`{line}`: runpy.run_path, its names kept as %run keeps them").format(line=text)))


def _translate_foreign_cell(source: str, magic: str, index: int) -> Tuple[str, List[Note]]:
    """A cell under a non-Python cell magic: ``%%writefile`` writes its file, any other is a comment."""
    lines = source.splitlines(keepends=True)
    first = _first_code_line(lines) or 0
    words = lines[first].split()
    body = "".join(lines[first + 1:])
    if magic == "writefile" and len(words) >= 2:
        mode = "a" if "-a" in words[1:-1] or "--append" in words[1:-1] else "w"
        code = (f"with open({words[-1]!r}, {mode!r}, encoding='utf-8') as _written:  # {MARK}: {lines[first].strip()}\n"
                f"    _written.write({body!r})\n")
        return code, [Note(index, first + 1, "translated",
                           _("`{line}`: open(...).write of the body").format(line=lines[first].strip()))]
    note = Note(index, first + 1, "comment", _("`{magic}` cell: not Python, commented out; run it on the server "
                                               "by hand if the job needs it").format(magic="%%" + magic))
    return _commented(source), [note]


def _commented(source: str) -> str:
    # A line that would read as a cell marker (``# %%...``) is kept apart by one space.
    lines = [("# " + line if line.strip() else "#").replace("# %%", "#  %%", 1) for line in source.splitlines()]
    return "\n".join(lines) + "\n" if lines else ""


# --------------------------------------------------------------------------- interactive calls


def interactive_notes(code: str, index: int) -> List[Note]:
    """Calls that wait for a person, or widgets that need a browser (reported, left in place)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return [Note(index, error.lineno or 1, "comment", _("the cell does not parse: {error}").format(error=error.msg))]
    notes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee_name(node.func)
            if name in INTERACTIVE_CALLS:
                notes.append(Note(index, node.lineno, "interactive", _(INTERACTIVE_CALLS[name])))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_widgets(node):
            notes.append(Note(index, node.lineno, "interactive",
                              _("ipywidgets need a browser: in a batch job they show nothing")))
    return sorted(notes, key=lambda note: note.line)


# ``pdb.set_trace()``, ``getpass.getpass()``, ``IPython.embed()``, ``widgets.interact()``: by their module.
_INTERACTIVE_MODULES = frozenset({"pdb", "ipdb", "getpass", "IPython", "widgets", "ipywidgets", "builtins"})


def _callee_name(func: ast.expr) -> Optional[str]:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in _INTERACTIVE_MODULES:
        return func.attr
    return None


def _imports_widgets(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "ipywidgets" for alias in node.names)
    return (node.module or "").split(".")[0] == "ipywidgets"


def _uses_undefined_display(notebook: Notebook) -> bool:
    """``display(...)`` called and never imported or defined: a notebook built-in the script must import."""
    called = defined = False
    for cell in notebook.code_cells:
        code = mask(cell.source).code
        if not code:
            continue
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "display":
                called = True
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= any((alias.asname or alias.name) == "display" for alias in node.names)
            elif isinstance(node, ast.FunctionDef) and node.name == "display":
                defined = True
            elif isinstance(node, ast.Name) and node.id == "display" and isinstance(node.ctx, ast.Store):
                defined = True
    return called and not defined
