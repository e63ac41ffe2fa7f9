"""Gradients aggregated twice: an explicit all-reduce, then an optimizer whose wrapper all-reduces again."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional, Set

from ..facts import CallSite, CellFacts, dotted_name, receiver_name
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule

OPTIMIZER_WRAPPERS = frozenset({
    "npu_bridge.npu_distributed_optimizer_wrapper",
    "npu_bridge.NPUDistributedOptimizer",
    "npu_device.distribute.npu_distributed_keras_optimizer_wrapper",
})
# The TF1 wrapper and NPUDistributedOptimizer all-reduce in compute_gradients (get_gradients,
# _compute_gradients): gradients a loop all-reduced and gave to their apply_gradients are reduced once.
APPLY_GRADIENTS_WRAPPERS = frozenset({"npu_device.distribute.npu_distributed_keras_optimizer_wrapper"})
ALL_REDUCES = frozenset({"npu_device.distribute.all_reduce", "npu_bridge.hccl_ops.allreduce"})


class DoubleAllreduce(Rule):
    """Each gradient must be aggregated once. An optimizer wrapped with
    ``npu_distributed_keras_optimizer_wrapper`` all-reduces what it applies: gradients all-reduced by
    hand before it are reduced again (with "mean", divided by the rank count twice: the steps shrink
    with the number of cards), and an optimizer wrapped twice (any of the adapter's wrappers) does the
    same. The TF1 wrappers all-reduce in ``compute_gradients``, not in ``apply_gradients``. A Keras model's own ``train_step`` applies
    its gradients through the optimizer given to ``compile``. Not fixed automatically: keep one of the two."""

    code = "double-allreduce"
    step = "allreduce"
    severity = "error"

    VALID = [
        # Once, by the wrapped optimizer given to compile; the model's train_step all-reduces nothing itself.
        "import npu_device as npu\n"
        "class VAE(tf.keras.Model):\n"
        "    def train_step(self, data):\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = self.loss_of(data)\n"
        "        grads = tape.gradient(loss, self.trainable_weights)\n"
        "        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))\n"
        "        return {'loss': loss}\n"
        "vae = VAE()\n"
        "vae.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()))\n",
        # Once, by hand, applied by a plain optimizer.
        "import npu_device as npu\noptimizer = tf.keras.optimizers.SGD(0.1)\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
        "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        # Once, by hand: the TF1 wrapper all-reduces in compute_gradients, which this loop never calls.
        "import npu_device as npu\nfrom npu_device.compat.v1.npu_init import *\n"
        "optimizer = npu_distributed_optimizer_wrapper(tf.compat.v1.train.GradientDescentOptimizer(0.1))\n"
        "grads = tape.gradient(loss, variables)\n"
        "grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
        "optimizer.apply_gradients(zip(grads, variables))\n",
    ]
    INVALID = [
        # The train_step all-reduces, and compile's optimizer is wrapped too.
        Example(
            "import npu_device as npu\n"
            "class VAE(tf.keras.Model):\n"
            "    def train_step(self, data):\n"
            "        with tf.GradientTape() as tape:\n"
            "            loss = self.loss_of(data)\n"
            "        grads = tape.gradient(loss, self.trainable_weights)\n"
            "        grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
            "        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))\n"
            "        return {'loss': loss}\n"
            "vae = VAE()\n"
            "vae.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()))\n"
        ),
        # A custom loop all-reduces, then applies with a wrapped optimizer.
        Example(
            "import npu_device as npu\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1))\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
            "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        ),
        # The optimizer wrapped twice.
        Example(
            "from npu_bridge.npu_init import *\n"
            "opt = npu_distributed_optimizer_wrapper(npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer()))\n"
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._twice(context))

    def _twice(self, context) -> Iterator[Finding]:
        wrapped = _wrapped_optimizer_names(context)
        compiled_wrapped = _classes_compiled_with_a_wrapper(context, wrapped)
        for cell, facts, site in context.facts.calls_to(*OPTIMIZER_WRAPPERS):
            inner = site.node.args[0] if site.node.args else None
            if isinstance(inner, ast.Call) and context.facts.resolve(dotted_name(inner.func)) in OPTIMIZER_WRAPPERS:
                yield self.finding(cell, facts, site.node, _(
                    "gradients are aggregated twice: this optimizer is wrapped twice for all-reduce; keep one wrapper"))
        for cell, facts, site in context.facts.calls("apply_gradients"):
            reduced = _reduced_by_hand(context, facts, site)
            if reduced is None:
                continue
            optimizer = receiver_name(site)
            if _is_wrapped_there(context, optimizer, cell, site) or (
                    optimizer == "self.optimizer" and _class_of(facts, site) in compiled_wrapped):
                yield self.finding(cell, facts, reduced.node, _(
                    "gradients are aggregated twice: they are all-reduced here, and {optimizer} is wrapped to "
                    "all-reduce what it applies; keep one of the two").format(optimizer=optimizer))


def _is_wrapped_there(context, name: Optional[str], cell: int, site: CallSite) -> bool:
    """Is ``name``, where ``site`` uses it, bound to an optimizer the adapter wraps?"""
    if name is None or "." in name:
        return False
    value = context.facts.bound_before(name, cell, site.node.lineno, site.function)
    if value is None and site.function is not None:  # a module-level optimizer the function uses
        value = context.facts.bound_before(name, cell, site.node.lineno, None)
    return isinstance(value, ast.Call) and context.facts.resolve(dotted_name(value.func)) in APPLY_GRADIENTS_WRAPPERS


def _wrapped_optimizer_names(context) -> Set[str]:
    names = set()
    for _cell, _facts, site in context.facts.calls_to(*APPLY_GRADIENTS_WRAPPERS):
        stmt = site.stmt
        if isinstance(stmt, ast.Assign) and stmt.value is site.node and len(stmt.targets) == 1:
            target = dotted_name(stmt.targets[0])
            if target:
                names.add(target)
    return names


def _classes_compiled_with_a_wrapper(context, wrapped: Set[str]) -> Set[str]:
    """Classes of the models whose compile is given a wrapped optimizer (``vae = VAE(...)``, then
    ``vae.compile(optimizer=npu...wrapper(...))``)."""
    classes = set()
    for _cell, _facts, site in context.facts.calls("compile"):
        given = site.argument(0, "optimizer")
        if given is None:
            continue
        is_wrapped = (isinstance(given, ast.Call) and context.facts.resolve(dotted_name(given.func)) in APPLY_GRADIENTS_WRAPPERS) \
            or (dotted_name(given) in wrapped)
        model = receiver_name(site)
        if not is_wrapped or model is None:
            continue
        for _c, _f, assignment in context.facts.assignments(model):
            value = assignment.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                classes.add(value.func.id)
    return classes


def _reduced_by_hand(context, facts: CellFacts, apply: CallSite) -> Optional[CallSite]:
    """The all-reduce whose result the gradients ``apply`` applies come from, in the same function."""
    given = apply.argument(0, "grads_and_vars")
    names = {node.id for node in ast.walk(given) if isinstance(node, ast.Name)} if given is not None else set()
    for site in facts.calls:
        if site.function != apply.function or site.node.lineno > apply.node.lineno:
            continue
        if context.facts.resolve(site.dotted) not in ALL_REDUCES:
            continue
        stmt = site.stmt
        targets = [node.id for target in getattr(stmt, "targets", []) for node in ast.walk(target)
                   if isinstance(node, ast.Name)]
        if set(targets) & names or (given is not None and any(node is site.node for node in ast.walk(given))):
            return site
    return None


def _class_of(facts: CellFacts, site: CallSite) -> Optional[str]:
    for name, cls in facts.classes.items():
        if cls.lineno <= site.node.lineno <= cls.end_lineno:
            return name
    return None
