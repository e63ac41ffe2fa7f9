"""Canned Estimators on real TensorFlow: the optimizer the fix passes explicitly is the one the
Estimator would have built (class and learning rate, read from the installed tensorflow_estimator);
a DNNClassifier notebook is caught on 2 ranks before the fix and passes the three checks after it.
Work that is not data-parallel (optimizing an input image of a ready-made model) is reported, not
failed: ``check`` exits 0 and its run on 2 ranks fails no run-time check."""

import inspect
import json
import subprocess
import sys

import pytest

from npu_migrate_nb import knowledge as K

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}

DNN_CELLS = [
    "%env TF_CPP_MIN_LOG_LEVEL=2\nimport os\nimport numpy as np\nimport tensorflow as tf",
    "# Synthetic data: 512 samples of 4 features, 2 classes.\n"
    "rng = np.random.RandomState(0)\n"
    "features = rng.rand(512, 4).astype(np.float32)\n"
    "labels = (features.sum(axis=1) > 2).astype(np.int32)\n"
    "batch_size = 32",
    "def train_input_fn():\n"
    "    dataset = tf.data.Dataset.from_tensor_slices(({'x': features}, labels))\n"
    "    return dataset.shuffle(512, seed=1).repeat().batch(batch_size, drop_remainder=True)",
    "feature_columns = [tf.feature_column.numeric_column('x', shape=[4])]\n"
    "classifier = tf.estimator.DNNClassifier(\n"
    "    hidden_units=[16, 8], feature_columns=feature_columns, n_classes=2,\n"
    "    config=tf.estimator.RunConfig(save_checkpoints_steps=None))",
    "classifier.train(input_fn=train_input_fn, max_steps=8)",
]

IMAGE_CELLS = [
    "import numpy as np\nimport tensorflow as tf",
    "# A ready-made classifier, and the image to change until it is taken for class 1.\n"
    "model = tf.keras.models.load_model('classifier.keras')\n"
    "model.trainable = False\n"
    "image = tf.Variable(np.load('image.npy'))\n"
    "target = tf.constant([1])\n"
    "opt = tf.keras.optimizers.Adam(learning_rate=0.05)",
    "@tf.function\n"
    "def train_step(image):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.keras.losses.sparse_categorical_crossentropy(target, model(image), from_logits=True)\n"
    "    grad = tape.gradient(loss, image)\n"
    "    opt.apply_gradients([(grad, image)])\n"
    "    image.assign(tf.clip_by_value(image, 0.0, 1.0))",
    "for step in range(20):\n    train_step(image)\nprint('class', int(tf.argmax(model(image), axis=1)[0]))",
]


def source_of(path):
    return "".join("".join(cell["source"]) + "\n" for cell in json.loads(path.read_text())["cells"])


# ------------------------------------------------------------------------ the canned defaults


def test_the_table_of_canned_optimizers_is_the_installed_estimators_own():
    import tensorflow as tf
    from tensorflow_estimator.python.estimator.canned import baseline, dnn, dnn_linear_combined, linear, optimizers

    learning_rates = {  # what each family passes get_optimizer_instance for a string (v1 model_fns)
        "DNN": dnn._LEARNING_RATE, "Linear": linear._LEARNING_RATE, "Baseline": baseline._LEARNING_RATE,
        "dnn_optimizer": dnn_linear_combined._DNN_LEARNING_RATE,
        "linear_optimizer": dnn_linear_combined._LINEAR_LEARNING_RATE,
    }
    for qualified, parameters in K.CANNED_ESTIMATOR_OPTIMIZERS.items():
        name = qualified.rsplit(".", 1)[1]
        signature = inspect.signature(getattr(tf.compat.v1.estimator, name).__init__)
        positions = {parameter: index for index, parameter in enumerate(list(signature.parameters)[1:])}
        for parameter, position, default, rate, part in parameters:
            assert positions[parameter] == position, (name, parameter)
            assert signature.parameters[parameter].default == default, (name, parameter)
            family = parameter if name.startswith("DNNLinearCombined") else name[:name.index(next(
                suffix for suffix in ("Classifier", "Regressor", "Estimator") if suffix in name))]
            assert learning_rates[family] == rate, (name, parameter)
            if part is not None:
                assert positions[part[0]] == part[1], (name, part)
    for string, class_name in K.CANNED_OPTIMIZER_STRINGS.items():
        assert optimizers._OPTIMIZER_CLS_NAMES[string] is getattr(tf.compat.v1.train, class_name)
    assert set(K.CANNED_OPTIMIZER_STRINGS) == set(optimizers._OPTIMIZER_CLS_NAMES)


