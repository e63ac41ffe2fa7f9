"""Variable broadcast (变量广播): every rank starts from rank 0's initial weights."""

from __future__ import annotations

import ast
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from .. import knowledge as K
from ..facts import CallSite, CellFacts, chain_root_name, dotted_name, receiver_name
from ..findings import NEEDS_NPU_BRIDGE, NEEDS_NPU_DEVICE, NEEDS_OS, Finding
from ..i18n import N_, _
from ..learning_rules import EXAMPLE_RBM, EXAMPLE_RBM_PARTS, LEARNING_RULE, rule_updates, starts_from_constants
from ..names import ALWAYS_BOUND, function_locals, positional_parameters
from .not_data_parallel import trained_agents
from .per_rank_logs import logs_averaged
from .sources import applied_by_the_compiled_optimizer, makes_a_tensor, not_variables, only_shown, target_position
from .base import (
    Example,
    Rule,
    add_argument,
    append_element,
    insert_after,
    insert_before,
    keras_prefix,
    remove_element,
    replace,
    replace_with,
    top_level_statement,
)


_TUNER_BEFORE = (
    "import tensorflow as tf\nimport keras_tuner as kt\n"
    "def build_model(hp):\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 8, 32)), tf.keras.layers.Dense(1)])\n"
    "    model.compile(optimizer='adam', loss='mse')\n"
    "    return model\n"
    "tuner = kt.RandomSearch(build_model, objective='val_loss', max_trials=3, seed=7)\n"
    "stop_early = tf.keras.callbacks.EarlyStopping(monitor='val_loss', patience=5)\n"
)

# What the fix writes for it, as the examples show it.
_SEARCH_CALLBACK_CLASS = (
    "class SameTrialOnEveryRank(tf.keras.callbacks.Callback):\n"
    "    def on_train_batch_end(self, batch, logs=None):\n"
    "        if batch == 0:\n"
    "            npu.distribute.broadcast(self.model.trainable_variables)\n"
    "\n"
    "    def on_epoch_end(self, epoch, logs=None):\n"
    "        logs.update({key: float(npu.distribute.all_reduce(tf.constant(value, tf.float32), reduction='mean')) "
    "for key, value in logs.items()})\n"
)


RULE_CONSTANT_START_REASON = N_(
    "every parameter the learning rule updates starts from a constant ({maker}): every rank starts from the "
    "same values, so there is nothing to broadcast")


