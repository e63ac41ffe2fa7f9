"""Horovod calls left in the script: Horovod does not run on Ascend; the adapter's APIs replace them."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, List, Optional

from .. import knowledge as K
from ..findings import NEEDS_NPU_BRIDGE, NEEDS_NPU_DEVICE, NEEDS_OS, Edit, Finding
from ..i18n import _
from .base import Example, Rule, remove_statement, replace, replace_with, single_target
from .tf2_broadcast_callback import broadcast_instead_of_callback


class HorovodLeftover(Rule):
    """Horovod does not run on Ascend (the collectives go through HCCL): ``hvd.init``,
    ``hvd.DistributedOptimizer``, ``hvd.broadcast_variables`` and the rest must become the adapter's
    calls. The fix replaces each call by its adapter equivalent, keeping what it computed (``op=hvd.Sum``
    stays a sum), and removes the Horovod imports once every call is replaced; a call with no
    equivalent is flagged to port by hand."""

    code = "horovod-leftover"
    step = None
    severity = "error"

    VALID = ["import tensorflow as tf\nx = tf.constant(1)\n"]
    INVALID = [
        # TF2 Keras: Horovod's broadcast callback gives way to the adapter's broadcast; the tape to all_reduce.
        Example(
            "import tensorflow as tf\n"
            "import horovod.tensorflow.keras as hvd\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.fit(ds, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])\n"
            "tape = hvd.DistributedGradientTape(tape)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit(ds, callbacks=[])\n",
        ),
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "import horovod.tensorflow as hvd\n"
            "hvd.init()\n"
            "opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size()))\n"
            "hooks = [hvd.BroadcastGlobalVariablesHook(0)]\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "import os\n"
            "opt = npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer(0.001 * int(os.getenv('RANK_SIZE', '1'))))\n"
            "hooks = [NPUBroadcastGlobalVariablesHook(0, int(os.getenv('RANK_ID', '0')))]\n",
        ),
        Example(
            "import tensorflow as tf\n"
            "import horovod.tensorflow as hvd\n"
            "hvd.broadcast_variables(model.variables, root_rank=0)\n"
            "grads = hvd.allreduce(grads, op=hvd.Sum)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "npu.distribute.broadcast(model.variables, root_rank=0)\n"
            "grads = npu.distribute.all_reduce(grads, reduction=\"sum\")\n",
        ),
        # op=hvd.Sum kept (the vendor's tool drops it). TF2: the wrapper's reduce_reduction.
        Example(
            "import tensorflow as tf\n"
            "import horovod.tensorflow.keras as hvd\n"
            "opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01), op=hvd.Sum)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "opt = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.01), "
            "reduce_reduction=\"sum\")\n",
        ),
        # TF1: the wrapper only averages (sum / N); the loss given to minimize N times larger makes it the sum.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "import horovod.tensorflow as hvd\n"
            "opt = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.01), op=hvd.Sum)\n"
            "# %%\n"
            "train_op = opt.minimize(loss_a + loss_b, global_step=step)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "import os\n"
            "opt = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.01))\n"
            "# %%\n"
            "train_op = opt.minimize((loss_a + loss_b) * int(os.getenv('RANK_SIZE', '1')), global_step=step)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if not context.facts.imports_module("horovod"):
            return []
        findings = list(self._calls(context))
        if findings and all(finding.edits for finding in findings):
            findings += list(self._imports(context))
        return findings

    def _calls(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.all_calls():
            name = context.facts.resolve(site.dotted)
            if not name.startswith("horovod."):
                continue
            if site.argument_of is not None and context.facts.resolve(site.argument_of.dotted).startswith("horovod."):
                continue  # fixed with the call around it
            edits = _replacement(context, cell, facts, site, name.split(".", 1)[1])
            what = f"hvd.{name.split('.', 1)[1]}"
            advice = _("replaced by the adapter's equivalent") if edits else _("no automatic replacement: port it by hand")
            kept = _sum_kept(context, facts, site, name)
            message = (
                _("Horovod call left in the script: {call} does not run on Ascend ({advice}; {kept})").format(
                    call=what, advice=advice, kept=kept)
                if kept
                else _("Horovod call left in the script: {call} does not run on Ascend ({advice})").format(
                    call=what, advice=advice)
            )
            yield self.finding(cell, facts, site.node, message, edits or ())

    def _imports(self, context) -> Iterator[Finding]:
        for cell, facts in context.facts.cells:
            for fact in facts.imports:
                if fact.module.startswith("horovod") and fact.function is None:
                    yield self.finding(
                        cell, facts, fact.stmt, _("Horovod import no longer used"),
                        [remove_statement(cell, facts, fact.stmt)], severity="info",
                    )


def _replacement(context, cell, facts, site, api: str) -> Optional[List[Edit]]:
    npu = context.npu
    segment = facts.segment
    first = site.node.args[0] if site.node.args else None
    if api == "init":
        if isinstance(site.stmt, ast.Expr) and site.stmt.value is site.node:
            return [remove_statement(cell, facts, site.stmt)]
        return None
    if api == "size":
        return [replace(cell, facts, site.node, K.RANK_SIZE_EXPR, [NEEDS_OS])]
    if api == "rank":
        return [replace(cell, facts, site.node, K.RANK_ID_EXPR, [NEEDS_OS])]
    if api == "local_rank":
        return [replace(cell, facts, site.node, "int(os.getenv('ASCEND_DEVICE_ID', '0'))", [NEEDS_OS])]
    if api == "DistributedOptimizer" and first is not None:
        return _distributed_optimizer(context, cell, facts, site, first)
    if api == "BroadcastGlobalVariablesHook":
        return [replace(cell, facts, site.node, K.BROADCAST_HOOK_EXPR, [NEEDS_NPU_BRIDGE, NEEDS_OS])]
    if api == "callbacks.BroadcastGlobalVariablesCallback":
        if context.tf1:
            return [replace(cell, facts, site.node, "NPUBroadcastGlobalVariablesCallback(0)", [NEEDS_NPU_BRIDGE])]
        return broadcast_instead_of_callback(context, cell, facts, site) or None
    if api == "DistributedGradientTape" and isinstance(first, ast.Name):
        # missing-allreduce puts npu.distribute.all_reduce after tape.gradient instead.
        if single_target(site.stmt) == first.id and site.stmt.value is site.node:
            return [remove_statement(cell, facts, site.stmt)]
        return [replace(cell, facts, site.node, first.id)]
    if api == "broadcast_variables" and first is not None and not context.tf1:
        args = ", ".join(segment(a) for a in site.node.args)
        keywords = ", ".join(f"{k.arg}={segment(k.value)}" for k in site.node.keywords if k.arg == "root_rank")
        code = f"{npu}.distribute.broadcast({', '.join(filter(None, [args, keywords]))})"
        return [replace(cell, facts, site.node, code, [NEEDS_NPU_DEVICE])]
    if api == "allreduce" and first is not None and not context.tf1:
        reduction = "sum" if sums(facts, site) else "mean"
        code = f'{npu}.distribute.all_reduce({segment(first)}, reduction="{reduction}")'
        return [replace(cell, facts, site.node, code, [NEEDS_NPU_DEVICE])]
    return None


def _sum_kept(context, facts, site, name: str) -> str:
    """What the fix does with ``op=hvd.Sum`` (said after the advice), or "" when there is none."""
    if not sums(facts, site) or name not in ("horovod.DistributedOptimizer", "horovod.DistributedGradientTape"):
        return ""
    if name == "horovod.DistributedGradientTape":
        return _('op=Sum kept: the all-reduce added after tape.gradient uses reduction="sum"')
    if not context.tf1:
        return _('op=Sum kept: reduce_reduction="sum"')
    return _("op=Sum kept: the TF1 wrapper only averages (sum / RANK_SIZE), so the loss given to minimize "
             "is multiplied by RANK_SIZE, which makes that average the sum Horovod took")


def sums(facts, site) -> bool:
    """Does this Horovod call reduce with a sum (``op=hvd.Sum``, the old ``average=False``)?"""
    op = site.keyword("op") or site.keyword("average")
    return op is not None and (facts.segment(op.value).endswith("Sum") or facts.segment(op.value) == "False")


def _distributed_optimizer(context, cell, facts, site, optimizer: ast.expr) -> Optional[List[Edit]]:
    if not context.tf1:
        reduction = ', reduce_reduction="sum"' if sums(facts, site) else ""
        wrapper = f"{context.npu}.distribute.npu_distributed_keras_optimizer_wrapper({{optimizer}}{reduction})"
        return [replace_with(cell, facts, site.node, wrapper, [NEEDS_NPU_DEVICE], optimizer=optimizer)]
    edits = [replace_with(
        cell, facts, site.node, "npu_distributed_optimizer_wrapper({optimizer})", [NEEDS_NPU_BRIDGE], optimizer=optimizer,
    )]
    if sums(facts, site):
        # The TF1 wrapper only averages (sum / N): a loss N times larger makes that mean the sum Horovod took.
        scaled = list(_losses_scaled_by_rank_size(context, site))
        if not scaled:
            return None
        edits += scaled
    return edits


def _losses_scaled_by_rank_size(context, site) -> Iterator[Edit]:
    """The loss given to ``opt.minimize``/``opt.compute_gradients``, ``opt`` the wrapped optimizer, times RANK_SIZE."""
    name = single_target(site.stmt) if site.stmt.value is site.node else None
    if name is None:
        return
    for cell, facts, call in context.facts.calls("minimize", "compute_gradients"):
        loss = call.argument(0, "loss")
        if call.receiver is None or facts.segment(call.receiver) != name or loss is None:
            continue
        if isinstance(loss, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            yield replace_with(cell, facts, loss, "{loss} * " + K.RANK_SIZE_EXPR, [NEEDS_OS], loss=loss)
        else:  # the rewriter drops parentheses around a hole: spell them out in the text
            yield replace(cell, facts, loss, f"({facts.segment(loss)}) * {K.RANK_SIZE_EXPR}", [NEEDS_OS])
