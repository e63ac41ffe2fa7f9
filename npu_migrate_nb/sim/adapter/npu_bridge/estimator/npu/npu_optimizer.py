"""Stand-in for ``npu_bridge.estimator.npu.npu_optimizer``: gradient aggregation (TF1 side).

As on the chip: dense gradients are averaged (summed over ranks, divided by the rank size),
``IndexedSlices`` are all-gathered (values and indices; the values divided by the rank size) and
stay ``IndexedSlices``; the rank size is ``RANK_SIZE``, else ``CM_WORKER_SIZE`` (both set is a
ValueError). ``NPUDistributedOptimizer(is_weight_update_sharding=True)`` needs ``DEVICE_ID``
(which it takes for this rank's id, as the real code does), refuses more ranks than gradients,
splits the variables between the ranks with the real ``fair_division``, has each rank apply only
its share and then broadcasts every variable from the rank that updated it. ``NPUOptimizer`` and
``KerasDistributeOptimizer`` follow their source; with ``is_loss_scale=True`` the float status is
the simulator's (:mod:`npu_migrate_nb.sim.float_status`).

Where the stand-in differs: the dense gradients of one call are reduced as ONE fused collective
(the real adapter fuses them on the chip too, ``fusion=1``; the numbers are the same); the
wrapper's patched methods forward every argument (Keras 2.15 passes ``tape=``); and the JOB_ID the
real ``NPUBasics`` reads the rank size through is not required.
"""

import os
import weakref as _weakref

import tensorflow as tf
from keras.src.optimizers.legacy import optimizer_v2

from npu_migrate_nb.sim import comm as _comm
from npu_migrate_nb.sim import float_status as _float_status
from npu_bridge.estimator.npu import util
from npu_bridge.hccl import hccl_ops


def _rank_size():
    return int(util.get_ranksize())


def _divide(tensor, rank_size):
    if tensor.dtype.is_floating:
        return tensor  # already divided inside the collective, in the tensor's own dtype
    return tf.compat.v1.div(tensor, tf.cast(rank_size, tensor.dtype))


