"""Full-batch training on arrays the notebook makes: a linear regression on 17 points written in a cell
(TensorFlow-Examples), a TF1 graph on ``tf.constant([1, ..., 10])`` (Google's ML courses). The step
reads the arrays where it computes the loss, with no dataset, feed or ``fit`` between: each rank must
take its own rows where the arrays are made, so that every later read (the step, the loss printed) sees
the rank's slice."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set

from ..facts import CellFacts, dotted_name, once_per_object
from ..names import function_locals
from .base import int_literal

# Makers of an array of samples: the first argument holds the rows (a list written in the cell) ...
_FROM_ROWS = {"numpy.array", "numpy.asarray", "tensorflow.constant", "tensorflow.convert_to_tensor"}
# ... their count is an argument (numpy's and TensorFlow's samplers, linspace) ...
_ROW_COUNT_ARGUMENT = {"numpy.linspace": (2, "num"), "tensorflow.linspace": (2, "num")}
_FROM_SHAPE = {"numpy.random.rand", "numpy.random.randn"}  # rand(100, 1): the rows first
_SIZE_KEYWORD = {"numpy.random.normal", "numpy.random.uniform", "numpy.random.random", "numpy.random.randint"}
_SHAPE_FIRST = {"tensorflow.random.normal", "tensorflow.random.uniform"}  # normal([100, 1])
# ... or they are read from a file.
_LOADED = {"numpy.load", "numpy.loadtxt", "numpy.genfromtxt"}
# What holds weights, not samples: never sharded, never followed.
_NOT_SAMPLES = {"tensorflow.Variable", "tensorflow.get_variable", "tensorflow.placeholder"}
_DEPTH = 5


@dataclass
class DataArray:
    """An array of samples the training reads: where it is made, and how many rows (None: not known)."""
    name: str
    cell: int
    facts: CellFacts
    stmt: ast.stmt
    rows: Optional[int]


def full_batch_arrays(context) -> List[DataArray]:
    """The arrays of samples the training steps read whole (every rank all of them), or [] when their
    row counts differ (weights written as a list, not samples). Not the arrays a feed, ``fit`` or a
    dataset reads too: their own shard takes the rank's rows there."""
    found: Dict[tuple, DataArray] = {}
    seen: Set[tuple] = set()
    frontier = set(_read_by_the_steps(context))
    handed_over = _given_to_input_calls(context)
    for _level in range(_DEPTH):
        following: Set[tuple] = set()
        for name, at in frontier - seen:
            seen.add((name, at))
            if name in context.facts.aliases or context.facts.function(name) is not None:
                continue
            bound = _binding(context, name, at)
            if bound is None:
                continue
            cell, facts, assignment = bound
            kind = _canonical(context, assignment.value)
            if kind in _NOT_SAMPLES:
                continue
            rows = _rows_made(context, assignment.value, kind)
            if rows is not False:
                if name not in handed_over:  # each binding the steps read (a notebook makes X anew per section)
                    found[(name, cell, assignment.stmt.lineno)] = DataArray(name, cell, facts, assignment.stmt, rows)
            else:  # made from other names (``Y = 2 * X + 10``): what they hold there
                following |= {(node.id, (cell, assignment.stmt.lineno)) for node in ast.walk(assignment.value)
                              if isinstance(node, ast.Name)}
        frontier = following
    arrays = list(found.values())
    known = {array.rows for array in arrays if array.rows is not None}
    if len(known) > 1 or any(rows < context.options.ranks for rows in known):
        return []
    return sorted(arrays, key=lambda array: (array.cell, array.stmt.lineno))


def _binding(context, name: str, at: Optional[tuple]):
    """(cell, facts, assignment) of the top-level binding of ``name`` in force at ``at`` (a cell and
    line; None: a function's read, the notebook's last binding)."""
    bound = [(cell, facts, a) for cell, facts, a in context.facts.assignments(name)
             if a.function is None and not a.tuple_target and (at is None or (cell, a.stmt.lineno) < at)]
    return bound[-1] if bound else None


