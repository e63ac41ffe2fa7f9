"""What every fix keeps, checked on a notebook before and after ``fix`` (issue 34).

* **No new undefined name**: pyflakes' undefined names of the cells in order (IPython lines masked,
  the names a kernel gives every notebook counted as built-ins), after the fix against before it. A name
  the notebook's own functions read, called at the top level before anything binds it, is the notebook's
  already (pyflakes reads a function's body as if run at the end).
* **No batch of zero**: every per-rank batch the fix computes from a global batch the notebook
  gives as a number (``B // RANK_SIZE``) is at least 1 at the rank size the analysis was asked about.
* **Only variables broadcast**: no broadcast the fix wrote is given a name bound only to tensors
  (``tf.constant``, an array): the real broadcast assigns into variables.
* **One aggregation**: no training step's gradients are all-reduced twice (the analysis of the fixed
  notebook has no ``double-allreduce`` finding).

The last invariant, that the fixed notebook still runs on one card, is a run: the simulator's
one-card rerun and ``benchmarks/bench_corpus_run.py`` hold it.

pyflakes is needed for the first (the ``test`` extra has it); the others use the analyzer alone.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from . import ipython_syntax
from .names import ALWAYS_BOUND


@dataclass
class Violation:
    invariant: str  # "undefined-name" | "zero-batch" | "broadcast-not-variable" | "double-allreduce"
    detail: str
    cell: Optional[int] = None


@dataclass
class Report:
    violations: List[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_invariant(self) -> Dict[str, List[Violation]]:
        found: Dict[str, List[Violation]] = {}
        for violation in self.violations:
            found.setdefault(violation.invariant, []).append(violation)
        return found


# ---------------------------------------------------------------------------------- undefined names


def python_of(sources: Sequence[str]) -> List[Tuple[int, str]]:
    """(cell index, Python code) of the cells that are Python, IPython lines masked; a cell that does
    not parse is left out (pyflakes would stop at it)."""
    cells = []
    for index, source in enumerate(sources):
        code = ipython_syntax.mask(source).code
        if code is not None and _parse(code) is not None:
            cells.append((index, code))
    return cells


def _parse(code: str) -> Optional[ast.Module]:
    with warnings.catch_warnings():  # the notebook's own invalid escapes are not ours to report
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except SyntaxError:
            return None


def undefined_names(sources: Sequence[str], through_calls: bool = False) -> Dict[str, int]:
    """Each name pyflakes finds undefined in the cells run in order, with the first cell that uses it
    (the names a kernel gives every notebook count as built-ins). ``through_calls``: also the names the
    notebook's functions read where a top-level statement calls them."""
    from pyflakes import checker, messages

    cells = python_of(sources)
    if not cells:
        return {}
    lines_before, text = [], []
    for index, code in cells:
        lines_before.append((sum(part.count("\n") + 1 for part in text), index))
        text.append(code if code.endswith("\n") else code + "\n")
    tree = _parse("".join(text))
    if tree is None:
        return {}
    if through_calls:
        _read_what_calls_read(tree.body, _free_names_of_functions(tree))
    found = checker.Checker(tree, filename="<notebook>", builtins=set(ALWAYS_BOUND))
    undefined: Dict[str, int] = {}
    for message in found.messages:
        if isinstance(message, messages.UndefinedName):
            name = message.message_args[0]
            undefined.setdefault(name, _cell_at(lines_before, message.lineno))
    return undefined


def _cell_at(lines_before: List[Tuple[int, int]], lineno: int) -> int:
    cell = lines_before[0][1]
    for first_line, index in lines_before:
        if lineno > first_line:
            cell = index
    return cell


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BODIES = ("body", "orelse", "finalbody")


