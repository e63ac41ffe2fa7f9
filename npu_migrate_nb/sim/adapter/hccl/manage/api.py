"""Stand-in for ``hccl.manage.api``: rank queries on the simulated cluster.

Like the real API, every query raises ValueError until collective communication is initialised
(``npu.open()`` with RANK_SIZE > 1, ``init_resource()``, or the first collective). The only group
is ``hccl_world_group``; creating other groups is not simulated.
"""

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim import comm as _comm

_WORLD_GROUP = "hccl_world_group"


def _check(group):
    if not _comm.is_initialized():
        raise ValueError(_("collective communication is not initialised: call npu.open().as_default() "
                           "(TF2) or init_resource() (TF1) first, with RANK_SIZE and RANK_ID set"))
    if group != _WORLD_GROUP:
        raise ValueError(_("group {group} does not exist; the simulator has only {world}").format(
            group=repr(group), world=repr(_WORLD_GROUP)))


def get_rank_size(group=_WORLD_GROUP):
    _check(group)
    return _comm.size()


def get_rank_id(group=_WORLD_GROUP):
    _check(group)
    return _comm.rank()


def get_local_rank_size(group=_WORLD_GROUP):
    _check(group)
    return _comm.size()  # every simulated rank lives on this one host


def get_local_rank_id(group=_WORLD_GROUP):
    _check(group)
    return _comm.local_rank()


def get_world_rank_from_group_rank(group, group_rank_id):
    _check(group)
    return group_rank_id


def get_group_rank_from_world_rank(world_rank_id, group):
    _check(group)
    return world_rank_id


def create_group(group, rank_num, rank_ids):
    raise NotImplementedError(_("the simulator supports only hccl_world_group"))


def destroy_group(group):
    raise NotImplementedError(_("the simulator supports only hccl_world_group"))
