"""Stand-in for ``npu_bridge.estimator.npu.npu_config``: NPURunConfig and its option objects.

NPURunConfig is a thin ``tf.estimator.RunConfig`` subclass: the RunConfig arguments are passed
through, the NPU-only arguments are kept as attributes and otherwise ignored.
"""

import tensorflow as tf


class ProfilingConfig:
    def __init__(self, enable_profiling=False, profiling_options=None, **kwargs):
        self._enable_profiling = enable_profiling
        self._profiling_options = profiling_options


class DumpConfig:
    def __init__(self, enable_dump=False, dump_path=None, dump_step=None, dump_mode="output",
                 enable_dump_debug=False, dump_debug_mode="all", **kwargs):
        self._enable_dump = enable_dump
        self._dump_path = dump_path


class DynamicInputConfig:
    def __init__(self, input_shape, dynamic_dims, dynamic_node_type):
        self._input_shape = input_shape
        self._dynamic_dims = dynamic_dims
        self._dynamic_node_type = dynamic_node_type


class NPURunConfig(tf.estimator.RunConfig):
    """RunConfig with the NPU options (accepted, kept, not acted on by the simulator)."""

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
                 variable_format_optimize=True,
                 mix_compile_mode=False,
                 hcom_parallel=False,
                 graph_memory_max_size=None,
                 variable_memory_max_size=None,
                 auto_tune_mode=None,
                 dump_config=None,
                 stream_max_parallel_num=None,
                 is_tailing_optimization=False,
                 horovod_mode=False,
                 graph_run_mode=1,
                 op_debug_level=0,
                 enable_scope_fusion_passes=None,
                 enable_exception_dump=0,
                 op_select_implmode=None,
                 optypelist_for_implmode=None,
                 dynamic_input_config=None,
                 **npu_options):
        self.iterations_per_loop = iterations_per_loop
        self.horovod_mode = horovod_mode
        self.enable_data_pre_proc = enable_data_pre_proc
        self.mix_compile_mode = mix_compile_mode
        self.graph_run_mode = graph_run_mode
        self.op_debug_level = op_debug_level
        self.is_tailing_optimization = is_tailing_optimization
        self._profiling_config = profiling_config
        self._precision_mode = precision_mode
        self._dump_config = dump_config
        self._distribute = distribute
        self._npu_options = dict(npu_options)
        super().__init__(model_dir=model_dir,
                         tf_random_seed=tf_random_seed,
                         save_summary_steps=save_summary_steps,
                         save_checkpoints_steps=save_checkpoints_steps,
                         save_checkpoints_secs=save_checkpoints_secs,
                         session_config=session_config,
                         keep_checkpoint_max=keep_checkpoint_max,
                         keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
                         log_step_count_steps=log_step_count_steps)
