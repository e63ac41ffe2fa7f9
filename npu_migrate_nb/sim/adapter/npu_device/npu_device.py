"""Stand-in for ``npu_device.npu_device``: opening the (simulated) NPU and the global context.

``open()`` reads the world size as the real one does (``RANK_SIZE``, else ``CM_WORKER_SIZE``; both
set is a ValueError) and, in distributed mode, needs either a rank table (``RANK_TABLE_FILE`` and
``RANK_ID``) or the ``CM_CHIEF_IP`` way (which also needs ``CM_CHIEF_PORT`` and
``CM_CHIEF_DEVICE``), never both; it then initialises the MPI-backed collectives. The simulator
also checks that the rank table lists the ``RANK_ID``. ``as_default()`` only sets the global
context: the simulator does not replace TensorFlow's context, ``tf.function`` or device placement.
``enable_v1()`` turns TensorFlow 2 behaviour off, as on the chip (its ``_tf_adapter.so`` is the
chip's). ``gen_npu_ops`` has the CPU form of ``fast_gelu``; its other ops are NPU kernels.
"""

import builtins as _builtins
import contextlib as _contextlib
import json as _json
import os
import threading

import tensorflow as tf

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim.adapter import GeneratedOps as _GeneratedOps
from npu_migrate_nb.sim.adapter import logger as _logger
from npu_device.configs.npu_config import NpuConfig
from npu_device.ops.train_ops import _fast_gelu

NPU = "/job:localhost/replica:0/task:0/device:NPU"

gen_npu_ops = _GeneratedOps("npu_device.gen_npu_ops", fast_gelu=lambda features, name=None: _fast_gelu(features))

_npu_ctx_lock = threading.Lock()
_npu_device_instances = {}
_global_npu_ctx = None
_global_options = None


def set_device_sat_mode(mode):
    if mode != 0:
        raise ValueError(_("the simulator models the chip in saturation mode (0) only, the mode the loss-scale "
                           "optimizers read the float status in; got {mode}").format(mode=repr(mode)))


def is_inf_nan_enabled():
    return False


def global_options():
    global _global_options
    if _global_options is None:
        _global_options = NpuConfig()
    return _global_options


def enable_v1():
    if len(_npu_device_instances) > 0:
        os.environ['ASCEND_DEVICE_ID'] = str(list(_npu_device_instances.keys())[0])
    tf.compat.v1.disable_v2_behavior()


def get_ranksize():
    if os.getenv("CM_WORKER_SIZE") is not None and os.getenv("RANK_SIZE") is not None:
        raise ValueError("RANK_SIZE and CM_WORK_SIZE cannot be configured at the same time")
    return os.getenv('RANK_SIZE') if os.getenv("RANK_SIZE") is not None else os.getenv('CM_WORKER_SIZE', '1')


def set_cm_chief_worksize_env(global_kw_options=None, env_cm_chief_ip=None, workers_num=None):
    env_cm_chief_port = os.getenv("CM_CHIEF_PORT")
    env_cm_chief_device = os.getenv("CM_CHIEF_DEVICE")
    if not env_cm_chief_port:
        raise RuntimeError('You must specify cm chief port by set env CM_CHIEF_PORT in distribution mode')
    if not env_cm_chief_device:
        raise RuntimeError('You must specify cm chief device by set env CM_CHIEF_DEVICE in distribution mode')
    if not env_cm_chief_ip:
        raise RuntimeError('You must specify cm chief ip by set env CM_CHIEF_IP in distribution mode')
    global_kw_options['_distribute.cm_chief_ip'] = env_cm_chief_ip
    global_kw_options['_distribute.cm_chief_port'] = env_cm_chief_port
    global_kw_options['_distribute.cm_chief_worker_device'] = env_cm_chief_device
    global_kw_options['_distribute.cm_worker_ip'] = os.getenv("CM_WORKER_IP")
    global_kw_options['_distribute.cm_worker_size'] = str(workers_num)


