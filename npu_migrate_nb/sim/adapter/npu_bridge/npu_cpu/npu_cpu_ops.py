"""Stand-in for ``npu_bridge.npu_cpu.npu_cpu_ops``: the AI CPU ops of the chip's host."""

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim.adapter import cannot_run as _cannot_run


def embeddingrankid(addr_tensor, index, row_memory=320, mode='mod'):
    raise _cannot_run("npu_cpu_ops.embeddingrankid", _("an AI CPU kernel of the Ascend host with no CPU version"))
