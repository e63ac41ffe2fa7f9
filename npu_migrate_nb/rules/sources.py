"""What ``tape.gradient`` differentiates: the model's variables (training: broadcast them, all-reduce
their gradients) or tensors (the gradient of an input: an adversarial example, a saliency map, a tour
of the tape): nothing to broadcast, and a gradient each rank takes of its own samples, not to be
averaged with the others'."""

from __future__ import annotations

import ast
from typing import Optional

from ..facts import CallSite, CellFacts, dotted_name, receiver_name


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
    values = [a.value for a in facts.assignments.get(name, ()) if a.function == site.function]
    if not values and site.function is not None:
        values = [a.value for _unused, _unused, a in context.facts.assignments(name) if a.function is None]
    return bool(values) and all(makes_a_tensor(context, value) for value in values)


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
