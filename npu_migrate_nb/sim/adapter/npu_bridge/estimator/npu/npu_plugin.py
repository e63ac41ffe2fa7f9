"""Stand-in for ``npu_bridge.estimator.npu.npu_plugin``: the adapter's native plugin.

``is_inf_nan_enabled`` is False: the simulated chip runs in saturation mode, the mode the
loss-scale optimizers read the float status in. Device memory and the plugin's lifetime are the
chip's: ``malloc_shared_memory`` says the simulator cannot run it, ``npu_close`` does nothing.
"""

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim.adapter import cannot_run as _cannot_run


def npu_close():
    return None


def is_inf_nan_enabled():
    return False


def malloc_shared_memory(var_name, shape, data_type):
    raise _cannot_run("npu_plugin.malloc_shared_memory", _("it allocates memory shared on the Ascend device"))
