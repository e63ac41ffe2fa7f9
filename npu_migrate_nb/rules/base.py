"""The rule: one unit of knowledge (what to look for, what to report, how to fix, its own examples).

As in Fixit, each rule carries ``VALID`` code that must not trigger it and ``INVALID`` examples that
must, with the code ``fix`` should produce; the test suite runs every rule's examples. Cells of an
example are separated by a line ``# %%``.
"""

from __future__ import annotations

import abc
import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, List, Optional, Sequence

from .. import ipython_syntax
from ..facts import CellFacts, dotted_name, mentions
from ..findings import Edit, Finding
from ..i18n import _

if TYPE_CHECKING:
    from ..analysis import Context

CELL_SEPARATOR = "# %%\n"


@dataclass(frozen=True)
class Example:
    before: str
    after: Optional[str] = None  # what ``fix`` makes of ``before``; None when there is no fix
    adapter: Optional[str] = None  # the adapter the analyzer should report, when it matters


class Rule(abc.ABC):
    code: ClassVar[str]
    step: ClassVar[Optional[str]] = None
    severity: ClassVar[str] = "error"
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Example]] = ()

    def prepare(self, context: "Context") -> None:
        """Before any rule checks: mark steps that do not apply here, or cannot be judged, with
        ``context.mark(step, status, reason)``."""

    @abc.abstractmethod
    def check(self, context: "Context") -> Iterable[Finding]:
        """The findings of this rule in the notebook."""

    def unlocated(self, context: "Context", message: str) -> List[Finding]:
        """The step is missing but no place to fix it was recognized: say so at the training call; or,
        when what would do the step comes from code that cannot be seen, the step is ``unknown``.
        ``message`` is already in the current language (``_(...)`` at the caller)."""
        from ..origins import unseen_origin

        unseen = unseen_origin(context, self.step)
        if unseen is not None:
            context.mark(self.step, "unknown", unseen)
            return []
        found = training_call(context)
        if found is None:
            return []
        cell, facts, site = found
        return [self.finding(
            cell, facts, site.node,
            _("{message}; add it by hand (see the vendor's distributed guide)").format(message=message),
        )]

    def finding(
        self,
        cell: int,
        facts: CellFacts,
        node: ast.AST,
        message: str,
        edits: Sequence[Edit] = (),
        severity: Optional[str] = None,
        fix: Optional[str] = None,
    ) -> Finding:
        line, column = facts.start(node)
        end_line, end_column = facts.end(node)
        if fix is None and edits:
            fix = fix_text(facts, edits)
        return Finding(
            code=self.code,
            step=self.step,
            severity=severity or self.severity,
            cell=cell,
            line=line,
            column=column + 1,
            end_line=end_line,
            end_column=end_column + 1,
            message=message,
            fix=fix,
            edits=tuple(edits),
        )


# ------------------------------------------------------------------------------ the fix, for people


def fix_text(facts: CellFacts, edits: Sequence[Edit]) -> str:
    """What the changed statements read after the fix: inserted lines and rewritten statements."""
    parts: List[str] = []
    in_place = [edit for edit in edits if edit.kind not in ("insert_before", "insert_after", "remove", "guard")]
    edits_of: dict = {}  # statement (by identity) -> (statement, its edits)
    for edit in edits:
        stmt = _statement_at(facts, edit.start)
        if stmt is not None:
            edits_of.setdefault(id(stmt), (stmt, []))[1].append(edit)
    for stmt, mine in sorted(edits_of.values(), key=lambda entry: (entry[0].lineno, entry[0].col_offset)):
        parts += [edit.code for edit in mine if edit.kind == "insert_before"]
        changed_in_place = [edit for edit in mine if edit in in_place]
        guards = [edit.code for edit in mine if edit.kind == "guard"]
        if guards:
            through = max(edit.end[0] for edit in mine if edit.kind == "guard")  # a span guard's last line
            body = (_rendered(facts, stmt, changed_in_place) if changed_in_place
                    else _statement_text(facts, stmt, through))
            parts.append(f"if {guards[0]}:\n" + "\n".join("    " + line for line in body.split("\n")))
        elif changed_in_place:
            parts.append(_rendered(facts, stmt, changed_in_place))
        parts += [edit.code for edit in mine if edit.kind == "insert_after"]
    return "\n".join(part for part in parts if part)


