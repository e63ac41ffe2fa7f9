"""Stand-in for ``npu_device.distribute.hccl_ops`` (same ops as ``npu_bridge.hccl.hccl_ops``)."""

from npu_bridge.hccl.hccl_ops import allreduce, broadcast, allgather  # noqa: F401
