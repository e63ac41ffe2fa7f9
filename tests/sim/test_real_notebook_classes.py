"""The failure classes the run-time corpus benchmark found on public notebooks (issue 21), each in
its minimal shape, end to end on 2 ranks: unfixed, a check fails (the run catches what is missing);
after ``fix``, every cell runs and the three checks pass.

* TF1 mode for TF2 code: a ``tf.compat.v1`` part beside TF2 Keras (``steps_per_execution``);
* every rank writing the same file (``save_weights``): the simulator names the file and the ranks;
* a model built on its first call, trained in a custom loop: broadcast after the first step;
* TF1 Keras given numpy arrays, two models in one graph (the second asked for the first's input);
* a TF1 session loop left by tf.distribute, reading its dataset through an iterator;
* three rows written in the notebook (a global batch of 1);
* EarlyStopping on each rank's own logs, a folder made on every rank, a model saved and read back in one cell;
* one sample repeated (``from_tensors(...).repeat()``): nothing to shard or aggregate;
* a TF1 graph trained on constants first, then on batches fed through ``feed_dict`` (the probe
  watched only the first loop's feed, so the fed batches were never seen);
* an odd count of time-series windows (a plain shard left one rank a step more, waiting forever);
* an odd count of rows given to fit or fed by a loop (every N-th row left rank 0 a step more, waiting forever);
* GANs (issue 34, TensorFlow-Examples): noise and labels made in the step with the global batch size beside
  a rank's rows (a shape error on the ranks), two models each with its optimizer (both broadcast, each
  checked), and a TF1 session run updating both (the probes' order differs from rank to rank);
* an Estimator fed by ``numpy_input_fn``: its queues were not watched (shard and all-reduce "not observed");
* an Estimator whose input_fn returns its literal columns (no dataset: nothing was watched, nothing sharded);
* a compiled Keras model made an Estimator (``model_to_estimator``: its clone rebuilds a Keras optimizer
  from its config, so the fix compiles the wrapped tf.compat.v1 equivalent, which the clone reuses);
* multi-GPU towers cutting the batch by offsets of the global batch (empty towers on the ranks), the first
  step's update of no variable (the model is built by that step) taken for the start of training;
* scikit-learn's ``train_test_split`` with each process's own seed, or a mask drawn from numpy's random
  state: each rank shards a different split;
* a tour of the tape beside the training (a broadcast of constants failed on rank 1; gradients only looked at
  were aggregated);
* an optimizer written in the notebook (``var.assign_sub(lr * grad)``): no step was seen (all three checks
  "not observed"), and the model, given on through two functions, was not broadcast;
* a linear Estimator on a categorical column: its sparse gradients, all-gathered by the adapter, had a
  different number of rows on each rank ("ranks reached different collectives");
* a model built on its first call, given with its optimizer through two functions: broadcast after the
  first update, in the step (it was left to the user);
* a TF2 canned Estimator with its default optimizer (a string it makes a Keras optimizer of): not aggregated
  after the fix, and the step called present;
* a custom loop drawing each batch from a notebook function picking rows (no fix: "add it by hand");
* a learning rule the notebook writes (two RBMs trained by contrastive divergence on plain tensors): no
  step was seen; each update's term is all-reduced and each window split.
"""

import json

import pytest

from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

ALL_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
DATA = (
    "import numpy as np\n"
    "rng = np.random.RandomState(0)\n"
    "x = rng.rand(256, 4).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True).astype('float32')\n"
)

MIXED_AND_SAVING = [
    "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\n" + DATA,
    # TensorFlow's migration guides: the TF1 way first (a graph of its own), then TF2.
    "with tf.Graph().as_default():\n"
    "    w1 = tf1.get_variable('w1', [4, 1])\n"
    "    print(tf1.trainable_variables())",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss='mse', steps_per_execution=2)\n"
    "model.fit(x, y, epochs=2, batch_size=32, verbose=0)\n"
    "model.save_weights('my_checkpoint')",
]

# A model whose variables are made by its first call (a subclass with no input shape).
LAZY_MODEL = (
    "class Linear(tf.keras.Model):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.dense = tf.keras.layers.Dense(1)\n"
    "    def call(self, inputs):\n"
    "        return self.dense(inputs)\n"
    "model = Linear()\n"
    "optimizer = tf.keras.optimizers.SGD(0.05)"
)

LAZY_CUSTOM_LOOP = [
    "import tensorflow as tf\n" + DATA +
    "dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)",
    LAZY_MODEL + "\n"
    "@tf.function\n"
    "def train_step(features, targets):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.reduce_mean(tf.square(model(features) - targets))\n"
    "    gradients = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(gradients, model.trainable_variables))",
    "for epoch in range(2):\n"
    "    for features, targets in dataset:\n"
    "        train_step(features, targets)",
]

TF1_KERAS_TWO_MODELS = [
    "import tensorflow as tf\n" + DATA,
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(tf.train.GradientDescentOptimizer(0.05), 'mse')\n"
    "model.fit(x, y, epochs=2, batch_size=32, verbose=0)",
    "second = tf.keras.Sequential([tf.keras.layers.Dense(8, input_shape=(4,)), tf.keras.layers.Dense(1)])\n"
    "second.compile(tf.train.AdamOptimizer(0.01), 'mse')\n"
    "second.fit(x, y, epochs=2, batch_size=32, verbose=0)",
]

