"""Apply edits with libcst: only cells that get an edit are parsed into a concrete tree, and every
byte outside the edited nodes (formatting, comments, IPython syntax) is kept."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from . import ipython_syntax
from .analysis import Analysis
from .findings import Edit, Finding
from .i18n import _
from .notebook import Notebook


class RewriteError(Exception):
    """An edit could not be applied (its node was not found): the cell is left as it was."""


@dataclass
class FixResult:
    sources: Dict[int, str]  # cell index -> new source, for the cells that changed
    applied: List[Finding]
    failed: List[Tuple[int, str]]  # (cell, reason)
    # The notebook's own modules that changed: path -> (old source, new source).
    modules: Dict[str, Tuple[str, str]] = field(default_factory=dict)


@dataclass
class Plan:
    edits: List[Edit]
    # Findings left unfixed because their code would read a name nothing binds where it goes.
    refused: List[Tuple[Finding, str]] = field(default_factory=list)


def plan(analysis: Analysis, codes: Optional[Set[str]] = None) -> List[Edit]:
    return plan_fix(analysis, codes).edits


def plan_fix(analysis: Analysis, codes: Optional[Set[str]] = None) -> Plan:
    """The edits of the selected findings, plus the setup they need (once, where it belongs: in the
    notebook, and in each of its own modules that gets an edit), plus an import for each name the
    edits read that is not bound where they go. A finding whose code reads a name that nothing binds
    there, and that no import gives, is refused (its edits left out, the reason said)."""
    from .fix_names import bind_what_the_edits_read

    chosen = _chosen(analysis, codes)
    edits = [edit for finding in chosen for edit in finding.edits]
    modules = analysis.context.module_at if analysis.context is not None else {}
    setup = _setup_for(analysis, edits, codes)
    setup_edits = list(setup[3]) if setup is not None else []
    setup_edits.extend(_module_setups(analysis, [edit for edit in edits if edit.cell in modules]))
    if analysis.context is None:
        return Plan(setup_edits + edits)
    imports, refused = bind_what_the_edits_read(analysis, chosen, setup_edits)
    refused_ids = {id(finding) for finding, _reason in refused}
    kept = [edit for finding in chosen if id(finding) not in refused_ids for edit in finding.edits]
    if refused:  # the setup is planned again for the edits that stay (it may need less)
        setup = _setup_for(analysis, kept, codes)
        setup_edits = list(setup[3]) if setup is not None else []
        setup_edits.extend(_module_setups(analysis, [edit for edit in kept if edit.cell in modules]))
    # The setup before the fixes: code a fix inserts at the same place may use what it imports.
    return Plan(imports + setup_edits + kept, refused)


def _module_setups(analysis: Analysis, module_edits: Sequence[Edit]) -> List[Edit]:
    from .rules.setup import setup_plan

    needs_by_module: Dict[int, Set[str]] = defaultdict(set)
    for edit in module_edits:
        needs_by_module[edit.cell] |= edit.needs
    setups: List[Edit] = []
    for module, needs in sorted(needs_by_module.items()):
        planned = setup_plan(analysis.context, needs, module=module)
        if planned is not None:
            setups.extend(planned[3])
    return setups


def _chosen(analysis: Analysis, codes: Optional[Set[str]]) -> List[Finding]:
    return [f for f in analysis.findings if f.code != "missing-setup" and (codes is None or f.code in codes)]


def _setup_for(analysis: Analysis, edits: Sequence[Edit], codes: Optional[Set[str]]):
    """The setup plan (cell, facts, anchor statement, edits) that ``edits`` and the existing code need:
    the notebook's edits, and the device its modules' edits use (the notebook opens it for them)."""
    from .findings import NEEDS_NPU_DEVICE
    from .rules.setup import needs_of_existing_code, setup_plan

    context = analysis.context
    if context is None:
        return None
    needs = set()
    for edit in edits:
        needs |= edit.needs if edit.cell not in context.module_at else edit.needs & {NEEDS_NPU_DEVICE}
    if codes is None or "missing-setup" in codes:
        needs |= needs_of_existing_code(context)
    return setup_plan(context, needs)


def fix_notebook(notebook: Notebook, analysis: Analysis, codes: Optional[Set[str]] = None) -> FixResult:
    planned = plan_fix(analysis, codes)
    edits_by_cell: Dict[int, List[Edit]] = defaultdict(list)
    for edit in planned.edits:
        edits_by_cell[edit.cell].append(edit)
    sources, failed = {}, []
    refused = {id(finding) for finding, _reason in planned.refused}
    by_index = {cell.index: cell.source for cell in notebook.cells}
    if analysis.context is not None:
        by_index.update({index: module.source for index, module in analysis.context.module_at.items()})
    for index, edits in sorted(edits_by_cell.items()):
        try:
            new_source = apply_edits(by_index[index], edits)
        except RewriteError as error:
            failed.append((index, str(error)))
            continue
        if new_source != by_index[index]:
            sources[index] = new_source
    module_at = analysis.context.module_at if analysis.context is not None else {}
    _written_back_into_their_cells(notebook, module_at, sources)
    changed_modules = {
        module_at[index].path: (module_at[index].source, sources.pop(index)) for index in list(sources) if index in module_at
    }
    failed = [(module_at[index].path if index in module_at else index, reason) for index, reason in failed]
    failed_cells = {cell for cell, _reason in failed}
    applied = [
        f for f in analysis.findings
        if f.edits and (codes is None or f.code in codes) and id(f) not in refused
        and all((module_at[e.cell].path if e.cell in module_at else e.cell) not in failed_cells for e in f.edits)
    ]
    failed += [(module_at[f.cell].path if f.cell in module_at else f.cell, reason) for f, reason in planned.refused]
    return FixResult(sources, applied, failed, changed_modules)


def _written_back_into_their_cells(notebook: Notebook, module_at, sources: Dict[int, str]) -> None:
    """A module the notebook writes itself (``%%writefile mnist.py``) is fixed in that cell, under
    its magic line: the file it writes is what the ranks import."""
    cells = {cell.index: cell.source for cell in notebook.cells}
    for index in [index for index in sources if index in module_at]:
        module = module_at[index]
        original = cells.get(module.cell) if module.cell is not None else None
        if original is not None and original.endswith(module.source):
            sources[module.cell] = original[: len(original) - len(module.source)] + sources.pop(index)


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    masked = ipython_syntax.mask(source)
    if masked.code is None:
        raise RewriteError(_("not a Python cell"))
    try:
        module = cst.parse_module(masked.code)
    except cst.ParserSyntaxError as error:
        raise RewriteError(_("libcst cannot parse the cell: {message}").format(message=error.message)) from None
    applier = _EditApplier(edits)
    new_module = MetadataWrapper(module, unsafe_skip_copy=True).visit(applier)
    missing = applier.unapplied()
    if missing:
        raise RewriteError(_("could not place {count} edit(s), first at line {line}").format(
            count=len(missing), line=missing[0].start[0]))
    return ipython_syntax.unmask(new_module.code, masked)


def _key(position) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    return (position.start.line, position.start.column), (position.end.line, position.end.column)


@dataclass
class CellFix:
    """The adapted source of one cell (``source`` is None when nothing changes)."""

    source: Optional[str]
    applied: List[Finding]
    elsewhere: List[Finding]  # this cell's findings whose fix changes another cell too: not applied
    failed: Optional[str] = None
    setup_moved_here: bool = False  # setup that belongs in an earlier cell was put at the top of this one


def fix_cell(notebook: Notebook, analysis: Analysis, index: int, codes: Optional[Set[str]] = None) -> CellFix:
    """Fix one cell of a notebook whose other cells have already run (the cell magic's ``--apply``).

    Only this cell changes: its findings are fixed here, and the setup they need, when it belongs
    in another cell (after ``import tensorflow``), goes at the top of this cell instead, because that
    cell will not run again. The npu_bridge star import also exports a ``tf`` of its own, so the
    notebook's TensorFlow import follows it again there, keeping the notebook's ``tf``.
    """
    mine = [f for f in _chosen(analysis, codes) if f.cell == index]
    applied = [f for f in mine if f.edits and all(edit.cell == index for edit in f.edits)]
    elsewhere = [f for f in mine if f.edits and f not in applied]
    edits = [edit for finding in applied for edit in finding.edits]
    setup = _setup_for(analysis, edits, codes)
    source = next(cell.source for cell in notebook.cells if cell.index == index)
    prefix = ""
    if setup is not None:
        setup_cell, anchor_facts, anchor, setup_edits = setup
        if setup_cell == index:
            edits.extend(setup_edits)
        else:
            lines = _setup_lines_for_a_later_cell(anchor_facts, anchor, setup_edits)
            first = _first_statement(source)
            if first is None:
                prefix = "\n".join(lines) + "\n"
            else:
                edits.append(Edit(index, "insert_before", first, first, "\n".join(lines)))
    if not edits and not prefix:
        return CellFix(None, [], elsewhere)
    try:
        new_source = apply_edits(source, edits) if edits else source
    except RewriteError as error:
        return CellFix(None, [], elsewhere, failed=str(error))
    new_source = _after_magic_lines(new_source, prefix) if prefix else new_source
    moved = setup is not None and setup[0] != index
    return CellFix(new_source if new_source != source else None, applied, elsewhere, setup_moved_here=moved)


def _setup_lines_for_a_later_cell(anchor_facts, anchor, setup_edits: Sequence[Edit]) -> List[str]:
    from .rules.setup import BRIDGE_STAR_IMPORTS

    lines = [line for edit in setup_edits for line in edit.code.splitlines()]
    star = next((line for line in lines if line in BRIDGE_STAR_IMPORTS), None)
    if star is not None and isinstance(anchor, (ast.Import, ast.ImportFrom)):
        lines.insert(lines.index(star) + 1, anchor_facts.segment(anchor))
    return lines


def _first_statement(source: str) -> Optional[Tuple[int, int]]:
    from .facts import facts_for
    from .rules.setup import is_docstring_or_future

    facts = facts_for(source)
    if facts.tree is None:
        return None
    first = next(
        (stmt for stmt in facts.tree.body if not is_docstring_or_future(stmt) and not facts.is_ipython_line(stmt)),
        None,
    )
    return facts.start(first) if first is not None else None


def _after_magic_lines(source: str, text: str) -> str:
    """``text`` after the cell's leading IPython lines (a ``%%time`` line must stay first)."""
    lines = source.splitlines(keepends=True)
    head = 0
    while head < len(lines) and lines[head].lstrip().startswith(("%", "!")):
        head += 1
    return "".join(lines[:head]) + text + "".join(lines[head:])


class _EditApplier(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, edits: Iterable[Edit]):
        super().__init__()
        self.expression_edits: Dict[tuple, List[Edit]] = defaultdict(list)
        self.statement_edits: Dict[Tuple[int, int], List[Edit]] = defaultdict(list)
        self.element_removals: Set[tuple] = set()
        self.hole_positions: Set[tuple] = set()
        self.holes: Dict[tuple, cst.CSTNode] = {}
        self.statement_starts: Dict[int, Tuple[int, int]] = {}
        self.done: Set[int] = set()
        self.edits = list(edits)
        for edit in self.edits:
            if edit.kind in ("insert_before", "insert_after", "remove", "unwrap", "guard"):
                self.statement_edits[edit.start].append(edit)
            elif edit.kind == "remove_element":
                self.element_removals.add((edit.start, edit.end))
            else:
                self.expression_edits[(edit.start, edit.end)].append(edit)
            for _name, start, end in edit.holes:
                self.hole_positions.add((start, end))

    def unapplied(self) -> List[Edit]:
        return [edit for edit in self.edits if id(edit) not in self.done]

    # expressions -------------------------------------------------------------------------------
    def on_leave(self, original_node, updated_node):
        updated_node = super().on_leave(original_node, updated_node)  # dispatches to leave_Module etc.
        position = self.get_metadata(PositionProvider, original_node, None)
        if position is None:
            return updated_node
        key = _key(position)
        if isinstance(original_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.BaseSmallStatement)):
            self.statement_starts[id(updated_node)] = key[0]
        if isinstance(original_node, (cst.List, cst.Tuple)) and self.element_removals:
            updated_node = self._remove_elements(original_node, updated_node)
        if isinstance(original_node, cst.BaseExpression):
            for key in _keys_as_ast_counts(original_node, key):
                if key in self.hole_positions:
                    self.holes[key] = updated_node
                for edit in self.expression_edits.pop(key, ()):
                    updated_node = self._apply_expression_edit(edit, updated_node)
                    self.done.add(id(edit))
        return updated_node

    def _apply_expression_edit(self, edit: Edit, node: cst.BaseExpression) -> cst.BaseExpression:
        if edit.kind == "replace":
            new = cst.parse_expression(edit.template or edit.code)
            if edit.holes:
                filled = {name: self.holes.get((start, end)) for name, start, end in edit.holes}
                if any(value is None for value in filled.values()):
                    raise RewriteError(_("a part of the edit at line {line} was not found").format(line=edit.start[0]))
                new = new.visit(_FillHoles(filled))
            if getattr(node, "lpar", None) and hasattr(new, "lpar") and not isinstance(node, cst.Tuple):
                new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
            return new
        if edit.kind == "add_argument" and isinstance(node, cst.Call):
            argument = cst.parse_expression(f"f({edit.code})").args[0]
            return node.with_changes(args=_appended(list(node.args), argument, node.whitespace_before_args))
        if edit.kind == "append_element" and isinstance(node, (cst.List, cst.Tuple)):
            element = cst.Element(cst.parse_expression(edit.code))
            return node.with_changes(elements=_appended(list(node.elements), element))
        raise RewriteError(_("cannot apply {kind} to {node}").format(kind=edit.kind, node=type(node).__name__))

    def _remove_elements(self, original, updated):
        kept = []
        for old, new in zip(original.elements, updated.elements):
            position = self.get_metadata(PositionProvider, old.value, None)
            if position is not None and _key(position) in self.element_removals:
                self._mark_done("remove_element", _key(position))
                continue
            kept.append(new)
        if len(kept) == len(updated.elements):
            return updated
        if kept and kept[-1] is not updated.elements[-1]:
            # The old last element's trailing comma (or its absence) moves to the new last element.
            kept[-1] = kept[-1].with_changes(comma=updated.elements[-1].comma)
        if isinstance(updated, cst.Tuple) and len(kept) == 1 and kept[0].comma is cst.MaybeSentinel.DEFAULT:
            kept[0] = kept[0].with_changes(comma=cst.Comma())
        return updated.with_changes(elements=kept)

    def _mark_done(self, kind: str, key) -> None:
        for edit in self.edits:
            if edit.kind == kind and (edit.start, edit.end) == key:
                self.done.add(id(edit))

    # statements --------------------------------------------------------------------------------
    def leave_IndentedBlock(self, original_node, updated_node):
        body = self._edit_body(updated_node.body)
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()])]
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node, updated_node):
        return updated_node.with_changes(body=self._edit_body(updated_node.body))

    def _edit_body(self, body: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
        result: List[cst.CSTNode] = []
        orphaned_lines: List[cst.EmptyLine] = []  # comments above a removed statement
        statements = [part for line in body for part in self._split_at_edits(line)]
        starts_here = {self.statement_starts.get(id(stmt)) for stmt in statements}
        guarded_through: Optional[Tuple[int, int]] = None  # a guard's end: the statements before it are in its if
        guarded_at = 0  # where that if is in ``result``
        for stmt in statements:
            start = self.statement_starts.get(id(stmt))
            if guarded_through is not None and start is not None and start < guarded_through:
                result[guarded_at] = _guarded_too(result[guarded_at], stmt)
                continue
            guarded_through = None
            edits = self.statement_edits.get(start, []) if start is not None else []
            if not edits:
                edits = self._edits_on_line(start, starts_here)
            for edit in edits:
                self.done.add(id(edit))
            if orphaned_lines:
                stmt = stmt.with_changes(leading_lines=[*orphaned_lines, *stmt.leading_lines])
                orphaned_lines = []
            result.extend(_statements(e.code) for e in edits if e.kind == "insert_before")
            if any(e.kind == "remove" for e in edits):
                orphaned_lines = list(stmt.leading_lines)
            elif any(e.kind == "unwrap" for e in edits) and isinstance(stmt, cst.With):
                result.extend(_unwrapped(stmt))
            elif any(e.kind == "guard" for e in edits):
                guard = next(e for e in edits if e.kind == "guard")
                guarded_at, guarded_through = len(result), guard.end
                result.append(_guarded(stmt, guard.code))
            else:
                result.append(stmt)
            result.extend(_statements(e.code) for e in edits if e.kind == "insert_after")
        if orphaned_lines:
            result.append(cst.SimpleStatementLine([cst.Pass()], leading_lines=orphaned_lines))
        return [stmt for item in result for stmt in (item if isinstance(item, list) else [item])]

    def _split_at_edits(self, line: cst.CSTNode) -> List[cst.CSTNode]:
        """``a = 1; b = f(a)`` with an insertion before ``b = ...`` becomes two lines, so that the
        inserted code runs after ``a = 1``, as the edit means."""
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) < 2:
            return [line]
        cuts = [
            index for index, small in enumerate(line.body)
            if index > 0 and self.statement_starts.get(id(small)) in self.statement_edits
        ]
        if not cuts:
            return [line]
        parts, bounds = [], [0] + cuts + [len(line.body)]
        for number, (begin, end) in enumerate(zip(bounds, bounds[1:])):
            smalls = list(line.body[begin:end])
            start = self.statement_starts.get(id(smalls[0]))
            smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            part = cst.SimpleStatementLine(
                smalls,
                leading_lines=line.leading_lines if number == 0 else (),
                trailing_whitespace=line.trailing_whitespace if end == len(line.body) else cst.TrailingWhitespace(),
            )
            self.statement_starts[id(part)] = start
            parts.append(part)
        return parts

    def _edits_on_line(self, start, starts_here) -> List[Edit]:
        """Edits aimed at a statement nested on this statement's first line (``if 1: stmt``, the
        body of ``%time stmt``) apply to the whole line; edits another statement here owns do not."""
        if start is None:
            return []
        for position, edits in self.statement_edits.items():
            if position[0] == start[0] and position not in starts_here and not any(id(e) in self.done for e in edits):
                return edits
        return []


