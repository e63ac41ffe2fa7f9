"""Stand-in for ``npu_device.distribute.hccl``: the TF2 distribute APIs.

Every API is a silent no-op (input returned unchanged) unless ``npu.open().as_default()`` made a
cluster worker the global context. As on the chip, values go through the HCCL all-reduce one by
one: its dtypes only (no float64), an ``IndexedSlices`` densified by the op's input conversion,
"mean" as the sum times 1/N (integers: divided by N). Where the stand-in differs: one call is one
fused collective (the real one issues one HCCL op per value, fused on the chip), and eager calls
run eagerly instead of through a tf.function.
"""

import tensorflow as tf
from absl import logging

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim import float_status as _float_status
from npu_migrate_nb.sim.adapter import warn_if_list_dropped as _warn_if_list_dropped
from npu_bridge.hccl import hccl_ops as _tf1_hccl_ops
from npu_device.distribute import hccl_ops
from npu_device.distribute.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_device.npu_device import global_npu_ctx
from npu_device.npu_device import npu_compat_function

_WORLD = "hccl_world_group"
_REDUCTIONS = ("mean", "sum", "max", "min", "prod")


def _live():
    ctx = global_npu_ctx()
    return ctx is not None and ctx.is_cluster_worker()


def shard_and_rebatch_dataset(dataset, global_bs):
    """Return ``(dataset.shard(N, rank), global_bs // N)``; does not batch."""
    ctx = global_npu_ctx()
    if ctx is None or ctx.workers_num <= 1:
        return dataset, global_bs
    if global_bs % ctx.workers_num != 0:
        raise ValueError("Batch size must be divisible by num npus: {}".format(ctx.workers_num))
    batch_size = int(global_bs) / ctx.workers_num
    dataset = dataset.shard(ctx.workers_num, ctx.worker_id)
    return dataset, int(batch_size)


def _check(reduction, group):
    if reduction not in _REDUCTIONS:
        raise ValueError(_("reduction must be one of {choices}, got {op}").format(
            choices=_REDUCTIONS, op=repr(reduction)))
    if group != _WORLD:
        raise ValueError(_("group {group} is not simulated; use {world}").format(group=repr(group), world=repr(_WORLD)))


def _hccl_input(value):
    return _tf1_hccl_ops._checked_tensor(value, _tf1_hccl_ops._REDUCE_TYPES, "HcomAllReduce")


def _all_reduce(values, reduction, fusion, fusion_id, group):
    workers_num = global_npu_ctx().workers_num
    mean = reduction == "mean"
    tensors = [_hccl_input(v) for v in values]
    _float_status.offer(tensors)
    reduced = _comm.all_reduce(tensors, "sum" if mean else reduction, scale=1.0 / workers_num if mean else None)
    if mean:
        reduced = [r if r.dtype.is_floating else tf.divide(r, tf.cast(workers_num, r.dtype)) for r in reduced]
    return reduced


def all_reduce(values, reduction="mean", fusion=1, fusion_id=-1, group="hccl_world_group"):
    """All-reduce a value or a list/tuple of values (None entries keep their place)."""
    if not _live():
        logging.info("Skip all reduce as current process is not npu cluster worker")
        return values
    _check(reduction, group)
    is_list_value = isinstance(values, (list, tuple))
    if not is_list_value:
        values = [values]
    reduced = _all_reduce([v for v in values if v is not None], reduction, fusion, fusion_id, group)
    results = [None if v is None else reduced.pop(0) for v in values]
    return results if is_list_value else results[0]


def broadcast(values, root_rank=0, fusion=2, fusion_id=0, group="hccl_world_group"):
    """Assign every variable in ``values`` its value on ``root_rank``, in place; returns None."""
    if not _live():
        logging.info("Skip broadcast as current process is not npu cluster worker")
        return
    if group != _WORLD:
        raise ValueError(_("group {group} is not simulated; use {world}").format(group=repr(group), world=repr(_WORLD)))
    _tf1_hccl_ops._check_int(root_rank, "root_rank")
    variables = list(values) if isinstance(values, (list, tuple)) else [values]
    if not variables:
        return
    _comm.broadcast_variables(variables, root_rank)


def npu_distributed_keras_optimizer_wrapper(optimizer, reduce_reduction="mean", fusion=1, fusion_id=-1,
                                            group="hccl_world_group"):
    """Patch ``optimizer.apply_gradients`` so gradients are all-reduced first; return the optimizer."""
    optimizer = tf.keras.optimizers.get(optimizer)
    org_apply_gradients = optimizer.apply_gradients

    def _npu_distribute_apply_gradients(grads_and_vars, *args, **kwargs):
        grads, variables = zip(*grads_and_vars)
        return org_apply_gradients(zip(all_reduce(grads, reduce_reduction, fusion, fusion_id, group), variables),
                                   *args, **kwargs)

    optimizer.apply_gradients = _npu_distribute_apply_gradients
    return optimizer


def npu_callbacks_append(callbacks_list=()):
    """Append the (defective) TF2 ``NPUBroadcastGlobalVariablesCallback(0)``; same list defect as TF1."""
    _warn_if_list_dropped("npu_callbacks_append", callbacks_list, "callbacks")
    if not isinstance(callbacks_list, list):
        callbacks_list = []
    callbacks_list.append(NPUBroadcastGlobalVariablesCallback(0))
    return callbacks_list
