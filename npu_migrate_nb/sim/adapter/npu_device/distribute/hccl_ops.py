"""Stand-in for ``npu_device.distribute.hccl_ops``: the TF2 adapter's HCCL ops, the same kernels
as ``npu_bridge.hccl.hccl_ops`` (the same dtype checks, gradient and list broadcast), with this
module's own signatures (``allgather`` takes no fusion arguments here)."""

from npu_bridge.hccl import hccl_ops as _tf1_ops


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    return _tf1_ops.allreduce(tensor, reduction, fusion, fusion_id, group)


def allgather(tensor, rank_size, group="hccl_world_group"):
    return _tf1_ops.allgather(tensor, rank_size, group)


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):
    return _tf1_ops.broadcast(tensor, root_rank, fusion, fusion_id, group)


def reduce(tensor, reduction, root_rank, fusion=0, fusion_id=-1, group="hccl_world_group"):
    return _tf1_ops.reduce(tensor, reduction, root_rank, fusion, fusion_id, group)