class MissingBroadcast(Rule):
    """Each rank initializes the model's variables on its own: with random initializers, N ranks
    start from N different sets of weights. Even with the gradients aggregated, every rank then applies
    the same update to different weights, so the cards train N different models and rank 0 saves only
    one of them. The adapter's broadcast (``npu.distribute.broadcast`` under TF2, the
    ``NPUBroadcastGlobalVariablesHook`` that ``npu_hooks_append`` adds under TF1) copies rank 0's
    initial values to every rank once, before the first step. The fix inserts it where the variables
    exist (after the model is built, before ``fit`` or the loop; in the Estimator's training hooks);
    where no such place is recognized the finding sits at the training call, to be fixed by hand."""

    code = "missing-broadcast"
    step = "broadcast"
    severity = "error"

    VALID = [
        # In TF1 the adapter's callback broadcasts each trial's model (a session hook of its own).
        "import tensorflow as tf\nfrom npu_bridge.npu_init import *\n" + _TUNER_BEFORE.split("\n", 1)[1]
        + "tuner.search(x, y, epochs=5, callbacks=[NPUBroadcastGlobalVariablesCallback(0)])\n",
        # A learning rule's parameters start from tf.zeros: alike on every rank.
        EXAMPLE_RBM.format(**EXAMPLE_RBM_PARTS),
        # A tour of the tape: the gradient of a constant it watches is no training (nothing to broadcast).
        "import tensorflow as tf\nx = tf.constant(3.0)\nwith tf.GradientTape() as g:\n    g.watch(x)\n    y = x * x\n"
        "dy_dx = g.gradient(y, x)\nprint(dy_dx)\n",
        # The seed's method two.
        "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
        "estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
        "estimator.train(train_data_fn, max_steps=num_steps, hooks=npu_hooks_append(training_hooks))\n",
        # NPUEstimator broadcasts by itself.
        "from npu_bridge.npu_init import *\n"
        "estimator = NPUEstimator(model_fn=model_fn)\nestimator.train(input_fn, max_steps=10)\n",
        # NPUEstimator imported from its module, trained through train_and_evaluate.
        "import tensorflow as tf\n"
        "from npu_bridge.estimator.npu.npu_estimator import NPUEstimator\n"
        "estimator = NPUEstimator(model_fn=model_fn, config=run_config)\n"
        "train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=1000)\n"
        "tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)\n",
        # NPUEstimator on the NPU, a plain Estimator elsewhere (one device: nothing to broadcast).
        "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
        "if on_npu:\n"
        "    estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig())\n"
        "else:\n"
        "    estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
        "estimator.train(input_fn, max_steps=1000)\n",
        # TF2: broadcast once the model exists (the second seed).
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "npu.distribute.broadcast(model.trainable_variables)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        # Decision forests grow trees: no weights to broadcast.
        "import tensorflow_decision_forests as tfdf\n"
        "train_ds = tfdf.keras.pd_dataframe_to_tf_dataset(train_df, label='species')\n"
        "model = tfdf.keras.RandomForestModel()\n"
        "model.compile(metrics=['accuracy'])\n"
        "model.fit(train_ds)\n",
        # A bandit agent without an optimizer (closed-form statistics): not data-parallel training.
        "import tensorflow as tf\n"
        "from tf_agents.bandits.agents import lin_ucb_agent\n"
        "from tf_agents.environments import tf_py_environment\n"
        "environment = tf_py_environment.TFPyEnvironment(bandit_py_environment)\n"
        "agent = lin_ucb_agent.LinearUCBAgent(time_step_spec=environment.time_step_spec(), "
        "action_spec=environment.action_spec())\n"
        "for _ in range(100):\n"
        "    driver.run()\n"
        "    loss_info = agent.train(replay_buffer.gather_all())\n",
    ]

    INVALID = [
        # A learning rule's parameters drawn on each rank: plain tensors, said, not fixed.
        Example(EXAMPLE_RBM.format(**{**EXAMPLE_RBM_PARTS, "start": "tf.random.normal"})),
        # The variables a local of the step made from top-level names (TensorFlow-Examples' raw networks): the
        # same expression broadcast before the loop that calls the step (issue 34).
        Example(
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            "weights = {'h1': tf.Variable(tf.random.normal([784, 128])), 'out': tf.Variable(tf.random.normal([128, 10]))}\n"
            "biases = {'b1': tf.Variable(tf.zeros([128])), 'out': tf.Variable(tf.zeros([10]))}\n"
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = cross_entropy(neural_net(x), y)\n'
            '    trainable_variables = list(weights.values()) + list(biases.values())\n'
            '    gradients = g.gradient(loss, trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, trainable_variables))\n'
            'for step, (batch_x, batch_y) in enumerate(train_data.take(training_steps), 1):\n'
            '    run_optimization(batch_x, batch_y)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            "weights = {'h1': tf.Variable(tf.random.normal([784, 128])), 'out': tf.Variable(tf.random.normal([128, 10]))}\n"
            "biases = {'b1': tf.Variable(tf.zeros([128])), 'out': tf.Variable(tf.zeros([10]))}\n"
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = cross_entropy(neural_net(x), y)\n'
            '    trainable_variables = list(weights.values()) + list(biases.values())\n'
            '    gradients = g.gradient(loss, trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, trainable_variables))\n'
            'npu.distribute.broadcast(list(weights.values()) + list(biases.values()))\n'
            'for step, (batch_x, batch_y) in enumerate(train_data.take(training_steps), 1):\n'
            '    run_optimization(batch_x, batch_y)\n',
        ),
        # The same with a model built on its first call (a subclassed Keras model): after the first step.
        Example(
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'class NeuralNet(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.optimizers.SGD(0.1)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = cross_entropy_loss(neural_net(x), y)\n'
            '    trainable_variables = neural_net.trainable_variables\n'
            '    gradients = g.gradient(loss, trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, trainable_variables))\n'
            'for step, (batch_x, batch_y) in enumerate(train_data.take(training_steps), 1):\n'
            '    run_optimization(batch_x, batch_y)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'class NeuralNet(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.optimizers.SGD(0.1)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = cross_entropy_loss(neural_net(x), y)\n'
            '    trainable_variables = neural_net.trainable_variables\n'
            '    gradients = g.gradient(loss, trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, trainable_variables))\n'
            'for step, (batch_x, batch_y) in enumerate(train_data.take(training_steps), 1):\n'
            '    run_optimization(batch_x, batch_y)\n'
            '    if optimizer.iterations == 1:\n'
            '        npu.distribute.broadcast(neural_net.trainable_variables)\n',
        ),
        # The model given on through two functions (the core API's guides: train_model(mlp) calls
        # train_step(..., mlp, ...)): broadcast where the notebook gives it, before that call.
        Example(
            'import tensorflow as tf\n'
            'model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(784,))])\n'
            'def train_step(x, y, model, learning_rate):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.variables)\n'
            '    for grad, var in zip(grads, model.variables):\n'
            '        var.assign_sub(learning_rate * grad)\n'
            'def train_model(mlp, data, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for x, y in data:\n'
            '            train_step(x, y, mlp, 0.01)\n'
            'train_model(model, dataset, epochs=2)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(784,))])\n'
            'def train_step(x, y, model, learning_rate):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.variables)\n'
            '    for grad, var in zip(grads, model.variables):\n'
            '        var.assign_sub(learning_rate * grad)\n'
            'def train_model(mlp, data, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for x, y in data:\n'
            '            train_step(x, y, mlp, 0.01)\n'
            'npu.distribute.broadcast(model.variables)\n'
            'train_model(model, dataset, epochs=2)\n',
        ),
        # The same with a model built on its first call (packt's autoencoder): after the first update, in
        # the step itself (eager), when its Keras optimizer has made one step.
        Example(
            'import tensorflow as tf\n'
            'class Net(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'def train(model, opt, x, y):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    opt.apply_gradients(zip(grads, model.trainable_variables))\n'
            'def train_loop(model, opt, dataset):\n'
            '    for x, y in dataset:\n'
            '        train(model, opt, x, y)\n'
            'net = Net()\n'
            'optimizer = tf.keras.optimizers.Adam(1e-3)\n'
            'train_loop(net, optimizer, dataset)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'class Net(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'def train(model, opt, x, y):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    opt.apply_gradients(zip(grads, model.trainable_variables))\n'
            '    if opt.iterations == 1:\n'
            '        npu.distribute.broadcast(model.trainable_variables)\n'
            'def train_loop(model, opt, dataset):\n'
            '    for x, y in dataset:\n'
            '        train(model, opt, x, y)\n'
            'net = Net()\n'
            'optimizer = tf.keras.optimizers.Adam(1e-3)\n'
            'train_loop(net, optimizer, dataset)\n',
        ),
        # ... the same when the notebook's model has the step's parameter name (packt's sparse autoencoder): the
        # call at the top level runs the whole loop, so the broadcast goes in the step, not after that call.
        Example(
            'import tensorflow as tf\n'
            'class Net(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'def train(model, opt, x, y):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    opt.apply_gradients(zip(grads, model.trainable_variables))\n'
            'def train_loop(model, opt, dataset):\n'
            '    for x, y in dataset:\n'
            '        train(model, opt, x, y)\n'
            'model = Net()\n'
            'opt = tf.keras.optimizers.Adam(1e-3)\n'
            'train_loop(model, opt, dataset)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'class Net(tf.keras.Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = tf.keras.layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'def train(model, opt, x, y):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(x) - y))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    opt.apply_gradients(zip(grads, model.trainable_variables))\n'
            '    if opt.iterations == 1:\n'
            '        npu.distribute.broadcast(model.trainable_variables)\n'
            'def train_loop(model, opt, dataset):\n'
            '    for x, y in dataset:\n'
            '        train(model, opt, x, y)\n'
            'model = Net()\n'
            'opt = tf.keras.optimizers.Adam(1e-3)\n'
            'train_loop(model, opt, dataset)\n',
        ),
        # A tf.function step looped over by a function of the notebook (Google's autoencoder lab): after the
        # step's call in that loop, eagerly, where the global model is the same.
        Example(
            'import tensorflow as tf\n'
            'ae_model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(4)])\n'
            'optimizer = tf.keras.optimizers.Adam(1e-3)\n'
            '@tf.function\n'
            'def train_step(batch):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(ae_model(batch) - batch))\n'
            '    grads = tape.gradient(loss, ae_model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, ae_model.trainable_variables))\n'
            'def train(dataset, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for batch in dataset:\n'
            '            train_step(batch)\n'
            'train(train_dataset, 10)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'ae_model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(4)])\n'
            'optimizer = tf.keras.optimizers.Adam(1e-3)\n'
            '@tf.function\n'
            'def train_step(batch):\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(ae_model(batch) - batch))\n'
            '    grads = tape.gradient(loss, ae_model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, ae_model.trainable_variables))\n'
            'def train(dataset, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for batch in dataset:\n'
            '            train_step(batch)\n'
            '            if optimizer.iterations == 1:\n'
            '                npu.distribute.broadcast(ae_model.trainable_variables)\n'
            'train(train_dataset, 10)\n',
        ),
        # Adversarial training: the model's variables are broadcast, not the images whose gradient is
        # taken too (the real broadcast assigns into variables: given a tensor it fails on the cards).
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
            'npu.distribute.broadcast(model.trainable_variables)\n'
            'for images, labels in dataset:\n'
            '    with tf.GradientTape() as tape:\n'
            '        tape.watch(images)\n'
            '        loss = loss_fn(labels, model(images))\n'
            '    adversarial = images + 0.01 * tf.sign(tape.gradient(loss, images))\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = loss_fn(labels, model(adversarial))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
        ),
        # A GAN (the DCGAN tutorial, Google's courses): one step trains two models; both are broadcast
        # before the loop (the discriminator's broadcast, at the same place, was dropped as a duplicate).
        Example(
            'import tensorflow as tf\n'
            'def make_generator():\n'
            '    model = tf.keras.Sequential()\n'
            '    model.add(tf.keras.layers.Dense(784, input_shape=(100,)))\n'
            '    return model\n'
            'def make_discriminator():\n'
            '    model = tf.keras.Sequential()\n'
            '    model.add(tf.keras.layers.Dense(1, input_shape=(784,)))\n'
            '    return model\n'
            'generator = make_generator()\n'
            'discriminator = make_discriminator()\n'
            'for images in dataset:\n'
            '    noise = tf.random.normal([16, 100])\n'
            '    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:\n'
            '        fake = generator(noise, training=True)\n'
            '        gen_loss = g_loss(discriminator(fake))\n'
            '        disc_loss = d_loss(discriminator(images), discriminator(fake))\n'
            '    g_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)\n'
            '    d_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)\n'
            '    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))\n'
            '    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'def make_generator():\n'
            '    model = tf.keras.Sequential()\n'
            '    model.add(tf.keras.layers.Dense(784, input_shape=(100,)))\n'
            '    return model\n'
            'def make_discriminator():\n'
            '    model = tf.keras.Sequential()\n'
            '    model.add(tf.keras.layers.Dense(1, input_shape=(784,)))\n'
            '    return model\n'
            'generator = make_generator()\n'
            'discriminator = make_discriminator()\n'
            'npu.distribute.broadcast(generator.trainable_variables)\n'
            'npu.distribute.broadcast(discriminator.trainable_variables)\n'
            'for images in dataset:\n'
            '    noise = tf.random.normal([16, 100])\n'
            '    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:\n'
            '        fake = generator(noise, training=True)\n'
            '        gen_loss = g_loss(discriminator(fake))\n'
            '        disc_loss = d_loss(discriminator(images), discriminator(fake))\n'
            '    g_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)\n'
            '    d_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)\n'
            '    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))\n'
            '    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))\n',
        ),
        # A scikit-learn baseline beside the Keras network (handson-ml2 chapter 10): its fit trains no
        # Keras model; only the network is broadcast (a callback given to Perceptron.fit failed).
        Example(
            "import numpy as np\nfrom sklearn.linear_model import Perceptron\nper_clf = Perceptron()\nper_clf.fit(X, y)\n"
            "# %%\nfrom tensorflow import keras\nmodel = keras.models.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(loss='mse', optimizer='sgd')\nmodel.fit(X, y, epochs=2)\n",
            "import numpy as np\nfrom sklearn.linear_model import Perceptron\nper_clf = Perceptron()\nper_clf.fit(X, y)\n"
            "# %%\nfrom tensorflow import keras\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model = keras.models.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(loss='mse', optimizer='sgd')\nnpu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit(X, y, epochs=2)\n",
        ),
        # tensorflow.org's optimizers guide: the gradient's parameter is given a tensor where the notebook
        # calls it (a plot); a tensor cannot be broadcast (the real broadcast assigns into variables), so
        # no broadcast of it is written: the finding says to add one by hand.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "x_vals = tf.cast(tf.linspace(-2, 2, 201), tf.float32)\n"
            "def grad(f, x):\n    with tf.GradientTape() as tape:\n        tape.watch(x)\n        result = f(x)\n"
            "    return npu.distribute.all_reduce(tape.gradient(result, x), reduction='mean')\n"
            "plt.plot(x_vals, grad(loss, x_vals))\n",
        ),
        # fit_generator trains like fit: the built model is broadcast before it.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit_generator(gen, epochs=1)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\nnpu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit_generator(gen, epochs=1)\n",
        ),
        # An NPUEstimator replaced by a plain Estimator before training: the plain one trains.
        Example(
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig())\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
            "estimator.train(input_fn, max_steps=1000)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "estimator = NPUEstimator(model_fn=model_fn, config=NPURunConfig())\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
            "estimator.train(input_fn, max_steps=1000, hooks=npu_hooks_append())\n",
        ),
        # The seed's method one, default style: hooks=npu_hooks_append(...) at the training call.
        Example(
            "import tensorflow as tf\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n"
            "training_hooks = []\n"
            "training_hooks.append(hook)\n"
            "estimator.train(train_data_fn, max_steps=num_steps, hooks=training_hooks)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n"
            "training_hooks = []\n"
            "training_hooks.append(hook)\n"
            "estimator.train(train_data_fn, max_steps=num_steps, hooks=npu_hooks_append(training_hooks))\n",
        ),
        # No hooks at all.
        Example(
            "import tensorflow as tf\n"
            "est = tf.estimator.Estimator(model_fn=model_fn)\n"
            "est.train(input_fn=train_input_fn, steps=100)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "est = tf.estimator.Estimator(model_fn=model_fn)\n"
            "est.train(input_fn=train_input_fn, steps=100, hooks=npu_hooks_append())\n",
        ),
        # train_and_evaluate: the TrainSpec's hooks (a tuple, which npu_hooks_append would drop).
        Example(
            "import tensorflow as tf\n"
            "est = tf.estimator.Estimator(model_fn=model_fn)\n"
            "train_spec = tf.estimator.TrainSpec(input_fn=train_fn, max_steps=1000, hooks=(logging_hook,))\n"
            "tf.estimator.train_and_evaluate(est, train_spec, eval_spec)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "est = tf.estimator.Estimator(model_fn=model_fn)\n"
            "train_spec = tf.estimator.TrainSpec(input_fn=train_fn, max_steps=1000, hooks=npu_hooks_append([logging_hook]))\n"
            "tf.estimator.train_and_evaluate(est, train_spec, eval_spec)\n",
        ),
        # TF2 Keras fit: broadcast the built model's variables before training.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "# %%\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, epochs=2)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "# %%\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit(ds, epochs=2)\n",
        ),
        # TF1 session loop: a broadcast run right after the variables are initialized.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(tf.global_variables_initializer())\n"
            "    for _ in range(100):\n"
            "        sess.run(train_op)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(tf.global_variables_initializer())\n"
            "    sess.run(tf.group([tf.assign(var, hccl_ops.broadcast([var], 0)[0]) for var in tf.trainable_variables()]))\n"
            "    for _ in range(100):\n"
            "        sess.run(train_op)\n",
        ),
        # TF1 Keras fit: the TF1 callback.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer=tf.train.AdamOptimizer(0.01), loss='mse')\n"
            "model.fit(x, y, callbacks=[tb])\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer=tf.train.AdamOptimizer(0.01), loss='mse')\n"
            "model.fit(x, y, callbacks=[tb, NPUBroadcastGlobalVariablesCallback(0)])\n",
        ),
        # TF2 custom loop: broadcast right after the (built) model is created, as in the seed.
        Example(
            "import tensorflow as tf\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(784,))])\n"
            "# %%\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            "# %%\n"
            "for x, y in dataset:\n"
            "    train_step(x, y)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(784,))])\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "# %%\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            "# %%\n"
            "for x, y in dataset:\n"
            "    train_step(x, y)\n",
        ),
        # A subclassed model builds its variables on its first call, inside the training step: broadcast
        # after the first update (a broadcast before the loop would find none).
        Example(
            "import tensorflow as tf\n"
            "class MyModel(tf.keras.Model):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.d1 = tf.keras.layers.Dense(10)\n"
            "    def call(self, x):\n"
            "        return self.d1(x)\n"
            "model = MyModel()\n"
            "optimizer = tf.keras.optimizers.Adam()\n"
            "# %%\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            "# %%\n"
            "for x, y in dataset:\n"
            "    train_step(x, y)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "class MyModel(tf.keras.Model):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.d1 = tf.keras.layers.Dense(10)\n"
            "    def call(self, x):\n"
            "        return self.d1(x)\n"
            "model = MyModel()\n"
            "optimizer = tf.keras.optimizers.Adam()\n"
            "# %%\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            "# %%\n"
            "for x, y in dataset:\n"
            "    train_step(x, y)\n"
            "    if optimizer.iterations == 1:\n"
            "        npu.distribute.broadcast(model.trainable_variables)\n",
        ),
        # TF-Agents: the agent's variables exist once it is initialized.
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
            "agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=q_net, optimizer=optimizer)\n"
            "agent.initialize()\n"
            "npu.distribute.broadcast(agent.trainable_variables)\n"
            "# %%\n"
            "for _ in range(1000):\n"
            "    experience, _ = next(iterator)\n"
            "    train_loss = agent.train(experience).loss\n",
        ),
        # TF1 left over from tf.distribute: the initializer bound to a name, run in a session.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "tf.disable_v2_behavior()\n"
            "w = tf.Variable(tf.random_normal([4, 1]))\n"
            "loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\n"
            "init = tf.global_variables_initializer()\n"
            "with tf.Session() as sess:\n"
            "    sess.run(init)\n"
            "    for _ in range(10):\n"
            "        sess.run(train_op)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "tf.disable_v2_behavior()\n"
            "w = tf.Variable(tf.random_normal([4, 1]))\n"
            "loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\n"
            "init = tf.global_variables_initializer()\n"
            "with tf.Session() as sess:\n"
            "    sess.run(init)\n"
            "    sess.run(tf.group([tf.assign(var, hccl_ops.broadcast([var], 0)[0]) "
            "for var in tf.trainable_variables()]))\n"
            "    for _ in range(10):\n"
            "        sess.run(train_op)\n",
            adapter="npu_bridge",
        ),
        # TF1: the initializer op run in the session it sits in: the broadcast op is run the same way.
        Example(
            "import tensorflow as tf\n"
            "graph = tf.Graph()\n"
            "with graph.as_default():\n"
            "    weights = tf.Variable(tf.truncated_normal([784, 10]))\n"
            "    loss = tf.reduce_mean(tf.matmul(tf_train_dataset, weights))\n"
            "    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n"
            "# %%\n"
            "with tf.Session(graph=graph) as session:\n"
            "    tf.global_variables_initializer().run()\n"
            "    for step in range(801):\n"
            "        _, l = session.run([optimizer, loss])\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "graph = tf.Graph()\n"
            "with graph.as_default():\n"
            "    weights = tf.Variable(tf.truncated_normal([784, 10]))\n"
            "    loss = tf.reduce_mean(tf.matmul(tf_train_dataset, weights))\n"
            "    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n"
            "# %%\n"
            "with tf.Session(graph=graph) as session:\n"
            "    tf.global_variables_initializer().run()\n"
            "    tf.group([tf.assign(var, hccl_ops.broadcast([var], 0)[0]) "
            "for var in tf.trainable_variables()]).run()\n"
            "    for step in range(801):\n"
            "        _, l = session.run([optimizer, loss])\n",
            adapter="npu_bridge",
        ),
        # ... and the initializer bound to a name and run as an op (Hands-On ML's ``init.run()``): the same.
        Example(
            "import tensorflow as tf\n"
            "X = tf.placeholder(tf.float32, shape=[None, 3])\n"
            "outputs = tf.layers.dense(tf.layers.dense(X, 2), 3)\n"
            "training_op = tf.train.AdamOptimizer(0.01).minimize(tf.reduce_mean(tf.square(outputs - X)))\n"
            "init = tf.global_variables_initializer()\n"
            "# %%\n"
            "with tf.Session() as sess:\n"
            "    init.run()\n"
            "    for iteration in range(1000):\n"
            "        training_op.run(feed_dict={X: X_train})\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "X = tf.placeholder(tf.float32, shape=[None, 3])\n"
            "outputs = tf.layers.dense(tf.layers.dense(X, 2), 3)\n"
            "training_op = tf.train.AdamOptimizer(0.01).minimize(tf.reduce_mean(tf.square(outputs - X)))\n"
            "init = tf.global_variables_initializer()\n"
            "# %%\n"
            "with tf.Session() as sess:\n"
            "    init.run()\n"
            "    tf.group([tf.assign(var, hccl_ops.broadcast([var], 0)[0]) "
            "for var in tf.trainable_variables()]).run()\n"
            "    for iteration in range(1000):\n"
            "        training_op.run(feed_dict={X: X_train})\n",
            adapter="npu_bridge",
        ),
        # Two models built on their first call, each with its optimizer (a GAN): both broadcast after the first step, each when its own optimizer has stepped.
        Example(
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'generator = Generator()\n'
            'discriminator = Discriminator()\n'
            'optimizer_gen = tf.keras.optimizers.Adam(1e-4)\n'
            'optimizer_disc = tf.keras.optimizers.Adam(1e-4)\n'
            '# %%\n'
            'def train_step(real):\n'
            '    noise = tf.random.normal([64, 100])\n'
            '    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:\n'
            '        fake = generator(noise, training=True)\n'
            '        g_loss = generator_loss(discriminator(fake, training=True))\n'
            '        d_loss = discriminator_loss(discriminator(real, training=True), discriminator(fake, training=True))\n'
            '    g_grads = g_tape.gradient(g_loss, generator.trainable_variables)\n'
            '    d_grads = d_tape.gradient(d_loss, discriminator.trainable_variables)\n'
            '    optimizer_gen.apply_gradients(zip(g_grads, generator.trainable_variables))\n'
            '    optimizer_disc.apply_gradients(zip(d_grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for batch in dataset:\n'
            '    train_step(batch)\n',
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'generator = Generator()\n'
            'discriminator = Discriminator()\n'
            'optimizer_gen = tf.keras.optimizers.Adam(1e-4)\n'
            'optimizer_disc = tf.keras.optimizers.Adam(1e-4)\n'
            '# %%\n'
            'def train_step(real):\n'
            '    noise = tf.random.normal([64, 100])\n'
            '    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:\n'
            '        fake = generator(noise, training=True)\n'
            '        g_loss = generator_loss(discriminator(fake, training=True))\n'
            '        d_loss = discriminator_loss(discriminator(real, training=True), discriminator(fake, training=True))\n'
            '    g_grads = g_tape.gradient(g_loss, generator.trainable_variables)\n'
            '    d_grads = d_tape.gradient(d_loss, discriminator.trainable_variables)\n'
            '    optimizer_gen.apply_gradients(zip(g_grads, generator.trainable_variables))\n'
            '    optimizer_disc.apply_gradients(zip(d_grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for batch in dataset:\n'
            '    train_step(batch)\n'
            '    if optimizer_gen.iterations == 1:\n'
            '        npu.distribute.broadcast(generator.trainable_variables)\n'
            '    if optimizer_disc.iterations == 1:\n'
            '        npu.distribute.broadcast(discriminator.trainable_variables)\n',
        ),
        # A Keras-GAN style trainer (Packt's DCGAN): the models are attributes its __init__ builds, trained by its methods; both broadcast through the instance, before its first method is called.
        Example(
            'import tensorflow as tf\n'
            'class GAN():\n'
            '    def __init__(self):\n'
            '        self.generator = self.build_generator()\n'
            '        self.discriminator = self.build_discriminator()\n'
            '        self.g_optimizer = tf.keras.optimizers.Adam(1e-4)\n'
            '        self.d_optimizer = tf.keras.optimizers.Adam(1e-4)\n'
            '    def build_generator(self):\n'
            '        noise = tf.keras.Input(shape=(100,))\n'
            '        return tf.keras.Model(noise, tf.keras.layers.Dense(784)(noise))\n'
            '    def build_discriminator(self):\n'
            '        image = tf.keras.Input(shape=(784,))\n'
            '        return tf.keras.Model(image, tf.keras.layers.Dense(1)(image))\n'
            '    def train(self, dataset, epochs):\n'
            '        for epoch in range(epochs):\n'
            '            for images in dataset:\n'
            '                self.train_step(images)\n'
            '    def train_step(self, images):\n'
            '        noise = tf.random.normal([tf.shape(images)[0], 100])\n'
            '        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:\n'
            '            fake = self.generator(noise, training=True)\n'
            '            g_loss = g_loss_of(self.discriminator(fake, training=True))\n'
            '            d_loss = d_loss_of(self.discriminator(images, training=True), self.discriminator(fake, training=True))\n'
            '        g_grads = g_tape.gradient(g_loss, self.generator.trainable_variables)\n'
            '        d_grads = d_tape.gradient(d_loss, self.discriminator.trainable_variables)\n'
            '        self.g_optimizer.apply_gradients(zip(g_grads, self.generator.trainable_variables))\n'
            '        self.d_optimizer.apply_gradients(zip(d_grads, self.discriminator.trainable_variables))\n'
            '# %%\n'
            'gan = GAN()\n'
            'gan.train(dataset, epochs=50)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'class GAN():\n'
            '    def __init__(self):\n'
            '        self.generator = self.build_generator()\n'
            '        self.discriminator = self.build_discriminator()\n'
            '        self.g_optimizer = tf.keras.optimizers.Adam(1e-4)\n'
            '        self.d_optimizer = tf.keras.optimizers.Adam(1e-4)\n'
            '    def build_generator(self):\n'
            '        noise = tf.keras.Input(shape=(100,))\n'
            '        return tf.keras.Model(noise, tf.keras.layers.Dense(784)(noise))\n'
            '    def build_discriminator(self):\n'
            '        image = tf.keras.Input(shape=(784,))\n'
            '        return tf.keras.Model(image, tf.keras.layers.Dense(1)(image))\n'
            '    def train(self, dataset, epochs):\n'
            '        for epoch in range(epochs):\n'
            '            for images in dataset:\n'
            '                self.train_step(images)\n'
            '    def train_step(self, images):\n'
            '        noise = tf.random.normal([tf.shape(images)[0], 100])\n'
            '        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:\n'
            '            fake = self.generator(noise, training=True)\n'
            '            g_loss = g_loss_of(self.discriminator(fake, training=True))\n'
            '            d_loss = d_loss_of(self.discriminator(images, training=True), self.discriminator(fake, training=True))\n'
            '        g_grads = g_tape.gradient(g_loss, self.generator.trainable_variables)\n'
            '        d_grads = d_tape.gradient(d_loss, self.discriminator.trainable_variables)\n'
            '        self.g_optimizer.apply_gradients(zip(g_grads, self.generator.trainable_variables))\n'
            '        self.d_optimizer.apply_gradients(zip(d_grads, self.discriminator.trainable_variables))\n'
            '# %%\n'
            'gan = GAN()\n'
            'npu.distribute.broadcast(gan.generator.trainable_variables)\n'
            'npu.distribute.broadcast(gan.discriminator.trainable_variables)\n'
            'gan.train(dataset, epochs=50)\n',
        ),
        # The step function defined again for a second model (TensorFlow-Examples' save-and-restore guide): each definition is followed to the loops after it, so each model is broadcast where it trains.
        Example(
            'import tensorflow as tf\n'
            'W = tf.Variable(tf.zeros([784, 10]))\n'
            'b = tf.Variable(tf.zeros([10]))\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(tf.matmul(x, W) + b, y)\n'
            '    gradients = g.gradient(loss, [W, b])\n'
            '    optimizer.apply_gradients(zip(gradients, [W, b]))\n'
            '# %%\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n'
            '# %%\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(neural_net(x), y)\n'
            '    gradients = g.gradient(loss, neural_net.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, neural_net.trainable_variables))\n'
            '# %%\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'W = tf.Variable(tf.zeros([784, 10]))\n'
            'b = tf.Variable(tf.zeros([10]))\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(tf.matmul(x, W) + b, y)\n'
            '    gradients = g.gradient(loss, [W, b])\n'
            '    optimizer.apply_gradients(zip(gradients, [W, b]))\n'
            '# %%\n'
            'npu.distribute.broadcast([W, b])\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n'
            '# %%\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'def run_optimization(x, y):\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(neural_net(x), y)\n'
            '    gradients = g.gradient(loss, neural_net.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, neural_net.trainable_variables))\n'
            '# %%\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n'
            '    if optimizer.iterations == 1:\n'
            '        npu.distribute.broadcast(neural_net.trainable_variables)\n',
        ),
        # TensorFlow's keras-tuner tutorial: a model of the tuner's for each trial, and EarlyStopping reading its logs.
        Example(
            _TUNER_BEFORE + "tuner.search(x, y, epochs=50, validation_split=0.2, callbacks=[stop_early])\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            + _TUNER_BEFORE.split("\n", 1)[1]
            + _SEARCH_CALLBACK_CLASS + "tuner.search(x, y, epochs=50, validation_split=0.2, callbacks=[SameTrialOnEveryRank(), stop_early])\n",
        ),
        # Its callbacks in a list bound to a name (Deep Learning with Python, chapter 13), and no model to broadcast
        # outside the search: still one callback per search.
        Example(
            _TUNER_BEFORE + "callbacks = [stop_early]\ntuner.search(x, y, validation_data=(x_val, y_val), callbacks=callbacks)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            + _TUNER_BEFORE.split("\n", 1)[1] + "callbacks = [stop_early]\n"
            + _SEARCH_CALLBACK_CLASS
            + "tuner.search(x, y, validation_data=(x_val, y_val), callbacks=[SameTrialOnEveryRank()] + list(callbacks))\n",
        ),
        # The TF2 adapter's broadcast callback given to a search never broadcasts: ours takes its place, first.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            + _TUNER_BEFORE.split("\n", 1)[1]
            + "tuner.search(x, y, epochs=5, callbacks=[stop_early, npu.distribute.NPUBroadcastGlobalVariablesCallback(0)])\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            + _TUNER_BEFORE.split("\n", 1)[1]
            + _SEARCH_CALLBACK_CLASS + "tuner.search(x, y, epochs=5, callbacks=[SameTrialOnEveryRank(), stop_early])\n",
        ),
    ]

    def prepare(self, context) -> None:
        if context.frameworks == [LEARNING_RULE]:
            maker = starts_from_constants(context.facts, rule_updates(context.facts))
            if maker is not None:
                context.mark("broadcast", "not-applicable", _(RULE_CONSTANT_START_REASON).format(
                    maker=maker.replace("tensorflow.", f"{context.tf}.").replace(
                        "numpy.", f"{context.facts.alias_for('numpy') or 'numpy'}.")))

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        findings: List[Finding] = []
        if "estimator" in context.frameworks:
            findings += self._estimator(context)  # per training call: each must broadcast
        if "keras" in context.frameworks:
            findings += self._searches(context)  # per search: a tuner builds new models for each trial
        if context.steps["broadcast"] != "missing" or _horovod_broadcast(context):
            return findings  # a Horovod broadcast is converted by horovod-leftover
        tf2_callback = _uses_tf2_callback(context)
        if "keras" in context.frameworks and not tf2_callback:
            findings += self._keras(context)  # else tf2-broadcast-callback puts the broadcast in its place
        if "custom-loop" in context.frameworks:
            findings += self._sessions(context) if context.tf1 else self._custom_loop(context)
        if "tf-agents" in context.frameworks:
            findings += self._agents(context)
        if LEARNING_RULE in context.frameworks:
            findings += self._rule_parameters(context)
        if findings or tf2_callback:
            return findings
        return self.unlocated(
            context, _("variables are not broadcast from rank 0, and no place to broadcast them was recognized")
        )

    # -- a learning rule's parameters: plain tensors, which cannot be broadcast in place
    def _rule_parameters(self, context) -> Iterator[Finding]:
        updates = rule_updates(context.facts)
        if starts_from_constants(context.facts, updates) is not None:
            return
        first = updates[0]
        yield self.finding(first.cell, first.facts, first.stmt, _(
            "{parameter} is a tensor a learning rule updates, and it does not start from a constant: each rank "
            "starts from its own values, and a tensor cannot be broadcast in place; start it alike on every rank "
            "(a constant, or a draw seeded alike), or keep it in a tf.Variable and broadcast that").format(
                parameter=first.parameter))

    # -- Estimator: the broadcast hook in the training hooks
    def _estimator(self, context) -> Iterator[Finding]:
        estimators = _estimator_names(context)
        for cell, facts, site in context.facts.calls("train"):
            if estimators.get(receiver_name(site)) is False and not _hooks_broadcast(context, site):
                yield self._hooks_finding(context, cell, facts, site, _("the training call"))
        for cell, facts, site in context.facts.calls_to(K.TRAIN_SPEC):
            if not _hooks_broadcast(context, site) and not _trained_by_npu_estimator(context, site, estimators):
                yield self._hooks_finding(context, cell, facts, site, _("the TrainSpec"))

    # -- TF1 sessions: the hook for MonitoredTrainingSession, a broadcast run after initialization
    def _sessions(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(K.MONITORED_SESSION):
            if not _hooks_broadcast(context, site):
                yield self._hooks_finding(context, cell, facts, site, _("the MonitoredTrainingSession"))
        for cell, facts, site in context.facts.calls("run"):
            run = _broadcast_run(context, site)
            if run is None:
                continue
            tf = context.tf
            code = run.format(
                f"{tf}.group([{tf}.assign(var, hccl_ops.broadcast([var], 0)[0]) for var in {tf}.trainable_variables()])"
            )
            yield self.finding(
                cell, facts, site.node,
                _("variables are not broadcast from rank 0: ranks start from different weights; after "
                  "initializing them, run a broadcast of the trainable variables (hccl_ops.broadcast)"),
                [insert_after(cell, facts, site.stmt, code, [NEEDS_NPU_BRIDGE])],
            )

    def _after_first_step(self, context, places: List[tuple]) -> Finding:
        """One finding for the models a step updates that are built on their first call (a GAN's
        generator and discriminator, each with its optimizer): each broadcast after the first step."""
        s_cell, s_facts, step, _optimizer = places[0][0]
        models = ", ".join(_model_name_of_code(code) for _place, code in places)
        optimizers = ", ".join(place[3] for place, _code in places)
        code = "\n".join(f"if {place[3]}.iterations == 1:\n    {context.npu}.distribute.broadcast({variables})"
                         for place, variables in places)
        if len(places) == 1:
            message = _("variables are not broadcast from rank 0, and {model} has no variables before "
                        "the loop (it builds them on its first call): broadcast them after the first step, "
                        "when {optimizer}.iterations is 1").format(model=models, optimizer=optimizers)
        else:
            message = _("variables are not broadcast from rank 0, and {models} have no variables before the loop "
                        "(each builds them on its first call): broadcast each after the first step, when its "
                        "optimizer ({optimizers}) has made one step").format(models=models, optimizers=optimizers)
        return self.finding(
            s_cell, s_facts, step, message,
            [insert_after(s_cell, s_facts, step, code, [NEEDS_NPU_DEVICE])],
        )

    def _hooks_finding(self, context, cell, facts, site: CallSite, where: str) -> Finding:
        hooks = site.keyword("hooks")
        hooks_value = hooks.value if hooks is not None else None
        if context.options.broadcast_style == "hook":
            edit = _append_hook(context, cell, facts, site, hooks_value)
            message = _("variables are not broadcast from rank 0: ranks start from different weights; "
                        "append {hook} to its hooks to {where}").format(hook=K.BROADCAST_HOOK_EXPR, where=where)
        else:
            edit = _hooks_append(cell, facts, site, hooks_value)
            message = _("variables are not broadcast from rank 0: ranks start from different weights; "
                        "pass hooks=npu_hooks_append(...) to {where}").format(where=where)
        return self.finding(
            cell, facts, hooks_value if hooks_value is not None else site.node, message, [edit],
        )

    # -- Keras fit
    def _keras(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.keras_fits(*K.KERAS_FIT_METHODS):
            model = receiver_name(site)
            if model is None or site.method == "search":
                continue
            if context.tf1:
                yield self._tf1_callback(cell, facts, site)
            elif model_is_built_before_fit(context, model, site, cell):
                code = f"{context.npu}.distribute.broadcast({model}.trainable_variables)"
                yield self.finding(
                    cell, facts, site.node,
                    _("variables are not broadcast from rank 0: ranks start from different weights; "
                      "call {code} once the model is built, before fit").format(code=code),
                    [insert_before(cell, facts, site.stmt, code, [NEEDS_NPU_DEVICE])],
                )
            else:
                yield self._after_first_batch(context, cell, facts, site, model)

    # -- keras-tuner's search: a model of its own for each trial, out of the notebook's sight
    def _searches(self, context) -> Iterator[Finding]:
        defined = _search_callback_defined(context)
        for cell, facts, site in context.facts.keras_fits("fit"):
            if site.method != "search" or _search_broadcasts(context, site):
                continue
            if context.tf1:
                yield self._tf1_callback(cell, facts, site)
                continue
            edits = []
            if not defined:
                top = top_level_statement(facts, site.stmt) or site.stmt
                edits.append(insert_before(cell, facts, top, search_callback_class(context), [NEEDS_NPU_DEVICE]))
                defined = True
            defective = defective_callback_given_to_search(context, site)
            if defective is not None:
                edits.extend(_in_place_of_first(cell, facts, site, defective, f"{SEARCH_CALLBACK}()", NEEDS_NPU_DEVICE))
                message = _("the TF2 NPUBroadcastGlobalVariablesCallback never broadcasts (a defect of the adapter), "
                            "and the tuner builds a new model for every trial of this search: each rank starts every "
                            "trial from its own weights; put {callback} first in its callbacks instead: it broadcasts "
                            "each trial's weights after the first batch and averages each epoch's logs across ranks")
            else:
                edits.append(_first_callback(cell, facts, site, f"{SEARCH_CALLBACK}()", NEEDS_NPU_DEVICE))
                message = _("the tuner builds a new model for every trial of this search, and nothing broadcasts its "
                            "variables from rank 0: each rank starts every trial from its own weights and scores it on "
                            "its own logs, and the ranks' tuners part ways (different models in one all-reduce); add "
                            "{callback} first in its callbacks: it broadcasts each trial's weights after the first "
                            "batch and averages each epoch's logs across ranks")
            yield self.finding(cell, facts, site.node, message.format(callback=f"{SEARCH_CALLBACK}()"), edits)

    def _after_first_batch(self, context, cell, facts, site: CallSite, model: str) -> Finding:
        """A model built on its first call (subclassed, no input shape) has no variables before fit:
        broadcast after the first batch. Gradients are all-reduced, so every rank applied the same
        update and rank 0's weights are then the single-card weights."""
        edit = _add_callback(cell, facts, site, first_batch_broadcast(context, model), NEEDS_NPU_DEVICE)
        return self.finding(
            cell, facts, site.node,
            _("variables are not broadcast from rank 0, and {model} has no variables before fit (it is built "
              "on its first batch): broadcast them after the first batch with a callback").format(model=model),
            [edit],
        )

    def _tf1_callback(self, cell, facts, site: CallSite) -> Finding:
        callback = "NPUBroadcastGlobalVariablesCallback(0)"
        edit = _add_callback(cell, facts, site, callback, NEEDS_NPU_BRIDGE)
        return self.finding(
            cell, facts, site.node,
            _("variables are not broadcast from rank 0: add {callback} to the fit callbacks").format(callback=callback),
            [edit],
        )

    # -- TF2 custom loops: broadcast the trained variables where the model exists
    def _custom_loop(self, context) -> Iterator[Finding]:
        after_first_steps: Dict[Tuple[int, int], List[tuple]] = {}  # the step's place -> (place, variables)
        before_trainer: Dict[Tuple[int, int], tuple] = {}  # the trainer's first call -> (place, variables)
        at_the_loop: Dict[Tuple[int, int, str], tuple] = {}  # the loop's place -> (anchor, variables)
        yield from self._custom_loop_findings(context, after_first_steps, before_trainer, at_the_loop)
        for anchor, variables in at_the_loop.values():
            yield self._at_the_loop(context, anchor, variables)
        for places in after_first_steps.values():
            yield self._after_first_step(context, places)
        for (i_cell, i_facts, i_stmt), variables in before_trainer.values():
            code = _broadcasts(context, variables)
            yield self.finding(
                i_cell, i_facts, i_stmt,
                _("variables are not broadcast from rank 0: ranks start from different weights; add {code} "
                  "before the trainer's first method trains them").format(code=code.replace("\n", "; ")),
                [insert_before(i_cell, i_facts, i_stmt, code, [NEEDS_NPU_DEVICE])],
            )

    def _custom_loop_findings(self, context, after_first_steps, before_trainer, at_the_loop) -> Iterator[Finding]:
        done = set()
        for cell, facts, site in context.facts.calls("gradient"):
            variables = site.argument(1, "sources")
            if variables is None or site.receiver is None:
                continue
            if not_variables(context, facts, site, variables):
                continue  # the gradient of an input (an adversarial example, a tour of the tape): nothing to broadcast
            if only_shown(context, cell, site):
                continue  # a gradient looked at, never applied: no training starts from these variables
            if "keras" in context.frameworks and applied_by_the_compiled_optimizer(facts, site):
                continue  # fit's own step: the model is broadcast where fit trains it
            variables_code = _each_of_the_loop(facts, site, variables) or facts.segment(variables)
            if variables_code in done:
                continue
            done.add(variables_code)
            code = f"{context.npu}.distribute.broadcast({variables_code})"
            anchor = _broadcast_anchor(context, cell, facts, site, variables)
            if anchor is not None and _local_to_the_function(context, facts, site, variables):
                passed = _as_passed_at_the_top_level(context, cell, facts, site, variables)
                made = _made_from_top_level_names(context, facts, site, variables) if passed is None else None
                if made is not None:
                    passed = made[:4]
                    later = _after_first_update(context, cell, facts, site, made[4], made[0], made[2])
                    if later is not None:  # a model built on its first call: after the first step
                        after_first_steps.setdefault((later[0], id(later[2])), []).append((later, made[3]))
                        continue
                if passed is not None:
                    p_cell, p_facts, p_stmt, p_code = passed[:4]
                    p_code = f"{context.npu}.distribute.broadcast({p_code})"
                    insert = insert_after if passed[4:] == ("after",) else insert_before
                    message = _("variables are not broadcast from rank 0: ranks start from different weights; add "
                                "{code} before {function} trains them").format(code=p_code, function=site.function)
                    edits = [insert(p_cell, p_facts, p_stmt, p_code, [NEEDS_NPU_DEVICE])]
                    given = passed[3].rsplit(".", 1)[0]
                    if passed[4:] != ("after",) and _unbuilt_keras_model_at(context, given, p_cell, p_stmt.lineno):
                        # there it has no variables: a broadcast would sync nothing (broadcast-before-build)
                        in_step = self._after_the_first_update_in_the_step(context, cell, facts, site, variables_code)
                        if in_step is not None:
                            yield in_step
                            continue
                        message += _(" ({model} is built on its first call: build it before, with a first call or "
                                     "model.build(input_shape), or the broadcast finds no variables)").format(model=given)
                        edits = []
                    yield self.finding(p_cell, p_facts, p_stmt, message, edits)
                    continue
                instance = _as_an_attribute_of_the_trainer(context, cell, facts, site, variables)
                if instance is not None:  # self.generator of a trainer whose methods are followed to its loop
                    before_trainer.setdefault((instance[0], id(instance[2])), (instance[:3], []))[1].append(instance[3])
                    continue
                yield self.finding(  # a parameter or a local of the step function: no name to broadcast outside it
                    cell, facts, site.node,
                    _("variables are not broadcast from rank 0, and {variables} is local to {function}: "
                      "broadcast the variables it stands for where they are made, once built ({npu}."
                      "distribute.broadcast(...)); add it by hand").format(
                        variables=variables_code, function=site.function, npu=context.npu),
                )
                continue
            instance = _as_an_attribute_of_the_trainer(context, cell, facts, site, variables) if anchor is None else None
            if instance is not None:  # a GAN trainer's two models: one finding before its first method's call
                before_trainer.setdefault((instance[0], id(instance[2])), (instance[:3], []))[1].append(instance[3])
                continue
            if anchor is None:
                yield self.finding(
                    cell, facts, site.node,
                    _("variables are not broadcast from rank 0, and the training loop was not found: call "
                      "{code} once the model is built (after model.build(...) or a first call if it is "
                      "built lazily), before the loop").format(code=code),
                )
                continue
            a_cell, a_facts, a_stmt, where = anchor
            after_first_step = _after_first_update(context, cell, facts, site, variables, a_cell, a_stmt)
            if where == "before" and after_first_step is not None:
                after_first_steps.setdefault((after_first_step[0], id(after_first_step[2])), []).append(
                    (after_first_step, variables_code))
                continue
            model = _model_name(variables)
            if where == "before" and model is not None and _unbuilt_keras_model_at(context, model, a_cell, a_stmt.lineno):
                in_step = self._after_the_first_update_in_the_step(context, cell, facts, site, variables_code)
                if in_step is not None:  # its optimizer is given to the step: broadcast there, once it stepped
                    yield in_step
                    continue
            # A GAN's step trains two models: both broadcasts go before its one loop, in one finding.
            at_the_loop.setdefault((a_cell, id(a_stmt), where), (anchor, []))[1].append(variables_code)

    def _at_the_loop(self, context, anchor: tuple, variables: List[str]) -> Finding:
        a_cell, a_facts, a_stmt, where = anchor
        code = _broadcasts(context, variables)
        edit = (insert_after if where == "after" else insert_before)(a_cell, a_facts, a_stmt, code, [NEEDS_NPU_DEVICE])
        shown = code.replace("\n", "; ")
        if where == "after":
            message = _("variables are not broadcast from rank 0: ranks start from different weights; "
                        "add {code}").format(code=shown)
        else:
            message = _("variables are not broadcast from rank 0: ranks start from different weights; add {code} "
                        "before the training loop (if the model is built lazily, on its first call, build it "
                        "first with model.build(input_shape), or the broadcast finds no variables)").format(code=shown)
        return self.finding(a_cell, a_facts, a_stmt, message, [edit])


    def _after_the_first_update_in_the_step(self, context, cell, facts, gradient: CallSite, variables: str):
        """A model built on its first call, given to the step function through the notebook's functions
        (``train_loop(autoencoder, opt, ...)`` calling ``train(loss, model, opt, x)``): broadcast right
        after the step's update, once its Keras optimizer has made one step. In the step itself, so only
        for a step run eagerly (a collective under a ``tf.cond`` of a ``tf.function`` would not be ordered
        against the step's all-reduce). None when that does not hold."""
        function = facts.functions.get(gradient.function) if gradient.function else None
        if function is None or _compiled(function) or any(
                _compiled(f) for _c, c_facts, call in _uses_of_function(context, gradient.function, cell)
                for f in [c_facts.functions.get(call.function)] if f is not None):
            return None
        updates = [call for call in facts.calls_by_method.get("apply_gradients", ())
                   if call.function == gradient.function and call.node.lineno > gradient.node.lineno
                   and isinstance(call.stmt, ast.Expr) and isinstance(call.receiver, ast.Name)]
        if len(updates) != 1 or not _is_keras_optimizer(context, cell, facts, gradient.function, updates[0].receiver.id):
            return None
        update = updates[0]
        optimizer = update.receiver.id
        code = f"if {optimizer}.iterations == 1:\n    {context.npu}.distribute.broadcast({variables})"
        return self.finding(
            cell, facts, update.stmt,
            _("variables are not broadcast from rank 0, and the model {function} trains is built on its first "
              "call: broadcast it after the first step, when {optimizer}.iterations is 1").format(
                function=gradient.function, optimizer=optimizer),
            [insert_after(cell, facts, update.stmt, code, [NEEDS_NPU_DEVICE])],
        )

    # -- TF-Agents: the agent's variables, once it is initialized
    def _agents(self, context) -> Iterator[Finding]:
        for agent in trained_agents(context.facts):
            if agent.optimizer is None:
                continue  # no gradient step: not-data-parallel marks the steps not applicable
            variables = f"{agent.name}.trainable_variables"
            if context.tf1:  # TF-Agents runs eagerly: the assignments run as they are made
                code = f"{context.tf}.group([var.assign(hccl_ops.broadcast([var], 0)[0]) for var in {variables}])"
                needs = NEEDS_NPU_BRIDGE
            else:
                code = f"{context.npu}.distribute.broadcast({variables})"
                needs = NEEDS_NPU_DEVICE
            cell, facts, stmt = _agent_ready(context, agent)
            yield self.finding(
                cell, facts, stmt,
                _("variables are not broadcast from rank 0: ranks start from different weights; add {code} "
                  "once {agent} is initialized").format(code=code, agent=agent.name),
                [insert_after(cell, facts, stmt, code, [needs])],
            )


def _broadcasts(context, variables: List[str]) -> str:
    """One broadcast a line, for each model's variables (code)."""
    return "\n".join(f"{context.npu}.distribute.broadcast({each})" for each in variables)


def _agent_ready(context, agent):
    """The module-level statement after which the agent's variables exist: ``agent.initialize()`` after its
    construction, else the construction (the agent's constructor creates its networks' variables)."""
    built = (agent.cell, agent.site.node.lineno)
    for cell, facts, site in context.facts.calls("initialize"):
        if site.dotted == f"{agent.name}.initialize" and site.function is None and (cell, site.node.lineno) > built:
            return cell, facts, top_level_statement(facts, site.stmt)
    return agent.cell, agent.facts, top_level_statement(agent.facts, agent.site.stmt)


def _broadcast_run(context, site: CallSite) -> Optional[str]:
    """How to run the broadcast after this variable initialization, with the op in ``{}``:
    ``sess.run(init)`` -> ``sess.run({})``; ``tf.global_variables_initializer().run()`` or ``init.run()``
    (the op run in the default session, as the ``with tf.Session(graph=graph) as session:`` it sits in)
    -> ``{}.run()``."""
    if site.node.args:
        session = receiver_name(site)
        if session is not None and _is_variable_initialization(context, site.node.args[0]):
            return session + ".run({})"
        return None
    if isinstance(site.receiver, (ast.Call, ast.Name)) and _is_variable_initialization(context, site.receiver):
        return "{}.run()"
    return None


def _uses_tf2_callback(context) -> bool:
    """The TF2 broadcast callback, given directly or through npu_callbacks_append: tf2-broadcast-callback
    puts a working broadcast in its place."""
    from .tf2_broadcast_callback import tf2_callbacks_appends

    if context.tf1:
        return False
    return any(
        adapter_broadcast_callback(context, site.dotted)
        for _unused, _unused, site in context.facts.calls("NPUBroadcastGlobalVariablesCallback")
    ) or next(tf2_callbacks_appends(context), None) is not None


def first_batch_broadcast(context, model: str) -> str:
    """A callback that broadcasts ``model``'s variables once they exist, after the first batch."""
    return (
        f"{keras_prefix(context)}.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: "
        f"batch == 0 and {context.npu}.distribute.broadcast({model}.trainable_variables))"
    )



def model_is_built_before_fit(context, model: str, fit: CallSite, cell: int) -> bool:
    return model_built_at(context, model, cell, fit.node.lineno) is True


# Keras methods after which a model's variables exist.
_BUILDING_METHODS = ("build", "fit", "predict", "evaluate", "train_on_batch", "test_on_batch", "predict_on_batch")


def model_built_at(context, model: str, cell: int, line: int) -> Optional[bool]:
    """Do ``model``'s variables exist at (cell, line)? The model is the last module-level assignment
    of ``model`` before that place: built if its constructor builds it, or if it is built, trained or
    called between that assignment and the place; None when no assignment of ``model`` is seen."""
    created = None
    for c, _unused, assignment in context.facts.assignments(model):
        if assignment.function is None and (c, assignment.stmt.lineno) < (cell, line):
            created = (c, assignment)
    if created is None:
        return None
    c, assignment = created
    value = assignment.value
    if isinstance(value, ast.Call) and (
        model_is_built_by(context, value) or _helper_returns_built_model(context, value)
    ):
        return True
    after_creation = (c, assignment.stmt.end_lineno)
    # Only what runs at the notebook's top level builds it before (cell, line): a call inside a
    # function (the training step calling the model) runs when that function does, not where it is defined.
    between = lambda c2, call: call.function is None and after_creation < (c2, call.node.lineno) < (cell, line)  # noqa: E731
    for method in _BUILDING_METHODS:
        for c2, _unused, call in context.facts.calls(method):
            if call.dotted == f"{model}.{method}" and between(c2, call):
                return True
    for c2, _unused, call in context.facts.calls(model.rsplit(".", 1)[-1]):
        if call.dotted == model and between(c2, call):
            return True
    for c2, _unused, call in context.facts.calls("add"):
        if call.dotted == f"{model}.add" and between(c2, call) and call.node.args and \
                _gives_input_shape(context, call.node.args[0]):
            return True  # Sequential().add(Conv2D(..., input_shape=...)): built from that layer on
    for function in _notebook_functions(context):
        for c2, _unused, call in context.facts.calls(function):
            if call.dotted == function and between(c2, call) and _calls_model(context, function, model):
                return True  # a training step run at the top level (train_step(x, y)): the model was called in it
    return False


def _compiled(function: ast.AST) -> bool:
    """Decorated with ``tf.function`` (or ``function``)?"""
    return any((dotted_name(d.func if isinstance(d, ast.Call) else d) or "").rsplit(".", 1)[-1] == "function"
               for d in getattr(function, "decorator_list", ()))


def _is_keras_optimizer(context, cell, facts, function: str, name: str) -> bool:
    """Is ``name`` in ``function`` a Keras optimizer (it has ``iterations``): made at the top level, or given
    through the notebook's functions from a name made there?"""
    if name in positional_parameters(facts.functions[function]):
        passed = _passed_to(context, cell, facts, function, name, [], PASSED_ON)
        if passed is None:
            return False
        name = passed[3]
    created = [a.value for _unused, _unused, a in context.facts.assignments(name)
               if a.function is None and isinstance(a.value, ast.Call)]
    return bool(created) and context.facts.resolve(dotted_name(created[-1].func)) in K.KERAS_OPTIMIZERS


def _unbuilt_keras_model_at(context, model: str, cell: int, line: int) -> bool:
    from .broadcast_before_build import _unbuilt_at  # that rule's judgement, so that a fix never trips it

    return _unbuilt_at(context, model, cell, line)


def _notebook_functions(context) -> List[str]:
    """The names of the functions the notebook defines (once per analysis)."""
    names = getattr(context, "_notebook_functions", None)
    if names is None:
        names = sorted({name for _unused, facts in context.facts.cells for name in facts.functions})
        context._notebook_functions = names
    return names


def _calls_model(context, function: str, model: str, depth: int = 4) -> bool:
    """Does the notebook's ``function`` call ``model`` (or a building method of it), itself or through
    the functions it calls, up to ``depth`` deep?"""
    found = context.facts.function(function)
    if found is None or depth == 0:
        return False
    _unused, facts, node = found
    for site in facts.calls:
        if site.function != function:
            continue
        if site.dotted == model or (site.dotted or "").rsplit(".", 1)[0] == model and site.method in _BUILDING_METHODS:
            return True
        if site.method == "gradient" and any(dotted_name(arg) in (f"{model}.trainable_variables",
                                                                  f"{model}.trainable_weights") for arg in site.node.args):
            return True  # a gradient step on its variables: the model was called for the loss
        callee = site.dotted if site.dotted and "." not in site.dotted else None
        passed = [arg.id for arg in site.node.args if isinstance(arg, ast.Name)]  # strategy.run(step, args=...)
        for name in filter(None, [callee, *passed]):
            if name != function and _calls_model(context, name, model, depth - 1):
                return True
    return False


def _gives_input_shape(context, layer: ast.expr) -> bool:
    """Is ``layer`` (a call, or a name bound to one at the top level) a Keras input layer, or a layer
    given its input shape?"""
    if isinstance(layer, ast.Name):
        bound = [a.value for _unused, _unused, a in context.facts.assignments(layer.id) if a.function is None]
        layer = bound[-1] if bound else layer
    if not isinstance(layer, ast.Call):
        return False
    if any(keyword.arg in K.KERAS_INPUT_KEYWORDS for keyword in layer.keywords):
        return True
    return context.facts.resolve(dotted_name(layer.func)) in K.KERAS_INPUT_LAYERS


def _is_variable_initialization(context, node: ast.AST) -> bool:
    """An initializer call, or a name bound to one (``init = tf.global_variables_initializer()``,
    then ``sess.run(init)``, as TF1 code left by tf.distribute writes it)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and context.facts.resolve(dotted_name(child.func)) in K.VARIABLE_INITIALIZERS:
            return True
        if isinstance(child, ast.Name) and any(
            isinstance(a.value, ast.Call) and context.facts.resolve(dotted_name(a.value.func)) in K.VARIABLE_INITIALIZERS
            for _unused, _unused, a in context.facts.assignments(child.id)
        ):
            return True
    return False


SEARCH_CALLBACK = "SameTrialOnEveryRank"


def search_callback_class(context) -> str:
    """A callback for a tuner's search: keras-tuner deep-copies the callbacks of each trial and sets
    their model, so a class reaches the trial's model where a LambdaCallback cannot. Its epoch logs
    are averaged first, before EarlyStopping and the tuner's own callbacks (appended last) read them."""
    return (
        f"class {SEARCH_CALLBACK}({keras_prefix(context)}.callbacks.Callback):\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        if batch == 0:\n"
        f"            {context.npu}.distribute.broadcast(self.model.trainable_variables)\n"
        "\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        f"        {logs_averaged(context)}"
    )


def _search_callback_defined(context) -> bool:
    return any(SEARCH_CALLBACK in facts.classes for _cell, facts in context.facts.cells_mentioning(SEARCH_CALLBACK))


def _search_broadcasts(context, site: CallSite) -> bool:
    """Is a callback given to the search that broadcasts: an instance of a class of the notebook's whose
    code broadcasts (in its list, or in the list bound to the name given), or the TF1 adapter's callback?
    The TF2 adapter's callback never broadcasts: the search gets ours in its place."""
    callbacks = site.keyword("callbacks")
    if callbacks is None:
        return False
    given = [callbacks.value]
    if isinstance(callbacks.value, ast.Name):
        given += [a.value for _c, _f, a in context.facts.assignments(callbacks.value.id) if a.function is None]
    for node in (n for value in given for n in ast.walk(value)):
        if not isinstance(node, ast.Call):
            continue
        name = dotted_name(node.func) or ""
        if name.rsplit(".", 1)[-1] == "NPUBroadcastGlobalVariablesCallback":
            if context.tf1:  # the TF2 adapter's never broadcasts (see tf2-broadcast-callback)
                return True
            continue
        for _cell, facts in context.facts.cells_mentioning(name):
            definition = facts.classes.get(name)
            if definition is not None and any(
                    isinstance(call, ast.Call) and (dotted_name(call.func) or "").endswith("broadcast")
                    for call in ast.walk(definition)):
                return True
    return False


def defective_callback_given_to_search(context, site: CallSite) -> Optional[ast.Call]:
    """The TF2 adapter's NPUBroadcastGlobalVariablesCallback (it never broadcasts) written in a tuner
    search's list of callbacks; None when the search has none, or in TF1 (where it works)."""
    callbacks = site.keyword("callbacks")
    if context.tf1 or site.method != "search" or callbacks is None or not isinstance(callbacks.value, ast.List):
        return None
    for element in callbacks.value.elts:
        if isinstance(element, ast.Call) and adapter_broadcast_callback(context, dotted_name(element.func)):
            return element
    return None


def adapter_broadcast_callback(context, called: Optional[str]) -> bool:
    """Whether ``called`` (a call's dotted name) is the adapter's NPUBroadcastGlobalVariablesCallback, not a
    class of the notebook's own of that name."""
    return (called or "").rsplit(".", 1)[-1] == "NPUBroadcastGlobalVariablesCallback" and \
        context.facts.resolve(called).startswith(("npu_device.", "npu_bridge."))


def _in_place_of_first(cell, facts: CellFacts, site: CallSite, replaced: ast.expr, callback: str, needs: str) -> list:
    """``callback`` first in the call's list of callbacks, ``replaced`` (an element of it) gone."""
    first = site.keyword("callbacks").value.elts[0]
    if first is replaced:
        return [replace(cell, facts, replaced, callback, [needs])]
    return [remove_element(cell, facts, replaced), replace_with(cell, facts, first, callback + ", {first}", [needs], first=first)]


def _first_callback(cell, facts: CellFacts, site: CallSite, callback: str, needs: str):
    """``callback`` first in the call's callbacks (its logs are averaged before the others read them)."""
    callbacks = site.keyword("callbacks")
    if callbacks is None:
        return add_argument(cell, facts, site.node, f"callbacks=[{callback}]", [needs])
    if isinstance(callbacks.value, ast.List) and callbacks.value.elts:
        first = callbacks.value.elts[0]
        return replace_with(cell, facts, first, callback + ", {first}", [needs], first=first)
    if isinstance(callbacks.value, ast.List):
        return append_element(cell, facts, callbacks.value, callback, [needs])
    return replace_with(cell, facts, callbacks.value, f"[{callback}] + list({{callbacks}})", [needs],
                        callbacks=callbacks.value)


def _add_callback(cell, facts: CellFacts, site: CallSite, callback: str, needs: str):
    callbacks = site.keyword("callbacks")
    if callbacks is None:
        return add_argument(cell, facts, site.node, f"callbacks=[{callback}]", [needs])
    if isinstance(callbacks.value, ast.List):
        return append_element(cell, facts, callbacks.value, callback, [needs])
    return replace_with(cell, facts, callbacks.value, f"list({{callbacks}}) + [{callback}]", [needs],
                        callbacks=callbacks.value)


def _estimator_names(context) -> dict:
    """Estimator variable -> whether it broadcasts by itself (NPUEstimator does, in TRAIN mode).

    The constructions bound to a name are read in notebook order and the last one wins, except that
    alternatives (the branches of one ``if``/``else`` or ``try``/``except``: an NPUEstimator on the
    NPU, a plain Estimator elsewhere, where one device has nothing to broadcast) broadcast if one
    of them does."""
    names: dict = {}
    previous: dict = {}  # name -> (cell, facts, statement) of its last construction
    for cell, facts, site in context.facts.calls_to(*K.ESTIMATORS):
        target = _target_of(site)
        if not target:
            continue
        broadcasts = context.facts.resolve(site.dotted) == K.NPU_ESTIMATOR
        last = previous.get(target)
        if last is not None and last[0] == cell and _alternatives(last[1], last[2], site.stmt):
            broadcasts = broadcasts or names[target]
        names[target] = broadcasts
        previous[target] = (cell, facts, site.stmt)
    return names


def _alternatives(facts: CellFacts, first: ast.stmt, second: ast.stmt) -> bool:
    """Are the two statements in different branches of one ``if`` or ``try`` (only one of them runs)?"""
    for node in facts.nodes(ast.If, ast.Try):
        if isinstance(node, ast.If):
            branches = [node.body, node.orelse]
        elif isinstance(node, ast.Try):
            branches = [node.body] + [handler.body for handler in node.handlers]
        else:
            continue
        sides = [_branch_holding(branches, stmt) for stmt in (first, second)]
        if None not in sides and sides[0] != sides[1]:
            return True
    return False


def _branch_holding(branches, stmt: ast.stmt):
    for index, body in enumerate(branches):
        if body and body[0].lineno <= stmt.lineno and stmt.end_lineno <= body[-1].end_lineno:
            return index
    return None


def _trained_by_npu_estimator(context, site: CallSite, estimators: dict) -> bool:
    """Is this TrainSpec given to ``train_and_evaluate`` with an NPUEstimator (which broadcasts)?"""
    spec_name = _target_of(site)
    for _unused, _unused, call in context.facts.calls_to(K.TRAIN_AND_EVALUATE):
        spec = call.argument(1, "train_spec")
        given = spec is site.node or (
            spec_name is not None and isinstance(spec, ast.Name) and spec.id == spec_name
        )
        if not given:
            continue
        estimator = call.argument(0, "estimator")
        if isinstance(estimator, ast.Call):
            return context.facts.resolve(dotted_name(estimator.func)) == K.NPU_ESTIMATOR
        return estimators.get(dotted_name(estimator) if estimator is not None else None) is True
    return False


def _hooks_broadcast(context, site: CallSite) -> bool:
    """Do this call's hooks include the broadcast (the hook, npu_hooks_append, or a list given it)?"""
    hooks = site.keyword("hooks")
    if hooks is None:
        return False
    if _mentions_broadcast(context, hooks.value):
        return True
    if isinstance(hooks.value, ast.Name):
        name = hooks.value.id
        for _unused, _unused, assignment in context.facts.assignments(name):
            if _mentions_broadcast(context, assignment.value):
                return True
        for _unused, _unused, call in context.facts.calls("append", "extend", "insert"):
            if call.dotted == f"{name}.{call.method}" and any(_mentions_broadcast(context, a) for a in call.node.args):
                return True
    return False


def _mentions_broadcast(context, node: ast.AST) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            name = context.facts.resolve(dotted_name(child.func))
            if name in K.BROADCAST_FORMS or (name.startswith("horovod.") and "Broadcast" in name):
                return True
    return False


def _target_of(site: CallSite) -> Optional[str]:
    stmt = site.stmt
    if isinstance(stmt, ast.Assign) and stmt.value is site.node and len(stmt.targets) == 1:
        return dotted_name(stmt.targets[0])
    return None


def _hooks_append(cell, facts: CellFacts, site: CallSite, hooks: Optional[ast.expr]):
    if hooks is None:
        return add_argument(cell, facts, site.node, "hooks=npu_hooks_append()", [NEEDS_NPU_BRIDGE])
    if isinstance(hooks, ast.Constant) and hooks.value is None:
        return replace(cell, facts, hooks, "npu_hooks_append()", [NEEDS_NPU_BRIDGE])
    if isinstance(hooks, ast.Tuple):
        elements = ", ".join(facts.segment(element) for element in hooks.elts)
        return replace(cell, facts, hooks, f"npu_hooks_append([{elements}])", [NEEDS_NPU_BRIDGE])
    if isinstance(hooks, (ast.List, ast.Name)):
        return replace_with(cell, facts, hooks, "npu_hooks_append({hooks})", [NEEDS_NPU_BRIDGE], hooks=hooks)
    return replace_with(cell, facts, hooks, "npu_hooks_append(list({hooks}))", [NEEDS_NPU_BRIDGE], hooks=hooks)


def _append_hook(context, cell, facts: CellFacts, site: CallSite, hooks: Optional[ast.expr]):
    needs = [NEEDS_NPU_BRIDGE, NEEDS_OS]
    hook = K.BROADCAST_HOOK_EXPR
    if hooks is None:
        return add_argument(cell, facts, site.node, f"hooks=[{hook}]", needs)
    if isinstance(hooks, ast.Constant) and hooks.value is None:
        return replace(cell, facts, hooks, f"[{hook}]", needs)
    if isinstance(hooks, (ast.List, ast.Tuple)):
        return append_element(cell, facts, hooks, hook, needs)
    if isinstance(hooks, ast.Name):
        anchor = _last_list_update(facts, hooks.id, site)
        if anchor is not None:
            return insert_after(cell, facts, anchor, f"{hooks.id}.append({hook})", needs)
        return insert_before(cell, facts, site.stmt, f"{hooks.id}.append({hook})", needs)
    return replace(cell, facts, hooks, f"list({facts.segment(hooks)}) + [{hook}]", needs)


def _last_list_update(facts: CellFacts, name: str, site: CallSite) -> Optional[ast.stmt]:
    """The last statement before the training call that builds the list ``name`` (as the seed does)."""
    last = None
    for assignment in facts.assignments.get(name, ()):
        if assignment.function == site.function and assignment.stmt.lineno < site.node.lineno:
            last = assignment.stmt
    for call in [*facts.calls_by_method.get("append", ()), *facts.calls_by_method.get("extend", ())]:
        if call.dotted == f"{name}.{call.method}" and call.function == site.function and call.node.lineno < site.node.lineno:
            if last is None or call.stmt.lineno > last.lineno:
                last = call.stmt
    if last is not None and last.end_lineno >= site.stmt.lineno:
        return None
    return last


def _broadcast_anchor(context, cell, facts, site: CallSite, variables: ast.expr) -> Optional[Tuple]:
    """Where to broadcast the variables of a custom loop: after the built model, else before the loop."""
    model = _model_name(variables)
    if model is not None:
        built = _statement_that_builds(context, model)
        if built is not None:
            return built + ("after",)
    loop = _training_loop(context, cell, facts, site)
    if loop is not None:
        return loop + ("before",)
    return None


def _after_first_update(context, cell, facts, gradient: CallSite, variables: ast.expr, loop_cell, loop):
    """Where to broadcast a model that builds its variables on its first call (a broadcast before the
    loop would find none): (cell, facts, statement, optimizer name). The statement is the one at the
    top level that runs a step (the ``apply_gradients`` itself in an eager loop, else the call of the
    step function): after it, when the optimizer has taken one step, the variables exist, every rank
    applied the same all-reduced update, and broadcasting rank 0's weights leaves every rank with them.
    Eagerly, outside the step's ``tf.function``: a collective under a ``tf.cond`` there would not be
    ordered against the step's all-reduce. None when that place or a Keras optimizer is not found."""
    model = _model_name(variables)
    if model is None or model_built_at(context, model, loop_cell, loop.lineno) is not False:
        return None
    updates = [call for call in facts.calls_by_method.get("apply_gradients", ())
               if call.function == gradient.function and call.node.lineno > gradient.node.lineno]
    # A GAN's step updates two models, each with its optimizer: the one given this model's variables.
    updates.sort(key=lambda call: not any(isinstance(node, ast.Name) and node.id == model
                                          for node in ast.walk(call.node)))
    if not updates or not isinstance(updates[0].receiver, ast.Name):
        return None
    optimizer = updates[0].receiver.id
    created = [a.value for _unused, _unused, a in context.facts.assignments(optimizer) if isinstance(a.value, ast.Call)]
    if not created or context.facts.resolve(dotted_name(created[-1].func)) not in K.KERAS_OPTIMIZERS:
        return None  # a tf.compat.v1 optimizer has no ``iterations``
    found = _top_level_call(context, cell, facts, updates[0], one_step=True)
    if found is None:
        return None
    s_cell, s_facts, step = found
    if step.function is not None and not _global_where_stepped(context, model.split(".")[0], updates[0], step):
        return None  # the model is a parameter there (``train(loss, model, ...)``): the step broadcasts itself
    if not isinstance(step.stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return None  # ``total_loss += step(x)`` too: the broadcast goes after the statement
    return s_cell, s_facts, step.stmt, optimizer


def _as_an_attribute_of_the_trainer(context, cell, facts, site: CallSite, variables: ast.expr):
    """(cell, facts, statement, code) when ``variables`` is ``self.<model>.trainable_variables`` in a
    method of a class whose ``__init__`` builds that model (``self.generator = self.build_generator()``
    returning a functional ``Model``: a Keras-GAN style trainer), and the notebook makes one instance
    at its top level and then calls one of its methods there (``dcgan.train(...)``): the broadcast of
    ``dcgan.generator.trainable_variables`` goes before that call; else None."""
    model = _model_name(variables)
    if model is None or not model.startswith("self.") or model.count(".") != 1 or site.function is None:
        return None
    attribute = model.split(".", 1)[1]
    owner = _class_building(context, facts, site.function, attribute)
    if owner is None:
        return None
    instances = [(c, a) for c, _f, a in _module_assignments_of_calls_to(context, owner.name)]
    if len(instances) != 1:
        return None
    made_cell, made = instances[0]
    name = made.target
    for c_cell, c_facts, call in context.facts.all_calls(mentioning=name):
        if call.function is None and isinstance(call.node.func, ast.Attribute) \
                and dotted_name(call.node.func.value) == name and (c_cell, call.node.lineno) > (made_cell, made.stmt.lineno):
            return c_cell, c_facts, top_level_statement(c_facts, call.stmt), f"{name}.{attribute}.trainable_variables"
    return None


def _class_building(context, facts: CellFacts, method: Optional[str], attribute: str) -> Optional[ast.ClassDef]:
    """The class of this cell with method ``method`` whose ``__init__`` builds ``self.<attribute>``."""
    owner = next((c for c in facts.classes.values()
                  if any(isinstance(m, ast.FunctionDef) and m.name == method for m in c.body)), None)
    init = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None) \
        if owner is not None else None
    if init is None or not _builds_attribute(context, owner, init, attribute):
        return None
    return owner


def _builds_attribute(context, owner: ast.ClassDef, init: ast.FunctionDef, attribute: str) -> bool:
    """Does ``__init__`` give ``self.<attribute>`` a model built at construction (directly, or from a
    method of the class returning one)?"""
    for node in ast.walk(init):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and dotted_name(node.targets[0]) == f"self.{attribute}"
                and isinstance(node.value, ast.Call)):
            continue
        value = node.value
        if model_is_built_by(context, value):
            return True
        method = value.func.attr if isinstance(value.func, ast.Attribute) and dotted_name(value.func.value) == "self" else None
        helper = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == method), None)
        returns = [r.value for r in ast.walk(helper) if isinstance(r, ast.Return) and r.value is not None] if helper else []
        return bool(returns) and all(isinstance(r, ast.Call) and model_is_built_by(context, r) for r in returns)
    return False


