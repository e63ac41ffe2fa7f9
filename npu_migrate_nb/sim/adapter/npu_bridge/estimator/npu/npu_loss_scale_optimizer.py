"""Stand-in for ``npu_bridge.estimator.npu.npu_loss_scale_optimizer``: NPULossScaleOptimizer.

As on the chip: ``compute_gradients`` (``tf.contrib``'s, the private base below) scales the loss
by the manager's loss scale, has the wrapped optimizer compute the gradients (an
``NPUDistributedOptimizer`` inside averages them there) and scales them back; ``apply_gradients``
reads the float status, and with ``is_distributed=True`` sums it over ranks
(``hccl_ops.allreduce([status], "sum")``) so that every rank skips the same steps; the gradients
go to the wrapped optimizer untouched. A skipped step applies nothing and does not move
``global_step``; the manager updates the loss scale either way. Without ``is_distributed=True`` on
several ranks only the rank that overflowed skips: its weights drift from the others'.

The float status is the simulator's (:mod:`npu_migrate_nb.sim.float_status`): this rank's scaled
gradients, before any reduction, non-finite or beyond float16's range. A skip is recorded for the
run-time checks.
"""

import tensorflow as tf

from npu_migrate_nb.sim import float_status as _float_status
from npu_bridge.hccl import hccl_ops
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
from npu_bridge.estimator.npu.npu_optimizer import _GraphStatus, _local_scaled_grads, _down_scale


class _ContribLossScaleOptimizer(tf.compat.v1.train.Optimizer):
    """``tf.contrib.mixed_precision.LossScaleOptimizer`` (TF 1.15), which TensorFlow 2 no longer has."""

    def __init__(self, opt, loss_scale_manager):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise ValueError('"opt" must be an instance of Optimizer, but got: %s' % type(opt))
        self._optimizer = opt
        super().__init__(opt._use_locking, opt.get_name())
        self._loss_scale_manager = loss_scale_manager
        self._local_status = _GraphStatus()

    def compute_gradients(self, loss, var_list=None, gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False, grad_loss=None):
        loss_scale = self._loss_scale_manager.get_loss_scale()
        loss_value = loss() if callable(loss) else loss
        scaled_loss = loss_value * tf.cast(loss_scale, loss_value.dtype.base_dtype)
        grads_and_vars, status = _local_scaled_grads(lambda: self._optimizer.compute_gradients(
            scaled_loss, var_list=var_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss))
        self._local_status.remember(status)  # what the chip's float status would hold now
        return _down_scale(grads_and_vars, loss_scale)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        is_overall_finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars
                                           if g is not None])
        update_vars = tf.cond(is_overall_finite,
                              lambda: self._optimizer.apply_gradients(grads_and_vars, global_step, name),
                              tf.no_op)
        return tf.group(update_vars, self._loss_scale_manager.update_loss_scale(is_overall_finite))


class NPULossScaleOptimizer(_ContribLossScaleOptimizer):
    """NPU implemented loss scale optimizer"""

    def __init__(self, opt, loss_scale_manager, is_distributed=False):
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._float_status = tf.constant([0.0], dtype=tf.float32)
        self._is_distributed = is_distributed
        self._name = "NPULossScaleOptimizer{}".format(type(opt).__name__)
        super().__init__(opt=opt, loss_scale_manager=loss_scale_manager)

    def __getattr__(self, attr):
        if attr == "_opt":
            raise AttributeError(attr)
        return getattr(self._opt, attr)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if self._enable_overflow_check():
            with tf.name_scope(self._name):
                local_float_status = self._local_status.recall()
                if local_float_status is None:  # gradients from elsewhere, unscaled: judge them scaled
                    local_float_status = _float_status.status(
                        [g for g, _ in grads_and_vars], self._loss_scale_manager.get_loss_scale())
            if self._is_distributed:
                aggregated_float_status = hccl_ops.allreduce([local_float_status], "sum", fusion=0)
                is_overall_finite = tf.reduce_all(tf.equal(aggregated_float_status, 0),
                                                  name="overflow_status_reduce_all")
            else:
                is_overall_finite = tf.reduce_all(tf.equal(0.0, local_float_status), name="overflow_status_reduce_all")
        else:
            is_overall_finite = tf.constant(True, dtype=tf.bool)
        update_variables = tf.cond(is_overall_finite,
                                   lambda: self._opt.apply_gradients(grads_and_vars, global_step, name),
                                   _float_status.skip_recorder(global_step, type(self).__name__))
        return tf.group(update_variables, self._loss_scale_manager.update_loss_scale(is_overall_finite))

    def _enable_overflow_check(self):
        if isinstance(self._loss_scale_manager, FixedLossScaleManager):
            return self._loss_scale_manager.get_enable_overflow_check()
        return True
