"""Stand-in for ``npu_bridge.estimator.npu.npu_estimator``: NPUEstimator and NPUEstimatorSpec.

NPUEstimator is a thin ``tf.estimator.Estimator`` subclass that, like the real one, requires an
NPURunConfig and adds ``NPUBroadcastGlobalVariablesHook`` to the TRAIN hooks itself when RANK_SIZE
is a number above 1 (and ``horovod_mode`` is off). The NPU checkpoint, outfeed and
iterations-per-loop machinery is not simulated; ``job_start_file`` is ignored.
"""

import os

import tensorflow as tf
from tensorflow.python.util import function_utils

from npu_bridge.estimator.npu.npu_config import NPURunConfig
from npu_bridge.estimator.npu.npu_hook import NPUBroadcastGlobalVariablesHook
from npu_bridge.estimator.npu import util as util_lib


class NPUEstimatorSpec(tf.estimator.EstimatorSpec):
    """EstimatorSpec with the NPU ``host_call`` argument (accepted, not simulated)."""

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                export_outputs=None, training_chief_hooks=None, training_hooks=None, scaffold=None,
                evaluation_hooks=None, prediction_hooks=None, host_call=None):
        spec = super().__new__(cls, mode=mode, predictions=predictions, loss=loss, train_op=train_op,
                               eval_metric_ops=eval_metric_ops, export_outputs=export_outputs,
                               training_chief_hooks=training_chief_hooks, training_hooks=training_hooks,
                               scaffold=scaffold, evaluation_hooks=evaluation_hooks,
                               prediction_hooks=prediction_hooks)
        spec._host_call = host_call
        return spec


def _needs_broadcast_hook(config):
    rank_size = util_lib.get_ranksize()
    return rank_size is not None and rank_size.isdigit() and int(rank_size) > 1 and not getattr(config, "horovod_mode", False)


class NPUEstimator(tf.estimator.Estimator):
    """Estimator with NPU support (simulated)."""

    def __init__(self, model_fn=None, model_dir=None, config=None, params=None, job_start_file="",
                 warm_start_from=None):
        if config is None or not isinstance(config, NPURunConfig):
            raise ValueError("`config` must be provided with type `NPUConfigs`")
        super().__init__(model_fn=self._augment_model_fn(model_fn, config), model_dir=model_dir,
                         config=config, params=params or {}, warm_start_from=warm_start_from)

    @staticmethod
    def _augment_model_fn(model_fn, config):
        def _model_fn(features, labels, mode, params, config):
            model_fn_args = function_utils.fn_args(model_fn)
            kwargs = {name: value for name, value in
                      (("labels", labels), ("mode", mode), ("params", params), ("config", config))
                      if name in model_fn_args}
            spec = model_fn(features=features, **kwargs)
            if mode == tf.estimator.ModeKeys.TRAIN and _needs_broadcast_hook(config):
                hooks = [NPUBroadcastGlobalVariablesHook(0, int(os.getenv("RANK_ID", "0")))]
                spec = spec._replace(training_hooks=tuple(hooks + list(spec.training_hooks or [])))
            return spec

        return _model_fn
