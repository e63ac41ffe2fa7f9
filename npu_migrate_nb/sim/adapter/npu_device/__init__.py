"""Stand-in for the TF2 Ascend adapter ``npu_device`` (simulated on CPU over MPI).

``npu.open().as_default()`` makes the ``npu.distribute`` APIs live; ``npu.open()`` alone leaves
them silent no-ops, as on the chip. The simulator does not place ops on an NPU device nor patch
``tf.function``.
"""

from npu_device.npu_device import open
from npu_device.npu_device import close
from npu_device.npu_device import global_npu_ctx
from npu_device.npu_device import global_options
from npu_device.npu_device import never_nested_function
from npu_device.npu_device import NpuConfig as Config
from npu_device import distribute

__simulated__ = True
