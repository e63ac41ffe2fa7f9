"""Stand-in for ``npu_bridge.estimator.npu.npu_callbacks``: the TF1 Keras broadcast callback.

As on the chip, before the first batch at rank size > 1 it broadcasts EVERY global variable Keras
has initialised in its graph (batch-norm moving statistics and optimizer slots too, not only the
trainable ones) from ``root_rank``, through Keras' session. Run eagerly (TF2 Keras), where there
is no such session, it broadcasts the model's variables, trainable or not, eagerly.
"""

import tensorflow as _tf

from npu_migrate_nb.sim import comm as _comm
from npu_bridge.estimator.npu import util as util_lib
from npu_bridge.hccl import hccl_ops


def _keras_backend():
    return _tf.compat.v1.keras.backend


def broadcast_global_variables(root_rank):
    """A graph op assigning every Keras-initialised variable of Keras' graph its value on ``root_rank``."""
    hccl_ops._check_int(root_rank, "root_rank")
    from keras.src import backend
    graph = backend.get_graph()
    # Keras keeps them in a set: in name order, every rank sends them in the same order
    candidates = sorted((v for v in backend._get_variables(graph) if getattr(v, "_keras_initialized", False)),
                        key=lambda v: v.name)
    with graph.as_default():
        op_list = []
        for var in candidates:  # one broadcast each, as the adapter does
            outputs = hccl_ops.broadcast(tensor=[var.value()], root_rank=root_rank)
            op_list.append(_tf.compat.v1.assign(var, _tf.reshape(outputs[0], var.shape)))
        return _tf.group(op_list)


class BroadcastGlobalVariablesCallbackImpl:
    def __init__(self, root_rank, *args):
        super().__init__(*args)
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_batch_begin(self, batch, logs=None):
        if self.broadcast_done:
            return
        if int(util_lib.get_ranksize()) > 1:
            if _tf.executing_eagerly():
                hccl_ops._check_int(self.root_rank, "root_rank")
                _comm.broadcast_variables(self.model.variables, self.root_rank)
            else:
                _keras_backend().get_session().run(broadcast_global_variables(self.root_rank))
        self.broadcast_done = True


class NPUBroadcastGlobalVariablesCallback(BroadcastGlobalVariablesCallbackImpl, _tf.keras.callbacks.Callback):
    """Keras callback broadcasting the global variables from ``root_rank`` before the first batch."""

    def __init__(self, root_rank):
        super().__init__(root_rank)
