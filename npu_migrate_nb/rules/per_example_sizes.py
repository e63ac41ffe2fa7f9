"""Tensors a training step makes per example, sized with the global batch.

Once the fix gives each rank its part of the global batch, a step that also makes a tensor of its own
per example with the global batch size (a GAN's noise ``np.random.normal(size=[batch_size, noise_dim])``,
its labels ``tf.ones([batch_size])``) mixes a rank's rows with a global number of rows: a shape error
(``Incompatible shapes: [64,1] vs. [128,1]``), or, where nothing meets them, a step on more noise than
one card made for the same rows. Those sizes follow the split: the per-rank batch, read in the code the
step runs (the loop that reads the batches and the notebook's functions it calls, and in TF1 the graph
the cells build), nowhere else.
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Sequence, Set, Tuple

from ..facts import CellFacts, chain_root_name, dotted_name
from ..findings import Edit
from ..names import function_locals, own_nodes, positional_parameters
from .base import replace

_DEPTH = 3  # calls followed from the step's loop (run_optimization -> discriminator_loss)
_LIBRARIES = ("tensorflow.", "numpy.")
# Calls whose shape or size argument gives the number of rows of what they make.
_SIZING = {"ones", "zeros", "fill", "empty", "full", "normal", "uniform", "truncated_normal", "random_normal",
           "random_uniform", "randn", "rand", "randint", "standard_normal", "binomial", "categorical", "reshape",
           "stateless_normal", "stateless_uniform", "poisson", "gamma"}
_SHAPE_KEYWORDS = ("shape", "size", "dims", "newshape")
_WRAPPERS = ("enumerate", "tqdm", "trange", "zip", "iter")

Step = Tuple[int, CellFacts, ast.AST]  # a cell, its facts and the loop (or function) whose body is the step


def loops_over(context, names: Set[str]) -> List[Step]:
    """The ``for`` loops of the notebook's cells (at any depth) that iterate one of these datasets, by
    its name or as a parameter of the notebook's function that a call gives it (``train(dataset,
    epochs)`` iterating ``for image_batch in dataset``: the DCGAN tutorial)."""
    found = []
    for cell, facts in context.facts.cells:
        for node in facts.nodes(ast.For):
            if _iterated_name(node.iter) in names:
                found.append((cell, facts, node))
        for function in facts.functions.values():
            found += [(cell, facts, loop) for loop in _loops_over_parameters(context, function, names)]
    return found


def _loops_over_parameters(context, function: ast.AST, names: Set[str]) -> Iterator[ast.For]:
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    parameters = set(positional_parameters(function))
    for loop in (node for node in own_nodes(function) if isinstance(node, ast.For)):
        parameter = _iterated_name(loop.iter)
        if parameter in parameters and any(
                isinstance(given, ast.Name) and given.id in names
                for _cell, _facts, _call, given in context.facts.given_to_parameter(function, function.name, parameter)):
            yield loop


def per_rank_sizes(context, size: Optional[ast.expr], per_rank: str, steps: Sequence[Step],
                   needs: Sequence[str] = (), batch_sources: Sequence[ast.Call] = ()) -> List[Edit]:
    """Edits giving ``per_rank`` (code) for the global batch ``size`` (a name bound at the top of a cell)
    where the steps size a per-example tensor with it. ``batch_sources``: the calls that pick the global
    batch the fix splits (``fetch_batch(epoch, i, batch_size)``): the size given them stays global."""
    if not isinstance(size, ast.Name):
        return []
    edits, seen = [], set()
    for cell, facts, node in _reads(context, size.id, steps, sources={id(call) for call in batch_sources}):
        if (cell, id(node)) not in seen:
            seen.add((cell, id(node)))
            edits.append(replace(cell, facts, node, per_rank, needs))
    return edits


def _reads(context, batch: str, steps: Sequence[Step], depth: int = _DEPTH, own: Optional[ast.AST] = None,
           sources: Set[int] = frozenset()) -> Iterator[Tuple[int, CellFacts, ast.Name]]:
    """The reads of ``batch`` that size a per-example tensor in the steps and the notebook functions
    they call. ``own``: the function whose parameter ``batch`` is (its local is the one meant there);
    ``sources``: ids of the calls picking the batch itself, whose size argument is not followed."""
    visited: Set[int] = set()
    pending = [(cell, facts, body, depth) for cell, facts, body in steps]
    while pending:
        cell, facts, scope, depth = pending.pop()
        if id(scope) in visited:
            continue
        visited.add(id(scope))
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope is not own \
                and batch in function_locals(scope):
            continue  # the function's own batch_size, not the notebook's
        graph_only = isinstance(scope, ast.Module)  # a TF1 cell building the graph: its TensorFlow ops only
        nodes = list(own_nodes(scope))
        local_values = _local_values(nodes)
        for node in nodes:
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                for read in _slice_bound_reads(node.slice, batch, local_values):
                    yield cell, facts, read
                continue
            if not isinstance(node, ast.Call):
                continue
            read = _sizing_read(context, node, batch, graph_only)
            if read is not None and not (graph_only and _a_tensor_there(context, batch, cell, read.lineno)):
                yield cell, facts, read
            if depth > 1 and isinstance(node.func, ast.Name):
                called = context.facts.function(node.func.id)
                if called is not None:
                    pending.append((called[0], called[1], called[2], depth - 1))
                    if id(node) not in sources and not graph_only:  # a TF1 cell's graph: its TensorFlow ops only
                        yield from ((cell, facts, given) for given in _given_as_a_size(context, node, called, batch, depth))


def _given_as_a_size(context, call: ast.Call, called, batch: str, depth: int) -> Iterator[ast.Name]:
    """``batch`` given to a notebook function (``train_step(images, BATCH_SIZE)``) whose parameter
    sizes a per-example tensor there (``tf.random.normal([batch_size, noise_dim])``): the argument."""
    c_cell, c_facts, function = called
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    parameters = positional_parameters(function)
    given = [(parameters[i], argument) for i, argument in enumerate(call.args[:len(parameters)])]
    given += [(keyword.arg, keyword.value) for keyword in call.keywords if keyword.arg is not None]
    for parameter, argument in given:
        named = _named(argument, batch)
        if named is not None and any(_reads(context, parameter, [(c_cell, c_facts, function)], depth - 1, own=function)):
            yield named


def _a_tensor_there(context, name: str, cell: int, line: int) -> bool:
    """Is ``name`` bound, where a TF1 cell builds the graph, to a TensorFlow value (the capsule network's
    ``batch_size = tf.shape(X)[0]``)? It is then the batch the graph is fed, which follows the split."""
    value = context.facts.bound_before(name, cell, line, None)
    return value is not None and any(
        isinstance(node, ast.Call) and context.facts.resolve(dotted_name(node.func) or "").startswith("tensorflow.")
        for node in ast.walk(value))


def _slice_bound_reads(part: ast.Slice, batch: str, local_values) -> Iterator[ast.Name]:
    """``x[i * tower_batch:(i + 1) * tower_batch]`` in a step, ``tower_batch = int(batch_size / towers)``
    beside it (multi-GPU towers): the rank's batch has a rank's rows, so offsets counted in the global
    batch point past its end (empty towers)."""
    for bound in (part.lower, part.upper):
        for name in (node for node in ast.walk(bound) if isinstance(node, ast.Name)) if bound is not None else ():
            if name.id == batch and isinstance(name.ctx, ast.Load):
                yield name
                continue
            for value in local_values.get(name.id, ()):
                yield from (node for node in ast.walk(value) if _named(node, batch) is not None)


def _local_values(nodes) -> dict:
    """Each name a scope assigns alone (``name = value``), with the values it is given."""
    values: dict = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values.setdefault(node.targets[0].id, []).append(node.value)
    return values


def graph_cells(context) -> List[Step]:
    """TF1: the cells' top levels, where the graph each step runs is built (``tf.ones([batch_size])`` as
    a loss's labels runs every step, though written once)."""
    return [(cell, facts, facts.tree) for cell, facts in context.facts.cells if facts.tree is not None] \
        if context.tf1 else []


