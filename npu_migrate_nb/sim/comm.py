"""Collectives for the simulated Ascend cluster, carried by MPI (mpi4py, COMM_WORLD).

Who am I, how many are we:
    * started by ``mpiexec`` (PMI/OMPI variables present): rank and size come from MPI;
    * otherwise from the Ascend environment (``RANK_SIZE``/``CM_WORKER_SIZE``, ``RANK_ID``);
      size 1 makes every collective a no-op, size > 1 without MPI is an error.

Three layers, each usable on its own:
    * numpy: :func:`allreduce_arrays`, :func:`broadcast_arrays` (one fused buffer per dtype);
    * TensorFlow: :func:`all_reduce`, :func:`broadcast` work eagerly, inside ``tf.function`` and
      in TF1 graphs. In a graph each API call becomes ONE op holding all its tensors: the native
      kernel of :mod:`native_all_reduce` for an all-reduce of one float32/int32/int64 dtype (no
      Python at run time), else a ``tf.numpy_function``. Successive ops of the same kind in the
      same graph are chained by control dependencies, so every rank issues the MPI calls in the
      same order whatever order the executor picks. All-reduces and broadcasts are separate
      chains: a broadcast op built by a hook after the training graph must not force a training
      step to run with it.
    * bookkeeping for the runner: :func:`current_collective`, :func:`status`, :func:`abort`.

Every collective first all-gathers a small descriptor (kind, op, root, byte count, shape
signature, sequence number). If ranks disagree (they reached different collectives), every rank
raises :class:`CollectiveMismatchError` naming what each rank was doing, instead of hanging or
silently mis-summing.

Collectives run in the calling thread, the main thread (eager code) or a TensorFlow executor
thread (the ``numpy_function`` of a ``tf.function`` or a TF1 graph; the native kernel). Ranks wait
for each other in the descriptor exchange, a nonblocking MPI call waited on by a loop that tests
it for a while and then naps (MPICH itself would spin on a core the other ranks compute on; see
:func:`_wait_politely`): a KeyboardInterrupt or :func:`abort` ends that wait. The data then moves
in one blocking MPI call with every rank present. MPI calls never overlap (one lock). An MPI call
cannot be cancelled: after an interrupted collective the communicator is marked broken and the
rank should be restarted. SIGTERM/SIGKILL are never blocked.

Fused buffers (:func:`_layout`) put each tensor on a 64-byte boundary, so results are aligned
views TensorFlow adopts without a copy; a single tensor is sent from where it lies; receive
buffers of 1 MB and more are recycled once nothing refers to them. Large sums go through an MPI-3
shared window instead of MPI_Allreduce (:func:`_shared_allreduce`): every rank is on this machine.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import math
import os
import sys
import threading
import time
import weakref
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..i18n import _
from .rank_env import machine_cores

logger = logging.getLogger("npu_migrate_nb.sim")

_MPI_ENV_MARKERS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
_REDUCTIONS = ("sum", "max", "min", "prod")
_KIND_CODES = {"all_reduce": 1, "broadcast": 2, "barrier": 3}
_OP_CODES = {None: 0, "sum": 1, "max": 2, "min": 3, "prod": 4}


class CollectiveError(RuntimeError):
    """A collective could not run (bad environment, broken communicator)."""


class CollectiveMismatchError(CollectiveError):
    """Ranks reached different collectives (different order, kind, root or shapes)."""


class CollectiveAborted(CollectiveError):
    """:func:`abort` was called while this rank waited in a collective."""


# --------------------------------------------------------------------------- environment

def env_rank_size() -> int:
    """World size as the Ascend adapter reads it: RANK_SIZE (default "1") or CM_WORKER_SIZE."""
    rank_size = os.environ.get("RANK_SIZE")
    worker_size = os.environ.get("CM_WORKER_SIZE")
    if rank_size is not None and worker_size is not None:
        raise ValueError(_("RANK_SIZE and CM_WORKER_SIZE are both set; the rank-table way (RANK_SIZE, "
                           "RANK_ID, RANK_TABLE_FILE) and the CM_* way cannot be mixed"))
    value = worker_size if worker_size is not None else (rank_size or "1")
    try:
        return int(value)
    except ValueError:
        raise ValueError(_("rank size must be an integer, got {value}").format(value=repr(value))) from None


def env_rank_id() -> Optional[int]:
    """RANK_ID as an int, or None when unset."""
    value = os.environ.get("RANK_ID")
    return None if value in (None, "") else int(value)


_MPI = None  # the mpi4py.MPI module, once imported
_started_by_mpi = False  # once true, true for the life of the process


def under_mpi() -> bool:
    """True when this process was started by mpiexec (or already initialised MPI)."""
    global _started_by_mpi
    if not _started_by_mpi:
        mpi = sys.modules.get("mpi4py.MPI")
        _started_by_mpi = (any(name in os.environ for name in _MPI_ENV_MARKERS)
                           or bool(mpi is not None and mpi.Is_initialized()))
    return _started_by_mpi


def _mpi():
    # Called several times per collective: an import statement costs ~10 us, a global lookup nothing.
    global _MPI
    if _MPI is None:
        from mpi4py import MPI  # imported lazily: it initialises MPI
        _MPI = MPI
    return _MPI


def size() -> int:
    """Number of ranks in the collectives: MPI world size, else the environment's rank size."""
    return _mpi().COMM_WORLD.Get_size() if under_mpi() else env_rank_size()


def rank() -> int:
    """This process's rank: MPI rank, else RANK_ID (default 0)."""
    return _mpi().COMM_WORLD.Get_rank() if under_mpi() else (env_rank_id() or 0)


def local_rank() -> int:
    """Rank within this host (all simulated ranks share one host)."""
    value = os.environ.get("MPI_LOCALRANKID") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
    return int(value) if value is not None else rank()


# --------------------------------------------------------------------------- initialisation

_initialized = False
_init_lock = threading.Lock()


