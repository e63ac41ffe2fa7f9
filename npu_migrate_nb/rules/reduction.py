"""Which all-reduce keeps the single-card math for a custom loop: "sum" or "mean", and why.

With the global batch B split over N ranks, a loss already divided by the GLOBAL batch
(``reduce_sum(...) / B``, ``compute_average_loss(..., global_batch_size=B)``, a strategy reducing
with ``ReduceOp.SUM``) gives per-rank gradients that add up to the single-card gradient: "sum".
A per-rank mean loss (``reduce_mean``, a Keras loss with its default reduction) needs "mean".
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Optional, Tuple

from ..facts import CallSite, CellFacts
from ..i18n import _

if TYPE_CHECKING:
    from ..analysis import Context

SUM, MEAN = "sum", "mean"


def reduction_for(context: "Context", facts: CellFacts, gradient: CallSite) -> Tuple[str, str]:
    """(reduction, reason) for the gradients of ``tape.gradient(loss, ...)``."""
    if context.options.reduction is not None:
        return context.options.reduction, _("{reduction} was chosen with --reduction").format(
            reduction=context.options.reduction)
    # The loss first: it is what says the single-card math, and once the fix has removed Horovod's
    # tape only the loss is left, so a second analysis must come to the same reduction.
    horovod = _horovod_tape_reduction(context)
    from_the_loss = reduction_from_the_loss(context, facts, gradient)
    if from_the_loss is not None:
        if horovod is not None and horovod[0] != from_the_loss[0]:
            return from_the_loss[0], _("{loss_reason}; {horovod_reason}, which changed the single-card math "
                                       "(a learning rate scaled for it needs scaling back)").format(
                loss_reason=from_the_loss[1], horovod_reason=horovod[1])
        return from_the_loss
    return horovod or (MEAN, _("the loss is a per-rank mean (no division by the global batch size was found)"))


def reduction_from_the_loss(context: "Context", facts: CellFacts, gradient: CallSite) -> Optional[Tuple[str, str]]:
    """(reduction, reason) when the loss (or the script's own ReduceOp) says which; None when nothing does."""
    loss = gradient.argument(0, "target")
    expression = _definition(facts, gradient, loss)
    verdict = _classify(context, facts, expression, depth=0) if expression is not None else None
    if verdict is not None:
        return verdict
    if context.facts.uses_name("ReduceOp") and _script_reduces_with_sum(context):
        return SUM, _("the script already reduces with ReduceOp.SUM")
    return None


def _horovod_tape_reduction(context: "Context") -> Optional[Tuple[str, str]]:
    """Horovod says how it reduces (``op=hvd.Sum``, else an average): when the loss does not say, the
    all-reduce that replaces its DistributedGradientTape keeps that."""
    from .horovod_leftover import sums

    for _cell, facts, site in context.facts.calls("DistributedGradientTape"):
        if context.facts.resolve(site.dotted).startswith("horovod."):
            if sums(facts, site):
                return SUM, _("Horovod's DistributedGradientTape summed (op=Sum)")
            return MEAN, _("Horovod's DistributedGradientTape averaged")
    return None


def _script_reduces_with_sum(context: "Context") -> bool:
    for _unused, _unused, site in context.facts.all_calls(mentioning="ReduceOp"):
        for arg in list(site.node.args) + [keyword.value for keyword in site.node.keywords]:
            if isinstance(arg, ast.Attribute) and arg.attr == "SUM" and _attr_chain_has(arg, "ReduceOp"):
                return True
    return False


def _attr_chain_has(node: ast.AST, name: str) -> bool:
    while isinstance(node, ast.Attribute):
        if node.attr == name:
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id == name


def _definition(facts: CellFacts, site: CallSite, loss: Optional[ast.expr]) -> Optional[ast.expr]:
    """The expression that last defined ``loss`` before the gradient call, in the same scope."""
    if loss is None:
        return None
    if not isinstance(loss, ast.Name):
        return loss
    before = [
        assignment
        for assignment in facts.assignments.get(loss.id, ())
        if assignment.function == site.function and assignment.stmt.lineno <= site.node.lineno
    ]
    return before[-1].value if before else None


def _classify(context: "Context", facts: CellFacts, expression: ast.AST, depth: int) -> Optional[Tuple[str, str]]:
    for node in ast.walk(expression):
        if isinstance(node, ast.Call):
            name = context.facts.resolve(_callee(node)).rsplit(".", 1)[-1]
            if name == "compute_average_loss":
                if any(keyword.arg == "global_batch_size" for keyword in node.keywords) or len(node.args) > 2:
                    return SUM, _("the loss is divided by the global batch size (compute_average_loss)")
                return MEAN, _("compute_average_loss without global_batch_size averages per rank")
            if name == "reduce_mean":
                return MEAN, _("the loss is a per-rank mean (reduce_mean)")
        if isinstance(node, ast.BinOp) and _sum_divided_by_batch(node, context):
            return SUM, _("the loss is a sum divided by the global batch size")
    if depth == 0:
        return _classify_helper(context, expression)
    return None


def _sum_divided_by_batch(node: ast.BinOp, context: "Context") -> bool:
    """``reduce_sum(x) / B`` or ``reduce_sum(x) * (1.0 / B)``, B not the per-rank batch."""
    if isinstance(node.op, ast.Div):
        left, divisor = node.left, node.right
    elif isinstance(node.op, ast.Mult) and isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Div):
        left, divisor = node.left, node.right.right
    else:
        return False
    if not _is_a_sum(left, context):
        return False
    return not _is_per_rank_count(divisor, context)


