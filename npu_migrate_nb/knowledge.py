"""What the analyzer knows about TensorFlow and the Ascend adapter: canonical names, in one place.

Names are canonical (see :func:`npu_migrate_nb.facts.canonical`): ``tensorflow.compat.v1.X`` is
``tensorflow.X``, ``keras.X`` is ``tensorflow.keras.X``, adapter names are ``npu_bridge.X``.
"""

TF1_OPTIMIZERS = frozenset(
    "tensorflow.train." + name
    for name in (
        "GradientDescentOptimizer",
        "MomentumOptimizer",
        "AdamOptimizer",
        "AdagradOptimizer",
        "AdagradDAOptimizer",
        "AdadeltaOptimizer",
        "RMSPropOptimizer",
        "FtrlOptimizer",
        "ProximalGradientDescentOptimizer",
        "ProximalAdagradOptimizer",
    )
)

KERAS_OPTIMIZER_CLASSES = (
    "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl", "Lion", "Adafactor",
)
KERAS_OPTIMIZERS = frozenset("tensorflow.keras.optimizers." + name for name in KERAS_OPTIMIZER_CLASSES)
# Keras accepts these strings for ``compile(optimizer=...)``.
KERAS_OPTIMIZER_STRINGS = {name.lower(): name for name in KERAS_OPTIMIZER_CLASSES}

OPTIMIZERS = TF1_OPTIMIZERS | KERAS_OPTIMIZERS

# The adapter's Estimator: it adds the broadcast hook itself in TRAIN mode when the rank size is > 1.
NPU_ESTIMATOR = "npu_bridge.NPUEstimator"
ESTIMATORS = frozenset(
    {
        "tensorflow.estimator.Estimator",
        NPU_ESTIMATOR,
        "tensorflow.estimator.DNNClassifier",
        "tensorflow.estimator.DNNRegressor",
        "tensorflow.estimator.LinearClassifier",
        "tensorflow.estimator.LinearRegressor",
        "tensorflow.estimator.DNNLinearCombinedClassifier",
        "tensorflow.estimator.DNNLinearCombinedRegressor",
        "tensorflow.estimator.BoostedTreesClassifier",
        "tensorflow.estimator.BoostedTreesRegressor",
    }
)
TRAIN_AND_EVALUATE = "tensorflow.estimator.train_and_evaluate"
MONITORED_SESSION = "tensorflow.train.MonitoredTrainingSession"
VARIABLE_INITIALIZERS = frozenset(
    {"tensorflow.global_variables_initializer", "tensorflow.initializers.global_variables",
     "tensorflow.initialize_all_variables"}
)
TRAIN_SPEC = "tensorflow.estimator.TrainSpec"

# Keras model constructors whose variables exist as soon as they return.
KERAS_BUILT_MODELS = frozenset(
    {"tensorflow.keras.Model", "tensorflow.keras.models.Model", "tensorflow.keras.models.load_model"}
)
KERAS_SEQUENTIAL = frozenset({"tensorflow.keras.Sequential", "tensorflow.keras.models.Sequential"})
KERAS_INPUT_KEYWORDS = frozenset({"input_shape", "input_dim", "batch_input_shape"})
KERAS_INPUT_LAYERS = frozenset(
    {"tensorflow.keras.Input", "tensorflow.keras.layers.Input", "tensorflow.keras.layers.InputLayer"}
)