TF1_SESSION_LEFT_BY_TF_DISTRIBUTE = [
    "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n" + DATA +
    "dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)",
    "w = tf.get_variable('w', [4, 1])\n"
    "features, targets = tf.data.make_one_shot_iterator(dataset).get_next()\n"
    "loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - targets))\n"
    "train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)\n"
    "init = tf.global_variables_initializer()",
    "with tf.Session() as sess:\n"
    "    sess.run(init)\n"
    "    for _ in range(10):\n"
    "        sess.run(train_op)",
]

# TensorFlow's migration guides train on three rows written in the notebook, a global batch of 1:
# sharded as they are, rank 0 ran two steps and rank 1 one, and rank 0 waited in the all-reduce.
THREE_ROWS = [
    "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\n"
    "features = [[1., 1.5], [2., 2.5], [3., 3.5]]\nlabels = [[0.3], [0.5], [0.7]]",
    "def _input_fn():\n"
    "    return tf1.data.Dataset.from_tensor_slices((features, labels)).batch(1)\n"
    "def _model_fn(features, labels, mode):\n"
    "    logits = tf1.layers.Dense(1)(features)\n"
    "    loss = tf1.losses.mean_squared_error(labels=labels, predictions=logits)\n"
    "    train_op = tf1.train.AdagradOptimizer(0.05).minimize(loss, global_step=tf1.train.get_global_step())\n"
    "    return tf1.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)\n"
    "estimator = tf1.estimator.Estimator(model_fn=_model_fn)\n"
    "estimator.train(_input_fn)",
    "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(1)\n"
    "model = tf.keras.models.Sequential([tf.keras.layers.Dense(1)])\n"
    "model.compile(tf.keras.optimizers.Adagrad(learning_rate=0.05), 'mse')\n"
    "model.fit(dataset, verbose=0)",
]

# Udacity's forecasting course: EarlyStopping on each rank's own validation loss (the ranks stopped
# at different epochs, one waited in the all-reduce); TensorFlow's feature-column guide saves a model
# and reads it back in one cell (saved on rank 0 only, rank 1 found no file); Keras' save-and-load
# tutorial makes its folder on every rank (the second raised FileExistsError).
EARLY_STOPPING_AND_READ_BACK = [
    "import tensorflow as tf\n" + DATA +
    "train = tf.data.Dataset.from_tensor_slices((x[:192], y[:192])).batch(32)\n"
    "valid = tf.data.Dataset.from_tensor_slices((x[192:], y[192:])).batch(32)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(tf.keras.optimizers.SGD(0.05), 'mse')\n"
    "early_stopping = tf.keras.callbacks.EarlyStopping(patience=2, min_delta=0.01)\n"
    "model.fit(train, validation_data=valid, epochs=40, callbacks=[early_stopping], verbose=0)",
    "import os\nos.mkdir('models')\n"
    "model.save('models/model.keras')\n"
    "restored = tf.keras.models.load_model('models/model.keras')\n"
    "print(restored.predict(x[:2], verbose=0))",
]

# TensorFlow's distributed-training guide: one sample repeated, nothing to split and every rank's
# gradients the same (the shard check saw equal batches, allreduce could prove nothing).
ONE_SAMPLE_REPEATED = [
    "import tensorflow as tf",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])\n"
    "model.compile(loss='mse', optimizer=tf.keras.optimizers.SGD())\n"
    "dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)\n"
    "model.fit(dataset, epochs=2, verbose=0)",
]
ONE_SAMPLE_CHECKS = {"broadcast": "pass", "allreduce": "not-applicable", "shard": "not-applicable"}

# Udacity's deep-learning course (2_fullyconnected): full-batch gradient descent on tf.constant
# arrays, then a second graph trained on minibatches fed through feed_dict.
TF1_CONSTANTS_THEN_FEED = [
    "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n" + DATA,
    "graph = tf.Graph()\n"
    "with graph.as_default():\n"
    "    features = tf.constant(x[:128])\n"
    "    targets = tf.constant(y[:128])\n"
    "    w = tf.Variable(tf.truncated_normal([4, 1]))\n"
    "    loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - targets))\n"
    "    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)\n"
    "with tf.Session(graph=graph) as session:\n"
    "    tf.global_variables_initializer().run()\n"
    "    for step in range(5):\n"
    "        session.run(train_op)",
    "batch_size = 32\n"
    "graph = tf.Graph()\n"
    "with graph.as_default():\n"
    "    features = tf.placeholder(tf.float32, shape=(batch_size, 4))\n"
    "    targets = tf.placeholder(tf.float32, shape=(batch_size, 1))\n"
    "    w = tf.Variable(tf.truncated_normal([4, 1]))\n"
    "    loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - targets))\n"
    "    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)\n"
    "with tf.Session(graph=graph) as session:\n"
    "    tf.global_variables_initializer().run()\n"
    "    for step in range(10):\n"
    "        offset = (step * batch_size) % (y.shape[0] - batch_size)\n"
    "        feed_dict = {features: x[offset:offset + batch_size], targets: y[offset:offset + batch_size]}\n"
    "        session.run(train_op, feed_dict=feed_dict)",
]