def init() -> int:
    """Initialise collective communication (what HCCL init is to the real adapter).

    Checks that the Ascend environment agrees with the MPI world and returns the world size.
    Raises CollectiveError when RANK_SIZE > 1 but the process is not part of an MPI job, or when
    RANK_SIZE / RANK_ID disagree with MPI.
    """
    global _initialized
    with _init_lock:
        env_size = env_rank_size()
        if under_mpi():
            world, me = size(), rank()
            if env_size > 1 and env_size != world:
                raise CollectiveError(_("RANK_SIZE/CM_WORKER_SIZE is {size} but the simulated cluster "
                                        "has {world} ranks").format(size=env_size, world=world))
            env_id = env_rank_id()
            if env_size > 1 and env_id is not None and env_id != me:
                raise CollectiveError(_("RANK_ID is {rank_id} but this process is MPI rank {rank}").format(
                    rank_id=env_id, rank=me))
        elif env_size > 1:
            raise CollectiveError(_("rank size is {size} but this process was not started by mpiexec; "
                                    "there is no one to communicate with").format(size=env_size))
        _load_native_all_reduce()
        _initialized = True
        return size()


_native = None  # a native_all_reduce.NativeAllReduce once loaded: graph all-reduces then run in C++


def _load_native_all_reduce() -> None:
    """In a TensorFlow rank of a multi-rank job, take the native kernel; its MPI lock and sequence
    counter then serve every collective of the process (native or not), so all stay in one order."""
    global _native, _mpi_lock
    if _native is not None or "tensorflow" not in sys.modules or not under_mpi() or size() == 1:
        return
    from . import native_all_reduce

    _native = native_all_reduce.load(size(), spin_seconds(size()))
    if _native is not None:
        _mpi_lock = _NativeLock(_native.lib)


def is_initialized() -> bool:
    return _initialized


# --------------------------------------------------------------------------- running one collective

@dataclass
class _Job:
    kind: str
    detail: str
    run: Callable[[], Any]
    result: Any = None
    error: Optional[BaseException] = None


_state_lock = threading.Lock()
_current: Optional[str] = None
_current_since: Optional[float] = None
_completed = 0
_sequence = 0  # the next collective's number (the native library counts when it is loaded)
_current_sequence = 0
_broken: Optional[str] = None
_abort_reason: Optional[str] = None
_mpi_lock = threading.Lock()


class _NativeLock:
    """The native library's MPI mutex as a context manager (ctypes releases the GIL while waiting)."""

    def __init__(self, lib):
        self._lib = lib

    def __enter__(self):
        self._lib.npu_sim_lock()

    def __exit__(self, *exc):
        self._lib.npu_sim_unlock()


def _next_sequence() -> int:
    global _sequence
    if _native is not None:
        return _native.lib.npu_sim_next_sequence()
    _sequence += 1
    return _sequence - 1


def _run_job(job: _Job) -> None:
    """Run one collective, keeping :func:`current_collective` up to date; MPI calls never overlap."""
    global _current, _current_since, _completed, _current_sequence
    with _mpi_lock:
        with _state_lock:
            _current_sequence = _next_sequence()
            _current = f"{job.kind} #{_current_sequence}"
            _current_since = time.monotonic()
        try:
            job.result = job.run()
        except BaseException as exc:  # handed back to the waiting caller
            job.error = exc
        finally:
            with _state_lock:
                _current, _current_since = None, None
                _completed += 1


def _submit(kind: str, detail: str, run: Callable[[], Any]) -> Any:
    """Run one collective in the calling thread; MPI calls never overlap.

    No hand-off to another thread: the wait for the other ranks is a Python loop
    (:func:`_wait_politely`), so a KeyboardInterrupt or :func:`abort` ends it in the main thread,
    and a TensorFlow executor thread (``numpy_function``) pays no thread switch per step.
    """
    if _broken:
        raise CollectiveError(_("communicator unusable: {why}; restart the ranks").format(why=_broken))
    if _abort_reason:
        raise CollectiveAborted(_abort_reason)
    job = _Job(kind, detail, run)
    _run_job(job)
    if job.error is not None:
        raise job.error
    return job.result


def current_collective() -> Optional[str]:
    """Name of the collective this rank is inside right now, e.g. "all_reduce #12", else None."""
    if _current is None and _native is not None:
        sequence = _native.lib.npu_sim_current()
        if sequence < 0:
            return None
        kind = "broadcast" if _native.lib.npu_sim_current_kind() == _KIND_CODES["broadcast"] else "all_reduce"
        return f"{kind} #{sequence}"
    return _current


def _waiting_seconds() -> Optional[float]:
    if _current_since is not None:
        return round(time.monotonic() - _current_since, 3)
    if _native is not None:
        seconds = _native.lib.npu_sim_current_seconds()
        return round(seconds, 3) if seconds >= 0 else None
    return None


def status() -> dict:
    """Snapshot for the runner: rank, size, current collective and for how long, counts."""
    with _state_lock:
        return {
            "rank": rank() if (under_mpi() or _initialized) else None,
            "size": size() if (under_mpi() or _initialized) else None,
            "current": current_collective(),
            "waiting_s": _waiting_seconds(),
            "completed": _completed + (_native.lib.npu_sim_completed() if _native is not None else 0),
            "broken": _broken,
            "aborted": _abort_reason,
        }


def abort(reason: str = "aborted by the runner") -> None:
    """Make every current and future wait on a collective raise CollectiveAborted."""
    global _abort_reason
    _abort_reason = reason
    if _native is not None:
        _native.lib.npu_sim_abort()


def _abort_mpi_if_stuck() -> None:
    # MPI_Finalize would hang behind a collective that never completed.
    if _broken and "mpi4py.MPI" in sys.modules:
        sys.stderr.write(f"npu_migrate_nb.sim.comm: {_broken}; aborting MPI\n")
        sys.stderr.flush()
        _mpi().COMM_WORLD.Abort(1)