class _FillHoles(cst.CSTTransformer):
    def __init__(self, filled: Mapping[str, cst.CSTNode]):
        super().__init__()
        self.filled = filled

    def leave_Name(self, original_node, updated_node):
        filled = self.filled.get(original_node.value)
        if filled is None:
            return updated_node
        if updated_node.lpar and hasattr(filled, "lpar") and not filled.lpar:
            # ``({array})[rank_slice]``: the template's parentheses are the hole's, and must stay around
            # what fills it (``ys / SCALE`` sliced is ``(ys / SCALE)[...]``, not ``ys / SCALE[...]``)
            filled = filled.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return filled


def _keys_as_ast_counts(node: cst.BaseExpression, key) -> List[tuple]:
    """libcst's ranges exclude an expression's parentheses; ast's do too, except for a tuple's."""
    if isinstance(node, cst.Tuple) and node.lpar and node.rpar:
        (start_line, start_column), (end_line, end_column) = key
        widened = ((start_line, start_column - len(node.lpar)), (end_line, end_column + len(node.rpar)))
        return [key, widened]
    return [key]


def _appended(items: list, new_item, opening=None):
    """``items`` and ``new_item`` after them. A call written one argument per line gets the new one on
    a line of its own, indented as the others, and its closing parenthesis stays where it was.
    ``opening``: the whitespace after the opening parenthesis (the line break before a first argument)."""
    if not items:
        return [new_item]
    last = items[-1]
    line_break = _line_break_between(items, opening)
    if last.comma is cst.MaybeSentinel.DEFAULT:
        closing = getattr(last, "whitespace_after_arg", None)
        if isinstance(closing, cst.ParenthesizedWhitespace) and line_break is not None:
            items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=line_break),
                                          whitespace_after_arg=cst.SimpleWhitespace(""))
            return items + [new_item.with_changes(whitespace_after_arg=closing)]
        items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return items + [new_item]
    if isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace) and line_break is not None:
        items[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=line_break))
    elif not isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
        items[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")))
    return items + [new_item.with_changes(comma=last.comma)]


def _line_break_between(items: list, opening) -> Optional[cst.ParenthesizedWhitespace]:
    """The line break (with the next line's indent) that separates the items, when they are written
    one per line: after a comma between two of them, else after the opening parenthesis."""
    for item in items[:-1]:
        after = getattr(item.comma, "whitespace_after", None)
        if isinstance(after, cst.ParenthesizedWhitespace):
            return after
    return opening if isinstance(opening, cst.ParenthesizedWhitespace) else None


def _unwrapped(stmt: cst.With) -> List[cst.CSTNode]:
    """The body of a ``with`` in its place: libcst indents a block relative to it, so moving the
    statements out dedents them, nested blocks and comments included."""
    if isinstance(stmt.body, cst.SimpleStatementSuite):  # ``with x: a(); b()``
        return [cst.SimpleStatementLine(stmt.body.body, leading_lines=stmt.leading_lines)]
    body = list(stmt.body.body)
    header = stmt.body.header.comment  # a comment on the ``with`` line stays, above the body
    kept = [cst.EmptyLine(comment=header)] if header is not None else []
    body[0] = body[0].with_changes(leading_lines=[*stmt.leading_lines, *kept, *body[0].leading_lines])
    return body


def _guarded(stmt: cst.CSTNode, condition: str) -> cst.If:
    """``if condition:`` around the statement, which keeps its text; the comments above it stay above."""
    return cst.If(
        test=cst.parse_expression(condition),
        body=cst.IndentedBlock([stmt.with_changes(leading_lines=[])]),
        leading_lines=stmt.leading_lines,
    )


def _guarded_too(guarded: cst.If, stmt: cst.CSTNode) -> cst.If:
    """``stmt`` appended to the body of the ``if`` a span guard made."""
    blank_lines_unindented = [line.with_changes(indent=False) if line.comment is None else line
                              for line in stmt.leading_lines]
    stmt = stmt.with_changes(leading_lines=blank_lines_unindented)
    return guarded.with_changes(body=guarded.body.with_changes(body=[*guarded.body.body, stmt]))


def _statements(code: str) -> List[cst.CSTNode]:
    return list(cst.parse_module(code if code.endswith("\n") else code + "\n").body)
