"""Stand-in for ``npu_bridge.estimator.npu.npu_callbacks``: the TF1 Keras broadcast callback.

Differs from the real callback: it broadcasts the model's TRAINABLE variables (the real one
broadcasts every Keras-initialised variable of the graph), and in eager mode it broadcasts eagerly
instead of through ``backend.get_session()``.
"""

import tensorflow as tf

from npu_migrate_nb.sim import comm
from npu_bridge.estimator.npu import util as util_lib


def broadcast_global_variables(root_rank, variables):
    """A graph op assigning ``variables`` their value on ``root_rank``."""
    return tf.group(comm.broadcast_variables(variables, root_rank))


class BroadcastGlobalVariablesCallbackImpl:
    def __init__(self, root_rank, *args):
        super().__init__(*args)
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_batch_begin(self, batch, logs=None):
        if self.broadcast_done:
            return
        if int(util_lib.get_ranksize()) > 1:
            self._broadcast(self.model.trainable_variables)
        self.broadcast_done = True

    def _broadcast(self, variables):
        if not variables:
            return
        if tf.executing_eagerly():
            comm.broadcast_variables(variables, self.root_rank)
            return
        session = tf.compat.v1.keras.backend.get_session()
        with session.graph.as_default():
            op = broadcast_global_variables(self.root_rank, variables)
        session.run(op)


class NPUBroadcastGlobalVariablesCallback(BroadcastGlobalVariablesCallbackImpl, tf.keras.callbacks.Callback):
    """Keras callback broadcasting the model's variables from ``root_rank`` before the first batch."""

    def __init__(self, root_rank):
        super().__init__(root_rank)
