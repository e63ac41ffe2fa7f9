"""Stand-in for ``npu_bridge.npu_cpu``."""
