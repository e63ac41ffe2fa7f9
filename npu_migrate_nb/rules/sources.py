"""What ``tape.gradient`` differentiates: the model's variables (training: broadcast them, all-reduce
their gradients) or tensors (the gradient of an input: an adversarial example, a saliency map, a tour
of the tape): nothing to broadcast, and a gradient each rank takes of its own samples, not to be
averaged with the others'."""

from __future__ import annotations

import ast
from typing import Optional

from ..facts import CallSite, CellFacts, dotted_name, receiver_name
from ..names import function_locals


def makes_a_tensor(context, value: ast.expr) -> bool:
    """``tf.cast(...)``, ``tf.linspace(...)``, a number: a value, not variables (TensorFlow's functions
    that return tensors are lower-case; ``tf.Variable`` and Keras' classes are not). The real
    broadcast assigns into variables: given a tensor, it fails on the cards."""
    if isinstance(value, ast.Constant) or (isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant)):
        return True
    if not isinstance(value, ast.Call):
        return False
    name = context.facts.resolve(dotted_name(value.func))
    return name.startswith("tensorflow.") and name.rsplit(".", 1)[-1][:1].islower()


def not_variables(context, facts: CellFacts, site: CallSite, variables: ast.expr) -> bool:
    """Are the sources of ``tape.gradient`` tensors, not variables? The real broadcast assigns into
    variables: given a tensor it fails on the cards (AttributeError). Sources are tensors when the
    tape is told to watch them (variables are watched without asking), when each is a loop's item
    over data (``for images, labels in dataset``), or when every value bound to them is a tensor
    (``tf.constant(...)``)."""
    parts = variables.elts if isinstance(variables, (ast.List, ast.Tuple)) else [variables]
    names = [part.id if isinstance(part, ast.Name) else None for part in parts]
    if not names or None in names:
        return False
    watched = _watched_names(facts, site)
    return all(name in watched or _a_data_item(facts, site, name) or _bound_to_tensors(context, facts, site, name)
               for name in names)


def _watched_names(facts: CellFacts, site: CallSite) -> set:
    tape = receiver_name(site)
    return {argument.id for call in facts.calls_by_method.get("watch", ())
            if receiver_name(call) == tape and call.function == site.function
            for argument in call.node.args if isinstance(argument, ast.Name)}


def _a_data_item(facts: CellFacts, site: CallSite, name: str) -> bool:
    """``name`` is a target of a ``for`` around the gradient that iterates something other than a
    literal collection (a dataset, a batch generator)."""
    for loop in facts.nodes(ast.For):
        if (loop.lineno <= site.node.lineno <= loop.end_lineno
                and target_position(loop.target, name) is not None
                and not isinstance(loop.iter, (ast.Tuple, ast.List))):
            return True
    return False


def _bound_to_tensors(context, facts: CellFacts, site: CallSite, name: str) -> bool:
    values = [_own_value(a) for a in facts.assignments.get(name, ()) if a.function == site.function]
    if not values and site.function is not None:
        values = [_own_value(a) for _unused, _unused, a in context.facts.assignments(name) if a.function is None]
    return bool(values) and all(value is not None and makes_a_tensor(context, value) for value in values)


def _own_value(assignment) -> Optional[ast.expr]:
    """The value bound to the assignment's name: its element of ``c1, c2 = tf.constant(5.), tf.constant(3.)``;
    None when a tuple target's part is not known (``a, b = f()``)."""
    if not assignment.tuple_target:
        return assignment.value
    targets = assignment.stmt.targets if isinstance(assignment.stmt, ast.Assign) else [assignment.stmt.target]
    value = assignment.value
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts):
            position = target_position(target, assignment.target)
            if position is not None and position >= 0:
                return value.elts[position]
    return None


def target_position(target: ast.expr, name: str) -> Optional[int]:
    """-1 when the loop target is ``name`` itself, its index in a tuple target, else None."""
    if isinstance(target, ast.Name):
        return -1 if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)):
        for index, element in enumerate(target.elts):
            if isinstance(element, ast.Name) and element.id == name:
                return index
    return None


def applied_by_the_compiled_optimizer(facts: CellFacts, site: CallSite) -> bool:
    """Is this gradient taken in a Keras model's own ``train_step`` and applied by ``self.optimizer``,
    the optimizer ``compile`` was given? ``fit`` runs that step: wrapping the compiled optimizer
    aggregates these gradients, and an all-reduce here as well would aggregate them twice."""
    if site.function != "train_step":
        return False
    return any(call.function == "train_step" and call.dotted in ("self.optimizer.apply_gradients", "self.optimizer.minimize")
               for method in ("apply_gradients", "minimize") for call in facts.calls_by_method.get(method, ()))


_SHOWN_BY = frozenset({"print", "display", "repr", "str", "type", "len"})


def only_shown(context, cell: int, site: CallSite) -> bool:
    """``grads = tape.gradient(z, [w1, w2])`` at a cell's top level whose result is only looked at
    (a cell's last expression, ``print(grads)``) and never applied: a tour of the tape, not a training
    step: nothing to broadcast or aggregate (a demo on two scalar variables failed on the ranks)."""
    sources = site.argument(1, "sources")
    parts = sources.elts if isinstance(sources, (ast.List, ast.Tuple)) else [sources]
    if site.function is not None or not all(isinstance(part, ast.Name) for part in parts):
        return False  # a model's variables (``model.trainable_variables``): training, even if cut short here
    if isinstance(site.stmt, ast.Expr) and (site.stmt.value is site.node or (
            isinstance(site.stmt.value, (ast.Tuple, ast.List)) and any(e is site.node for e in site.stmt.value.elts))):
        return True  # ``tape.gradient(z, [w1, w2])`` alone or ``z, tape.gradient(z, [x])``: the cell shows it
    if not isinstance(site.stmt, ast.Assign) or site.stmt.value is not site.node:
        return False
    names = [target.id for target in site.stmt.targets if isinstance(target, ast.Name)]
    if len(names) != len(site.stmt.targets):
        return False
    start = (cell, site.stmt.end_lineno)
    for name in names:
        rebound = min(((index, a.stmt.lineno) for index, _facts, a in context.facts.assignments(name)
                       if a.function is None and (index, a.stmt.lineno) > start), default=None)
        for index, facts in context.facts.cells_mentioning(name):
            for load, ancestors in facts.loads(name):
                if not start < (index, load.lineno) or (rebound is not None and (index, load.lineno) >= rebound):
                    continue  # before, or a later value of the name's
                if _binds_locally(ancestors, name):
                    continue  # a function's own variable of that name
                if not _shown(load, ancestors):
                    return False
    return True


def _binds_locally(ancestors, name: str) -> bool:
    functions = [node for node in ancestors if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    return bool(functions) and name in function_locals(functions[-1])


def _shown(load: ast.Name, ancestors) -> bool:
    for parent in reversed(ancestors):
        if isinstance(parent, (ast.Tuple, ast.List)):
            continue
        if isinstance(parent, ast.Expr):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _SHOWN_BY:
            return True
        if isinstance(parent, ast.Subscript) and parent.value is not None:
            continue
        return False
    return False