def _module_assignments_of_calls_to(context, class_name: str):
    """``name = ClassName(...)`` at the top level of a cell."""
    for cell, facts in context.facts.cells_mentioning(class_name):
        for assignments in facts.assignments.values():
            for assignment in assignments:
                value = assignment.value
                if assignment.function is None and not assignment.tuple_target and "." not in assignment.target \
                        and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == class_name:
                    yield cell, facts, assignment


def _as_passed_at_the_top_level(context, cell, facts, site: CallSite, variables: ast.expr):
    """(cell, facts, statement, code) when ``variables`` starts from a parameter of the step function
    and the notebook calls that function at its top level with a name there (``train(mlp, ...)`` for
    ``def train(model, ...)``: ``mlp.variables``), to broadcast before that statement; else None."""
    root, chain = variables, []
    while isinstance(root, ast.Attribute):
        chain.append(root.attr)
        root = root.value
    if not isinstance(root, ast.Name):
        return None
    return _passed_to(context, cell, facts, site.function, root.id, chain, PASSED_ON)


# How many functions a model given as an argument is followed out through (``train_model(mlp)``
# calling ``train_step(..., mlp, ...)``: the core API's guides).
PASSED_ON = 2


def _passed_to(context, cell, facts, function_name: Optional[str], parameter: str, chain: List[str], depth: int):
    """Where the notebook gives ``function_name`` the model its ``parameter`` stands for (see above)."""
    function = facts.functions.get(function_name) if function_name else None
    if function is None:
        return None
    names = positional_parameters(function)
    if parameter not in names:
        return None
    position = names.index(parameter)
    for c_cell, c_facts, call in _uses_of_function(context, function_name, cell):
        if (call.dotted or "").rsplit(".", 1)[-1] != function_name:
            continue  # passed on (strategy.run(step, ...)): its arguments are not the step's
        if call.function is not None:
            found = _as_passed_in_its_function(context, c_cell, c_facts, call, position, parameter, chain, depth)
            if found is not None:
                return found
            continue
        given = call.argument(position, parameter)
        if not isinstance(given, ast.Name):
            continue
        bound = [a for _unused, _unused, a in context.facts.assignments(given.id) if a.function is None]
        if bound and not all(makes_a_tensor(context, a.value) for a in bound):
            code = ".".join([given.id, *reversed(chain)])
            return c_cell, c_facts, top_level_statement(c_facts, call.stmt), code
    return None