def _sizing_read(context, call: ast.Call, batch: str, graph_only: bool = False) -> Optional[ast.Name]:
    """The ``batch`` name giving the number of rows of what ``call`` makes: ``tf.ones([batch])``,
    ``np.random.normal(0, 1, size=(batch, 100))``, ``np.random.randn(batch, 100)``, ``tf.reshape(x, [batch, -1])``."""
    dotted = context.facts.resolve(dotted_name(call.func))
    if not dotted.startswith(("tensorflow.",) if graph_only else _LIBRARIES) or dotted.rsplit(".", 1)[-1] not in _SIZING:
        return None
    tail = dotted.rsplit(".", 1)[-1]
    shapes = [keyword.value for keyword in call.keywords if keyword.arg in _SHAPE_KEYWORDS]
    if tail == "reshape":
        shapes += call.args[1:2]
    elif tail in ("randn", "rand") and call.args:
        return _named(call.args[0], batch)  # the dimensions are the arguments themselves
    elif tail in ("ones", "zeros", "fill", "empty", "full") or dotted.startswith("tensorflow."):
        shapes += call.args[:1]
    for shape in shapes:
        first = shape.elts[0] if isinstance(shape, (ast.List, ast.Tuple)) and shape.elts else shape
        named = _named(first, batch)
        if named is not None:
            return named
    return None


def _named(node: ast.AST, name: str) -> Optional[ast.Name]:
    return node if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) else None


def _iterated_name(node: ast.expr) -> Optional[str]:
    """The dataset a ``for`` iterates: ``ds``, ``ds.take(n)``, ``enumerate(ds.take(n))``, ``tqdm(ds)``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS and node.args:
        node = node.args[0]
    return chain_root_name(node)
