"""Stand-in for ``npu_bridge.estimator.npu.npu_hook``: the variable-broadcast session hook."""

import tensorflow as tf
from tensorflow.python.training import basic_session_run_hooks, session_run_hook

from npu_migrate_nb.sim import comm
from npu_migrate_nb.sim.adapter import logger


def broadcast_global_variables(root_rank, index):
    """An op assigning every TRAINABLE variable of the default graph its value on ``root_rank``.

    Optimizer slots, global_step and batch-norm moving statistics are not trainable and are not
    broadcast, as on the chip. The stand-in sends all variables as one fused collective.
    """
    variables = tf.compat.v1.trainable_variables()
    if not variables or comm.size() == 1:
        return tf.no_op(name="npu_broadcast_global_variables")
    return tf.group(comm.broadcast_variables(variables, root_rank), name="npu_broadcast_global_variables")


class NPUBroadcastGlobalVariablesHook(session_run_hook.SessionRunHook):
    """Broadcasts initial trainable variables from ``root_rank`` once the session exists.

    ``index`` is unused, as in the real hook. ``root_rank=None`` is read as 0 (the real op would
    reject it).
    """

    def __init__(self, root_rank=None, index=None):
        self._root_rank = root_rank
        self._index = index
        self._bcast_op = None

    def begin(self):
        if not self._bcast_op or self._bcast_op.graph != tf.compat.v1.get_default_graph():
            self._bcast_op = broadcast_global_variables(self._root_rank or 0, self._index)

    def after_create_session(self, session, coord):
        logger.info("NPUBroadcastGlobalVariablesHook run...")
        session.run(self._bcast_op)


class NPUCheckpointSaverHook(basic_session_run_hooks.CheckpointSaverHook):
    """A CheckpointSaverHook (the NPU variant only adds logging)."""
