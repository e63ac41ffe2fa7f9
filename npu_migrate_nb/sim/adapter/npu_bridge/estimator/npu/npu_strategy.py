"""Stand-in for ``npu_bridge.estimator.npu.npu_strategy``: the strategy the vendor's tool puts
where a script had MirroredStrategy, MultiWorkerMirroredStrategy or get_distribution_strategy.

As the real one: a one-device strategy on the CPU (``device="/cpu:0"``) that reports the rank size
as ``num_replicas_in_sync`` and shards a distributed dataset by ``get_rank_size()``/
``get_rank_id()`` (which need collective communication initialised). It aggregates no gradient and
broadcasts no variable: each rank trains alone unless the script adds the adapter's steps.
"""

from tensorflow.python.distribute import distribute_lib
from tensorflow.python.distribute import one_device_strategy

from npu_bridge.estimator.npu import util as util_lib
from hccl.manage.api import get_rank_size
from hccl.manage.api import get_rank_id


class NPUExtended(one_device_strategy.OneDeviceExtended):
    """NPU implemented oneDevice strategy"""

    def __init__(self, container_strategy, device):
        super().__init__(container_strategy, device)

    @property
    def _num_replicas_in_sync(self):
        return int(util_lib.get_ranksize())

    def _experimental_distribute_dataset(self, dataset, options=None):
        return dataset.shard(get_rank_size(), get_rank_id())


class NPUStrategy(distribute_lib.StrategyV1):
    """NPU distribute strategy"""

    def __init__(self, device="/cpu:0"):
        super().__init__(NPUExtended(self, device))
