"""Stand-in for ``npu_bridge.npu_init``: what ``from npu_bridge.npu_init import *`` gives.

Like the real module it has no ``__all__``, so the star import also brings ``tf`` and ``os``.
Session/config helpers add the same ``NpuOptimizer`` custom optimizer entry as on the chip (CPU
TensorFlow ignores it). ``npu_hooks_append``/``npu_callbacks_append`` keep the real defect (a
non-list argument is replaced by a new list, dropping the caller's hooks) and log the
``hooks-tuple`` pitfall when that happens.
"""

import atexit
import os

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig
from tensorflow.python.client import session

from npu_bridge.estimator.npu.npu_config import NPURunConfig
from npu_bridge.estimator.npu.npu_config import ProfilingConfig
from npu_bridge.estimator.npu.npu_config import DumpConfig
from npu_bridge.estimator.npu.npu_config import DynamicInputConfig
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator
from npu_bridge.estimator.npu.npu_estimator import NPUEstimatorSpec
from npu_bridge.estimator.npu.npu_hook import NPUCheckpointSaverHook
from npu_bridge.estimator.npu.npu_hook import NPUBroadcastGlobalVariablesHook
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer
from npu_bridge.estimator.npu.npu_optimizer import npu_distributed_optimizer_wrapper
from npu_bridge.estimator.npu.npu_optimizer import npu_allreduce
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import util
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


def _npu_config_proto(config_proto):
    config_proto.allow_soft_placement = True
    config_proto.log_device_placement = False
    config_proto.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config_proto.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF


def npu_session_config_init(session_config=None):
    if not isinstance(session_config, config_pb2.ConfigProto):
        session_config = config_pb2.ConfigProto()
    custom_op = session_config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    _npu_config_proto(session_config)
    return session_config


def npu_run_config_init(run_config=None):
    """Return ``run_config`` (or a new RunConfig) carrying an NPU session config."""
    if not isinstance(run_config, tf.estimator.RunConfig):
        run_config = tf.estimator.RunConfig()
    run_config.__dict__["_session_config"] = npu_session_config_init(run_config.session_config)
    return run_config


def npu_hooks_append(hooks_list=()):
    """Append ``NPUBroadcastGlobalVariablesHook(0, RANK_ID)`` to ``hooks_list`` and return it."""
    _warn_if_list_dropped("npu_hooks_append", hooks_list, "hooks")
    if not isinstance(hooks_list, list):
        hooks_list = []
    hooks_list.append(NPUBroadcastGlobalVariablesHook(0, int(os.getenv("RANK_ID", "0"))))
    return hooks_list


def npu_callbacks_append(callbacks_list=()):
    """Append ``NPUBroadcastGlobalVariablesCallback(0)`` to ``callbacks_list`` and return it."""
    _warn_if_list_dropped("npu_callbacks_append", callbacks_list, "callbacks")
    if not isinstance(callbacks_list, list):
        callbacks_list = []
    callbacks_list.append(NPUBroadcastGlobalVariablesCallback(0))
    return callbacks_list


def npu_config_proto(config_proto=None):
    if not isinstance(config_proto, config_pb2.ConfigProto):
        config_proto = config_pb2.ConfigProto()
    _npu_config_proto(config_proto)
    return config_proto


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


def set_keras_session_npu_config():
    sess = session.Session(config=npu_session_config_init())
    tf.compat.v1.keras.backend.set_session(sess)
    return sess


def init_resource():
    """Initialise collective communication; return ``(session, shutdown_op)`` like the real one."""
    util.global_dict_init()
    graph = tf.Graph() if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
    with graph.as_default():
        npu_init = npu_ops.initialize_system()
        npu_shutdown = npu_ops.shutdown_system()
    sess = session.Session(graph=graph, config=npu_session_config_init())
    sess.run(npu_init)
    util.set_value("npu_rank_id", get_rank_id())
    util.set_value("npu_local_rank_id", get_local_rank_id())
    util.set_value("npu_rank_size", get_rank_size())
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