# Udacity's forecasting course: a series cut into windows (33 of them), a global batch split across
# ranks. tf.data cannot count windows made by flat_map, and a plain shard gave rank 0 one window more:
# its last step waited in an all-reduce rank 1 never joined.
ODD_COUNT_OF_WINDOWS = [
    "import numpy as np\nimport tensorflow as tf\n"
    "series = np.sin(np.arange(1000) / 20.0).astype('float32')",
    "def window_dataset(series, window_size, batch_size):\n"
    "    ds = tf.data.Dataset.from_tensor_slices(series)\n"
    "    ds = ds.window(window_size + 1, shift=window_size, drop_remainder=True)\n"
    "    ds = ds.flat_map(lambda window: window.batch(window_size + 1))\n"
    "    ds = ds.map(lambda window: (window[:-1], window[-1:]))\n"
    "    return ds.batch(batch_size).prefetch(1)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(30,))])\n"
    "model.compile(loss='mse', optimizer=tf.keras.optimizers.SGD(0.01))\n"
    "model.fit(window_dataset(series, 30, 4), epochs=2, verbose=0)",
]

# Deep Learning with Python's k-fold chapter: 303 rows given to fit with a batch of 1. Every N-th row gave
# rank 0 152 and rank 1 151: rank 0's last step waited in an all-reduce rank 1 never joined. Here 67 rows
# and a global batch of 2 (1 a rank: 34 steps and 33), and a TF1 loop stepping through 131 rows by a batch
# of 2 (66 turns and 65). Proof mode cuts every rank at the same step: the turns they would take are compared.
ODD_COUNT_OF_ROWS = [
    "import numpy as np\nimport tensorflow as tf\n"
    "rng = np.random.RandomState(0)\n"
    "x = rng.rand(67, 4).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True).astype('float32')",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss='mse')\n"
    "model.fit(x, y, batch_size=2, epochs=2, shuffle=False, verbose=0)",
]
ODD_COUNT_OF_FED_ROWS = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\ntf.disable_eager_execution()\n"
    "rng = np.random.RandomState(0)\n"
    "X = rng.rand(131, 4).astype('float32')\n"
    "Y = X.sum(axis=1, keepdims=True).astype('float32')",
    "x = tf.placeholder(tf.float32, [None, 4])\n"
    "y = tf.placeholder(tf.float32, [None, 1])\n"
    "w = tf.Variable(tf.zeros([4, 1]))\n"
    "loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))\n"
    "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)",
    "batch_size = 2\n"
    "with tf.Session() as sess:\n"
    "    sess.run(tf.global_variables_initializer())\n"
    "    for epoch in range(2):\n"
    "        for i in range(0, len(X), batch_size):\n"
    "            sess.run(train_op, feed_dict={x: X[i:i + batch_size], y: Y[i:i + batch_size]})",
]
# A hyperparameter search on every rank (TensorFlow's keras-tuner tutorial, Deep Learning with Python's
# chapter 13): unfixed, each rank's tuner draws its own hyperparameters and starts each trial from its own weights.
KERAS_TUNER_SEARCH = [
    "import numpy as np\nimport tensorflow as tf\nimport keras_tuner as kt\n"
    "rng = np.random.RandomState(0)\n"
    "x = rng.rand(64, 4).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True).astype('float32')",
    "def build_model(hp):\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 2, 32, step=2), activation='relu'),\n"
    "                                 tf.keras.layers.Dense(1)])\n"
    "    model.compile(optimizer=tf.keras.optimizers.SGD(hp.Choice('lr', [0.01, 0.001])), loss='mse')\n"
    "    return model\n"
    "tuner = kt.RandomSearch(build_model, objective='val_loss', max_trials=3, directory='tuning', overwrite=True)",
    "tuner.search(x, y, batch_size=8, epochs=2, validation_split=0.25, verbose=0)\n"
    "best = tuner.get_best_models(1)[0]",
]

GAN_TF2 = [
    "import numpy as np\nimport tensorflow as tf\n" + DATA +
    "batch_size = 32\n"
    "dataset = tf.data.Dataset.from_tensor_slices(x).shuffle(256).batch(batch_size)",
    "generator = tf.keras.Sequential([tf.keras.layers.Dense(4)])\n"
    "discriminator = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
    "optimizer_gen = tf.keras.optimizers.SGD(0.05)\n"
    "optimizer_disc = tf.keras.optimizers.SGD(0.05)\n"
    "bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)",
    "def discriminator_loss(real, fake):\n"
    "    return bce(tf.ones([batch_size, 1]), real) + bce(tf.zeros([batch_size, 1]), fake)\n"
    "def train_step(real):\n"
    "    noise = np.random.normal(size=[batch_size, 2]).astype(np.float32)\n"
    "    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:\n"
    "        fake = generator(noise)\n"
    "        g_loss = bce(tf.ones([batch_size, 1]), discriminator(fake))\n"
    "        d_loss = discriminator_loss(discriminator(real), discriminator(fake))\n"
    "    g_grads = g_tape.gradient(g_loss, generator.trainable_variables)\n"
    "    d_grads = d_tape.gradient(d_loss, discriminator.trainable_variables)\n"
    "    optimizer_gen.apply_gradients(zip(g_grads, generator.trainable_variables))\n"
    "    optimizer_disc.apply_gradients(zip(d_grads, discriminator.trainable_variables))",
    "for epoch in range(2):\n"
    "    for batch in dataset:\n"
    "        train_step(batch)",
]

