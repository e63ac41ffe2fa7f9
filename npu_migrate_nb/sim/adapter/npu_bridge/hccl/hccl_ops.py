"""Stand-in for ``npu_bridge.hccl.hccl_ops``: HCCL collectives as simulated TF ops.

Same signatures and the same checks as the real ops' registrations (``tf_adapter/ops/hccl``):
``HcomAllReduce``/``HcomReduce``/``HcomReduceScatter`` take int8/16/32/64, float16, float32 and
bfloat16 only, with a reduction of sum, max, min or prod; ``HcomBroadcast`` takes a list of
tensors and returns a list; every attribute must have its type (``root_rank=None`` is the
TypeError TensorFlow gives a generated op). ``allreduce`` has a gradient: the gradient summed over
ranks, as registered on the chip. ``fusion``/``fusion_id`` are accepted and ignored: the simulator
fuses each call into one MPI buffer anyway. Only ``hccl_world_group`` exists. At rank size 1 the
input comes back unchanged.
"""

import tensorflow as _tf

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim import float_status as _float_status

_WORLD = "hccl_world_group"
_REDUCTIONS = ("min", "max", "prod", "sum")
_REDUCE_TYPES = (_tf.int8, _tf.int16, _tf.int32, _tf.int64, _tf.float16, _tf.float32, _tf.bfloat16)
_GATHER_TYPES = _REDUCE_TYPES + (_tf.uint64, _tf.uint8, _tf.uint16, _tf.uint32, _tf.float64)


def _check_group(group):
    if group != _WORLD:
        raise ValueError(_("group {group} is not simulated; use {world}").format(group=repr(group), world=repr(_WORLD)))


def _check_int(value, name):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("Expected int for argument '%s' not %r." % (name, value))


def _checked_tensor(tensor, allowed, op_name):
    """The input as a tensor, with the dtype error TensorFlow gives for the op's type attribute."""
    tensor = _tf.convert_to_tensor(tensor)
    if tensor.dtype not in allowed:
        raise TypeError("Value passed to parameter 'input' has DataType %s not in list of allowed values: %s "
                        "(%s)" % (tensor.dtype.name, ", ".join(t.name for t in allowed), op_name))
    return tensor


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(_("reduction must be one of {choices} (HCCL has no 'mean'), got {reduction}").format(
            choices=_REDUCTIONS, reduction=repr(reduction)))


@_tf.custom_gradient
def _summed(tensor):
    reduced = _comm.all_reduce([tensor], "sum")[0]

    def grad(upstream):
        return _comm.all_reduce([upstream], "sum")[0]

    return reduced, grad


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    """All-reduce one tensor across ranks; reduction is "sum", "max", "min" or "prod"."""
    _check_group(group)
    _check_reduction(reduction)
    _check_int(fusion, "fusion")
    _check_int(fusion_id, "fusion_id")
    tensor = _checked_tensor(tensor, _REDUCE_TYPES, "HcomAllReduce")
    if _comm.size() == 1:
        return tensor
    _float_status.offer([tensor])
    if reduction == "sum" and tensor.dtype.is_floating:
        return _summed(tensor)
    return _comm.all_reduce([tensor], reduction)[0]


def allgather(tensor, rank_size, group="hccl_world_group", fusion=0, fusion_id=-1):
    """Concatenate every rank's tensor along axis 0 (the sum of zero-padded slots)."""
    _check_group(group)
    _check_int(rank_size, "rank_size")
    if rank_size <= 0:
        raise ValueError("rank_size should be greater than 0.")
    tensor = _checked_tensor(tensor, _GATHER_TYPES, "HcomAllGather")
    if _comm.size() == 1:
        return tensor
    _float_status.offer([tensor])
    slots = [_tf.zeros_like(tensor) for _unused in range(rank_size)]
    slots[_comm.rank()] = tensor
    return _comm.all_reduce([_tf.concat(slots, axis=0)], "sum")[0]


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):
    """Broadcast a LIST of tensors from ``root_rank``; returns a list."""
    _check_group(group)
    _check_int(root_rank, "root_rank")
    tensors = list(tensor)
    if _comm.size() == 1:
        return tensors
    return _comm.broadcast(tensors, root_rank)


def reduce(tensor, reduction, root_rank, fusion=0, fusion_id=-1, group="hccl_world_group"):
    """The reduction of every rank's tensor, valid on ``root_rank`` (the others' output is the
    simulator's all-reduce too: on the chip it is undefined there)."""
    _check_group(group)
    _check_reduction(reduction)
    _check_int(root_rank, "root_rank")
    tensor = _checked_tensor(tensor, _REDUCE_TYPES, "HcomReduce")
    if _comm.size() == 1:
        return tensor
    _float_status.offer([tensor])
    return _comm.all_reduce([tensor], reduction)[0]