def _as_passed_in_its_function(context, cell, facts: CellFacts, call: CallSite, position: int, parameter: str,
                               chain: List[str], depth: int = 0):
    """(cell, facts, statement, code) for a helper called inside another function with what that
    function made (``main()`` builds ``model``, then loops over ``grad_utils.apply_gradients(optimizer,
    tape, loss, model.trainable_variables)``, the vendor's guide's shape): broadcast before the
    outermost loop around the call in that function, once the model is made; with what that function
    was itself given (one of its parameters), where it is given it; else None."""
    given = call.argument(position, parameter)
    given_root = chain_root_name(given) if given is not None else None
    caller = facts.functions.get(call.function)
    if given_root is None or caller is None:
        return None
    if given_root == "self":
        return _as_an_attribute_of_its_instance(context, facts, call, given, chain)
    made = [a for a in facts.assignments.get(given_root, ()) if a.function == call.function
            and a.stmt.lineno < call.stmt.lineno]
    if not made and depth > 1 and isinstance(given, ast.Name) and given_root in positional_parameters(caller):
        return _passed_to(context, cell, facts, call.function, given_root, chain, depth - 1)
    if not made or any(makes_a_tensor(context, a.value) for a in made):
        return None
    before = _outermost_loop_around(caller, call.stmt) or call.stmt
    if before.lineno <= made[-1].stmt.lineno:
        return None  # made inside the loop: a model per iteration, not one to broadcast once
    code = ".".join([facts.segment(given), *reversed(chain)])
    return cell, facts, before, code


