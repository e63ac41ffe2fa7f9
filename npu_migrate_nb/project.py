"""Projects: a directory, or an entry script/notebook inside a project, analyzed as a whole.

The vendor's own TF2 example migrates a project by hand in three files of one package (the broadcast
in the main script, the all-reduce in ``grad_utils``, the shard in the preprocessing module), and its
migration tool takes a directory. Here a project is:

* its **root**: the folder run with on ``PYTHONPATH`` (``from official.staging import grad_utils``),
  given with ``--root`` or found above the entry as Python tools find it: the nearest folder with a
  ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git``; without one, the folder above the top
  package (the highest folder of ``__init__.py`` files); without a package, the entry's own folder;
* its **entries**: every notebook, and every script that runs as a program (a ``__main__`` guard, an
  ``app.run(main)``) or that no other file of the directory imports. The other scripts are modules:
  analyzed through the entries that import them, so a step done in a module counts for its entry, and
  a module two entries import is fixed once.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set

from .facts import facts_for
from .i18n import _
from .modules import _imported_names, _module_file
from .notebook import InputError, read_text

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Folders a project's files are never in: tools' caches, environments, checkouts of dependencies.
SKIPPED_FOLDERS = frozenset({
    ".git", ".hg", ".svn", ".ipynb_checkpoints", "__pycache__", "node_modules", ".venv", "venv", "env",
    ".tox", ".nox", ".mypy_cache", ".pytest_cache", "build", "dist", "site-packages", ".eggs",
})
MAX_PROJECT_FILES = 5000


@dataclass(frozen=True)
class Project:
    root: str  # absolute
    entries: List[str]  # notebooks and entry scripts, in path order
    modules: List[str]  # the other scripts (imported by an entry or another file)


def find_root(path: str) -> str:
    """The project root of ``path`` (a file or a folder), absolute: see the module's docstring."""
    start = os.path.abspath(path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)))
    folder = start
    while True:
        if any(os.path.exists(os.path.join(folder, marker)) for marker in ROOT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    folder = start
    while os.path.isfile(os.path.join(folder, "__init__.py")) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def project_files(directory: str) -> List[str]:
    """The notebooks and Python files under ``directory``, in path order (skipped folders left out)."""
    found: List[str] = []
    for folder, folders, files in os.walk(directory):
        folders[:] = sorted(name for name in folders if name not in SKIPPED_FOLDERS and not name.startswith("."))
        for name in sorted(files):
            if name.endswith((".ipynb", ".py")) and not name.startswith("."):
                found.append(os.path.normpath(os.path.join(folder, name)))
                if len(found) > MAX_PROJECT_FILES:
                    raise InputError(directory, _("more than {count} notebooks and scripts").format(
                        count=MAX_PROJECT_FILES))
    return found


def open_project(directory: str, root: Optional[str] = None) -> Project:
    """``directory``'s entries and modules, its root found above it unless given."""
    root = os.path.abspath(root) if root else find_root(directory)
    files = project_files(directory)
    if not files:
        raise InputError(directory, _("no notebooks or scripts in this directory"))
    scripts = [path for path in files if path.endswith(".py")]
    imported = _imported_files(scripts, files, root)
    entries = [path for path in files
               if path.endswith(".ipynb") or _runs_as_a_program(path)
               or (os.path.realpath(path) not in imported and os.path.basename(path) != "__init__.py")]
    chosen = set(entries)
    return Project(root, entries, [path for path in scripts if path not in chosen])


def _imported_files(scripts: Sequence[str], importers: Iterable[str], root: str) -> Set[str]:
    """The real paths of ``scripts`` that a file of ``importers`` imports (from its folder or the root)."""
    wanted = {os.path.realpath(path) for path in scripts}
    imported: Set[str] = set()
    for path in importers:
        for name in _imported_module_names(path):
            folder = os.path.dirname(path)
            found = _module_file(name, folder, (folder, root), root)
            if found is not None and os.path.realpath(found) in wanted:
                imported.add(os.path.realpath(found))
    return imported


def _imported_module_names(path: str) -> List[str]:
    if path.endswith(".ipynb"):
        from .notebook import load

        try:
            sources = [cell.source for cell in load(path).code_cells]
        except InputError:
            return []
    else:
        try:
            sources = [read_text(path)]
        except InputError:
            return []
    return [name for source in sources for name, _optional in _imported_names(facts_for(source).imports)]


def _runs_as_a_program(path: str) -> bool:
    """A ``if __name__ == "__main__"`` guard, or a module-level ``app.run(...)`` (absl, tf.compat.v1)."""
    try:
        tree = facts_for(read_text(path)).tree
    except InputError:
        return True  # said as an input error where it is analyzed
    if tree is None:
        return True
    for statement in tree.body:
        if isinstance(statement, ast.If) and _is_main_guard(statement.test):
            return True
        if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "run"
                and _names_app(statement.value.func.value)):
            return True
    return False


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def _names_app(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "app") or (isinstance(node, ast.Attribute) and node.attr == "app")


def entry_folder_and_root(path: str, root: Optional[str]) -> Dict[str, str]:
    """The analysis options of one entry: modules from its folder, then from the project's root."""
    return {"base": os.path.dirname(os.path.abspath(path)), "root": os.path.abspath(root) if root else find_root(path)}