GAN_TF1 = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n" + DATA +
    "batch_size = 32",
    "real = tf.placeholder(tf.float32, [None, 4])\n"
    "noise = tf.placeholder(tf.float32, [None, 2])\n"
    "with tf.variable_scope('gen'):\n"
    "    fake = tf.layers.dense(noise, 4)\n"
    "with tf.variable_scope('disc'):\n"
    "    w = tf.get_variable('w', [4, 1])\n"
    "d_real, d_fake = tf.matmul(real, w), tf.matmul(fake, w)\n"
    "d_loss = -tf.reduce_mean(tf.log_sigmoid(d_real) + tf.log_sigmoid(-d_fake))\n"
    "g_loss = -tf.reduce_mean(tf.log_sigmoid(d_fake))\n"
    "train_gen = tf.train.AdamOptimizer(0.01).minimize(g_loss, var_list=tf.trainable_variables('gen'))\n"
    "train_disc = tf.train.AdamOptimizer(0.01).minimize(d_loss, var_list=tf.trainable_variables('disc'))",
    "sess = tf.Session()\n"
    "sess.run(tf.global_variables_initializer())\n"
    "for step in range(16):\n"
    "    i = (step * batch_size) % 256\n"
    "    z = np.random.uniform(-1., 1., size=[batch_size, 2])\n"
    "    sess.run([train_gen, train_disc], feed_dict={real: x[i:i + batch_size], noise: z})",
]

ESTIMATOR_NUMPY_INPUT = [
    "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n" + DATA,
    "def model_fn(features, labels, mode):\n"
    "    predictions = tf.layers.dense(features['x'], 1)\n"
    "    loss = tf.reduce_mean(tf.square(predictions - labels))\n"
    "    optimizer = tf.train.GradientDescentOptimizer(0.05)\n"
    "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
    "    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)\n"
    "model = tf.estimator.Estimator(model_fn)",
    "input_fn = tf.estimator.inputs.numpy_input_fn(x={'x': x}, y=y, batch_size=32, num_epochs=None, shuffle=True)\n"
    "model.train(input_fn, steps=20)",
]

ESTIMATOR_LITERAL_INPUT = [
    "import tensorflow as tf",
    "featcols = [tf.feature_column.numeric_column('area'),\n"
    "            tf.feature_column.categorical_column_with_vocabulary_list('type', ['bungalow', 'apartment'])]",
    "def train_input_fn():\n"
    "    features = {'area': [1000, 2000, 4000, 1000, 2000, 4000],\n"
    "                'type': ['bungalow', 'bungalow', 'house', 'apartment', 'apartment', 'apartment']}\n"
    "    labels = [500, 1000, 1500, 700, 1300, 1900]\n"
    "    return features, labels",
    "model = tf.estimator.LinearRegressor(featcols)",
    "model.train(train_input_fn, steps=20)",
]

# A linear model on a categorical column (gcp's courses): its gradients are sparse, one row per distinct id
# of the batch, and the adapter all-gathers sparse gradients, which needs as many on every rank.
SPARSE_LINEAR_ESTIMATOR = [
    "import tensorflow as tf\n" + DATA + "ids = rng.randint(0, 50, len(x))",
    "columns = [tf.feature_column.numeric_column('x', shape=[4]),\n"
    "           tf.feature_column.categorical_column_with_identity('id', num_buckets=50)]\n"
    "model = tf.compat.v1.estimator.LinearRegressor(feature_columns=columns,\n"
    "                                               optimizer=tf.compat.v1.train.FtrlOptimizer(0.1))",
    "input_fn = tf.compat.v1.estimator.inputs.numpy_input_fn(x={'x': x, 'id': ids}, y=y, batch_size=32,\n"
    "                                                        num_epochs=None, shuffle=True)\n"
    "model.train(input_fn, steps=20)",
]

# Python Machine Learning's chapter 14: TF2 (tf.random.set_seed) training a canned DNNClassifier with its
# default optimizer, a string the Estimator makes a Keras Adagrad of in each training graph (the fix gave it
# no aggregation: allreduce failed), trained in two calls, each a graph of its own.
TF2_CANNED_ESTIMATOR = [
    "import tensorflow as tf\n" + DATA + "labels = (y[:, 0] > 2).astype('int32')\ntf.random.set_seed(1)",
    "def train_input_fn(x, y, batch_size=32):\n"
    "    dataset = tf.data.Dataset.from_tensor_slices(({'x': x}, y))\n"
    "    return dataset.shuffle(256).repeat().batch(batch_size)\n"
    "columns = [tf.feature_column.numeric_column('x', shape=(4,))]\n"
    "classifier = tf.estimator.DNNClassifier(feature_columns=columns, hidden_units=[8], n_classes=2)",
    "classifier.train(input_fn=lambda: train_input_fn(x, labels), steps=10)\n"
    "classifier.train(input_fn=lambda: train_input_fn(x, labels), steps=10)",
]

# Hands-On ML 3's chapter 12: a custom loop drawing each batch from a notebook function that picks rows
# (``random_batch``), unseeded, trained under a tape (the fix said "add it by hand").
LOOP_OVER_HELPER_BATCHES = [
    "import numpy as np\nimport tensorflow as tf\n" + DATA,
    "def random_batch(X, y, batch_size=32):\n"
    "    idx = np.random.randint(len(X), size=batch_size)\n"
    "    return X[idx], y[idx]\n"
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "optimizer = tf.keras.optimizers.SGD(0.05)\nloss_fn = tf.keras.losses.mean_squared_error",
    "for epoch in range(2):\n"
    "    for step in range(8):\n"
    "        X_batch, y_batch = random_batch(x, y)\n"
    "        with tf.GradientTape() as tape:\n"
    "            y_pred = model(X_batch, training=True)\n"
    "            loss = tf.reduce_mean(loss_fn(y_batch, y_pred))\n"
    "        gradients = tape.gradient(loss, model.trainable_variables)\n"
    "        optimizer.apply_gradients(zip(gradients, model.trainable_variables))",
]