def _gathered(value, rank_size, average, group="hccl_world_group"):
    values = hccl_ops.allgather(value.values, rank_size, group)
    indices = hccl_ops.allgather(value.indices, rank_size, group)
    if average:
        values = tf.compat.v1.div(values, tf.cast(rank_size, value.values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=value.dense_shape)


def _mean_of_each(grads, rank_size):
    """Every gradient of ``grads`` averaged over ranks (None kept in place); dense ones fused."""
    dense = [g for g in grads if g is not None and not isinstance(g, tf.IndexedSlices)]
    _float_status.offer(dense)
    reduced = _comm.all_reduce(dense, "sum", divisor=rank_size) if dense else []
    reduced = [_divide(r, rank_size) for r in reduced]
    means = []
    for grad in grads:
        if grad is None:
            means.append(None)
        elif isinstance(grad, tf.IndexedSlices):
            means.append(_gathered(grad, rank_size, True))
        else:
            means.append(reduced.pop(0))
    return means


def _mean_of_pairs(grads_and_vars, rank_size):
    pairs = list(grads_and_vars)
    grads = _mean_of_each([g for g, _ in pairs], rank_size)
    return [(g, v) for g, (_, v) in zip(grads, pairs)]


def allreduce(tensor, average=True):
    """All-reduce one tensor (all-gather an IndexedSlices) across ranks; the mean when ``average``."""
    size = _rank_size()
    if isinstance(tensor, tf.IndexedSlices):
        return _gathered(tensor, size, average)
    summed = hccl_ops.allreduce(tensor, "sum")
    if not average:
        return summed
    return tf.compat.v1.div(summed, tf.cast(size, summed.dtype))


def _local_rank_id():
    local_rank_id = os.getenv('DEVICE_ID')
    if local_rank_id is None or int(local_rank_id) < 0:
        raise ValueError('Please set the correct RANK_ID value, current RANK_ID is:', local_rank_id)
    return int(local_rank_id)


def reduce(tensor, root_rank, average=True, fusion=0, fusion_id=-1):
    """The sum (mean if ``average``) of every rank's tensor on ``root_rank``; elsewhere the sum."""
    size = _rank_size()
    if isinstance(tensor, tf.IndexedSlices):
        return _gathered(tensor, size, average)
    local_rank_id = _local_rank_id()
    summed = hccl_ops.reduce(tensor, "sum", root_rank, fusion, fusion_id)
    if root_rank != local_rank_id or not average:
        return summed
    return tf.compat.v1.div(summed, tf.cast(size, tensor.dtype))


class _GraphStatus:
    """Per graph, the float status of the gradients a loss-scaling optimizer computed there."""

    def __init__(self):
        self._by_graph = _weakref.WeakKeyDictionary()

    def remember(self, status):
        self._by_graph[tf.compat.v1.get_default_graph()] = status

    def recall(self):
        return self._by_graph.get(tf.compat.v1.get_default_graph())


def _local_scaled_grads(compute):
    """Run ``compute`` (an inner ``compute_gradients``); return its pairs and the float status of
    what this rank computed: the collectives' operands if any, else the returned gradients."""
    with _float_status.capture() as offered:
        pairs = compute()
    return pairs, _float_status.status(offered or [g for g, _ in pairs])


class NPUOptimizer(tf.compat.v1.train.Optimizer):
    """Averages gradients over ranks when ``is_distributed`` and applies loss scaling in backprop
    when ``is_loss_scale``, skipping the update of a step whose float status says it overflowed
    (summed over ranks when distributed)."""

    def __init__(self, opt, loss_scale_manager=None, is_distributed=False, is_loss_scale=False,
                 is_tailing_optimization=False, name=None):
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._float_status = tf.constant([0.0], dtype=tf.float32)
        self._is_distributed = is_distributed
        self._is_loss_scale = is_loss_scale
        self._is_tailing_optimization = is_tailing_optimization
        self._is_overall_finite = None
        self._statuses = _GraphStatus()
        if is_loss_scale and loss_scale_manager is None:
            raise ValueError("is_loss_scale is True, loss_scale_manager can not be None")
        if name is None:
            name = "NPUOptimizer{}".format(type(opt).__name__)
        self._name = name
        super().__init__(name=self._name, use_locking=False)

    def compute_gradients(self,
                          loss,
                          var_list=None,
                          gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                          aggregation_method=None,
                          colocate_gradients_with_ops=False,
                          grad_loss=None):
        if self._is_loss_scale:
            loss_scale = self._loss_scale_manager.get_loss_scale()
            loss_value = loss() if callable(loss) else loss
            scaled_loss = loss_value * tf.cast(loss_scale, loss_value.dtype.base_dtype)
        else:
            scaled_loss = loss
        gradients, status = _local_scaled_grads(lambda: self._opt.compute_gradients(
            scaled_loss, var_list=var_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss))
        self._statuses.remember(status)
        if self._is_distributed and _rank_size() > 1:
            with tf.name_scope(self._name + "_Allreduce"):
                gradients = _mean_of_pairs(gradients, _rank_size())
        if self._is_loss_scale:
            return _down_scale(gradients, loss_scale)
        return gradients

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if not self._is_loss_scale:
            return self._opt.apply_gradients(grads_and_vars, global_step, name)
        grads_and_vars = list(grads_and_vars)
        self._reduce_all([g for g, _ in grads_and_vars])
        update_variables = tf.cond(self._is_overall_finite,
                                   lambda: self._opt.apply_gradients(grads_and_vars, global_step, name),
                                   _float_status.skip_recorder(global_step, type(self).__name__))
        return tf.group(update_variables, self._loss_scale_manager.update_loss_scale(self._is_overall_finite))

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._opt.variables(*args, **kwargs)

    def _reduce_all(self, grads):
        status = self._statuses.recall()
        if status is None:  # gradients from elsewhere: judge them at the scale they were computed at
            status = _float_status.status(grads, self._loss_scale_manager.get_loss_scale())
        if self._is_distributed and _rank_size() > 1:
            status = hccl_ops.allreduce([status], "sum", fusion=0)
        self._is_overall_finite = tf.reduce_all(tf.equal(status, 0))


def _down_scale(grads_vars, loss_scale):
    reciprocal = tf.math.reciprocal(loss_scale)
    return [(None if g is None else g * tf.cast(reciprocal, g.dtype.base_dtype), v) for g, v in grads_vars]


class NPUDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.train.Optimizer that averages gradients across ranks before applying them."""

    def __init__(self, optimizer,
                 is_weight_update_sharding=False,
                 name=None):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        self._optimizer = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding
        super().__init__(name=name, use_locking=False)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        rank_size = _rank_size()
        if rank_size <= 1:
            return gradients
        if self._is_weight_update_sharding and rank_size > len(gradients):
            raise ValueError("The number of gradients is less than rank_size, "
                             "so weight_update_sharding cannot be executed")
        if self._is_weight_update_sharding:
            _local_rank_id()
            util.add_grads_and_vars(gradients, rank_size)
            scope = self._name + "_Reduce_Weight_Update_Sharding"
        else:
            scope = self._name + "_Allreduce"
        with tf.name_scope(scope):
            # on the chip each gradient is reduced to the rank that updates its variable: the
            # numbers there are this mean, and no other rank uses its copy
            return _mean_of_pairs(gradients, rank_size)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if _rank_size() <= 1 or not self._is_weight_update_sharding:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        return self._apply_share_then_broadcast(list(grads_and_vars), global_step, name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)

    def _apply_share_then_broadcast(self, grads_and_vars, global_step, name):
        me = _local_rank_id()
        owners = {id(var): util.get_gid_by_weight(var) for _, var in grads_and_vars}
        mine = [(g, v) for g, v in grads_and_vars if owners[id(v)] == me]
        applied = self._optimizer.apply_gradients(mine, global_step, name)
        broadcasts = []
        with tf.control_dependencies([applied]), tf.name_scope(self._name + "_Broadcast_Weight_Update_Sharding"):
            for owner in sorted(set(owners.values())):
                shared = [v for _, v in grads_and_vars if owners[id(v)] == owner]
                broadcasts.append(_comm.broadcast_variables(shared, owner))
        return tf.group([applied] + [b for b in broadcasts if b is not None])


class KerasDistributeOptimizer(optimizer_v2.OptimizerV2):
    """Wraps a Keras optimizer so that its gradients are averaged across ranks."""

    def __init__(self, optimizer, name="NpuKerasOptimizer", **kwargs):
        super().__init__(name, **kwargs)
        self._optimizer = optimizer
        if hasattr(optimizer, "get_gradients"):
            old_get_gradient = optimizer.get_gradients

            def new_get_gradient(loss, params):
                grads = old_get_gradient(loss, params)
                if _rank_size() <= 1:
                    return grads
                with tf.name_scope(name + "_Allreduce"):
                    return _mean_of_each(list(grads), _rank_size())

            optimizer.get_gradients = new_get_gradient

    def get_updates(self, loss, params):
        return self._optimizer.get_updates(loss, params)

    def apply_gradients(self, grads_and_vars, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, name)

    def get_config(self):
        config = {"optimizer": self._optimizer}
        return dict(list(super().get_config().items()) + list(config.items()))

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        if hasattr(self._optimizer, "_compute_gradients"):
            gradients = self._optimizer._compute_gradients(loss, var_list, grad_loss, tape=tape)
        else:  # a Keras 2.11+ optimizer
            gradients = self._optimizer.compute_gradients(loss, var_list, tape=tape)
        if _rank_size() <= 1:
            return gradients
        with tf.name_scope(self._name + "_Allreduce"):
            return _mean_of_pairs(gradients, _rank_size())


def npu_distributed_optimizer_wrapper(optimizer):
    """Patch ``optimizer`` in place so its gradients are averaged across ranks; return it.

    The rank size is read once, now. With rank size 1 the patched methods change nothing.
    """
    if isinstance(optimizer, str):
        optimizer = tf.keras.optimizers.get(optimizer)
    rank_size = int(util.get_ranksize())

    def patch(method, scope, pairs=True):
        original = getattr(optimizer, method)

        def patched(*args, **kwargs):
            gradients = original(*args, **kwargs)
            if rank_size <= 1:
                return gradients
            with tf.name_scope(scope):
                if pairs:
                    return _mean_of_pairs(gradients, rank_size)
                return _mean_of_each(list(gradients), rank_size)

        setattr(optimizer, method, patched)

    if hasattr(optimizer, "compute_gradients"):
        patch("compute_gradients", "Npu_Distributed_optimizer_Allreduce")
    if hasattr(optimizer, "get_gradients"):
        patch("get_gradients", "Npu_Distributed_optimizer_get_grads_Allreduce", pairs=False)
    if hasattr(optimizer, "_compute_gradients"):
        patch("_compute_gradients", "Npu_Distributed_optimizer_compute_grads_Allreduce")
    return optimizer


def npu_allreduce(values, reduction="mean", fusion=1, fusion_id=-1, group="hccl_world_group"):
    """All-reduce a list (or one value); "mean" is sum / rank size; IndexedSlices are all-gathered."""
    single = not isinstance(values, (list, tuple))
    values = [values] if single else list(values)
    size = _rank_size()
    if reduction == "mean":
        result = _mean_of_each(values, size)
    else:
        result = [_gathered(v, size, False, group) if isinstance(v, tf.IndexedSlices)
                  else hccl_ops.allreduce(v, reduction, fusion, fusion_id, group) for v in values]
    return result[0] if single else result
