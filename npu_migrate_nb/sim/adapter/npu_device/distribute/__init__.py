"""Stand-in for ``npu_device.distribute`` (what ``npu.distribute`` gives)."""

from npu_device.distribute.hccl import all_reduce
from npu_device.distribute.hccl import broadcast
from npu_device.distribute.hccl import shard_and_rebatch_dataset
from npu_device.distribute.hccl import npu_distributed_keras_optimizer_wrapper
from npu_device.distribute.hccl import npu_callbacks_append
from npu_device.distribute.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_device.distribute.npu_callbacks import broadcast_keras_model