# Both ways of training on one card: the same data, two train calls (two graphs: one optimizer object
# serves both), the model's weights without the optimizer's slots.
TRAINED_TWICE = r'''
rng = np.random.RandomState(0)
x = rng.rand(64, 4).astype(np.float32)
y = (x.sum(axis=1) > 2).astype(np.int32)
columns = [tf.feature_column.numeric_column("x", shape=[4])]

def input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(16)

def weights(make):
    estimator = make(tf.estimator.RunConfig(tf_random_seed=7))
    estimator.train(input_fn, steps=3)
    estimator.train(input_fn, steps=3)
    return {n: estimator.get_variable_value(n) for n in estimator.get_variable_names()
            if "Adagrad" not in n and "Ftrl" not in n and "training" not in n}
'''

SAME_TRAINING = r'''
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
from npu_migrate_nb.sim import adapter
assert adapter.enable()
from npu_bridge.npu_init import npu_distributed_optimizer_wrapper
v1 = tf.compat.v1
''' + TRAINED_TWICE + r'''

wrapped = lambda cls, rate: npu_distributed_optimizer_wrapper(getattr(v1.train, cls)(learning_rate=rate))
cases = {
    "DNNClassifier": (
        lambda config, **o: v1.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns, config=config, **o),
        dict(optimizer=wrapped("AdagradOptimizer", 0.05))),
    "LinearRegressor": (
        lambda config, **o: v1.estimator.LinearRegressor(feature_columns=columns, config=config, **o),
        dict(optimizer=wrapped("FtrlOptimizer", 0.2))),
    "DNNLinearCombinedClassifier": (
        lambda config, **o: v1.estimator.DNNLinearCombinedClassifier(
            linear_feature_columns=columns, dnn_feature_columns=columns, dnn_hidden_units=[8], config=config, **o),
        dict(linear_optimizer=wrapped("FtrlOptimizer", 0.005), dnn_optimizer=wrapped("AdagradOptimizer", 0.001))),
}
differences = {}
for name, (make, explicit) in cases.items():
    default = weights(make)
    given = weights(lambda config: make(config, **explicit))
    differences[name] = max(float(np.max(np.abs(default[k] - given[k]))) for k in default)
print(json.dumps(differences))
'''


