"""Stand-in for ``npu_device._api.distribute``: what ``npu.distribute`` gives."""

from npu_device.distribute.hccl import all_reduce
from npu_device.distribute.hccl import broadcast
from npu_device.distribute.hccl import npu_distributed_keras_optimizer_wrapper
from npu_device.distribute.hccl import shard_and_rebatch_dataset