def _statement_text(facts: CellFacts, stmt: ast.stmt, through: int = 0) -> str:
    """The statement's text (through line ``through`` when later), dedented, IPython lines as written."""
    text = ipython_syntax.unmask("".join(facts.lines[stmt.lineno - 1:max(stmt.end_lineno, through)]), facts.masked)
    lines = text.rstrip("\r\n").split("\n")
    lines = [line.rstrip("\r") for line in lines]
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines)


def _statement_at(facts: CellFacts, position) -> Optional[ast.stmt]:
    """The innermost statement that contains ``position`` (descending through blocks, not walking)."""
    best, body = None, facts.tree.body
    while body:
        line = position[0]
        found = next(
            (
                stmt for stmt in body
                if stmt.lineno <= line <= stmt.end_lineno and facts.start(stmt) <= position <= facts.end(stmt)
            ),
            None,
        )
        if found is None:
            return best
        best, body = found, _nested_statements(found)
    return best


def _nested_statements(stmt: ast.stmt) -> List[ast.stmt]:
    nested: List[ast.stmt] = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if isinstance(value, list):
            nested += [item for item in value if isinstance(item, ast.stmt)]
    for handler in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
        nested += handler.body
    return nested


def _rendered(facts: CellFacts, stmt: ast.stmt, edits: Sequence[Edit]) -> str:
    """The statement's source with the in-place edits spliced in (display only)."""
    first, last = stmt.lineno, _header_end(stmt)
    lines = [line.rstrip("\r\n") for line in facts.lines[first - 1:last]]
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        (start_line, start_col), (end_line, end_col) = edit.start, edit.end
        if start_line < first or end_line > last:
            continue
        head, tail = lines[start_line - first][:start_col], lines[end_line - first][end_col:]
        if edit.kind == "replace":
            new = head + edit.code + tail
        elif edit.kind in ("add_argument", "append_element"):
            original = facts.lines[end_line - 1][:end_col]
            opener = original[: len(original) - 1].rstrip()
            separator = "" if opener.endswith(("(", "[")) else ("" if opener.endswith(",") else ", ")
            new = head + _between(facts, edit) + separator + edit.code + original[-1:] + tail
        else:  # remove_element: show the list without it
            new = head + tail
        lines[start_line - first:end_line - first + 1] = new.split("\n")
        last -= end_line - start_line
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines)


def _between(facts: CellFacts, edit: Edit) -> str:
    """The original text of the node an argument or element is appended to, without its closer."""
    (start_line, start_col), (end_line, end_col) = edit.start, edit.end
    text = "".join(facts.lines[start_line - 1:end_line])
    offset_end = sum(len(line) for line in facts.lines[start_line - 1:end_line - 1]) + end_col
    return text[start_col:offset_end - 1].rstrip()


def _header_end(stmt: ast.stmt) -> int:
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body:
        return body[0].lineno - 1 if body[0].lineno > stmt.lineno else stmt.lineno
    return stmt.end_lineno


# ---------------------------------------------------------------------------------- edit helpers


def replace(cell: int, facts: CellFacts, node: ast.AST, code: str, needs: Iterable[str] = ()) -> Edit:
    return Edit(cell, "replace", facts.start(node), facts.end(node), code, frozenset(needs))


def replace_with(
    cell: int, facts: CellFacts, target: ast.AST, pattern: str, needs: Iterable[str] = (), **parts: ast.AST
) -> Edit:
    """Replace ``target`` by ``pattern``, whose ``{name}`` holes keep the given sub-nodes (and their edits)."""
    code = pattern.format(**{name: facts.segment(part) for name, part in parts.items()})
    template = pattern.format(**{name: f"__npu_hole_{name}__" for name in parts})
    holes = tuple((f"__npu_hole_{name}__", facts.start(part), facts.end(part)) for name, part in parts.items())
    return Edit(cell, "replace", facts.start(target), facts.end(target), code, frozenset(needs), template, holes)


def wrap(cell: int, facts: CellFacts, node: ast.AST, function: str, needs: Iterable[str] = (), more: str = "") -> Edit:
    """``function(node<more>)``: ``more`` adds arguments after it (``, reduce_reduction="sum"``)."""
    return replace_with(cell, facts, node, function + "({node}" + more + ")", needs, node=node)


def insert_after(cell: int, facts: CellFacts, stmt: ast.stmt, code: str, needs: Iterable[str] = ()) -> Edit:
    return Edit(cell, "insert_after", facts.start(stmt), facts.end(stmt), code, frozenset(needs))


