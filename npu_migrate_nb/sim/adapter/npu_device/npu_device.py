"""Stand-in for ``npu_device.npu_device``: opening the (simulated) NPU and the global context.

``open()`` reads the world size from RANK_SIZE (or CM_WORKER_SIZE; both set is an error) and, in
distributed mode, requires RANK_TABLE_FILE plus RANK_ID (or the CM_CHIEF_IP way, not mixed with a
rank table) like the real adapter; it then initialises the MPI-backed collectives. The rank table
is checked for the RANK_ID. ``as_default()`` only sets the global context: the simulator does not
replace TensorFlow's context, ``tf.function`` or device placement.
"""

import builtins
import contextlib
import json
import os
import threading

import tensorflow as tf

from npu_migrate_nb.sim import comm
from npu_migrate_nb.sim.adapter import logger

NPU = "/job:localhost/replica:0/task:0/device:NPU"

_npu_ctx_lock = threading.Lock()
_npu_device_instances = {}
_global_npu_ctx = None


class NpuConfig:
    """Option bag standing in for the real NpuConfig (any attribute may be set)."""

    def as_dict(self):
        return dict(self.__dict__)


_global_options = NpuConfig()


def global_options():
    return _global_options


def never_nested_function(func=None, *args, **kwargs):
    """The simulator keeps tf.function as is."""
    if func is not None:
        return tf.function(func, *args, **kwargs)
    return lambda f: tf.function(f, *args, **kwargs)


def _check_rank_table(path, rank_id):
    try:
        with builtins.open(path) as handle:
            table = json.load(handle)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read rank table {path!r}: {exc}") from None
    rank_ids = {str(device.get("rank_id")) for server in table.get("server_list", [])
                for device in server.get("device", [])}
    if str(rank_id) not in rank_ids:
        raise RuntimeError(f"RANK_ID {rank_id} is not a rank_id in rank table {path!r} "
                           f"(it lists {sorted(rank_ids)})")



def _check_distributed_env():
    rank_table = os.getenv("RANK_TABLE_FILE")
    chief_ip = os.getenv("CM_CHIEF_IP")
    if rank_table and chief_ip:
        raise RuntimeError("CM_CHIEF_IP and RANK_TABLE_FILE cannot be configured at the same time")
    if chief_ip:
        return
    if not rank_table:
        raise RuntimeError("You must specify a rank table file by set env RANK_TABLE_FILE in distribution mode")
    rank_id = os.getenv("RANK_ID")
    if not rank_id:
        raise RuntimeError("You must specify rank id by set env RANK_ID in distribution mode")
    _check_rank_table(rank_table, rank_id)


def open(device_id=None):
    """Initiate and return a NPU device handle."""
    if device_id is None:
        device_id = int(os.getenv("ASCEND_DEVICE_ID", "0"))
    with _npu_ctx_lock:
        if device_id in _npu_device_instances:
            logger.info("Npu instance on device %s already created", device_id)
            return _npu_device_instances[device_id]
        if _npu_device_instances:
            raise RuntimeError("Failed create npu instance on device {} as existed instance on {}"
                               .format(device_id, list(_npu_device_instances)))
        workers_num = comm.env_rank_size()
        worker_id = 0
        if workers_num > 1:
            _check_distributed_env()
            comm.init()
            from hccl.manage.api import get_rank_id
            worker_id = get_rank_id()
        handle = NpuDeviceHandle(device_id, workers_num, worker_id)
        _npu_device_instances[device_id] = handle
        return handle


def close():
    """Forget the opened device and the global context."""
    global _global_npu_ctx
    with _npu_ctx_lock:
        _npu_device_instances.clear()
        _global_npu_ctx = None


def global_npu_ctx():
    return _global_npu_ctx


class NpuDeviceHandle:
    """Handle of an opened (simulated) NPU."""

    def __init__(self, device_id, workers_num, worker_id):
        self._device_id = device_id
        self._device_name = NPU + ":" + str(device_id)
        self.workers_num = workers_num
        self.worker_id = worker_id

    def name(self):
        return self._device_name

    def scope(self):
        return contextlib.nullcontext()

    def is_cluster_worker(self):
        return self.workers_num > 1 and self.workers_num > self.worker_id >= 0

    def as_default(self):
        """Make this device the default one: the distribute APIs become live."""
        global _global_npu_ctx
        _global_npu_ctx = self
        return self
