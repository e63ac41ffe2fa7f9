"""Writes the end-to-end test notebooks: single-card and hand-fixed distributed versions of a
Keras fit, a custom training loop and a TF1 Estimator, shaped like the vendor's migration guides.

Tiny models and data (64 rows, a few steps). Data is deterministic and initial weights are NOT
seeded, so that a notebook without the broadcast starts from different weights on each rank.
Run ``python make_notebooks.py`` to regenerate them.
"""

import json
import os

DATA = '''import numpy as np
rng = np.random.RandomState(0)
x = rng.rand(64, 4).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.1).astype("float32")
GLOBAL_BATCH = 16'''

KERAS_SINGLE = [
    "# Keras fit, single card",
    "import tensorflow as tf\n" + DATA,
    '''dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
model.compile(optimizer=optimizer, loss="mse")''',
    "history = model.fit(dataset, epochs=2, verbose=0)\nprint('loss', round(history.history['loss'][-1], 4))",
]

KERAS_FIXED = [
    "# Keras fit, distributed",
    "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n" + DATA,
    '''dataset = tf.data.Dataset.from_tensor_slices((x, y))
dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, GLOBAL_BATCH)
dataset = dataset.batch(batch_size)
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
npu.distribute.broadcast(model.trainable_variables)
optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(learning_rate=0.05))
model.compile(optimizer=optimizer, loss="mse")''',
    "history = model.fit(dataset, epochs=2, verbose=0)\nprint('loss', round(history.history['loss'][-1], 4))",
]

LOOP_SINGLE = [
    "import tensorflow as tf\n" + DATA,
    '''dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)''',
    '''@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss''',
    "%%time\nfor epoch in range(2):\n    for features, labels in dataset:\n        loss = train_step(features, labels)\nprint('loss', round(float(loss), 4))",
]

LOOP_FIXED = [
    "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n" + DATA,
    '''dataset = tf.data.Dataset.from_tensor_slices((x, y))
dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, GLOBAL_BATCH)
dataset = dataset.batch(batch_size)
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
npu.distribute.broadcast(model.trainable_variables)
optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)''',
    '''@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = npu.distribute.all_reduce(grads, reduction="mean")
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss''',
    "%%time\nfor epoch in range(2):\n    for features, labels in dataset:\n        loss = train_step(features, labels)\nprint('loss', round(float(loss), 4))",
]

ESTIMATOR_COMMON = '''def cnn_model_fn(features, labels, mode):
    hidden = tf.layers.dense(features, 8, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, 1)
    loss = tf.losses.mean_squared_error(labels, logits)
    if mode == tf.estimator.ModeKeys.TRAIN:
        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.05)
{wrap}        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)'''

ESTIMATOR_SINGLE = [
    "import os\nimport tempfile\nimport tensorflow as tf\n" + DATA,
    ESTIMATOR_COMMON.format(wrap=""),
    '''def train_data_fn():
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    return dataset.batch(GLOBAL_BATCH)''',
    '''estimator = tf.estimator.Estimator(model_fn=cnn_model_fn, model_dir=tempfile.mkdtemp())
training_hooks = []
estimator.train(train_data_fn, max_steps=4, hooks=training_hooks)
print("trained")''',
]

ESTIMATOR_FIXED = [
    "import os\nimport tempfile\nimport tensorflow as tf\nfrom npu_bridge.npu_init import *\n" + DATA,
    ESTIMATOR_COMMON.format(wrap="        optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"),
    '''def train_data_fn():
    rank_size, rank_id = int(os.getenv("RANK_SIZE", "1")), int(os.getenv("RANK_ID", "0"))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(rank_size, rank_id)
    return dataset.batch(GLOBAL_BATCH // rank_size)''',
    '''estimator = tf.estimator.Estimator(model_fn=cnn_model_fn, model_dir=tempfile.mkdtemp())
training_hooks = []
estimator.train(train_data_fn, max_steps=4, hooks=npu_hooks_append(training_hooks))
print("trained")''',
]


def notebook(cells):
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                     "language_info": {"name": "python"}},
        "cells": [_cell(source) for source in cells],
    }


def _cell(source):
    if source.startswith("# "):
        return {"cell_type": "markdown", "metadata": {}, "source": source}
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, cells in {
        "keras_single.ipynb": KERAS_SINGLE,
        "keras_fixed.ipynb": KERAS_FIXED,
        "loop_single.ipynb": LOOP_SINGLE,
        "loop_fixed.ipynb": LOOP_FIXED,
        "estimator_single.ipynb": ESTIMATOR_SINGLE,
        "estimator_fixed.ipynb": ESTIMATOR_FIXED,
    }.items():
        with open(os.path.join(here, name), "w", encoding="utf-8") as stream:
            json.dump(notebook(cells), stream, indent=1)
            stream.write("\n")


if __name__ == "__main__":
    main()
