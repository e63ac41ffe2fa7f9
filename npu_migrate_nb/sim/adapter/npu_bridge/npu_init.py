"""Stand-in for ``npu_bridge.npu_init``: what ``from npu_bridge.npu_init import *`` gives.

Like the real module it has no ``__all__``, so the star import also brings ``tf``, ``os``, the
modules it imports (``npu_ops``, ``util``, ``hccl_ops``, ``npu_strategy``...) and the HCCL
queries. The config helpers add the same ``NpuOptimizer`` custom optimizer entry as on the chip
(CPU TensorFlow ignores it). ``npu_hooks_append``/``npu_callbacks_append`` keep the real defect (a
non-list argument is replaced by a new list, dropping the caller's hooks) and log the
``hooks-tuple`` pitfall when that happens. The real module also patches ``Session.__init__`` to
add the NPU config to every session; sessions on the CPU need none, so the stand-in does not.
"""

import os

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig
from tensorflow.python.client import session
from tensorflow.python.training import session_run_hook
from keras.src import backend

from npu_bridge.estimator.npu.npu_config import NPURunConfig
from npu_bridge.estimator.npu.npu_config import ProfilingConfig
from npu_bridge.estimator.npu.npu_config import MemoryConfig
from npu_bridge.estimator.npu.npu_config import DumpConfig
from npu_bridge.estimator.npu.npu_config import DynamicInputConfig
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator
from npu_bridge.estimator.npu.npu_estimator import NPUEstimatorSpec
from npu_bridge.estimator.npu.npu_hook import NPUCheckpointSaverHook
from npu_bridge.estimator.npu.npu_hook import NPUBroadcastGlobalVariablesHook
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer
from npu_bridge.estimator.npu.npu_optimizer import KerasDistributeOptimizer
from npu_bridge.estimator.npu.npu_optimizer import npu_distributed_optimizer_wrapper
from npu_bridge.estimator.npu.npu_optimizer import NPUOptimizer
from npu_bridge.estimator.npu.npu_optimizer import npu_allreduce
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import npu_scope
from npu_bridge.estimator.npu import npu_strategy
from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu import npu_plugin
from npu_bridge.estimator.npu_unary_ops import npu_unary_ops
from npu_bridge.hccl import hccl_ops

from hccl.manage.api import create_group
from hccl.manage.api import destroy_group
from hccl.manage.api import get_rank_size
from hccl.manage.api import get_local_rank_size
from hccl.manage.api import get_rank_id
from hccl.manage.api import get_local_rank_id
from hccl.manage.api import get_world_rank_from_group_rank
from hccl.manage.api import get_group_rank_from_world_rank
from hccl.split.api import set_split_strategy_by_idx
from hccl.split.api import set_split_strategy_by_size

from npu_migrate_nb.sim.adapter import warn_if_list_dropped as _warn_if_list_dropped

experimental_options = {
    "disable_model_pruning": False,
    "function_optimization": RewriterConfig.ON,
    "constant_folding": RewriterConfig.ON,
    "shape_optimization": RewriterConfig.ON,
    "arithmetic_optimization": RewriterConfig.ON,
    "loop_optimization": RewriterConfig.ON,
    "dependency_optimization": RewriterConfig.ON,
    "layout_optimizer": RewriterConfig.ON
}


def _with_npu_optimizer(config):
    """``config`` (a new ConfigProto unless it is one) set up as the adapter sets every session's."""
    if not isinstance(config, config_pb2.ConfigProto):
        config = config_pb2.ConfigProto()
    custom_optimizers = config.graph_options.rewrite_options.custom_optimizers
    if not any(custom.name == "NpuOptimizer" for custom in custom_optimizers):
        custom_optimizers.add().name = "NpuOptimizer"
        config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    config.allow_soft_placement = True
    config.log_device_placement = False
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return config


def npu_hooks_append(hooks_list=()):
    """Append ``NPUBroadcastGlobalVariablesHook(0, RANK_ID)`` to ``hooks_list`` and return it."""
    _warn_if_list_dropped("npu_hooks_append", hooks_list, "hooks")
    if not isinstance(hooks_list, list):
        hooks_list = []
    hooks_list.append(NPUBroadcastGlobalVariablesHook(0, int(os.getenv('RANK_ID', '0'))))
    return hooks_list


def npu_callbacks_append(callbacks_list=()):
    """Append ``NPUBroadcastGlobalVariablesCallback(0)`` to ``callbacks_list`` and return it."""
    _warn_if_list_dropped("npu_callbacks_append", callbacks_list, "callbacks")
    if not isinstance(callbacks_list, list):
        callbacks_list = []
    callbacks_list.append(NPUBroadcastGlobalVariablesCallback(0))
    return callbacks_list


def npu_config_proto(config_proto=None):
    return _with_npu_optimizer(config_proto)


def npu_graph_options(graph_options=None):
    if not isinstance(graph_options, config_pb2.GraphOptions):
        graph_options = config_pb2.GraphOptions()
    graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return graph_options


def npu_optimizer_options(optimizer_options=None):
    if not isinstance(optimizer_options, config_pb2.OptimizerOptions):
        optimizer_options = config_pb2.OptimizerOptions()
    optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return optimizer_options


def npu_run_config_init(run_config=None):
    """Return ``run_config`` (or a new RunConfig) carrying an NPU session config."""
    if not isinstance(run_config, tf.estimator.RunConfig):
        run_config = tf.estimator.RunConfig()
    run_config.__dict__['_session_config'] = npu_config_proto(run_config.session_config)
    return run_config


def set_keras_session_npu_config(config=None):
    sess = session.Session(config=_with_npu_optimizer(config))
    tf.compat.v1.keras.backend.set_session(sess)
    return sess


def init_resource(config=None):
    """Initialise collective communication; return ``(session, shutdown_op)`` like the real one."""
    config = _with_npu_optimizer(config)
    util.global_dict_init()
    graph = tf.Graph() if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
    with graph.as_default():
        npu_init = npu_ops.initialize_system()
        npu_shutdown = npu_ops.shutdown_system()
    sess = session.Session(graph=graph, config=config)
    sess.run(npu_init)
    util.set_value("npu_rank_id", get_rank_id())
    util.set_value("npu_local_rank_id", get_local_rank_id())
    util.set_value("npu_rank_size", get_rank_size())
    util.set_value("npu_local_rank_size", get_local_rank_size())
    return sess, npu_shutdown


def shutdown_resource(sess, npu_shutdown):
    sess.run(npu_shutdown)


def close_session(sess):
    sess.close()


def get_npu_rank_id():
    return util.get_value("npu_rank_id", 0)


def get_npu_local_rank_id():
    return util.get_value("npu_local_rank_id", 0)


def get_npu_rank_size():
    return util.get_value("npu_rank_size", 1)


def get_npu_local_rank_size():
    return util.get_value("npu_local_rank_size", 1)


class NpuEmptyHook(session_run_hook.SessionRunHook):
    """Construct an empty SessionRunHook"""
    pass


def npu_keras_optimizer(opt):
    return KerasDistributeOptimizer(opt)


def npu_tf_optimizer(opt):
    return NPUDistributedOptimizer(opt)


def npu_clear_session(config=None):
    backend.clear_session()
    tf.compat.v1.keras.backend.set_session(session.Session(config=npu_config_proto(config)))
