"""The notebook's own modules: ``from model import model_fn``, ``import optimization`` of a file in the
notebook's folder or package. Each module found becomes one more source in the same facts model (its
findings name its file); a module that cannot be seen (not a file of the project: an installed package,
a file that is not there) is remembered with the reason, for the ``unknown`` step status.

Modules are looked up as Python would from the notebook's folder (the kernel's working directory)
and, in a project, from its root (run with the root on ``PYTHONPATH``: ``from official.staging import
grad_utils``), then followed transitively, with relative imports resolved in their package. Nothing
above the project's root (the notebook's folder without one) is read.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Tuple

from .facts import ImportFact, facts_for
from .i18n import N_, _
from .notebook import MAX_CELL_CHARS, Notebook

# Cells of modules get indices from here on: far above any notebook's cells, so that a module's
# findings and edits never address a notebook cell.
MODULE_CELL_BASE = 1_000_000
MAX_MODULES = 64  # the panel's and the magic's analysis, on every edit: fast first
MAX_PROJECT_MODULES = 1024  # the command line's, on a project (the model zoo's copies of tensorflow/models)
MAX_MODULE_BYTES = MAX_CELL_CHARS

# Packages whose APIs the analyzer knows by name: their code need not be seen.
KNOWN_PACKAGES = frozenset(
    {
        "tensorflow", "keras", "tf_keras", "tensorflow_datasets", "tensorflow_hub", "tensorflow_addons",
        "tensorflow_probability", "tensorflow_text", "npu_device", "npu_bridge", "hccl", "horovod",
        "numpy", "pandas", "matplotlib", "seaborn", "PIL", "sklearn", "scipy", "os", "sys", "time", "math",
        "json", "random", "pathlib", "glob", "shutil", "collections", "functools", "itertools", "typing",
        "argparse", "logging", "re", "io", "pickle", "datetime", "csv", "zipfile", "tarfile", "urllib",
        "requests", "IPython", "ipywidgets", "tqdm", "absl", "six", "__future__", "npu_migrate_nb",
        "subprocess", "warnings", "copy", "string", "textwrap", "dataclasses", "enum", "abc", "contextlib",
        "tempfile", "gzip", "hashlib", "struct", "base64", "pprint", "platform", "multiprocessing",
        "threading", "queue", "signal", "socket", "traceback", "inspect", "importlib", "operator",
        "statistics", "cv2", "imageio", "h5py", "yaml", "gym", "gymnasium", "tf_agents", "google",
    }
)


@dataclass(frozen=True)
class ModuleSource:
    name: str  # dotted module name as imported: "model", "utils.optimization"
    path: str  # the file, as a path relative to the notebook's folder when inside it
    source: str
    index: int  # its cell index in the facts model (MODULE_CELL_BASE + k)
    # The notebook cell that writes this module (``%%writefile NAME.py``), its source being the
    # cell's body; None for a file of the project.
    cell: Optional[int] = None


@dataclass
class ProjectModules:
    found: List[ModuleSource]
    unseen: Dict[str, str]  # imported module name -> why its code cannot be seen

    def by_index(self) -> Dict[int, ModuleSource]:
        return {module.index: module for module in self.found}


def project_modules(notebook: Notebook, base: Optional[str] = None, shown_from: Optional[str] = None,
                    root: Optional[str] = None, limit: int = MAX_MODULES) -> ProjectModules:
    """The local modules ``notebook`` imports (transitively), read from ``base`` (default: the
    notebook's folder; the working directory for a notebook without a file), then from the project's
    the folder above the top package ``base`` is in, then the project's ``root`` (usually a folder
    above ``base``). Their paths are shown relative to
    ``shown_from`` (default: the working directory)."""
    folder = base if base is not None else _folder_of(notebook.path)
    root = root or folder
    searched = tuple(dict.fromkeys(path for path in (folder, _above_the_top_package(folder, root), root) if path))
    shown_from = shown_from or os.getcwd()
    found: List[ModuleSource] = []
    unseen: Dict[str, str] = {}
    seen_files = set()
    pending: List[Tuple[str, bool, str]] = [
        (name, optional, folder)
        for cell in notebook.code_cells
        for name, optional in _imported_names(facts_for(cell.source).imports)
    ]
    tried = set()
    written = written_modules(notebook)
    while pending and len(found) < limit:
        name, optional, importer = pending.pop(0)
        if (name, importer) in tried:
            continue
        tried.add((name, importer))
        top = name.lstrip(".").split(".")[0]
        if not name.startswith(".") and top in KNOWN_PACKAGES:
            continue
        if name in written and name not in {module.name for module in found}:
            # What the notebook writes is what its import reads when run (a file on disk may be older).
            cell, source = written[name]
            if facts_for(source).error is None:
                found.append(ModuleSource(name, f"{name}.py", source, MODULE_CELL_BASE + len(found), cell))
                pending += [(inner, maybe, folder) for inner, maybe in _imported_names(facts_for(source).imports)]
                continue
        path = _module_file(name, importer, searched, root)
        if path is None:
            if not optional and not name.startswith("."):
                unseen.setdefault(name, _why_unseen(name, root))
            continue
        real = os.path.realpath(path)
        if real in seen_files:
            continue
        seen_files.add(real)
        source = _read(path)
        if source is None:
            unseen.setdefault(name, _("{path} cannot be read as UTF-8 text").format(path=_shown(path, shown_from)))
            continue
        facts = facts_for(source)
        if facts.error is not None:
            line, _column, message = facts.error
            unseen.setdefault(name, _("{path} cannot be analyzed (line {line}: {message})").format(
                path=_shown(path, shown_from), line=line, message=message))
            continue
        found.append(ModuleSource(name, _shown(path, shown_from), source, MODULE_CELL_BASE + len(found)))
        pending += [(inner, maybe, os.path.dirname(path)) for inner, maybe in _imported_names(facts.imports)]
    for name, optional, _importer in pending:  # past the limit: not seen, and said so (unknown, not missing)
        if not optional and not name.startswith(".") and name.split(".")[0] not in KNOWN_PACKAGES:
            unseen.setdefault(name, _("not analyzed: more than {count} modules are imported").format(count=limit))
    return ProjectModules(found, unseen)


_WRITEFILE = re.compile(r"^%%writefile(?:[ \t]+-a)?[ \t]+(?:\./)?([A-Za-z_][A-Za-z0-9_]*)\.py[ \t]*$")


def written_modules(notebook: Notebook) -> Dict[str, Tuple[int, str]]:
    """Modules the notebook writes itself: ``%%writefile mnist.py`` -> {"mnist": (cell, body)}; the
    last cell that writes a name wins (a later cell rewrites the file). Appends (``-a``) are not
    followed: that module's code is not one cell."""
    written: Dict[str, Tuple[int, str]] = {}
    for cell in notebook.code_cells:
        first, _newline, body = cell.source.lstrip().partition("\n")
        match = _WRITEFILE.match(first.rstrip())
        if match is not None and " -a" not in first:
            written[match.group(1)] = (cell.index, body)
    return written