# Hvass-Labs' tutorials: a TF1 loop fed batches a method draws at random from the instance's arrays (the
# class in the book's mnist.py, beside the notebook), the feed bound to a name first.
METHOD_PICKS_THE_BATCH = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()",
    "class Digits:\n"
    "    def __init__(self):\n"
    "        rng = np.random.RandomState(0)\n"
    "        self.x_train = rng.rand(4096, 16).astype(np.float32)\n"
    "        self.y_train = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 4096)]\n"
    "    def random_batch(self, batch_size=32):\n"
    "        idx = np.random.randint(low=0, high=len(self.x_train), size=batch_size)\n"
    "        x_batch = self.x_train[idx]\n"
    "        y_batch = self.y_train[idx]\n"
    "        return x_batch, y_batch\n"
    "data = Digits()",
    "x = tf.placeholder(tf.float32, [None, 16])\ny_true = tf.placeholder(tf.float32, [None, 4])\n"
    "weights = tf.Variable(tf.random_normal([16, 4]))\nlogits = tf.matmul(x, weights)\n"
    "cost = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=y_true, logits=logits))\n"
    "optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.5).minimize(cost)\n"
    "session = tf.Session()\nsession.run(tf.global_variables_initializer())",
    "def optimize(num_iterations):\n"
    "    for i in range(num_iterations):\n"
    "        x_batch, y_true_batch = data.random_batch(batch_size=64)\n"
    "        feed_dict_train = {x: x_batch, y_true: y_true_batch}\n"
    "        session.run(optimizer, feed_dict=feed_dict_train)\n"
    "optimize(num_iterations=20)",
]

TOUR_OF_THE_TAPE_THEN_TRAINING = [
    "import tensorflow as tf\n" + DATA +
    "dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)",
    "w1, w2 = tf.Variable(5.), tf.Variable(3.)\n"
    "with tf.GradientTape() as tape:\n"
    "    z = 3 * w1 ** 2 + 2 * w1 * w2\n"
    "gradients = tape.gradient(z, [w1, w2])",
    "gradients",
    "c1, c2 = tf.constant(5.), tf.constant(3.)\n"
    "with tf.GradientTape() as tape:\n"
    "    z = 3 * c1 ** 2 + 2 * c1 * c2\n"
    "gradients = tape.gradient(z, [c1, c2])",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "optimizer = tf.keras.optimizers.SGD(0.05)\n"
    "for features, targets in dataset:\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.reduce_mean(tf.square(model(features) - targets))\n"
    "    gradients = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(gradients, model.trainable_variables))",
]

KERAS_MODEL_AS_ESTIMATOR = [
    "import tensorflow as tf\n" + DATA,
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,), name='dense')])\n"
    "model.compile(loss='mse', optimizer='sgd')",
    "def input_fn():\n"
    "    return tf.data.Dataset.from_tensor_slices(({'dense_input': x}, y)).batch(32).repeat()",
    "estimator = tf.keras.estimator.model_to_estimator(keras_model=model)\n"
    "estimator.train(input_fn=input_fn, steps=20)",
]

MULTI_GPU_TOWERS = [
    "import tensorflow as tf\n" + DATA +
    "batch_size, towers = 32, 2\n"
    "dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)",
    LAZY_MODEL,
    "def run_optimization(x, y):\n"
    "    variables = model.trainable_variables  # empty until the first step builds the model\n"
    "    tower_batch = int(batch_size / towers)\n"
    "    tower_grads = []\n"
    "    for i in range(towers):\n"
    "        with tf.GradientTape() as tape:\n"
    "            loss = tf.reduce_mean(tf.square(model(x[i * tower_batch:(i + 1) * tower_batch]) - y[i * tower_batch:(i + 1) * tower_batch]))\n"
    "        tower_grads.append(tape.gradient(loss, variables))\n"
    "    gradients = [tf.reduce_mean(tf.stack(g), 0) for g in zip(*tower_grads)]\n"
    "    optimizer.apply_gradients(zip(gradients, variables))",
    "for batch_x, batch_y in dataset:\n"
    "    run_optimization(batch_x, batch_y)",
]

SPLIT_PER_RANK = [
    "import tensorflow as tf\nfrom sklearn.model_selection import train_test_split\n" + DATA +
    "x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss='mse')\n"
    "model.fit(x_train, y_train, batch_size=32, epochs=2, verbose=0)",
]

MASK_PER_RANK = [
    "import tensorflow as tf\n" + DATA +
    "msk = np.random.rand(len(x)) < 0.75\n"
    "x_train, y_train = x[msk], y[msk]",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss='mse')\n"
    "model.fit(x_train, y_train, batch_size=32, epochs=2, verbose=0)",
]

