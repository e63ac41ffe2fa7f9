"""An all-reduce whose reduction breaks the single-card math (mean of a loss already divided by
the global batch, or sum of a per-rank mean loss)."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import CallSite
from ..findings import Finding
from .base import Example, Rule, replace
from .reduction import reduction_for


class ReductionMismatch(Rule):
    code = "reduction-mismatch"
    step = "allreduce"
    severity = "error"

    VALID = [
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
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to("npu_device.distribute.all_reduce"):
            gradient = _gradient_reduced(facts, site)
            if gradient is None:
                continue
            wanted, reason = reduction_for(context, facts, gradient)
            given = _given_reduction(site)
            if given is None or given == wanted:
                continue
            keyword = site.keyword("reduction")
            yield self.finding(
                cell, facts, keyword.value if keyword is not None else site.node,
                f'all_reduce uses "{given}" but {reason}: "{wanted}" keeps the single-card math',
                [_set_reduction(cell, facts, site, wanted)],
            )


def _given_reduction(site: CallSite) -> Optional[str]:
    value = site.argument(1, "reduction")
    if value is None:
        return "mean"  # the API's default
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def _gradient_reduced(facts, site: CallSite) -> Optional[CallSite]:
    """The tape.gradient call whose result this all_reduce reduces."""
    values = site.argument(0, "values")
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


def _set_reduction(cell, facts, site: CallSite, reduction: str):
    args = [facts.segment(arg) for arg in site.node.args[:1]]
    keywords = [
        f"{k.arg}={facts.segment(k.value)}" for k in site.node.keywords if k.arg not in ("reduction", "values")
    ]
    values = site.argument(0, "values")
    if not args and values is not None:
        args = [facts.segment(values)]
    parts = args + [f'reduction="{reduction}"'] + [a for a in (facts.segment(x) for x in site.node.args[2:])] + keywords
    callee = facts.segment(site.node.func)
    return replace(cell, facts, site.node, f"{callee}({', '.join(parts)})")
