"""Stand-in for ``npu_bridge.estimator.npu.npu_hook``: the variable-broadcast session hook and the
checkpoint hook.

As on the chip: the hook reads the rank size when it is made (not a number: 1) and does nothing at
rank size 1; otherwise ``begin`` builds the broadcast of every TRAINABLE variable of the graph
(optimizer slots, global_step and batch-norm moving statistics are not trainable and are not
broadcast) from ``root_rank``. ``root_rank=None``, the default, reaches the broadcast op as it is
and fails there with TensorFlow's TypeError, as it does on the chip. The stand-in sends all the
variables as one fused collective where the real hook makes one op each.
"""

import tensorflow as tf
from tensorflow.python.training import basic_session_run_hooks, session_run_hook

from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim.adapter import logger as _logger
from npu_bridge.estimator.npu import util as util_lib
from npu_bridge.hccl import hccl_ops


def broadcast_global_variables(root_rank):
    """An op assigning every trainable variable of the default graph its value on ``root_rank``."""
    hccl_ops._check_int(root_rank, "root_rank")
    variables = tf.compat.v1.trainable_variables()
    if not variables or _comm.size() == 1:
        return tf.group([], name="npu_broadcast_global_variables")
    return tf.group(_comm.broadcast_variables(variables, root_rank), name="npu_broadcast_global_variables")


class NPUBroadcastGlobalVariablesHook(session_run_hook.SessionRunHook):
    """Broadcasts initial trainable variables from ``root_rank`` once the session exists."""

    def __init__(self, root_rank=None, index=None):
        self._root_rank = root_rank
        self._index = index
        self._bcast_op = None
        rank_size = util_lib.get_ranksize()
        self._rank_size = int(rank_size) if rank_size.isdigit() else 1

    def begin(self):
        if (not self._bcast_op or self._bcast_op.graph != tf.compat.v1.get_default_graph()) and self._rank_size > 1:
            self._bcast_op = broadcast_global_variables(self._root_rank)

    def after_create_session(self, session, coord):
        if self._rank_size > 1:
            _logger.info("NPUBroadcastGlobalVariablesHook run...")
            session.run(self._bcast_op)


class NPUCheckpointSaverHook(basic_session_run_hooks.CheckpointSaverHook):
    """Hook to save training checkpoints (the NPU variant adds logging)."""

    def __init__(self,
                 checkpoint_dir,
                 save_secs=None,
                 save_steps=None,
                 saver=None,
                 checkpoint_basename="model.ckpt",
                 scaffold=None,
                 listeners=None):
        super().__init__(checkpoint_dir=checkpoint_dir, save_secs=save_secs, save_steps=save_steps, saver=saver,
                         checkpoint_basename=checkpoint_basename, scaffold=scaffold, listeners=listeners)

    def after_run(self, run_context, run_values):
        global_step = run_context.session.run(self._global_step_tensor)
        _logger.info("global_step..." + str(global_step))
        super().after_run(run_context, run_values)

    def end(self, session):
        _logger.info("NPUCheckpointSaverHook end...")
        super().end(session)
