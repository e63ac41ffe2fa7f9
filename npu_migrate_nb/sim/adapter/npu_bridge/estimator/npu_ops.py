"""Stand-in for ``npu_bridge.estimator.npu_ops``: system init/shutdown and the NPU dropout.

On a chip ``initialize_system``/``shutdown_system`` start and stop the device; here they
initialise the MPI-backed collectives and are otherwise no-ops. ``dropout`` keeps each element
with probability ``keep_prob`` and scales the kept ones by ``1 / keep_prob``, as the chip's
``DropOutGenMask``/``DropOutDoMask`` pair does, with TensorFlow's CPU dropout (the random draws
differ); like the real op it refuses eager execution and returns ``x`` itself for a float
``keep_prob`` of 1.0. Any other op of the library is an NPU kernel: calling it says so.
"""

import numbers

import tensorflow as tf

from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim.adapter import GeneratedOps as _GeneratedOps

gen_npu_ops = _GeneratedOps("npu_bridge.estimator.npu_ops.gen_npu_ops")


def NPUInit(name=None):
    return initialize_system(name)


def NPUShutdown(name=None):
    return shutdown_system(name)


def initialize_system(name=None):
    _comm.init()
    return tf.no_op(name=name or "npu_initialize_system")


def shutdown_system(name=None):
    return tf.no_op(name=name or "npu_shutdown_system")


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    if tf.executing_eagerly():
        raise RuntimeError("npu_ops.dropout() is not compatible with eager execution.")
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise ValueError("x must be a floating point tensor. Got a %s tensor instead." % x.dtype)
    if isinstance(keep_prob, numbers.Real) and not 0 < keep_prob <= 1.0:
        raise ValueError("keep_prob must be a float value or a scalar tensor in the range (0, 1], got %g" % keep_prob)
    if isinstance(keep_prob, float) and keep_prob == 1.0:
        return x
    return tf.nn.dropout(x, rate=1.0 - keep_prob, noise_shape=noise_shape, seed=seed, name=name)
