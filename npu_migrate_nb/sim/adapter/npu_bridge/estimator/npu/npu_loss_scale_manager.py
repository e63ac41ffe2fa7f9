"""Stand-in for ``npu_bridge.estimator.npu.npu_loss_scale_manager``: the loss-scale managers.

The real classes extend ``_tf.contrib.mixed_precision``'s managers, which TensorFlow 2 no longer
has; the private bases below are those (TF 1.15), so that the adapter's classes keep their own
bodies: ``FixedLossScaleManager`` (at least 1, ``enable_overflow_check``) and
``ExponentialUpdateLossScaleManager`` with the adapter's update rule (times ``incr_ratio`` after
``incr_every_n_steps`` finite steps unless that passes 3.4e38; after ``decr_every_n_nan_or_inf``
overflowing steps, times ``decr_ratio`` but never below 1).
"""

import tensorflow as _tf


class _ContribLossScaleManager:
    """``_tf.contrib.mixed_precision.LossScaleManager``."""

    def get_loss_scale(self):
        raise NotImplementedError

    def update_loss_scale(self, finite_grads):
        del finite_grads
        return _tf.no_op()


class _ContribFixedLossScaleManager(_ContribLossScaleManager):
    def __init__(self, loss_scale):
        if loss_scale < 1:
            raise ValueError("loss scale must be at least 1.")
        self._loss_scale = _tf.convert_to_tensor(loss_scale, dtype=_tf.float32, name="loss_scale")

    def get_loss_scale(self):
        return self._loss_scale

    def update_loss_scale(self, finite_grads):
        del finite_grads
        return _tf.no_op()


class _ContribExponentialUpdateLossScaleManager(_ContribLossScaleManager):
    def __init__(self, init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf=2, incr_ratio=2,
                 decr_ratio=0.8):
        self._incr_every_n_steps = incr_every_n_steps
        self._decr_every_n_nan_or_inf = decr_every_n_nan_or_inf
        self._incr_ratio = incr_ratio
        self._decr_ratio = decr_ratio
        self._loss_scale = _tf.compat.v1.Variable(name="loss_scale", initial_value=_tf.constant(init_loss_scale, _tf.float32),
                                                 dtype=_tf.float32, trainable=False, use_resource=True)
        self._num_good_steps = _tf.compat.v1.Variable(name="good_steps", initial_value=0, dtype=_tf.int32,
                                                     trainable=False, use_resource=True)
        self._num_bad_steps = _tf.compat.v1.Variable(name="bad_steps", initial_value=0, dtype=_tf.int32,
                                                    trainable=False, use_resource=True)

    def _reset_stats(self):
        return _tf.group(self._num_good_steps.assign(0), self._num_bad_steps.assign(0))

    def get_loss_scale(self):
        return _tf.convert_to_tensor(self._loss_scale)


class FixedLossScaleManager(_ContribFixedLossScaleManager):
    """Loss scale manager with a fixed loss scale."""

    def __init__(self, loss_scale, enable_overflow_check=True):
        if loss_scale < 1:
            raise ValueError("loss scale must be at least 1.")
        self._loss_scale = _tf.convert_to_tensor(loss_scale, dtype=_tf.float32, name="loss_scale")
        self._enable_overflow_check = enable_overflow_check
        super().__init__(loss_scale=loss_scale)

    def get_enable_overflow_check(self):
        return self._enable_overflow_check


class ExponentialUpdateLossScaleManager(_ContribExponentialUpdateLossScaleManager):
    """Loss scale manager with an exponential update strategy."""

    def __init__(self,
                 init_loss_scale,
                 incr_every_n_steps,
                 decr_every_n_nan_or_inf=2,
                 incr_ratio=2,
                 decr_ratio=0.8):
        super().__init__(init_loss_scale=init_loss_scale, incr_every_n_steps=incr_every_n_steps,
                         decr_every_n_nan_or_inf=decr_every_n_nan_or_inf, incr_ratio=incr_ratio,
                         decr_ratio=decr_ratio)

    def update_loss_scale(self, finite_grads):
        def update_if_finite_grads():
            def increase_loss_scale():
                incr_result_finite = _tf.less(self._loss_scale, 3.4e+38 / self._incr_ratio)
                new_loss_scale_value = _tf.cond(incr_result_finite,
                                               lambda: self._loss_scale * self._incr_ratio,
                                               lambda: _tf.convert_to_tensor(self._loss_scale))
                return _tf.group(self._loss_scale.assign(new_loss_scale_value), self._reset_stats())

            is_incr_good_steps = self._num_good_steps + 1 >= self._incr_every_n_steps
            return _tf.cond(is_incr_good_steps, increase_loss_scale,
                           lambda: _tf.group(self._num_good_steps.assign_add(1)))

        def update_if_not_finite_grads():
            def decrease_loss_scale():
                new_loss_scale_value = _tf.maximum(1., self._loss_scale * self._decr_ratio)
                return _tf.group(self._loss_scale.assign(new_loss_scale_value), self._reset_stats())

            def only_update_steps():
                return _tf.group(self._num_bad_steps.assign_add(1), self._num_good_steps.assign(0))

            is_incr_bad_steps = self._num_bad_steps + 1 >= self._decr_every_n_nan_or_inf
            return _tf.cond(is_incr_bad_steps, decrease_loss_scale, only_update_steps)

        return _tf.cond(finite_grads, update_if_finite_grads, update_if_not_finite_grads)
