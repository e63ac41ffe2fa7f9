"""Stand-ins for the Ascend adapter modules (``npu_bridge``, ``npu_device``, ``hccl``).

The folder is laid out as the real import paths, so adding :data:`ADAPTER_DIR` to ``sys.path``
makes ``from npu_bridge.npu_init import *`` and ``import npu_device as npu`` work unchanged on a
CPU-only machine. Nothing here is importable until :func:`enable` is called, and ``enable`` refuses
to shadow a real adapter. The stand-ins carry their collectives over MPI via
:mod:`npu_migrate_nb.sim.comm`.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys

from ...i18n import _

ADAPTER_DIR = os.path.dirname(os.path.abspath(__file__))
STAND_IN_PACKAGES = ("npu_bridge", "npu_device", "hccl")

logger = logging.getLogger("npu_migrate_nb.sim")


def _real_adapter_present() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in ("npu_bridge", "npu_device"))


def enable(force: bool = False) -> bool:
    """Put the stand-ins on ``sys.path`` unless a real adapter is importable (``force``: even then,
    ahead of it).

    Returns True when simulation is on (the stand-ins are what ``import npu_bridge`` gives).
    """
    if is_enabled():
        return True
    if _real_adapter_present() and not force:
        return False
    sys.path.insert(0, ADAPTER_DIR)
    importlib.invalidate_caches()
    return True


def is_enabled() -> bool:
    """True when the stand-ins are on ``sys.path``."""
    return ADAPTER_DIR in sys.path


def disable() -> None:
    """Take the stand-ins off ``sys.path`` and forget the imported stand-in modules."""
    while ADAPTER_DIR in sys.path:
        sys.path.remove(ADAPTER_DIR)
    for name in list(sys.modules):
        if name.split(".")[0] in STAND_IN_PACKAGES and _is_stand_in(sys.modules[name]):
            del sys.modules[name]
    importlib.invalidate_caches()


def _is_stand_in(module) -> bool:
    path = getattr(module, "__file__", None) or ""
    return os.path.abspath(path).startswith(ADAPTER_DIR + os.sep)


def warn_pitfall(code: str, message: str) -> None:
    """Log a warning that names the analyzer's pitfall code, e.g. ``hooks-tuple``."""
    logger.warning("%s: %s", code, message, extra={"pitfall": code})


def warn_if_list_dropped(function_name: str, argument, what: str) -> None:
    """Log ``hooks-tuple`` when ``*_append(argument)`` will drop the caller's items.

    The real ``npu_hooks_append``/``npu_callbacks_append`` start a new list whenever the argument
    is not a list; an empty tuple (their default) loses nothing and is not reported.
    """
    if isinstance(argument, list) or (isinstance(argument, tuple) and not argument):
        return
    if isinstance(argument, tuple):
        dropped = _("the caller's {count} {what} were dropped").format(count=len(argument), what=what)
    else:
        dropped = _("anything the caller meant to keep was dropped")
    warn_pitfall("hooks-tuple", _("{function}() was given {type} instead of a "
                                  "list, so it started a new list and {dropped}; pass a list").format(
        function=function_name, type=type(argument).__name__, dropped=dropped))


class SimulatorCannotRun(NotImplementedError):
    """An adapter API whose work only an Ascend chip does (an NPU kernel, profiling, shared device
    memory): the stand-in says so in one line rather than pretend."""


def cannot_run(api: str, why: str):
    """The one-line error of an API the simulator does not reproduce."""
    return SimulatorCannotRun(_("{api}: {why}; the simulator cannot run it on the CPU").format(api=api, why=why))


class GeneratedOps:
    """Stands for the adapter's generated op library (``helper.get_gen_ops()``, ``npu.gen_npu_ops``).

    The ops with a CPU equivalent are given as keyword functions; any other op is an NPU kernel and
    calling it raises :class:`SimulatorCannotRun` naming it (never an AttributeError).
    """

    def __init__(self, owner: str, **cpu_ops):
        self._owner = owner
        self.__dict__.update(cpu_ops)

    def __getattr__(self, op_name):
        if op_name.startswith("__"):
            raise AttributeError(op_name)
        api = f"{self._owner}.{op_name}"

        def npu_kernel(*args, **kwargs):
            raise cannot_run(api, _("an NPU kernel with no CPU version"))

        npu_kernel.__name__ = op_name
        return npu_kernel
