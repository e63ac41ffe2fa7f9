"""Stand-in for ``npu_bridge.hccl``."""
