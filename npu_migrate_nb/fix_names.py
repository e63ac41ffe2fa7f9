"""Every name the code of a fix reads is bound where that code runs (issue 34).

A fix writes code (``os.getenv(...)``, ``tf.keras.optimizers.SGD()``, ``npu.distribute...``) into
someone else's notebook. Each name that code reads, and that the notebook does not bind there, is
imported where it is first needed: the notebook's own import of that name when it has one further
down (``from tensorflow import keras`` in a later cell), else the usual one (``import os``,
``import tensorflow as tf``). A name no import gives (a variable the notebook defines only later,
or only in a function) makes the finding unfixed, with the reason, rather than a NameError on the
ranks.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Tuple

from .findings import Edit, Finding
from .i18n import _
from .names import Scope, bound_names, free_names

# Imports a fix may add for a name it reads, when the notebook has no import of that name.
STANDARD_IMPORTS = {
    "os": "import os",
    "tf": "import tensorflow as tf",
    "np": "import numpy as np",
    "keras": "from tensorflow import keras",
}

Place = Tuple[int, Tuple[int, int]]  # (cell, (line, column))
_INSERTS = ("insert_before", "insert_after")


def bind_what_the_edits_read(analysis, findings: Sequence[Finding], setup: Sequence[Edit]
                             ) -> Tuple[List[Edit], List[Tuple[Finding, str]]]:
    """(import edits to add, findings refused with the reason)."""
    context = analysis.context
    scopes = _scopes(context)
    planned = [edit for finding in findings for edit in finding.edits] + list(setup)
    bindings = [(edit.cell, _binds_from(edit), bound_names(edit.code)) for edit in planned if edit.kind in _INSERTS]
    needed: Dict[Tuple[Optional[int], str], Tuple[str, Place]] = {}  # (module or None, name) -> (import, first place)
    refused: List[Tuple[Finding, str]] = []
    for finding in findings:
        wanted: Dict[Tuple[Optional[int], str], Tuple[str, Place]] = {}
        reason = None
        for edit in finding.edits:
            module = edit.cell if edit.cell in context.module_at else None
            scope = scopes[module]
            runs_at = _runs_at(edit)
            available = scope.available(edit.cell, runs_at)
            inside_function = scope.cells[edit.cell].enclosing_function(runs_at) is not None \
                if edit.cell in scope.cells else False
            for name in sorted(_read_by(edit, context)):
                if name in available or "*" in available or _planned_before(bindings, name, edit.cell, runs_at, inside_function):
                    continue
                line = _import_for(name, context, module, planned)
                if line is None and (name in scope.given_from_outside or scope.read_anyway(edit.cell, name)):
                    continue
                if line is None:
                    reason = _("its code would read {name}, which nothing defines where the fix goes").format(name=name)
                    break
                place = (edit.cell, runs_at)
                known = wanted.get((module, name))
                wanted[(module, name)] = (line, min(place, known[1]) if known else place)
            if reason:
                break
        if reason:
            refused.append((finding, reason))
            continue
        for key, (line, place) in wanted.items():
            known = needed.get(key)
            needed[key] = (line, min(place, known[1]) if known else place)
    return _import_edits(context, needed, setup), refused


def _scopes(context) -> Dict[Optional[int], Scope]:
    notebook = Scope((index, facts.tree) for index, facts in context.facts.notebook_cells)
    scopes: Dict[Optional[int], Scope] = {None: notebook}
    for index, facts in context.facts.cells:
        if index in context.module_at:
            scopes[index] = Scope([(index, facts.tree)])
    return scopes


def _runs_at(edit: Edit) -> Tuple[int, int]:
    """Where the edit's code runs: statements inserted after their anchor run after it (on the line
    below its end), everything else where it is."""
    return (edit.end[0] + 1, 0) if edit.kind == "insert_after" else edit.start


def _binds_from(edit: Edit) -> Tuple[int, int]:
    """Where what an inserted statement binds is bound: before its anchor, or after it."""
    return edit.start if edit.kind == "insert_before" else edit.end


def _planned_before(bindings, name: str, cell: int, position, inside_function: bool) -> bool:
    for bound_cell, at, names in bindings:
        if (name in names or "*" in names) and (inside_function or bound_cell < cell or (bound_cell == cell and at <= position)):
            return True
    return False


def _read_by(edit: Edit, context) -> set:
    """The names ``edit`` brings in: what its code reads, less what the code it replaces, or the
    statement it goes beside, already reads there (a statement split in two moves its own names)."""
    if edit.kind in ("remove", "unwrap", "remove_element"):
        return set()
    if edit.template is not None:
        return free_names(edit.template) - {name for name, _start, _end in edit.holes}
    return free_names(edit.code) - free_names(_text_between(context, edit.cell, edit.start, edit.end))


def _text_between(context, cell: int, start, end) -> str:
    facts = next((facts for index, facts in context.facts.cells if index == cell), None)
    if facts is None or not facts.lines:
        return ""
    lines = facts.lines[start[0] - 1:end[0]]
    if not lines:
        return ""
    if len(lines) == 1:
        return lines[0][start[1]:end[1]]
    return lines[0][start[1]:] + "".join(lines[1:-1]) + lines[-1][:end[1]]


def _import_for(name: str, context, module: Optional[int], planned: Sequence[Edit]) -> Optional[str]:
    """The notebook's own import of ``name`` (module-level, anywhere, or one the fix adds elsewhere),
    else the adapter's star import for one of its TF1 names, else the usual import."""
    from .facts import NPU_BRIDGE_NAMES
    from .rules.setup import bridge_star_import

    cells = [entry for entry in context.facts.cells if entry[0] == module] if module is not None \
        else context.facts.notebook_cells
    for _index, facts in cells:
        for fact in facts.imports:
            if fact.local == name and fact.function is None:
                return _import_statement(fact.stmt, name)
    for edit in planned:
        if edit.kind in _INSERTS and (edit.cell == module if module is not None else edit.cell not in context.module_at):
            for stmt in _parsed(edit.code):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(
                        (alias.asname or alias.name.split(".")[0]) == name for alias in stmt.names):
                    return _import_statement(stmt, name)
    if name in NPU_BRIDGE_NAMES:
        return bridge_star_import(context)
    return STANDARD_IMPORTS.get(name)