DATASET_SOURCES = frozenset(
    {
        "tensorflow.data.Dataset.from_tensor_slices",
        "tensorflow.data.Dataset.from_tensors",
        "tensorflow.data.Dataset.from_generator",
        "tensorflow.data.Dataset.range",
        "tensorflow.data.Dataset.list_files",
        "tensorflow.data.Dataset.zip",
        "tensorflow.data.TFRecordDataset",
        "tensorflow.data.TextLineDataset",
        "tensorflow.data.FixedLengthRecordDataset",
        "tensorflow.data.experimental.CsvDataset",
        "tensorflow_datasets.load",
    }
)
BATCH_METHODS = frozenset({"batch", "padded_batch"})
# Keras utilities that return a BATCHED dataset: (their batch_size default, whether they shuffle by default).
BATCHED_SOURCE_DEFAULTS = {
    "image_dataset_from_directory": (32, True),
    "text_dataset_from_directory": (32, True),
    "audio_dataset_from_directory": (32, True),
    "timeseries_dataset_from_array": (128, False),
}
BATCHED_SOURCES = frozenset(
    f"tensorflow.keras.{module}.{name}"
    for name in BATCHED_SOURCE_DEFAULTS
    for module in ("utils", "preprocessing", "preprocessing.image", "preprocessing.text", "preprocessing.timeseries")
)
# The seed a fix gives a shuffle that comes before the shard: the same on every rank, so that the ranks'
# shards of one permutation are disjoint.
SHARED_SEED = 1234
# Names that mark data used only for evaluation; those pipelines are not sharded.
EVALUATION_WORDS = ("eval", "test", "valid", "val_")

GRADIENT_TAPE = "tensorflow.GradientTape"

# The adapter's accepted forms of each step.
BROADCAST_FORMS = frozenset(
    {
        "npu_bridge.NPUBroadcastGlobalVariablesHook",
        "npu_bridge.npu_hooks_append",
        "npu_bridge.NPUEstimator",
        "npu_bridge.hccl_ops.broadcast",
        "npu_device.distribute.broadcast",
    }
)
TF1_KERAS_BROADCAST_FORMS = frozenset(
    {"npu_bridge.NPUBroadcastGlobalVariablesCallback", "npu_bridge.npu_callbacks_append"}
)
ALLREDUCE_FORMS = frozenset(
    {
        "npu_bridge.npu_distributed_optimizer_wrapper",
        "npu_bridge.NPUDistributedOptimizer",
        "npu_bridge.hccl_ops.allreduce",
        "npu_device.distribute.all_reduce",
        "npu_device.distribute.npu_distributed_keras_optimizer_wrapper",
    }
)
# The unified optimizers aggregate gradients only when given ``is_distributed=True`` (the default
# is False): (canonical name, position of ``is_distributed``). Both take ``opt`` first.
DISTRIBUTED_FLAG_OPTIMIZERS = {
    "npu_bridge.NPUOptimizer": 2,  # (opt, loss_scale_manager=None, is_distributed=False, ...)
    "npu_bridge.NPULossScaleOptimizer": 2,  # (opt, loss_scale_manager, is_distributed=False)
}
SHARD_AND_REBATCH = "npu_device.distribute.shard_and_rebatch_dataset"
TF2_BROADCAST_CALLBACKS = frozenset(
    {
        "npu_device.distribute.NPUBroadcastGlobalVariablesCallback",
        "npu_device.distribute.npu_callbacks.NPUBroadcastGlobalVariablesCallback",
        "npu_device.distribute.hccl.NPUBroadcastGlobalVariablesCallback",
        "npu_device.NPUBroadcastGlobalVariablesCallback",
    }
)

# Markers of TF1 idioms (graph mode, sessions); they select the ``npu_bridge`` adapter.
TF1_IDIOMS = frozenset(
    {
        "tensorflow.Session",
        "tensorflow.InteractiveSession",
        "tensorflow.placeholder",
        "tensorflow.train.MonitoredTrainingSession",
        "tensorflow.global_variables_initializer",
        "tensorflow.train.get_global_step",
        "tensorflow.train.get_or_create_global_step",
        "tensorflow.layers.dense",
        "tensorflow.layers.conv2d",
        "tensorflow.disable_v2_behavior",
        "tensorflow.disable_eager_execution",
    }
) | TF1_OPTIMIZERS | ESTIMATORS

# Per-rank quantities, as the vendor's guide writes them. They run unchanged on one card.
RANK_SIZE_EXPR = "int(os.getenv('RANK_SIZE', '1'))"
RANK_ID_EXPR = "int(os.getenv('RANK_ID', '0'))"
BROADCAST_HOOK_EXPR = f"NPUBroadcastGlobalVariablesHook(0, {RANK_ID_EXPR})"
