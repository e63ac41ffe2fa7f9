"""Stand-in for ``npu_bridge.estimator.npu.npu_config``: NPURunConfig and its option objects.

Same parameters and defaults as the real classes (an unknown keyword is a TypeError, as there).
NPURunConfig checks its arguments as the real one does and passes the RunConfig ones through
(``save_checkpoints_steps`` becomes 100 when neither it nor ``save_checkpoints_secs`` is given);
the NPU-only ones are kept (``_npu_options``) and change nothing on the CPU.
"""

from enum import Enum

import tensorflow as _tf

_RUN_CONFIG_ARGS = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                    "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
                    "keep_checkpoint_every_n_hours", "log_step_count_steps", "train_distribute",
                    "eval_distribute")


def _check_positive_integer(value, name):
    if not isinstance(value, int):
        raise TypeError("{} must be int, got {}".format(name, type(value)))
    if value <= 0:
        raise ValueError("{} must be positive, got {}".format(name, value))


def _check_nonnegative_integer(value, name):
    if not isinstance(value, int):
        raise TypeError("{} must be int, got {}".format(name, type(value)))
    if value < 0:
        raise ValueError("{} must be nonnegative, got {}".format(name, value))


class ProfilingConfig():
    def __init__(self,
                 enable_profiling=False,
                 profiling_options=None):
        self._enable_profiling = enable_profiling
        self._profiling_options = profiling_options


class MemoryConfig():
    def __init__(self,
                 atomic_clean_policy=0,
                 static_memory_policy=0,
                 memory_optimization_policy=None):
        self._atomic_clean_policy = atomic_clean_policy
        self._static_memory_policy = static_memory_policy
        self._memory_optimization_policy = memory_optimization_policy


class DumpConfig():
    def __init__(self,
                 enable_dump=False,
                 dump_path=None,
                 dump_step=None,
                 dump_mode="output",
                 enable_dump_debug=False,
                 dump_debug_mode="all",
                 dump_data="tensor",
                 dump_layer=None):
        self._enable_dump = enable_dump
        self._dump_path = dump_path
        self._dump_step = dump_step
        self._dump_mode = dump_mode
        self._enable_dump_debug = enable_dump_debug
        self._dump_debug_mode = dump_debug_mode
        self.dump_data = dump_data
        self.dump_layer = dump_layer


class DynamicInputConfig():
    def __init__(self, input_shape, dynamic_dims, dynamic_node_type):
        self._input_shape = input_shape
        self._dynamic_dims = dynamic_dims
        self._dynamic_node_type = dynamic_node_type


class NpuExecutePlacement(Enum):
    """npu execute place option. """
    ALL = "all"
    CUBE = "cube"
    VECTOR = "vector"
    TAISHAN = "taishan"
    DVPP = "dvpp"
    HOST = "host"


class NPURunConfig(_tf.estimator.RunConfig):
    """RunConfig with the NPU options (checked as on the chip, kept, not acted on)."""

    def __init__(self,
                 iterations_per_loop=1,
                 profiling_config=None,
                 model_dir=None,
                 tf_random_seed=None,
                 save_summary_steps=0,
                 save_checkpoints_steps=None,
                 save_checkpoints_secs=None,
                 session_config=None,
                 keep_checkpoint_max=5,
                 keep_checkpoint_every_n_hours=10000,
                 log_step_count_steps=100,
                 distribute=None,
                 enable_data_pre_proc=True,
                 precision_mode=None,
                 enable_reduce_precision=False,
                 variable_format_optimize=None,
                 mix_compile_mode=False,
                 hcom_parallel=True,
                 graph_memory_max_size=None,
                 variable_memory_max_size=None,
                 dump_config=None,
                 stream_max_parallel_num=None,
                 is_tailing_optimization=False,
                 horovod_mode=False,
                 graph_run_mode=1,
                 op_debug_level=None,
                 enable_scope_fusion_passes=None,
                 enable_exception_dump=2,
                 op_select_implmode=None,
                 optypelist_for_implmode=None,
                 dynamic_input_config=None,
                 aoe_mode=None,
                 work_path=None,
                 buffer_optimize="l2_optimize",
                 enable_small_channel=0,
                 fusion_switch_file=None,
                 enable_compress_weight=False,
                 compress_weight_conf=None,
                 op_compiler_cache_mode=None,
                 op_compiler_cache_dir=None,
                 debug_dir=None,
                 hcom_multi_mode=False,
                 dynamic_input=None,
                 dynamic_graph_execute_mode="dynamic_execute",
                 dynamic_inputs_shape_range=None,
                 train_distribute=None,
                 eval_distribute=None,
                 local_rank_id=None,
                 local_device_list=None,
                 session_device_id=None,
                 distribute_config=None,
                 modify_mixlist=None,
                 op_precision_mode=None,
                 device_type="default_device_type",
                 soc_config=None,
                 hccl_timeout=None,
                 op_wait_timeout=None,
                 op_execute_timeout=None,
                 HCCL_algorithm=None,
                 customize_dtypes=None,
                 op_debug_config=None,
                 memory_config=None,
                 experimental_config=None,
                 topo_sorting_mode=None,
                 aoe_config_file=None,
                 insert_op_file=None,
                 stream_sync_timeout=-1,
                 event_sync_timeout=-1,
                 external_weight=False,
                 es_cluster_config=None,
                 deterministic=0,
                 frozen_variable=False,
                 variable_placement="Device",
                 jit_compile="auto",
                 precision_mode_v2=None,
                 ac_parallel_enable=None):
        _check_positive_integer(iterations_per_loop, "iterations_per_loop")
        if not isinstance(mix_compile_mode, bool):
            raise TypeError('"mix_compile_mode" type must be bool')
        if mix_compile_mode is True and iterations_per_loop != 1:
            raise ValueError('"iterations_per_loop" must be 1 with "mix_compile_mode" is True')
        if not isinstance(jit_compile, str):
            raise TypeError("Expected str, got " + type(jit_compile).__name__)
        if dump_config is not None and not isinstance(dump_config, DumpConfig):
            raise ValueError("`dump_config` must be provided with type `DumpConfig`")
        if not isinstance(horovod_mode, bool):
            raise ValueError('"horovod_mode" type must be bool')
        _check_nonnegative_integer(graph_run_mode, "graph_run_mode")
        if graph_run_mode > 1:
            raise ValueError('"graph_run_mode" value must be 0 or 1')
        _check_nonnegative_integer(enable_exception_dump, "enable_exception_dump")
        if dynamic_input_config is not None and not isinstance(dynamic_input_config, DynamicInputConfig):
            raise ValueError("dynamic_input_config must be provided with type DynamicInputConfig")
        arguments = dict(locals())
        del arguments["self"]
        if save_checkpoints_secs is None and save_checkpoints_steps is None:
            arguments["save_checkpoints_steps"] = 100
        self.iterations_per_loop = iterations_per_loop
        self.mix_compile_mode = mix_compile_mode
        self.enable_data_pre_proc = enable_data_pre_proc
        self.is_tailing_optimization = is_tailing_optimization
        self.horovod_mode = horovod_mode
        self.graph_run_mode = graph_run_mode
        self.op_debug_level = op_debug_level
        self.enable_exception_dump = enable_exception_dump
        self._dump_config = dump_config
        self._profiling_config = profiling_config
        self._precision_mode = precision_mode
        self._npu_options = {k: v for k, v in arguments.items() if k not in _RUN_CONFIG_ARGS}
        super().__init__(**{k: arguments[k] for k in _RUN_CONFIG_ARGS})
