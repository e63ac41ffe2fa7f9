"""The rules: one module per distributed step and per pitfall. Order matters only for ``missing-setup``,
which runs last."""

from .allreduce import MissingAllreduce
from .batch_not_divisible import BatchNotDivisible
from .broadcast import MissingBroadcast
from .broadcast_before_build import BroadcastBeforeBuild
from .device_id_shard import DeviceIdShard
from .double_allreduce import DoubleAllreduce
from .double_step_division import DoubleStepDivision
from .dtensor import DTensorProgram
from .every_rank_writes import EveryRankWrites
from .hooks_tuple import HooksTuple
from .not_data_parallel import NotDataParallel
from .horovod_leftover import HorovodLeftover
from .loss_scale_not_distributed import LossScaleNotDistributed
from .open_without_as_default import OpenWithoutAsDefault
from .per_rank_logs import PerRankLogs
from .rank_dependent_steps import RankDependentSteps
from .rank_from_hccl_too_early import RankFromHcclTooEarly
from .reduction_mismatch import ReductionMismatch
from .setup import MissingSetup
from .shard import MissingShard
from .shard_after_batch import ShardAfterBatch
from .shared_model_dir import SharedModelDir
from .tf2_broadcast_callback import TF2BroadcastCallback
from .tf_distribute import TfDistributeLeftover
from .tuner_per_rank import TunerPerRank
from .unseeded_shuffle import UnseededShuffle

RULE_CLASSES = (
    NotDataParallel,
    TfDistributeLeftover,
    DTensorProgram,
    MissingBroadcast,
    MissingAllreduce,
    LossScaleNotDistributed,
    MissingShard,
    HooksTuple,
    OpenWithoutAsDefault,
    ShardAfterBatch,
    UnseededShuffle,
    DeviceIdShard,
    BatchNotDivisible,
    TF2BroadcastCallback,
    BroadcastBeforeBuild,
    RankFromHcclTooEarly,
    DoubleStepDivision,
    HorovodLeftover,
    ReductionMismatch,
    DoubleAllreduce,
    SharedModelDir,
    EveryRankWrites,
    RankDependentSteps,
    PerRankLogs,
    TunerPerRank,
    MissingSetup,
)
ALL_RULES = tuple(rule() for rule in RULE_CLASSES)
RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}