def insert_before(cell: int, facts: CellFacts, stmt: ast.stmt, code: str, needs: Iterable[str] = ()) -> Edit:
    return Edit(cell, "insert_before", facts.start(stmt), facts.end(stmt), code, frozenset(needs))


def guard(cell: int, facts: CellFacts, stmt: ast.stmt, condition: str, needs: Iterable[str] = ()) -> Edit:
    """``stmt`` runs only when ``condition`` holds (``if condition:`` around it)."""
    return guard_span(cell, facts, stmt, stmt, condition, needs)


def guard_span(cell: int, facts: CellFacts, first: ast.stmt, last: ast.stmt, condition: str,
               needs: Iterable[str] = ()) -> Edit:
    """``first`` and the statements after it in its block, through ``last``, run only when ``condition`` holds."""
    return Edit(cell, "guard", facts.start(first), facts.end(last), condition, frozenset(needs))


def remove_statement(cell: int, facts: CellFacts, stmt: ast.stmt) -> Edit:
    return Edit(cell, "remove", facts.start(stmt), facts.end(stmt))


def remove_element(cell: int, facts: CellFacts, element: ast.expr) -> Edit:
    return Edit(cell, "remove_element", facts.start(element), facts.end(element))


def add_argument(cell: int, facts: CellFacts, call: ast.Call, code: str, needs: Iterable[str] = ()) -> Edit:
    """Add ``code`` (``name=value``) as the call's last argument."""
    return Edit(cell, "add_argument", facts.start(call), facts.end(call), code, frozenset(needs))


def append_element(cell: int, facts: CellFacts, sequence: ast.expr, code: str, needs: Iterable[str] = ()) -> Edit:
    """Add ``code`` as the last element of a list or tuple display."""
    return Edit(cell, "append_element", facts.start(sequence), facts.end(sequence), code, frozenset(needs))


# ---------------------------------------------------------------------------------- node helpers


def standalone_code(facts: CellFacts, node: ast.AST) -> str:
    """``node``'s source as an expression that stands in a new statement of its own: in parentheses
    when it spans lines (inside its old statement, enclosing brackets may have carried the breaks)."""
    text = facts.segment(node)
    return f"({text})" if "\n" in text or "\r" in text else text


def single_target(stmt: ast.stmt) -> Optional[str]:
    """``x`` for a statement ``x = value`` (one plain name target), else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id
    return None


def int_literal(node: Optional[ast.AST]) -> Optional[int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def rank_size_mention(node: ast.AST, context: "Context") -> bool:
    """Does ``node`` compute with the rank count (RANK_SIZE, get_rank_size(), hvd.size(), ...)?"""
    if mentions(node, ("RANK_SIZE", "rank_size", "num_workers", "world_size", "get_rank_size", "num_ranks")):
        return True
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "size":
            if context.facts.resolve(dotted_name(child.func)).startswith("horovod."):
                return True
    return False



def rank_test_around(facts: CellFacts, stmt: ast.stmt, words=("RANK", "rank")) -> Optional[ast.expr]:
    """The test of an ``if`` around ``stmt`` that mentions the rank (``if rank_id == 0:``), or None.
    A cell that never says "rank" is not walked."""
    if "rank" not in facts.masked.code.lower():
        return None
    for node in facts.nodes(ast.If):
        if node.lineno < stmt.lineno <= node.end_lineno and mentions(node.test, words):
            return node.test
    return None


def top_level_statement(facts: CellFacts, stmt: ast.stmt) -> Optional[ast.stmt]:
    """The module-level statement of the cell that contains ``stmt``."""
    for candidate in facts.tree.body:
        if candidate is stmt:
            return candidate
        if candidate.lineno <= stmt.lineno <= candidate.end_lineno:
            return candidate
    return None


TRAINING_CALLS = ("fit", "fit_generator", "train", "train_and_evaluate", "gradient", "minimize", "apply_gradients")


def training_call(context: "Context"):
    """The notebook's first training call (cell, facts, site), where an unlocatable step is reported:
    the first cell that has one, and in it the call of the highest priority (``est.train`` before
    the ``minimize`` in its ``model_fn``), then the first in source order."""
    return min(
        context.facts.calls(*TRAINING_CALLS),
        key=lambda found: (found[0], TRAINING_CALLS.index(found[2].method), found[2].node.lineno, found[2].node.col_offset),
        default=None,
    )


def keras_prefix(context: "Context") -> str:
    """How this notebook spells Keras: its own ``keras`` alias, else ``tf.keras``."""
    return context.facts.alias_for("tensorflow.keras") or f"{context.tf}.keras"


