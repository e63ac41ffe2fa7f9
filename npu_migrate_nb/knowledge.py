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
# Keras' OptimizerV2 classes, kept as ``tf.keras.optimizers.legacy`` since TensorFlow 2.11 (what TF2's
# canned Estimators accept; ``tf.compat.v1.keras.optimizers`` names them in both lines).
KERAS_LEGACY_OPTIMIZER_CLASSES = ("SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl")
KERAS_OPTIMIZERS = frozenset(
    {"tensorflow.keras.optimizers." + name for name in KERAS_OPTIMIZER_CLASSES}
    | {"tensorflow.keras.optimizers.legacy." + name for name in KERAS_LEGACY_OPTIMIZER_CLASSES}
)
# Keras accepts these strings for ``compile(optimizer=...)``.
KERAS_OPTIMIZER_STRINGS = {name.lower(): name for name in KERAS_OPTIMIZER_CLASSES}

OPTIMIZERS = TF1_OPTIMIZERS | KERAS_OPTIMIZERS

# The adapter's Estimator: it adds the broadcast hook itself in TRAIN mode when the rank size is > 1.
NPU_ESTIMATOR = "npu_bridge.NPUEstimator"
MODEL_TO_ESTIMATOR = "tensorflow.keras.estimator.model_to_estimator"
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
        "tensorflow.estimator.DNNEstimator",
        "tensorflow.estimator.LinearEstimator",
        "tensorflow.estimator.DNNLinearCombinedEstimator",
        "tensorflow.estimator.BaselineClassifier",
        "tensorflow.estimator.BaselineRegressor",
        "tensorflow.estimator.BaselineEstimator",
        # A compiled Keras model as an Estimator: its model_fn clones the model and reuses a compiled
        # tf.compat.v1 optimizer as it is (a Keras one is rebuilt from its config: a wrapper is lost).
        MODEL_TO_ESTIMATOR,
    }
)
# A Keras optimizer as the tf.compat.v1.train one that model_to_estimator's clone reuses as it is: the
# class, then each Keras argument's name there (None: no equivalent), and Keras' defaults that differ
# from the TF1 class's, written out so that the training keeps Keras' math.
KERAS_AS_TF1_OPTIMIZERS = {
    "Adam": ("AdamOptimizer", {"learning_rate": "learning_rate", "lr": "learning_rate", "beta_1": "beta1",
                               "beta_2": "beta2", "epsilon": "epsilon"}, {"learning_rate": "0.001", "epsilon": "1e-07"}),
    "SGD": ("GradientDescentOptimizer", {"learning_rate": "learning_rate", "lr": "learning_rate"},
            {"learning_rate": "0.01"}),
    "RMSprop": ("RMSPropOptimizer", {"learning_rate": "learning_rate", "lr": "learning_rate", "rho": "decay",
                                     "momentum": "momentum", "epsilon": "epsilon"},
                {"learning_rate": "0.001", "epsilon": "1e-07"}),
    "Adagrad": ("AdagradOptimizer", {"learning_rate": "learning_rate", "lr": "learning_rate",
                                     "initial_accumulator_value": "initial_accumulator_value"},
                {"learning_rate": "0.001"}),
}
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
# TF1 Estimator input functions made from arrays: (their batch_size default).
NUMPY_INPUT_FNS = {"tensorflow.estimator.inputs.numpy_input_fn": 128,
                   "tensorflow.estimator.inputs.pandas_input_fn": 128}  # a DataFrame's rows slice alike
# Keras utilities that return a BATCHED dataset: (their batch_size default, whether they shuffle by default).
BATCHED_SOURCE_DEFAULTS = {
    "image_dataset_from_directory": (32, True),
    "text_dataset_from_directory": (32, True),
    "audio_dataset_from_directory": (32, True),
    "timeseries_dataset_from_array": (128, False),
}
# tf.data's CSV reader batches (its batch size is its second argument, required) and shuffles by itself.
BATCHED_SOURCE_DEFAULTS["make_csv_dataset"] = (None, True)
BATCH_POSITIONS = {"make_csv_dataset": 1}  # the others' batch_size is given by name
SEED_KEYWORDS = {"make_csv_dataset": "shuffle_seed"}  # the others' is ``seed``
BATCHED_SOURCES = frozenset(
    f"tensorflow.keras.{module}.{name}"
    for name in BATCHED_SOURCE_DEFAULTS
    for module in ("utils", "preprocessing", "preprocessing.image", "preprocessing.text", "preprocessing.timeseries")
) | {"tensorflow.data.experimental.make_csv_dataset"}
# The seed a fix gives a shuffle that comes before the shard: the same on every rank, so that the ranks'
# shards of one permutation are disjoint.
SHARED_SEED = 1234
# TensorFlow 1's MNIST loader (TensorFlow-Examples and the courses of the TF 1 era feed its batches).
TF1_MNIST_READ_DATA_SETS = "tensorflow.examples.tutorials.mnist.input_data.read_data_sets"
# Names that mark data used only for evaluation; those pipelines are not sharded.
EVALUATION_WORDS = ("eval", "test", "valid", "val_", "predict")  # names of data no rank trains on


