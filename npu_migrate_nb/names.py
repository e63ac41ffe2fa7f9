"""Which names a place in a notebook can use: what the code a fix inserts refers to must be bound
there when it runs (issue 34: a fix that wrote ``tf.keras...`` into a notebook that imports Keras
alone, or ``os.getenv`` where ``os`` was never imported, failed with a NameError on every rank).

Module-level bindings are ordered (a statement sees what the cells before it, and the statements
before it in its cell, bound); code inside a function sees every module-level binding of the
notebook (it runs when called) and its own locals, as Python resolves them.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

# Names a kernel defines for every notebook besides Python's built-ins.
IPYTHON_NAMES = frozenset({"get_ipython", "display", "In", "Out", "exit", "quit", "_", "__", "___", "_i", "_ii",
                           "_iii", "_oh", "_ih", "_dh"})
ALWAYS_BOUND = frozenset(dir(builtins)) | IPYTHON_NAMES

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)

Position = Tuple[int, int]


def own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module's, function's or loop's body (and its ``else``), not those inside the
    functions, classes and lambdas defined there: each is a scope of its own (its definition, which binds
    its name here, is yielded)."""
    todo = list(getattr(scope, "body", [])) + list(getattr(scope, "orelse", []))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def free_names(code: str) -> Set[str]:
    """The names ``code`` (statements, an expression, or an argument list such as ``hooks=h``) reads
    without binding them itself."""
    wrapper = None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        wrapper = "_npu_arguments_"
        try:
            tree = ast.parse(f"{wrapper}({code})")
        except SyntaxError:
            return set()
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return loaded - bound - ALWAYS_BOUND - {wrapper}


