"""Stand-in for ``npu_device.ops.train_ops``: ``npu.ops.gelu``.

Eagerly the real op is ``tf.nn.gelu`` (exact); in a graph it is the chip's FastGelu,
x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)), which the stand-in computes as written.
"""

import tensorflow as tf


def _fast_gelu(x):
    absolute = tf.abs(x)
    return x / (1.0 + tf.exp(-1.702 * absolute)) * tf.exp(0.851 * (x - absolute))


def gelu(x):
    if tf.executing_eagerly():
        return tf.nn.gelu(x)
    return _fast_gelu(tf.convert_to_tensor(x))