def _given_to_input_calls(context) -> Set[str]:
    """Names read in what a feed, ``fit`` or a dataset source is given: sharded there."""
    names: Set[str] = set()
    for _cell, _facts, site in context.facts.calls("run", "fit", "train_on_batch", "from_tensor_slices",
                                                    "numpy_input_fn", "from_generator"):
        if site.method == "run":
            feed = site.keyword("feed_dict")
            given = [feed.value] if feed is not None else site.node.args[1:2]
            given = [value for part in given for value in (part.values if isinstance(part, ast.Dict) else [part])]
        else:
            given = [*site.node.args, *(keyword.value for keyword in site.node.keywords)]
        names |= {node.id for value in given for node in ast.walk(value) if isinstance(node, ast.Name)}
    return names


def _read_by_the_steps(context) -> Iterator[tuple]:
    """(name, where) read where the loss is computed: in a GradientTape block (and the free names of the
    notebook's functions called there), and in what ``minimize`` is given. ``where``: the cell and line
    of a top-level read (its binding then), None in a function (the notebook's last binding)."""
    for cell, facts in context.facts.cells:
        if facts.tree is None:
            continue
        for node, inside in _step_sites(facts):
            at = None if inside else (cell, getattr(node, "lineno", 0))
            if isinstance(node, ast.With) and any(
                    _canonical(context, item.context_expr) == "tensorflow.GradientTape" for item in node.items):
                yield from ((name, at) for name in _names_read(context, node.body))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "minimize":
                loss = node.args[0] if node.args else next(
                    (keyword.value for keyword in node.keywords if keyword.arg == "loss"), None)
                if loss is not None:
                    yield from ((name, at) for name in _names_read(context, [loss]))


@once_per_object
def _step_sites(cell: CellFacts) -> List[tuple]:
    """(node, whether it is in a function) of each with-block and ``minimize`` call in a cell, in
    source order."""
    if not cell.nodes(ast.With) and not any(_is_minimize(call) for call in cell.nodes(ast.Call)):
        return []  # nothing to find: the cell is not walked
    found = []
    stack = [(child, False) for child in reversed(list(ast.iter_child_nodes(cell.tree)))]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, ast.With) or _is_minimize(node):
            found.append((node, inside))
        below = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, below) for child in reversed(list(ast.iter_child_nodes(node))))
    return found


