"""Stand-in for ``hccl.split.api``: gradient split strategies only tune fusion on real chips;
the simulator fuses each call into one buffer anyway, so these accept and ignore their input."""


def set_split_strategy_by_idx(idxList, group="hccl_world_group"):
    return None


def set_split_strategy_by_size(dataSizeList, group="hccl_world_group"):
    return None