def _as_an_attribute_of_its_instance(context, facts: CellFacts, call: CallSite, given: ast.expr, chain: List[str]):
    """(cell, facts, statement, code, "after") for a helper given ``self.model.trainable_variables``
    in a method of a class whose ``__init__`` builds ``self.model``, made once in the project
    (``runnable = resnet_runnable.ResnetRunnable(...)``, the vendor's guide): broadcast
    ``runnable.model.trainable_variables`` right after it is made; else None."""
    model = _model_name(given) if not chain else dotted_name(given)
    if model is None or not model.startswith("self.") or model.count(".") != 1:
        return None
    attribute = model.split(".", 1)[1]
    owner = _class_building(context, facts, call.function, attribute)
    if owner is None:
        return None
    instances = list(_instances_of(context, owner.name))
    if len(instances) != 1:
        return None
    made_cell, made_facts, made = instances[0]
    tail = ".".join(reversed(chain)) if chain else "trainable_variables"
    return made_cell, made_facts, made.stmt, f"{made.target}.{attribute}.{tail}", "after"


def _instances_of(context, class_name: str):
    """``name = ClassName(...)`` or ``name = module.ClassName(...)``, anywhere in the notebook and its modules."""
    for cell, facts in context.facts.cells_mentioning(class_name):
        for assignments in facts.assignments.values():
            for assignment in assignments:
                value = assignment.value
                if (not assignment.tuple_target and "." not in assignment.target and isinstance(value, ast.Call)
                        and (dotted_name(value.func) or "").rsplit(".", 1)[-1] == class_name):
                    yield cell, facts, assignment