def _parsed(code: str) -> list:
    try:
        return ast.parse(code).body
    except SyntaxError:
        return []


def _import_statement(stmt: ast.stmt, name: str) -> str:
    """The part of ``stmt`` that binds ``name``: ``import tensorflow as tf`` out of ``import os, tensorflow as tf``."""
    for alias in stmt.names:
        local = alias.asname or alias.name.split(".")[0]
        if local != name:
            continue
        spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
        if isinstance(stmt, ast.ImportFrom):
            return f"from {'.' * stmt.level}{stmt.module or ''} import {spelled}"
        return f"import {spelled}"
    raise ValueError(name)


def _import_edits(context, needed, setup: Sequence[Edit]) -> List[Edit]:
    """One edit per place: the imports go with the setup when it runs before their first use, else
    before the first statement of the cell (or module) that first needs them."""
    by_place: Dict[Tuple[str, int, Tuple[int, int], Tuple[int, int]], List[str]] = {}
    for (module, _name), (line, (cell, position)) in sorted(needed.items(), key=lambda item: item[1][1]):
        if line.endswith("import *"):  # it brings a ``tf`` of its own: before the notebook's TensorFlow import
            anchor = _before_tensorflow_import(context, cell, module) or _top_of(context, cell)
        else:
            anchor = _setup_anchor(setup, cell, position, context.module_at) or _top_of(context, cell)
        if anchor is None:
            continue
        lines = by_place.setdefault(anchor, [])
        if line not in lines:
            lines.append(line)
    return [Edit(cell, kind, start, end, "\n".join(lines)) for (kind, cell, start, end), lines in by_place.items()]


def _setup_anchor(setup: Sequence[Edit], cell: int, position, module_cells):
    """The setup's own place, when it is in the same file and runs before ``position`` of ``cell``."""
    in_module = cell in module_cells
    for edit in setup:
        if edit.kind not in _INSERTS or (edit.cell in module_cells) != in_module or (in_module and edit.cell != cell):
            continue
        if edit.cell < cell or (edit.cell == cell and _binds_from(edit) <= position):
            return edit.kind, edit.cell, edit.start, edit.end
    return None


def _before_tensorflow_import(context, cell: int, module: Optional[int]):
    """Before the first module-level TensorFlow import in ``cell`` or a cell before it (of the same file)."""
    cells = [entry for entry in context.facts.cells if entry[0] == module] if module is not None \
        else context.facts.notebook_cells
    for index, facts in cells:
        if index > cell and module is None:
            break
        for fact in facts.imports:
            if fact.function is None and fact.module.split(".")[0] == "tensorflow" and fact.stmt in facts.tree.body:
                return "insert_before", index, facts.start(fact.stmt), facts.end(fact.stmt)
    return None


def _top_of(context, cell: int):
    from .rules.setup import is_docstring_or_future

    facts = next((facts for index, facts in context.facts.cells if index == cell), None)
    if facts is None or facts.tree is None:
        return None
    body = [stmt for stmt in facts.tree.body if not is_docstring_or_future(stmt) and not facts.is_ipython_line(stmt)]
    if not body:
        return None
    return "insert_before", cell, facts.start(body[0]), facts.end(body[0])