# The core API's guides: an optimizer class written in the notebook (no optimizer the probes know),
# the model given on through two functions.
HAND_WRITTEN_OPTIMIZER = [
    "import tensorflow as tf\n" + DATA + "dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)",
    "class Linear(tf.Module):\n"
    "    def __init__(self):\n"
    "        self.w = tf.Variable(tf.random.normal([4, 1]))\n"
    "        self.b = tf.Variable(tf.zeros([1]))\n"
    "    def __call__(self, x):\n"
    "        return tf.matmul(x, self.w) + self.b\n"
    "class SGD:\n"
    "    def __init__(self, learning_rate):\n"
    "        self.learning_rate = learning_rate\n"
    "    def apply_gradients(self, grads, variables):\n"
    "        for grad, var in zip(grads, variables):\n"
    "            var.assign_sub(self.learning_rate * grad)\n"
    "model = Linear()",
    "def train_step(x, y, model, optimizer):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
    "    grads = tape.gradient(loss, model.variables)\n"
    "    optimizer.apply_gradients(grads, model.variables)\n"
    "def train_model(mlp, data, optimizer, epochs):\n"
    "    for epoch in range(epochs):\n"
    "        for x_batch, y_batch in data:\n"
    "            train_step(x_batch, y_batch, mlp, optimizer)",
    "train_model(model, dataset, SGD(0.05), epochs=2)",
]

# packt's autoencoder: a model built on its first call, given with its Keras optimizer through two functions.
LAZY_MODEL_THROUGH_FUNCTIONS = [
    "import tensorflow as tf\n" + DATA + "dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)",
    LAZY_MODEL,
    "def train(model, opt, features, targets):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.reduce_mean(tf.square(model(features) - targets))\n"
    "    gradients = tape.gradient(loss, model.trainable_variables)\n"
    "    opt.apply_gradients(zip(gradients, model.trainable_variables))\n"
    "def train_loop(model, opt, data, epochs):\n"
    "    for epoch in range(epochs):\n"
    "        for features, targets in data:\n"
    "            train(model, opt, features, targets)",
    "train_loop(model, optimizer, dataset, epochs=2)",
]

FULL_BATCH_ARRAYS = [
    "import numpy as np\nimport tensorflow as tf\n"
    "X = np.array([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779, 6.182, 7.59, 2.167, 7.042, 10.791, 5.313, 7.997, 5.654, 9.27])\n"
    "Y = np.array([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366, 2.596, 2.53, 1.221, 2.827, 3.465, 1.65, 2.904, 2.42, 2.94])",
    "W = tf.Variable(np.random.randn(), name='weight')\nb = tf.Variable(np.random.randn(), name='bias')\n"
    "def linear_regression(x):\n    return W * x + b\n"
    "optimizer = tf.optimizers.SGD(0.01)\n"
    "def run_optimization():\n"
    "    with tf.GradientTape() as g:\n"
    "        loss = tf.reduce_mean(tf.square(linear_regression(X) - Y))\n"
    "    gradients = g.gradient(loss, [W, b])\n"
    "    optimizer.apply_gradients(zip(gradients, [W, b]))",
    "for step in range(1, 51):\n    run_optimization()\n"
    "    if step % 10 == 0:\n        print(step, float(tf.reduce_mean(tf.square(linear_regression(X) - Y))))",
]

GRAPH_CONSTANTS = [
    "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n"
    "X = tf.constant(value=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=tf.float32)\nY = 2 * X + 10",
    "with tf.variable_scope('training', reuse=tf.AUTO_REUSE):\n"
    "    w0 = tf.get_variable(name='w0', initializer=tf.random_normal([]))\n"
    "    w1 = tf.get_variable(name='w1', initializer=tf.random_normal([]))\n"
    "loss_mse = tf.reduce_mean((w0 * X + w1 - Y) ** 2)\n"
    "optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.02).minimize(loss=loss_mse)",
    "with tf.Session() as sess:\n    sess.run(tf.global_variables_initializer())\n"
    "    for step in range(100):\n        sess.run(optimizer)\n    print(sess.run([w0, w1]))",
]

# Udacity's TF1 course: a slice of loaded arrays made constants, the predictions fetched beside the
# training op compared with the labels: the labels take the rank's rows too, and the step's input is the
# graph's constants, not the whole arrays the cell reads in Python.
CONSTANTS_OF_LOADED_ARRAYS = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n"
    "rng = np.random.RandomState(0)\ntrain_dataset = rng.rand(400, 8).astype(np.float32)\n"
    "train_labels = np.eye(3, dtype=np.float32)[rng.randint(0, 3, 400)]",
    "train_subset = 200\ngraph = tf.Graph()\nwith graph.as_default():\n"
    "    tf_train_dataset = tf.constant(train_dataset[:train_subset, :])\n"
    "    tf_train_labels = tf.constant(train_labels[:train_subset])\n"
    "    weights = tf.Variable(tf.truncated_normal([8, 3]))\n    biases = tf.Variable(tf.zeros([3]))\n"
    "    logits = tf.matmul(tf_train_dataset, weights) + biases\n"
    "    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf_train_labels, logits=logits))\n"
    "    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n"
    "    train_prediction = tf.nn.softmax(logits)",
    "def accuracy(predictions, labels):\n"
    "    return 100.0 * np.sum(np.argmax(predictions, 1) == np.argmax(labels, 1)) / predictions.shape[0]\n"
    "with tf.Session(graph=graph) as session:\n    tf.global_variables_initializer().run()\n"
    "    for step in range(50):\n        _, l, predictions = session.run([optimizer, loss, train_prediction])\n"
    "        if step % 10 == 0:\n            print(accuracy(predictions, train_labels[:train_subset, :]))",
]

