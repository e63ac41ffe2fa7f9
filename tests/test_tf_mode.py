"""Which TensorFlow a notebook is written for, decided once by the analyzer (issue 21, class 1): the
adapter, the fix and the simulator's mode follow it."""

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook
from tests.conftest import joined, notebook_from

# (code, mode, words the reason must contain)
CASES = [
    # TensorFlow's migration guides: TF2 code with a tf.compat.v1 part side by side.
    ("import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\n# %%\n"
     "def model_fn(features, labels, mode):\n"
     "    loss = tf1.losses.mean_squared_error(labels, tf1.layers.Dense(1)(features))\n"
     "    return tf1.estimator.EstimatorSpec(mode, loss=loss, train_op=tf1.train.AdagradOptimizer(0.05).minimize(loss))\n"
     "tf1.estimator.Estimator(model_fn).train(input_fn, steps=2)\n# %%\n"
     "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
     "model.compile('adam', 'mse', steps_per_execution=10)\nmodel.fit(ds)\n",
     "tf2", ["tf.compat.v1 parts", "cell 1"]),
    # TF1-only names through ``import tensorflow``.
    ("import tensorflow as tf\nx = tf.placeholder(tf.float32, [None, 4])\nwith tf.Session() as sess:\n    pass\n",
     "tf1", ["tf.placeholder", "exists only in TensorFlow 1"]),
    ("import tensorflow as tf\nlogits = tf.layers.dense(x, 10)\n", "tf1", ["tf.layers.dense"]),
    # The notebook turns TF2 behaviour off, or eager execution on, itself.
    ("import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n", "tf1", ["turns TensorFlow 2 behaviour off"]),
    ("import tensorflow as tf\ntf.compat.v1.enable_eager_execution()\nopt = tf.train.AdamOptimizer()\n",
     "tf2", ["turns eager execution on"]),
    # TensorFlow only as compat.v1, with TF1's API: graph mode.
    ("import tensorflow.compat.v1 as tf\nopt = tf.train.GradientDescentOptimizer(0.01)\ntrain_op = opt.minimize(loss)\n",
     "tf1", ["only as tensorflow.compat.v1", "GradientDescentOptimizer"]),
    # The vendor's tool leaves TF1 scripts importing npu_bridge.
    ("from npu_bridge.npu_init import *\nimport tensorflow as tf\nmodel.fit(x, y)\n", "tf1", ["npu_bridge"]),
    # Estimators only: where Ascend runs them; with eager-only code, TF2.
    ("import tensorflow as tf\nest = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=cols)\n"
     "est.train(input_fn, steps=10)\n", "tf1", ["only Estimators"]),
    ("import tensorflow as tf\nprint(next(iter(ds))[0].numpy())\n"
     "est = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=cols)\nest.train(input_fn, steps=10)\n",
     "tf2", ["TF2-only code", "numpy"]),
    # TF2's tf.saved_model.load(path) (TF1's takes a session, tags and path): TensorFlow's migration guide.
    ("import tensorflow as tf\nest = tf.estimator.Estimator(model_fn)\nest.train(input_fn, steps=1)\n"
     "loaded = tf.saved_model.load('exported')\n", "tf2", ["TF2-only code", "saved_model.load"]),
    ("import tensorflow as tf\nest = tf.estimator.Estimator(model_fn)\nest.train(input_fn, steps=1)\n"
     "with tf.Session() as sess:\n    tf.saved_model.load(sess, ['serve'], 'exported')\n", "tf1", []),
    # A name TensorFlow 1.15 does not have (its seed is tf.random.set_random_seed): pyml3 chapter 14 seeds
    # TF2's way beside its Estimators; run as TF1, one card failed there.
    ("import tensorflow as tf\nest = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=cols)\n"
     "est.train(input_fn, steps=10)\ntf.random.set_seed(1)\n", "tf2", ["TF2-only code", "set_seed"]),
    ("import tensorflow as tf\nest = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=cols)\n"
     "est.train(input_fn, steps=10)\ntf.random.set_random_seed(1)\n", "tf1", ["only Estimators"]),
    # The vendor's TF2 tool leaves npu_device imported: TF2, whatever else the code says.
    ("import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\nopt = tf.train.AdamOptimizer()\n",
     "tf2", ["imports the TF2 adapter"]),
    # Plain TF2.
    ("import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nmodel.compile('sgd', 'mse')\n"
     "model.fit(x, y)\n", "tf2", ["no TensorFlow 1-only API"]),
]


@pytest.mark.parametrize("code,mode,words", CASES, ids=[f"{mode}-{i}" for i, (_, mode, _) in enumerate(CASES)])
def test_the_mode_and_its_reason(code, mode, words):
    analysis = analyze(notebook_from(code))
    assert analysis.mode.name == mode
    for word in words:
        assert word in analysis.mode.reason
    assert analysis.adapter == ("npu_bridge" if mode == "tf1" else "npu_device")
    assert analysis.to_json()["mode"] == mode and analysis.to_json()["mode_reason"] == analysis.mode.reason


def test_a_tf2_notebook_with_a_compat_v1_part_gets_tf2_fixes_for_its_keras_part():
    notebook = notebook_from(CASES[0][0])
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert "npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam())" in fixed
    assert "npu.open().as_default()" in fixed
    assert "steps_per_execution=10" in fixed  # TF2 Keras, kept as it is


@pytest.mark.sim
def test_the_runner_runs_in_the_mode_the_analyzer_chose():
    from npu_migrate_nb.sim.runner import detect_tf1

    assert detect_tf1(notebook_from(CASES[0][0])) is False
    assert detect_tf1(notebook_from(CASES[1][0])) is True


@pytest.mark.sim
def test_the_tf1_only_names_are_absent_from_tensorflow_2_and_present_in_compat_v1():
    """The list the decision reads, held against the TensorFlow the simulator runs (never imported by
    the analyzer itself)."""
    import functools
    import subprocess
    import sys

    from npu_migrate_nb import knowledge as K

    names = sorted(name[len("tensorflow."):] for name in K.TF1_ONLY_CALLS)
    modules = sorted(module[len("tensorflow."):-1] for module in K.TF1_ONLY_MODULES if "contrib" not in module)
    script = (
        "import functools, json, sys, tensorflow as tf\n"
        "def has(root, path):\n"
        "    try:\n"
        "        functools.reduce(getattr, path.split('.'), root)\n"
        "        return True\n"
        "    except AttributeError:\n"
        "        return False\n"
        "paths = json.loads(sys.argv[1])\n"
        "print(json.dumps([[p, has(tf, p), has(tf.compat.v1, p)] for p in paths]))\n"
    )
    import json

    done = subprocess.run([sys.executable, "-c", script, json.dumps(names + modules)], capture_output=True,
                          text=True, timeout=300)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert [path for path, in_tf2, _ in found if in_tf2] == []
    assert [path for path, _, in_v1 in found if not in_v1] == []
    assert functools.reduce(lambda a, b: a + b, [1 for _ in found]) == len(names) + len(modules)
