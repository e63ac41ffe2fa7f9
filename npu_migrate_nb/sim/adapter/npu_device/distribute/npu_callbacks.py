"""Stand-in for ``npu_device.distribute.npu_callbacks``.

As on the chip: ``broadcast_keras_model`` broadcasts a BUILT model's trainable variables from rank
0 whatever ``root_rank`` it is given (the real helper calls ``hccl.broadcast(candidates)``),
skipping variables whose cast dtype differs (mixed precision) and those already broadcast in this
process. The TF2 ``NPUBroadcastGlobalVariablesCallback`` defines ``on_batch_begin`` INSIDE
``__init__``, so Keras never calls it and nothing is broadcast: the stand-in keeps that defect and
logs the ``tf2-broadcast-callback`` pitfall when the callback is made. ``npu_broadcast_scope_wrapper``
(what the vendor's TF2 tool wraps a strategy's ``scope`` with) records the trainable variables
made in the scope and broadcasts them when the scope is first left.
"""

import os
import weakref

import tensorflow as tf

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim.adapter import warn_pitfall as _warn_pitfall
from npu_device.distribute import hccl

# mapping id(var) to the variable, which id(var) return memory address of var
broadcast_registry = weakref.WeakValueDictionary()


def broadcast_helper(variables, root_rank=0):
    """Broadcast trainable variables (from rank 0: root_rank is not passed on, as in the adapter)."""
    candidates = []
    for var in variables:
        if hasattr(var, '_cast_dtype') and getattr(var, "_cast_dtype") != var.dtype:
            continue
        if id(var) not in broadcast_registry:
            candidates.append(var)
    if candidates:
        hccl.broadcast(candidates)
        for value in candidates:
            broadcast_registry[id(value)] = value


def broadcast_keras_model(model, root_rank=0):
    """Broadcast trainable variables of a built Keras model"""
    if not isinstance(model, tf.keras.Model):
        return model
    if model.built:
        broadcast_helper(model.trainable_variables, root_rank)
    return model


def get_ranksize():
    if os.getenv("CM_WORKER_SIZE") is not None and os.getenv("RANK_SIZE") is not None:
        raise ValueError("RANK_SIZE and CM_WORK_SIZE cannot be configured at the same time")
    return os.getenv('RANK_SIZE') if os.getenv("RANK_SIZE") is not None else os.getenv('CM_WORKER_SIZE', '1')


class NPUBroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Meant to broadcast the model's variables before the first batch; never does (real defect)."""

    def __init__(self, root_rank):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        _warn_pitfall("tf2-broadcast-callback",
                      _("npu_device's NPUBroadcastGlobalVariablesCallback never broadcasts (its on_batch_begin "
                        "is defined inside __init__); call npu.distribute.broadcast(model.trainable_variables) "
                        "once the model is built"))

        def on_batch_begin(self, batch, logs=None):  # defined here, as in the adapter: never called
            if self.broadcast_done:
                return
            if int(get_ranksize()) > 1:
                broadcast_helper(self.model.trainable_variables, self.root_rank)
            self.broadcast_done = True


class NpuBroadcastScopeContext(object):
    """Records the trainable variables made in a strategy's scope; broadcasts them on first exit."""
    _is_in_scope = False
    _is_broadcast = False

    def __init__(self, org_scope_ctx, model_trainable_variables):
        self.org_scope_ctx = org_scope_ctx
        self.enter_scope_again_count = 0
        self.model_trainable_variables = model_trainable_variables

        def _variable_broadcast_creator(next_creator, **kwargs):
            var = next_creator(**kwargs)
            if var.trainable:
                self.model_trainable_variables.append(var)
            return var

        self.broadcast_scope = tf.variable_creator_scope(_variable_broadcast_creator)

    def __enter__(self):
        if not NpuBroadcastScopeContext._is_in_scope:
            NpuBroadcastScopeContext._is_in_scope = True
            if self.broadcast_scope:
                self.broadcast_scope.__enter__()
        else:
            self.enter_scope_again_count += 1
        if self.org_scope_ctx:
            self.org_scope_ctx.__enter__()

    def __exit__(self, exception_type, exception_value, traceback):
        if self.org_scope_ctx:
            self.org_scope_ctx.__exit__(exception_type, exception_value, traceback)
        if not NpuBroadcastScopeContext._is_broadcast:
            NpuBroadcastScopeContext._is_broadcast = True
            broadcast_helper(self.model_trainable_variables)
        if self.enter_scope_again_count > 0:
            self.enter_scope_again_count -= 1
            return
        if self.broadcast_scope:
            self.broadcast_scope.__exit__(exception_type, exception_value, traceback)
        NpuBroadcastScopeContext._is_in_scope = False


def npu_broadcast_scope_wrapper(strategy):
    """Wrap ``strategy.scope`` with NpuBroadcastScopeContext"""
    if not isinstance(strategy, tf.distribute.Strategy):
        return strategy
    org_scope = strategy.scope
    model_trainable_variables = []

    def _npu_broadcast_scope():
        return NpuBroadcastScopeContext(org_scope(), model_trainable_variables)

    if not hasattr(strategy, '_npu_scope_wrapped'):
        strategy.scope = _npu_broadcast_scope
        setattr(strategy, '_npu_scope_wrapped', True)
    return strategy
