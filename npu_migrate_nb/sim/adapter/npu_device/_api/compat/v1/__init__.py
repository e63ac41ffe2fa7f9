"""Stand-in for ``npu_device._api.compat.v1``: what ``npu.compat.v1`` gives."""

from npu_device.compat.utils import SessionConfigBuilder
