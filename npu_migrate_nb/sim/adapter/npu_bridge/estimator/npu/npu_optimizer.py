"""Stand-in for ``npu_bridge.estimator.npu.npu_optimizer``: gradient aggregation (TF1 side).

Gradients are averaged as the real code does: summed over ranks, then divided by the rank size
(``tf.div``), with the rank size read from ``RANK_SIZE`` only (not CM_WORKER_SIZE). Where the
stand-in differs:
  * all gradients of one call are reduced as ONE fused collective (the real adapter fuses them
    on the chip too, via ``fusion=1``); the numbers are the same;
  * IndexedSlices gradients are densified and all-reduced instead of all-gathered;
  * ``npu_distributed_optimizer_wrapper`` forwards every argument of the patched methods (Keras
    2.15 passes ``tape=`` to ``_compute_gradients``, which the real patch does not accept);
  * ``is_weight_update_sharding=True`` is not simulated (plain averaging is used, with a warning).
"""

import os

import tensorflow as tf

from npu_migrate_nb.sim import comm
from npu_migrate_nb.sim.adapter import logger


def _rank_size_from_env():
    rank_size = os.getenv("RANK_SIZE")
    return 1 if rank_size is None else int(rank_size)


def _dense(value):
    return tf.convert_to_tensor(value) if isinstance(value, tf.IndexedSlices) else value


def _divide(tensor, rank_size):
    if tensor.dtype.is_floating:
        return tensor  # already divided inside the collective, in the tensor's own dtype
    return tf.compat.v1.div(tensor, tf.cast(rank_size, tensor.dtype))


def average_gradients(grads, rank_size, average=True):
    """All-reduce a list of gradients (None kept in place) as one collective; mean if ``average``."""
    present = [_dense(g) for g in grads if g is not None]
    if not present:
        return list(grads)
    reduced = comm.all_reduce(present, "sum", divisor=rank_size if average else None)
    if average:
        reduced = [_divide(r, rank_size) for r in reduced]
    return [None if g is None else reduced.pop(0) for g in grads]


def _average_pairs(grads_and_vars, rank_size):
    pairs = list(grads_and_vars)
    grads = average_gradients([g for g, _ in pairs], rank_size)
    return [(g, v) for g, (_, v) in zip(grads, pairs)]


def allreduce(tensor, average=True):
    """All-reduce one tensor across ranks; the mean (sum / RANK_SIZE) when ``average``."""
    return average_gradients([tensor], _rank_size_from_env(), average)[0]


class NPUDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.train.Optimizer that averages gradients across ranks before applying them."""

    def __init__(self, optimizer, is_weight_update_sharding=False, name=None):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        if is_weight_update_sharding:
            logger.warning("NPUDistributedOptimizer: weight update sharding is not simulated; "
                           "gradients are averaged on every rank instead")
        self._optimizer = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding
        super().__init__(name=name, use_locking=False)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        rank_size = _rank_size_from_env()
        if rank_size <= 1:
            return gradients
        with tf.name_scope(self._name + "_Allreduce"):
            return _average_pairs(gradients, rank_size)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step, name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def npu_distributed_optimizer_wrapper(optimizer):
    """Patch ``optimizer`` in place so its gradients are averaged across ranks; return it.

    RANK_SIZE is read once, now. With rank size 1 (or unset) the patched methods change nothing.
    """
    if isinstance(optimizer, str):
        optimizer = tf.keras.optimizers.get(optimizer)
    rank_size = os.getenv("RANK_SIZE")
    distributed = rank_size is not None and int(rank_size) > 1

    def patch_pairs(name, scope):
        original = getattr(optimizer, name)

        def patched(*args, **kwargs):
            gradients = original(*args, **kwargs)
            if not distributed:
                return gradients
            with tf.name_scope(scope):
                return _average_pairs(gradients, int(rank_size))

        setattr(optimizer, name, patched)

    if hasattr(optimizer, "compute_gradients"):
        patch_pairs("compute_gradients", "Npu_Distributed_optimizer_Allreduce")
    if hasattr(optimizer, "get_gradients"):
        original_get_gradients = optimizer.get_gradients

        def _npu_get_gradients(loss, params):
            grads = original_get_gradients(loss, params)
            if not distributed:
                return grads
            with tf.name_scope("Npu_Distributed_optimizer_get_grads_Allreduce"):
                return average_gradients(list(grads), int(rank_size))

        optimizer.get_gradients = _npu_get_gradients
    if hasattr(optimizer, "_compute_gradients"):
        patch_pairs("_compute_gradients", "Npu_Distributed_optimizer_compute_grads_Allreduce")
    return optimizer


def npu_allreduce(values, reduction="mean", fusion=1, fusion_id=-1, group="hccl_world_group"):
    """All-reduce a list (or one value); "mean" is sum / RANK_SIZE."""
    size = _rank_size_from_env()
    single = not isinstance(values, (list, tuple))
    values = [values] if single else list(values)
    if reduction == "mean":
        result = average_gradients(values, size, average=True)
    else:
        from npu_bridge.hccl import hccl_ops
        result = [hccl_ops.allreduce(_dense(v), reduction, fusion, fusion_id, group) for v in values]
    return result[0] if single else result