atexit.register(_abort_mpi_if_stuck)


# --------------------------------------------------------------------------- descriptors

def _signature(arrays: Sequence[np.ndarray]) -> int:
    text = ";".join(f"{a.dtype.str}{a.shape}" for a in arrays)
    return zlib.crc32(text.encode())


def _describe(row: np.ndarray) -> str:
    kinds = {v: k for k, v in _KIND_CODES.items()}
    ops = {v: k for k, v in _OP_CODES.items()}
    kind, op, root, nbytes, sig, seq = (int(x) for x in row[:6])
    text = f"{kinds.get(kind, '?')} #{seq}"
    if kind == _KIND_CODES["all_reduce"]:
        text += f" ({ops.get(op)})"
    if kind == _KIND_CODES["broadcast"]:
        text += _(" (root {root})").format(root=root)
    return text + _(", {nbytes} bytes, shapes {signature}").format(nbytes=nbytes, signature=f"{sig:08x}")


_SHORTEST_NAP_S = 50e-6
_LONGEST_NAP_S = 500e-6


def spin_seconds(ranks: int) -> float:
    """How long a rank polls before it naps (see :func:`_wait_politely`).

    With a core per rank, 20 ms: a rank that naps loses its core, and on a loaded machine getting
    it back can take longer than the skew between two ranks' steps. With more ranks than cores,
    200 us: the cores are what the other ranks need to reach the collective.
    """
    return 0.02 if ranks <= machine_cores() else 200e-6


_spin_s: Optional[float] = None  # spin_seconds(size()), once known


def _wait_politely(request) -> None:
    """Wait for an MPI request without keeping a core busy for long.

    MPICH waits by polling: a rank blocked in MPI spins on its core. Ranks wait for each other in
    the descriptor exchange (the first step of every collective); with more ranks than cores (an
    8-device server on 2 cores) the spinning ranks would take the cores the computing ranks need.
    So: test for :func:`spin_seconds` (ranks that arrive together pay nothing), then nap between
    tests, a tenth of the time waited so far, 50 to 500 us: the other ranks, once in, wait at most
    that long for a napping rank in the data call, and a test every 500 us costs 6-8% of a core
    here (MPICH's own wait: all of it). Once every rank is in, the data moves in one blocking call
    with everyone present.
    """
    global _broken, _spin_s
    if _spin_s is None:
        _spin_s = spin_seconds(size())
    started = time.perf_counter()
    try:
        while not request.Test():
            if _abort_reason:
                raise CollectiveAborted(_("{reason} (while waiting in {collective})").format(
                    reason=_abort_reason, collective=current_collective()))
            waited = time.perf_counter() - started
            if waited > _spin_s:
                time.sleep(min(_LONGEST_NAP_S, max(_SHORTEST_NAP_S, waited / 10)))
            else:
                os.sched_yield()  # as MPICH's own polling does: a runnable rank on this core goes first
    except BaseException:  # KeyboardInterrupt, abort: the request stays pending in MPI
        _broken = _("{collective} was interrupted before it completed").format(collective=current_collective())
        raise


# the descriptor's fields: kind, op, root, bytes, signature (compared), sequence, and two the native
# kernel's large sums exchange (its Agree): the shared result regions this rank offers (none here:
# the numpy path copies its results out), the bytes /dev/shm has free (-1: not asked)
_DESCRIPTOR = 8


def _agree(kind: str, op: Optional[str], root: int, arrays: Sequence[np.ndarray]) -> None:
    """All-gather a descriptor and raise on every rank if ranks are in different collectives."""
    comm = _mpi().COMM_WORLD
    mine = np.array([_KIND_CODES[kind], _OP_CODES[op], root, sum(a.nbytes for a in arrays),
                     _signature(arrays), _current_sequence, 0, -1], dtype=np.int64)
    everyone = np.empty((comm.Get_size(), _DESCRIPTOR), dtype=np.int64)
    _wait_politely(comm.Iallgather(mine, everyone))
    # sequence numbers may legitimately differ only if a rank skipped no-op calls; compare the rest
    if not (everyone[:, :5] == mine[:5]).all():
        lines = "; ".join(_("rank {rank}: {collective}").format(rank=r, collective=_describe(row))
                          for r, row in enumerate(everyone))
        raise CollectiveMismatchError(_("ranks reached different collectives: {ranks}").format(ranks=lines))


# --------------------------------------------------------------------------- numpy layer

def _reduce_dtype(dtype: np.dtype) -> np.dtype:
    """MPI has no half types: reduce float16/bfloat16 in float32."""
    if dtype.itemsize == 2 and (dtype.kind == "f" or dtype.name == "bfloat16"):
        return np.dtype(np.float32)
    return dtype


def _mpi_op(op: str):
    MPI = _mpi()
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


_ALIGN = 64  # TensorFlow adopts numpy memory without copying only when it is 64-byte aligned


