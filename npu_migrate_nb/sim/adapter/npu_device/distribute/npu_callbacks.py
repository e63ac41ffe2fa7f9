"""Stand-in for ``npu_device.distribute.npu_callbacks``.

The real TF2 ``NPUBroadcastGlobalVariablesCallback`` defines ``on_batch_begin`` INSIDE
``__init__``, so Keras never calls it and nothing is broadcast. The stand-in keeps that defect and
logs the ``tf2-broadcast-callback`` pitfall when the callback is created.
"""

import os

import tensorflow as tf

from npu_migrate_nb.sim.adapter import warn_pitfall

broadcast_registry = set()


def broadcast_keras_model(model, root_rank=0):
    """Broadcast the trainable variables of a Keras model (each variable once per process)."""
    from npu_device.distribute import hccl
    if not isinstance(model, tf.keras.Model):
        return model
    candidates = [v for v in model.trainable_variables if id(v) not in broadcast_registry]
    if candidates:
        hccl.broadcast(candidates, root_rank)
        broadcast_registry.update(id(v) for v in candidates)
    return model


class NPUBroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Meant to broadcast the model's variables before the first batch; never does (real defect)."""

    def __init__(self, root_rank):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        warn_pitfall("tf2-broadcast-callback",
                     "npu_device's NPUBroadcastGlobalVariablesCallback never broadcasts (its on_batch_begin "
                     "is defined inside __init__); call npu.distribute.broadcast(model.trainable_variables) "
                     "once the model is built")

        def on_batch_begin(self, batch, logs=None):  # defined here, as in the adapter: never called
            if self.broadcast_done:
                return
            if int(os.getenv("RANK_SIZE", "1")) > 1:
                broadcast_keras_model(self.model, self.root_rank)
            self.broadcast_done = True