WHOLE_ARRAYS_FED = [
    "import numpy as np\nimport tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n"
    "rng = np.random.RandomState(0)\nx_train = rng.rand(100).astype(np.float32)\n"
    "y_train = (0.1 * x_train + 0.3).astype(np.float32)",
    "x_placeholder = tf.placeholder(shape=[None], dtype=tf.float32)\n"
    "y_placeholder = tf.placeholder(shape=[None], dtype=tf.float32)\n"
    "m = tf.Variable(tf.random_normal([1]))\nb = tf.Variable(tf.random_normal([1]))\n"
    "loss = tf.reduce_mean(tf.square(m * x_placeholder + b - y_placeholder))\n"
    "train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\nsess = tf.Session()",
    "sess.run(tf.global_variables_initializer())\n"
    "for step in range(50):\n"
    "    sess.run(train, feed_dict={x_placeholder: x_train, y_placeholder: y_train})\nprint(sess.run([m, b]))",
]

# Packt's RBM and DBN: parameters rebound by a rule the notebook writes (contrastive divergence) in a
# loop over windows of the data, two RBMs stacked; no variable, tape or optimizer (nothing was seen: all
# three checks "not observed"). Its tf.zeros start is alike on every rank: nothing to broadcast.
LEARNING_RULE = [
    "import numpy as np\nimport tensorflow as tf\n"
    "rng = np.random.RandomState(0)\ntrain_data = rng.rand(600, 16).astype(np.float32)",
    "class RBM(object):\n"
    "    def __init__(self, input_size, output_size, lr=1.0, batchsize=100):\n"
    "        self.learning_rate = lr\n        self.batchsize = batchsize\n"
    "        self.w = tf.zeros([input_size, output_size], np.float32)\n"
    "        self.hb = tf.zeros([output_size], np.float32)\n        self.vb = tf.zeros([input_size], np.float32)\n"
    "    def prob_h_given_v(self, visible, w, hb):\n        return tf.nn.sigmoid(tf.matmul(visible, w) + hb)\n"
    "    def prob_v_given_h(self, hidden, w, vb):\n        return tf.nn.sigmoid(tf.matmul(hidden, tf.transpose(w)) + vb)\n"
    "    def sample_prob(self, probs):\n        return tf.nn.relu(tf.sign(probs - tf.random.uniform(tf.shape(probs))))\n"
    "    def train(self, X, epochs=10):\n        loss = []\n        for epoch in range(epochs):\n"
    "            for start, end in zip(range(0, len(X), self.batchsize),\n"
    "                                  range(self.batchsize, len(X), self.batchsize)):\n"
    "                batch = X[start:end]\n"
    "                h0 = self.sample_prob(self.prob_h_given_v(batch, self.w, self.hb))\n"
    "                v1 = self.sample_prob(self.prob_v_given_h(h0, self.w, self.vb))\n"
    "                h1 = self.prob_h_given_v(v1, self.w, self.hb)\n"
    "                positive_grad = tf.matmul(tf.transpose(batch), h0)\n"
    "                negative_grad = tf.matmul(tf.transpose(v1), h1)\n"
    "                self.w = self.w + self.learning_rate * (positive_grad - negative_grad) / "
    "tf.dtypes.cast(tf.shape(batch)[0], tf.float32)\n"
    "                self.vb = self.vb + self.learning_rate * tf.reduce_mean(batch - v1, 0)\n"
    "                self.hb = self.hb + self.learning_rate * tf.reduce_mean(h0 - h1, 0)\n"
    "            err = tf.reduce_mean(tf.square(batch - v1))\n            loss.append(err)\n        return loss",
    "rbm_list = [RBM(16, 8), RBM(8, 4)]\ninpX = train_data\nfor rbm in rbm_list:\n"
    "    rbm.train(tf.cast(inpX, tf.float32), 3)\n    inpX = tf.nn.sigmoid(tf.matmul(inpX, rbm.w) + rbm.hb)",
]
LEARNING_RULE_CHECKS = {"broadcast": "not-applicable", "allreduce": "pass", "shard": "pass"}

