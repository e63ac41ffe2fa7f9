"""Stand-in for the TF2 Ascend adapter ``npu_device`` (simulated on CPU over MPI).

Laid out as the real package: ``npu.distribute``, ``npu.train``, ``npu.ops``, ``npu.compat`` are
the ``npu_device._api`` re-export packages, while ``npu_device.distribute``, ``npu_device.train``...
imported by path are the namespace packages of the implementation modules (``hccl``,
``npu_callbacks``, ``npu_loss_scale_optimizer``...). ``npu.open().as_default()`` makes the
``npu.distribute`` APIs live; ``npu.open()`` alone leaves them silent no-ops, as on the chip. The
simulator does not place ops on an NPU device nor patch ``tf.function``.
"""

from npu_device.npu_device import open
from npu_device.npu_device import npu_compat_function
from npu_device.npu_device import gen_npu_ops
from npu_device.npu_device import global_options
from npu_device.npu_device import set_device_sat_mode
from npu_device.npu_device import is_inf_nan_enabled

from npu_device._api import distribute
from npu_device._api import train
from npu_device._api import ops
from npu_device._api import compat

__simulated__ = True
