"""Stand-in for ``npu_device.train.optimizer.npu_loss_scale_optimizer``: what
``npu.train.optimizer.NpuLossScaleOptimizer`` is.

As on the chip, with an NPU context (``npu.open().as_default()``) ``apply_gradients`` reads the
float status once the gradients are computed; with more than one worker it sums it over ranks
(``all_reduce([status], 'sum')``: there is no ``is_distributed`` switch in TF2), so every rank skips
the same steps; a skipped step still counts in ``iterations``. A dynamic scale follows the
adapter's rule (times ``multiplier`` after ``dynamic_growth_steps`` finite steps unless that passes
3.4e38; divided by it, never below 1, at an overflow); ``last_step_finite`` says whether the last
step applied. Without an NPU context it is Keras' LossScaleOptimizer. It wraps Keras 2.15
optimizers (``tf.keras.optimizers.*``, Keras' LossScaleOptimizerV3), where the adapter, written for
TensorFlow 2.6, wraps the OptimizerV2 ones of that version.

The float status is the simulator's (:mod:`npu_migrate_nb.sim.float_status`): the gradients this
rank computed, times the loss scale, non-finite or beyond float16's range. A skip is recorded for
the run-time checks.
"""

import tensorflow as tf
from keras.src.mixed_precision.loss_scale_optimizer import LossScaleOptimizerV3 as _LossScaleOptimizerV3
from keras.src.mixed_precision.loss_scale_optimizer import _UnwrapPreventer

from npu_migrate_nb.sim import float_status as _float_status
from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim.adapter import cannot_run as _cannot_run
from npu_device.npu_device import global_npu_ctx
from npu_device.npu_device import is_inf_nan_enabled
from npu_device.distribute.hccl import all_reduce


def _npu_finite_status_after_executed(grads, loss_scale):
    status = _float_status.status(grads, loss_scale)
    if global_npu_ctx() and global_npu_ctx().workers_num > 1:
        reduced_status = all_reduce([status], 'sum', fusion=0)
        return tf.reduce_all(tf.equal(reduced_status, 0))
    return tf.reduce_all(tf.equal(0.0, [status]))


def _npu_compat_loss_scale_update(m, grads):
    is_finite = _npu_finite_status_after_executed(tf.nest.flatten(grads), m.current_loss_scale)

    def update_if_finite_grads():
        def incr_loss_scale():
            incr_result_finite = tf.less(m.current_loss_scale, 3.4e+38 / m.multiplier)
            update_if_finite_fn = tf.cond(incr_result_finite,
                                          lambda: tf.group(m.current_loss_scale.assign(m.current_loss_scale * m.multiplier)),
                                          tf.no_op)
            return tf.group(update_if_finite_fn, m.counter.assign(0))

        return tf.cond(m.counter + 1 >= m.growth_steps, incr_loss_scale, lambda: tf.group(m.counter.assign_add(1)))

    def update_if_not_finite_grads():
        new_loss_scale = tf.maximum(m.current_loss_scale / m.multiplier, 1)
        return tf.group(m.counter.assign(0), m.current_loss_scale.assign(new_loss_scale))

    update_op = tf.cond(is_finite, update_if_finite_grads, update_if_not_finite_grads)
    return update_op, is_finite


class NpuLossScaleOptimizer(_LossScaleOptimizerV3):
    """NPU implemented loss scale optimizer"""

    def __init__(self, inner_optimizer, dynamic=True, initial_scale=None, dynamic_growth_steps=None):
        super().__init__(inner_optimizer, dynamic, initial_scale, dynamic_growth_steps)
        with tf.init_scope():
            self._last_step_finite = tf.Variable(False, name="npu_last_step_finite", dtype=tf.bool, trainable=False)

    @property
    def last_step_finite(self):
        return self._last_step_finite

    def apply_gradients(self, grads_and_vars, name=None):
        if global_npu_ctx() is None or is_inf_nan_enabled():
            return super().apply_gradients(grads_and_vars)
        grads_and_vars = tuple(grads_and_vars)
        grads = [g for g, _unused in grads_and_vars]
        with tf.init_scope():
            self.build([v for _unused, v in grads_and_vars])

        def apply_fn():
            self._apply_gradients(grads, _UnwrapPreventer([v for _unused, v in grads_and_vars]))
            return tf.no_op()

        skipped = _float_status.skip_recorder(self._optimizer.iterations, type(self).__name__)

        def do_not_apply_fn():
            with tf.control_dependencies([skipped()]):
                return tf.group(self._optimizer.iterations.assign_add(1, read_value=False))

        if self.dynamic:
            loss_scale_update_op, should_apply_grads = _npu_compat_loss_scale_update(self._loss_scale, grads)
        else:
            loss_scale_update_op = tf.no_op()
            should_apply_grads = _npu_finite_status_after_executed(grads, self.loss_scale)
        self._last_step_finite.assign(should_apply_grads)
        maybe_apply_op = tf.__internal__.smart_cond.smart_cond(should_apply_grads, apply_fn, do_not_apply_fn)
        return tf.group(maybe_apply_op, loss_scale_update_op)


class NpuExperimentalLossScaleOptimizer:
    """Stands for the adapter's wrapper of ``tf.keras.mixed_precision.experimental.LossScaleOptimizer``."""

    def __init__(self, optimizer, loss_scale):
        raise _cannot_run("npu_loss_scale_optimizer.NpuExperimentalLossScaleOptimizer",
                          _("it extends tf.keras.mixed_precision.experimental.LossScaleOptimizer, which TensorFlow "
                            "2.15 no longer has; use npu.train.optimizer.NpuLossScaleOptimizer"))