def set_rank_table_file_env(global_kw_options=None, env_rank_table=None):
    env_worker_id = os.getenv('RANK_ID')
    if not env_worker_id:
        raise RuntimeError('You must specify rank id by set env RANK_ID in distribution mode')
    _check_rank_table(env_rank_table, env_worker_id)
    global_kw_options['_distribute.rank_table'] = env_rank_table
    global_kw_options['_distribute.rank_id'] = env_worker_id


def _check_rank_table(path, rank_id):
    try:
        with _builtins.open(path) as handle:
            table = _json.load(handle)
    except (OSError, ValueError) as exc:
        raise RuntimeError(_("cannot read rank table {path}: {error}").format(path=repr(path), error=exc)) from None
    rank_ids = {str(device.get("rank_id")) for server in table.get("server_list", [])
                for device in server.get("device", [])}
    if str(rank_id) not in rank_ids:
        raise RuntimeError(_("RANK_ID {rank_id} is not a rank_id in rank table {path} "
                             "(it lists {listed})").format(rank_id=rank_id, path=repr(path), listed=sorted(rank_ids)))


def _check_distributed_env(workers_num):
    options = global_options().as_dict()
    env_cm_chief_ip = os.getenv("CM_CHIEF_IP")
    env_rank_table = os.getenv("RANK_TABLE_FILE")
    if env_cm_chief_ip is not None and env_rank_table is not None:
        raise RuntimeError('CM_CHIEF_IP and RANK_TABLE_FILE cannot be configured at the same time.')
    if env_cm_chief_ip is not None:
        set_cm_chief_worksize_env(options, env_cm_chief_ip, workers_num)
    elif env_rank_table is not None:
        set_rank_table_file_env(options, env_rank_table)
    else:
        raise RuntimeError('CM_CHIEF_IP and RANK_TABLE_FILE are all not be configured.')


def open(device_id=None):
    """Initiate and return a NPU device handle."""
    if device_id is None:
        device_id = int(os.getenv("ASCEND_DEVICE_ID", '0'))
    with _npu_ctx_lock:
        if device_id in _npu_device_instances:
            _logger.info("Npu instance on device %s already created", device_id)
            return _npu_device_instances[device_id]
        if _npu_device_instances:
            raise RuntimeError("Failed create npu instance on device {} as existed instance on {}"
                               .format(device_id, list(_npu_device_instances)))
        workers_num = int(get_ranksize())
        worker_id = 0
        if workers_num > 1:
            _check_distributed_env(workers_num)
            _comm.init()
            from hccl.manage.api import get_rank_id
            worker_id = get_rank_id()
        handle = NpuDeviceHandle(None, device_id, {}, workers_num, worker_id)
        _npu_device_instances[device_id] = handle
        return handle


def close():
    """Forget the opened device and the global context (the real one closes the device backend)."""
    global _global_npu_ctx
    with _npu_ctx_lock:
        _npu_device_instances.clear()
        _global_npu_ctx = None


def global_npu_ctx():
    return _global_npu_ctx


def npu_compat_function(func=None, *args, **kwargs):
    """``tf.function`` without XLA, as the real one (the chip compiles the graph itself)."""

    def never_nested_decorator(f):
        kwargs.pop('experimental_compile', None)
        kwargs.pop('jit_compile', None)
        return tf.function(*args, **kwargs)(f)

    if func is not None:
        return never_nested_decorator(func)
    return never_nested_decorator


class NpuDeviceHandle:
    """Handle of an opened (simulated) NPU."""

    def __init__(self, ctx, device_id, device_options, workers_num, worker_id):
        self._ctx = ctx
        self._device_id = device_id
        self._device_name = NPU + ":" + str(device_id)
        self._device_options = device_options
        self.workers_num = workers_num
        self.worker_id = worker_id

    def name(self):
        return self._device_name

    def scope(self):
        return _contextlib.nullcontext()

    def is_cluster_worker(self):
        return self.workers_num > 1 and self.workers_num > self.worker_id >= 0

    def as_default(self):
        """Make this device the default one: the distribute APIs become live."""
        global _global_npu_ctx
        _global_npu_ctx = self
        return self
