"""Stand-in for ``npu_bridge.estimator.npu_unary_ops``: ``npu_unary_ops.gelu`` and its gradient.

The chip's Gelu is the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); the
stand-in computes the same formula with TensorFlow's ``gelu(approximate=True)``. Other ops of the
generated library are NPU kernels.
"""

import tensorflow as _tf
from tensorflow.python.ops import nn_ops as _nn_ops  # tf.nn.gelu: TF1 mode's tf.compat.v1.nn has none

from npu_migrate_nb.sim.adapter import GeneratedOps as _GeneratedOps


def _gelu(features, name=None):
    return _nn_ops.gelu(features, approximate=True, name=name)


def _gelu_grad(dy, x, y, name=None):
    with _tf.GradientTape() as tape:
        tape.watch(x)
        output = _nn_ops.gelu(x, approximate=True)
    return _tf.identity(tape.gradient(output, x, output_gradients=dy), name=name)


npu_unary_ops = _GeneratedOps("npu_bridge.estimator.npu_unary_ops.npu_unary_ops", gelu=_gelu, gelu_grad=_gelu_grad)