def _outermost_loop_around(function: ast.AST, stmt: ast.stmt) -> Optional[ast.stmt]:
    for node in function.body:
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and node.lineno <= stmt.lineno <= node.end_lineno:
            return node
        if node.lineno <= stmt.lineno <= (node.end_lineno or node.lineno):
            inner = [child for child in ast.walk(node) if isinstance(child, (ast.For, ast.While, ast.AsyncFor))
                     and child.lineno <= stmt.lineno <= child.end_lineno]
            return inner[0] if inner else None
    return None


def _made_from_top_level_names(context, facts: CellFacts, site: CallSite, variables: ast.expr):
    """(cell, facts, statement, code, expression) when ``variables`` is a local of the step function made once from
    names of the notebook's top level only (``trainable_variables = list(weights.values()) +
    list(biases.values())``, TensorFlow-Examples' raw networks): the same expression, broadcast before
    the top-level statement that calls the step; else None."""
    if not isinstance(variables, ast.Name) or site.function is None:
        return None
    made = [a for a in facts.assignments.get(variables.id, ()) if a.function == site.function]
    if len(made) != 1 or made[0].tuple_target:
        return None
    value = made[0].value
    read = {node.id for node in ast.walk(value) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    function = facts.functions.get(site.function)
    if function is None or read & function_locals(function):
        return None
    top_level = {name for name in read if name in context.facts.aliases or
                 any(a.function is None for _u, _u2, a in context.facts.assignments(name))}
    if read - top_level - ALWAYS_BOUND:
        return None
    for c_cell, c_facts, call in context.facts.calls(site.function):
        if call.dotted == site.function and call.function is None:
            return c_cell, c_facts, top_level_statement(c_facts, call.stmt), facts.segment(value), value
    return None


def _model_name_of_code(code: str) -> str:
    try:
        return _model_name(ast.parse(code, mode="eval").body) or code
    except SyntaxError:
        return code


def _local_to_the_function(context, facts: CellFacts, site: CallSite, variables: ast.expr) -> bool:
    """Is the name ``variables`` starts from a parameter or a local of the function the gradient is in,
    with nothing of that name at the notebook's top level (``train_step(x, model)`` given the top-level
    ``model`` is fine)?"""
    root = variables
    while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
        root = root.func if isinstance(root, ast.Call) else root.value
    function = facts.functions.get(site.function) if site.function else None
    if not isinstance(root, ast.Name) or function is None:
        return False
    if any(a.function is None for _unused, _unused, a in context.facts.assignments(root.id)) or root.id in context.facts.aliases:
        return False
    arguments = function.args
    parameters = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                  *filter(None, [arguments.vararg, arguments.kwarg])]}
    if root.id in parameters:
        return True
    return any(a.function == site.function for a in facts.assignments.get(root.id, ()))


