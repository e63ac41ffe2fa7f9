"""A DTensor program: TensorFlow's own distribution, with variables laid out on a mesh of one
process's devices. The adapter's broadcast, all-reduce and shard take plain tensors, and DTensor
lays out only the ops it knows (the adapter's collectives are not among them: "does not implement
layout propagation"), so the three steps cannot be added to it as written. The steps are marked
unknown, nothing is inserted, and the finding says what to convert first."""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

from ..facts import CallSite, CellFacts
from ..findings import STEPS, Finding
from ..i18n import N_, _
from .base import Example, Rule

DTENSOR = "tensorflow.experimental.dtensor."
# What a DTensor program calls to lay its variables and data out (any one of them makes it one).
DTENSOR_CALLS = tuple(DTENSOR + name for name in (
    "create_mesh", "create_distributed_mesh", "Mesh", "Layout", "DVariable", "call_with_layout", "pack",
    "relayout", "copy_to_mesh", "initialize_accelerator_system",
))

DTENSOR_REASON = N_(
    "the notebook distributes with DTensor (variables laid out on a mesh of this process's devices); the "
    "adapter's broadcast, all-reduce and shard take plain tensors, and DTensor cannot lay out the adapter's "
    "operations"
)
DTENSOR_MESSAGE = N_(
    "{reason}: write the model on plain variables first (dtensor.DVariable -> tf.Variable, "
    "dtensor.call_with_layout(f, layout, ...) -> f(...), no mesh, no pack of the batches); one process "
    "drives one card, and the three steps then apply"
)


class DTensorProgram(Rule):
    code = "dtensor-program"
    step = None
    severity = "error"

    VALID = [
        # tf.experimental names other than DTensor's are no DTensor program.
        "import tensorflow as tf\n"
        "opt = tf.keras.optimizers.Adam()\n"
        "tf.experimental.numpy.experimental_enable_numpy_behavior()\n",
    ]
    INVALID = [
        # The core API's distribution guide: DVariables on a batch mesh of 8 virtual CPUs. Nothing is
        # inserted (an all-reduce of its gradients failed on every rank: DTensor cannot lay it out).
        Example(
            "import tensorflow as tf\n"
            "from tensorflow.experimental import dtensor\n"
            "mesh = dtensor.create_mesh([('batch', 8)], devices=[f'CPU:{i}' for i in range(8)])\n"
            "layout = dtensor.Layout([dtensor.UNSHARDED, dtensor.UNSHARDED], mesh)\n"
            "w = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=(784, 10)))\n"
            "optimizer = tf.keras.optimizers.SGD(0.1)\n"
            "for x, y in train_data:\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, w)))\n"
            "    grads = tape.gradient(loss, [w])\n"
            "    optimizer.apply_gradients(zip(grads, [w]))\n",
        ),
    ]

    def prepare(self, context) -> None:
        if first_dtensor_call(context) is not None:
            for step in STEPS:
                context.mark(step, "unknown", _(DTENSOR_REASON))

    def check(self, context) -> Iterable[Finding]:
        found = first_dtensor_call(context)
        if found is None:
            return []
        cell, facts, site = found
        return [self.finding(cell, facts, site.node, _(DTENSOR_MESSAGE).format(reason=_(DTENSOR_REASON)))]


def first_dtensor_call(context) -> Optional[Tuple[int, CellFacts, CallSite]]:
    return next(context.facts.calls_to(*DTENSOR_CALLS), None)
