"""Does a dataset reach the training? Guides build small datasets only to show an API (a ``tf.function``
iterating one, ``next()`` on its iterator, a graph's size): sharding those changes what the cell prints
and can leave a rank too few elements (``next()`` past the end of its shard). A dataset is known not to
reach the training only when every use of it is understood and none of them trains; anything else
(``fit``, ``strategy.experimental_distribute_dataset``, a method of an object) counts as training."""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Set, Tuple

from ..facts import CallSite, dotted_name, once_per_object
from .base import TRAINING_CALLS, single_target

_DEPTH = 4  # names and functions followed, as in broadcast's _top_level_call
_SHOWING = ("print", "tf.print", "len", "repr", "str", "type", "display")
_DERIVING = ("take", "skip", "batch", "map", "filter", "prefetch", "cache", "repeat", "shuffle", "enumerate",
             "as_numpy_iterator", "unbatch", "padded_batch")
_LOOKING = ("element_spec", "cardinality", "output_shapes", "output_types")


def feeds_no_training(context, source: CallSite) -> bool:
    """Is the pipeline made at ``source`` used only where nothing trains?"""
    top = source.chain()[-1]
    if top.argument_of is not None:
        return _call_trains_nothing(context, top.argument_of.node, _DEPTH)
    variable = single_target(top.stmt) if top.node is getattr(top.stmt, "value", None) else None
    if variable is None or source.function is not None:
        return False  # a function's pipeline goes where the function returns it: not followed
    return _name_trains_nothing(context, variable, _DEPTH)


def binding_trains_nothing(context, cell: int, stmt: ast.stmt) -> bool:
    """Is what the top-level ``name = ...`` ``stmt`` of ``cell`` binds used only where nothing trains,
    until the notebook binds the name again? (A guide shows its pipeline at a batch of 5, then makes it
    again, at the training's batch, under the same name; or never reads it.) A function's reads count
    wherever the function is."""
    name = single_target(stmt) if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if name is None:
        return False
    start = (cell, stmt.end_lineno)
    end = min(((c, a.stmt.lineno) for c, _facts, a in context.facts.assignments(name)
               if a.function is None and (c, a.stmt.lineno) > start), default=None)
    uses = [(node, parents) for node, parents, c in _top_level_uses(context, name, with_cells=True)
            if _in_a_function(parents) or start < (c, node.lineno) and (end is None or (c, node.lineno) < end)]
    return all(_use_trains_nothing(context, node, parents, _DEPTH) for node, parents in uses)


def _in_a_function(parents: List[ast.AST]) -> bool:
    return any(isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for parent in parents)


def _name_trains_nothing(context, name: str, depth: int, element: bool = False) -> bool:
    if depth == 0:
        return False
    uses = list(_top_level_uses(context, name))
    return bool(uses) and all(_use_trains_nothing(context, node, parents, depth, element) for node, parents in uses)


def _use_trains_nothing(context, node: ast.AST, parents: List[ast.AST], depth: int, element: bool = False) -> bool:
    """``element``: ``node`` is one element of the dataset (``next(iter(ds))``), which trains only given to a
    training method or to the notebook's functions that train, not to a layer called on it."""
    parent = parents[-1] if parents else None
    if isinstance(parent, ast.Expr):
        return True  # shown as the cell's value
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return _use_trains_nothing(context, parent, parents[:-1], depth, element)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in _LOOKING:
            return True
        call = parents[-2] if len(parents) > 1 else None
        if parent.attr in _DERIVING and isinstance(call, ast.Call) and call.func is parent:
            return _use_trains_nothing(context, call, parents[:-2], depth, element)
        return False
    if isinstance(parent, ast.For) and parent.iter is node:
        return not _trains(context, parent, depth)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        target = single_target(parent)
        return target is not None and _name_trains_nothing(context, target, depth - 1, element)
    if isinstance(parent, ast.Call) and node in parent.args:
        callee = dotted_name(parent.func) or ""
        if callee in ("iter", "list", "next"):
            return _use_trains_nothing(context, parent, parents[:-1], depth, element or callee == "next")
        if element and context.facts.function(callee) is None:
            return callee.rsplit(".", 1)[-1] not in TRAINING_CALLS
        return _call_trains_nothing(context, parent, depth)
    return False


def _call_trains_nothing(context, call: ast.Call, depth: int) -> bool:
    """``show(ds)``, ``measure(step, ds)``: a call that prints, or of notebook functions that do not
    train (nor do the functions passed to them), and that give nothing back."""
    callee = dotted_name(call.func) or ""
    if callee in _SHOWING:
        return True
    found = context.facts.function(callee)
    if found is None or _passes_on(found[2]) or _trains(context, found[2], depth):
        return False
    passed = [arg.id for arg in call.args if isinstance(arg, ast.Name) and context.facts.function(arg.id)]
    return not any(_trains(context, context.facts.function(name)[2], depth) for name in passed)


def _trains(context, root: ast.AST, depth: int, seen: Optional[Set[str]] = None) -> bool:
    """Does ``root`` (a loop, a function) take a training step, itself or through the notebook's
    functions it calls or passes on? Unknown calls named like training (``train``) count."""
    seen = set() if seen is None else seen
    for calls_a_trainer, names in _calls_under(root):
        if calls_a_trainer:
            return True
        for name in names:
            found = context.facts.function(name)
            if found is None:
                if name in TRAINING_CALLS and name == names[0]:
                    return True
                continue
            if name in seen:
                continue
            seen.add(name)
            if depth == 0 or _trains(context, found[2], depth - 1, seen):
                return True
    return False


@once_per_object
def _calls_under(root: ast.AST) -> List[Tuple[bool, List[str]]]:
    """For each call under ``root`` (``ast.walk``'s order): whether it is a method named like training,
    and the names it calls and is given."""
    found = []
    for node in ast.walk(root):
        if isinstance(node, ast.Call):
            names = [node.func.id] if isinstance(node.func, ast.Name) else []
            names += [arg.id for arg in node.args if isinstance(arg, ast.Name)]
            found.append((isinstance(node.func, ast.Attribute) and node.func.attr in TRAINING_CALLS, names))
    return found


def _passes_on(function: ast.AST) -> bool:
    """Could what the function is given leave it (returned, yielded, bound to a global)?"""
    return any(isinstance(node, (ast.Return, ast.Yield)) and node.value is not None
               or isinstance(node, (ast.Global, ast.Nonlocal)) for node in ast.walk(function))


def _top_level_uses(context, name: str, with_cells: bool = False) -> Iterator[tuple]:
    """Reads of the module-level ``name``, with their parents (and cells), skipping functions that bind
    a name of their own so called (a parameter ``iterator`` is not the cell's ``iterator``)."""
    for cell, facts in context.facts.cells_mentioning(name):
        for node, parents in facts.loads(name):
            if not any(isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                       and _binds(parent, name) for parent in parents):
                yield (node, list(parents), cell) if with_cells else (node, list(parents))


def _binds(function: ast.AST, name: str) -> bool:
    return name in _bound_in(function)


@once_per_object
def _bound_in(function: ast.AST) -> frozenset:
    """The names a function binds: its parameters and what it assigns."""
    arguments = function.args
    params = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    params += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return frozenset([param.arg for param in params] + [
        node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)])
