"""Build, load and configure the native collective kernels (``native_all_reduce.cc``): the all-reduce
and the broadcast of graphs.

In a graph (``tf.function``, Keras ``fit``, TF1 sessions) an all-reduce through ``numpy_function``
pays the GIL, a Python call and numpy conversions at every step; the kernels do the same work in
C++ (see the .cc for the contract they share with :mod:`comm`). It is compiled once per machine, the
way TensorFlow documents custom ops (``g++`` with ``tf.sysconfig`` flags), into the user's cache
directory under a name keyed by the source, TensorFlow version and flags; ranks that start together
wait for one build (a file lock), and the file appears atomically.

:func:`load` returns None, and :mod:`comm` keeps its ``numpy_function`` path, when the switch
``NPU_SIM_NATIVE=0`` is set or anything is missing: a compiler, TensorFlow's headers, an MPI with
MPICH's integer handles.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger("npu_migrate_nb.sim")

SWITCH = "NPU_SIM_NATIVE"
SOURCE = Path(__file__).with_name("native_all_reduce.cc")
DTYPES = ("float32", "int32", "int64")  # what the all-reduce kernel registers; others take the numpy path
BROADCAST_DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")


@dataclass
class NativeAllReduce:
    ops: Any          # the module tf.load_op_library returns: ops.npu_sim_all_reduce(...)
    lib: ctypes.CDLL  # the same library, for the lock, the sequence counter and the state


_loaded: Optional[object] = None  # a NativeAllReduce, or False once a load failed


def load(world_size: int, spin_seconds: float) -> Optional[NativeAllReduce]:
    """The configured kernel for this MPI process, or None (reason logged once)."""
    global _loaded
    if _loaded is None:
        try:
            _loaded = _load(world_size, spin_seconds) or False
        except Exception as exc:  # a missing compiler or header must not stop a simulation
            logger.warning("npu_migrate_nb: native all-reduce unavailable, using numpy_function (%s)", exc)
            _loaded = False
    return _loaded or None


def _load(world_size: int, spin_seconds: float) -> Optional[NativeAllReduce]:
    if os.environ.get(SWITCH, "1") == "0":
        return None
    import tensorflow as tf
    from mpi4py import MPI

    if MPI._sizeof(MPI.COMM_WORLD) != ctypes.sizeof(ctypes.c_int):
        raise RuntimeError("this MPI's handles are not MPICH's integers")
    path = built_library(tf)
    ops = tf.load_op_library(str(path))
    lib = ctypes.CDLL(str(path))
    _declare(lib)
    mpi = ctypes.CDLL(_libmpi_path())
    handles = (MPI.COMM_WORLD, MPI.INT64_T, MPI.FLOAT, MPI.INT32_T, MPI.BYTE, MPI.SUM, MPI.MAX, MPI.MIN, MPI.PROD)
    functions = (mpi.MPI_Allreduce, mpi.MPI_Iallgather, mpi.MPI_Test, mpi.MPI_Bcast, mpi.MPI_Reduce_scatter,
                 mpi.MPI_Allgatherv)
    lib.npu_sim_configure(*[ctypes.cast(function, ctypes.c_void_p) for function in functions],
                          ctypes.c_void_p(int(MPI.IN_PLACE) & (2**64 - 1)), int(spin_seconds * 1e9),
                          world_size, MPI.COMM_WORLD.Get_rank(),
                          *[MPI._handleof(handle) for handle in handles])
    from .comm import _shared_settings

    minimum, slot = _shared_settings()
    lib.npu_sim_configure_shared(*[ctypes.cast(function, ctypes.c_void_p) for function in
                                   (mpi.MPI_Win_allocate_shared, mpi.MPI_Win_shared_query, mpi.MPI_Ibarrier)],
                                 MPI._handleof(MPI.INFO_NULL), -1 if minimum is None else minimum, slot)
    return NativeAllReduce(ops, lib)


def _declare(lib: ctypes.CDLL) -> None:
    lib.npu_sim_configure.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int64] + [ctypes.c_int] * 11
    lib.npu_sim_configure.restype = None
    lib.npu_sim_configure_shared.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.npu_sim_configure_shared.restype = None
    lib.npu_sim_shared_slots.argtypes = [ctypes.c_void_p]
    lib.npu_sim_shared_slots.restype = ctypes.c_int64
    for name in ("npu_sim_shared_sums", "npu_sim_region_sums", "npu_sim_regions"):
        getattr(lib, name).restype = ctypes.c_int64
    lib.npu_sim_shared_slot_bytes.restype = ctypes.c_int64
    for name in ("npu_sim_next_sequence", "npu_sim_current", "npu_sim_completed"):
        getattr(lib, name).restype = ctypes.c_int64
    lib.npu_sim_current_kind.restype = ctypes.c_int
    lib.npu_sim_current_seconds.restype = ctypes.c_double
    for name in ("npu_sim_lock", "npu_sim_unlock", "npu_sim_abort"):
        getattr(lib, name).restype = None


def _libmpi_path() -> str:
    """The MPI library mpi4py loaded into this process (so handles and functions match)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)  # address perms offset dev inode [path, spaces kept]
            if len(fields) == 6 and os.path.basename(fields[5].rstrip()).startswith("libmpi.so"):
                return fields[5].rstrip()
    raise RuntimeError("mpi4py's MPI library is not loaded in this process")


def _tensorflow_flags(tf) -> list:
    """``tf.sysconfig``'s compile and link flags, pointing at the TensorFlow package. It finds its
    headers and library beside ``import tensorflow``'s module, which in the simulator's TF1 mode is
    ``tf.compat.v1`` (``tensorflow/_api/v2/compat/v1``): there they are not, and the kernel failed to
    build, leaving TF1 graphs on the slower numpy_function path."""
    import importlib

    package = os.path.dirname(os.path.dirname(importlib.import_module("tensorflow.python").__file__))
    seen_from = os.path.dirname(tf.__file__)
    flags = [*tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
    return [flag.replace(seen_from, package) for flag in flags]


def built_library(tf) -> Path:
    """Path of the compiled kernel, building it first when this machine has none for this source."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise RuntimeError("no C++ compiler (g++) to build it")
    flags = ["-shared", "-fPIC", "-O3", *_tensorflow_flags(tf)]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join([tf.__version__, compiler, *flags]).encode()).hexdigest()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npu_migrate_nb"
    target = cache / f"native_all_reduce-{key[:16]}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
            built = subprocess.run([compiler, str(SOURCE), "-o", str(partial), *flags],
                                   capture_output=True, text=True, timeout=600)
            if built.returncode != 0:
                partial.unlink(missing_ok=True)
                raise RuntimeError(f"{compiler} failed: {built.stderr.strip()[-500:]}")
            os.replace(partial, target)
    return target
