"""Stand-in for ``npu_device._api.compat``: what ``npu.compat`` gives."""

from npu_device.npu_device import enable_v1
from . import v1