def _free_names_of_functions(tree: ast.Module) -> Dict[str, Tuple[set, set]]:
    """Module-level function -> (the names its body reads and does not bind itself, the functions it calls)."""
    functions = {}
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            inner = [n for statement in node.body for n in ast.walk(statement)]
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]
            bound = {a.arg for a in arguments if a is not None}
            bound |= {n.id for n in inner if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
            bound |= {n.name for n in inner if isinstance(n, (*_FUNCTIONS, ast.ClassDef))}
            bound |= {(a.asname or a.name).split(".")[0] for n in inner if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            read = {n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            calls = {n.func.id for n in inner if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            functions[node.name] = (read - bound, calls)
    return functions


def _read_what_calls_read(statements: List[ast.stmt], functions: Dict[str, Tuple[set, set]]) -> None:
    """Before each statement outside the functions (loops, ifs, withs and trys looked into) that calls a
    notebook function, an expression reading the names that function reads, and the functions it calls."""
    placed: List[ast.stmt] = []
    for statement in statements:
        if not isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
            nested = [getattr(statement, name) for name in _BODIES if isinstance(getattr(statement, name, None), list)]
            nested += [handler.body for handler in getattr(statement, "handlers", ())]
            for body in nested:
                _read_what_calls_read(body, functions)
            header = [n for n in ast.iter_child_nodes(statement) if not isinstance(n, (ast.stmt, ast.excepthandler))]
            names = _read_through(header if nested else [statement], functions)
            if names:
                reads = ast.Expr(ast.Tuple([ast.Name(name, ast.Load()) for name in sorted(names)], ast.Load()))
                placed.append(ast.fix_missing_locations(ast.copy_location(reads, statement)))
        placed.append(statement)
    statements[:] = placed


def _read_through(nodes: List[ast.AST], functions: Dict[str, Tuple[set, set]]) -> set:
    pending = [n.func.id for node in nodes for n in ast.walk(node)
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions]
    seen, read = set(), set()
    while pending:
        called = pending.pop()
        if called not in seen:
            seen.add(called)
            read |= functions[called][0]
            pending += [other for other in functions[called][1] if other in functions]
    return read


def new_undefined_names(before: Sequence[str], after: Sequence[str]) -> List[Violation]:
    known = undefined_names(before, through_calls=True)
    return [Violation("undefined-name", name, cell) for name, cell in undefined_names(after).items() if name not in known]


# ------------------------------------------------------------------------------------- zero batches

_RANK_SIZE_WORDS = ("RANK_SIZE", "rank_size")


def _divisions_by_the_rank_size(sources: Sequence[str]) -> List[Tuple[int, str, ast.BinOp]]:
    """(cell, text, node) of every ``x // <the rank size>`` in the cells."""
    found = []
    for index, code in python_of(sources):
        for node in ast.walk(_parse(code)):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
                divisor = ast.unparse(node.right)
                if any(word in divisor for word in _RANK_SIZE_WORDS):
                    found.append((index, ast.unparse(node), node))
    return found


def _int_constants(sources: Sequence[str]) -> Dict[str, Optional[int]]:
    """Module-level names bound to an int literal exactly once (None when bound otherwise too)."""
    values: Dict[str, Optional[int]] = {}
    for _index, code in python_of(sources):
        for stmt in _parse(code).body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        literal = stmt.value.value if isinstance(stmt.value, ast.Constant) and type(stmt.value.value) is int else None
                        values[target.id] = literal if target.id not in values else None
    return values


def zero_batches(before: Sequence[str], after: Sequence[str], ranks: int) -> List[Violation]:
    """Divisions of a known global batch by the rank size that the fix wrote and that give 0 at ``ranks``."""
    known = {text for _cell, text, _node in _divisions_by_the_rank_size(before)}
    constants = _int_constants(after)
    violations = []
    for cell, text, node in _divisions_by_the_rank_size(after):
        if text in known:
            continue
        left = node.left
        value = left.value if isinstance(left, ast.Constant) and type(left.value) is int else (
            constants.get(left.id) if isinstance(left, ast.Name) else None)
        if value is not None and value // ranks == 0:
            violations.append(Violation("zero-batch", f"{text} is 0 on {ranks} ranks", cell))
    return violations


# ---------------------------------------------------------------------------- broadcasts, aggregation

_VARIABLE_ATTRIBUTES = frozenset({"trainable_variables", "variables", "trainable_weights", "weights",
                                  "non_trainable_variables"})
BROADCASTS = frozenset({"npu_device.distribute.broadcast", "npu_bridge.hccl_ops.broadcast"})


def broadcasts_of_tensors(analysis_before, analysis_after) -> List[Violation]:
    """Broadcasts the fix wrote whose argument is known to be a tensor, not variables (the real
    broadcast assigns into variables: a tensor fails on the cards)."""
    from .rules.sources import makes_a_tensor

    def broadcast_texts(analysis):
        facts = analysis.context.facts
        return [(cell, cell_facts, site) for cell, cell_facts, site in facts.calls_to(*BROADCASTS)]

    before = {cell_facts.segment(site.node) for _cell, cell_facts, site in broadcast_texts(analysis_before)} \
        if analysis_before.context is not None else set()
    violations = []
    context = analysis_after.context
    if context is None:
        return violations
    for cell, cell_facts, site in broadcast_texts(analysis_after):
        text = cell_facts.segment(site.node)
        if text in before or not site.node.args:
            continue
        for part in _parts(site.node.args[0]):
            if isinstance(part, ast.Name) and _bound_only_to_tensors(context, part.id, makes_a_tensor):
                violations.append(Violation("broadcast-not-variable", f"{text}: {part.id} is a tensor", cell))
    return violations


def _parts(node: ast.expr) -> List[ast.expr]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [part for element in node.elts for part in _parts(element)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _parts(node.left) + _parts(node.right)
    return [node]


def _bound_only_to_tensors(context, name: str, makes_a_tensor) -> bool:
    values = [a.value for _c, _f, a in context.facts.assignments(name)]
    return bool(values) and all(makes_a_tensor(context, value) for value in values)


def double_aggregations(analysis_before, analysis_after) -> List[Violation]:
    """The double-allreduce findings of the fixed notebook beyond those the notebook had (lines move)."""
    known = sum(1 for f in analysis_before.findings if f.code == "double-allreduce")
    found = [f for f in analysis_after.findings if f.code == "double-allreduce"]
    return [Violation("double-allreduce", f.message, f.cell) for f in found[known:]]


# ------------------------------------------------------------------------------------------ all of them


def check_notebook_fix(notebook, ranks: int = 2) -> Report:
    """Fix ``notebook`` (a :class:`~npu_migrate_nb.notebook.Notebook`) and check every invariant of what
    the fix wrote; ``ranks``: the rank count the analysis is told (--ranks) and batches are checked at."""
    from .analysis import Options, analyze
    from .rewrite import fix_notebook

    options = Options(ranks=ranks)
    analysis = analyze(notebook, options)
    result = fix_notebook(notebook, analysis)
    return check_result(notebook, result.sources, analysis, analyze(with_sources(notebook, result.sources), options), ranks)


def check_result(notebook, changed: Dict[int, str], analysis_before, analysis_after, ranks: int) -> Report:
    """Every invariant of a fix already made: ``changed`` the new sources of the cells it changed,
    the analyses of the notebook before and after it."""
    before, after = code_sources(notebook), code_sources(notebook, changed)
    report = Report(new_undefined_names(before, after))
    report.violations += zero_batches(before, after, ranks)
    report.violations += broadcasts_of_tensors(analysis_before, analysis_after)
    report.violations += double_aggregations(analysis_before, analysis_after)
    return report


def with_sources(notebook, changed: Dict[int, str]):
    from dataclasses import replace as with_changes

    return with_changes(notebook, cells=[with_changes(cell, source=changed.get(cell.index, cell.source))
                                         for cell in notebook.cells])


def code_sources(notebook, changed: Optional[Dict[int, str]] = None) -> List[str]:
    """Every cell's source in order, ``changed`` ones replaced; a cell that is not code counts as empty."""
    changed = changed or {}
    return [changed.get(cell.index, cell.source) if cell.cell_type == "code" else "" for cell in notebook.cells]
