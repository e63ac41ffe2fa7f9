"""Stand-in for ``npu_device._api.train``: what ``npu.train`` gives."""

from . import optimizer
