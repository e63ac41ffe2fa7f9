"""Stand-in for ``npu_bridge.estimator.npu``."""