def bound_names(code: str) -> Set[str]:
    """The module-level names ``code`` (statements) binds."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {name for name, _line in _module_bindings(tree.body)}


def _module_bindings(body) -> List[Tuple[str, Position]]:
    """(name, (line, column)) of every module-level binding in ``body``: assignments, imports, definitions,
    loop and ``with`` targets, exception names, walrus targets; not the insides of functions and
    classes. A star import binds ``*``."""
    found: List[Tuple[str, Position]] = []
    pending = list(body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((node.name, (node.lineno, node.col_offset)))
            pending[:0] = list(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = "*" if alias.name == "*" else (alias.asname or alias.name.split(".")[0])
                found.append((name, (node.lineno, node.col_offset)))
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.append((node.id, (node.lineno, node.col_offset)))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.append((node.name, (node.lineno, node.col_offset)))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # Comprehension targets are local to it; a walrus inside binds in the module.
            pending[:0] = [n for n in ast.walk(node) if isinstance(n, ast.NamedExpr)]
            continue
        pending[:0] = list(ast.iter_child_nodes(node))
    return found


@dataclass
class CellBindings:
    tree: Optional[ast.Module]
    module_level: List[Tuple[str, Position]] = field(default_factory=list)  # (name, where)

    def bound_before(self, position: Position) -> Set[str]:
        return {name for name, at in self.module_level if at < position}

    @property
    def all(self) -> Set[str]:
        return {name for name, _line in self.module_level}

    def enclosing_function(self, position: Position) -> Optional[ast.AST]:
        """The innermost function (or lambda) whose body holds ``position``, or None at module level."""
        if self.tree is None:
            return None
        around = [node for node in ast.walk(self.tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and _holds(node, position)]
        return max(around, key=lambda node: (node.lineno, node.col_offset)) if around else None


def cell_bindings(tree: Optional[ast.Module]) -> CellBindings:
    return CellBindings(tree, _module_bindings(tree.body) if tree is not None else [])


def function_locals(function: ast.AST) -> Set[str]:
    """A function's parameters and the names it binds (its locals), with those of the functions
    around it seen through closures left to the caller."""
    names = {arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg)} if hasattr(function, "args") else set()
    body = function.body if isinstance(function.body, list) else [function.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name.split(".")[0]) for alias in node.names)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


class Scope:
    """The notebook's cells (index -> tree, in run order), asked what a place can use."""

    def __init__(self, trees: Iterable[Tuple[int, Optional[ast.Module]]]):
        self.order: List[int] = []
        self.cells: Dict[int, CellBindings] = {}
        for index, tree in trees:
            self.order.append(index)
            self.cells[index] = cell_bindings(tree)
        self.everywhere: Set[str] = set().union(*(cell.all for cell in self.cells.values())) if self.cells else set()
        # name -> where each cell reads it
        self.reads: Dict[int, Dict[str, List[Position]]] = {}
        for index, cell in self.cells.items():
            if cell.tree is not None:
                places = self.reads[index] = {}
                for node in ast.walk(cell.tree):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                        places.setdefault(node.id, []).append((node.lineno, node.col_offset))
        read = {name for places in self.reads.values() for name in places}
        # Names the notebook reads and never binds come from somewhere it does not show (a fragment, %run,
        # a kernel prepared beforehand): code that reads them is no worse than the notebook. With a star
        # import they may come from it instead, and exist only after it.
        unbound = read - self.everywhere - ALWAYS_BOUND
        self._function_reads: Optional[Dict[str, Tuple[Set[str], Set[str]]]] = None
        self.given_from_outside: FrozenSet[str] = frozenset() if "*" in self.everywhere else frozenset(unbound)

    def read_anyway(self, cell: int, name: str) -> bool:
        """The cell itself reads ``name`` where nothing has bound it (a model made in a later cell, or
        nowhere with a star import after it), also through a function of the notebook it calls at its
        top level: a fix there that reads it too is no worse than the cell."""
        if any(name not in self.available(cell, place) for place in self.reads.get(cell, {}).get(name, ())):
            return True
        bindings = self.cells.get(cell)
        if bindings is None or bindings.tree is None:
            return False
        for statement in bindings.tree.body:
            place = (statement.lineno, statement.col_offset)
            if name not in self.available(cell, place) and name in self._read_by_calls_in(statement):
                return True
        return False

    def _read_by_calls_in(self, statement: ast.stmt) -> Set[str]:
        """The names read by the notebook's functions that ``statement`` calls, and those they call."""
        functions = self._functions()
        pending = [node.func.id for node in ast.walk(statement)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions]
        seen: Set[str] = set()
        read: Set[str] = set()
        while pending:
            called = pending.pop()
            if called in seen:
                continue
            seen.add(called)
            names, calls = functions[called]
            read |= names
            pending += [other for other in calls if other in functions]
        return read

    def _functions(self) -> Dict[str, Tuple[Set[str], Set[str]]]:
        """Module-level function name -> (names its body reads, names it calls)."""
        if self._function_reads is None:
            self._function_reads = {}
            for index in self.order:
                tree = self.cells[index].tree
                for node in tree.body if tree is not None else ():
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        inner = [n for statement in node.body for n in ast.walk(statement)]
                        reads = {n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                        calls = {n.func.id for n in inner if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                        self._function_reads[node.name] = (reads - function_locals(node), calls)
        return self._function_reads

    def available(self, cell: int, position: Position) -> FrozenSet[str]:
        """What code at ``position`` of ``cell`` can read: at module level, what ran before it; in a
        function, every module-level binding of the notebook and the locals of the functions around it."""
        bindings = self.cells.get(cell)
        if bindings is None:
            return frozenset(self.everywhere)
        function = bindings.enclosing_function(position)
        if function is not None:
            names = set(self.everywhere)
            for node in ast.walk(bindings.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and _holds(node, position):
                    names |= function_locals(node)
            return frozenset(names)
        names: Set[str] = set()
        for index in self.order:
            if index == cell:
                names |= bindings.bound_before(position)
                break
            names |= self.cells[index].all
        return frozenset(names)


def _holds(node: ast.AST, position: Position) -> bool:
    return (node.lineno, node.col_offset) < position <= (node.end_lineno, node.end_col_offset)


def positional_parameters(function) -> list:
    """The names of a function's positional parameters, in order (what a call's positions bind)."""
    return [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