def _each_of_the_loop(facts: CellFacts, site: CallSite, variables: ast.expr) -> Optional[str]:
    """``lower.trainable_variables + upper.trainable_variables`` for ``layers.trainable_variables``
    differentiated in ``for layers, optimizer in ((lower, opt1), (upper, opt2)):`` (each part of a
    model trained by its own optimizer): the loop's name means each of them in turn, and the
    broadcast before the training loop must name them all. None for any other variables."""
    root = chain_root_name(variables)
    if root is None or facts.tree is None:
        return None
    code = facts.segment(variables)
    for loop in facts.nodes(ast.For):
        if not (loop.lineno <= site.node.lineno <= loop.end_lineno):
            continue
        position = target_position(loop.target, root)
        if position is None or not isinstance(loop.iter, (ast.Tuple, ast.List)) or not loop.iter.elts:
            continue
        parts = []
        for element in loop.iter.elts:
            if position >= 0:
                if not isinstance(element, (ast.Tuple, ast.List)) or len(element.elts) <= position:
                    return None
                element = element.elts[position]
            if not isinstance(element, (ast.Name, ast.Attribute)):
                return None
            parts.append(facts.segment(element) + code[len(root):])
        return " + ".join(parts)
    return None


def _model_name(variables: ast.expr) -> Optional[str]:
    if isinstance(variables, ast.Attribute) and variables.attr in ("trainable_variables", "trainable_weights"):
        return dotted_name(variables.value)
    return None


