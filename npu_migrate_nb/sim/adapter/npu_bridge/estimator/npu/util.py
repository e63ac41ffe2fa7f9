"""Stand-in for ``npu_bridge.estimator.npu.util``: the rank size, the global dict, the loop and
graph-execution helpers, and the weight-update-sharding bookkeeping (``fair_division``).

``set_iteration_per_loop`` returns what the real one returns (the train op itself for 1, else an
``IterationOp`` grouping it), but on the chip one ``session.run`` of that op then runs
``iterations_per_loop`` steps, and in the simulator it runs one: a warning says so.
``set_graph_exec_config`` checks its arguments and leaves the fetch as it is (its attributes only
steer the graph engine).
"""

import os

import tensorflow as tf

from npu_migrate_nb.sim.adapter import logger as _logger

_global_dict = {}


def check_positive_integer(value, name):
    """Checks whether `value` is a positive integer."""
    if not isinstance(value, int):
        raise TypeError('{} must be int, got {}'.format(name, type(value)))
    if value <= 0:
        raise ValueError('{} must be positive, got {}'.format(name, value))


def get_ranksize():
    if os.getenv("CM_WORKER_SIZE") is not None and os.getenv("RANK_SIZE") is not None:
        raise ValueError("RANK_SIZE and CM_WORK_SIZE cannot be configured at the same time")
    return os.getenv("RANK_SIZE") if os.getenv("RANK_SIZE") is not None else os.getenv("CM_WORKER_SIZE", "1")


def global_dict_init():
    global _global_dict
    _global_dict = {}


def set_value(key, value):
    _global_dict[key] = value


def get_value(key, def_value=None):
    return _global_dict.get(key, def_value)


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    if not isinstance(train_op, tf.Operation):
        raise ValueError("The incoming 'train_op' type is '%s', and the need type is 'Operation'"
                         % (train_op.dtype.name))
    check_positive_integer(iterations_per_loop, "iterations_per_loop")
    if iterations_per_loop == 1:
        return train_op
    _logger.warning("set_iteration_per_loop(%d): on the chip each session.run of the returned op runs %d "
                    "steps; the simulator runs one", iterations_per_loop, iterations_per_loop)
    return tf.group(train_op, name="IterationOp")


def variable_initializer_in_host(var_list):
    return tf.compat.v1.initializers.variables(var_list, name='var_in_host')


def set_graph_exec_config(fetch, dynamic_input=False,
                          dynamic_graph_execute_mode="dynamic_execute",
                          dynamic_inputs_shape_range=None,
                          is_train_graph=False,
                          experimental_config=None):
    if dynamic_graph_execute_mode not in ("lazy_recompile", "dynamic_execute"):
        raise ValueError("dynamic_graph_execute_mode should be lazy_recompile or dynamic_execute")
    if not isinstance(fetch, (tf.Operation, tf.Tensor, tuple, list, str)):
        raise ValueError("fetch is invalid, should be op, tensor, list, tuple or tensor name.")
    if isinstance(fetch, str):
        return tf.compat.v1.get_default_graph().get_tensor_by_name(fetch)
    return fetch


class GradDivisionItem():
    """Class for processing gradient and value"""

    def __init__(self, grad, var):
        self.grad = grad
        self.var = var
        self.size = self._get_size()
        self.root_rank_id = -1

    def _get_size(self):
        shape = self.grad.shape
        if len(shape) <= 0:
            return 0
        size = 1
        for dimension in shape:
            size *= int(dimension)
        return size * self.grad.dtype.size


def fair_division(inputs, number):
    """Give each item a ``root_rank_id``: consecutive items, about equal bytes a rank (the real
    algorithm, kept as it is: which rank updates which variable decides the broadcasts)."""

    def get_sum(input_list):
        return sum(item.size for item in input_list)

    def get_average(input_list, size):
        large_number_list = []
        if size == 1:
            return sum(item.size for item in input_list if item.root_rank_id < 0)
        while True:
            res = 0
            find_large_number = False
            for item in input_list:
                if item not in large_number_list and item.root_rank_id < 0:
                    res += item.size
            average_size = res // (size - len(large_number_list))
            for item in input_list:
                if item not in large_number_list and item.root_rank_id < 0 and item.size > res - item.size:
                    find_large_number = True
                    large_number_list.append(item)
            if not find_large_number:
                break
        return average_size

    if number > len(inputs) or number < 0:
        raise ValueError("'number' is greater than the number of inputs or 'number' is less than 0. ")
    if number == len(inputs):
        for i in range(len(inputs)):
            inputs[i].root_rank_id = i
        return inputs
    j = -1
    last_index = 0
    while True:
        j = j + 1
        total_number = number - j
        if total_number == 0:
            break
        average_size = get_average(inputs, total_number)
        tmp_list = []
        for i in range(last_index, len(inputs) - total_number + 1):
            if get_sum(tmp_list) + inputs[i].size <= average_size:
                inputs[i].root_rank_id = j
                tmp_list.append(inputs[i])
                last_index = i + 1
            else:
                if len(tmp_list) <= 0:
                    inputs[i].root_rank_id = j
                    tmp_list.append(inputs[i])
                    last_index = i + 1
                elif (get_sum(tmp_list) + inputs[i].size - average_size) <= (average_size - get_sum(tmp_list)):
                    inputs[i].root_rank_id = j
                    tmp_list.append(inputs[i])
                    last_index = i + 1
                break
    return inputs


_GRADIENTS_AND_VARS = []


def add_grads_and_vars(grads_and_vars, rank_size):
    global _GRADIENTS_AND_VARS
    items = [GradDivisionItem(grad, var) for grad, var in grads_and_vars if grad is not None]
    _GRADIENTS_AND_VARS = fair_division(items, rank_size)


def get_gid_by_grad(grad):
    gid = -1
    for item in _GRADIENTS_AND_VARS:
        if item.grad.name == grad.name:
            gid = item.root_rank_id
    return gid


def get_gid_by_weight(weight):
    gid = -1
    for item in _GRADIENTS_AND_VARS:
        if item.var.name == weight.name:
            gid = item.root_rank_id
    return gid


def get_all_grad_item():
    return _GRADIENTS_AND_VARS