def weight_differences(script: str) -> dict:
    """The largest weight difference per Estimator between its two trainings, as the script prints it."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_explicit_wrapped_optimizer_trains_exactly_as_the_default_one_on_one_card():
    assert weight_differences(SAME_TRAINING) == {"DNNClassifier": 0.0, "LinearRegressor": 0.0, "DNNLinearCombinedClassifier": 0.0}


# TF2's canned Estimators (tf.estimator.X): a string made a Keras optimizer in each training graph. The
# callable the fix passes instead (tf.compat.v1.keras.optimizers, the DNN's string at its class's default
# rate) trains exactly as the string on one card, where the wrapper does nothing; two train calls, two graphs.
SAME_TRAINING_V2 = r'''
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
from npu_migrate_nb.sim import adapter
assert adapter.enable()
import npu_device as npu
from npu_migrate_nb import knowledge as K
''' + TRAINED_TWICE + r'''

def made(name, string, rate):
    cls = getattr(tf.compat.v1.keras.optimizers, K.CANNED_V2_OPTIMIZER_CLASSES[string])
    if "tensorflow.estimator." + name in K.CANNED_V2_CLASS_DEFAULT_RATE:
        return lambda: npu.distribute.npu_distributed_keras_optimizer_wrapper(cls())
    return lambda: npu.distribute.npu_distributed_keras_optimizer_wrapper(cls(learning_rate=rate))

cases = {
    "DNNClassifier": lambda config, **o: tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns,
                                                                   config=config, **o),
    "LinearRegressor": lambda config, **o: tf.estimator.LinearRegressor(feature_columns=columns, config=config, **o),
    "DNNLinearCombinedClassifier": lambda config, **o: tf.estimator.DNNLinearCombinedClassifier(
        linear_feature_columns=columns, dnn_feature_columns=columns, dnn_hidden_units=[8], config=config, **o),
}
differences = {}
for name, make in cases.items():
    explicit = {parameter: made(name, default, rate)
                for parameter, _position, default, rate, _part in K.CANNED_ESTIMATOR_OPTIMIZERS["tensorflow.estimator." + name]}
    default = weights(make)
    given = weights(lambda config: make(config, **explicit))
    assert set(default) == set(given) and default, (sorted(default), sorted(given))
    differences[name] = max(float(np.max(np.abs(default[k] - given[k]))) for k in default)
print(json.dumps(differences))
'''


def test_the_tf2_callable_wrapped_optimizer_trains_exactly_as_the_string_on_one_card():
    assert weight_differences(SAME_TRAINING_V2) == {"DNNClassifier": 0.0, "LinearRegressor": 0.0, "DNNLinearCombinedClassifier": 0.0}


# ------------------------------------------------------------------------ on 2 ranks


def test_a_canned_dnn_classifier_is_caught_unfixed_and_passes_the_three_checks_fixed(tmp_path):
    single = write_notebook(tmp_path / "dnn.ipynb", DNN_CELLS)
    code, out, err = cli("run", str(single), "-n", "2", "--tf1", "--format", "json")
    checks = json.loads(out)["checks"]
    assert code == 1 and checks == {"broadcast": "fail", "allreduce": "fail", "shard": "fail"}, (checks, err[-2000:])

    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(single), "-o", str(fixed))
    source = source_of(fixed)
    assert "optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.05))" in source, err
    assert "hooks=npu_hooks_append()" in source and ".shard(int(os.getenv('RANK_SIZE', '1'))" in source
    code, out, err = cli("check", str(fixed))
    assert code == 0, out
    code, out, err = cli("run", str(fixed), "-n", "2", "--tf1", "--format", "json")
    result = json.loads(out)
    assert result["checks"] == ALL_PASS, (result["check_details"], err[-2000:])
    assert code == 0


def make_classifier_and_image(folder):
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(8, 8, 3)), tf.keras.layers.Dense(2)])
    model.save(str(folder / "classifier.keras"))
    np.save(folder / "image.npy", np.random.RandomState(1).rand(1, 8, 8, 3).astype(np.float32))


def test_optimizing_an_input_image_is_reported_not_failed_and_runs_on_two_ranks(tmp_path):
    make_classifier_and_image(tmp_path)
    path = write_notebook(tmp_path / "adversarial.ipynb", IMAGE_CELLS)
    code, out, err = cli("check", str(path), "--format", "json")
    report = json.loads(out)
    assert code == 0, out
    assert report["steps"] == {"broadcast": "not-applicable", "allreduce": "not-applicable", "shard": "not-applicable"}
    assert "an input of a ready-made model" in report["reasons"]["allreduce"]
    assert [(f["code"], f["severity"], f["cell"]) for f in report["findings"]] == [("not-data-parallel", "info", 2)]

    code, out, err = cli("run", str(path), "-n", "2", "--format", "json")
    result = json.loads(out)
    assert code == 0, (result["check_details"], err[-2000:])
    # The run-time checks say what the analysis said, with its reason, instead of judging one
    # variable alike on every rank (which would read as a broadcast "pass").
    assert result["checks"] == {"broadcast": "not-applicable", "allreduce": "not-applicable", "shard": "not-applicable"}
    assert "an input of a ready-made model" in result["check_details"]["allreduce"]["detail"]
