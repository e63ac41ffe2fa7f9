"""Stand-in for ``npu_bridge.hccl.hccl_ops``: HCCL collectives as simulated TF ops.

Same signatures as the real ops. ``fusion``/``fusion_id`` are accepted and ignored: the simulator
always fuses one call into one MPI buffer. Differs from the real ops: no gradient is registered
for ``allreduce``, IndexedSlices are densified, and groups other than ``hccl_world_group`` are not
simulated. At rank size 1 the input is returned unchanged.
"""

import tensorflow as tf

from npu_migrate_nb.sim import comm

_WORLD = "hccl_world_group"
_REDUCTIONS = ("sum", "max", "min", "prod")


def _check_group(group):
    if group != _WORLD:
        raise ValueError(f"group {group!r} is not simulated; use {_WORLD!r}")


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    """All-reduce one tensor across ranks; reduction is "sum", "max", "min" or "prod"."""
    _check_group(group)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS} (HCCL has no 'mean'), got {reduction!r}")
    if comm.size() == 1:
        return tensor
    return comm.all_reduce([_dense(tensor)], reduction)[0]


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):
    """Broadcast a LIST of tensors from ``root_rank``; returns a list."""
    _check_group(group)
    tensors = list(tensor)
    if comm.size() == 1:
        return tensors
    return comm.broadcast(tensors, root_rank)


def allgather(tensor, rank_size, fusion=0, fusion_id=-1, group="hccl_world_group"):
    """Concatenate every rank's tensor along axis 0 (sum of zero-padded slots)."""
    _check_group(group)
    if comm.size() == 1:
        return tensor
    tensor = tf.convert_to_tensor(tensor)
    slots = [tf.zeros_like(tensor) for _ in range(rank_size)]
    slots[comm.rank()] = tensor
    return comm.all_reduce([tf.concat(slots, axis=0)], "sum")[0]


def _dense(value):
    if isinstance(value, tf.IndexedSlices):
        return tf.convert_to_tensor(value)
    return value