def named_for_evaluation(name: str) -> bool:
    """Does the name say its data is evaluated, not trained on (``ds_test``, ``mnist.test.images``)? A name
    that says it trains too (``train_and_evaluate``, the courses' function around the whole training) does not."""
    lowered = name.lower()
    return any(word in lowered for word in EVALUATION_WORDS) and "train" not in lowered

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
# TensorFlow 1's symbolic gradients: what they give is applied with apply_gradients, past the TF1
# wrapper (which all-reduces in compute_gradients, minimize's first half).
TF1_SYMBOLIC_GRADIENTS = frozenset({"tensorflow.gradients", "tensorflow.compat.v1.gradients"})
TF1_KERAS_BROADCAST_FORMS = frozenset(
    {"npu_bridge.NPUBroadcastGlobalVariablesCallback", "npu_bridge.npu_callbacks_append"}
)
ALLREDUCE_FORMS = frozenset(
    {
        "npu_bridge.npu_distributed_optimizer_wrapper",
        "npu_bridge.NPUDistributedOptimizer",
        "npu_bridge.hccl_ops.allreduce",
        "npu_bridge.npu_allreduce",
        "npu_device.distribute.all_reduce",
        "npu_device.distribute.npu_distributed_keras_optimizer_wrapper",
    }
)
# The unified NPUOptimizer aggregates gradients only when given ``is_distributed=True`` (the default
# is False): (canonical name, position of ``is_distributed``).
DISTRIBUTED_FLAG_OPTIMIZERS = {
    "npu_bridge.NPUOptimizer": 2,  # (opt, loss_scale_manager=None, is_distributed=False, ...)
}
# Loss-scale optimizers are NOT gradient aggregation: with ``is_distributed=True`` the TF1 one
# all-reduces only the overflow status (so that every rank skips the same steps); the gradients go to
# the optimizer it wraps as they are. The TF2 one sums the status over ranks by itself.
LOSS_SCALE_OPTIMIZERS = {
    "npu_bridge.NPULossScaleOptimizer": 2,  # (opt, loss_scale_manager, is_distributed=False)
}
TF2_LOSS_SCALE_OPTIMIZERS = frozenset({"npu_device.train.optimizer.NpuLossScaleOptimizer"})
SHARD_AND_REBATCH = "npu_device.distribute.shard_and_rebatch_dataset"
TF2_BROADCAST_CALLBACKS = frozenset(
    {
        "npu_device.distribute.NPUBroadcastGlobalVariablesCallback",
        "npu_device.distribute.npu_callbacks.NPUBroadcastGlobalVariablesCallback",
        "npu_device.distribute.hccl.NPUBroadcastGlobalVariablesCallback",
        "npu_device.NPUBroadcastGlobalVariablesCallback",
    }
)

# --- TensorFlow 1 or 2 (tf_mode.py)
# Calls that turn TensorFlow 2 behaviour off or on for the whole program.
TF2_BEHAVIOUR_OFF = frozenset(
    {"tensorflow.disable_v2_behavior", "tensorflow.disable_eager_execution", "npu_device.compat.enable_v1"}
)
TF2_BEHAVIOUR_ON = frozenset({"tensorflow.enable_eager_execution", "tensorflow.enable_v2_behavior"})
# Calls through ``import tensorflow`` that TensorFlow 1.15 does not have (its names are
# ``tf.random.set_random_seed`` and ``tf.config.experimental.list_physical_devices``): TF2 code.
TF2_ONLY_CALLS = frozenset({"tensorflow.random.set_seed", "tensorflow.config.list_physical_devices",
                            "tensorflow.config.list_logical_devices"})
