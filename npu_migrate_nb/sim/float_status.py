"""The NPU's float status, modelled on the CPU, for the stand-ins of the loss-scale optimizers.

On an Ascend chip (saturation mode, the default) a float16 computation that overflows saturates
instead of giving inf, and sets the chip's float-status register; ``NPULossScaleOptimizer`` and
``npu.train.optimizer.NpuLossScaleOptimizer`` read it (``npu_get_float_status_v2``) once the
gradients are computed, clear it, and skip the update when it is set. The gradients themselves stay
finite, so the register is the only sign of the overflow, and it is this chip's own: a rank whose
backward pass overflowed sees it, the others do not, unless the status is summed across ranks.

The simulator computes in float32 and decides the status itself: this rank's step overflowed when
any gradient as this rank computed it, at the loss scale it was computed at and before any
cross-rank reduction, is not finite or exceeds float16's largest value (65504) in magnitude.
Where those values are: the gradient collectives of the stand-ins :func:`offer` what they are
about to reduce (this rank's own values) to an open :func:`capture`; the TF1 loss-scale optimizer
opens one around its inner ``compute_gradients`` and checks what that returned when nothing was
offered (the inner optimizer reduced nothing); the TF2 one gets this rank's unscaled gradients
and checks them times the loss scale.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterable, List, Optional

import tensorflow as tf

FLOAT16_MAX = 65504.0

_local = threading.local()


def _stack() -> List[list]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextlib.contextmanager
def capture():
    """Collect what the gradient collectives issued inside the block are given."""
    captured: list = []
    _stack().append(captured)
    try:
        yield captured
    finally:
        _stack().pop()


def offer(tensors: Iterable) -> None:
    """Called by a gradient collective with the values it is about to reduce."""
    stack = _stack()
    if stack:
        stack[-1].extend(t for t in tensors if t is not None)


def overflowed(tensors: Iterable, scale=None) -> tf.Tensor:
    """A scalar bool: some element of ``tensors`` (times ``scale``) is not finite or beyond float16."""
    flags = []
    for tensor in tensors:
        if tensor is None:
            continue
        values = tensor.values if isinstance(tensor, tf.IndexedSlices) else tensor
        values = tf.cast(values, tf.float32)
        if scale is not None:
            values = values * tf.cast(scale, tf.float32)
        # NaN compares false, so a NaN counts as an overflow, as inf does
        flags.append(tf.logical_not(tf.reduce_all(tf.abs(values) <= FLOAT16_MAX)))
    if not flags:
        return tf.constant(False)
    return tf.reduce_any(tf.stack(flags))


def status(tensors: Iterable, scale=None) -> tf.Tensor:
    """The float status as the NPU op gives it: a float32 tensor, nonzero when the step overflowed."""
    return tf.reshape(tf.cast(overflowed(tensors, scale), tf.float32), [1])


def record_skip(step, source: str) -> None:
    """Tell the run-time checks this rank skipped its update at ``step`` (probes are optional: the
    stand-ins also run outside simulated ranks)."""
    try:
        from npu_migrate_nb.sim import probes
    except ImportError:
        return
    probes.record_skipped_update(int(step), source)


def skip_recorder(step: Optional[tf.Tensor], source: str):
    """A function for the skipping branch of a ``tf.cond``: records the step, eagerly or in a graph."""

    def record(value):
        record_skip(value, source)
        return True

    def branch():
        value = tf.constant(-1, tf.int64) if step is None else tf.cast(step, tf.int64)
        if tf.executing_eagerly():
            record(int(value))
            return tf.no_op()
        return tf.group(tf.numpy_function(record, [value], tf.bool, stateful=True))

    return branch
