"""Stand-in for ``npu_device._api.train.optimizer``: what ``npu.train.optimizer`` gives."""

from npu_device.train.optimizer.npu_loss_scale_optimizer import NpuLossScaleOptimizer
