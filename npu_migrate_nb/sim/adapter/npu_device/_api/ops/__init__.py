"""Stand-in for ``npu_device._api.ops``: what ``npu.ops`` gives."""

from npu_device.ops.train_ops import gelu