# Names of TensorFlow 1's ``tensorflow`` module that TensorFlow 2's has only as ``tf.compat.v1.X``, as
# written through ``import tensorflow`` (not canonical names: ``tensorflow.compat.v1.Session`` is fine).
TF1_ONLY_CALLS = frozenset(
    "tensorflow." + name
    for name in (
        "Session", "InteractiveSession", "placeholder", "placeholder_with_default", "get_variable",
        "variable_scope", "global_variables_initializer", "local_variables_initializer",
        "initialize_all_variables", "tables_initializer", "get_default_graph", "reset_default_graph",
        "set_random_seed", "random_normal", "random_uniform", "truncated_normal", "to_float", "to_int32",
        "to_int64", "log", "trainable_variables", "global_variables", "assign", "assign_add", "Print",
        "py_func", "sparse_placeholder", "get_collection", "add_to_collection", "global_norm",
        "train.get_global_step", "train.get_or_create_global_step", "train.Saver", "train.MonitoredTrainingSession",
        "train.SessionRunHook", "train.StopAtStepHook", "train.LoggingTensorHook", "train.exponential_decay",
        "summary.FileWriter", "summary.merge_all", "losses.softmax_cross_entropy",
        "losses.sparse_softmax_cross_entropy", "nn.softmax_cross_entropy_with_logits_v2",
    )
) | frozenset(name for name in TF1_OPTIMIZERS)
TF1_ONLY_MODULES = ("tensorflow.layers.", "tensorflow.contrib.", "tensorflow.logging.", "tensorflow.gfile.",
                    "tensorflow.app.", "tensorflow.nn.rnn_cell.", "tensorflow.estimator.inputs.")
# Per-rank quantities, as the vendor's guide writes them. They run unchanged on one card.
RANK_SIZE_EXPR = "int(os.getenv('RANK_SIZE', '1'))"
RANK_ID_EXPR = "int(os.getenv('RANK_ID', '0'))"
BROADCAST_HOOK_EXPR = f"NPUBroadcastGlobalVariablesHook(0, {RANK_ID_EXPR})"

# --- rank values
# What a value read in the notebook stands for (ranks.py): the rank, the rank count, the chip on its
# server, the chips of a server. A chip id is a rank only on one server: from the second server on,
# DEVICE_ID and the local rank start again at 0.
RANK_ENVIRONMENT_KINDS = {
    "RANK_ID": "rank",
    "RANK_SIZE": "size",
    "CM_WORKER_SIZE": "size",
    "ASCEND_DEVICE_ID": "device",
    "DEVICE_ID": "device",
    # The server's index in the model zoo's launch scripts: device_id + RANK_INDEX * 8 is the rank.
    "RANK_INDEX": "server",
}
RANK_GETTER_KINDS = {
    "npu_bridge.get_rank_id": "rank",
    "npu_bridge.get_rank_size": "size",
    "npu_bridge.get_local_rank_id": "device",
    "npu_bridge.get_local_rank_size": "devices",
    "horovod.rank": "rank",
    "horovod.size": "size",
    "horovod.local_rank": "device",
    "horovod.local_size": "devices",
}
# Attributes of the TF2 adapter's device handle (npu.open(), npu.global_npu_ctx()).
NPU_HANDLE_KINDS = {"worker_id": "rank", "workers_num": "size"}
NPU_HANDLE_SOURCES = frozenset({"npu_device.open", "npu_device.global_npu_ctx", "npu_device.npu_device.global_npu_ctx"})
ENVIRONMENT_READS = frozenset({"os.getenv", "os.environ.get"})
ENVIRONMENT_MAPPING = "os.environ"

# --- tf.distribute and Horovod
# Strategies that replicate the model and reduce across replicas (tf-distribute-leftover removes
# them: the adapter's broadcast, all-reduce and shard take their place, each done once).
DISTRIBUTE_STRATEGIES = frozenset(
    {
        "tensorflow.distribute.MirroredStrategy",
        "tensorflow.distribute.MultiWorkerMirroredStrategy",
        "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy",
        "tensorflow.distribute.experimental.CentralStorageStrategy",
    }
)
# What an InputContext's attributes are on Ascend, one pipeline per rank.
INPUT_CONTEXT_VALUES = {
    "num_input_pipelines": RANK_SIZE_EXPR,
    "input_pipeline_id": RANK_ID_EXPR,
    "num_replicas_in_sync": RANK_SIZE_EXPR,
}

