"""Stand-in for ``npu_device.compat.v1.npu_init``: ``npu_bridge.npu_init`` less the TF1 loss-scale
classes, which the build's copy removes (``upgrade_tf1_compat_tf2.py``)."""

from npu_bridge.npu_init import *  # noqa: F401,F403 -- the copy's names are npu_init's

for _removed in ("NPULossScaleOptimizer", "FixedLossScaleManager", "ExponentialUpdateLossScaleManager"):
    globals().pop(_removed, None)
del _removed
