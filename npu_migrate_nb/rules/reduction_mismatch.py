"""An all-reduce whose reduction breaks the single-card math (mean of a loss already divided by
the global batch, or sum of a per-rank mean loss)."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import CallSite, receiver_name
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, replace, single_target
from .reduction import SUM, reduction_for, reduction_from_the_loss


class ReductionMismatch(Rule):
    code = "reduction-mismatch"
    step = "allreduce"
    severity = "error"

    VALID = [
        # The wrapper's mean is right for a per-rank mean loss, and for Keras fit (no apply_gradients here).
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "opt = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1))\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_mean(model(x))\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "opt.apply_gradients(zip(grads, model.trainable_variables))\n",
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD()), loss='mse')\n"
        "model.fit(ds)\n",
        "import tensorflow as tf\nimport npu_device as npu\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_mean(model(x))\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "grads = npu.distribute.all_reduce(grads, reduction='mean')\n",
    ]
    INVALID = [
        # The seed: the loss is divided by the global batch size, so the original SUM must be kept.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_sum(per_example) * (1.0 / batch_size)\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "grads = npu.distribute.all_reduce(grads)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_sum(per_example) * (1.0 / batch_size)\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "grads = npu.distribute.all_reduce(grads, reduction=\"sum\")\n",
        ),
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_mean(model(x))\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "grads = npu.distribute.all_reduce(grads, reduction='sum')\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_mean(model(x))\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "grads = npu.distribute.all_reduce(grads, reduction=\"mean\")\n",
        ),
        # What the vendor's TF2 tool leaves: the optimizer wrapped (a mean) in a loop whose loss is
        # already divided by the global batch: once the data is sharded, each update is 1/N too small.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1))\n"
            "# %%\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_sum(per_example) / GLOBAL_BATCH\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1), reduce_reduction=\"sum\")\n"
            "# %%\n"
            "with tf.GradientTape() as tape:\n"
            "    loss = tf.reduce_sum(per_example) / GLOBAL_BATCH\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n"
            "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._all_reduce_findings(context)) + list(self._wrapper_findings(context))

    def _all_reduce_findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to("npu_device.distribute.all_reduce"):
            gradient = _gradient_of(facts, site, site.argument(0, "values"))
            if gradient is None:
                continue
            yield from self._mismatch(context, cell, facts, site, facts, gradient, "all_reduce", ALL_REDUCE)

    def _wrapper_findings(self, context) -> Iterator[Finding]:
        """The optimizer wrapper all-reduces with ``reduce_reduction`` ("mean" by default) in
        ``apply_gradients``: in a custom loop, the gradients it gets decide which reduction is right."""
        for cell, facts, site in context.facts.calls_to(WRAPPER.qualified):
            for g_facts, gradient in gradients_applied_by(context, _names_of_wrapped(site), after=(cell, site.node.lineno)):
                yield from self._mismatch(context, cell, facts, site, g_facts, gradient,
                                          "npu_distributed_keras_optimizer_wrapper", WRAPPER)
                break

    def _mismatch(self, context, cell, facts, site, g_facts, gradient, what, api) -> Iterator[Finding]:
        given = _given_reduction(site, api)
        if context.options.reduction is None and given == SUM and reduction_from_the_loss(context, g_facts, gradient) is None:
            return  # a sum chosen on purpose (Horovod's op=Sum kept) with nothing in the loss against it
        wanted, reason = reduction_for(context, g_facts, gradient)
        if given is None or given == wanted:
            return
        keyword = site.keyword(api.keyword)
        yield self.finding(
            cell, facts, keyword.value if keyword is not None else site.node,
            _('{api} uses "{given}" but {reason}: "{wanted}" keeps the single-card math').format(
                api=what, given=given, reason=reason, wanted=wanted),
            [_set_reduction(cell, facts, site, wanted, api)],
        )


class _Api:
    """Where an API takes its reduction: ``fn(first, <reduction>, ...)``."""

    def __init__(self, qualified: str, first: str, keyword: str):
        self.qualified, self.first, self.keyword = qualified, first, keyword


ALL_REDUCE = _Api("npu_device.distribute.all_reduce", "values", "reduction")
WRAPPER = _Api("npu_device.distribute.npu_distributed_keras_optimizer_wrapper", "optimizer", "reduce_reduction")


def _given_reduction(site: CallSite, api: _Api) -> Optional[str]:
    value = site.argument(1, api.keyword)
    if value is None:
        return "mean"  # both APIs' default
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def _gradient_of(facts, site: CallSite, values) -> Optional[CallSite]:
    """The tape.gradient call whose result ``values`` (an argument of ``site``) is."""
    if isinstance(values, ast.Call):
        return next((s for s in facts.calls if s.node is values and s.method == "gradient"), None)
    if isinstance(values, ast.Name):
        for assignment in reversed(facts.assignments.get(values.id, [])):
            if assignment.function == site.function and assignment.stmt.lineno < site.node.lineno:
                value = assignment.value
                if isinstance(value, ast.Call):
                    return next((s for s in facts.calls if s.node is value and s.method == "gradient"), None)
                return None
    return None


def _names_of_wrapped(site: CallSite) -> set:
    """The names the wrapped optimizer goes by: the wrapper patches its argument in place and
    returns it, so ``opt = wrapper(opt)``, ``o2 = wrapper(opt)`` and a bare ``wrapper(opt)`` all count."""
    names = set()
    optimizer = site.argument(0, WRAPPER.first)
    if isinstance(optimizer, ast.Name):
        names.add(optimizer.id)
    target = single_target(site.stmt)
    if target is not None and getattr(site.stmt, "value", None) is site.node:
        names.add(target)
    return names


def gradients_of_wrapped_optimizers(context) -> set:
    """The ids of the tape.gradient calls whose result a wrapped optimizer applies: the wrapper
    all-reduces them in ``apply_gradients``, so an all_reduce as well would aggregate them twice."""
    found = set()
    for cell, _facts, site in context.facts.calls_to(WRAPPER.qualified):
        for _g_facts, gradient in gradients_applied_by(context, _names_of_wrapped(site), after=(cell, site.node.lineno)):
            found.add(id(gradient.node))
    return found


def wrapper_reduction_for(context, names: set) -> Optional[str]:
    """The reduction a wrapper of the optimizer these names hold needs, when a custom loop applies
    gradients with it (the loss decides, as for all_reduce); None when none does."""
    for g_facts, gradient in gradients_applied_by(context, names):
        return reduction_for(context, g_facts, gradient)[0]
    return None


def gradients_applied_by(context, names: set, after: Optional[tuple] = None, where=None) -> Iterator:
    """(facts, tape.gradient call) for each ``<name>.apply_gradients(zip(grads, ...))`` of these names;
    ``after``: (cell, line) of the wrapper, so that an optimizer the name held before it is not judged
    (a later cell that rebinds ``opt`` to a new wrapper, found by hypothesis)."""
    for cell, facts, apply in context.facts.calls("apply_gradients"):
        if receiver_name(apply) not in names:
            continue
        if after is not None and (cell, apply.node.lineno) < after:
            continue
        if where is not None and not where(cell, apply):
            continue  # the caller's test of this apply (the binding its name stands for there)
        pairs = apply.argument(0, "grads_and_vars")
        if isinstance(pairs, ast.Call) and isinstance(pairs.func, ast.Name) and pairs.func.id == "zip" and pairs.args:
            gradient = _gradient_of(facts, apply, pairs.args[0])
            if gradient is not None:
                yield facts, gradient


def _set_reduction(cell, facts, site: CallSite, reduction: str, api: _Api):
    args = [facts.segment(arg) for arg in site.node.args[:1]]
    keywords = [
        f"{k.arg}={facts.segment(k.value)}" for k in site.node.keywords if k.arg not in (api.keyword, api.first)
    ]
    first = site.argument(0, api.first)
    if not args and first is not None:
        args = [facts.segment(first)]
    parts = args + [f'{api.keyword}="{reduction}"'] + [facts.segment(x) for x in site.node.args[2:]] + keywords
    callee = facts.segment(site.node.func)
    return replace(cell, facts, site.node, f"{callee}({', '.join(parts)})")