# --- canned Estimators and not-data-parallel work
# The optimizers the TF1 canned Estimators build for themselves (tensorflow_estimator 2.15, the v1
# exports: what ``tf.estimator`` is on TF 1.15 and in the simulator's TF1 mode). Per class, each
# optimizer parameter: (name, position, default string, learning rate a string gets, the
# feature-column parameter without which that part, and its optimizer, is not built).
# DNNLinearCombined's linear part gets min(0.005, 1/sqrt(number of linear columns)): 0.005 up to
# 40000 columns.
CANNED_ESTIMATOR_OPTIMIZERS = {
    "tensorflow.estimator.DNNClassifier": (("optimizer", 6, "Adagrad", 0.05, None),),
    "tensorflow.estimator.DNNRegressor": (("optimizer", 5, "Adagrad", 0.05, None),),
    "tensorflow.estimator.LinearClassifier": (("optimizer", 5, "Ftrl", 0.2, None),),
    "tensorflow.estimator.LinearRegressor": (("optimizer", 4, "Ftrl", 0.2, None),),
    "tensorflow.estimator.DNNLinearCombinedClassifier": (
        ("linear_optimizer", 2, "Ftrl", 0.005, ("linear_feature_columns", 1)),
        ("dnn_optimizer", 4, "Adagrad", 0.001, ("dnn_feature_columns", 3)),
    ),
    "tensorflow.estimator.DNNLinearCombinedRegressor": (
        ("linear_optimizer", 2, "Ftrl", 0.005, ("linear_feature_columns", 1)),
        ("dnn_optimizer", 4, "Adagrad", 0.001, ("dnn_feature_columns", 3)),
    ),
    # The head-taking and baseline ones (recognized as Estimators once ESTIMATORS lists them).
    "tensorflow.estimator.DNNEstimator": (("optimizer", 4, "Adagrad", 0.05, None),),
    "tensorflow.estimator.LinearEstimator": (("optimizer", 3, "Ftrl", 0.2, None),),
    "tensorflow.estimator.DNNLinearCombinedEstimator": (
        ("linear_optimizer", 3, "Ftrl", 0.005, ("linear_feature_columns", 2)),
        ("dnn_optimizer", 5, "Adagrad", 0.001, ("dnn_feature_columns", 4)),
    ),
    "tensorflow.estimator.BaselineClassifier": (("optimizer", 4, "Ftrl", 0.3, None),),
    "tensorflow.estimator.BaselineRegressor": (("optimizer", 3, "Ftrl", 0.3, None),),
}
# The strings a v1 canned Estimator accepts (case matters), and the tf.train class each stands for.
CANNED_OPTIMIZER_STRINGS = {
    "Adagrad": "AdagradOptimizer",
    "Adam": "AdamOptimizer",
    "Ftrl": "FtrlOptimizer",
    "RMSProp": "RMSPropOptimizer",
    "SGD": "GradientDescentOptimizer",
}
# TF2's canned Estimators build a Keras optimizer from a string, with the learning rate of the table
# above, except the DNN ones, which give a string its class's own default (Adagrad: 0.001).
CANNED_V2_OPTIMIZER_CLASSES = {"Adagrad": "Adagrad", "Adam": "Adam", "Ftrl": "Ftrl", "RMSProp": "RMSprop", "SGD": "SGD"}
CANNED_V2_CLASS_DEFAULT_RATE = frozenset(
    {"tensorflow.estimator.DNNClassifier", "tensorflow.estimator.DNNRegressor", "tensorflow.estimator.DNNEstimator"}
)
BOOSTED_TREES_ESTIMATORS = frozenset(
    {"tensorflow.estimator.BoostedTreesClassifier", "tensorflow.estimator.BoostedTreesRegressor"}
)
# Models whose weights come ready-made (not-data-parallel: a gradient step on an input of such a
# model optimizes the input, not the model).
PRETRAINED_MODEL_PREFIXES = ("tensorflow.keras.applications.", "tensorflow_hub.")
PRETRAINED_MODEL_LOADERS = frozenset({"tensorflow.keras.models.load_model", "tensorflow.saved_model.load"})
# Calls that make fresh numbers from a shape: a tf.Variable starting from one is a model parameter.
FRESH_VALUE_PREFIXES = ("tensorflow.random.", "tensorflow.keras.initializers.", "numpy.random.")
FRESH_VALUE_CALLS = frozenset(
    {
        "tensorflow.zeros", "tensorflow.ones", "tensorflow.fill", "tensorflow.constant", "tensorflow.truncated_normal",
        "tensorflow.random_normal", "tensorflow.random_uniform", "numpy.zeros", "numpy.ones", "numpy.full",
        "numpy.empty", "numpy.array",
    }
)
# Reinforcement-learning environments: where the data of a notebook that reads no dataset comes from.
ENVIRONMENT_PREFIXES = ("gym.", "gymnasium.", "tf_agents.environments.", "gym_super_mario_bros.")
# Reads of data besides tf.data: a notebook with one of them has a dataset, environment or not.
DATA_READER_PREFIXES = ("tensorflow.keras.datasets.", "tensorflow_datasets.", "pandas.read_", "numpy.load")

