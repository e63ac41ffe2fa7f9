"""The realistic notebooks of issue 35: real jobs, with data made in the notebook, single-card as the
vendor's migration tool leaves them. ``fix`` makes their distributed versions (the tests and
``bench_proof.py`` do it). Rewrite them with ``python benchmarks/realistic/make_realistic.py``."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

RESNET50_CIFAR = [
    "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()",
    "# CIFAR-10-shaped data made here: 50,000 training and 10,000 test images\n"
    "rng = np.random.default_rng(0)\n"
    "x_train = rng.integers(0, 256, size=(50000, 32, 32, 3), dtype=np.uint8)\n"
    "y_train = rng.integers(0, 10, size=(50000,)).astype(np.int64)\n"
    "x_test = rng.integers(0, 256, size=(10000, 32, 32, 3), dtype=np.uint8)\n"
    "y_test = rng.integers(0, 10, size=(10000,)).astype(np.int64)",
    "inputs = tf.keras.Input(shape=(32, 32, 3))\n"
    "x = tf.keras.layers.Rescaling(1 / 255)(inputs)\n"
    "outputs = tf.keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)(x)\n"
    "model = tf.keras.Model(inputs, outputs)\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),\n"
    "              loss='sparse_categorical_crossentropy', metrics=['accuracy'])",
    "history = model.fit(x_train, y_train, batch_size=128, epochs=30,\n"
    "                    validation_data=(x_test, y_test), verbose=2)",
    "test_loss, test_accuracy = model.evaluate(x_test, y_test, verbose=0)\nprint(f'test accuracy {test_accuracy:.3f}')",
]

CUSTOM_LOOP_100K = [
    "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()",
    "rng = np.random.default_rng(1)\nfeatures = rng.normal(size=(100000, 64)).astype(np.float32)\n"
    "labels = (features[:, :8].sum(axis=1) > 0).astype(np.int64)\n"
    "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(100000).batch(256)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation='relu', input_shape=(64,)),\n"
    "                             tf.keras.layers.Dense(256, activation='relu'),\n"
    "                             tf.keras.layers.Dense(2)])\n"
    "optimizer = tf.keras.optimizers.Adam(1e-3)\n"
    "loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)\n\n"
    "@tf.function\ndef train_step(x, y):\n    with tf.GradientTape() as tape:\n"
    "        loss = loss_fn(y, model(x, training=True))\n"
    "    grads = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n    return loss",
    "for epoch in range(20):\n    total = 0.0\n    for step, (x, y) in enumerate(dataset):\n"
    "        total += float(train_step(x, y))\n    print(f'epoch {epoch}: mean loss {total / (step + 1):.4f}')",
]

ESTIMATOR_200K = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\ntf.disable_v2_behavior()",
    "rng = np.random.RandomState(2)\nfeatures = rng.normal(size=(20000, 16)).astype(np.float32)\n"
    "labels = (features.sum(axis=1) > 0).astype(np.int32)",
    "def input_fn():\n"
    "    dataset = tf.data.Dataset.from_tensor_slices(({'x': features}, labels))\n"
    "    return dataset.shuffle(20000).repeat().batch(64)\n\n"
    "def model_fn(features, labels, mode):\n"
    "    hidden = tf.layers.dense(features['x'], 64, activation=tf.nn.relu)\n"
    "    logits = tf.layers.dense(hidden, 2)\n"
    "    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)\n"
    "    optimizer = tf.train.GradientDescentOptimizer(0.1)\n"
    "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
    "    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)",
    "import tempfile\nestimator = tf.estimator.Estimator(model_fn=model_fn, model_dir=tempfile.mkdtemp(),\n"
    "                                   config=npu_run_config_init())\n"
    "estimator.train(input_fn=input_fn, max_steps=200000)",
]

SESSION_50K = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\ntf.disable_v2_behavior()",
    "rng = np.random.RandomState(3)\nX = rng.normal(size=(60000, 784)).astype(np.float32)\n"
    "Y = np.eye(10, dtype=np.float32)[rng.randint(0, 10, 60000)]\nbatch_size = 100",
    "x = tf.placeholder(tf.float32, [None, 784])\ny = tf.placeholder(tf.float32, [None, 10])\n"
    "W = tf.Variable(tf.random_normal([784, 10], stddev=0.01))\nb = tf.Variable(tf.zeros([10]))\n"
    "loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=tf.matmul(x, W) + b))\n"
    "train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)",
    "with tf.Session(config=npu_config_proto()) as sess:\n"
    "    sess.run(tf.global_variables_initializer())\n"
    "    for step in range(50000):\n"
    "        offset = (step * batch_size) % (X.shape[0] - batch_size)\n"
    "        _, value = sess.run([train_op, loss], feed_dict={x: X[offset:offset + batch_size],\n"
    "                                                          y: Y[offset:offset + batch_size]})\n"
    "        if step % 10000 == 0:\n            print('step', step, 'loss', value)\n"
    "    final = sess.run(W)",
]

TRAIN_AND_EVALUATE = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\ntf.disable_v2_behavior()",
    "rng = np.random.RandomState(4)\nfeatures = rng.normal(size=(20000, 8)).astype(np.float32)\n"
    "targets = features @ rng.normal(size=(8, 1)).astype(np.float32)",
    "def train_input_fn():\n"
    "    return tf.data.Dataset.from_tensor_slices(({'x': features}, targets)).shuffle(20000).repeat().batch(32)\n\n"
    "def eval_input_fn():\n"
    "    return tf.data.Dataset.from_tensor_slices(({'x': features[:2000]}, targets[:2000])).batch(32)\n\n"
    "columns = [tf.feature_column.numeric_column('x', shape=(8,))]",
    "import tempfile\nestimator = tf.estimator.LinearRegressor(feature_columns=columns, model_dir=tempfile.mkdtemp(),\n"
    "                                       config=npu_run_config_init(tf.estimator.RunConfig(save_checkpoints_steps=5000)))\n"
    "train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=100000)\n"
    "eval_spec = tf.estimator.EvalSpec(input_fn=eval_input_fn, steps=None, throttle_secs=0)\n"
    "tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)",
]

NOTEBOOKS = {
    "keras_resnet50_cifar.ipynb": RESNET50_CIFAR,
    "custom_loop_100k.ipynb": CUSTOM_LOOP_100K,
    "estimator_200k_steps.ipynb": ESTIMATOR_200K,
    "session_50k_steps.ipynb": SESSION_50K,
    "train_and_evaluate.ipynb": TRAIN_AND_EVALUATE,
}


def notebook(sources) -> dict:
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": source.splitlines(keepends=True)} for source in sources],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def main() -> None:
    for name, sources in NOTEBOOKS.items():
        (HERE / name).write_text(json.dumps(notebook(sources), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