def _folder_of(path: str) -> str:
    if path and not path.startswith("<") and os.path.exists(path):
        return os.path.dirname(os.path.abspath(path))
    return os.getcwd()


def _imported_names(imports: Iterable[ImportFact]) -> List[Tuple[str, bool]]:
    """(module name, whether it may be absent) for each module an import may load: ``a.b`` for
    ``import a.b`` and for ``from a.b import c``, and ``a.b.c`` (maybe absent: ``c`` may be a name)."""
    names: Dict[str, bool] = {}
    for fact in imports:
        statement = fact.stmt
        if isinstance(statement, ast.ImportFrom):
            package = "." * statement.level + (statement.module or "")
            if statement.module:
                names.setdefault(package, False)
            for alias in statement.names:
                if alias.name != "*":
                    separator = "" if package.endswith(".") else "."
                    names.setdefault(package + separator + alias.name, True)
        else:
            names.setdefault(fact.module, False)
    return list(names.items())


def _above_the_top_package(folder: str, root: str) -> Optional[str]:
    """The folder above the top package ``folder`` is in (what makes the package's absolute imports
    work, ``models-master`` for ``models-master/official/modeling/train.py``), if it is inside ``root``."""
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        return None
    top = folder
    while os.path.isfile(os.path.join(os.path.dirname(top), "__init__.py")) and os.path.dirname(top) != top:
        top = os.path.dirname(top)
    above = os.path.dirname(top)
    inside = os.path.realpath(root) + os.sep
    return above if (os.path.realpath(above) + os.sep).startswith(inside) else None


@lru_cache(maxsize=256)
def _allowed(root: str, folder: str) -> Tuple[str, ...]:
    return tuple(os.path.realpath(path) + os.sep for path in {root, folder})


def _module_file(name: str, importer: str, searched: Tuple[str, ...], root: str) -> Optional[str]:
    """The file of module ``name``: relative names from ``importer``'s folder, absolute ones from
    each of ``searched`` in turn (as ``sys.path``), never from above ``root`` or the first folder searched."""
    level = len(name) - len(name.lstrip("."))
    bases = [importer] if level else list(searched)
    allowed = _allowed(root, searched[0])
    parts = name.lstrip(".").split(".")
    for base in bases:
        for _level in range(max(level - 1, 0)):
            base = os.path.dirname(base)
        candidate = os.path.join(base, *parts)
        for path in (candidate + ".py", os.path.join(candidate, "__init__.py")):
            # Never above the root (a server must not read outside its root through imports).
            if os.path.isfile(path) and os.path.realpath(path).startswith(allowed) and os.path.getsize(path) <= MAX_MODULE_BYTES:
                return path
    return None


def _why_unseen(name: str, root: str) -> str:
    message, values = _unseen_because(name, root)
    return _(message).format(**dict(values))


@lru_cache(maxsize=1024)
def _unseen_because(name: str, root: str) -> Tuple[str, Tuple[Tuple[str, str], ...]]:
    """Why module ``name`` cannot be seen: the message in English (cached for every language) and its values."""
    top = name.split(".")[0]
    if os.path.isdir(os.path.join(root, top)) or os.path.isfile(os.path.join(root, top + ".py")):
        return N_("there is no {file} in this project"), (("file", f"{name.replace('.', '/')}.py"),)
    import importlib.util

    try:
        installed = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        installed = False
    if installed:
        return N_("{package} is an installed package, whose code is not analyzed"), (("package", top),)
    return (N_("there is no {file} next to the notebook, and no installed package {package}"),
            (("file", f"{name.replace('.', '/')}.py"), ("package", top)))


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as stream:
            data = stream.read()
        return data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


def _shown(path: str, shown_from: str) -> str:
    """The path as the user would open it: relative to ``shown_from`` when inside it."""
    relative = os.path.relpath(path, shown_from)
    return os.path.abspath(path) if relative.startswith("..") else relative
