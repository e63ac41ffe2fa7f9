"""Stand-in for ``npu_device.ops.train_ops``: ``npu.ops.gelu``.

Eagerly the real op is ``tf.nn.gelu`` (exact); in a graph it is the chip's FastGelu,
x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)), which the stand-in computes as written.
"""

import tensorflow as tf
from tensorflow.python.ops import nn_ops as _nn_ops  # tf.nn.gelu, also when tensorflow is tf.compat.v1


def _fast_gelu(x):
    absolute = tf.abs(x)
    return x / (1.0 + tf.exp(-1.702 * absolute)) * tf.exp(0.851 * (x - absolute))


def gelu(x):
    if tf.executing_eagerly():
        return _nn_ops.gelu(x)
    return _fast_gelu(tf.convert_to_tensor(x))