def _layout(sizes: Sequence[int], itemsize: int) -> tuple:
    """Offsets (in elements) of each array in a fused buffer, and the buffer's length.

    Each array starts on a 64-byte boundary, so each result is an aligned view that TensorFlow
    adopts without a copy. The native kernel uses the same layout: the same count goes on the wire.
    """
    per_line = _ALIGN // itemsize
    offsets, end = [], 0
    for size in sizes:
        start = -(-end // per_line) * per_line
        offsets.append(start)
        end = start + size
    return offsets, end


_ZEROS = np.zeros(_ALIGN, np.uint8)


def _fuse_into(buffer: np.ndarray, arrays: Sequence[np.ndarray], offsets: Sequence[int],
               factor: Optional[float] = None) -> None:
    """Copy ``arrays`` (times ``factor``) to their ``offsets`` in ``buffer``; the padding between
    them is zeroed."""
    _fuse_range(buffer[:offsets[-1] + arrays[-1].size], arrays, offsets, 0, factor)


def _fuse_range(part: np.ndarray, arrays: Sequence[np.ndarray], offsets: Sequence[int], start: int,
                factor: Optional[float] = None) -> None:
    """Elements ``start:start + part.size`` of the fused buffer (:func:`_fuse_into`) into ``part``.
    Unscaled, in one numpy call (hundreds of gradients: a copy per array would cost more than the
    reduction)."""
    end, cursor, pieces = start + part.size, start, []
    for a, offset in zip(arrays, offsets):
        low, high = max(offset, start), min(offset + a.size, end)
        if high <= low:
            if offset >= end:
                break
            continue
        if low > cursor:  # the padding travels too: keep it harmless for every reduction
            if factor is None:
                pieces.append(_ZEROS[:low - cursor])
            else:
                part[cursor - start:low - start] = 0
        piece = a.reshape(-1)[low - offset:high - offset]
        if factor is None:
            pieces.append(piece)
        else:
            np.multiply(piece, part.dtype.type(factor), out=part[low - start:high - start])
        cursor = high
    if factor is None and pieces:
        np.concatenate(pieces, out=part[:cursor - start], casting="unsafe")
    part[cursor - start:] = 0


def _split(flat: np.ndarray, like: Sequence[np.ndarray], offsets: Sequence[int]) -> list:
    return [flat[start:start + a.size].reshape(a.shape) for a, start in zip(like, offsets)]


# Receive buffers of 1 MB and more are recycled: faulting in fresh pages costs about as much as
# the reduction itself. A buffer is free again once no array view or TF tensor refers to it.
_POOL_MIN_BYTES = 1 << 20
_POOL_MAX_BYTES = 1 << 30
_pool: "dict[int, list[np.ndarray]]" = {}


def _free_buffer(nbytes: int) -> Optional[np.ndarray]:
    for base in _pool.get(nbytes, ()):
        # references: the pool list, this loop variable, getrefcount's argument
        if sys.getrefcount(base) <= 3:
            return base
    return None


def _pooled_total() -> int:
    return sum(len(buffers) * nbytes for nbytes, buffers in _pool.items())


def _aligned_empty(count: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised, 64-byte aligned 1-D array, recycled from the pool when large."""
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    base = _free_buffer(nbytes) if nbytes >= _POOL_MIN_BYTES else None
    if base is None:
        base = np.empty(nbytes + _ALIGN, dtype=np.uint8)
        if nbytes >= _POOL_MIN_BYTES and _pooled_total() + nbytes <= _POOL_MAX_BYTES:
            _pool.setdefault(nbytes, []).append(base)
    offset = (-base.ctypes.data) % _ALIGN
    return base[offset:offset + nbytes].view(dtype)


# Any other scaled reduction (a mean over 3, 6... ranks) of 1 MB and more is a reduce-scatter, the
# scale on this rank's share, and an all-gather (see _scattered_allreduce); the native kernel uses
# the same rule and shares.
_SCATTERED_MIN_BYTES = 1 << 20


def _shares(count: int, per_line: int) -> tuple:
    """Element counts and offsets of each rank's share of ``count``, boundaries on 64-byte lines."""
    n = size()
    counts, displacements, start = [], [], 0
    for r in range(n):
        end = count if r + 1 == n else min(count, -(-(count * (r + 1) // n) // per_line) * per_line)
        displacements.append(start)
        counts.append(max(end - start, 0))
        start = max(start, end)
    return counts, displacements


def _scattered_allreduce(send, recv: np.ndarray, op: str, scale, divisor) -> None:
    """All-reduce into ``recv`` as reduce-scatter, scale this rank's share, all-gather.

    An all-reduce then a scale pass reads and writes the whole result once more (a 64 MB mean cost
    1.3x the raw all-reduce); scaling the share costs 1/N of that pass, on memory just written, and
    MPI's large all-reduce is a reduce-scatter and an all-gather anyway. Each element is still
    scaled once after its whole sum: at 2 ranks the bits of the all-reduce path (a + b is b + a).
    """
    MPI = _mpi()
    counts, displacements = _shares(recv.size, _ALIGN // recv.itemsize)
    me = rank()
    mine = recv[displacements[me]:displacements[me] + counts[me]]
    MPI.COMM_WORLD.Reduce_scatter(send, mine, counts, op=_mpi_op(op))
    _rescale(mine, scale, divisor)
    MPI.COMM_WORLD.Allgatherv(MPI.IN_PLACE, [recv, counts, displacements, MPI._typedict[recv.dtype.char]])


def _rescale(values: np.ndarray, scale, divisor) -> None:
    if scale is not None:
        np.multiply(values, values.dtype.type(scale), out=values)
    if divisor is not None:
        np.divide(values, values.dtype.type(divisor), out=values)


def _exact_factor(op: str, scale, divisor) -> Optional[float]:
    """``scale / divisor`` when it is a power of two and the reduction a sum (a mean over 2, 4 or 8
    ranks), else None.

    Multiplying by 2**k is exact, so scaling each rank's values before the sum gives the bits of
    scaling the sum (outside the subnormal range), and the scale rides on the copy into the
    fused buffer that the reduction makes anyway (MPI copies a separate send buffer too): the mean
    then costs what the sum costs.
    """
    if op != "sum" or (scale is None and divisor is None):
        return None
    factor = (1.0 if scale is None else float(np.float32(scale))) / (1.0 if divisor is None else float(np.float32(divisor)))
    return factor if math.frexp(factor)[0] == 0.5 else None


def _allreduce_group(arrays: Sequence[np.ndarray], op: str, scale, divisor) -> list:
    dtype = arrays[0].dtype
    wire = _reduce_dtype(dtype)
    offsets, count = _layout([a.size for a in arrays], wire.itemsize)
    recv = _aligned_empty(count, wire)
    floating = np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"
    factor = _exact_factor(op, scale, divisor) if floating and wire == dtype else None
    if op == "sum" and wire == dtype and dtype.name in _SHARED_DTYPES and _through_shared_memory(recv.nbytes):
        _shared_allreduce(arrays, offsets, recv, factor, (scale, divisor) if floating and factor is None else None)
        return _split(recv, arrays, offsets)
    scattered = (factor is None and floating and wire == dtype and (scale is not None or divisor is not None)
                 and count * wire.itemsize >= _SCATTERED_MIN_BYTES)
    MPI = _mpi()
    if factor is not None:
        _fuse_into(recv, arrays, offsets, factor)
        MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, recv, op=_mpi_op(op))
        return _split(recv, arrays, offsets)
    if len(arrays) == 1 and arrays[0].dtype == wire and arrays[0].flags.c_contiguous:
        send = arrays[0].reshape(-1)  # sent from where it lies
    elif scattered:  # the fused input cannot be the buffer the shares are gathered in
        send = _aligned_empty(count, wire)
        _fuse_into(send, arrays, offsets)
    else:
        _fuse_into(recv, arrays, offsets)
        send = MPI.IN_PLACE
    if scattered:
        _scattered_allreduce(send, recv, op, scale, divisor)
        return _split(recv, arrays, offsets)
    MPI.COMM_WORLD.Allreduce(send, recv, op=_mpi_op(op))
    if recv.dtype != dtype:
        recv = recv.astype(dtype)
    if floating:
        _rescale(recv, scale, divisor)
    return _split(recv, arrays, offsets)


# --------------------------------------------------------------------------- through shared memory

# All the ranks of the simulator share one machine. A large sum goes through an MPI-3 shared
# window (one slot per rank): each rank copies (fuses) its values into its slot, sums its own
# share of every slot in one pass, and copies every share out, with a barrier between the steps.
# Each byte is copied twice and read once more, where MPICH's all-reduce moves every byte through
# its shared-memory cells several times and, with more ranks than cores, switches between them at
# every step: 43 MB on 8 ranks and 2 cores took 49 ms against MPI_Allreduce's 108 ms (2 ranks:
# 13 ms against 23). Below some size the two barriers cost more than they save. The native kernel
# follows the same rules, slots and order of additions: both paths give the same bits.
_SHARED_DTYPES = ("float32", "int32", "int64")  # the native kernel's (a slot's bytes as these types)
_SHARED_SLOT_BYTES = 32 << 20  # a rank's slot; a larger sum goes through it in chunks


def shared_min_bytes(ranks: int) -> int:
    """The smallest sum that goes through shared memory: 1 MB with more ranks than cores (MPICH's
    steps then wait on context switches), 16 MB with a core per rank (measured crossovers)."""
    return (1 << 20) if ranks > machine_cores() else (16 << 20)


@functools.lru_cache(maxsize=None)
def _shared_settings() -> tuple:
    """(smallest sum through shared memory or None, slot bytes), read once: NPU_SIM_SHARED_MIN_BYTES
    / NPU_SIM_SHARED_SLOT_BYTES set them (0: never), for tests that need chunks on small data."""
    minimum = int(os.environ.get("NPU_SIM_SHARED_MIN_BYTES", shared_min_bytes(size())))
    slot = int(os.environ.get("NPU_SIM_SHARED_SLOT_BYTES", _SHARED_SLOT_BYTES)) // _ALIGN * _ALIGN
    return (minimum if minimum > 0 and slot > 0 else None), slot


_slots: Optional[list] = None  # each rank's slot as a uint8 array, once the window exists
_shared_window = None  # the mpi4py window (numpy path without the native library)
_shared_room = True  # False once /dev/shm turned out too small for the window: sums go through MPI
shared_sums = 0  # sums this process did through shared memory on the numpy path (tests read it)


def _through_shared_memory(nbytes: int) -> bool:
    minimum, _unused = _shared_settings()
    return _shared_room and minimum is not None and nbytes >= minimum


def _free_shared_memory() -> int:
    """The bytes /dev/shm can still give, -1 if unknown (no /dev/shm)."""
    try:
        info = os.statvfs("/dev/shm")
    except OSError:
        return -1
    return info.f_bavail * info.f_frsize


# below it, the chunks' barriers cost more than MPI_Allreduce: at 8 ranks, 43 MB through 1.4 MB slots
# (31 chunks, three barriers each) took longer
_SMALLEST_SLOT = 4 << 20


def _slot_that_fits(configured: int, free_bytes: int, ranks: int) -> int:
    """The configured slot, or less so that the window takes at most half of what /dev/shm has free
    on every rank (``free_bytes``, their minimum; -1 unknown); 0 when that is under
    :data:`_SMALLEST_SLOT` (or the configured slot, if smaller). The native kernel's SlotThatFits."""
    if free_bytes < 0:
        return configured
    slot = min(configured, free_bytes // 2 // ranks // 4096 * 4096)
    return slot if slot >= min(configured, _SMALLEST_SLOT) else 0


def _shared_slots() -> Optional[list]:
    """Every rank's slot, the window allocated at the first use: inside a collective, after the
    descriptor exchange, so every rank allocates it at the same point. The native library owns it
    when loaded (one window for both paths).

    A window larger than /dev/shm's free space maps fine and then kills a rank with SIGBUS at the
    first page the tmpfs cannot give (Docker's default /dev/shm is 64 MB, of which MPICH takes 41 MB
    for 8 ranks): the slots are sized to it first, from the ranks' minimum. None when it has no
    room: large sums then go through MPI_Allreduce."""
    global _slots, _shared_window, _shared_room
    if _slots is not None or not _shared_room:
        return _slots
    import ctypes
    slot = _shared_settings()[1]
    if _native is not None:
        bases = (ctypes.c_void_p * size())()
        slot = _native.lib.npu_sim_shared_slots(bases)  # sized there the same way
        if slot < 0:
            raise CollectiveError(_("could not allocate the shared-memory window"))
        if slot == 0:
            _shared_room = False
            return None
        _slots = [np.ctypeslib.as_array((ctypes.c_uint8 * slot).from_address(base)) for base in bases]
    else:
        MPI = _mpi()
        everywhere = MPI.COMM_WORLD.allreduce(_free_shared_memory(), op=MPI.MIN)
        slot = _slot_that_fits(slot, everywhere, size())
        if slot == 0:
            _shared_room = False
            if rank() == 0:
                print(_("npu-migrate-nb: /dev/shm has {megabytes} MB free for {ranks} ranks: large sums go "
                        "through MPI_Allreduce instead of shared memory (slower; give the container more, e.g. "
                        "docker run --shm-size=1g)").format(megabytes=everywhere >> 20, ranks=size()), file=sys.stderr)
            return None
        _shared_window = MPI.Win.Allocate_shared(slot, 1, comm=MPI.COMM_WORLD)
        _slots = [np.frombuffer(_shared_window.Shared_query(r)[0], np.uint8, count=slot) for r in range(size())]
    return _slots


def _shared_barrier() -> None:
    # MPICH's barrier orders memory (its atomics are full fences on x86): what a rank wrote to its
    # slot before it is what the others read after it.
    _wait_politely(_mpi().COMM_WORLD.Ibarrier())


_SUM_BLOCK = 1 << 16  # elements summed at a time: the block stays in the core's cache


def _sum_share(slots: Sequence[np.ndarray], low: int, high: int, rescale: Optional[tuple]) -> None:
    """This rank's slot[low:high] = slot 0 + slot 1 + ... (rank order), then ``rescale``; block by
    block, each block's inputs read before its place in this rank's slot is written."""
    mine = slots[rank()]
    total = np.empty(min(_SUM_BLOCK, max(high - low, 0)), mine.dtype)
    for start in range(low, high, _SUM_BLOCK):
        end = min(start + _SUM_BLOCK, high)
        block = total[:end - start]
        np.add(slots[0][start:end], slots[1][start:end], out=block)
        for slot in slots[2:]:
            block += slot[start:end]
        if rescale is not None:
            _rescale(block, *rescale)
        mine[start:end] = block


def _shared_allreduce(arrays: Sequence[np.ndarray], offsets: Sequence[int], recv: np.ndarray,
                      factor: Optional[float], rescale: Optional[tuple]) -> None:
    """Sum ``arrays`` of every rank into ``recv`` through the shared window, chunk by chunk:
    fuse into this rank's slot (times an exact ``factor``), barrier, sum this rank's share of all
    slots in rank order (then ``rescale`` = (scale, divisor)) into its own slot, barrier, copy
    every share out. Between chunks a barrier: no slot is refilled before everyone copied it out
    (after the last, the next collective's descriptor exchange is that barrier)."""
    global shared_sums
    shared = _shared_slots()
    if shared is None:  # /dev/shm had no room (on some rank): every rank sums through MPI
        _fuse_into(recv, arrays, offsets, factor)
        _mpi().COMM_WORLD.Allreduce(_mpi().IN_PLACE, recv, op=_mpi().SUM)
        if rescale is not None:
            _rescale(recv, *rescale)
        return
    per_line = _ALIGN // recv.itemsize
    slots = [slot.view(recv.dtype) for slot in shared]
    chunk = slots[0].size // per_line * per_line
    me = rank()
    for start in range(0, recv.size, chunk):
        count = min(chunk, recv.size - start)
        if start:
            _shared_barrier()
        _fuse_range(slots[me][:count], arrays, offsets, start, factor)
        _shared_barrier()
        counts, displacements = _shares(count, per_line)
        _sum_share(slots, displacements[me], displacements[me] + counts[me], rescale)
        _shared_barrier()
        for slot, share, at in zip(slots, counts, displacements):
            recv[start + at:start + at + share] = slot[at:at + share]
    shared_sums += 1


def allreduce_arrays(arrays: Sequence[np.ndarray], op: str = "sum", scale: Optional[float] = None,
                     divisor: Optional[float] = None) -> list:
    """All-reduce numpy arrays with one MPI call per dtype; returns new arrays, same order.

    ``scale`` multiplies and ``divisor`` divides floating results after the reduction (in their
    own dtype), which is how "mean" is built: sum, then times 1/N (TF2) or divided by N (TF1).
    """
    if op not in _REDUCTIONS:
        raise ValueError(_("reduction must be one of {choices}, got {op}").format(choices=_REDUCTIONS, op=repr(op)))
    arrays = [np.asarray(a) for a in arrays]
    for a in arrays:
        if a.dtype == object or a.dtype.kind in "USb":
            raise TypeError(_("cannot all-reduce dtype {dtype}").format(dtype=a.dtype))
    if not arrays or size() == 1:
        return _scaled_copies(arrays, scale, divisor)
    _require_init()

    def run():
        _agree("all_reduce", op, 0, arrays)
        results: list = [None] * len(arrays)
        for dtype in sorted({a.dtype.str for a in arrays}):
            idx = [i for i, a in enumerate(arrays) if a.dtype.str == dtype]
            for i, r in zip(idx, _allreduce_group([arrays[i] for i in idx], op, scale, divisor)):
                results[i] = r
        return results

    return _submit("all_reduce", op, run)


def _scaled_copies(arrays, scale, divisor) -> list:
    out = []
    for a in arrays:
        b = np.array(a, copy=True)
        if b.dtype.kind == "f" and scale is not None:
            b = b * b.dtype.type(scale)
        if b.dtype.kind == "f" and divisor is not None:
            b = b / b.dtype.type(divisor)
        out.append(b)
    return out


def broadcast_arrays(arrays: Sequence[np.ndarray], root: int = 0) -> list:
    """Broadcast numpy arrays from ``root`` as ONE byte buffer; returns the arrays received (on the
    root, a single array comes back as it was given: it is what everyone received)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    for a in arrays:
        if a.dtype == object:
            raise TypeError(_("cannot broadcast object arrays"))
    if not arrays or size() == 1:
        return [a.copy() for a in arrays]
    _require_init()
    if not 0 <= root < size():
        raise ValueError(_("root_rank {root} is outside 0..{last}").format(root=root, last=size() - 1))

    def run():
        _agree("broadcast", None, root, arrays)
        if len(arrays) == 1:  # sent from where it lies, received into one buffer: no fusing
            if rank() == root:
                _mpi().COMM_WORLD.Bcast(arrays[0].reshape(-1).view(np.uint8), root=root)
                return [arrays[0]]
            buffer = _aligned_empty(arrays[0].size, arrays[0].dtype)
            _mpi().COMM_WORLD.Bcast(buffer.view(np.uint8), root=root)  # bytes, as the native kernel sends
            return [buffer.reshape(arrays[0].shape)]
        offsets, count = _layout([a.nbytes for a in arrays], 1)
        buffer = _aligned_empty(count, np.uint8)
        if rank() == root:
            _fuse_into(buffer, [a.reshape(-1).view(np.uint8) for a in arrays], offsets)
        _mpi().COMM_WORLD.Bcast(buffer, root=root)
        return [buffer[start:start + a.nbytes].view(a.dtype).reshape(a.shape) for a, start in zip(arrays, offsets)]

    return _submit("broadcast", f"root {root}", run)


def barrier() -> None:
    """Wait for every rank (a no-op at size 1)."""
    if size() == 1:
        return
    _require_init()

    def run():
        _agree("barrier", None, 0, [])
        _mpi().COMM_WORLD.Barrier()

    _submit("barrier", "", run)


def _require_init() -> None:
    if not _initialized:
        init()


# --------------------------------------------------------------------------- TensorFlow layer

# graph -> {(chain, control-flow context id): [(the placeholders it is fed from, collective op)]}
_chains: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _chain_dependencies(graph, chain: str, feeds: frozenset) -> list:
    """The chain's last op that runs with this one: fed from the same placeholders (or, both fed from
    none, from the graph itself). A TF1 graph holds the training of several models, each run by a
    session call of its own (Keras' train functions): a control dependency on another model's
    collective would run it again, and ask for its inputs."""
    for previous_feeds, op in reversed(_chains.get(graph, {}).get((chain, id(graph._get_control_flow_context())), [])):
        if previous_feeds & feeds or not (previous_feeds or feeds):
            return [op]
    return []


def _remember(graph, chain: str, feeds: frozenset, op) -> None:
    key = (chain, id(graph._get_control_flow_context()))
    _chains.setdefault(graph, {}).setdefault(key, []).append((feeds, op))


def _placeholders_feeding(tensors) -> frozenset:
    """The Placeholder ops the tensors are computed from (a tf.function's arguments and captures, a
    TF1 graph's inputs)."""
    seen, found = set(), set()
    pending = [getattr(t, "op", t) for t in tensors]
    while pending:
        op = pending.pop()
        if op is None or op.name in seen:
            continue
        seen.add(op.name)
        if op.type == "Placeholder":
            found.add(op.name)
            continue
        pending.extend(tensor.op for tensor in op.inputs)
        pending.extend(op.control_inputs)
    return frozenset(found)


def _in_graph() -> bool:
    import tensorflow as tf
    return not tf.executing_eagerly()


def _graph_collective(kind: str, tensors: list, numpy_fn: Callable) -> list:
    """One stateful numpy_function op for the whole call, ordered after the chain's last op."""
    import tensorflow as tf

    def build():
        outs = tf.numpy_function(lambda *arrays: numpy_fn(list(arrays)), tensors, [t.dtype for t in tensors],
                                 stateful=True, name=kind)
        return list(outs) if isinstance(outs, (list, tuple)) else [outs]

    outs = _chained(kind, build, tensors)
    for out, t in zip(outs, tensors):
        out.set_shape(t.shape)
    return outs


def _chained(chain: str, build: Callable[[], list], inputs: list) -> list:
    """Build one collective op with a control dependency on the chain's previous one that runs
    with it (``inputs``: what it is computed from)."""
    import tensorflow as tf
    graph = tf.compat.v1.get_default_graph()
    # A tf.function runs whole each call: everything in it is chained, whatever feeds it.
    feeds = frozenset() if graph.building_function else _placeholders_feeding(inputs)
    with tf.control_dependencies(_chain_dependencies(graph, chain, feeds)):
        outs = build()
    _remember(graph, chain, feeds, getattr(outs[0], "op", outs[0]))  # a tensor's op, or the op itself
    return outs


_numpy_path_forced = False  # see numpy_path_in_graphs


@contextlib.contextmanager
def numpy_path_in_graphs():
    """Graph collectives built inside take the numpy_function path (to compare the two paths)."""
    global _numpy_path_forced
    _numpy_path_forced = True
    try:
        yield
    finally:
        _numpy_path_forced = False


def _native_kernels():
    """The loaded native kernels when graph collectives may use them, else None."""
    if size() == 1:
        return None
    _require_init()
    return None if _numpy_path_forced else _native


def _native_kernel_for(tensors: list):
    """The native all-reduce when it can take these tensors (one dtype it registers), else None."""
    from .native_all_reduce import DTYPES

    dtypes = {t.dtype.name for t in tensors}
    return _native_kernels() if len(dtypes) == 1 and dtypes <= set(DTYPES) else None


def _native_broadcast_for(tensors: list, root: int):
    """The native broadcast when it can take these tensors' dtypes, else None."""
    from .native_all_reduce import BROADCAST_DTYPES

    native = _native_kernels()
    if native is None or not {t.dtype.name for t in tensors} <= set(BROADCAST_DTYPES):
        return None
    if not 0 <= root < size():
        raise ValueError(_("root_rank {root} is outside 0..{last}").format(root=root, last=size() - 1))
    return native


def _eager_array(tensor) -> np.ndarray:
    """A read-only numpy view of an eager tensor (``.numpy()`` would copy)."""
    view = getattr(tensor, "_numpy", None)
    return view() if view is not None else tensor.numpy()


def _eager_tensor(array: np.ndarray):
    """Wrap a numpy result as an eager tensor, sharing its memory when TensorFlow allows."""
    import tensorflow as tf
    if array.flags.c_contiguous and array.__array_interface__["data"][0] % _ALIGN == 0 and array.size:
        try:
            return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
        except Exception:  # dtype DLPack cannot carry (bool, bfloat16...): copy instead
            pass
    return tf.convert_to_tensor(array)


def _to_tensors(values) -> list:
    import tensorflow as tf
    return [tf.convert_to_tensor(v) for v in values]


def _not_for_autograph(function: Callable) -> Callable:
    """Mark ``function`` so that AutoGraph calls it as it is from converted code (its own mark, as
    ``tf.autograph.experimental.do_not_convert`` leaves): it builds ops, it has no Python control
    flow on tensors, and converting it would only convert MPI and compiler calls."""
    function.autograph_info__ = frozenset()
    return function


@_not_for_autograph
def all_reduce(values: Sequence, op: str = "sum", scale: Optional[float] = None,
               divisor: Optional[float] = None) -> list:
    """All-reduce a list of tensors/variables as one fused collective; returns a list of tensors.

    Works eagerly, inside tf.function and in TF1 graphs. ``scale``/``divisor`` apply to floating
    dtypes only (see :func:`allreduce_arrays`).
    """
    tensors = _to_tensors(values)
    if not tensors:
        return []

    def numpy_fn(arrays):
        return allreduce_arrays(arrays, op, scale, divisor)

    if _in_graph():
        native = _native_kernel_for(tensors)
        if native is not None:
            return _chained("all_reduce", lambda: list(native.ops.npu_sim_all_reduce(
                tensors, reduction=op, scale=1.0 if scale is None else scale,
                divisor=1.0 if divisor is None else divisor, name="all_reduce")), tensors)
        return _graph_collective("all_reduce", tensors, numpy_fn)
    return [_eager_tensor(a) for a in numpy_fn([_eager_array(t) for t in tensors])]


@_not_for_autograph
def broadcast(values: Sequence, root: int = 0) -> list:
    """Broadcast a list of tensors/variables from ``root`` as one collective; returns tensors."""
    tensors = _to_tensors(values)
    if not tensors:
        return []

    def numpy_fn(arrays):
        return broadcast_arrays(arrays, root)

    if _in_graph():
        native = _native_broadcast_for(tensors, root)
        if native is not None:
            return _chained("broadcast", lambda: list(native.ops.npu_sim_broadcast(tensors, root=root,
                                                                                   name="broadcast")), tensors)
        return _graph_collective("broadcast", tensors, numpy_fn)
    arrays = [_eager_array(t) for t in tensors]
    received = numpy_fn(arrays)
    # tensors are immutable: what the root sent as it was is its own tensor
    return [t if r is a else _eager_tensor(r) for t, a, r in zip(tensors, arrays, received)]


def _native_variable_broadcast_for(variables: list, root: int):
    """The native in-place broadcast when every variable is a resource variable of a dtype it takes."""
    from tensorflow.python.ops import resource_variable_ops
    from .native_all_reduce import BROADCAST_DTYPES

    if not all(isinstance(v, resource_variable_ops.BaseResourceVariable) and v.dtype.name in BROADCAST_DTYPES
               for v in variables):
        return None
    return _native_broadcast_for([], root)


def _eager_variable_list(native, variables: Sequence):
    """In a ``tf.function`` over variables made eagerly: one resource holding them all, made now,
    which the function captures as one input instead of a handle per variable (TensorFlow's cost of
    a call grows with its inputs: for a model's 160 variables, more than the broadcast's own). None
    in a TF1 graph, whose variables are the graph's, and for a variable the function itself
    initializes (it does not exist before the function runs)."""
    import tensorflow as tf

    with tf.init_scope():
        if not tf.executing_eagerly():
            return None
        handles = [v.handle for v in variables]
        if not all(isinstance(handle, tf.__internal__.EagerTensor) for handle in handles):
            return None
        try:
            return native.ops.npu_sim_variable_list(handles)
        except tf.errors.OpError:  # a variable this function initializes does not exist yet
            return None


@_not_for_autograph
def broadcast_variables(variables: Sequence, root: int = 0):
    """Give every variable its value on ``root``, in place: None eagerly, an op in a graph.

    Resource variables, with the native kernels loaded, receive straight into their own buffers,
    which lie from the list's first broadcast on in one buffer: one message; otherwise this is
    :func:`broadcast` and an assignment on every rank but the root (which holds what it sent).
    """
    import tensorflow as tf

    variables = list(variables)
    if not variables or size() == 1:
        return None if tf.executing_eagerly() else tf.no_op()
    native = _native_variable_broadcast_for(variables, root)
    if native is not None:
        if tf.executing_eagerly():
            native.ops.npu_sim_broadcast_variables([v.handle for v in variables], root=root)
            return None
        listed = _eager_variable_list(native, variables)
        if listed is not None:
            return _chained("broadcast", lambda: [native.ops.npu_sim_broadcast_variable_list(
                listed, root=root, name="broadcast_variables")], [])[0]
        return _chained("broadcast", lambda: [native.ops.npu_sim_broadcast_variables(
            [v.handle for v in variables], root=root, name="broadcast_variables")], [v.handle for v in variables])[0]
    received = broadcast([v.value() if hasattr(v, "value") else v for v in variables], root)
    if rank() == root:
        return None if tf.executing_eagerly() else tf.group(*received)
    assigned = [tf.compat.v1.assign(v, value) for v, value in zip(variables, received)]
    return None if tf.executing_eagerly() else tf.group(*assigned)
