"""Gradient aggregation (梯度聚合): gradients are all-reduced across ranks before the update."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, List, Optional, Tuple

from .. import knowledge as K
from ..facts import CallSite, CellFacts, dotted_name, receiver_name
from ..findings import NEEDS_DENSE_GRADIENTS, NEEDS_NPU_BRIDGE, NEEDS_NPU_DEVICE, NEEDS_OS, Edit, Finding
from ..learning_rules import EXAMPLE_RBM, EXAMPLE_RBM_PARTS, LEARNING_RULE, rule_updates
from ..analysis import is_distributed_argument
from ..i18n import N_, _
from .base import Example, Rule, add_argument, insert_after, keras_prefix, replace, single_target, wrap
from .not_data_parallel import trained_agents
from .keras_defaults import KERAS_DEFAULT_OPTIMIZER, default_optimizer_argument
from .reduction import SUM, reduction_for
from .reduction_mismatch import gradients_applied_by, gradients_of_wrapped_optimizers, wrapper_reduction_for
from .sources import applied_by_the_compiled_optimizer, not_variables, only_shown

TF1_WRAPPER = "npu_distributed_optimizer_wrapper"
BOOSTED_TREES_REASON = N_(
    "boosted trees take no gradient step to aggregate: they grow trees from statistics of the batches, with no "
    "optimizer for npu_distributed_optimizer_wrapper to wrap, and the adapter does not combine those statistics "
    "(each rank grows its own trees from the data it reads)"
)

NO_OPTIMIZER_REASON = N_(
    "the model_fn creates no optimizer and takes no gradient step (its train_op only counts steps): there are no "
    "gradients to aggregate"
)
# What a model_fn's train_op that is no gradient step is made of: ``step.assign_add(1)``, ``tf.no_op()``.
_NON_GRADIENT_TRAIN_OPS = ("assign_add", "assign", "no_op")


class MissingAllreduce(Rule):
    """Each rank computes gradients from its own shard of the data. Without aggregation each rank
    applies only its own: the weights drift apart from the first step, and no rank learns from the
    global batch. The adapter all-reduces the gradients before the update: the optimizer wrapped with
    ``npu_distributed_optimizer_wrapper`` (TF1) or ``npu_distributed_keras_optimizer_wrapper`` (TF2
    Keras), or ``npu.distribute.all_reduce`` on the gradients of a custom loop, with the reduction (sum
    or mean) that keeps the single-card math. The fix wraps the optimizer or inserts the all-reduce
    between the gradients and ``apply_gradients``. Under TF1 the wrapper all-gathers sparse gradients
    (``IndexedSlices``), which needs as many rows on every rank; the sparse lookups (embedding columns,
    ``embedding_lookup_sparse``, a linear model's categorical columns) send one row per distinct id
    of the batch, a count that differs from rank to rank, so the fix
    makes them dense first (``dense_gradients``, written once in the notebook), as Ascend's own
    DeepFM does before its all-reduce."""

    code = "missing-allreduce"
    step = "allreduce"
    severity = "error"

    VALID = [
        # The seed's method one: the optimizer is wrapped where it is created.
        "from npu_bridge.npu_init import *\n"
        "import tensorflow as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)\n"
        "    optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"
        "    train_op = optimizer.minimize(loss=features, global_step=tf.train.get_global_step())\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=features, train_op=train_op)\n"
        "estimator = tf.estimator.Estimator(model_fn=model_fn)\n",
        # The second seed: grads are all-reduced right after tape.gradient.
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "@tf.function\n"
        "def step(x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
        "    opt.apply_gradients(zip(grads, model.trainable_variables))\n",
        # Nothing trains: nothing to aggregate.
        "import tensorflow as tf\nx = tf.constant(1.0)\n",
        # The unified NPUOptimizer all-reduces (mean) with is_distributed=True.
        "from npu_bridge.npu_init import *\n"
        "import tensorflow as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
        "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_distributed=True)\n"
        "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
        "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
        "estimator = NPUEstimator(model_fn=model_fn)\n",
        # Loss scaling as distributed on the cards: the aggregating wrapper inside, the loss-scale
        # optimizer (which all-reduces only the overflow status) outside.
        "import tensorflow as tf\n"
        "from npu_bridge.npu_init import *\n"
        "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
        "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
        "optimizer = npu_distributed_optimizer_wrapper(tf.train.MomentumOptimizer(0.01, 0.9))\n"
        "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), True)\n"
        "train_op = optimizer.minimize(loss)\n"
        "with tf.Session() as sess:\n"
        "    sess.run(train_op)\n",
        # A canned Estimator given its optimizer explicitly, wrapped.
        "from npu_bridge.npu_init import *\n"
        "import tensorflow as tf\n"
        "classifier = tf.estimator.DNNClassifier(hidden_units=[16], feature_columns=columns,\n"
        "    optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.05)))\n"
        "classifier.train(input_fn=train_input_fn, max_steps=100, hooks=npu_hooks_append())\n",
        # Boosted trees take no gradient step: gradient aggregation does not apply.
        "import tensorflow as tf\n"
        "# %%\n"
        "trees = tf.estimator.BoostedTreesClassifier(columns, n_batches_per_layer=1)\n"
        "trees.train(input_fn=train_input_fn, max_steps=100)\n",
        # A model_fn whose train_op only counts steps (exported as a SavedModel): nothing to aggregate.
        "import tensorflow as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    step = tf.compat.v1.train.get_global_step()\n"
        "    return tf.estimator.EstimatorSpec(mode, predictions=features['x'], train_op=step.assign_add(1),\n"
        "                                      loss=tf.constant(0.))\n"
        "est = tf.estimator.Estimator(model_fn, 'checkpoints')\n"
        "est.train(train_fn, steps=1)\n",
        # Decision forests grow trees: no gradient step.
        "import tensorflow_decision_forests as tfdf\n"
        "train_ds = tfdf.keras.pd_dataframe_to_tf_dataset(train_df, label='species')\n"
        "model = tfdf.keras.RandomForestModel()\n"
        "model.compile(metrics=['accuracy'])\n"
        "model.fit(train_ds)\n",
    ]

    INVALID = [
        # A learning rule (an RBM's contrastive divergence): the term each update adds, all-reduced; a mean
        # over the window's rows stays a mean ...
        Example(
            EXAMPLE_RBM.format(**EXAMPLE_RBM_PARTS),
            EXAMPLE_RBM.format(**{**EXAMPLE_RBM_PARTS,
                                  "w_term": f'npu.distribute.all_reduce({EXAMPLE_RBM_PARTS["w_term"]}, reduction="mean")',
                                  "vb_term": f'npu.distribute.all_reduce({EXAMPLE_RBM_PARTS["vb_term"]}, reduction="mean")'}
                               ).replace("import tensorflow as tf\n", "import tensorflow as tf\nimport npu_device as npu\n"
                                         "npu.open().as_default()\n", 1),
        ),
        # ... and a term divided by the global batch (a sum over the rows) is summed.
        Example(
            EXAMPLE_RBM.format(**{**EXAMPLE_RBM_PARTS, "w_term": "self.lr * tf.matmul(tf.transpose(batch), h0 - h1) / 100.0"}),
            EXAMPLE_RBM.format(**{**EXAMPLE_RBM_PARTS,
                                  "w_term": 'npu.distribute.all_reduce(self.lr * tf.matmul(tf.transpose(batch), h0 - h1) / '
                                            '100.0, reduction="sum")',
                                  "vb_term": f'npu.distribute.all_reduce({EXAMPLE_RBM_PARTS["vb_term"]}, reduction="mean")'}
                               ).replace("import tensorflow as tf\n", "import tensorflow as tf\nimport npu_device as npu\n"
                                         "npu.open().as_default()\n", 1),
        ),
        # Keras imported name by name, never ``tensorflow as tf``: the optimizer the fix writes is
        # ``tf.keras.optimizers.RMSprop()``, and ``tf`` is imported with the setup (no NameError).
        Example(
            "from tensorflow.keras.models import Sequential\nfrom tensorflow.keras.layers import Dense\n"
            "model = Sequential([Dense(1, input_shape=(4,))])\nmodel.compile(optimizer='rmsprop', loss='mse')\n"
            "model.fit(ds, epochs=1)\n",
            "from tensorflow.keras.models import Sequential\nimport tensorflow as tf\nimport npu_device as npu\n"
            "npu.open().as_default()\nfrom tensorflow.keras.layers import Dense\n"
            "model = Sequential([Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.RMSprop()), "
            "loss='mse')\nmodel.fit(ds, epochs=1)\n",
        ),
        # A Keras model's own train_step applies through self.optimizer, the one compile gets: wrapping
        # it aggregates once; an all-reduce in train_step as well would aggregate twice (keras.io's VAE).
        Example(
            "import tensorflow as tf\nclass VAE(tf.keras.Model):\n    def train_step(self, data):\n"
            "        with tf.GradientTape() as tape:\n            loss = self.loss_of(data)\n"
            "        grads = tape.gradient(loss, self.trainable_weights)\n"
            "        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))\n        return {'loss': loss}\n"
            "# %%\nvae = VAE()\nvae.compile(optimizer=tf.keras.optimizers.Adam())\nvae.fit(images, epochs=30, batch_size=128)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\nclass VAE(tf.keras.Model):\n"
            "    def train_step(self, data):\n        with tf.GradientTape() as tape:\n            loss = self.loss_of(data)\n"
            "        grads = tape.gradient(loss, self.trainable_weights)\n"
            "        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))\n        return {'loss': loss}\n"
            "# %%\nvae = VAE()\nvae.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper("
            "tf.keras.optimizers.Adam()))\nvae.fit(images, epochs=30, batch_size=128)\n",
        ),
        # Adversarial training: the gradient of the input images is each rank's own (not averaged);
        # the model's gradients are all-reduced.
        Example(
            'import tensorflow as tf\n'
            'model = tf.keras.applications.ResNet50(weights=None, classes=10)\n'
            'for images, labels in dataset:\n'
            '    with tf.GradientTape() as tape:\n'
            '        tape.watch(images)\n'
            '        loss = loss_fn(labels, model(images))\n'
            '    adversarial = images + 0.01 * tf.sign(tape.gradient(loss, images))\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = loss_fn(labels, model(adversarial))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'model = tf.keras.applications.ResNet50(weights=None, classes=10)\n'
            'for images, labels in dataset:\n'
            '    with tf.GradientTape() as tape:\n'
            '        tape.watch(images)\n'
            '        loss = loss_fn(labels, model(images))\n'
            '    adversarial = images + 0.01 * tf.sign(tape.gradient(loss, images))\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = loss_fn(labels, model(adversarial))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    grads = npu.distribute.all_reduce(grads, reduction="mean")\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
        ),
        # compile without an optimizer trains with Keras' default, RMSprop: given explicitly, wrapped.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(loss='mse', metrics=['mae'])\nmodel.fit(ds, epochs=1)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(loss='mse', metrics=['mae'], optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper("
            "tf.keras.optimizers.RMSprop()))\nmodel.fit(ds, epochs=1)\n",
        ),
        # Estimator: the optimizer is created in model_fn, in another cell than the training call.
        Example(
            "import tensorflow as tf\n"
            "# %%\n"
            "def cnn_model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(features)\n"
            "    if mode == tf.estimator.ModeKeys.TRAIN:\n"
            "        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)  # SGD\n"
            "        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())\n"
            "        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "# %%\n"
            "def cnn_model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(features)\n"
            "    if mode == tf.estimator.ModeKeys.TRAIN:\n"
            "        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)  # SGD\n"
            "        optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"
            "        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())\n"
            "        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n",
            adapter="npu_bridge",
        ),
        # NPUOptimizer without is_distributed (default False): it does not aggregate; the fix sets it.
        Example(
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
            "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_loss_scale=False)\n"
            "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
            "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "estimator = NPUEstimator(model_fn=model_fn)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
            "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_loss_scale=False, is_distributed=True)\n"
            "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
            "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "estimator = NPUEstimator(model_fn=model_fn)\n",
            adapter="npu_bridge",
        ),
        # A loss-scale optimizer is not gradient aggregation, even with is_distributed=True (it
        # all-reduces the overflow status only): the optimizer it wraps is wrapped where it is created.
        Example(
            "import tensorflow as tf\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
            "optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
            "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), is_distributed=True)\n"
            "train_op = optimizer.minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(train_op)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
            "optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
            "optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"
            "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), is_distributed=True)\n"
            "train_op = optimizer.minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(train_op)\n",
            adapter="npu_bridge",
        ),
        # TF1 optimizer created inline, in a helper, through a compat.v1 alias.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "def make_train_op(loss):\n"
            "    return tf.train.AdamOptimizer(1e-3).minimize(loss)\n"
            "estimator = tf.estimator.Estimator(model_fn=None)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "def make_train_op(loss):\n"
            "    return npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer(1e-3)).minimize(loss)\n"
            "estimator = tf.estimator.Estimator(model_fn=None)\n",
        ),
        # TF2 Keras with a string optimizer.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(dataset, epochs=1)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()), loss='mse')\n"
            "model.fit(dataset, epochs=1)\n",
            adapter="npu_device",
        ),
        # TF2 Keras with an optimizer object created at module level, in its own cell.
        Example(
            "from tensorflow import keras\n"
            "# %%\n"
            "opt = keras.optimizers.SGD(0.1)\n"
            "# %%\n"
            "model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(opt, loss='mse')\n"
            "model.fit(x, y, batch_size=32)\n",
            "from tensorflow import keras\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "# %%\n"
            "opt = keras.optimizers.SGD(0.1)\n"
            "opt = npu.distribute.npu_distributed_keras_optimizer_wrapper(opt)\n"
            "# %%\n"
            "model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(opt, loss='mse')\n"
            "model.fit(x, y, batch_size=32)\n",
        ),
        # TF2 custom loop, loss divided by the global batch size: "sum" keeps the single-card math.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "GLOBAL_BATCH = 64\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        per_example = loss_object(y, model(x, training=True))\n"
            "        loss = tf.reduce_sum(per_example) * (1.0 / GLOBAL_BATCH)\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "GLOBAL_BATCH = 64\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        per_example = loss_object(y, model(x, training=True))\n"
            "        loss = tf.reduce_sum(per_example) * (1.0 / GLOBAL_BATCH)\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    grads = npu.distribute.all_reduce(grads, reduction=\"sum\")\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        ),
        # A tour of the tape beside the training: gradients only looked at (of two scalar variables, of two
        # constants bound in one tuple) are neither aggregated nor their sources broadcast.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "w1, w2 = tf.Variable(5.), tf.Variable(3.)\n"
            "with tf.GradientTape() as tape:\n"
            "    z = 3 * w1 ** 2 + 2 * w1 * w2\n"
            "gradients = tape.gradient(z, [w1, w2])\n"
            "# %%\n"
            "gradients\n"
            "# %%\n"
            "c1, c2 = tf.constant(5.), tf.constant(3.)\n"
            "with tf.GradientTape() as tape:\n"
            "    z = 3 * c1 ** 2 + 2 * c1 * c2\n"
            "gradients = tape.gradient(z, [c1, c2])\n"
            "print(gradients[0], gradients)\n"
            "# %%\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "w1, w2 = tf.Variable(5.), tf.Variable(3.)\n"
            "with tf.GradientTape() as tape:\n"
            "    z = 3 * w1 ** 2 + 2 * w1 * w2\n"
            "gradients = tape.gradient(z, [w1, w2])\n"
            "# %%\n"
            "gradients\n"
            "# %%\n"
            "c1, c2 = tf.constant(5.), tf.constant(3.)\n"
            "with tf.GradientTape() as tape:\n"
            "    z = 3 * c1 ** 2 + 2 * c1 * c2\n"
            "gradients = tape.gradient(z, [c1, c2])\n"
            "print(gradients[0], gradients)\n"
            "# %%\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    grads = npu.distribute.all_reduce(grads, reduction=\"mean\")\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        ),
        # A compiled Keras model made an Estimator: the clone rebuilds a Keras optimizer from its config (a
        # wrapper would be lost) and reuses a tf.compat.v1 one: compiled with the wrapped TF1 equivalent,
        # Keras' defaults written out; the notebook iterates a dataset in Python, so it stays TF2.
        Example(
            "import tensorflow as tf\n"
            "model.compile(loss='mse', optimizer='adam')\n"
            "for features, labels in input_fn().take(1):\n"
            "    print(features)\n"
            "estimator = tf.keras.estimator.model_to_estimator(keras_model=model)\n"
            "estimator.train(input_fn=input_fn, steps=500)\n",
            "from npu_device.compat.v1.npu_init import *\n"
            "import tensorflow as tf\n"
            "model.compile(loss='mse', optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.AdamOptimizer("
            "learning_rate=0.001, epsilon=1e-07)))\n"
            "for features, labels in input_fn().take(1):\n"
            "    print(features)\n"
            "estimator = tf.keras.estimator.model_to_estimator(keras_model=model)\n"
            "estimator.train(input_fn=input_fn, steps=500)\n",
        ),
        # The same with the optimizer made beforehand: replaced where it is made, its arguments renamed.
        Example(
            "import tensorflow as tf\n"
            "optimizer = tf.keras.optimizers.SGD(0.1)\n"
            "model.compile(loss='mse', optimizer=optimizer)\n"
            "estimator = tf.keras.estimator.model_to_estimator(model)\n"
            "estimator.train(input_fn=input_fn, steps=500, hooks=npu_hooks_append())\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "optimizer = npu_distributed_optimizer_wrapper(tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.1))\n"
            "model.compile(loss='mse', optimizer=optimizer)\n"
            "estimator = tf.keras.estimator.model_to_estimator(model)\n"
            "estimator.train(input_fn=input_fn, steps=500, hooks=npu_hooks_append())\n",
        ),
        # TF2 custom loop with a mean loss and the gradient used inline.
        Example(
            "import tensorflow as tf\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    optimizer.apply_gradients(zip(npu.distribute.all_reduce(tape.gradient(loss, model.trainable_variables), reduction=\"mean\"), model.trainable_variables))\n",
        ),
        # A canned Estimator with its default optimizer ('Adagrad' at 0.05 for DNN): passed explicitly, wrapped.
        Example(
            "import tensorflow as tf\n"
            "# %%\n"
            "columns = [tf.feature_column.numeric_column('x', shape=[4])]\n"
            "classifier = tf.estimator.DNNClassifier(hidden_units=[16, 8], feature_columns=columns, n_classes=3)\n"
            "# %%\n"
            "classifier.train(input_fn=train_input_fn, max_steps=100)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "# %%\n"
            "columns = [tf.feature_column.numeric_column('x', shape=[4])]\n"
            "classifier = tf.estimator.DNNClassifier(hidden_units=[16, 8], feature_columns=columns, n_classes=3, "
            "optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.05)))\n"
            "# %%\n"
            "classifier.train(input_fn=train_input_fn, max_steps=100)\n",
            adapter="npu_bridge",
        ),
        # A string keeps its class and the learning rate the Estimator gives strings (0.2 for Linear),
        # spelled from the module the Estimator comes from.
        Example(
            "import tensorflow as tf\n"
            "model = tf.compat.v1.estimator.LinearRegressor(feature_columns=columns, optimizer='Adam')\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "model = tf.compat.v1.estimator.LinearRegressor(feature_columns=columns, "
            "optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.AdamOptimizer(learning_rate=0.2)))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # Categorical columns in a linear model: its gradients are sparse (a weight looked up per id), which
        # the adapter all-gathers, so each rank must send as many ids: made dense first (gcp's courses).
        Example(
            "import tensorflow as tf\n"
            "thal = tf.feature_column.categorical_column_with_vocabulary_list('thal', ['fixed', 'normal'])\n"
            "model = tf.compat.v1.estimator.LinearClassifier(feature_columns=[thal],\n"
            "                                                optimizer=tf.compat.v1.train.FtrlOptimizer(0.1))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def dense_gradients(optimizer):\n"
            "    compute_gradients = optimizer.compute_gradients\n"
            "    def dense(*args, **kwargs):\n"
            "        return [(tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad, var)\n"
            "                for grad, var in compute_gradients(*args, **kwargs)]\n"
            "    optimizer.compute_gradients = dense\n"
            "    return optimizer\n"
            "thal = tf.feature_column.categorical_column_with_vocabulary_list('thal', ['fixed', 'normal'])\n"
            "model = tf.compat.v1.estimator.LinearClassifier(feature_columns=[thal],\n"
            "                                                optimizer=npu_distributed_optimizer_wrapper(dense_gradients(tf.compat.v1.train.FtrlOptimizer(0.1))))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # An embedding column given to a canned DNN, its optimizer named by a string: written explicitly, dense.
        Example(
            "import tensorflow as tf\n"
            "words = tf.feature_column.categorical_column_with_hash_bucket('words', 1000)\n"
            "columns = [tf.feature_column.embedding_column(words, dimension=8)]\n"
            "model = tf.compat.v1.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns, optimizer='Adagrad')\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def dense_gradients(optimizer):\n"
            "    compute_gradients = optimizer.compute_gradients\n"
            "    def dense(*args, **kwargs):\n"
            "        return [(tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad, var)\n"
            "                for grad, var in compute_gradients(*args, **kwargs)]\n"
            "    optimizer.compute_gradients = dense\n"
            "    return optimizer\n"
            "words = tf.feature_column.categorical_column_with_hash_bucket('words', 1000)\n"
            "columns = [tf.feature_column.embedding_column(words, dimension=8)]\n"
            "model = tf.compat.v1.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns, "
            "optimizer=npu_distributed_optimizer_wrapper(dense_gradients(tf.compat.v1.train.AdagradOptimizer(learning_rate=0.05))))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # DNNLinearCombined: an optimizer per part built (0.001 for the DNN part); no linear columns, no
        # linear optimizer.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "model = tf.estimator.DNNLinearCombinedClassifier(dnn_feature_columns=deep, dnn_hidden_units=[32, 16])\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "model = tf.estimator.DNNLinearCombinedClassifier(dnn_feature_columns=deep, dnn_hidden_units=[32, 16], "
            "dnn_optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.001)))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # Both parts: the linear one gets 0.005 (min(0.005, 1/sqrt(columns)) up to 40000 columns).
        Example(
            "import tensorflow as tf\n"
            "model = tf.estimator.DNNLinearCombinedRegressor(model_dir, wide, 'Ftrl', deep, dnn_hidden_units=[8])\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "model = tf.estimator.DNNLinearCombinedRegressor(model_dir, wide, "
            "npu_distributed_optimizer_wrapper(tf.train.FtrlOptimizer(learning_rate=0.005)), deep, dnn_hidden_units=[8], "
            "dnn_optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.001)))\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # An optimizer object given to a canned Estimator, here from a callable: wrapped where it is created.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "classifier = tf.estimator.DNNClassifier(\n"
            "    hidden_units=[8], feature_columns=columns,\n"
            "    optimizer=lambda: tf.train.ProximalAdagradOptimizer(learning_rate=0.1, "
            "l1_regularization_strength=0.001))\n"
            "classifier.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "classifier = tf.estimator.DNNClassifier(\n"
            "    hidden_units=[8], feature_columns=columns,\n"
            "    optimizer=lambda: npu_distributed_optimizer_wrapper(tf.train.ProximalAdagradOptimizer(learning_rate=0.1, "
            "l1_regularization_strength=0.001)))\n"
            "classifier.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # An optimizer from a function of the notebook, given by name (the Estimator calls it): wrapped in it.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "# %%\n"
            "def make_optimizer():\n"
            "    return tf.train.FtrlOptimizer(learning_rate=0.1, l1_regularization_strength=0.01)\n"
            "# %%\n"
            "model = tf.estimator.LinearClassifier(columns, optimizer=make_optimizer)\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "# %%\n"
            "def make_optimizer():\n"
            "    return npu_distributed_optimizer_wrapper(tf.train.FtrlOptimizer(learning_rate=0.1, "
            "l1_regularization_strength=0.01))\n"
            "# %%\n"
            "model = tf.estimator.LinearClassifier(columns, optimizer=make_optimizer)\n"
            "model.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # TF2's canned Estimator builds a Keras optimizer from its string in each training graph: a callable
        # making the same one (the DNN's string takes its class's default rate), wrapped. The compile beside
        # it is wrapped already, which does not aggregate the Estimator's gradients.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()), "
            "loss='mse')\nmodel.fit(dataset, epochs=2)\n# %%\n"
            "classifier = tf.estimator.DNNClassifier(hidden_units=[16], feature_columns=columns)\n"
            "classifier.train(input_fn=train_input_fn, steps=50)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()), "
            "loss='mse')\nmodel.fit(dataset, epochs=2)\n# %%\n"
            "classifier = tf.estimator.DNNClassifier(hidden_units=[16], feature_columns=columns, optimizer=lambda: "
            "npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.compat.v1.keras.optimizers.Adagrad()))\n"
            "classifier.train(input_fn=train_input_fn, steps=50)\n",
            adapter="npu_device",
        ),
        # A TF2 canned Estimator's optimizer from a function of the notebook (TensorFlow's canned-Estimator
        # migration guide): every Keras optimizer it may return is wrapped where it is made.
        Example(
            "import tensorflow as tf\ntf.random.set_seed(1)\n# %%\n"
            "def make_optimizer(version):\n    if version == 1:\n"
            "        optimizer = lambda: tf.keras.optimizers.legacy.Ftrl(learning_rate=0.1)\n    else:\n"
            "        optimizer = tf.keras.optimizers.legacy.Ftrl(learning_rate=0.1)\n    return optimizer\n# %%\n"
            "estimator = tf.estimator.LinearEstimator(head=head, feature_columns=columns, optimizer=make_optimizer(1))\n"
            "estimator.train(input_fn=train_input_fn, steps=50)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\ntf.random.set_seed(1)\n# %%\n"
            "def make_optimizer(version):\n    if version == 1:\n"
            "        optimizer = lambda: npu.distribute.npu_distributed_keras_optimizer_wrapper("
            "tf.keras.optimizers.legacy.Ftrl(learning_rate=0.1))\n    else:\n"
            "        optimizer = tf.keras.optimizers.legacy.Ftrl(learning_rate=0.1)\n"
            "        optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n"
            "    return optimizer\n# %%\n"
            "estimator = tf.estimator.LinearEstimator(head=head, feature_columns=columns, optimizer=make_optimizer(1))\n"
            "estimator.train(input_fn=train_input_fn, steps=50)\n",
            adapter="npu_device",
        ),
        # A model built and compiled in each of several cells, each rebinding ``optimizer`` (Udacity's
        # forecasting course): every compile's own optimizer is wrapped, not only the last one.
        Example(
            "import tensorflow as tf\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-5, momentum=0.9)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-6, momentum=0.9)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-5, momentum=0.9)\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-6, momentum=0.9)\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n",
        ),
        # One of two compiles wrapped: the step is missing for the other, and only that one is fixed.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-5, momentum=0.9)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n# %%\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(1e-6))\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "optimizer = tf.keras.optimizers.SGD(1e-5, momentum=0.9)\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n# %%\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(1e-6))\n"
            "model.compile(loss='mse', optimizer=optimizer)\nmodel.fit(train_set, epochs=10)\n",
        ),
        # A string the Estimator does not know (names are case-sensitive there): reported, not fixed.
        Example(
            "import tensorflow as tf\n"
            "classifier = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns, optimizer='adam')\n"
            "classifier.train(input_fn=train_input_fn, steps=50)\n",
        ),
        # TF-Agents: the optimizer given to the agent, whose train() applies the gradients through it.
        Example(
            "import tensorflow as tf\n"
            "from tf_agents.agents.dqn import dqn_agent\n"
            "from tf_agents.environments import suite_gym, tf_py_environment\n"
            "# %%\n"
            "train_env = tf_py_environment.TFPyEnvironment(suite_gym.load('CartPole-v0'))\n"
            "optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)\n"
            "agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=q_net, optimizer=optimizer)\n"
            "agent.initialize()\n"
            "# %%\n"
            "for _ in range(1000):\n"
            "    experience, _ = next(iterator)\n"
            "    train_loss = agent.train(experience).loss\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "from tf_agents.agents.dqn import dqn_agent\n"
            "from tf_agents.environments import suite_gym, tf_py_environment\n"
            "# %%\n"
            "train_env = tf_py_environment.TFPyEnvironment(suite_gym.load('CartPole-v0'))\n"
            "optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)\n"
            "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n"
            "agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=q_net, optimizer=optimizer)\n"
            "agent.initialize()\n"
            "# %%\n"
            "for _ in range(1000):\n"
            "    experience, _ = next(iterator)\n"
            "    train_loss = agent.train(experience).loss\n",
            adapter="npu_device",
        ),
        # TF-Agents with a tf.compat.v1 optimizer: the agent trains eagerly (TF2) and applies its tape's
        # gradients, so the TF2 wrapper all-reduces them (the TF1 one patches compute_gradients, unused here).
        Example(
            "import tensorflow as tf\n"
            "from tf_agents.bandits.agents import ranking_agent\n"
            "agent = ranking_agent.RankingAgent(time_step_spec=time_step_spec, action_spec=action_spec,\n"
            "    scoring_network=scoring_network, optimizer=tf.compat.v1.train.AdamOptimizer(learning_rate=0.05))\n"
            "for _ in range(100):\n"
            "    driver.run()\n"
            "    loss_info = agent.train(replay_buffer.gather_all())\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "from tf_agents.bandits.agents import ranking_agent\n"
            "agent = ranking_agent.RankingAgent(time_step_spec=time_step_spec, action_spec=action_spec,\n"
            "    scoring_network=scoring_network, optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper("
            "tf.compat.v1.train.AdamOptimizer(learning_rate=0.05)))\n"
            "for _ in range(100):\n"
            "    driver.run()\n"
            "    loss_info = agent.train(replay_buffer.gather_all())\n",
            adapter="npu_device",
        ),
        # TF1 gradients of tf.gradients given to apply_gradients (TensorFlow-Examples' TensorBoard guide): the wrapper all-reduces in compute_gradients, never called here, so they are all-reduced where they are made; npu_allreduce runs HCCL on one card too, hence the guard.
        Example(
            'import tensorflow as tf\n'
            'loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))\n'
            'optimizer = tf.train.GradientDescentOptimizer(0.01)\n'
            'grads = tf.gradients(loss, tf.trainable_variables())\n'
            'grads = list(zip(grads, tf.trainable_variables()))\n'
            'apply_grads = optimizer.apply_gradients(grads_and_vars=grads)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    sess.run(apply_grads, feed_dict={x: batch_x, y: batch_y})\n',
            'from npu_bridge.npu_init import *\n'
            'import tensorflow as tf\n'
            'import os\n'
            'loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))\n'
            'optimizer = tf.train.GradientDescentOptimizer(0.01)\n'
            'optimizer = npu_distributed_optimizer_wrapper(optimizer)\n'
            'grads = tf.gradients(loss, tf.trainable_variables())\n'
            "if int(os.getenv('RANK_SIZE', '1')) > 1:\n"
            '    grads = npu_allreduce(grads)\n'
            'grads = list(zip(grads, tf.trainable_variables()))\n'
            'apply_grads = optimizer.apply_gradients(grads_and_vars=grads)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    sess.run(apply_grads, feed_dict={x: batch_x, y: batch_y})\n',
        ),
    ]

    def prepare(self, context) -> None:
        if _trains_only_boosted_trees(context):
            context.mark("allreduce", "not-applicable", _(BOOSTED_TREES_REASON))
        elif _model_fns_take_no_gradient_step(context):
            context.mark("allreduce", "not-applicable", _(NO_OPTIMIZER_REASON))

    def check(self, context) -> Iterable[Finding]:
        if context.steps["allreduce"] != "missing":
            return []
        if _horovod_optimizer(context):  # horovod-leftover converts it; what it does not aggregate is ours
            return self._beside_horovod(context)
        findings: List[Finding] = list(self._set_is_distributed(context))
        if context.tf1:
            findings += self._all_reduce_symbolic_gradients(context)
            findings += self._wrap_tf1_optimizers(context)
            findings += self._canned_estimator_optimizers(context)
        elif "estimator" in context.frameworks:  # the Estimator part of TF2 code trains in a TF1 graph
            findings += self._wrap_tf1_optimizers(context, only_in=_model_fns(context))
            findings += self._canned_estimator_optimizers(context)
            findings += self._canned_estimator_keras_optimizers(context)
        if "estimator" in context.frameworks:
            findings += self._keras_models_as_estimators(context)
        if "keras" in context.frameworks:
            findings += self._wrap_compiled_optimizers(context)
        if "custom-loop" in context.frameworks and not context.tf1:
            findings += self._all_reduce_gradients(context)
        if "tf-agents" in context.frameworks and not context.tf1:  # TF1: _wrap_tf1_optimizers wraps them
            findings += self._wrap_agent_optimizers(context)
        if LEARNING_RULE in context.frameworks and not context.tf1:
            findings += self._all_reduce_rule_terms(context)
        return findings or self.unlocated(
            context, _("gradients are not aggregated across ranks, and neither the optimizer nor the gradient "
                       "computation was recognized")
        )

    def _beside_horovod(self, context) -> List[Finding]:
        """The trainings Horovod's optimizer does not aggregate (horovod-leftover turns it into the
        adapter's): a compile given a plain optimizer, a canned Estimator's own, a TF2 loop's gradients
        applied by another optimizer than Horovod's, through a plain tape. The same findings as once
        Horovod is converted: a second fix adds nothing."""
        if context.tf1:
            return []
        findings: List[Finding] = []
        if "keras" in context.frameworks:
            findings += self._wrap_compiled_optimizers(context, only_unwrapped=True)
        if "estimator" in context.frameworks:
            findings += self._canned_estimator_optimizers(context)
            findings += self._canned_estimator_keras_optimizers(context)
        if "custom-loop" in context.frameworks:
            findings += self._all_reduce_gradients(context, beside_horovod=True)
        return findings

    # -- Keras models made Estimators: the compiled optimizer, as the tf.compat.v1 one the clone reuses
    def _keras_models_as_estimators(self, context) -> Iterator[Finding]:
        """``model_to_estimator(keras_model=model)`` clones the model into the Estimator's graph and
        rebuilds a compiled Keras optimizer from its config (a wrapper on it is lost); a tf.compat.v1
        optimizer (Keras keeps it in a TFOptimizer) is reused as it is. So the compile is given the
        wrapped tf.compat.v1 equivalent, with Keras' own defaults written out."""
        for cell, facts, site in context.facts.calls_to(K.MODEL_TO_ESTIMATOR):
            model = site.argument(0, "keras_model")
            compiled = _last_compile_of(context, model, (cell, site.node.lineno)) if isinstance(model, ast.Name) else None
            if compiled is None:
                continue  # a model loaded from a path: its optimizer is in the file
            c_cell, c_facts, c_site = compiled
            given = c_site.argument(0, "optimizer")
            if given is not None and _reaches_tf1_optimizer(context, given):
                continue  # a tf.compat.v1 optimizer: _wrap_tf1_optimizers wraps it where it is made
            creation = _keras_optimizer_creation(context, c_cell, c_facts, c_site, given)
            code = None
            if creation is not None:
                code = _as_tf1_optimizer(context, None if creation[2] is c_site.node else creation[2])
            message = _("gradients are not aggregated across ranks: model_to_estimator rebuilds the compiled "
                        "Keras optimizer from its config, without a wrapper; compile the model with the "
                        "tf.compat.v1 equivalent wrapped with {wrapper}").format(wrapper=TF1_WRAPPER)
            if code is None:
                yield self.finding(c_cell, c_facts, given or c_site.node, _("{message} (by hand: {optimizer})").format(
                    message=message, optimizer=c_facts.segment(given) if given is not None else "rmsprop"))
                continue
            o_cell, o_facts, node = creation
            code = f"{TF1_WRAPPER}({code})"
            edit = add_argument(o_cell, o_facts, node, f"optimizer={code}", [NEEDS_NPU_BRIDGE]) \
                if node is c_site.node else replace(o_cell, o_facts, node, code, [NEEDS_NPU_BRIDGE])
            yield self.finding(o_cell, o_facts, node, message, [edit])

    # -- NPUOptimizer: all-reduces only with is_distributed=True
    def _set_is_distributed(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*K.DISTRIBUTED_FLAG_OPTIMIZERS):
            value = is_distributed_argument(context.facts, site)
            if value is None:
                edit = add_argument(cell, facts, site.node, "is_distributed=True")
            else:
                edit = replace(cell, facts, value, "True")
            yield self.finding(
                cell, facts, site.node,
                _("gradients are not aggregated across ranks: {method} all-reduces them only with "
                  "is_distributed=True (the default is False)").format(method=site.method),
                [edit],
            )

    # -- TF1: gradients of tf.gradients, applied with apply_gradients
    def _all_reduce_symbolic_gradients(self, context) -> Iterator[Finding]:
        """``grads = tf.gradients(loss, variables)`` then ``optimizer.apply_gradients(...)``: the TF1
        wrapper all-reduces in ``compute_gradients`` only, which this code never calls, so the
        gradients are all-reduced where they are made (``npu_allreduce``, "mean"); the adapter's
        ``npu_allreduce`` runs HCCL even on one card, hence the guard on RANK_SIZE."""
        for cell, facts, site, name in symbolic_gradients_applied(context):
            code = f"if {K.RANK_SIZE_EXPR} > 1:\n    {name} = npu_allreduce({name})"
            yield self.finding(
                cell, facts, site.node,
                _("gradients are not aggregated across ranks: {name} comes from tf.gradients and goes to "
                  "apply_gradients, past npu_distributed_optimizer_wrapper (it all-reduces in compute_gradients): "
                  "all-reduce them where they are made (npu_allreduce, mean)").format(name=name),
                [insert_after(cell, facts, site.stmt, code, [NEEDS_NPU_BRIDGE, NEEDS_OS])],
            )

    # -- TF1: wrap every tf.train optimizer where it is created
    def _wrap_tf1_optimizers(self, context, only_in: Optional[set] = None) -> Iterator[Finding]:
        """``only_in``: the functions whose optimizers are wrapped (None: all of them)."""
        given = _given_to_flag_optimizers(context)
        for cell, facts, site in context.facts.calls_to(*K.TF1_OPTIMIZERS):
            if only_in is not None and site.function not in only_in and not _given_to_an_estimator(context, site):
                continue
            if _already_wrapped(context, site) or id(site.node) in given or (
                (site.function, single_target(site.stmt)) in given
            ):
                continue  # the fix sets is_distributed=True on the NPUOptimizer it is given to
            message = _("gradients are not aggregated across ranks: wrap this {method} with "
                        "{wrapper} (all-reduce, mean) where it is created").format(method=site.method, wrapper=TF1_WRAPPER)
            sparse = sparse_gradients(context)
            if sparse is None:
                edit = _wrap_creation(cell, facts, site, TF1_WRAPPER, NEEDS_NPU_BRIDGE)
            else:
                message += _dense_note(sparse)
                edit = _wrap_creation(cell, facts, site, f"{TF1_WRAPPER}({K.DENSE_GRADIENTS}", NEEDS_NPU_BRIDGE,
                                      ")", also=NEEDS_DENSE_GRADIENTS)
            yield self.finding(cell, facts, site.node, message, [edit])

    # -- TF1 canned Estimators: the optimizer they would build from a string, explicit and wrapped
    def _canned_estimator_optimizers(self, context) -> Iterator[Finding]:
        """TF1's canned Estimators (every one in TF1 code; in TF2 code, those spelled from tf.compat.v1:
        TF2's own take Keras optimizers)."""
        for cell, facts, site, parameter, given in _canned_optimizers(context, v2=False):
            if given is None or _is_string(given):
                yield self._explicit_canned_optimizer(context, cell, facts, site, parameter, given)
            elif not _reaches_tf1_optimizer(context, given):  # else _wrap_tf1_optimizers wraps it
                yield self.finding(
                    cell, facts, given,
                    _("gradients are not aggregated across ranks: wrap the optimizer given to {method} "
                      "with {wrapper} where it is created").format(method=site.method, wrapper=TF1_WRAPPER),
                )

    # -- TF2 canned Estimators: their Keras optimizer, wrapped where it is made
    def _canned_estimator_keras_optimizers(self, context) -> Iterator[Finding]:
        """TF2's canned Estimators (``tf.estimator.DNNClassifier``) build a Keras optimizer in each
        training graph, from a string, an instance or a callable, and apply the gradients through its
        ``apply_gradients``, which the TF2 wrapper all-reduces. A string (or the default) becomes a
        callable making the same optimizer, wrapped: a fresh one per graph, as the string gave. A Keras
        optimizer the notebook makes for it is wrapped where it is made."""
        wrapper = f"{context.npu}.distribute.npu_distributed_keras_optimizer_wrapper"
        for cell, facts, site, parameter, given in _canned_optimizers(context, v2=True):
            if given is None or _is_string(given):
                yield self._explicit_keras_canned_optimizer(context, cell, facts, site, parameter, given, wrapper)
                continue
            made = list(_optimizers_made_for(context, cell, facts, given, site.function))
            if not made:
                yield self.finding(cell, facts, given, _(
                    "gradients are not aggregated across ranks: wrap the Keras optimizer given to {method} "
                    "with {wrapper} where it is created").format(method=site.method, wrapper=wrapper.rsplit(".", 1)[-1]))
            for m_cell, m_facts, m_site, wrapped in made:
                if not wrapped:
                    yield self.finding(m_cell, m_facts, m_site.node, _(
                        "gradients are not aggregated across ranks: {method} applies its gradients through "
                        "this optimizer's apply_gradients; wrap it with {wrapper} where it is created").format(
                            method=site.method, wrapper=wrapper.rsplit(".", 1)[-1]),
                        [_wrap_creation(m_cell, m_facts, m_site, wrapper, NEEDS_NPU_DEVICE)])

    def _explicit_keras_canned_optimizer(self, context, cell, facts, site, parameter, given, wrapper) -> Finding:
        name, _position, default, learning_rate, _part = parameter
        string = default if given is None else given.value
        class_name = K.CANNED_V2_OPTIMIZER_CLASSES.get(string)
        if context.facts.resolve(site.dotted) in K.CANNED_V2_CLASS_DEFAULT_RATE:
            learning_rate = None
        rate = _("its class's default") if learning_rate is None else str(learning_rate)
        if given is None:
            what = _("{method} builds its default {name}, {string!r} (learning rate {learning_rate}), unwrapped")
        else:
            what = _("{method} builds its {name} from {string!r} (learning rate {learning_rate}) unwrapped")
        what = what.format(method=site.method, name=name, string=string, learning_rate=rate)
        message = _("gradients are not aggregated across ranks: {what}; pass a callable making it, wrapped "
                    "with {wrapper}").format(what=what, wrapper=wrapper.rsplit(".", 1)[-1])
        if class_name is None:
            return self.finding(cell, facts, given or site.node, _("{message} (unknown optimizer {optimizer!r})").format(
                message=message, optimizer=string))
        arguments = "" if learning_rate is None else f"learning_rate={learning_rate}"
        # tf.compat.v1.keras.optimizers: the OptimizerV2 classes the Estimator takes, in TF 2.6 as in 2.15.
        code = f"lambda: {wrapper}({_tensorflow_v1_prefix(context)}.keras.optimizers.{class_name}({arguments}))"
        if given is None:
            edit = add_argument(cell, facts, site.node, f"{name}={code}", [NEEDS_NPU_DEVICE])
        else:
            edit = replace(cell, facts, given, code, [NEEDS_NPU_DEVICE])
        return self.finding(cell, facts, site.node if given is None else given, message, [edit])

    def _explicit_canned_optimizer(self, context, cell, facts, site, parameter, given) -> Finding:
        name, _position, default, learning_rate, _part = parameter
        string = default if given is None else given.value
        class_name = K.CANNED_OPTIMIZER_STRINGS.get(string)
        if given is None:
            what = _("{method} builds its default {name}, {string!r} (learning rate {learning_rate}), unwrapped")
        else:
            what = _("{method} builds its {name} from {string!r} (learning rate {learning_rate}) unwrapped")
        what = what.format(method=site.method, name=name, string=string, learning_rate=learning_rate)
        message = _("gradients are not aggregated across ranks: {what}; pass it explicitly, wrapped with {wrapper}").format(
            what=what, wrapper=TF1_WRAPPER)
        tensorflow = _tensorflow_of(context, site)
        if class_name is None:
            return self.finding(cell, facts, given or site.node, _("{message} (unknown optimizer {optimizer!r})").format(
                message=message, optimizer=string))
        if "compat.v2" in tensorflow:  # the v2 export takes Keras optimizers; the TF1 adapter's are v1
            return self.finding(cell, facts, given or site.node, _("{message} (a tf.keras.optimizers.legacy one)").format(
                message=message))
        code = f"{tensorflow}.train.{class_name}(learning_rate={learning_rate})"
        needs = [NEEDS_NPU_BRIDGE]
        sparse = sparse_gradients(context)
        if sparse is not None:
            code, message = f"{K.DENSE_GRADIENTS}({code})", message + _dense_note(sparse)
            needs.append(NEEDS_DENSE_GRADIENTS)
        code = f"{TF1_WRAPPER}({code})"
        if given is None:
            edit = add_argument(cell, facts, site.node, f"{name}={code}", needs)
        else:
            edit = replace(cell, facts, given, code, needs)
        return self.finding(cell, facts, site.node if given is None else given, message, [edit])

    # -- Keras compile/fit: wrap the optimizer given to compile (resolving strings)
    def _wrap_compiled_optimizers(self, context, only_unwrapped: bool = False) -> Iterator[Finding]:
        wrapper = TF1_WRAPPER if context.tf1 else f"{context.npu}.distribute.npu_distributed_keras_optimizer_wrapper"
        needs = NEEDS_NPU_BRIDGE if context.tf1 else NEEDS_NPU_DEVICE
        seen = set()
        for cell, facts, site in context.facts.calls("compile"):
            wrapped = _compile_wrapped(context, cell, site)
            if wrapped or (only_unwrapped and wrapped is None):
                continue
            optimizer = site.argument(0, "optimizer")
            if optimizer is None:
                default = default_optimizer_argument(context, cell, facts, site, wrapper, needs)
                if default is not None:
                    yield self.finding(
                        cell, facts, site.node,
                        _("gradients are not aggregated across ranks: compile trains with Keras' default "
                          "optimizer ({optimizer}); give it explicitly, wrapped with {wrapper}").format(
                            optimizer=KERAS_DEFAULT_OPTIMIZER, wrapper=wrapper.rsplit('.', 1)[-1]), [default],
                    )
                continue
            found = self._compiled_optimizer_fix(context, cell, facts, site, optimizer, wrapper, needs)
            if found is not None and (found.cell, found.line, found.column) not in seen:
                seen.add((found.cell, found.line, found.column))
                yield found

    def _compiled_optimizer_fix(self, context, cell, facts, site, optimizer, wrapper, needs) -> Optional[Finding]:
        message = _("gradients are not aggregated across ranks: wrap the optimizer given to compile with {wrapper}").format(
            wrapper=wrapper.rsplit('.', 1)[-1])
        if isinstance(optimizer, ast.Constant) and isinstance(optimizer.value, str):
            class_name = K.KERAS_OPTIMIZER_STRINGS.get(optimizer.value.lower())
            if class_name is None:
                return self.finding(cell, facts, optimizer, _("{message} (unknown optimizer {optimizer!r})").format(
                    message=message, optimizer=optimizer.value))
            code = f"{wrapper}({keras_prefix(context)}.optimizers.{class_name}())"
            return self.finding(cell, facts, optimizer, message, [replace(cell, facts, optimizer, code, [needs])])
        extra = _reduce_reduction_argument(context, optimizer)
        if isinstance(optimizer, ast.Name):
            creation = _creation_of(context, optimizer.id, site, cell)
            if creation is not None and not _ran_already(context, creation[0], cell):
                c_cell, c_facts, c_site = creation
                return self.finding(
                    c_cell, c_facts, c_site.node, message,
                    [_wrap_creation(c_cell, c_facts, c_site, wrapper, needs, extra)],
                )
        return self.finding(cell, facts, optimizer, message, [wrap(cell, facts, optimizer, wrapper, [needs], extra)])

    # -- TF2 custom loops: all-reduce right after tape.gradient
    def _all_reduce_gradients(self, context, beside_horovod: bool = False) -> Iterator[Finding]:
        """``beside_horovod``: leave the gradients Horovod aggregates (its optimizer applies them, or its
        tape takes them)."""
        aggregated = gradients_of_wrapped_optimizers(context) | _gradients_of_optimizers_compile_fixes_wrap(context)
        if beside_horovod:
            aggregated |= _gradients_horovod_aggregates(context)
        for cell, facts, site in context.facts.calls("gradient"):
            if site.receiver is None or len(site.node.args) + len(site.node.keywords) < 2:
                continue
            if id(site.node) in aggregated:
                continue  # applied by a wrapped optimizer, which all-reduces them (another loop is not)
            if _all_reduced_already(context, facts, site):
                continue  # another training's step is missing, not this one's: aggregate once
            sources = site.argument(1, "sources")
            if sources is not None and not_variables(context, facts, site, sources):
                continue  # an input's gradient: each rank's own samples, not to be averaged across ranks
            if only_shown(context, cell, site):
                continue  # a tour of the tape: a gradient looked at, never applied
            if "keras" in context.frameworks and applied_by_the_compiled_optimizer(facts, site):
                continue  # fit's step: the compiled optimizer is wrapped (once) by _wrap_compiled_optimizers
            reduction, reason = reduction_for(context, facts, site)
            function = f"{context.npu}.distribute.all_reduce"
            target = single_target(site.stmt)
            if target is not None and site.stmt.value is site.node:
                edit = insert_after(
                    cell, facts, site.stmt, f'{target} = {function}({target}, reduction="{reduction}")',
                    [NEEDS_NPU_DEVICE],
                )
            else:
                edit = replace(
                    cell, facts, site.node,
                    f'{function}({facts.segment(site.node)}, reduction="{reduction}")', [NEEDS_NPU_DEVICE],
                )
            yield self.finding(
                cell, facts, site.node,
                _('gradients are not all-reduced across ranks: add {function}(..., reduction="{reduction}") '
                  "after tape.gradient ({reason})").format(function=function, reduction=reduction, reason=reason),
                [edit],
            )


    # -- a learning rule the notebook writes (an RBM's): the term each update adds
    def _all_reduce_rule_terms(self, context) -> Iterator[Finding]:
        """``self.w = self.w + lr * (positive - negative) / rows``: each rank computes the term from its
        own rows; all-reduced (a mean of the ranks' means is the window's mean, sums add up), every rank
        applies the same update."""
        function = f"{context.npu}.distribute.all_reduce"
        for update in rule_updates(context.facts):
            cell, facts, term = update.cell, update.facts, update.term
            yield self.finding(
                cell, facts, update.stmt,
                _('{parameter} is updated by a rule computed from each rank\'s own rows, and the ranks do not '
                  'agree on it: all-reduce what the update adds ({function}(..., reduction="{reduction}"))').format(
                    parameter=update.parameter, function=function, reduction=update.reduction),
                [replace(cell, facts, term, f'{function}({facts.segment(term)}, reduction="{update.reduction}")',
                         [NEEDS_NPU_DEVICE])],
            )

    # -- TF-Agents: the optimizer given to the agent, whose train() calls its apply_gradients
    def _wrap_agent_optimizers(self, context) -> Iterator[Finding]:
        wrapper = f"{context.npu}.distribute.npu_distributed_keras_optimizer_wrapper"
        seen = set()
        for agent in trained_agents(context.facts):
            optimizer = agent.optimizer
            if optimizer is None:
                continue
            message = _(
                "gradients are not aggregated across ranks: wrap the optimizer given to {method} with "
                "npu_distributed_keras_optimizer_wrapper (the agent's train() applies its gradients through it)"
            ).format(method=agent.site.method)
            creation = _created_before(context, optimizer.id, agent) if isinstance(optimizer, ast.Name) else None
            if creation is not None:
                cell, facts, site = creation
                edit = _wrap_creation(cell, facts, site, wrapper, NEEDS_NPU_DEVICE)
            else:
                cell, facts, site = agent.cell, agent.facts, agent.site
                edit = wrap(cell, facts, optimizer, wrapper, [NEEDS_NPU_DEVICE])
            if (cell, edit.start) not in seen:
                seen.add((cell, edit.start))
                yield self.finding(cell, facts, site.node if creation else optimizer, message, [edit])


def _last_compile_of(context, model: ast.Name, before: Tuple[int, int]):
    compiles = [(cell, facts, site) for cell, facts, site in context.facts.calls("compile")
                if site.receiver is not None and dotted_name(site.receiver) == model.id
                and (cell, site.node.lineno) <= before]
    return compiles[-1] if compiles else None


def _gradients_horovod_aggregates(context) -> set:
    """The ids of the tape.gradient calls Horovod aggregates: applied by a name bound to its optimizer, or
    taken by a tape bound to its ``DistributedGradientTape``."""
    horovod = _names_bound_to_horovod(context)
    found = {id(gradient.node) for _facts, gradient in gradients_applied_by(context, horovod)}
    found |= {id(site.node) for _cell, _facts, site in context.facts.calls("gradient")
              if isinstance(site.receiver, ast.Name) and site.receiver.id in horovod}
    return found


def _names_bound_to_horovod(context) -> set:
    names = set()
    for _cell, facts in context.facts.cells:
        for name, assignments in facts.assignments.items():
            if any(isinstance(a.value, ast.Call)
                   and context.facts.resolve(dotted_name(a.value.func) or "").startswith("horovod.") for a in assignments):
                names.add(name)
    return names


def _gradients_of_optimizers_compile_fixes_wrap(context) -> set:
    """The ids of the tape.gradient calls applied by an optimizer that a Keras compile is given unwrapped:
    the fix wraps that object (where it is made, with the loop's reduction), and the wrapper all-reduces
    what the loop applies too; an all_reduce in the loop as well would aggregate twice."""
    if "keras" not in context.frameworks:
        return set()
    compiled = {}  # name -> the values it was bound to where a compile was given it unwrapped
    for cell, _facts, site in context.facts.calls("compile"):
        given = site.argument(0, "optimizer")
        if isinstance(given, ast.Name) and _compile_wrapped(context, cell, site) is False:
            value = context.facts.bound_before(given.id, cell, site.node.lineno, site.function)
            if value is not None:
                compiled.setdefault(given.id, []).append(value)

    def same_object(cell, apply) -> bool:  # the apply's name stands for the compiled binding there
        name = receiver_name(apply)
        value = context.facts.bound_before(name, cell, apply.node.lineno, None)
        return any(value is bound for bound in compiled.get(name, ()))

    return {id(gradient.node) for _facts, gradient in gradients_applied_by(context, set(compiled), where=same_object)}


def _all_reduced_already(context, facts: CellFacts, site: CallSite) -> bool:
    """Is this gradient all-reduced where it is made: inside an all-reduce call, or its name given to one
    after it in the same scope (``grads = npu.distribute.all_reduce(grads, ...)``)?"""
    if site.argument_of is not None and context.facts.resolve(site.argument_of.dotted) in K.ALLREDUCE_FORMS:
        return True
    target = single_target(site.stmt)
    if target is None or site.stmt.value is not site.node:
        return False
    return any(
        call.function == site.function and call.node.lineno > site.node.lineno
        and context.facts.resolve(call.dotted) in K.ALLREDUCE_FORMS
        and any(isinstance(argument, ast.Name) and argument.id == target for argument in call.node.args)
        for call in facts.calls)


def _canned_optimizers(context, v2: Optional[bool] = None):
    """(cell, facts, site, parameter, given) for each optimizer a canned Estimator builds (a part not
    built has none). ``v2``: only TF2's canned Estimators (True), only TF1's (False), or both (None);
    in TF1 code every one is TF1's."""
    for cell, facts, site in context.facts.calls_to(*K.CANNED_ESTIMATOR_OPTIMIZERS):
        is_v2 = not context.tf1 and "compat.v1" not in _written(context, site) and not _from_a_v1_alias(context, site)
        if v2 is not None and is_v2 != v2:
            continue
        for parameter in K.CANNED_ESTIMATOR_OPTIMIZERS[context.facts.resolve(site.dotted)]:
            name, position, _default, _rate, part = parameter
            if part is not None and _is_none(site.argument(part[1], part[0])):
                continue
            yield cell, facts, site, parameter, site.argument(position, name)


def _optimizers_made_for(context, cell: int, facts: CellFacts, given: ast.expr, function: Optional[str], depth: int = 3):
    """(cell, facts, site, wrapped) for each optimizer constructor (or aggregating wrapper) that the
    expression ``given``, in ``function`` of ``cell``, may stand for: itself, a lambda's body, the value a
    name was last bound to, what the notebook function it calls or names returns (every branch's)."""
    if depth == 0:
        return
    if isinstance(given, ast.Lambda):
        yield from _optimizers_made_for(context, cell, facts, given.body, function, depth)
        return
    named = dotted_name(given.func if isinstance(given, ast.Call) else given)
    called = context.facts.resolve(named) if named else ""
    site = next((s for s in facts.calls if s.node is given), None) if isinstance(given, ast.Call) else None
    if site is not None and (called in K.ALLREDUCE_FORMS or called in K.OPTIMIZERS):
        yield cell, facts, site, called in K.ALLREDUCE_FORMS or _already_wrapped(context, site)
        return
    helper = context.facts.function(named) if named and "." not in named else None
    if helper is not None and isinstance(helper[2], (ast.FunctionDef, ast.AsyncFunctionDef)) \
            and (isinstance(given, ast.Call) or isinstance(given, ast.Name)):
        h_cell, h_facts, node = helper
        for returned in (r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None):
            yield from _optimizers_made_for(context, h_cell, h_facts, returned, node.name, depth - 1)
        return
    if isinstance(given, ast.Name):
        if function is not None:  # a function's local: any of its bindings (one per branch)
            bindings = [a for a in facts.assignments.get(given.id, ()) if a.function == function and not a.tuple_target]
            for bound, following in zip(bindings, bindings[1:] + [None]):
                if following is not None and _rewraps(context, following, given.id):
                    continue  # ``optimizer = wrapper(optimizer)`` next: that binding stands for this one
                yield from _optimizers_made_for(context, cell, facts, bound.value, function, depth - 1)
            return
        line = next((s.node.lineno for s in facts.calls if given in s.node.args
                     or any(k.value is given for k in s.node.keywords)), given.lineno)
        bound = [(c, f, a) for c, f, a in context.facts.assignments(given.id)
                 if a.function is None and not a.tuple_target and (c, a.stmt.lineno) <= (cell, line)]
        if bound:
            b_cell, b_facts, assignment = bound[-1]
            yield from _optimizers_made_for(context, b_cell, b_facts, assignment.value, None, depth - 1)


def _rewraps(context, assignment, name: str) -> bool:
    """Is ``assignment`` ``name = wrapper(name, ...)``, an aggregating wrapper given the name's last value?"""
    value = assignment.value
    return isinstance(value, ast.Call) and context.facts.resolve(dotted_name(value.func) or "") in K.ALLREDUCE_FORMS \
        and bool(value.args) and isinstance(value.args[0], ast.Name) and value.args[0].id == name


def some_canned_estimator_unwrapped(context) -> bool:
    """One wrapped optimizer does not aggregate another training's gradients: does a canned Estimator
    build an optimizer from a string (or its default), or from a constructor seen unwrapped?"""
    for cell, facts, site, _parameter, given in _canned_optimizers(context):
        if given is None or _is_string(given):
            return True
        if any(not wrapped for *_where, wrapped in _optimizers_made_for(context, cell, facts, given, site.function)):
            return True
    return False


def _keras_optimizer_creation(context, cell: int, facts: CellFacts, compile_site: CallSite, given):
    """(cell, facts, node) to replace: the string or ``tf.keras.optimizers.X(...)`` given to compile, the
    creation of the one name it is given (bound once), or the compile call itself when it gives none
    (Keras' default, rmsprop); None when it cannot be seen."""
    if given is None:
        return cell, facts, compile_site.node
    if _is_string(given) or isinstance(given, ast.Call):
        return cell, facts, given
    if isinstance(given, ast.Name):
        bound = [(c, f, a) for c, f, a in context.facts.assignments(given.id) if not a.tuple_target]
        if len(bound) == 1 and isinstance(bound[0][2].value, ast.Call):
            return bound[0][0], bound[0][1], bound[0][2].value
    return None


def _as_tf1_optimizer(context, node: Optional[ast.expr]) -> Optional[str]:
    """``tf.compat.v1.train.AdamOptimizer(learning_rate=0.001, epsilon=1e-07)`` for ``'adam'`` or
    ``tf.keras.optimizers.Adam()`` (None: compile's default, rmsprop); None for an optimizer or an
    argument with no TF1 equivalent written here."""
    if node is None:
        name, given = "RMSprop", {}
    elif isinstance(node, ast.Constant):
        name, given = K.KERAS_OPTIMIZER_STRINGS.get(str(node.value).lower()), {}
    elif isinstance(node, ast.Call) and context.facts.resolve(dotted_name(node.func) or "") in K.KERAS_OPTIMIZERS:
        name = context.facts.resolve(dotted_name(node.func)).rsplit(".", 1)[-1]
        if len(node.args) > 1 or any(isinstance(a, ast.Starred) for a in node.args) or \
                any(k.arg is None for k in node.keywords):
            return None
        given = {k.arg: k.value for k in node.keywords}
        if node.args:
            given["learning_rate"] = node.args[0]
    else:
        return None
    if name not in K.KERAS_AS_TF1_OPTIMIZERS:
        return None
    tf1_class, renames, defaults = K.KERAS_AS_TF1_OPTIMIZERS[name]
    if any(argument not in renames for argument in given):
        return None  # clipnorm, amsgrad, a schedule's name...: no TF1 equivalent written here
    arguments = dict(defaults)
    for argument, value in given.items():
        arguments[renames[argument]] = ast.unparse(value)  # over the default of that name
    written = ", ".join(f"{key}={value}" for key, value in arguments.items())
    return f"{_tensorflow_v1_prefix(context)}.train.{tf1_class}({written})"


def _tensorflow_v1_prefix(context) -> str:
    """``tf.compat.v1``, which TensorFlow 1.15 and 2 both have (``tf.train.AdamOptimizer`` is TF1's only),
    or the notebook's own alias of it."""
    if context.facts.resolve(context.tf) == "tensorflow.compat.v1":
        return context.tf
    return f"{context.tf}.compat.v1"


def _model_fns(context) -> set:
    """The functions given to an Estimator as its model_fn, and the functions they call."""
    found = set()
    for _unused, _unused, site in context.facts.calls_to(*K.ESTIMATORS):
        given = site.argument(0, "model_fn")
        if isinstance(given, ast.Name):
            found.add(given.id)
    pending = list(found)
    while pending:
        located = context.facts.function(pending.pop())
        if located is None:
            continue
        _unused, facts, node = located
        for site in facts.calls:
            if site.function == node.name and site.dotted and "." not in site.dotted and site.dotted not in found \
                    and context.facts.function(site.dotted) is not None:
                found.add(site.dotted)
                pending.append(site.dotted)
    return found


def _given_to_an_estimator(context, site: CallSite) -> bool:
    outer = site.argument_of
    return outer is not None and context.facts.resolve(outer.dotted) in K.ESTIMATORS


def _written(context, site: CallSite) -> str:
    head, _unused, rest = (site.dotted or "").partition(".")
    module = context.facts.aliases.get(head)
    return (module + ("." + rest if rest else "")) if module else (site.dotted or "")


def _from_a_v1_alias(context, site: CallSite) -> bool:
    return context.facts.aliases.get((site.dotted or "").partition(".")[0]) == "tensorflow.compat.v1"


def _trains_only_boosted_trees(context) -> bool:
    """Every Estimator built is a boosted-trees one, and nothing else in the notebook takes a gradient step."""
    if context.frameworks != ["estimator"] or any(context.facts.calls_to(*K.OPTIMIZERS)):
        return False
    if any(context.facts.calls("minimize", "apply_gradients", "compute_gradients")):
        return False
    built = [context.facts.resolve(site.dotted) for _unused, _unused, site in context.facts.calls_to(*K.ESTIMATORS)]
    return bool(built) and all(name in K.BOOSTED_TREES_ESTIMATORS for name in built)


def _model_fns_take_no_gradient_step(context) -> bool:
    """Only custom Estimators, every EstimatorSpec's train_op a step counter or a no-op, and no optimizer nor
    gradient anywhere in the notebook (its guides build such model_fns to export a SavedModel)."""
    if context.frameworks != ["estimator"] or any(context.facts.calls_to(*K.OPTIMIZERS)):
        return False
    if any(context.facts.calls("minimize", "apply_gradients", "compute_gradients", "gradients", "gradient")):
        return False
    built = {context.facts.resolve(site.dotted) for _unused, _unused, site in context.facts.calls_to(*K.ESTIMATORS)}
    if not built or not built <= {"tensorflow.estimator.Estimator", K.NPU_ESTIMATOR}:
        return False
    train_ops = [site.keyword("train_op") for _unused, _unused, site in context.facts.calls("EstimatorSpec", "NPUEstimatorSpec")]
    return bool(train_ops) and all(
        keyword is not None and isinstance(keyword.value, ast.Call)
        and dotted_name(keyword.value.func) is not None
        and dotted_name(keyword.value.func).rsplit(".", 1)[-1] in _NON_GRADIENT_TRAIN_OPS
        for keyword in train_ops
    )


def _reaches_tf1_optimizer(context, given: ast.expr) -> bool:
    """Does the optimizer given to a canned Estimator come from a tf.train optimizer created in the
    notebook (inline, in a lambda, bound to the name given, or in the function it names or calls)?"""
    if _creates_tf1_optimizer(context, given):
        return True
    name = dotted_name(given.func if isinstance(given, ast.Call) else given)
    if name is None:
        return False
    if any(_creates_tf1_optimizer(context, a.value) for _unused, _unused, a in context.facts.assignments(name)):
        return True
    function = context.facts.function(name)
    return function is not None and _creates_tf1_optimizer(context, function[2])


def _creates_tf1_optimizer(context, node: ast.AST) -> bool:
    return any(
        isinstance(child, ast.Call) and context.facts.resolve(dotted_name(child.func)) in K.TF1_OPTIMIZERS
        for child in ast.walk(node)
    )


def _tensorflow_of(context, site: CallSite) -> str:
    """The module the Estimator was spelled from (``tf``, ``tf.compat.v1``): its ``train`` has the v1
    optimizers that the Estimator's v1 export accepts."""
    if site.dotted and ".estimator." in site.dotted:
        return site.dotted.rsplit(".estimator.", 1)[0]
    return context.tf


def _is_string(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_none(node: Optional[ast.expr]) -> bool:
    return node is None or (isinstance(node, ast.Constant) and node.value is None)


def _ran_already(context, creation_cell: int, use_cell: int) -> bool:
    """In a kernel (the cell magic), the cell that created the optimizer has run and will not run
    again: wrap it where this cell uses it instead."""
    return context.options.current_cell == use_cell and creation_cell != use_cell


def _wrap_creation(cell: int, facts: CellFacts, site: CallSite, wrapper: str, needs: str, extra: str = "",
                   also: Optional[str] = None) -> Edit:
    """The seed's shape: ``opt = Opt(...)`` gets ``opt = wrapper(opt)`` after it; otherwise wrap inline."""
    needed = [needs] if also is None else [needs, also]
    target = single_target(site.stmt)
    if target is not None and site.stmt.value is site.node:
        return insert_after(cell, facts, site.stmt, f"{target} = {wrapper}({target}{extra})", needed)
    return wrap(cell, facts, site.node, wrapper, needed, extra)


def sparse_gradients(context) -> Optional[str]:
    """What makes a TF1 notebook's gradients sparse (``IndexedSlices``), which the TF1 adapter all-gathers
    and which the all-reduce therefore needs dense (see K.SPARSE_GRADIENT_LOOKUPS): the call's name, else
    None. Cached on the context: every TF1 optimizer asks."""
    if not context.tf1:
        return None
    if not hasattr(context, "_sparse_gradients"):
        context._sparse_gradients = _first_sparse_maker(context)
    return context._sparse_gradients


def _first_sparse_maker(context) -> Optional[str]:
    def under_tensorflow(site: CallSite, parts: Tuple[str, ...]) -> bool:
        resolved = context.facts.resolve(site.dotted or "")
        return resolved.startswith("tensorflow.") and any(f".{part}." in resolved for part in parts)

    for _cell, _facts, site in context.facts.calls(*K.SPARSE_GRADIENT_LOOKUPS):
        if under_tensorflow(site, ("feature_column", "nn")):
            return site.method
    linear = [site for _cell, _facts, site in context.facts.calls(*K.LINEAR_ESTIMATORS)
              if under_tensorflow(site, ("estimator",))]
    if linear:
        for _cell, _facts, site in context.facts.calls(*K.CATEGORICAL_COLUMNS):
            if under_tensorflow(site, ("feature_column",)):
                return f"{site.method} ({linear[0].method})"
    return None


def _dense_note(maker: str) -> str:
    return _("; its gradients are sparse ({maker}): the adapter all-gathers sparse gradients, which needs the "
             "same number of ids on every rank, so {helper} makes them dense first").format(
        maker=maker, helper=K.DENSE_GRADIENTS)


def _reduce_reduction_argument(context, optimizer: ast.expr) -> str:
    """The TF2 wrapper averages by default; an optimizer a custom loop also applies gradients with
    keeps the reduction that loop's loss needs, as reduction-mismatch would ask of it."""
    if context.tf1 or not isinstance(optimizer, ast.Name):
        return ""
    return ', reduce_reduction="sum"' if wrapper_reduction_for(context, {optimizer.id}) == SUM else ""


def symbolic_gradients_applied(context) -> List[Tuple[int, CellFacts, CallSite, str]]:
    """(cell, facts, call, name) of each ``name = tf.gradients(...)`` of TF1 code whose gradients an
    ``apply_gradients`` reads (by the name, or ``list(zip(name, ...))`` bound to it), and that no
    all-reduce reads."""
    if not context.tf1:
        return []
    found = []
    for cell, facts, site in context.facts.calls_to(*K.TF1_SYMBOLIC_GRADIENTS):
        name = single_target(site.stmt) if getattr(site.stmt, "value", None) is site.node else None
        if name is None or not _read_by(context, name, ("apply_gradients",)) \
                or _read_by(context, name, ("npu_allreduce", "allreduce", "all_reduce")):
            continue
        found.append((cell, facts, site, name))
    return found


def _read_by(context, name: str, methods) -> bool:
    """Is ``name`` read inside a call of one of ``methods`` (method or function of that name)?"""
    for _cell, _facts, site in context.facts.calls(*methods):
        if any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(site.node)):
            return True
    return False


def some_compile_unwrapped(context) -> bool:
    """One wrapped optimizer does not aggregate another model's gradients: is a Keras compile given
    an optimizer known to be unwrapped (TF2; the step is missing then, and only those are fixed)?"""
    if "keras" not in context.frameworks or context.tf1:
        return False
    return any(_compile_wrapped(context, cell, site) is False for cell, _unused, site in context.facts.calls("compile"))


def _compile_wrapped(context, cell: int, site: CallSite) -> Optional[bool]:
    """Does this ``compile`` get an optimizer that aggregates gradients? True: wrapped where it is
    given or where the name it is given by was last bound; False: a plain optimizer or a string;
    None: not known (a function's result, a name bound elsewhere)."""
    optimizer = site.argument(0, "optimizer")
    if isinstance(optimizer, ast.Constant) and isinstance(optimizer.value, str):
        return False
    if isinstance(optimizer, ast.Name):
        optimizer = context.facts.bound_before(optimizer.id, cell, site.node.lineno, site.function)
    if not isinstance(optimizer, ast.Call):
        return None
    called = context.facts.resolve(dotted_name(optimizer.func))
    if called in K.ALLREDUCE_FORMS:
        return True
    return False if called in K.OPTIMIZERS else None


def _creation_of(context, name: str, use: CallSite, use_cell: Optional[int] = None):
    """The optimizer constructor call assigned to ``name``, preferring the use's own scope, then the
    last assignment before the use (a notebook that builds and compiles a model in each of several
    cells rebinds ``optimizer`` in each: every compile has its own)."""
    candidates = []
    where = (use_cell if use_cell is not None else -1, use.node.lineno)
    for cell, facts, assignment in context.facts.assignments(name):
        value = assignment.value
        if isinstance(value, ast.Call) and context.facts.resolve(dotted_name(value.func)) in K.OPTIMIZERS:
            site = next((s for s in facts.calls if s.node is value), None)
            if site is not None:
                position = (cell, assignment.stmt.lineno)
                before = use_cell is not None and position <= where
                candidates.append(((assignment.function == use.function, before, position if before else ()),
                                   cell, facts, site))
    if not candidates:
        return None
    candidates.sort(key=lambda item: item[0])
    _unused, cell, facts, site = candidates[-1]
    return cell, facts, site


def _created_before(context, name: str, agent):
    """The optimizer constructor last assigned to ``name`` before the agent is built, in its scope."""
    found = None
    for cell, facts, assignment in context.facts.assignments(name):
        value = assignment.value
        before = (cell, assignment.stmt.lineno) < (agent.cell, agent.site.node.lineno)
        if before and assignment.function == agent.site.function and isinstance(value, ast.Call):
            site = next((s for s in facts.calls if s.node is value), None)
            found = (cell, facts, site) if context.facts.resolve(dotted_name(value.func)) in K.OPTIMIZERS else None
    return found if found is not None and found[2] is not None else None


def _given_to_flag_optimizers(context) -> set:
    """The optimizers given to NPUOptimizer (its fix sets is_distributed=True): their constructor
    calls (by id) and the (function, name) they are bound to. Those given to a loss-scale optimizer
    are wrapped like any other: it does not aggregate gradients."""
    given: set = set()
    for _unused, _unused, site in context.facts.calls_to(*K.DISTRIBUTED_FLAG_OPTIMIZERS):
        inner = site.argument(0, "opt")
        if isinstance(inner, ast.Call):
            given.add(id(inner))
        elif isinstance(inner, ast.Name):
            given.add((site.function, inner.id))
    return given


def _already_wrapped(context, site: CallSite) -> bool:
    outer = site.argument_of
    return outer is not None and context.facts.resolve(outer.dotted) in K.ALLREDUCE_FORMS


def _horovod_optimizer(context) -> bool:
    return any(name.endswith("DistributedOptimizer") for name in _resolved_calls(context, "DistributedOptimizer"))


def _resolved_calls(context, method: str):
    for _unused, _unused, site in context.facts.calls(method):
        resolved = context.facts.resolve(site.dotted)
        if resolved.startswith("horovod."):
            yield resolved