def _is_a_sum(node: ast.AST, context: "Context") -> bool:
    """``reduce_sum(...)``, or a Keras loss object built with ``reduction=...SUM``, called."""
    if not isinstance(node, ast.Call):
        return False
    if context.facts.resolve(_callee(node)).endswith("reduce_sum"):
        return True
    if isinstance(node.func, ast.Name):
        for _unused, _unused, assignment in context.facts.assignments(node.func.id):
            value = assignment.value
            if isinstance(value, ast.Call) and any(
                keyword.arg == "reduction" and _names_sum(keyword.value) for keyword in value.keywords
            ):
                return True
    return False


def _names_sum(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ("sum", "SUM")
    return isinstance(node, ast.Attribute) and node.attr == "SUM"


_PER_RANK_CALLS = ("shape", "size", "len", "reduce_sum", "reduce_mean", "count_nonzero", "cast_to_floatx")


def _is_per_rank_count(node: ast.AST, context: "Context") -> bool:
    """A divisor counted from this rank's own data (its batch's shape, a mask's sum) makes a mean."""
    for child in ast.walk(node):
        if isinstance(child, ast.Subscript):
            return True
        if isinstance(child, ast.Call) and context.facts.resolve(_callee(child)).rsplit(".", 1)[-1] in _PER_RANK_CALLS:
            return True
        if isinstance(child, ast.Name) and child.id in ("rank_batch_size", "local_batch_size", "per_replica_batch_size"):
            return True
    return False


def _classify_helper(context: "Context", expression: ast.AST) -> Optional[Tuple[str, str]]:
    """The loss comes from a helper function: classify what the helper returns."""
    if not isinstance(expression, ast.Call) or not isinstance(expression.func, ast.Name):
        return None
    found = context.facts.function(expression.func.id)
    if found is None:
        return None
    _unused, helper_facts, function = found
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            verdict = _classify(context, helper_facts, node.value, depth=1)
            if verdict is None and isinstance(node.value, ast.Name):
                values = [a.value for a in helper_facts.assignments.get(node.value.id, ()) if a.function == function.name]
                verdict = _classify(context, helper_facts, values[-1], depth=1) if values else None
            if verdict is not None:
                return verdict
    return None


def _callee(node: ast.Call) -> str:
    from ..facts import dotted_name

    return dotted_name(node.func) or ""