# --- Keras generators and tensorflow_io
# tensorflow_io's readers are tf.data datasets (``tfio.IODataset`` subclasses ``tf.data.Dataset``):
# pipeline sources that a shard splits as any other.
IO_DATASET_SOURCES = frozenset(
    {
        "tensorflow_io.IODataset.from_kafka",
        "tensorflow_io.IODataset.from_avro",
        "tensorflow_io.IODataset.from_parquet",
        "tensorflow_io.IODataset.from_csv",
        "tensorflow_io.IODataset.from_json",
        "tensorflow_io.IODataset.from_hdf5",
        "tensorflow_io.IODataset.from_numpy",
        "tensorflow_io.IODataset.from_sql",
        "tensorflow_io.experimental.IODataset.from_kafka",
        "tensorflow_io.experimental.mongodb.MongoDBIODataset",
        "tensorflow_io.experimental.elasticsearch.ElasticsearchIODataset",
    }
)
# Not among them: Kafka consumer-group datasets (KafkaGroupIODataset, KafkaBatchIODataset), whose broker
# already gives each consumer of the group its own partitions, and make_avro_record_dataset, which batches.
DATASET_SOURCES = DATASET_SOURCES | IO_DATASET_SOURCES
# ``BigQueryReadSession.parallel_read_rows()`` (and ``read_rows``) return a tf.data dataset; the session
# comes from a client object, so these are known by method name.
IO_DATASET_METHODS = frozenset({"parallel_read_rows"})
# Keras' ImageDataGenerator iterators (keras.utils.Sequence): batch_size default, shuffle default.
IMAGE_GENERATOR_FLOWS = {"flow_from_directory": (32, True), "flow": (32, True), "flow_from_dataframe": (32, True)}
IMAGE_DATA_GENERATOR = "tensorflow.keras.preprocessing.image.ImageDataGenerator"
# Keras trains with these methods of a compiled model (fit_generator: Keras 2's form for generators).
KERAS_FIT_METHODS = ("fit", "fit_generator")

# --- reinforcement learning and decision forests
# TF-Agents agents (``dqn_agent.DqnAgent(...)``, ``lin_ucb_agent.LinearUCBAgent(...)``): the modules their
# constructors, and the base classes of a notebook's own agents, come from. ``agent.train(experience)``
# takes the training step.
AGENT_PREFIXES = ("tf_agents.agents.", "tf_agents.bandits.agents.")
# TF-Agents environments (the data of an agent): besides ENVIRONMENT_PREFIXES' tf_agents.environments.
AGENT_ENVIRONMENT_PREFIXES = ("tf_agents.environments.", "tf_agents.bandits.environments.")
# TensorFlow Decision Forests' Keras models (``tfdf.keras.RandomForestModel()``): ``fit`` grows trees.
DECISION_FOREST_PREFIX = "tensorflow_decision_forests.keras."


# Sparse gradients (IndexedSlices) of varying length. TF1's NPUDistributedOptimizer all-gathers sparse
# gradients, which needs as many rows on every rank. A plain lookup (tf.nn.embedding_lookup) has one row
# per id of the batch, the same count on every rank; the sparse lookups look up each DISTINCT id once, and
# a batch's distinct ids differ from rank to rank: an embedding column, tf.nn's sparse lookups, and a
# linear model's categorical columns (it looks their weights up that way). Matched under tensorflow's
# feature_column or nn.
SPARSE_GRADIENT_LOOKUPS = ("embedding_column", "shared_embedding_columns", "shared_embeddings",
                           "embedding_lookup_sparse", "safe_embedding_lookup_sparse")
CATEGORICAL_COLUMNS = ("categorical_column_with_vocabulary_list", "categorical_column_with_vocabulary_file",
                       "categorical_column_with_identity", "categorical_column_with_hash_bucket",
                       "bucketized_column", "crossed_column", "weighted_categorical_column")
LINEAR_ESTIMATORS = ("LinearClassifier", "LinearRegressor", "LinearEstimator", "DNNLinearCombinedClassifier",
                     "DNNLinearCombinedRegressor", "DNNLinearCombinedEstimator")
# The helper the fix defines to make them dense before the all-reduce (Ascend's DeepFM does the same).
DENSE_GRADIENTS = "dense_gradients"
