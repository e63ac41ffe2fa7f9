"""Where the things that would do a step come from: an optimizer, a ``model_fn``, an ``input_fn`` or a
dataset made by code the analyzer cannot see (an installed package, a file that is not there).

A missing-step rule that recognises no place to fix asks :func:`unseen_origin`; with a reason, the step
is ``unknown`` (with that reason) instead of ``missing``: the step may well be done there.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

from . import knowledge as K
from .facts import CallSite, CellFacts, dotted_name
from .i18n import _

if TYPE_CHECKING:
    from .analysis import Context

_HOPS = 4  # assignments followed back from a use to where its value is made


def unseen_origin(context: "Context", step: Optional[str]) -> Optional[str]:
    """Why the code that would do ``step`` cannot be seen, or None when it is all in view."""
    if not context.modules.unseen or step is None:
        return None
    for cell, facts, node in _subjects(context, step):
        reason = _unseen(context, cell, facts, node, _HOPS)
        if reason is not None:
            return reason
    return None


def _subjects(context: "Context", step: str) -> Iterator[Tuple[int, CellFacts, ast.expr]]:
    """The expressions whose code would hold ``step``: what an Estimator, compile, fit or train is given."""
    facts_model = context.facts
    if step in ("allreduce", "broadcast"):
        for cell, facts, site in facts_model.calls_to(*K.ESTIMATORS):
            yield from _given(cell, facts, site, (0, "model_fn"))
    if step == "allreduce":
        for cell, facts, site in facts_model.calls("compile"):
            yield from _given(cell, facts, site, (0, "optimizer"))
        for cell, facts, site in facts_model.calls("EstimatorSpec", "NPUEstimatorSpec"):
            # a model_fn's train_op made by a module it cannot see (BERT's optimization.create_optimizer)
            yield from _given(cell, facts, site, (3, "train_op"))
        for cell, facts, site in facts_model.calls("minimize", "apply_gradients"):
            if site.receiver is not None:
                yield cell, facts, site.receiver
    if step == "shard":
        for cell, facts, site in facts_model.calls("train"):
            yield from _given(cell, facts, site, (0, "input_fn"))
        for cell, facts, site in facts_model.calls_to(K.TRAIN_SPEC):
            yield from _given(cell, facts, site, (0, "input_fn"))
        for cell, facts, site in facts_model.keras_fits("fit"):
            yield from _given(cell, facts, site, (0, "x"))
    if step == "broadcast":
        for cell, facts, site in facts_model.keras_fits("fit", "train"):
            if site.receiver is not None and site.method != "search":  # a tuner: its models are its own
                yield cell, facts, site.receiver


def _given(cell: int, facts: CellFacts, site: CallSite, argument: Tuple[int, str]):
    value = site.argument(*argument)
    if value is not None:
        yield cell, facts, value


def _unseen(context: "Context", cell: int, facts: CellFacts, node: ast.AST, hops: int) -> Optional[str]:
    if isinstance(node, ast.Lambda):
        return _unseen(context, cell, facts, node.body, hops)
    if isinstance(node, ast.Call):
        root = node.func
        if isinstance(root, ast.Name) and root.id in ("partial", "functools.partial") and node.args:
            return _unseen(context, cell, facts, node.args[0], hops)
        return _unseen_name(context, cell, facts, dotted_name(root), hops)
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _unseen_name(context, cell, facts, dotted_name(node), hops)
    return None


def _unseen_name(context: "Context", cell: int, facts: CellFacts, dotted: Optional[str], hops: int) -> Optional[str]:
    if not dotted:
        return None
    head = dotted.split(".")[0]
    module = context.facts.aliases.get(head)
    if module is not None:
        why = _why_module_unseen(context, module)
        if why is not None:
            return _("{name} comes from {module}: {reason}").format(
                name=dotted, module=module.rsplit(".", 1)[0] if module != head else module, reason=why)
        return None
    if hops == 0:
        return None
    for _cell, other_facts, assignment in reversed(list(context.facts.assignments(head))):
        return _unseen(context, cell, other_facts, assignment.value, hops - 1)
    return None


def _why_module_unseen(context: "Context", module: str) -> Optional[str]:
    """The reason ``module`` (or the package it is in) cannot be seen, if it cannot."""
    unseen = context.modules.unseen
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        reason = unseen.get(".".join(parts[:end]))
        if reason is not None:
            return reason
    return None