def _is_minimize(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "minimize"


def _names_read(context, nodes: list) -> Iterator[str]:
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                yield node.id
                defined = context.facts.function(node.id)
                if defined is not None and isinstance(defined[2], (ast.FunctionDef, ast.Lambda)):
                    local = function_locals(defined[2])
                    yield from (inner.id for inner in ast.walk(defined[2]) if isinstance(inner, ast.Name)
                                and isinstance(inner.ctx, ast.Load) and inner.id not in local)


def _canonical(context, node: ast.AST) -> Optional[str]:
    if not isinstance(node, ast.Call):
        return None
    name = context.facts.resolve(dotted_name(node.func))
    return name.replace("tensorflow.compat.v1.", "tensorflow.").replace("tensorflow.compat.v2.", "tensorflow.") \
        if name else None


def _rows_made(context, value: ast.expr, kind: Optional[str]):
    """The row count of the samples ``value`` makes (None: samples, count not known), or False when
    it makes no array of samples."""
    if kind in _LOADED:
        return None
    if kind in _FROM_ROWS:  # rows written in the cell, or a tensor of an array (``tf.constant(y.reshape(-1, 1))``)
        rows = value.args[0] if value.args else next(
            (keyword.value for keyword in value.keywords if keyword.arg == "value"), None)
        if isinstance(rows, (ast.List, ast.Tuple)):
            return len(rows.elts) if len(rows.elts) > 1 else False
        return False if rows is None or _a_number(context, rows) else None
    if kind in _ROW_COUNT_ARGUMENT:
        position, keyword = _ROW_COUNT_ARGUMENT[kind]
        count = value.args[position] if len(value.args) > position else next(
            (k.value for k in value.keywords if k.arg == keyword), None)
        return _more_than_one(int_literal(count))
    if kind in _FROM_SHAPE:
        return _more_than_one(int_literal(value.args[0]) if value.args else None)
    if kind in _SIZE_KEYWORD or kind in _SHAPE_FIRST:
        shape = next((k.value for k in value.keywords if k.arg in ("size", "shape")), None)
        if shape is None and kind in _SHAPE_FIRST and value.args:
            shape = value.args[0]
        first = shape.elts[0] if isinstance(shape, (ast.List, ast.Tuple)) and shape.elts else shape
        return _more_than_one(int_literal(first))
    return False


def _a_number(context, node: ast.expr) -> bool:
    """A literal number, or a name bound to one (``tf.constant(learning_rate)``): no rows to split."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.Name):
        bound = [a.value for _c, _f, a in context.facts.assignments(node.id) if a.function is None]
        node = bound[-1] if bound else node
        if isinstance(node, ast.UnaryOp):
            node = node.operand
    return isinstance(node, ast.Constant)


def _more_than_one(rows: Optional[int]):
    return rows if rows is not None and rows > 1 else False


def whole_reads_beside_rank_outputs(context, arrays: List[DataArray]) -> List[tuple]:
    """(cell, facts, expression): reads of the arrays a sharded tensor was made from, given to the same
    call as what a session fetched from it (``accuracy(predictions, train_labels[:n])`` after
    ``tf_train_labels = tf.constant(train_labels[:n])`` is sharded): the fetched value holds the
    rank's rows, so the read must take them too, or the two no longer line up."""
    sharded = {(array.name, array.cell, array.stmt.lineno) for array in arrays}
    sources = {root for array in arrays for root in [_source_root(array.stmt)] if root is not None}
    if not sources:
        return []
    found = []
    for cell, facts in context.facts.cells:
        if facts.tree is None:
            continue
        outputs = set(_rank_outputs(context, cell, facts.tree, sharded))
        if not outputs:
            continue
        for node in ast.walk(facts.tree):
            if not isinstance(node, ast.Call) or not any(
                    isinstance(arg, ast.Name) and arg.id in outputs for arg in node.args):
                continue
            found += [(cell, facts, arg) for arg in node.args
                      if _root(arg) in sources and not (isinstance(arg, ast.Name) and arg.id in outputs)]
    return found


def _source_root(stmt: ast.stmt) -> Optional[str]:
    """``train_labels`` for ``tf_train_labels = tf.constant(train_labels[:n])``."""
    value = getattr(stmt, "value", None)
    if not isinstance(value, ast.Call) or not value.args:
        return None
    return _root(value.args[0])


def _root(node: ast.expr) -> Optional[str]:
    while isinstance(node, (ast.Subscript, ast.Call, ast.Attribute)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _rank_outputs(context, cell: int, tree: ast.AST, sharded: Set[tuple]) -> Iterator[str]:
    """Names bound in this cell to what ``session.run(...)`` / ``tensor.eval()`` fetched from a graph
    that reads a sharded tensor."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("run", "eval")):
            continue
        call = node.value
        fetched = call.args[0] if call.func.attr == "run" and call.args else call.func.value
        for target in node.targets:
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(fetched, (ast.Tuple, ast.List)) \
                    and len(target.elts) == len(fetched.elts):
                pairs = zip(target.elts, fetched.elts)
            else:
                pairs = [(target, fetched)]
            for bound, fetch in pairs:
                if isinstance(bound, ast.Name) and _reaches(context, fetch, (cell, node.lineno), sharded):
                    yield bound.id


def _reaches(context, fetch: ast.expr, at: tuple, sharded: Set[tuple]) -> bool:
    """Whether the graph ``fetch`` names reads a sharded tensor (through top-level bindings)."""
    frontier = {(node.id, at) for node in ast.walk(fetch) if isinstance(node, ast.Name)}
    seen: Set[tuple] = set()
    for _level in range(2 * _DEPTH):
        following: Set[tuple] = set()
        for name, where in frontier - seen:
            seen.add((name, where))
            bound = _binding(context, name, where)
            if bound is None:
                continue
            cell, _facts, assignment = bound
            if (name, cell, assignment.stmt.lineno) in sharded:
                return True
            following |= {(node.id, (cell, assignment.stmt.lineno)) for node in ast.walk(assignment.value)
                          if isinstance(node, ast.Name)}
        frontier = following
    return False