CASES = {
    "a learning rule: two rbms trained by contrastive divergence (issue 34, packt)": (LEARNING_RULE, "tf2"),
    "full-batch descent on arrays written in a cell, read by the step (issue 34, tensorflow-examples)":
        (FULL_BATCH_ARRAYS, "tf2"),
    "a tf1 graph on a constant, no feed (issue 34, gcp courses)": (GRAPH_CONSTANTS, "tf1"),
    "whole arrays fed every step of a tf1 loop (issue 34, tensorflow workshops)": (WHOLE_ARRAYS_FED, "tf1"),
    "constants of loaded arrays, predictions compared with the labels (issue 34, udacity)":
        (CONSTANTS_OF_LOADED_ARRAYS, "tf1"),
    "a model built on its first call, given through two functions (issue 34, packt)":
        (LAZY_MODEL_THROUGH_FUNCTIONS, "tf2"),
    "a linear estimator on a categorical column: sparse gradients (issue 34, gcp courses)":
        (SPARSE_LINEAR_ESTIMATOR, "tf1"),
    "an optimizer written by hand, the model given through two functions (issue 34, core api guides)":
        (HAND_WRITTEN_OPTIMIZER, "tf2"),
    "a split drawn from numpy's random state on each rank (issue 34)": (MASK_PER_RANK, "tf2"),
    "train_test_split with each rank's own seed (issue 34)": (SPLIT_PER_RANK, "tf2"),
    "multi-gpu towers, a model the first step builds (issue 34)": (MULTI_GPU_TOWERS, "tf2"),
    "a compiled keras model made an estimator (issue 34, tensorflow docs and packt)": (KERAS_MODEL_AS_ESTIMATOR, "tf1"),
    "an estimator whose input_fn returns literal columns (issue 34, packt)": (ESTIMATOR_LITERAL_INPUT, "tf1"),
    "a tour of the tape on scalar variables and constants, then training (issue 34, handson-ml3)":
        (TOUR_OF_THE_TAPE_THEN_TRAINING, "tf2"),
    "an estimator fed arrays by numpy_input_fn (queues, not a dataset)": (ESTIMATOR_NUMPY_INPUT, "tf1"),
    "a tf2 canned estimator with its default optimizer, trained twice (issue 34, pyml3)": (TF2_CANNED_ESTIMATOR, "tf2"),
    "a custom loop drawing batches from a notebook function (issue 34, handson-ml3)": (LOOP_OVER_HELPER_BATCHES, "tf2"),
    "a tf1 loop fed batches a method of a class draws (issue 34, hvass)": (METHOD_PICKS_THE_BATCH, "tf1"),
    "a gan: noise and labels of the global batch, two models built on their first call": (GAN_TF2, "tf2"),
    "a tf1 gan: one session run updates two models": (GAN_TF1, "tf1"),
    "tf2 code with a compat.v1 part, saving on every rank": (MIXED_AND_SAVING, "tf2"),
    "a model built on its first call in a custom loop": (LAZY_CUSTOM_LOOP, "tf2"),
    "tf1 keras with numpy arrays, two models": (TF1_KERAS_TWO_MODELS, "tf1"),
    "a tf1 session loop reading an iterator": (TF1_SESSION_LEFT_BY_TF_DISTRIBUTE, "tf1"),
    "three rows written in the notebook, an estimator and keras": (THREE_ROWS, "tf2"),
    "early stopping on each rank's logs, a model saved and read back": (EARLY_STOPPING_AND_READ_BACK, "tf2"),
    "one sample repeated": (ONE_SAMPLE_REPEATED, "tf2"),
    "a tf1 graph on constants, then batches fed": (TF1_CONSTANTS_THEN_FEED, "tf1"),
    "an odd count of windows": (ODD_COUNT_OF_WINDOWS, "tf2"),
    "an odd count of rows given to fit, a rank's rows a multiple of its batch (issue 34, dlwp k-fold)":
        (ODD_COUNT_OF_ROWS, "tf2"),
    "an odd count of rows fed by a tf1 loop, a rank's rows a multiple of its batch (issue 34)":
        (ODD_COUNT_OF_FED_ROWS, "tf1"),
    "a keras-tuner search on every rank (issue 34, tensorflow-docs and dlwp)": (KERAS_TUNER_SEARCH, "tf2"),
}
EXPECTED_AFTER_FIX = {"one sample repeated": ONE_SAMPLE_CHECKS,
                      "a learning rule: two rbms trained by contrastive divergence (issue 34, packt)": LEARNING_RULE_CHECKS}


@pytest.mark.parametrize("name", list(CASES))
def test_caught_unfixed_and_proven_after_fix(tmp_path, name):
    cells, mode = CASES[name]
    notebook = write_notebook(tmp_path / "single_card.ipynb", cells)
    # Bounded: unfixed, ranks that start apart may stop early at different epochs and wait forever.
    code, out, err = cli("run", str(notebook), "-n", "2", "--format", "json", "--no-one-card", "--timeout", "150")
    unfixed = json.loads(out)
    assert unfixed["tf1"] is (mode == "tf1"), err[-2000:]
    stopped = [cell for cell in unfixed["cells"] if cell["status"] != "ok"]
    assert code == 1 and ("fail" in unfixed["checks"].values() or stopped), (unfixed["checks"], err[-3000:])
    if name.endswith("saving on every rank"):
        assert [(c["path"].rsplit("/", 1)[-1], c["ranks"]) for c in unfixed["file_clashes"]] == \
            [("my_checkpoint", [0, 1])]

    fixed = tmp_path / "fixed.ipynb"
    # Batch sizes checked against the 2 ranks it runs on (a demo's batch of 4 cannot be split across 8).
    assert cli("fix", str(notebook), "-o", str(fixed), "--ranks", "2")[0] == 0
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json", "--no-one-card")
    result = json.loads(out)
    assert code == 0 and result["checks"] == EXPECTED_AFTER_FIX.get(name, ALL_PASS), (result["check_details"], err[-3000:])
    assert all(cell["status"] == "ok" for cell in result["cells"]) and result["file_clashes"] == []


def test_a_second_model_left_unbroadcast_is_caught(tmp_path):
    """Each model a custom loop trains is checked, not only the first: the generator's broadcast
    taken out of the fixed GAN fails the check, naming its variables."""
    notebook = write_notebook(tmp_path / "single_card.ipynb", GAN_TF2)
    fixed = tmp_path / "fixed.ipynb"
    assert cli("fix", str(notebook), "-o", str(fixed))[0] == 0
    document = json.loads(fixed.read_text())
    sources = ["".join(cell["source"]) for cell in document["cells"]]
    loop = next(i for i, source in enumerate(sources) if "npu.distribute.broadcast(generator" in source)
    kept = [line for line in sources[loop].splitlines(keepends=True)
            if "optimizer_gen.iterations == 1" not in line and "broadcast(generator" not in line]
    document["cells"][loop]["source"] = kept
    fixed.write_text(json.dumps(document))
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json", "--no-one-card")
    result = json.loads(out)
    assert result["checks"]["broadcast"] == "fail", (result["check_details"], err[-3000:])