def _statement_that_builds(context, model: str):
    """The module-level statement after which ``model``'s variables exist, if one can be seen."""
    found = None
    for cell, facts, assignment in context.facts.assignments(model):
        if assignment.function is None and isinstance(assignment.value, ast.Call):
            if model_is_built_by(context, assignment.value) or _helper_returns_built_model(context, assignment.value):
                found = (cell, facts, top_level_statement(facts, assignment.stmt))
    for cell, facts, site in context.facts.calls("build"):
        if site.dotted == f"{model}.build" and site.function is None:
            found = (cell, facts, top_level_statement(facts, site.stmt))
    return found


def model_is_built_by(context, call: ast.Call) -> bool:
    """Does this constructor call return a model whose variables already exist?"""
    name = context.facts.resolve(dotted_name(call.func))
    if name in K.KERAS_BUILT_MODELS or name.startswith("tensorflow.keras.applications."):
        return True
    if isinstance(call.func, ast.Name) and _subclass_built_in_init(context, call.func.id, call):
        return True
    if name in K.KERAS_SEQUENTIAL and call.args and isinstance(call.args[0], ast.List) and call.args[0].elts:
        return _gives_input_shape(context, call.args[0].elts[0])
    return False


def _subclass_built_in_init(context, class_name: str, call: Optional[ast.Call] = None) -> bool:
    """A notebook's Keras model class whose ``__init__`` makes only built models (``self.encoder =
    tf.keras.Sequential([InputLayer(...), ...])``, as tensorflow.org's VAE), or keeps built models it
    is given (``VAE(encoder, decoder)`` with functional ``encoder`` and ``decoder``, as keras.io's VAE):
    built at construction. Metrics, losses and optimizers it makes hold no trainable variables."""
    for _unused, facts in context.facts.cells_mentioning(class_name):
        cls = facts.classes.get(class_name)
        if cls is None:
            continue
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            return False
        parameters = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]  # without self
        built_parts = 0
        for node in ast.walk(init):
            if not (isinstance(node, ast.Assign) and any(_is_self_attribute(t) for t in node.targets)):
                continue
            if isinstance(node.value, ast.Call) and model_is_built_by(context, node.value):
                built_parts += 1
            elif isinstance(node.value, ast.Name) and node.value.id in parameters and call is not None:
                given = _argument_for(call, parameters, node.value.id)
                if given is not None:
                    if not _names_a_built_model(context, given):
                        return False
                    built_parts += 1
            elif any(
                isinstance(part, ast.Call) and _makes_weights(context.facts.resolve(dotted_name(part.func)))
                for part in ast.walk(node.value)
            ):
                return False  # a layer or model that is built on its first call
        return built_parts > 0
    return False


def _makes_weights(name: str) -> bool:
    """A Keras layer or model (trainable weights once built); not a metric, loss or optimizer."""
    return name.startswith("tensorflow.keras.") and not name.startswith(
        ("tensorflow.keras.metrics.", "tensorflow.keras.losses.", "tensorflow.keras.optimizers."))


def _argument_for(call: ast.Call, parameters: List[str], name: str) -> Optional[ast.expr]:
    keyword = next((k.value for k in call.keywords if k.arg == name), None)
    if keyword is not None:
        return keyword
    position = parameters.index(name)
    return call.args[position] if position < len(call.args) and not isinstance(call.args[position], ast.Starred) else None


def _names_a_built_model(context, given: ast.expr) -> bool:
    if isinstance(given, ast.Call):
        return model_is_built_by(context, given)
    if not isinstance(given, ast.Name):
        return False
    values = [a.value for _unused, _unused, a in context.facts.assignments(given.id) if a.function is None]
    return bool(values) and isinstance(values[-1], ast.Call) and model_is_built_by(context, values[-1])


def _is_self_attribute(target: ast.expr) -> bool:
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"


def _helper_returns_built_model(context, call: ast.Call) -> bool:
    """``model = make_model()`` where ``make_model`` returns a model built at construction."""
    returns = context.facts.returned_values(call)
    if not returns:
        return False
    values = [context.facts.returned_through_bindings(call, value) for value in returns]
    return all(isinstance(value, ast.Call) and model_is_built_by(context, value) for value in values)


def _training_loop(context, cell, facts, site: CallSite):
    """The module-level statement that runs the training: the loop that (through up to a few
    functions, such as ``strategy.run(train_step, ...)`` inside ``distributed_train_step``) calls
    the function holding the gradient."""
    found = _top_level_call(context, cell, facts, site)
    if found is None:
        return None
    c_cell, c_facts, caller = found
    return c_cell, c_facts, top_level_statement(c_facts, caller.stmt)


def _top_level_call(context, cell, facts, site: CallSite, one_step: bool = False):
    """(cell, facts, call) of the call at the notebook's top level that leads to ``site``: ``site``
    itself there, or the call of the function holding it, through up to a few functions. ``one_step``:
    the call that runs one step instead, which is in the loop of a function when one loops over it
    (``train(dataset, epochs)`` calling its ``tf.function`` step each batch), eagerly."""
    if site.function is None:
        return cell, facts, site
    # Each function with the cell defining it: a name used before that cell is something else
    # (a dataset called ``train`` before ``def train(dataset, epochs)``).
    seen, frontier = {site.function}, [(site.function, cell)]
    for _unused in range(4):
        callers = []
        for function, defined_in in frontier:
            for c_cell, c_facts, caller in _uses_of_function(context, function, defined_in):
                if caller.function is None:
                    return c_cell, c_facts, caller
                holder = c_facts.functions.get(caller.function)
                if one_step and holder is not None and not _compiled(holder) \
                        and _outermost_loop_around(holder, caller.stmt) is not None:
                    return c_cell, c_facts, caller
                if caller.function not in seen:
                    seen.add(caller.function)
                    callers.append((caller.function, c_cell))
        frontier = callers
    return None


def _global_where_stepped(context, name: str, update: CallSite, step: CallSite) -> bool:
    """Does ``name`` stand for the notebook's global both in the step's function and in the function
    that loops over it (not a parameter or local of either)?"""
    for function in {update.function, step.function} - {None}:
        defined = context.facts.function(function)
        if defined is None or name in function_locals(defined[2]):
            return False
    return True


def _uses_of_function(context, name: str, defined_in: Optional[int] = None):
    """Calls of ``name``, and calls that pass ``name`` on (``strategy.run(name, args=...)``).
    ``defined_in``: the cell defining the function meant; a later cell defining the same name again
    (TensorFlow-Examples' second ``run_optimization``) takes the calls from there on."""
    module = context.module_at.get(defined_in)
    if module is not None:
        defined_in = None  # imported: every cell and module may call it, in any order
    redefined = min((c for c, f in context.facts.cells_mentioning(name)
                     if defined_in is not None and c > defined_in and name in f.functions), default=None)
    qualified = f"{module.name}.{name}" if module is not None else None
    owner = _class_with_method(context, name)
    for cell, facts in context.facts.cells_mentioning(name):
        if defined_in is not None and (cell < defined_in or (redefined is not None and cell >= redefined)):
            continue
        for site in facts.calls:
            if site.dotted == name or any(isinstance(arg, ast.Name) and arg.id == name for arg in site.node.args):
                yield cell, facts, site
            elif qualified is not None and site.dotted and context.facts.resolve(site.dotted) == qualified:
                yield cell, facts, site  # grad_utils.apply_gradients(...), the module imported by name
            elif owner is not None and isinstance(site.node.func, ast.Attribute) and site.node.func.attr == name \
                    and _an_instance_of(context, site.node.func.value, owner):
                yield cell, facts, site  # self.train_step(...), runnable.train(): a method of the project's class


def _class_with_method(context, name: str) -> Optional[str]:
    """The class of the notebook or its modules that defines method ``name`` (one only), or None."""
    owners = {c.name for _cell, facts in context.facts.cells_mentioning(name) for c in facts.classes.values()
              if any(isinstance(m, ast.FunctionDef) and m.name == name for m in c.body)}
    return owners.pop() if len(owners) == 1 else None


def _an_instance_of(context, node: ast.expr, class_name: str) -> bool:
    """``self``, or a name made by ``ClassName(...)`` (``module.ClassName(...)``) somewhere."""
    if not isinstance(node, ast.Name):
        return False
    return node.id == "self" or any(assignment.target == node.id for _c, _f, assignment in _instances_of(context, class_name))


def _horovod_broadcast(context) -> bool:
    if not context.facts.imports_module("horovod"):
        return False
    for _unused, _unused, site in context.facts.all_calls():
        resolved = context.facts.resolve(site.dotted)
        if resolved.startswith("horovod.") and "roadcast" in resolved:
            return True
    return False
