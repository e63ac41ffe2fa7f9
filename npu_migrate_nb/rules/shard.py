"""Dataset sharding (数据集分片): each rank reads its own slice, with the global batch split across ranks."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, List, Optional, Set, Tuple

from .. import knowledge as K
from ..facts import CallSite, CellFacts, chain_root_name, dotted_name, once_per_object, receiver_name
from ..findings import NEEDS_NPU_DEVICE, NEEDS_OS, Edit, Finding
from ..i18n import N_, _, ngettext
from ..learning_rules import EXAMPLE_RBM, EXAMPLE_RBM_PARTS, LEARNING_RULE, rule_updates
from ..names import function_locals, own_nodes
from ..ranks import rank_free_shards
from .batch_not_divisible import global_batch_value
from .base import (
    Example,
    Rule,
    add_argument,
    insert_after,
    insert_before,
    int_literal,
    keras_prefix,
    standalone_code,
    replace,
    replace_with,
    single_target,
    top_level_statement,
)
from .tf_distribute import dataset_functions_owned
from .per_example_sizes import graph_cells, loops_over, per_rank_sizes
from .tfds_containers import (
    TrainingSplit, files_shuffled_alike, first_batch, holders, returns_a_container, training_splits, whole_for_adapt,
)
from .full_batch import full_batch_arrays, whole_reads_beside_rank_outputs
from .training_reach import binding_trains_nothing, feeds_no_training

RANK_BATCH = "rank_batch_size"
RANK_BATCHES = "RankBatches"


def rank_batches_class(keras: str) -> str:
    """A Sequence over an ImageDataGenerator iterator of per-rank batches: this rank's part of every
    global batch. The iterator's own shuffle draws from the global numpy state (a different order per
    rank, and so overlapping parts); the class gives it one order per epoch, the same on every rank.
    Every rank gets as many batches (a Keras step count must match across ranks)."""
    return (
        f"class {RANK_BATCHES}({keras}.utils.Sequence):\n"
        "    \"\"\"This rank's part of every global batch: batch i * RANK_SIZE + RANK_ID of per-rank batches.\"\"\"\n"
        "\n"
        "    def __init__(self, batches):\n"
        "        super().__init__()\n"
        "        self.batches, self.epoch = batches, 0\n"
        f"        rank_size = {K.RANK_SIZE_EXPR}\n"
        f"        self.mine = list(range(len(batches) // rank_size * rank_size))[{K.RANK_ID_EXPR}::rank_size]\n"
        "        self.on_epoch_end()\n"
        "\n"
        "    def __len__(self):\n"
        "        return len(self.mine)\n"
        "\n"
        "    def __getitem__(self, index):\n"
        "        return self.batches[self.mine[index]]\n"
        "\n"
        "    def on_epoch_end(self):\n"
        "        if self.batches.shuffle:  # one sample order on every rank: their parts are disjoint\n"
        "            import numpy\n"
        f"            order = numpy.random.RandomState({K.SHARED_SEED} + self.epoch)\n"
        "            self.batches.index_array = order.permutation(self.batches.n)\n"
        "        self.epoch += 1"
    )



# A TF1 loop feeding the batches a helper picks (rule examples).
_HELPER_BATCHES = (
    "import numpy as np\nimport tensorflow as tf\n"
    "def random_batch(X_train, y_train, batch_size):\n"
    "    rnd_indices = np.random.randint(0, len(X_train), batch_size)\n"
    "    X_batch = X_train[rnd_indices]\n"
    "    y_batch = y_train[rnd_indices]\n"
    "    return X_batch, y_batch\n"
    "X = tf.placeholder(tf.float32, shape=(None, 3))\ny = tf.placeholder(tf.float32, shape=(None, 1))\n"
    "loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 1) - y))\n"
    "training_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)\n"
    "batch_size = {size}\n"
    "with tf.Session() as sess:\n"
    "    sess.run(tf.global_variables_initializer())\n"
    "    for epoch in range(10):\n"
    "        for batch_index in range(100):\n"
    "            X_batch, y_batch = {call}\n"
    "            sess.run(training_op, feed_dict={{X: X_batch, y: y_batch}})\n"
)


# TensorFlow-Examples' TF1 DCGAN (rule examples): labels sized with the global batch in the graph.
_TF1_DCGAN = Example(
    'import numpy as np\n'
    'import tensorflow as tf\n'
    'from tensorflow.examples.tutorials.mnist import input_data\n'
    "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True)\n"
    'batch_size = 128\n'
    '# %%\n'
    'disc_real = discriminator(real_image_input)\n'
    'disc_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(\n'
    '    logits=disc_real, labels=tf.ones([batch_size], dtype=tf.int32)))\n'
    'train_disc = tf.train.AdamOptimizer(0.002).minimize(disc_loss)\n'
    '# %%\n'
    'with tf.Session() as sess:\n'
    '    sess.run(tf.global_variables_initializer())\n'
    '    for step in range(1, 501):\n'
    '        batch_x, _ = mnist.train.next_batch(batch_size)\n'
    '        sess.run(train_disc, feed_dict={real_image_input: batch_x})\n'
    '    z = np.random.uniform(-1., 1., size=[batch_size, 100])\n',
    'import numpy as np\n'
    'import tensorflow as tf\n'
    'import os\n'
    'from tensorflow.examples.tutorials.mnist import input_data\n'
    "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True, seed=1234)\n"
    'batch_size = 128\n'
    '# %%\n'
    'disc_real = discriminator(real_image_input)\n'
    'disc_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(\n'
    "    logits=disc_real, labels=tf.ones([batch_size // int(os.getenv('RANK_SIZE', '1'))], dtype=tf.int32)))\n"
    'train_disc = tf.train.AdamOptimizer(0.002).minimize(disc_loss)\n'
    '# %%\n'
    'with tf.Session() as sess:\n'
    '    sess.run(tf.global_variables_initializer())\n'
    '    for step in range(1, 501):\n'
    "        batch_x, _ = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] for part in mnist.train.next_batch(batch_size)]\n"
    '        sess.run(train_disc, feed_dict={real_image_input: batch_x})\n'
    '    z = np.random.uniform(-1., 1., size=[batch_size, 100])\n',
)
# A helper beside that graph, sizing with a batch_size parameter of its own.
_OWN_BATCH_HELPER = "def first_rows(images, batch_size):\n    return images[:batch_size]\n"


class MissingShard(Rule):
    """Without a shard every rank reads the whole dataset, in the same order: the N cards compute the
    same gradients N times, so training is no faster than on one card, and with the global batch not
    split each card processes the whole global batch every step. The adapter's
    ``shard_and_rebatch_dataset`` (TF2), or ``dataset.shard(RANK_SIZE, RANK_ID)`` (TF1), gives each rank
    its own slice, right after the source and before shuffle and batch; the global batch is split across
    ranks so that one step on N cards processes the single-card batch."""

    code = "missing-shard"
    step = "shard"
    severity = "error"

    VALID = [
        # tensorflow.org's tf.function guide: its datasets only show the API (next() on an iterator, a
        # graph's size); its training steps read tensors it makes. Nothing to shard is recognized
        # (shard: unknown, with the reason), and no dataset is cut.
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "@tf.function\ndef good_consume_next(iterator):\n    tf.print('Value:', next(iterator))\n"
        "ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\niterator = iter(ds)\ngood_consume_next(iterator)\n"
        "def measure_graph_size(f, *args):\n    print(len(f.get_concrete_function(*args).graph.as_graph_def().node))\n"
        "@tf.function\ndef train(dataset):\n    loss = tf.constant(0)\n    for x, y in dataset:\n        loss += tf.abs(y - x)\n"
        "    return loss\n"
        "measure_graph_size(train, tf.data.Dataset.from_generator(lambda: [(1, 1)] * 3, (tf.int32, tf.int32)))\n"
        "w = tf.Variable(2.)\nx = tf.constant([-1.])\n"
        "with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(tf.square(w * x))\n"
        "grads = npu.distribute.all_reduce(tape.gradient(loss, [w]), reduction='mean')\n",
        # One element repeated (tensorflow.org's distributed training guide): nothing to shard.
        "import tensorflow as tf\n"
        "dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)\n"
        "model.compile(loss='mse', optimizer='sgd')\nmodel.fit(dataset, epochs=2)\n",
        "import tensorflow as tf\nimport os\n"
        "ds = tf.data.Dataset.from_tensor_slices(x).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
        "estimator = tf.estimator.Estimator(model_fn=f)\n",
        "import tensorflow as tf\nimport npu_device as npu\n"
        "ds = tf.data.Dataset.from_tensor_slices(x)\n"
        "ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n"
        "ds = ds.batch(rank_batch_size)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        # A pipeline only predicted on (a forecast): every rank predicts on the whole series.
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "def model_forecast(model, series, window_size):\n"
        "    ds = tf.data.Dataset.from_tensor_slices(series)\n"
        "    ds = ds.window(window_size, shift=1, drop_remainder=True)\n"
        "    ds = ds.flat_map(lambda w: w.batch(window_size))\n"
        "    ds = ds.batch(32).prefetch(1)\n"
        "    return model.predict(ds)\n"
        "train = tf.data.Dataset.from_tensor_slices((x, y))\n"
        "train, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train, 32)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train.batch(rank_batch_size))\n"
        "forecast = model_forecast(model, series, 30)\n",
    ]

    INVALID = [
        # A learning rule's windows (an RBM's): each rank takes its rows of each, the loop stays.
        Example(
            EXAMPLE_RBM.format(**EXAMPLE_RBM_PARTS),
            EXAMPLE_RBM.format(**{**EXAMPLE_RBM_PARTS,
                                  "window": "X[start:end][int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]"}
                               ).replace("import tensorflow as tf\n", "import tensorflow as tf\nimport os\n", 1),
        ),
        # Random minibatches fed to a TF1 loop: the arrays keep their length (the random offsets stay
        # valid) and each rank takes every RANK_SIZE-th row of each window, its part of the global batch.
        Example(
            "import numpy as np\nimport tensorflow.compat.v1 as tf\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\nrng = np.random.RandomState(0)\n"
            "with tf.Session() as sess:\n    for step in range(100):\n        i = rng.randint(0, 60000 - 100)\n"
            "        sess.run(train_op, feed_dict={x: X[i:i + 100], y: Y[i:i + 100]})\n",
            "import numpy as np\nimport tensorflow.compat.v1 as tf\nimport os\n"
            "train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)\nrng = np.random.RandomState(0)\n"
            "with tf.Session() as sess:\n    for step in range(100):\n        i = rng.randint(0, 60000 - 100)\n"
            "        sess.run(train_op, feed_dict={x: X[i:i + 100][int(os.getenv('RANK_ID', '0'))::int(os.getenv("
            "'RANK_SIZE', '1'))], y: Y[i:i + 100][int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]})\n",
        ),
        # A global batch of 1 given to fit cannot be split: the arrays are sharded, the batch is kept (never
        # ``1 // rank_size``, 0 on two ranks, which Keras silently takes for 32). Every rank keeps as many rows:
        # 303 rows as 152 and 151 gave rank 0 a last step waiting in an all-reduce rank 1 never joined.
        Example(
            "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(x, y, batch_size=1, epochs=2)\n",
            "import tensorflow as tf\nimport os\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // "
            "rank_size], batch_size=1, epochs=2)\n",
        ),
        # A Kaggle blend (t81-558's ensembles): scikit-learn's LogisticRegression made and fit inside a
        # function trains no Keras model (its fit takes no callbacks): only the Keras model's fit is sharded.
        Example(
            "import tensorflow as tf\nfrom sklearn.linear_model import LogisticRegression\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(x, y, batch_size=32)\n"
            "def blend(features, labels):\n    stacker = LogisticRegression(solver='lbfgs')\n"
            "    stacker.fit(features, labels)\n    return stacker\n",
            "import tensorflow as tf\nimport os\nfrom sklearn.linear_model import LogisticRegression\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "batch_size=32 // rank_size)\n"
            "def blend(features, labels):\n    stacker = LogisticRegression(solver='lbfgs')\n"
            "    stacker.fit(features, labels)\n    return stacker\n",
        ),
        # scikit-learn models fit in a loop after the network, under the network's name: only the
        # network's fit is sharded (the loop's fit was taken for the network's and given its shard).
        Example(
            "import tensorflow as tf\nfrom sklearn.neighbors import KNeighborsClassifier\n"
            "from sklearn.ensemble import RandomForestClassifier\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(x, y, batch_size=32)\n"
            "for model in [KNeighborsClassifier(n_neighbors=3), RandomForestClassifier()]:\n    model.fit(x, y)\n",
            "import tensorflow as tf\nimport os\nfrom sklearn.neighbors import KNeighborsClassifier\n"
            "from sklearn.ensemble import RandomForestClassifier\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "batch_size=32 // rank_size)\n"
            "for model in [KNeighborsClassifier(n_neighbors=3), RandomForestClassifier()]:\n    model.fit(x, y)\n",
        ),
        # Two fits in the branches of an if: each branch gets its rank line (one written in the first
        # branch only left the other reading rank_id unbound, a NameError the fix wrote).
        Example(
            "import tensorflow as tf\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "if quick:\n    model.fit(x, y, epochs=1, batch_size=64)\nelse:\n    model.fit(x, y, epochs=30, batch_size=64)\n",
            "import tensorflow as tf\nimport os\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "if quick:\n"
            "    rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "    model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "epochs=1, batch_size=64 // rank_size)\n"
            "else:\n"
            "    rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "    model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "epochs=30, batch_size=64 // rank_size)\n",
        ),
        # ... and two fits one after the other share one.
        Example(
            "import tensorflow as tf\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(x, y, epochs=1, batch_size=64)\nmodel.fit(x, y, epochs=30, batch_size=64)\n",
            "import tensorflow as tf\nimport os\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "epochs=1, batch_size=64 // rank_size)\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], "
            "epochs=30, batch_size=64 // rank_size)\n",
        ),
        # fit given arrays without labels (an autoencoder's inputs): the arrays are sharded too.
        Example(
            "import numpy as np\nimport tensorflow as tf\nimages = np.expand_dims(np.load('digits.npy'), -1).astype('float32') / 255\n"
            "model.compile(optimizer='adam')\nmodel.fit(images, epochs=30, batch_size=128)\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\n"
            "images = np.expand_dims(np.load('digits.npy'), -1).astype('float32') / 255\n"
            "model.compile(optimizer='adam')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(images[rank_id::rank_size][:len(images) // rank_size], epochs=30, "
            "batch_size=128 // rank_size)\n",
        ),
        # Three rows written in the notebook (TensorFlow's migration guides): cut to a multiple of the
        # ranks first, or rank 0 runs two steps and rank 1 one, and rank 0 waits in the all-reduce.
        Example(
            "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\n"
            "features = [[1., 1.5], [2., 2.5], [3., 3.5]]\nlabels = [[0.3], [0.5], [0.7]]\n"
            "def _input_fn():\n    return tf1.data.Dataset.from_tensor_slices((features, labels)).batch(1)\n"
            "estimator = tf1.estimator.Estimator(model_fn=_model_fn)\nestimator.train(_input_fn)\n",
            "import tensorflow as tf\nimport os\nimport tensorflow.compat.v1 as tf1\n"
            "features = [[1., 1.5], [2., 2.5], [3., 3.5]]\nlabels = [[0.3], [0.5], [0.7]]\n"
            "def _input_fn():\n    return tf1.data.Dataset.from_tensor_slices((features, labels)).take(len(features) // "
            "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1'))).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).batch(1)\n"
            "estimator = tf1.estimator.Estimator(model_fn=_model_fn)\nestimator.train(_input_fn)\n",
        ),
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "features = [[1.], [2.], [3.], [4.], [5.]]\nlabels = [[0.], [1.], [0.], [1.], [0.]]\n"
            "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(2)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(dataset)\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "features = [[1.], [2.], [3.], [4.], [5.]]\nlabels = [[0.], [1.], [0.], [1.], [0.]]\n"
            "dataset = tf.data.Dataset.from_tensor_slices((features, labels))\n"
            "dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset.take(len(features) // "
            "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1'))), 2)\n"
            "dataset = dataset.batch(rank_batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(dataset)\n",
        ),
        # The rows of a table (a column popped for the labels): the labels' length counts the rows, and the
        # cut comes before the shard (a 193-row table would give ranks 97 and 96 rows, 7 and 6 steps of 16).
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            'def df_to_dataset(dataframe, batch_size=32):\n    dataframe = dataframe.copy()\n'
            "    labels = dataframe.pop('target')\n"
            '    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels))\n'
            '    ds = ds.shuffle(buffer_size=len(dataframe))\n    return ds.batch(batch_size)\n'
            "model.compile(optimizer='adam', loss='mse')\n"
            'model.fit(df_to_dataset(train, batch_size=16), epochs=5)\n',
            'import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n'
            'def df_to_dataset(dataframe, batch_size=32):\n    dataframe = dataframe.copy()\n'
            "    labels = dataframe.pop('target')\n"
            '    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels))\n'
            '    ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds.take(len(labels) // '
            "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1'))), batch_size)\n"
            '    ds = ds.shuffle(buffer_size=len(dataframe))\n    return ds.batch(rank_batch_size)\n'
            "model.compile(optimizer='adam', loss='mse')\n"
            'model.fit(df_to_dataset(train, batch_size=16), epochs=5)\n',
        ),
        # Labels given as a dict (one per output): its len counts outputs, not rows, so no cut is written.
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            "labels = {'price': prices, 'class': classes}\n"
            'dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)\n'
            "model.compile(optimizer='adam', loss='mse')\n" 'model.fit(dataset, epochs=5)\n',
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            "labels = {'price': prices, 'class': classes}\n"
            'dataset = tf.data.Dataset.from_tensor_slices((features, labels))\n'
            'dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, 32)\n'
            'dataset = dataset.batch(rank_batch_size)\n' "model.compile(optimizer='adam', loss='mse')\n"
            'model.fit(dataset, epochs=5)\n',
        ),
        # Rows unpacked from load_data, the dataset shuffled before its batch size is bound: the cut goes on
        # the rows, before the shuffle, not where the rebatch is written.
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            '(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            'dataset = dataset.shuffle(1024, seed=1)\nBATCH_SIZE = 64\n'
            'dataset = dataset.batch(BATCH_SIZE)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(dataset, epochs=5)\n',
            'import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n'
            '(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).take(len(y_train) // '
            "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1')))\n"
            'dataset = dataset.shuffle(1024, seed=1)\nBATCH_SIZE = 64\n'
            'dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, BATCH_SIZE)\n'
            'dataset = dataset.batch(rank_batch_size)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(dataset, epochs=5)\n',
        ),
        # A dataset repeated without end: the training call counts the steps, the same on every rank; no cut.
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            '(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            'dataset = dataset.shuffle(1024).repeat()\nBATCH_SIZE = 64\n'
            'dataset = dataset.batch(BATCH_SIZE)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(dataset, epochs=5, steps_per_epoch=100)\n',
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            '(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            'dataset = dataset.shuffle(1024).repeat()\nBATCH_SIZE = 64\n'
            'dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, BATCH_SIZE)\n'
            'dataset = dataset.batch(rank_batch_size)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(dataset, epochs=5, steps_per_epoch=100)\n',
        ),
        # A shape test of the pipeline (a course's ``assert images.shape == (BATCH_SIZE, ...)``): once the
        # data is split each rank draws the per-rank batch, so the shape it expects follows.
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            'BATCH_SIZE = 100\n(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'def load_dataset():\n    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            '    return dataset.batch(BATCH_SIZE).repeat()\ndef create_shape_test():\n'
            '    images, labels = next(iter(load_dataset()))\n'
            '    expected_image_shape = (BATCH_SIZE, 28, 28)\n'
            '    assert images.shape == expected_image_shape\n    assert labels.shape[0] == BATCH_SIZE\n'
            'create_shape_test()\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(load_dataset(), epochs=5, steps_per_epoch=100)\n',
            'import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n'
            'BATCH_SIZE = 100\n(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n'
            'def load_dataset():\n    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            '    dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, BATCH_SIZE)\n'
            '    return dataset.batch(rank_batch_size).repeat()\ndef create_shape_test():\n'
            '    images, labels = next(iter(load_dataset()))\n'
            "    expected_image_shape = (BATCH_SIZE // int(os.getenv('RANK_SIZE', '1')), 28, 28)\n"
            '    assert images.shape == expected_image_shape\n'
            "    assert labels.shape[0] == BATCH_SIZE // int(os.getenv('RANK_SIZE', '1'))\n"
            'create_shape_test()\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(load_dataset(), epochs=5, steps_per_epoch=100)\n',
        ),
        # Only what is drawn from the sharded pipeline: the test pipeline, not sharded, keeps the global batch.
        Example(
            'import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n'
            'BATCH_SIZE = 100\n'
            '(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()\n'
            'train = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            'train = train.batch(BATCH_SIZE)\n'
            'test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)\n'
            'images, labels = next(iter(train))\nassert images.shape == (BATCH_SIZE, 28, 28)\n'
            'test_images, _ = next(iter(test))\nassert test_images.shape == (BATCH_SIZE, 28, 28)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train, epochs=5)\n',
            'import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n'
            'BATCH_SIZE = 100\n'
            '(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()\n'
            'train = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n'
            'train, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train.take(len(y_train) // '
            "int(os.getenv('RANK_SIZE', '1')) * int(os.getenv('RANK_SIZE', '1'))), BATCH_SIZE)\n"
            'train = train.batch(rank_batch_size)\n'
            'test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)\n'
            'images, labels = next(iter(train))\nassert images.shape == (rank_batch_size, 28, 28)\n'
            'test_images, _ = next(iter(test))\nassert test_images.shape == (BATCH_SIZE, 28, 28)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train, epochs=5)\n',
        ),
        # An Estimator's prediction input (TensorFlow's feature-column guide predicts on one row): every
        # rank predicts on all of it; a shard would leave rank 1 nothing to predict.
        Example(
            "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\n"
            "def _input_fn():\n    return tf1.data.Dataset.from_tensor_slices((x, y)).batch(1)\n"
            "estimator = tf1.estimator.Estimator(model_fn=_model_fn)\nestimator.train(_input_fn)\n"
            "def _predict_fn():\n    return tf1.data.Dataset.from_tensor_slices(predict_features).batch(1)\n"
            "next(estimator.predict(_predict_fn))\n",
            "import tensorflow as tf\nimport os\nimport tensorflow.compat.v1 as tf1\n"
            "def _input_fn():\n    return tf1.data.Dataset.from_tensor_slices((x, y)).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).batch(1)\n"
            "estimator = tf1.estimator.Estimator(model_fn=_model_fn)\nestimator.train(_input_fn)\n"
            "def _predict_fn():\n    return tf1.data.Dataset.from_tensor_slices(predict_features).batch(1)\n"
            "next(estimator.predict(_predict_fn))\n",
        ),
        # A dataset that only shows an API (printed, next() on its iterator in a tf.function) is left
        # whole; the one fit trains on is sharded.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "@tf.function\ndef show_next(iterator):\n    tf.print(next(iterator))\n"
            "ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\niterator = iter(ds)\nshow_next(iterator)\n"
            "for element in ds.take(2):\n    print(element)\n"
            "train = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "@tf.function\ndef show_next(iterator):\n    tf.print(next(iterator))\n"
            "ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\niterator = iter(ds)\nshow_next(iterator)\n"
            "for element in ds.take(2):\n    print(element)\n"
            "train = tf.data.Dataset.from_tensor_slices((x, y))\n"
            "train, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train, 64)\n"
            "train = train.batch(rank_batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
        ),
        # A dataset given to a notebook function that trains on it is training data.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def train_loop(dataset):\n    for x, y in dataset:\n        step(x, y)\n"
            "def step(x, y):\n    with tf.GradientTape() as tape:\n        loss = loss_fn(model(x), y)\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n"
            "train_loop(tf.data.Dataset.from_tensor_slices((x, y)))\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def train_loop(dataset):\n    for x, y in dataset:\n        step(x, y)\n"
            "def step(x, y):\n    with tf.GradientTape() as tape:\n        loss = loss_fn(model(x), y)\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n"
            "train_loop(tf.data.Dataset.from_tensor_slices((x, y)).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))))\n",
        ),
        # A TF1 Estimator's input_fn made from arrays (TensorFlow's migration guides).
        Example(
            "import numpy as np\nimport tensorflow.compat.v1 as tf1\n"
            "classifier = tf1.estimator.DNNClassifier(feature_columns=columns, hidden_units=[32])\n"
            "train_input_fn = tf1.estimator.inputs.numpy_input_fn(x={'x': x_train}, y=y_train, batch_size=50, "
            "shuffle=True)\n"
            "classifier.train(train_input_fn, max_steps=10)\n",
            "import numpy as np\nimport tensorflow.compat.v1 as tf1\nimport os\n"
            "classifier = tf1.estimator.DNNClassifier(feature_columns=columns, hidden_units=[32])\n"
            "train_input_fn = tf1.estimator.inputs.numpy_input_fn(x={'x': "
            "x_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))][:len(y_train) "
            "// int(os.getenv('RANK_SIZE', '1'))]}, y=y_train[int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(y_train) // int(os.getenv('RANK_SIZE', "
            "'1'))], batch_size=50 // int(os.getenv('RANK_SIZE', '1')), shuffle=True)\n"
            "classifier.train(train_input_fn, max_steps=10)\n",
        ),
        # A global batch of 1 (TensorFlow's migration guides) cannot be split: shard, keep the batch.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(dataset)\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).batch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(dataset)\n",
        ),
        # A time series made into windows: the windows are the samples, so the shard comes after them
        # (before, each rank would get every other time step).
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def window_dataset(series, window_size, batch_size=32):\n"
            "    dataset = tf.data.Dataset.from_tensor_slices(series)\n"
            "    dataset = dataset.window(window_size + 1, shift=1, drop_remainder=True)\n"
            "    dataset = dataset.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    dataset = dataset.shuffle(1000)\n"
            "    dataset = dataset.map(lambda window: (window[:-1], window[-1]))\n"
            "    return dataset.batch(batch_size).prefetch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(window_dataset(series, 30))\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def window_dataset(series, window_size, batch_size=32):\n"
            "    dataset = tf.data.Dataset.from_tensor_slices(series)\n"
            "    dataset = dataset.window(window_size + 1, shift=1, drop_remainder=True)\n"
            "    dataset = dataset.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset.batch("
            "int(os.getenv('RANK_SIZE', '1')), drop_remainder=True).unbatch(), batch_size)\n"
            "    dataset = dataset.shuffle(1000)\n"
            "    dataset = dataset.map(lambda window: (window[:-1], window[-1]))\n"
            "    return dataset.batch(rank_batch_size).prefetch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(window_dataset(series, 30))\n",
        ),
        # ... and a helper's windows printed with a global batch of 1 (Udacity's forecasting course):
        # shard_and_rebatch_dataset cannot split it; RANK_SIZE gives each rank one sample a step.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def window_dataset(series, window_size, batch_size=32):\n"
            "    dataset = tf.data.Dataset.from_tensor_slices(series)\n"
            "    dataset = dataset.window(window_size + 1, shift=1, drop_remainder=True)\n"
            "    dataset = dataset.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    return dataset.batch(batch_size)\n# %%\n"
            "for window in window_dataset(tf.range(10), 3, batch_size=1):\n    print(window.numpy())\n# %%\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(window_dataset(series, 30, 128))\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def window_dataset(series, window_size, batch_size=32):\n"
            "    dataset = tf.data.Dataset.from_tensor_slices(series)\n"
            "    dataset = dataset.window(window_size + 1, shift=1, drop_remainder=True)\n"
            "    dataset = dataset.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(dataset.batch("
            "int(os.getenv('RANK_SIZE', '1')), drop_remainder=True).unbatch(), batch_size)\n"
            "    return dataset.batch(rank_batch_size)\n# %%\n"
            "for window in window_dataset(tf.range(10), 3, batch_size=int(os.getenv('RANK_SIZE', '1'))):\n"
            "    print(window.numpy())\n# %%\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(window_dataset(series, 30, 128))\n",
        ),
        # ... and a helper's dataset shown at a batch of 5, then made again at the training's 32 (TensorFlow's
        # structured-data guides): the shown one gets 5 x RANK_SIZE, five samples on each rank; the trained
        # one is split.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def df_to_dataset(frame, batch_size=32):\n"
            "    ds = tf.data.Dataset.from_tensor_slices(dict(frame))\n"
            "    return ds.batch(batch_size)\n# %%\n"
            "batch_size = 5\ntrain_ds = df_to_dataset(train, batch_size=batch_size)\n"
            "val_ds = df_to_dataset(val, batch_size=batch_size)\n"
            "example_batch = next(iter(train_ds))[0]\nprint(feature_layer(example_batch))\n# %%\n"
            "batch_size = 32\ntrain_ds = df_to_dataset(train, batch_size=batch_size)\n"
            "val_ds = df_to_dataset(val, batch_size=batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds, validation_data=val_ds)\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def df_to_dataset(frame, batch_size=32):\n"
            "    ds = tf.data.Dataset.from_tensor_slices(dict(frame))\n"
            "    ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, batch_size)\n"
            "    return ds.batch(rank_batch_size)\n# %%\n"
            "batch_size = 5\ntrain_ds = df_to_dataset(train, batch_size=batch_size * int(os.getenv('RANK_SIZE', '1')))\n"
            "val_ds = df_to_dataset(val, batch_size=batch_size * int(os.getenv('RANK_SIZE', '1')))\n"
            "example_batch = next(iter(train_ds))[0]\nprint(feature_layer(example_batch))\n# %%\n"
            "batch_size = 32\ntrain_ds = df_to_dataset(train, batch_size=batch_size)\n"
            "val_ds = df_to_dataset(val, batch_size=batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds, validation_data=val_ds)\n",
        ),
        # Full-batch gradient descent on arrays written in a cell (TensorFlow-Examples' linear regression):
        # each rank keeps its rows where they are made.
        Example(
            "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "X = np.array([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779, 6.182, 7.59, 2.167])\n"
            "Y = np.array([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366, 2.596, 2.53, 1.221])\n"
            "W = tf.Variable(0.5)\noptimizer = tf.optimizers.SGD(0.01)\n"
            "def step():\n    with tf.GradientTape() as g:\n        loss = tf.reduce_mean(tf.square(W * X - Y))\n"
            "    gradients = npu.distribute.all_reduce(g.gradient(loss, [W]), reduction='mean')\n"
            "    optimizer.apply_gradients(zip(gradients, [W]))\n"
            "for _ in range(100):\n    step()\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "X = np.array([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779, 6.182, 7.59, 2.167])\n"
            "X = X[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\n"
            "Y = np.array([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366, 2.596, 2.53, 1.221])\n"
            "Y = Y[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\n"
            "W = tf.Variable(0.5)\noptimizer = tf.optimizers.SGD(0.01)\n"
            "def step():\n    with tf.GradientTape() as g:\n        loss = tf.reduce_mean(tf.square(W * X - Y))\n"
            "    gradients = npu.distribute.all_reduce(g.gradient(loss, [W]), reduction='mean')\n"
            "    optimizer.apply_gradients(zip(gradients, [W]))\n"
            "for _ in range(100):\n    step()\n",
        ),
        # ... a TF1 graph on a constant (Google's ML courses): the constant's rows, where it is made; what is
        # computed from it (Y) follows.
        Example(
            "import tensorflow as tf\nfrom npu_bridge.npu_init import *\n"
            "X = tf.constant(value=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=tf.float32)\nY = 2 * X + 10\n"
            "w0 = tf.get_variable(name='w0', initializer=tf.constant(0.0))\n"
            "loss_mse = tf.reduce_mean((w0 * X - Y) ** 2)\n"
            "train = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.02)).minimize(loss=loss_mse)\n"
            "with tf.Session() as sess:\n    sess.run(tf.global_variables_initializer())\n"
            "    for step in range(1000):\n        sess.run(train)\n",
            "import tensorflow as tf\nimport os\nfrom npu_bridge.npu_init import *\n"
            "X = tf.constant(value=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=tf.float32)\n"
            "X = X[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\nY = 2 * X + 10\n"
            "w0 = tf.get_variable(name='w0', initializer=tf.constant(0.0))\n"
            "loss_mse = tf.reduce_mean((w0 * X - Y) ** 2)\n"
            "train = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.02)).minimize(loss=loss_mse)\n"
            "with tf.Session() as sess:\n    sess.run(tf.global_variables_initializer())\n"
            "    for step in range(1000):\n        sess.run(train)\n",
        ),
        # ... a slice of loaded arrays made constants (Udacity's TF1 course): the labels the fetched predictions are
        # compared with take the rank's rows too, or the two no longer line up.
        Example(
            "import numpy as np\nimport tensorflow as tf\nfrom npu_bridge.npu_init import *\n"
            "with graph.as_default():\n    tf_x = tf.constant(x_all[:1000, :])\n    tf_y = tf.constant(y_all[:1000])\n"
            "    w = tf.Variable(tf.zeros([784, 10]))\n    logits = tf.matmul(tf_x, w)\n"
            "    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf_y, logits=logits))\n"
            "    train = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.5)).minimize(loss)\n"
            "    prediction = tf.nn.softmax(logits)\n"
            "with tf.Session(graph=graph) as session:\n    for step in range(801):\n"
            "        _, l, predictions = session.run([train, loss, prediction])\n"
            "        print(accuracy(predictions, y_all[:1000, :]), accuracy(predictions_valid, y_all[:1000]))\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\nfrom npu_bridge.npu_init import *\n"
            "with graph.as_default():\n    tf_x = tf.constant(x_all[:1000, :])\n"
            "    tf_x = tf_x[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\n"
            "    tf_y = tf.constant(y_all[:1000])\n"
            "    tf_y = tf_y[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\n"
            "    w = tf.Variable(tf.zeros([784, 10]))\n    logits = tf.matmul(tf_x, w)\n"
            "    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf_y, logits=logits))\n"
            "    train = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.5)).minimize(loss)\n"
            "    prediction = tf.nn.softmax(logits)\n"
            "with tf.Session(graph=graph) as session:\n    for step in range(801):\n"
            "        _, l, predictions = session.run([train, loss, prediction])\n"
            "        print(accuracy(predictions, y_all[:1000, :][int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]), "
            "accuracy(predictions_valid, y_all[:1000]))\n",
        ),
        # ... and whole arrays fed every step of a TF1 loop (TensorFlow's workshops): the feed takes the rank's rows.
        Example(
            "import numpy as np\nimport tensorflow as tf\nx_train = np.random.rand(100).astype(np.float32)\n"
            "train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n"
            "with tf.Session() as sess:\n    for step in range(200):\n"
            "        sess.run(train, feed_dict={x_placeholder: x_train, learning_rate: 0.5})\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\nx_train = np.random.rand(100).astype(np.float32)\n"
            "train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n"
            "with tf.Session() as sess:\n    for step in range(200):\n"
            "        sess.run(train, feed_dict={x_placeholder: x_train[int(os.getenv('RANK_ID', '0'))::"
            "int(os.getenv('RANK_SIZE', '1'))], learning_rate: 0.5})\n",
        ),
        # Windows taken one after another, a global batch of 1 (Udacity's stateful RNN): 33 windows
        # would shard 17/16, so they are first cut to a multiple of the ranks.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def sequential_window_dataset(series, window_size):\n"
            "    ds = tf.data.Dataset.from_tensor_slices(series)\n"
            "    ds = ds.window(window_size + 1, shift=window_size, drop_remainder=True)\n"
            "    ds = ds.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    ds = ds.map(lambda window: (window[:-1], window[1:]))\n"
            "    return ds.batch(1).prefetch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(sequential_window_dataset(series, 30))\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def sequential_window_dataset(series, window_size):\n"
            "    ds = tf.data.Dataset.from_tensor_slices(series)\n"
            "    ds = ds.window(window_size + 1, shift=window_size, drop_remainder=True)\n"
            "    ds = ds.flat_map(lambda window: window.batch(window_size + 1))\n"
            "    ds = ds.batch(int(os.getenv('RANK_SIZE', '1')), drop_remainder=True).unbatch()"
            ".shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "    ds = ds.map(lambda window: (window[:-1], window[1:]))\n"
            "    return ds.batch(1).prefetch(1)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(sequential_window_dataset(series, 30))\n",
        ),
        # A shard that takes the same part on every rank: its arguments become the rank's.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "train = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, 0).shuffle(100, seed=1).batch(64)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "train = tf.data.Dataset.from_tensor_slices((x, y)).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).shuffle(100, seed=1).batch(64 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
        ),
        # A chain that breaks lines inside its parentheses (tensorflow.org's NMT tutorial): the source
        # moved to a statement of its own keeps parentheses around it.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "train = (\n    tf.data.Dataset\n    .from_tensor_slices((x, y))\n    .shuffle(100, seed=1)\n    .batch(64))\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "train = (tf.data.Dataset\n    .from_tensor_slices((x, y)))\n"
            "train, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train, 64)\n"
            "train = (\n    train\n    .shuffle(100, seed=1)\n    .batch(rank_batch_size))\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train)\n",
        ),
        # TF1 (Estimator): shard right after the source, before shuffle and batch; split the batch.
        Example(
            "import tensorflow as tf\n"
            "def train_input_fn():\n"
            "    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(64)\n"
            "    return ds.repeat()\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n",
            "import tensorflow as tf\n"
            "import os\n"
            "def train_input_fn():\n"
            "    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).shuffle(1000).batch(64 // int(os.getenv('RANK_SIZE', '1')))\n"
            "    return ds.repeat()\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n",
        ),
        # TF2: a method chain is split so that shard_and_rebatch_dataset comes before shuffle and batch.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "BATCH_SIZE = 64\n"
            "train_ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(BATCH_SIZE)\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(train_ds, epochs=1)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "BATCH_SIZE = 64\n"
            "train_ds = tf.data.Dataset.from_tensor_slices((x, y))\n"
            "train_ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_ds, BATCH_SIZE)\n"
            "train_ds = train_ds.shuffle(1000).batch(rank_batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(train_ds, epochs=1)\n",
        ),
        # TF2: the batch is applied in a later statement; the pipeline is returned from a helper.
        Example(
            "import tensorflow as tf\n"
            "def make_dataset():\n"
            "    ds = tf.data.Dataset.from_tensor_slices((x, y))\n"
            "    ds = ds.map(parse)\n"
            "    return ds.batch(32)\n"
            "# %%\n"
            "for images, labels in make_dataset():\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(model(images))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "def make_dataset():\n"
            "    ds = tf.data.Dataset.from_tensor_slices((x, y))\n"
            "    ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, 32)\n"
            "    ds = ds.map(parse)\n"
            "    return ds.batch(rank_batch_size)\n"
            "# %%\n"
            "for images, labels in make_dataset():\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(model(images))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n",
        ),
        # A Keras utility that batches and shuffles by itself: unbatch, shard, rebatch; one shuffle seed.
        Example(
            "import tensorflow as tf\n"
            "train_ds = tf.keras.utils.image_dataset_from_directory('photos', image_size=(64, 64), batch_size=64)\n"
            "train_ds = train_ds.cache().prefetch(tf.data.AUTOTUNE)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n",
            "import tensorflow as tf\n"
            "import os\n"
            "train_ds = tf.keras.utils.image_dataset_from_directory('photos', image_size=(64, 64), batch_size=64, "
            "seed=1234).unbatch().shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))"
            ".batch(64 // int(os.getenv('RANK_SIZE', '1')))\n"
            "train_ds = train_ds.cache().prefetch(tf.data.AUTOTUNE)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n",
        ),
        # A time series does not shuffle by default (no seed needed); its batch_size defaults to 128.
        Example(
            "import tensorflow as tf\n"
            "ds = tf.keras.utils.timeseries_dataset_from_array(data, targets, sequence_length=10)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
            "import tensorflow as tf\n"
            "import os\n"
            "ds = tf.keras.utils.timeseries_dataset_from_array(data, targets, sequence_length=10).unbatch()"
            ".shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))"
            ".batch(128 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        ),
        # Numpy arrays given to fit: each rank takes every N-th sample, the batch is split.
        Example(
            "import tensorflow as tf\n"
            "(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            "model.fit(x_train, y_train, batch_size=128, epochs=2)\n",
            "import tensorflow as tf\nimport os\n(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x_train[rank_id::rank_size][:len(y_train) // rank_size], "
            "y_train[rank_id::rank_size][:len(y_train) // rank_size], batch_size=128 // rank_size, epochs=2)\n",
        ),
        # Multi-GPU towers (TensorFlow-Examples): the rank's batch is cut into towers by offsets counted in
        # the global batch, which pointed past the end of a rank's rows (empty towers): counted in the rank's.
        Example(
            'import tensorflow as tf\n'
            'batch_size = 64\n'
            'towers = 2\n'
            'train_data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)\n'
            'def run_optimization(x, y):\n'
            '    tower_grads = []\n'
            '    tower_batch = int(batch_size / towers)\n'
            '    for i in range(towers):\n'
            '        with tf.GradientTape() as tape:\n'
            '            loss = loss_fn(model(x[i * tower_batch:(i + 1) * tower_batch]), y[i * tower_batch:(i + 1) * tower_batch])\n'
            '        tower_grads.append(tape.gradient(loss, model.trainable_variables))\n'
            '    optimizer.apply_gradients(zip(average(tower_grads), model.trainable_variables))\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'batch_size = 64\n'
            'towers = 2\n'
            'train_data = tf.data.Dataset.from_tensor_slices((x, y))\n'
            'train_data, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_data, batch_size)\n'
            'train_data = train_data.batch(rank_batch_size)\n'
            'def run_optimization(x, y):\n'
            '    tower_grads = []\n'
            '    tower_batch = int(rank_batch_size / towers)\n'
            '    for i in range(towers):\n'
            '        with tf.GradientTape() as tape:\n'
            '            loss = loss_fn(model(x[i * tower_batch:(i + 1) * tower_batch]), y[i * tower_batch:(i + 1) * tower_batch])\n'
            '        tower_grads.append(tape.gradient(loss, model.trainable_variables))\n'
            '    optimizer.apply_gradients(zip(average(tower_grads), model.trainable_variables))\n'
            'for batch_x, batch_y in train_data:\n'
            '    run_optimization(batch_x, batch_y)\n',
        ),
        # tf.data's CSV reader batches and shuffles by itself (the Iris tutorial of TensorFlow's courses): one
        # shuffle seed on every rank, then each rank its rows of each global batch.
        Example(
            "import os\nimport tensorflow as tf\n"
            "train_dataset = tf.data.experimental.make_csv_dataset(train_fp, 32, label_name='species', num_epochs=1)\n"
            "for x, y in train_dataset:\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = loss_fn(y, model(x))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
            "import os\nimport tensorflow as tf\n"
            "train_dataset = tf.data.experimental.make_csv_dataset(train_fp, 32, label_name='species', num_epochs=1, "
            "shuffle_seed=1234).unbatch().shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))"
            ".batch(32 // int(os.getenv('RANK_SIZE', '1')))\n"
            "for x, y in train_dataset:\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = loss_fn(y, model(x))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
        ),
        # The courses' ``train_and_evaluate`` function trains: its pandas_input_fn is sharded (the word "evaluate"
        # in its name had it taken for evaluation data); the EvalSpec's, named for evaluation, is not.
        Example(
            'from npu_bridge.npu_init import *\n'
            'import tensorflow as tf\n'
            'def train_and_evaluate(output_dir):\n'
            '    estimator = tf.compat.v1.estimator.LinearRegressor(feature_columns=cols, optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.FtrlOptimizer(0.2)))\n'
            "    train_spec = tf.estimator.TrainSpec(input_fn=tf.compat.v1.estimator.inputs.pandas_input_fn(x=traindf, y=traindf['value'], batch_size=100, num_epochs=None, shuffle=True), max_steps=100, hooks=npu_hooks_append())\n"
            "    eval_spec = tf.estimator.EvalSpec(input_fn=tf.compat.v1.estimator.inputs.pandas_input_fn(x=evaldf, y=evaldf['value'], num_epochs=1, shuffle=False))\n"
            '    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)\n',
            "from npu_bridge.npu_init import *\nimport tensorflow as tf\nimport os\n"
            "def train_and_evaluate(output_dir):\n"
            "    estimator = tf.compat.v1.estimator.LinearRegressor(feature_columns=cols, "
            "optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.FtrlOptimizer(0.2)))\n    train_spec = "
            "tf.estimator.TrainSpec(input_fn=tf.compat.v1.estimator.inputs.pandas_input_fn(x=traindf[int"
            "(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))][:len(traindf['value']) // "
            "int(os.getenv('RANK_SIZE', '1'))], y=traindf['value'][int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(traindf['value']) // "
            "int(os.getenv('RANK_SIZE', '1'))], batch_size=100 // int(os.getenv('RANK_SIZE', '1')), "
            "num_epochs=None, shuffle=True), max_steps=100, hooks=npu_hooks_append())\n    eval_spec = "
            "tf.estimator.EvalSpec(input_fn=tf.compat.v1.estimator.inputs.pandas_input_fn(x=evaldf, "
            "y=evaldf['value'], num_epochs=1, shuffle=False))\n"
            "    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)\n",
        ),
        # An Estimator's input_fn returning literal columns, no dataset: each rank returns its rows of each.
        Example(
            "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
            "featcols = [tf.feature_column.numeric_column('area')]\n"
            "def train_input_fn():\n"
            "    features = {'area': [1000, 2000, 4000, 1000, 2000, 4000]}\n"
            "    labels = [500, 1000, 1500, 700, 1300, 1900]\n"
            "    return features, labels\n"
            "model = tf.estimator.LinearRegressor(featcols, optimizer=npu_distributed_optimizer_wrapper(tf.train.FtrlOptimizer(0.2)))\n"
            "model.train(train_input_fn, steps=200, hooks=npu_hooks_append())\n",
            "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
            "import os\n"
            "featcols = [tf.feature_column.numeric_column('area')]\n"
            "def train_input_fn():\n"
            "    features = {'area': [1000, 2000, 4000, 1000, 2000, 4000]}\n"
            "    labels = [500, 1000, 1500, 700, 1300, 1900]\n"
            "    return {key: column[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] for key, column in features.items()}, "
            "labels[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))]\n"
            "model = tf.estimator.LinearRegressor(featcols, optimizer=npu_distributed_optimizer_wrapper(tf.train.FtrlOptimizer(0.2)))\n"
            "model.train(train_input_fn, steps=200, hooks=npu_hooks_append())\n",
        ),
        # Per-sample weights are sliced with the samples they weigh (Keras refuses arrays of unequal lengths).
        Example(
            "import numpy as np\nimport tensorflow as tf\n"
            "sample_weight = np.random.rand(len(y_train))\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(X_train, y_train, epochs=2, sample_weight=sample_weight)\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\nsample_weight = np.random.rand(len(y_train))\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(X_train[rank_id::rank_size][:len(y_train) // rank_size], "
            "y_train[rank_id::rank_size][:len(y_train) // rank_size], epochs=2, "
            "sample_weight=sample_weight[rank_id::rank_size][:len(y_train) // rank_size], "
            "batch_size=32 // rank_size)\n",
        ),
        # An array computed in the call is sliced whole, in parentheses (``x / 255.0[...]`` would slice the number).
        Example(
            "import tensorflow as tf\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(x_train / 255.0, y_train, epochs=2)\n",
            "import tensorflow as tf\nimport os\nmodel.compile(optimizer='adam', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit((x_train / 255.0)[rank_id::rank_size][:len(y_train) // rank_size], "
            "y_train[rank_id::rank_size][:len(y_train) // rank_size], epochs=2, batch_size=32 // rank_size)\n",
        ),
        # Every rank as many rows, counted on the array a cast is of (not by casting it again).
        Example(
            "import numpy as np\nimport tensorflow as tf\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(X_scaled.astype(np.float32), y.astype(np.float32), epochs=2)\n",
            "import numpy as np\nimport tensorflow as tf\nimport os\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(X_scaled.astype(np.float32)[rank_id::rank_size][:len(y) // rank_size], "
            "y.astype(np.float32)[rank_id::rank_size][:len(y) // rank_size], epochs=2, batch_size=32 // rank_size)\n",
        ),
        # pandas_input_fn: a DataFrame's and a Series' rows slice as an array's.
        Example(
            "import tensorflow as tf\n"
            "train_input_fn = tf.compat.v1.estimator.inputs.pandas_input_fn(x=traindf[columns], "
            "y=traindf['value'] / SCALE, batch_size=100, num_epochs=None, shuffle=True)\n"
            "estimator = tf.compat.v1.estimator.LinearRegressor(feature_columns=cols, "
            "optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.FtrlOptimizer(0.01)))\n"
            "estimator.train(train_input_fn, steps=100, hooks=npu_hooks_append())\n",
            "from npu_bridge.npu_init import *\nimport tensorflow as tf\nimport os\ntrain_input_fn = "
            "tf.compat.v1.estimator.inputs.pandas_input_fn(x=traindf[columns][int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(traindf[columns]) // "
            "int(os.getenv('RANK_SIZE', '1'))], y=(traindf['value'] / SCALE)[int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(traindf[columns]) // "
            "int(os.getenv('RANK_SIZE', '1'))], batch_size=100 // int(os.getenv('RANK_SIZE', '1')), "
            "num_epochs=None, shuffle=True)\n"
            "estimator = tf.compat.v1.estimator.LinearRegressor(feature_columns=cols, "
            "optimizer=npu_distributed_optimizer_wrapper(tf.compat.v1.train.FtrlOptimizer(0.01)))\n"
            "estimator.train(train_input_fn, steps=100, hooks=npu_hooks_append())\n",
        ),
        # A Python list of samples slices like an array.
        Example(
            "import tensorflow as tf\n"
            "x = [-1, 0, 1, 2]\ny = [-3, -1, 1, 3]\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(x, y, epochs=2)\n",
            "import tensorflow as tf\nimport os\nx = [-1, 0, 1, 2]\ny = [-3, -1, 1, 3]\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            "model.fit(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // "
            "rank_size], epochs=2, batch_size=32 // rank_size)\n",
        ),
        # A tensorflow_io reader is a tf.data dataset: sharded as any pipeline source.
        Example(
            "import tensorflow as tf\nimport tensorflow_io as tfio\n"
            "train_ds = tfio.experimental.mongodb.MongoDBIODataset(uri=URI, database=DB, collection='train')\n"
            "train_ds = train_ds.map(decode).batch(32)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\nimport tensorflow_io as tfio\n"
            "train_ds = tfio.experimental.mongodb.MongoDBIODataset(uri=URI, database=DB, collection='train')\n"
            "train_ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_ds, 32)\n"
            "train_ds = train_ds.map(decode).batch(rank_batch_size)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n",
        ),
        # BigQuery: the read session's rows are a tf.data dataset.
        Example(
            "import tensorflow as tf\nfrom tensorflow_io.bigquery import BigQueryClient\n"
            "def read(table):\n"
            "    session = BigQueryClient().read_session(PARENT, PROJECT, table, DATASET, names, types)\n"
            "    return session.parallel_read_rows().map(parse)\n"
            "# %%\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(read(TABLE).batch(32))\n",
            "import tensorflow as tf\nimport os\nfrom tensorflow_io.bigquery import BigQueryClient\n"
            "def read(table):\n"
            "    session = BigQueryClient().read_session(PARENT, PROJECT, table, DATASET, names, types)\n"
            "    return session.parallel_read_rows().shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).map(parse)\n"
            "# %%\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(read(TABLE).batch(32))\n",
        ),
        # An ImageDataGenerator iterator: per-rank batches, each rank its part of every global batch.
        Example(
            "import tensorflow as tf\n"
            "from tensorflow.keras.preprocessing.image import ImageDataGenerator\n"
            "image_gen = ImageDataGenerator(rescale=1./255)\n"
            "train_data_gen = image_gen.flow_from_directory(batch_size=64, directory='train', shuffle=True)\n"
            "val_data_gen = image_gen.flow_from_directory(batch_size=64, directory='val')\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(train_data_gen, epochs=2, validation_data=val_data_gen)\n",
            "import tensorflow as tf\n"
            "import os\n"
            "from tensorflow.keras.preprocessing.image import ImageDataGenerator\n"
            "image_gen = ImageDataGenerator(rescale=1./255)\n"
            + rank_batches_class("tf.keras") + "\n"
            "train_data_gen = RankBatches(image_gen.flow_from_directory(batch_size=64 // int(os.getenv('RANK_SIZE', '1')), "
            "directory='train', shuffle=True))\n"
            "val_data_gen = image_gen.flow_from_directory(batch_size=64, directory='val')\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(train_data_gen, epochs=2, validation_data=val_data_gen)\n",
        ),
        # .flow(x, y) without a batch size: Keras' 32 is the global batch.
        Example(
            "import tensorflow as tf\n"
            "train_generator = tf.keras.preprocessing.image.ImageDataGenerator(zoom_range=0.2).flow(x, y)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(train_generator, epochs=5)\n",
            "import tensorflow as tf\n"
            "import os\n"
            + rank_batches_class("tf.keras") + "\n"
            "train_generator = RankBatches(tf.keras.preprocessing.image.ImageDataGenerator(zoom_range=0.2).flow(x, y, "
            "batch_size=32 // int(os.getenv('RANK_SIZE', '1'))))\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(train_generator, epochs=5)\n",
        ),
        # TF1: a session fed by offset from numpy arrays: each rank steps through its own rows with its
        # part of the batch (the placeholders follow the batch size).
        Example(
            "import tensorflow as tf\n"
            "batch_size = 128\n"
            "x = tf.placeholder(tf.float32, shape=(batch_size, 4))\n"
            "y = tf.placeholder(tf.float32, shape=(batch_size, 1))\n"
            "train_op = tf.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_mean(tf.square(model(x) - y)))\n"
            "# %%\n"
            "with tf.Session() as session:\n"
            "    session.run(tf.global_variables_initializer())\n"
            "    for step in range(1000):\n"
            "        offset = (step * batch_size) % (train_labels.shape[0] - batch_size)\n"
            "        batch_data = train_dataset[offset:(offset + batch_size), :]\n"
            "        session.run(train_op, feed_dict={x: batch_data, y: train_labels[offset:(offset + batch_size)]})\n",
            "import tensorflow as tf\nimport os\nbatch_size = 128 // int(os.getenv('RANK_SIZE', '1'))\n"
            "x = tf.placeholder(tf.float32, shape=(batch_size, 4))\n"
            "y = tf.placeholder(tf.float32, shape=(batch_size, 1))\ntrain_op = "
            "tf.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_mean(tf.square(model(x) - y)))\n# %%\n"
            "with tf.Session() as session:\n    session.run(tf.global_variables_initializer())\n"
            "    for step in range(1000):\n"
            "        offset = (step * batch_size) % (train_labels[int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(train_labels) // int(os.getenv('RANK_SIZE', "
            "'1'))].shape[0] - batch_size)\n        batch_data = train_dataset[int(os.getenv('RANK_ID', "
            "'0'))::int(os.getenv('RANK_SIZE', '1'))][:len(train_dataset) // "
            "int(os.getenv('RANK_SIZE', '1'))][offset:(offset + batch_size), :]\n"
            "        session.run(train_op, feed_dict={x: batch_data, y: "
            "train_labels[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', "
            "'1'))][:len(train_labels) // int(os.getenv('RANK_SIZE', '1'))][offset:(offset + batch_size)]})\n",
        ),
        # tfds.load returning splits together (a list with its info, a dict): the training split is sharded where it
        # comes out and its batch split (issue 34: a .shard on the call failed on the tuple).
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "(ds_train, ds_val, ds_test), info = tfds.load('tf_flowers', split=['train[:80%]', 'train[80%:90%]', 'train[90%:]'], as_supervised=True, with_info=True)\n"
            'ds_train = ds_train.map(resize).shuffle(1000).batch(32)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, validation_data=ds_val.batch(32), epochs=2)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "(ds_train, ds_val, ds_test), info = tfds.load('tf_flowers', split=['train[:80%]', 'train[80%:90%]', 'train[90%:]'], as_supervised=True, with_info=True)\n"
            "ds_train = ds_train.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "ds_train = ds_train.map(resize).shuffle(1000).batch(32 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, validation_data=ds_val.batch(32), epochs=2)\n',
        ),
        # Every split in a dict: the one taken out for training.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "datasets, info = tfds.load('mnist', with_info=True, as_supervised=True)\n"
            "mnist_train, mnist_test = datasets['train'], datasets['test']\n"
            'train_dataset = mnist_train.map(scale).cache().shuffle(10000).batch(64)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train_dataset, epochs=2)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "datasets, info = tfds.load('mnist', with_info=True, as_supervised=True)\n"
            "datasets['train'] = datasets['train'].shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "mnist_train, mnist_test = datasets['train'], datasets['test']\n"
            "train_dataset = mnist_train.map(scale).cache().shuffle(10000).batch(64 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train_dataset, epochs=2)\n',
        ),
        # Batched by tfds.load itself: the load's batch is split, the training split sharded.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "train_data, test_data = tfds.load('mnist', split=['train[:5000]', 'test[:5000]'], batch_size=128, as_supervised=True)\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train_data, epochs=2)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "train_data, test_data = tfds.load('mnist', split=['train[:5000]', 'test[:5000]'], batch_size=128 // int(os.getenv('RANK_SIZE', '1')), as_supervised=True)\n"
            "train_data = train_data.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(train_data, epochs=2)\n',
        ),
        # A list kept whole and indexed: the index the training name takes.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "ds_split, info = tfds.load('penguins/processed', split=['train[:20%]', 'train[20%:]'], as_supervised=True, with_info=True)\n"
            'ds_test = ds_split[0]\n'
            'ds_train = ds_split[1].batch(32)\n'
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, epochs=2)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "ds_split, info = tfds.load('penguins/processed', split=['train[:20%]', 'train[20%:]'], as_supervised=True, with_info=True)\n"
            "ds_split[1] = ds_split[1].shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            'ds_test = ds_split[0]\n'
            "ds_train = ds_split[1].batch(32 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, epochs=2)\n',
        ),
        # Files shuffled by tfds.load: with one seed on every rank, or each rank's own file order before the
        # shard gives ranks overlapping samples.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "(ds_train, ds_test), ds_info = tfds.load('mnist', split=['train', 'test'], shuffle_files=True, as_supervised=True, with_info=True)\n"
            "ds_train = ds_train.map(normalize_img).cache().shuffle(ds_info.splits['train'].num_examples).batch(128)\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, epochs=6, validation_data=ds_test.batch(128))\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "(ds_train, ds_test), ds_info = tfds.load('mnist', split=['train', 'test'], shuffle_files=True, as_supervised=True, with_info=True, read_config=tfds.ReadConfig(shuffle_seed=1234))\n"
            "ds_train = ds_train.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "ds_train = ds_train.map(normalize_img).cache().shuffle(ds_info.splits['train'].num_examples).batch(128 // int(os.getenv('RANK_SIZE', '1')))\n"
            "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
            'model.fit(ds_train, epochs=6, validation_data=ds_test.batch(128))\n',
        ),
        # TensorFlow 1's MNIST loader (TensorFlow-Examples): one shuffle on every rank, and each rank its rows
        # of every global batch; the test batches drawn into a canvas are left alone.
        Example(
            'import tensorflow as tf\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True)\n"
            'train_op = tf.train.AdamOptimizer(0.001).minimize(loss_op)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    for step in range(1, 501):\n'
            '        batch_x, batch_y = mnist.train.next_batch(128)\n'
            '        sess.run(train_op, feed_dict={X: batch_x, Y: batch_y})\n'
            '    for i in range(4):\n'
            '        batch_x, _ = mnist.test.next_batch(4)\n'
            '        g = sess.run(decoder_op, feed_dict={X: batch_x})\n'
            '        canvas[i * 28:(i + 1) * 28, 0:28] = g[0].reshape([28, 28])\n',
            'import tensorflow as tf\n'
            'import os\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True, seed=1234)\n"
            'train_op = tf.train.AdamOptimizer(0.001).minimize(loss_op)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    for step in range(1, 501):\n'
            "        batch_x, batch_y = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] for part in mnist.train.next_batch(128)]\n"
            '        sess.run(train_op, feed_dict={X: batch_x, Y: batch_y})\n'
            '    for i in range(4):\n'
            '        batch_x, _ = mnist.test.next_batch(4)\n'
            '        g = sess.run(decoder_op, feed_dict={X: batch_x})\n'
            '        canvas[i * 28:(i + 1) * 28, 0:28] = g[0].reshape([28, 28])\n',
        ),
        # Two input_fns of one name (TensorFlow-Examples): the one given the test arrays evaluates, whole.
        Example(
            'import tensorflow as tf\n'
            'model = tf.estimator.Estimator(model_fn)\n'
            "input_fn = tf.estimator.inputs.numpy_input_fn(x={'images': mnist.train.images}, y=mnist.train.labels,\n"
            '    batch_size=128, num_epochs=None, shuffle=True)\n'
            'model.train(input_fn, steps=2000)\n'
            "input_fn = tf.estimator.inputs.numpy_input_fn(x={'images': mnist.test.images}, y=mnist.test.labels,\n"
            '    batch_size=128, shuffle=False)\n'
            'model.evaluate(input_fn)\n',
            "import tensorflow as tf\nimport os\nmodel = tf.estimator.Estimator(model_fn)\n"
            "input_fn = tf.estimator.inputs.numpy_input_fn(x={'images': "
            "mnist.train.images[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', "
            "'1'))][:len(mnist.train.labels) // int(os.getenv('RANK_SIZE', '1'))]}, "
            "y=mnist.train.labels[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', "
            "'1'))][:len(mnist.train.labels) // int(os.getenv('RANK_SIZE', '1'))],\n"
            "    batch_size=128 // int(os.getenv('RANK_SIZE', '1')), num_epochs=None, shuffle=True)\n"
            "model.train(input_fn, steps=2000)\n"
            "input_fn = tf.estimator.inputs.numpy_input_fn(x={'images': mnist.test.images}, y=mnist.test.labels,\n"
            "    batch_size=128, shuffle=False)\nmodel.evaluate(input_fn)\n",
        ),
        # The same, the loop in a function the dataset is given to (TensorFlow's DCGAN tutorial: ``train(dataset,
        # epochs)`` iterates its parameter): the noise in the step it calls follows the split too.
        Example(
            'import tensorflow as tf\n'
            'BATCH_SIZE = 256\n'
            'train_dataset = tf.data.Dataset.from_tensor_slices(train_images).shuffle(60000).batch(BATCH_SIZE)\n'
            '# %%\n'
            '@tf.function\n'
            'def train_step(images):\n'
            '    noise = tf.random.normal([BATCH_SIZE, 100])\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = d_loss(discriminator(images), discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            'def train(dataset, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for image_batch in dataset:\n'
            '            train_step(image_batch)\n'
            '# %%\n'
            'train(train_dataset, 50)\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'BATCH_SIZE = 256\n'
            'train_dataset = tf.data.Dataset.from_tensor_slices(train_images)\n'
            'train_dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_dataset, BATCH_SIZE)\n'
            'train_dataset = train_dataset.shuffle(60000).batch(rank_batch_size)\n'
            '# %%\n'
            '@tf.function\n'
            'def train_step(images):\n'
            '    noise = tf.random.normal([rank_batch_size, 100])\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = d_loss(discriminator(images), discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            'def train(dataset, epochs):\n'
            '    for epoch in range(epochs):\n'
            '        for image_batch in dataset:\n'
            '            train_step(image_batch)\n'
            '# %%\n'
            'train(train_dataset, 50)\n',
        ),
        # A TF2 loop training on batches a notebook function picks from arrays (Hands-On ML's ``random_batch``):
        # each rank picks from its own rows, its part of the batch (the default, 32, given divided).
        Example(
            'import numpy as np\nimport tensorflow as tf\nimport os\n'
            'def random_batch(X, y, batch_size=32):\n'
            '    idx = np.random.randint(len(X), size=batch_size)\n'
            '    return X[idx], y[idx]\n'
            '# %%\n'
            'for step in range(100):\n'
            '    X_batch, y_batch = random_batch(X_train, y_train)\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(X_batch) - y_batch))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
            'import numpy as np\nimport tensorflow as tf\nimport os\n'
            'def random_batch(X, y, batch_size=32):\n'
            '    idx = np.random.randint(len(X), size=batch_size)\n'
            '    return X[idx], y[idx]\n'
            '# %%\n'
            'for step in range(100):\n'
            "    X_batch, y_batch = random_batch(X_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], "
            "y_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], "
            "batch_size=32 // int(os.getenv('RANK_SIZE', '1')))\n"
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(X_batch) - y_batch))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
        ),
        # A TF1 loop fed a batch a method picks from the instance's own arrays (Hvass-Labs' ``data.random_batch``,
        # its class in a module beside the notebook), the feed bound to a name first: each rank takes every
        # RANK_SIZE-th row of the global batch from RANK_ID.
        Example(
            'import numpy as np\nimport tensorflow.compat.v1 as tf\nimport os\n'
            'class Digits:\n'
            '    def __init__(self, x, y):\n'
            '        self.x_train, self.y_train = x, y\n'
            '    def random_batch(self, batch_size=32):\n'
            '        idx = np.random.randint(low=0, high=len(self.x_train), size=batch_size)\n'
            '        x_batch = self.x_train[idx]\n'
            '        y_batch = self.y_train[idx]\n'
            '        return x_batch, y_batch\n'
            '# %%\n'
            'data = Digits(X_train, y_train)\n'
            'train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n'
            'session = tf.Session()\n'
            'for i in range(100):\n'
            '    x_batch, y_true_batch = data.random_batch(batch_size=100)\n'
            '    feed_dict_train = {x: x_batch, y_true: y_true_batch}\n'
            '    session.run(train_op, feed_dict=feed_dict_train)\n',
            'import numpy as np\nimport tensorflow.compat.v1 as tf\nimport os\n'
            'class Digits:\n'
            '    def __init__(self, x, y):\n'
            '        self.x_train, self.y_train = x, y\n'
            '    def random_batch(self, batch_size=32):\n'
            '        idx = np.random.randint(low=0, high=len(self.x_train), size=batch_size)\n'
            '        x_batch = self.x_train[idx]\n'
            '        y_batch = self.y_train[idx]\n'
            '        return x_batch, y_batch\n'
            '# %%\n'
            'data = Digits(X_train, y_train)\n'
            'train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)\n'
            'session = tf.Session()\n'
            'for i in range(100):\n'
            "    x_batch, y_true_batch = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] "
            "for part in data.random_batch(batch_size=100)]\n"
            '    feed_dict_train = {x: x_batch, y_true: y_true_batch}\n'
            '    session.run(train_op, feed_dict=feed_dict_train)\n',
        ),
        # The same in a TF2 loop under a tape: each rank takes its part of the batch the method returns.
        Example(
            'import numpy as np\nimport tensorflow as tf\nimport os\n'
            'class Digits:\n'
            '    def __init__(self, x, y):\n'
            '        self.x, self.y = x, y\n'
            '    def random_batch(self, batch_size=32):\n'
            '        idx = np.random.randint(len(self.x), size=batch_size)\n'
            '        return self.x[idx], self.y[idx]\n'
            '# %%\n'
            'data = Digits(X_train, y_train)\n'
            'for step in range(100):\n'
            '    X_batch, y_batch = data.random_batch(64)\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(X_batch) - y_batch))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
            'import numpy as np\nimport tensorflow as tf\nimport os\n'
            'class Digits:\n'
            '    def __init__(self, x, y):\n'
            '        self.x, self.y = x, y\n'
            '    def random_batch(self, batch_size=32):\n'
            '        idx = np.random.randint(len(self.x), size=batch_size)\n'
            '        return self.x[idx], self.y[idx]\n'
            '# %%\n'
            'data = Digits(X_train, y_train)\n'
            'for step in range(100):\n'
            "    X_batch, y_batch = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] "
            "for part in data.random_batch(64)]\n"
            '    with tf.GradientTape() as tape:\n'
            '        loss = tf.reduce_mean(tf.square(model(X_batch) - y_batch))\n'
            '    grads = tape.gradient(loss, model.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n',
        ),
        # A TF1 loop over a notebook generator yielding rows (Hands-On ML's shuffle_batch, unseeded): each rank
        # shuffles its own rows and yields its part of each batch, as many batches as one card.
        Example(
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import os\n'
            'def shuffle_batch(X, y, batch_size):\n'
            '    rnd_idx = np.random.permutation(len(X))\n'
            '    n_batches = len(X) // batch_size\n'
            '    for batch_idx in np.array_split(rnd_idx, n_batches):\n'
            '        X_batch, y_batch = X[batch_idx], y[batch_idx]\n'
            '        yield X_batch, y_batch\n'
            '# %%\n'
            'X = tf.placeholder(tf.float32, [None, 4])\n'
            'y = tf.placeholder(tf.float32, [None, 1])\n'
            'loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 1) - y))\n'
            'training_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)\n'
            'init = tf.global_variables_initializer()\n'
            'batch_size = 50\n'
            'with tf.Session() as sess:\n'
            '    init.run()\n'
            '    for epoch in range(40):\n'
            '        for X_batch, y_batch in shuffle_batch(X_train, y_train, batch_size):\n'
            '            sess.run(training_op, feed_dict={X: X_batch, y: y_batch})\n',
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import os\n'
            'def shuffle_batch(X, y, batch_size):\n'
            '    rnd_idx = np.random.permutation(len(X))\n'
            '    n_batches = len(X) // batch_size\n'
            '    for batch_idx in np.array_split(rnd_idx, n_batches):\n'
            '        X_batch, y_batch = X[batch_idx], y[batch_idx]\n'
            '        yield X_batch, y_batch\n'
            '# %%\n'
            'X = tf.placeholder(tf.float32, [None, 4])\n'
            'y = tf.placeholder(tf.float32, [None, 1])\n'
            'loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 1) - y))\n'
            'training_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)\n'
            'init = tf.global_variables_initializer()\n'
            'batch_size = 50\n'
            'with tf.Session() as sess:\n'
            '    init.run()\n'
            '    for epoch in range(40):\n'
            "        for X_batch, y_batch in shuffle_batch(X_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], y_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], batch_size // int(os.getenv('RANK_SIZE', '1'))):\n"
            '            sess.run(training_op, feed_dict={X: X_batch, y: y_batch})\n',
        ),
        # A TF1 graph whose batch size is read from the input's shape (Hands-On ML's capsule network:
        # ``batch_size = tf.shape(X)[0]``): what it sizes follows the fed batch; only the feed is split.
        Example(
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            'mnist = input_data.read_data_sets("/tmp/data/")\n'
            'X = tf.placeholder(tf.float32, [None, 784])\n'
            'batch_size = tf.shape(X)[0]\n'
            'raw_weights = tf.zeros([batch_size, 10], dtype=np.float32)\n'
            'loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 10) + raw_weights))\n'
            'training_op = tf.train.AdamOptimizer().minimize(loss)\n'
            'init = tf.global_variables_initializer()\n'
            '# %%\n'
            'batch_size = 50\n'
            'with tf.Session() as sess:\n'
            '    init.run()\n'
            '    for iteration in range(100):\n'
            '        X_batch, y_batch = mnist.train.next_batch(batch_size)\n'
            '        sess.run(training_op, feed_dict={X: X_batch})\n',
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import os\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            'mnist = input_data.read_data_sets("/tmp/data/", seed=1234)\n'
            'X = tf.placeholder(tf.float32, [None, 784])\n'
            'batch_size = tf.shape(X)[0]\n'
            'raw_weights = tf.zeros([batch_size, 10], dtype=np.float32)\n'
            'loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 10) + raw_weights))\n'
            'training_op = tf.train.AdamOptimizer().minimize(loss)\n'
            'init = tf.global_variables_initializer()\n'
            '# %%\n'
            'batch_size = 50\n'
            'with tf.Session() as sess:\n'
            '    init.run()\n'
            '    for iteration in range(100):\n'
            "        X_batch, y_batch = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] for part in mnist.train.next_batch(batch_size)]\n"
            '        sess.run(training_op, feed_dict={X: X_batch})\n',
        ),
        # The global batch given to the step as an argument that sizes its noise: the argument follows the split
        # (the step's own parameter is left as it is); a sample drawn outside the batches' loop keeps its size.
        Example(
            'import tensorflow as tf\n'
            'BATCH_SIZE = 256\n'
            'train_dataset = tf.data.Dataset.from_tensor_slices(train_images).shuffle(60000).batch(BATCH_SIZE)\n'
            '# %%\n'
            '@tf.function\n'
            'def train_step(images, batch_size):\n'
            '    noise = tf.random.normal([batch_size, 100])\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = d_loss(discriminator(images), discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for epoch in range(50):\n'
            '    for image_batch in train_dataset:\n'
            '        train_step(image_batch, BATCH_SIZE)\n'
            '    sample = generator(tf.random.normal([BATCH_SIZE, 100]))\n',
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'BATCH_SIZE = 256\n'
            'train_dataset = tf.data.Dataset.from_tensor_slices(train_images)\n'
            'train_dataset, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_dataset, BATCH_SIZE)\n'
            'train_dataset = train_dataset.shuffle(60000).batch(rank_batch_size)\n'
            '# %%\n'
            '@tf.function\n'
            'def train_step(images, batch_size):\n'
            '    noise = tf.random.normal([batch_size, 100])\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = d_loss(discriminator(images), discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for epoch in range(50):\n'
            '    for image_batch in train_dataset:\n'
            '        train_step(image_batch, rank_batch_size)\n'
            '    sample = generator(tf.random.normal([BATCH_SIZE, 100]))\n',
        ),
        # A GAN's noise and labels sized with the global batch in the step (TensorFlow-Examples' DCGAN): the per-rank batch, as the split rows; a sample drawn after the loop keeps its size.
        Example(
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'batch_size = 64\n'
            'train_data = tf.data.Dataset.from_tensor_slices(x_train)\n'
            'train_data = train_data.shuffle(1000).batch(batch_size)\n'
            '# %%\n'
            'def discriminator_loss(logits):\n'
            '    return bce(tf.ones([batch_size, 1]), logits)\n'
            'def train_step(real):\n'
            '    noise = np.random.normal(size=[batch_size, 100]).astype(np.float32)\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = discriminator_loss(discriminator(real)) + discriminator_loss(discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for batch in train_data:\n'
            '    train_step(batch)\n'
            'sample = generator(np.random.normal(size=[batch_size, 100]))\n',
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import npu_device as npu\n'
            'npu.open().as_default()\n'
            'batch_size = 64\n'
            'train_data = tf.data.Dataset.from_tensor_slices(x_train)\n'
            'train_data, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_data, batch_size)\n'
            'train_data = train_data.shuffle(1000).batch(rank_batch_size)\n'
            '# %%\n'
            'def discriminator_loss(logits):\n'
            '    return bce(tf.ones([rank_batch_size, 1]), logits)\n'
            'def train_step(real):\n'
            '    noise = np.random.normal(size=[rank_batch_size, 100]).astype(np.float32)\n'
            '    with tf.GradientTape() as tape:\n'
            '        loss = discriminator_loss(discriminator(real)) + discriminator_loss(discriminator(generator(noise)))\n'
            '    grads = tape.gradient(loss, discriminator.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))\n'
            '# %%\n'
            'for batch in train_data:\n'
            '    train_step(batch)\n'
            'sample = generator(np.random.normal(size=[batch_size, 100]))\n',
        ),
        # TF1's MNIST batches split across ranks and the noise fed beside them (a TF1 GAN): its rows follow the split, or the discriminator's real and fake halves differ in size.
        Example(
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True)\n"
            'batch_size = 128\n'
            'train_op = tf.train.AdamOptimizer(0.001).minimize(loss)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    for step in range(1, 501):\n'
            '        batch_x, _ = mnist.train.next_batch(batch_size)\n'
            '        z = np.random.uniform(-1., 1., size=[batch_size, noise_dim])\n'
            '        sess.run(train_op, feed_dict={real: batch_x, noise: z})\n',
            'import numpy as np\n'
            'import tensorflow as tf\n'
            'import os\n'
            'from tensorflow.examples.tutorials.mnist import input_data\n'
            "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True, seed=1234)\n"
            'batch_size = 128\n'
            'train_op = tf.train.AdamOptimizer(0.001).minimize(loss)\n'
            'with tf.Session() as sess:\n'
            '    sess.run(tf.global_variables_initializer())\n'
            '    for step in range(1, 501):\n'
            "        batch_x, _ = [part[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))] for part in mnist.train.next_batch(batch_size)]\n"
            "        z = np.random.uniform(-1., 1., size=[batch_size // int(os.getenv('RANK_SIZE', '1')), noise_dim])\n"
            '        sess.run(train_op, feed_dict={real: batch_x, noise: z})\n',
        ),
        # A TextVectorization adapted on the training split (TensorFlow's text tutorials): it reads the whole split, batched as written, so that every rank builds the same vocabulary.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            "dataset, info = tfds.load('imdb_reviews', with_info=True, as_supervised=True)\n"
            "train_dataset, test_dataset = dataset['train'], dataset['test']\n"
            'train_dataset = train_dataset.shuffle(10000).batch(64).prefetch(tf.data.AUTOTUNE)\n'
            '# %%\n'
            'encoder = tf.keras.layers.TextVectorization(max_tokens=1000)\n'
            'encoder.adapt(train_dataset.map(lambda text, label: text))\n'
            'model = tf.keras.Sequential([encoder, tf.keras.layers.Embedding(1000, 64), tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])\n'
            "model.compile(loss='mse', optimizer='adam')\n"
            'model.fit(train_dataset, epochs=10)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            "dataset, info = tfds.load('imdb_reviews', with_info=True, as_supervised=True)\n"
            "dataset_train_whole = dataset['train']\n"
            "dataset['train'] = dataset['train'].shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "train_dataset, test_dataset = dataset['train'], dataset['test']\n"
            "train_dataset = train_dataset.shuffle(10000).batch(64 // int(os.getenv('RANK_SIZE', '1'))).prefetch(tf.data.AUTOTUNE)\n"
            '# %%\n'
            'encoder = tf.keras.layers.TextVectorization(max_tokens=1000)\n'
            'encoder.adapt(dataset_train_whole.batch(64).map(lambda text, label: text))\n'
            'model = tf.keras.Sequential([encoder, tf.keras.layers.Embedding(1000, 64), tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])\n'
            "model.compile(loss='mse', optimizer='adam')\n"
            'model.fit(train_dataset, epochs=10)\n',
        ),
        # The same adapt in a function of its own, away from the load: no twin can reach it; the finding says to adapt on the whole split by hand.
        Example(
            'import tensorflow as tf\n'
            'import tensorflow_datasets as tfds\n'
            'def load_dataset(batch_size):\n'
            "    dataset = tfds.load('imdb_reviews', as_supervised=True)\n"
            "    train_dataset = dataset['train']\n"
            '    return train_dataset.shuffle(10000).batch(batch_size)\n'
            'def build_encoder(train_dataset):\n'
            '    encoder = tf.keras.layers.TextVectorization(max_tokens=1000)\n'
            '    encoder.adapt(train_dataset.map(lambda text, label: text))\n'
            '    return encoder\n'
            '# %%\n'
            'train_dataset = load_dataset(64)\n'
            'model = tf.keras.Sequential([build_encoder(train_dataset), tf.keras.layers.Embedding(1000, 64), tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])\n'
            "model.compile(loss='mse', optimizer='adam')\n"
            'model.fit(train_dataset, epochs=10)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import tensorflow_datasets as tfds\n'
            'def load_dataset(batch_size):\n'
            "    dataset = tfds.load('imdb_reviews', as_supervised=True)\n"
            "    dataset['train'] = dataset['train'].shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "    train_dataset = dataset['train']\n"
            "    return train_dataset.shuffle(10000).batch(batch_size // int(os.getenv('RANK_SIZE', '1')))\n"
            'def build_encoder(train_dataset):\n'
            '    encoder = tf.keras.layers.TextVectorization(max_tokens=1000)\n'
            '    encoder.adapt(train_dataset.map(lambda text, label: text))\n'
            '    return encoder\n'
            '# %%\n'
            'train_dataset = load_dataset(64)\n'
            'model = tf.keras.Sequential([build_encoder(train_dataset), tf.keras.layers.Embedding(1000, 64), tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])\n'
            "model.compile(loss='mse', optimizer='adam')\n"
            'model.fit(train_dataset, epochs=10)\n',
        ),
        # A TF1 graph's labels sized with the global batch where the graph is built (TensorFlow-Examples' TF1 DCGAN): the graph runs every step, so they follow the split; numpy outside the loop does not.
        _TF1_DCGAN,
        # ... and a function defined beside the graph, sizing with a batch_size parameter of its own (what its
        # callers pass), is left as written: only the notebook's global batch is split.
        Example(*(text.replace("# %%\ndisc_real", "# %%\n" + _OWN_BATCH_HELPER + "disc_real", 1)
                  for text in (_TF1_DCGAN.before, _TF1_DCGAN.after))),
        # Batches a notebook function picks rows for from the arrays it is given (Hands-On ML, ch. 9): each
        # rank picks from its own rows, its part of the batch (unseeded, a global batch split after would
        # repeat rows across ranks).
        Example(
            _HELPER_BATCHES.format(size=50, call="random_batch(X_train, y_train, batch_size)"),
            _HELPER_BATCHES.format(size=50, call="random_batch(X_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], "
                                                 "y_train[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE', '1'))], "
                                                 "batch_size // int(os.getenv('RANK_SIZE', '1')))").replace(
                "import tensorflow as tf\n", "import tensorflow as tf\nimport os\n", 1),
        ),
        # ... but a batch of one row cannot be split: said, not written as an empty batch.
        Example(_HELPER_BATCHES.format(size=1, call="random_batch(X_train, y_train, batch_size)")),
        # A keras-tuner search passes its arrays to each trial's fit: sharded once, at the search (the trial's
        # fit in the notebook's HyperModel is left as written).
        Example(
            'import tensorflow as tf\n'
            'import keras_tuner as kt\n'
            'def build_model(hp):\n'
            "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 8, 32)), tf.keras.layers.Dense(1)])\n"
            "    model.compile(optimizer='adam', loss='mse')\n"
            '    return model\n'
            'class MyHyperModel(kt.HyperModel):\n'
            '    def build(self, hp):\n'
            '        return build_model(hp)\n'
            '\n'
            '    def fit(self, hp, model, x, y, **kwargs):\n'
            '        return model.fit(x, y, **kwargs)\n'
            "tuner = kt.RandomSearch(MyHyperModel(), objective='val_loss', max_trials=3, seed=7)\n"
            'tuner.search(x, y, epochs=2)\n',
            'import tensorflow as tf\n'
            'import os\n'
            'import keras_tuner as kt\n'
            'def build_model(hp):\n'
            "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 8, 32)), tf.keras.layers.Dense(1)])\n"
            "    model.compile(optimizer='adam', loss='mse')\n"
            '    return model\n'
            'class MyHyperModel(kt.HyperModel):\n'
            '    def build(self, hp):\n'
            '        return build_model(hp)\n'
            '\n'
            '    def fit(self, hp, model, x, y, **kwargs):\n'
            '        return model.fit(x, y, **kwargs)\n'
            "tuner = kt.RandomSearch(MyHyperModel(), objective='val_loss', max_trials=3, seed=7)\n"
            "rank_size, rank_id = int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))\n"
            'tuner.search(x[rank_id::rank_size][:len(y) // rank_size], y[rank_id::rank_size][:len(y) // rank_size], epochs=2, batch_size=32 // rank_size)\n',
        ),
    ]

    def prepare(self, context) -> None:
        if _reads_one_repeated_element(context):
            context.mark("shard", "not-applicable", _(ONE_ELEMENT_REASON))
        elif _training_reads_no_dataset(context):
            context.mark("shard", "unknown", _(NO_DATASET_REASON))

    def check(self, context) -> Iterable[Finding]:
        if context.steps["shard"] != "missing":
            return []
        findings: List[Finding] = []
        owned = dataset_functions_owned(context)
        owned |= _called_by(context, owned)
        for cell, facts, site in context.facts.calls_to(*K.DATASET_SOURCES):
            if site.function in owned:
                continue  # tf-distribute-leftover turns its InputContext shard into the rank's
            if site.argument_of is not None and context.facts.resolve(site.argument_of.dotted) in K.DATASET_SOURCES:
                continue  # Dataset.zip((a, b)): shard the zip, not each part
            if _for_evaluation(facts, site) or _loads_whole_split(context, site) or _feeds_only_inference(facts, site):
                continue
            if feeds_no_training(context, site):
                continue  # a dataset that only shows an API: the training reads something else
            if site.method == "from_tensors":
                continue  # one element: a shard would leave the other ranks nothing (ONE_ELEMENT_REASON)
            if returns_a_container(context, site):
                findings.append(self._shard_training_split(context, cell, facts, site))
                continue
            findings.append(self._shard_pipeline(context, cell, facts, site))
        for cell, facts, site in _io_read_sessions(context):
            if not _for_evaluation(facts, site):
                findings.append(self._shard_pipeline(context, cell, facts, site))
        for cell, facts, site in context.facts.calls_to(*K.BATCHED_SOURCES):
            if not _for_evaluation(facts, site) and not is_validation_subset(site):
                findings.append(self._shard_batched_source(context, cell, facts, site))
        findings += self._shard_image_generators(context)
        findings += self._shard_numpy_input_fns(context)
        if "estimator" in context.frameworks:
            findings += self._shard_returned_inputs(context)
        findings += self._shard_fed_arrays(context)
        if not context.tf1:
            findings += self._shard_loop_helper_batches(context)
        findings += self._shard_tf1_mnist_batches(context)
        if LEARNING_RULE in context.frameworks:
            findings += self._shard_rule_windows(context)
        if "keras" in context.frameworks:
            findings += self._shard_arrays(context)
        if not owned:
            findings += self._shard_full_batch(context)
        return findings or ([] if owned else self.unlocated(
            context, _("every rank reads the same data, and no tf.data pipeline or input arrays were recognized "
                       "to shard: each rank must read its own slice (a dataset's .shard(RANK_SIZE, RANK_ID), arrays' "
                       "x[rank_id::rank_size], a Sequence's __getitem__) with the global batch split across ranks")
        ))

    # -- tf.data pipelines
    def _shard_pipeline(self, context, cell, facts: CellFacts, source: CallSite) -> Finding:
        batch = _batch_of(facts, source)
        if context.facts.imports_module("horovod"):
            batch = None  # Horovod's batch is per rank already: shard, keep the batch (and its step counts)
        same_on_every_rank = _rank_free_shard_in(context, source)
        if same_on_every_rank is not None:
            return self._shard_by_rank(context, cell, facts, same_on_every_rank, batch)
        if batch is not None and global_batch_value(context, _batch_argument(batch)) == 1:
            return self.finding(  # nothing to split: each rank reads its own samples, one a step
                cell, facts, source.node,
                _("every rank reads the same data: add .shard(RANK_SIZE, RANK_ID) right after the source; its global "
                  "batch of 1 cannot be split, so each rank reads one sample a step and a step trains on RANK_SIZE "
                  "samples (scale the learning rate or the steps where the single-card math matters){note}").format(
                    note=_even_cut_note(context, facts, source)),
                _env_shard(cell, facts, source, None, context),
            )
        edits, ones, shown, sizes_note = None, [], [], ""
        if not context.tf1 and batch is not None:
            edits = _shard_and_rebatch(context, cell, facts, source, batch)
        if edits is None:
            edits = _env_shard(cell, facts, source, batch, context)
            how = _("add .shard(RANK_SIZE, RANK_ID) right after the source, before shuffle and batch")
        else:
            how = _("add npu.distribute.shard_and_rebatch_dataset before shuffle and batch")
            ones = _calls_with_a_batch_of_one(context, source, _batch_argument(batch))
            edits += [replace(c, f, node, K.RANK_SIZE_EXPR, [NEEDS_OS]) for c, f, node in ones]
            shown = _shown_at_a_batch_it_cannot_split(context, source, _batch_argument(batch))
            edits += [replace(c, f, node, f"{f.segment(node) if _is_simple(node) else '(' + f.segment(node) + ')'}"
                              f" * {K.RANK_SIZE_EXPR}", [NEEDS_OS]) for c, f, node in shown]
            if source.function is None:  # rank_batch_size is a global: the step's own per-example sizes follow it
                sizes = per_rank_sizes(context, _batch_argument(batch), RANK_BATCH, _steps_over(context, source, batch))
                edits += sizes
                sizes_note = _sizes_note(sizes)
        expected = _expected_batch_shapes(context, source, batch)
        per_rank = RANK_BATCH if source.function is None and _binds_rank_batch(edits) else None
        edits += [replace(c, f, node, per_rank or f"{node.id} // {K.RANK_SIZE_EXPR}", [NEEDS_OS]) for c, f, node in expected]
        split = _(", and split the global batch across ranks") if batch is not None else ""
        if expected:
            shape_cells = list(dict.fromkeys(c for c, _f, _n in expected))
            split += ngettext(
                "; the shape cell {cells} expects of a batch takes the per-rank batch",
                "; the shapes cells {cells} expect of a batch take the per-rank batch",
                len(shape_cells),
            ).format(cells=", ".join(map(str, shape_cells)))
        if ones:
            cells = ", ".join(str(c) for c in dict.fromkeys(c for c, _f, _n in ones))
            split += ngettext(
                "; a call in cell {cells} gives it a global batch of 1, which cannot be split: RANK_SIZE "
                "instead, so that each rank reads one sample a step as one card did",
                "; calls in cell {cells} give it a global batch of 1, which cannot be split: RANK_SIZE "
                "instead, so that each rank reads one sample a step as one card did",
                len(ones),
            ).format(cells=cells)
        if shown:
            cells = ", ".join(str(c) for c in dict.fromkeys(c for c, _f, _n in shown))
            split += ngettext(
                "; a call in cell {cells} makes a dataset only shown, at a global batch the ranks cannot split: "
                "times RANK_SIZE, so that each rank shows as many samples as one card did",
                "; calls in cell {cells} make datasets only shown, at a global batch the ranks cannot split: "
                "times RANK_SIZE, so that each rank shows as many samples as one card did",
                len(shown),
            ).format(cells=cells)
        note = sizes_note + _even_cut_note(context, facts, source)
        context.shard_fix_splits_batch |= batch is not None
        return self.finding(
            cell, facts, source.node,
            _("every rank reads the same data: {how}{split}{note}").format(how=how, split=split, note=note), edits,
        )

    def _shard_training_split(self, context, cell, facts: CellFacts, load: CallSite) -> Finding:
        """``tfds.load`` returning splits together (a dict, a list, with its info): the training split
        is sharded where it comes out, and its batch split (issue 34)."""
        splits = training_splits(context, load)
        if not splits:
            return self.finding(cell, facts, load.node, _(
                "every rank reads the same data: this tfds.load returns several splits together and which one "
                "trains could not be told: shard the training split with .shard(RANK_SIZE, RANK_ID) where it is "
                "taken out, and split its global batch across ranks"), [])
        shards, adapt_edits, adapt_cells, by_hand_cells = [], [], [], []
        for split in splits:
            whole = whole_for_adapt(context, split, holders(context.facts, split) | {split.expression},
                                    (cell, load.stmt.end_lineno), load.function)
            if whole is not None and whole.twin is None:
                by_hand_cells += whole.cells
            elif whole is not None:
                shards.append(f"{whole.twin} = {split.expression}")
                adapt_edits += whole.edits
                adapt_cells += whole.cells
            shards.append(f"{split.expression} = {split.expression}.shard({K.RANK_SIZE_EXPR}, {K.RANK_ID_EXPR})")
        edits = [insert_after(cell, facts, load.stmt, "\n".join(shards), [NEEDS_OS])] + adapt_edits
        seeded = files_shuffled_alike(context, load)
        if seeded is not None:
            edits.append(add_argument(cell, facts, load.node, seeded))
        batch_edits: List[Edit] = []
        sizes_note = ""
        size = load.keyword("batch_size")
        horovod = context.facts.imports_module("horovod")  # Horovod's batch is per rank already: kept
        if not horovod and size is not None:
            if global_batch_value(context, size.value) != -1:
                batch_edits = _divided(context, cell, facts, size.value, K.RANK_SIZE_EXPR, [NEEDS_OS])
        elif not horovod:
            for split in splits:
                names = holders(context.facts, split)
                found = first_batch(context, names, (cell, load.stmt.end_lineno), split.subscript)
                batch_size = _batch_argument(found[2]) if found is not None else None
                if batch_size is not None:
                    divided = _divided(context, found[0], found[1], batch_size, K.RANK_SIZE_EXPR, [NEEDS_OS])
                    batch_edits += divided
                    if divided:
                        sizes = per_rank_sizes(context, batch_size, _per_rank(batch_size), loops_over(context, names),
                                               [NEEDS_OS])
                        batch_edits += sizes
                        sizes_note += _sizes_note(sizes)
        context.shard_fix_splits_batch |= bool(batch_edits)
        return self.finding(
            cell, facts, load.node,
            _("every rank reads the same data: this tfds.load returns several splits together, so shard the "
              "training one where it comes out ({split}){batch}").format(
                split=", ".join(split.expression for split in splits),
                batch=_(", and split its global batch across ranks") if batch_edits else "")
            + (_("; its files are shuffled with seed {seed} on every rank (each rank's own file order before "
                 "the shard gives ranks overlapping samples)").format(seed=K.SHARED_SEED) if seeded else "")
            + sizes_note
            + (_("; the adapt in cell {cells} reads the whole split, so that every rank adapts alike (adapted on "
                 "its shard, each rank would give a word its own id)").format(
                    cells=", ".join(map(str, sorted(set(adapt_cells))))) if adapt_cells else "")
            + (_("; the adapt in cell {cells} reads this rank's shard, in a scope the fix cannot reach: adapt on the "
                 "whole training split by hand (adapted on its shard, each rank would give a word its own id)").format(
                    cells=", ".join(map(str, sorted(set(by_hand_cells))))) if by_hand_cells else ""),
            edits + batch_edits,
        )

    def _shard_by_rank(self, context, cell, facts: CellFacts, shard: CallSite, batch: Optional[CallSite]) -> Finding:
        """``.shard(2, 0)`` splits alike on every rank: its arguments become the rank's (as the
        vendor's TF1 tool rewrites them), rather than a second shard in front of it."""
        count, index = shard.argument(0, "num_shards"), shard.argument(1, "index")
        edits = [replace(cell, facts, count, K.RANK_SIZE_EXPR, [NEEDS_OS]),
                 replace(cell, facts, index, K.RANK_ID_EXPR, [NEEDS_OS])]
        size = _batch_argument(batch) if batch is not None else None
        if size is not None:
            edits += _divided(context, cell, facts, size, K.RANK_SIZE_EXPR, [NEEDS_OS])
            context.shard_fix_splits_batch = True
        split = _(", and split the global batch across ranks") if size is not None else ""
        return self.finding(
            cell, facts, shard.node,
            _("every rank reads the same data: this .shard({count}, {index}) takes the same part on every rank: "
              "shard by RANK_SIZE and RANK_ID{split}").format(
                count=facts.segment(count), index=facts.segment(index), split=split), edits,
        )

    # -- Keras utilities that batch (and shuffle) by themselves
    def _shard_batched_source(self, context, cell, facts: CellFacts, source: CallSite) -> Finding:
        default_batch, _shuffles = K.BATCHED_SOURCE_DEFAULTS[source.method]
        size = batch_size_of(source)
        global_batch = facts.segment(size) if size is not None else str(default_batch)
        value = global_batch_value(context, size) if size is not None else default_batch
        if value is not None and value < context.options.ranks:
            per_rank = global_batch  # too small to split (batch-not-divisible says so): each rank keeps it
        else:
            per_rank = (global_batch if size is None or _is_simple(size) else f"({global_batch})") \
                + f" // {K.RANK_SIZE_EXPR}"
        call = with_shared_seed(facts, source) if needs_shared_seed(source) else facts.segment(source.node)
        code = f"{call}.unbatch().shard({K.RANK_SIZE_EXPR}, {K.RANK_ID_EXPR}).batch({per_rank})"
        context.shard_fix_splits_batch = True
        return self.finding(
            cell, facts, source.node,
            _("every rank reads the same data: {method} returns whole batches, so unbatch, take this "
              "rank's shard and batch its part of the global batch{seed_note}").format(
                method=source.method,
                seed_note=_("; its shuffle gets seed={seed}, the same on every rank (a different shuffle per rank "
                            "before the shard gives ranks overlapping samples)").format(seed=K.SHARED_SEED)
                if needs_shared_seed(source) else ""),
            [replace(cell, facts, source.node, code, [NEEDS_OS])],
        )

    # -- Keras ImageDataGenerator iterators (keras.utils.Sequence of batches)
    def _shard_image_generators(self, context) -> List[Finding]:
        findings: List[Finding] = []
        defined = False
        for cell, facts, site in _image_generator_flows(context):
            per_rank = f"{K.RANK_SIZE_EXPR}"
            size = site.keyword("batch_size")
            if size is not None:
                edits = [replace_with(cell, facts, site.node, RANK_BATCHES + "({flow})", [NEEDS_OS], flow=site.node),
                         *_divided(context, cell, facts, size.value, per_rank, [NEEDS_OS])]
            else:
                default_batch, _shuffles = K.IMAGE_GENERATOR_FLOWS[site.method]
                flow = with_last_argument(facts, site, f"batch_size={default_batch} // {per_rank}")
                edits = [replace(cell, facts, site.node, f"{RANK_BATCHES}({flow})", [NEEDS_OS])]
            if not defined:
                top = top_level_statement(facts, site.stmt) or site.stmt
                edits.append(insert_before(cell, facts, top, rank_batches_class(keras_prefix(context)), [NEEDS_OS]))
                defined = True
            context.shard_fix_splits_batch = True
            findings.append(self.finding(
                cell, facts, site.node,
                _("every rank reads the same images: {method} gives whole batches; make them per-rank batches "
                  "and give each rank its part of every global batch ({sequence}: batch i * RANK_SIZE + RANK_ID, "
                  "one sample order on every rank)").format(method=site.method, sequence=RANK_BATCHES), edits,
            ))
        return findings

    # -- TF1 sessions fed by offset from numpy arrays: ``x[offset:(offset + batch_size)]`` into feed_dict
    def _shard_fed_arrays(self, context) -> List[Finding]:
        findings: List[Finding] = []
        loops = set()
        for cell, facts, site in context.facts.calls("run"):
            if site.keyword("feed_dict") is None and len(site.node.args) < 2:
                continue
            loop = _enclosing_loop(facts, site.node)
            if loop is None or id(loop) in loops:
                continue
            loops.add(id(loop))
            slices = [node for node in _offset_slices(loop) if not _is_placeholder(context, node.value.id)]
            if slices:
                findings.append(self._shard_feed(context, cell, facts, loop, slices))
                continue
            feed = _training_feed(context, site, loop)
            fed = {value.id for value in feed.values if isinstance(value, ast.Name)} if feed is not None else set()
            picked = _helper_batches_trained_on(context, facts, loop, lambda fed=fed: fed) if isinstance(loop, ast.For) else []
            found = self._shard_helper_arguments(context, cell, facts, loop, [c for c, _i, _u in picked]) \
                if picked else None
            if found is not None:
                findings.append(found)
                continue
            helped = _batch_helper_calls(context, facts, site, loop)
            if helped:
                findings.append(self._shard_helper_batches(context, cell, facts, loop, helped))
                continue
            whole = _whole_arrays_fed(context, site, loop)
            if whole:
                findings.append(self.finding(cell, facts, whole[0], _(
                    "every rank feeds all of {arrays} each step (full-batch): feed this rank's rows "
                    "(every RANK_SIZE-th from RANK_ID)").format(arrays=", ".join(node.id for node in whole)),
                    [replace(cell, facts, node, f"{node.id}[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]", [NEEDS_OS])
                     for node in whole]))
        return findings

    def _shard_feed(self, context, cell, facts: CellFacts, loop: ast.stmt, slices: List[ast.Subscript]) -> Finding:
        """Each rank steps through its own every-N-th rows (``x[rank_id::rank_size]``) with its part of
        the batch: one card runs as before; N ranks together take a global batch of the same size."""
        arrays = {node.value.id for node in slices}
        rank_rows = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
        size = _batch_size_constant(context, cell, loop, slices)
        if size is None:
            return self._split_each_window(context, cell, facts, slices, arrays, rank_rows)
        edits = [replace(cell, facts, node, node.id + _even_rank_rows(node.id), [NEEDS_OS])
                 for node in ast.walk(loop)
                 if isinstance(node, ast.Name) and node.id in arrays and isinstance(node.ctx, ast.Load)]
        if size is not None:
            size_cell, size_facts, value = size
            edits += _divided(context, size_cell, size_facts, value, K.RANK_SIZE_EXPR, [NEEDS_OS])
            context.shard_fix_splits_batch = True
        split = _(", and split the batch size across ranks") if size is not None else ""
        return self.finding(
            cell, facts, slices[0],
            _("every rank feeds the same rows of {arrays}: step through this rank's rows "
              "(every RANK_SIZE-th from RANK_ID){split}").format(arrays=", ".join(sorted(arrays)), split=split)
            + _even_rows_note(), edits,
        )

    def _shard_helper_batches(self, context, cell, facts: CellFacts, loop: ast.stmt, helped) -> Finding:
        """Batches a notebook function picks rows for (``X_batch, y_batch = random_batch(X, y, 50)``,
        ``fetch_batch(epoch, i, batch_size)``): the batch is the global one, and each rank takes every
        RANK_SIZE-th row of it from RANK_ID (the rows are drawn alike on every rank when the notebook
        seeds them; unseeded, each rank still takes its part of a batch of its own)."""
        rows = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
        first = helped[0][0]
        size = _helper_batch_size(context, first)
        value = global_batch_value(context, size) if size is not None else None
        name = ast.unparse(first.func)
        if value is not None and value < context.options.ranks:
            return self.finding(cell, facts, first, _(
                "every rank feeds the same batches {helper}() picks, and a batch of {rows} rows cannot be split "
                "across {ranks} ranks: give each rank its own rows by hand (or check with --ranks N)").format(
                    helper=name, rows=value, ranks=context.options.ranks))
        edits = []
        for call, unpacked in helped:
            pattern = f"[part{rows} for part in {{batch}}]" if unpacked else "{batch}" + rows
            edits.append(replace_with(cell, facts, call, pattern, [NEEDS_OS], batch=call))
        sizes = per_rank_sizes(context, size, _per_rank(size), [(cell, facts, loop)] + graph_cells(context),
                               [NEEDS_OS], batch_sources=[call for call, _unpacked in helped]) if size is not None else []
        context.shard_fix_splits_batch = True
        return self.finding(cell, facts, first, _(
            "every rank feeds the same batches {helper}() picks: each rank takes every RANK_SIZE-th row of each "
            "batch from RANK_ID, its part of the global batch").format(helper=name) + _sizes_note(sizes),
            edits + sizes)

    def _shard_loop_helper_batches(self, context) -> List[Finding]:
        """A TF2 loop drawing each batch from a notebook function that picks rows (``X_batch, y_batch =
        random_batch(X_train, y_train)``, ``for X_batch, y_batch in shuffle_batch(X, y, 50)``: Hands-On ML)
        and training on it (under a tape, through a step function, or ``train_on_batch``)."""
        findings, loops = [], set()
        for cell, facts in context.facts.cells:
            for loop in facts.nodes(ast.For):
                if id(loop) in loops:
                    continue
                calls = _helper_batches_trained_on(context, facts, loop, lambda loop=loop: _names_trained_on(context, loop))
                if not calls:
                    continue
                loops.update(id(inner) for inner in ast.walk(loop) if isinstance(inner, ast.For))
                found = self._shard_helper_arguments(context, cell, facts, loop, [call for call, _i, _u in calls])
                if found is None and all(not iterated for _call, iterated, _unpacked in calls):
                    found = self._shard_helper_batches(context, cell, facts, loop, [(c, u) for c, _i, u in calls])
                if found is not None:
                    findings.append(found)
        return findings

    def _shard_helper_arguments(self, context, cell, facts: CellFacts, loop: ast.stmt,
                                calls: List[ast.Call]) -> Optional[Finding]:
        """Each helper call given this rank's rows of the arrays it picks from and its part of the batch
        size: each rank picks its own rows, seeded alike or not (a batch of the global one's rows, split
        after, would repeat rows across ranks when each rank draws its own). None when a call does not
        give the arrays and the batch size where they can be changed."""
        edits = [_rank_rows_given_to(context, cell, facts, call) for call in calls]
        if not all(edits):
            return None
        size = _helper_batch_size(context, calls[0])
        sizes = per_rank_sizes(context, size, _per_rank(size), [(cell, facts, loop)] + graph_cells(context),
                               [NEEDS_OS], batch_sources=calls) if size is not None else []
        context.shard_fix_splits_batch = True
        return self.finding(cell, facts, calls[0], _(
            "every rank trains on the same batches {helper}() picks: give it this rank's rows of the arrays "
            "(every RANK_SIZE-th from RANK_ID) and its part of the batch size").format(
                helper=calls[0].func.id) + _sizes_note(sizes), [edit for found in edits for edit in found] + sizes)

    def _shard_rule_windows(self, context) -> List[Finding]:
        """The windows a learning rule computes its updates from (``batch = X[start:end]``): each rank
        takes every RANK_SIZE-th row of each, its part of the global batch; the loop over the windows
        stays as it is, so every rank takes the same number of steps."""
        findings, seen = [], set()
        rank_rows = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
        for update in rule_updates(context.facts):
            if id(update.window) in seen:
                continue
            seen.add(id(update.window))
            cell, facts, window = update.cell, update.facts, update.window
            array = facts.segment(window.value)
            length = _window_length(window)
            if length is not None and length < context.options.ranks:
                findings.append(self.finding(cell, facts, window, _(
                    "every rank learns from the same rows of {array}, and a window of {rows} rows cannot be split "
                    "across {ranks} ranks: give each rank its own rows by hand (or check with --ranks N)").format(
                        array=array, rows=length, ranks=context.options.ranks)))
                continue
            context.shard_fix_splits_batch = True
            findings.append(self.finding(cell, facts, window, _(
                "every rank learns from the same rows of {array}: each rank takes every RANK_SIZE-th row of each "
                "window from RANK_ID, its part of the global batch").format(array=array),
                [replace_with(cell, facts, window, "{window}" + rank_rows, [NEEDS_OS], window=window)]))
        return findings

    def _shard_tf1_mnist_batches(self, context) -> List[Finding]:
        """``batch_x, batch_y = mnist.train.next_batch(100)`` of TensorFlow 1's MNIST loader: every rank
        shuffles alike (``read_data_sets(..., seed=...)``: unseeded, each process shuffles its own way)
        and takes every RANK_SIZE-th row of each global batch from RANK_ID, its part of it."""
        loads = {}
        for cell, facts, site in context.facts.calls_to(K.TF1_MNIST_READ_DATA_SETS):
            target = single_target(site.stmt)
            if target is not None and getattr(site.stmt, "value", None) is site.node:
                loads[target] = (cell, facts, site)
        findings, seeded = [], set()
        for cell, facts, site in context.facts.calls("next_batch"):
            receiver = site.receiver
            if not (isinstance(receiver, ast.Attribute) and receiver.attr == "train"
                    and isinstance(receiver.value, ast.Name) and receiver.value.id in loads):
                continue
            size = site.argument(0, "batch_size")
            value = global_batch_value(context, size) if size is not None else None
            if value is not None and value < context.options.ranks:
                findings.append(self.finding(cell, facts, site.node, _(
                    "every rank reads the same batches, and a batch of {rows} rows cannot be split across {ranks} "
                    "ranks: give each rank its own rows by hand (or check with --ranks N)").format(
                        rows=value, ranks=context.options.ranks)))
                continue
            rows = f"[part[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}] for part in {{batch}}]"
            edits = [replace_with(cell, facts, site.node, rows, [NEEDS_OS], batch=site.node)]
            loop = _enclosing_loop(facts, site.node)
            sizes = per_rank_sizes(context, size, _per_rank(size), [(cell, facts, loop)] + graph_cells(context),
                                   [NEEDS_OS]) if loop else []
            edits += sizes
            l_cell, l_facts, load = loads[receiver.value.id]
            if load.keyword("seed") is None and receiver.value.id not in seeded:
                edits.append(add_argument(l_cell, l_facts, load.node, f"seed={K.SHARED_SEED}"))
                seeded.add(receiver.value.id)
            context.shard_fix_splits_batch = True
            findings.append(self.finding(cell, facts, site.node, _(
                "every rank reads the same batches: the loader shuffles with seed {seed} on every rank, and each "
                "rank takes every RANK_SIZE-th row of each batch from RANK_ID, its part of the global batch").format(
                    seed=K.SHARED_SEED) + _sizes_note(sizes), edits))
        return findings

    def _split_each_window(self, context, cell, facts: CellFacts, slices: List[ast.Subscript], arrays, rank_rows: str):
        """Rows fed by offsets that do not come from a batch-size constant (``i = rng.randint(0, 60000 - 100)``,
        ``X[i:i + 100]``): the arrays keep their length, so the offsets stay valid, and each rank takes every
        RANK_SIZE-th row of the window, its part of the global batch (slicing the arrays instead would leave
        half the offsets past the end of a rank's rows: empty batches)."""
        lengths = {_window_length(node) for node in slices}
        if any(length is not None and length < context.options.ranks for length in lengths):
            return self.finding(
                cell, facts, slices[0],
                _("every rank feeds the same rows of {arrays}, and a window of {rows} rows cannot be split across "
                  "{ranks} ranks: give each rank its own rows by hand (or check with --ranks N)").format(
                    arrays=", ".join(sorted(arrays)), rows=min(length for length in lengths if length is not None),
                    ranks=context.options.ranks))
        edits = [replace_with(cell, facts, node, "{window}" + rank_rows, [NEEDS_OS], window=node) for node in slices]
        context.shard_fix_splits_batch = True
        return self.finding(
            cell, facts, slices[0],
            _("every rank feeds the same rows of {arrays}: each rank takes every RANK_SIZE-th row of each fed "
              "window from RANK_ID, its part of the global batch").format(arrays=", ".join(sorted(arrays))), edits,
        )

    # -- numpy arrays given to fit
    def _shard_numpy_input_fns(self, context) -> List[Finding]:
        """``tf.compat.v1.estimator.inputs.numpy_input_fn(x={...}, y=..., batch_size=B)``: each rank
        its every N-th row of every array, and its share of the batch."""
        findings = []
        for cell, facts, site in context.facts.calls_to(*K.NUMPY_INPUT_FNS):
            if _for_evaluation(facts, site):
                continue
            arrays = [leaf for argument in (site.argument(0, "x"), site.argument(1, "y")) if argument is not None
                      for leaf in _array_leaves(argument)]
            if arrays and all(leaf is not None and _names_evaluation_data(leaf) for leaf in arrays):
                continue  # ``x={'images': mnist.test.images}``: an evaluation input, whatever its name
            if not arrays or any(leaf is None for leaf in arrays):
                findings.append(self.finding(cell, facts, site.node, _(
                    "every rank reads all the arrays of this input_fn: give each rank every N-th row "
                    "(x[RANK_ID::RANK_SIZE]) and split the batch size across ranks (slice each array by hand)")))
                continue
            message = _("every rank reads all the arrays of this input_fn: give each rank every N-th row "
                        "(x[RANK_ID::RANK_SIZE]) and split the batch size across ranks") + _even_rows_note()
            rank_slice = _even_rank_rows(_rows_counted_by(facts, arrays, site.argument(1, "y")))
            edits = [_sliced(cell, facts, array, rank_slice, [NEEDS_OS]) for array in arrays]
            batch_size = site.keyword("batch_size")
            if batch_size is not None:
                edits += _divided(context, cell, facts, batch_size.value, K.RANK_SIZE_EXPR, [NEEDS_OS])
            else:
                default = K.NUMPY_INPUT_FNS[context.facts.resolve(site.dotted)]
                edits.append(add_argument(cell, facts, site.node, f"batch_size={default} // {K.RANK_SIZE_EXPR}",
                                          [NEEDS_OS]))
            context.shard_fix_splits_batch = True
            findings.append(self.finding(cell, facts, site.node, message, edits))
        return findings

    def _shard_returned_inputs(self, context) -> List[Finding]:
        """``def train_input_fn(): ...; return features, labels`` of literal columns, no dataset: the
        Estimator reads the same tensors every step, so each rank returns its every N-th row of each."""
        findings = []
        done = set()
        for _cell, _facts, site in context.facts.calls("train"):
            input_fn = site.argument(0, "input_fn")
            if not isinstance(input_fn, ast.Name) or input_fn.id in done:
                continue
            found = context.facts.function(input_fn.id)
            if found is None:
                continue
            cell, facts, function = found
            parts = _returned_columns(context, function)
            if not parts:
                continue
            done.add(input_fn.id)
            rank_slice = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
            edits = [_each_column_sliced(cell, facts, part, is_dict, rank_slice) for part, is_dict in parts]
            findings.append(self.finding(cell, facts, function, _(
                "every rank reads all the rows this input_fn returns: give each rank every N-th row of each "
                "feature and of the labels"), edits))
        return findings

    def _shard_full_batch(self, context) -> List[Finding]:
        """Arrays the steps read whole, with no dataset or feed: each rank keeps its rows where they are
        made (``X = X[rank_id::rank_size]`` right after ``X = np.array([...])``)."""
        arrays = full_batch_arrays(context)
        if not arrays:
            return []
        rank_slice = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
        edits = [insert_after(array.cell, array.facts, array.stmt, f"{array.name} = {array.name}{rank_slice}", [NEEDS_OS])
                 for array in arrays]
        edits += [replace_with(cell, facts, read, "{read}" + rank_slice, [NEEDS_OS], read=read)
                  for cell, facts, read in whole_reads_beside_rank_outputs(context, arrays)]
        first = arrays[0]
        return [self.finding(first.cell, first.facts, first.stmt, _(
            "every rank trains on all of {names}, read whole by the training step (full-batch): give each rank its "
            "rows ({name}[rank_id::rank_size]) where they are made").format(
                names=", ".join(array.name for array in arrays), name=first.name), edits)]

    def _shard_arrays(self, context) -> Iterator[Finding]:
        rank_lines = {}  # (cell, function) -> the statements the rank line was written before
        for cell, facts, site in context.facts.keras_fits("fit"):
            x = site.argument(0, "x")
            y = site.argument(1, "y")
            if x is None or receiver_name(site) is None:
                continue
            if y is None and not _numpy_array(context, x):
                continue  # a dataset, a generator or a Sequence: their own shard
            weights = site.argument(10, "sample_weight")  # per sample, sliced with the samples
            arrays = [leaf for part in (x, y, weights) if part is not None for leaf in _array_leaves(part)]
            if any(leaf is None for leaf in arrays) or _bound_to_a_container(context, x):
                yield self.finding(cell, facts, x, _(
                    "every rank trains on all the arrays: give each rank every N-th sample "
                    "(x[rank_id::rank_size]) and split the batch size across ranks "
                    "(slice each input array; not done automatically here)"))
                continue
            message = _(
                "every rank trains on all the arrays: give each rank every N-th sample "
                "(x[rank_id::rank_size]) and split the batch size across ranks"
            ) + _even_rows_note()
            written_before = rank_lines.setdefault((cell, site.function), [])
            # A fit in another branch (``if ...: fit(a) else: fit(b)``) or before the line is not reached
            # through it: it gets its own line, or it would read rank_id unbound.
            define_rank = not any(_runs_before(facts, stmt, site.stmt) for stmt in written_before)
            context.shard_fix_splits_batch = True
            edits = _array_edits(context, cell, facts, site, arrays, define_rank=define_rank)
            if define_rank:
                written_before.append(site.stmt)
            yield self.finding(cell, facts, x, message, edits)


def _returned_columns(context, function: ast.AST) -> List[Tuple[ast.expr, bool]]:
    """The parts of ``return features, labels`` in an input_fn that makes no dataset, each with whether
    it is a dict of columns; [] when a part is not a literal's or an array's name (not safely sliced)."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    returns = [node for node in ast.walk(function) if isinstance(node, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, ast.Tuple) or len(returns[0].value.elts) != 2:
        return []
    calls = [node for node in ast.walk(function) if isinstance(node, ast.Call)]
    if any(context.facts.resolve(dotted_name(call.func)) in K.DATASET_SOURCES for call in calls):
        return []
    parts = []
    for part in returns[0].value.elts:
        value = part
        if isinstance(part, ast.Name):
            bound = [node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == part.id for t in node.targets)]
            if len(bound) != 1:
                return []
            value = bound[0]
        if isinstance(value, ast.Dict) and all(key is not None for key in value.keys) \
                and all(isinstance(column, (ast.List, ast.Tuple)) for column in value.values):
            parts.append((part, True))
        elif isinstance(value, (ast.List, ast.Tuple)) and _is_samples(value):
            parts.append((part, False))
        else:
            return []
    return parts


def _each_column_sliced(cell, facts: CellFacts, part: ast.expr, is_dict: bool, rank_slice: str) -> Edit:
    if is_dict:
        pattern = "{{key: column" + rank_slice + " for key, column in {part}.items()}}"
        return replace_with(cell, facts, part, pattern, [NEEDS_OS], part=part)
    return _sliced(cell, facts, part, rank_slice, [NEEDS_OS])


_ARRAY_METHODS = frozenset({"astype", "reshape", "copy", "transpose"})


def _numpy_array(context, node: ast.expr, depth: int = 6) -> bool:
    """Is ``node`` a NumPy array, as far as its last binding shows (``np.expand_dims(x, -1).astype(
    "float32") / 255``, a ``load_data()`` result)? ``fit(x)`` without labels is given arrays (an
    autoencoder's inputs) or a dataset; only arrays are sliced per rank."""
    if depth == 0 or node is None:
        return False
    if isinstance(node, ast.Name):
        found = [(a.value, a.tuple_target) for _c, _f, a in context.facts.assignments(node.id) if a.function is None]
        if not found:
            return False
        value, from_tuple = found[-1]
        if from_tuple:
            return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "load_data"
        return _numpy_array(context, value, depth - 1)
    if isinstance(node, ast.Call):
        name = context.facts.resolve(dotted_name(node.func))
        if name.startswith("numpy."):
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr in _ARRAY_METHODS:
            return _numpy_array(context, node.func.value, depth - 1)
        return False
    if isinstance(node, ast.BinOp):
        return _numpy_array(context, node.left, depth - 1) or _numpy_array(context, node.right, depth - 1)
    if isinstance(node, ast.Subscript):
        return _numpy_array(context, node.value, depth - 1)
    return False


def _image_generator_flows(context) -> Iterator:
    """``ImageDataGenerator(...).flow_from_directory(...)`` (or ``.flow``, ``.flow_from_dataframe``)
    whose iterator fit trains on: given to fit, or the last binding of the name fit is given. Other
    uses (``next(...)``, a ``from_generator`` of a fixed batch shape) keep the iterator as it is."""
    generators = set()
    for _cell, _facts, site in context.facts.calls_to(K.IMAGE_DATA_GENERATOR):
        target = single_target(site.stmt) if getattr(site.stmt, "value", None) is site.node else None
        if target is not None:
            generators.add(target)
    flows = [found for found in context.facts.calls(*K.IMAGE_GENERATOR_FLOWS) if _on_a_generator(context, found[2], generators)]
    trained = set()
    for fit_cell, _fit_facts, fit in context.facts.keras_fits(*K.KERAS_FIT_METHODS):
        x = fit.argument(0, "x")
        before = [found for found in flows if (found[0], found[2].node.lineno) < (fit_cell, fit.node.lineno)]
        if isinstance(x, ast.Name):
            bound = [found for found in before if single_target(found[2].stmt) == x.id
                     and getattr(found[2].stmt, "value", None) is found[2].node]
            if bound:
                trained.add(id(bound[-1][2]))
        trained |= {id(found[2]) for found in flows if found[2].node is x}
    for cell, facts, site in flows:
        if id(site) in trained and not _for_evaluation(facts, site) and not _already_rank_batches(site):
            yield cell, facts, site


def _on_a_generator(context, site: CallSite, generators) -> bool:
    receiver = site.receiver
    if isinstance(receiver, ast.Call):
        return context.facts.resolve(dotted_name(receiver.func)) == K.IMAGE_DATA_GENERATOR
    return receiver_name(site) in generators


def _already_rank_batches(site: CallSite) -> bool:
    outer = site.argument_of
    return outer is not None and outer.dotted == RANK_BATCHES


def _called_by(context, functions) -> set:
    """Names of the functions that these functions call (a dataset function's pipeline helper)."""
    called = set()
    for name in functions:
        found = context.facts.function(name)
        if found is not None:
            called |= {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                       for node in ast.walk(found[2])
                       if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))}
    return {name for name in called - set(functions) if context.facts.function(name) is not None}


def _enclosing_loop(facts: CellFacts, node: ast.AST) -> Optional[ast.stmt]:
    """The innermost ``for``/``while`` loop of the cell around ``node``."""
    loops = [loop for loop in facts.nodes(ast.For, ast.While)
             if loop.lineno <= node.lineno and node.end_lineno <= loop.end_lineno and loop is not node]
    return max(loops, key=lambda loop: loop.lineno, default=None)


def _offset_slices(loop: ast.stmt) -> List[ast.Subscript]:
    """``x[offset:(offset + batch_size), :]``: rows of an array named ``x`` between two computed bounds."""
    found = []
    for node in ast.walk(loop):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            continue
        if not isinstance(node.ctx, ast.Load):
            continue  # written, not fed: ``canvas[i * 28:(i + 1) * 28, ...] = image`` (found on TensorFlow-Examples)
        rows = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) and node.slice.elts else node.slice
        if isinstance(rows, ast.Slice) and rows.step is None and all(
            bound is not None and not isinstance(bound, ast.Constant) for bound in (rows.lower, rows.upper)
        ):
            found.append(node)
    return found


def _whole_arrays_fed(context, site: CallSite, loop: ast.stmt) -> List[ast.Name]:
    """The names a training loop's ``session.run`` feeds whole each step (``feed_dict={x: x_train, y:
    y_train}``, a full-batch regression): arrays made before the loop, not a batch the loop takes nor a
    number (a learning rate, a keep probability)."""
    feed = _training_feed(context, site, loop)
    if feed is None:
        return []
    in_loop = {node.id for node in ast.walk(loop) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    fed = []
    for value in feed.values:
        if not isinstance(value, ast.Name) or value.id in in_loop or _is_placeholder(context, value.id):
            continue
        bound = [a.value for _c, _f, a in context.facts.assignments(value.id) if a.function is None]
        number = bound and isinstance(bound[-1].operand if isinstance(bound[-1], ast.UnaryOp) else bound[-1], ast.Constant)
        if bound and not number:
            fed.append(value)
    return fed


def _batch_helper_calls(context, facts: CellFacts, site: CallSite, loop: ast.stmt) -> List[Tuple[ast.Call, bool]]:
    """(call, unpacked) for each call in ``loop`` of a notebook function that returns rows of arrays
    (``return X[idx], y[idx]``) whose result the training ``site`` feeds: ``unpacked`` when it is bound
    to a tuple of names."""
    feed = _training_feed(context, site, loop)
    if feed is None:
        return []
    fed = {value.id for value in feed.values if isinstance(value, ast.Name)}
    found, seen = [], set()
    for stmt in ast.walk(loop):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
            continue
        target, call = stmt.targets[0], stmt.value
        names = [e.id for e in target.elts if isinstance(e, ast.Name)] if isinstance(target, ast.Tuple) else \
            [target.id] if isinstance(target, ast.Name) else []
        if not set(names) & fed or id(call) in seen or not _returns_rows(context, call):
            continue
        seen.add(id(call))
        found.append((call, isinstance(target, ast.Tuple)))
    return found


def _rank_rows_given_to(context, cell: int, facts: CellFacts, call: ast.Call) -> List[Edit]:
    """The edits giving the helper ``call`` this rank's rows of each array it picks from, and its part of
    the batch size (``random_batch(X[rank_id::rank_size], y[...], batch_size=32 // rank_size)``); [] when
    an array or the batch size (or its default) is not given by the call."""
    helper = context.facts.called_function(call)
    if helper is None or any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return []
    _facts, function, parameters = helper
    given = {parameters[i]: argument for i, argument in enumerate(call.args[:len(parameters)])}
    given.update({k.arg: k.value for k in call.keywords})
    picked = _rows_picked(function)
    size = next((name for name in parameters if name == "batch_size" or name.endswith("_batch_size")), None)
    if not picked or not picked <= set(given) or size is None:
        return []
    rows = f"[{K.RANK_ID_EXPR}::{K.RANK_SIZE_EXPR}]"
    edits = [replace_with(cell, facts, given[name], ("{array}" if _is_simple(given[name]) else "({array})") + rows,
                          [NEEDS_OS], array=given[name]) for name in sorted(picked)]
    if size in given:
        divided = _divided(context, cell, facts, given[size], K.RANK_SIZE_EXPR, [NEEDS_OS])
        return edits + divided if divided else []
    defaults = dict(zip(parameters[len(parameters) - len(function.args.defaults):], function.args.defaults))
    if size not in defaults:
        return []
    return edits + [add_argument(cell, facts, call, f"{size}={ast.unparse(defaults[size])} // {K.RANK_SIZE_EXPR}",
                                 [NEEDS_OS])]


def _rows_picked(function: ast.FunctionDef) -> Set[str]:
    """The names whose rows every value the function returns or yields is (``return X[idx], y[idx]``,
    ``X_batch, y_batch = X[batch_idx], y[batch_idx]`` then ``yield X_batch, y_batch``); empty when a
    value is anything else."""
    bound = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                bound[target.id] = value
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                bound.update({t.id: v for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name)})
    given = [node.value for node in ast.walk(function)
             if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None]
    parts = [part for value in given for part in (value.elts if isinstance(value, ast.Tuple) else [value])]
    picked = set()
    for part in parts:
        value = bound.get(part.id, part) if isinstance(part, ast.Name) else part
        if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                and not isinstance(value.slice, (ast.Constant, ast.Slice))):
            return set()
        picked.add(value.value.id)
    return picked


def _helper_batches_trained_on(context, facts: CellFacts, loop: ast.For, trained) -> List[Tuple[ast.Call, bool, bool]]:
    """(call, iterated, unpacked) for each call in ``loop`` of a notebook function (or method) picking rows whose
    results the loop trains on (``trained()``, the names, asked only when a helper call is there): bound
    by an assignment (to a tuple of names: ``unpacked``), or iterated by the loop itself or one in it."""
    found, names_trained = [], None
    for target, call, iterated in _calls_bound_in(loop):
        helper = context.facts.called_function(call)
        if helper is None:
            continue
        # A generator iterated yields rows of arrays it is given (each rank can be given its own); a call
        # returns rows of those or of arrays it reads itself (a method's ``self.x_train[idx]``: each rank
        # then takes its part of the batch returned).
        if not (_rows_picked(helper[1]) if iterated else _returns_rows(context, call)):
            continue
        names_trained = trained() if names_trained is None else names_trained
        if {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} & names_trained:
            found.append((call, iterated, isinstance(target, ast.Tuple)))
    return found


@once_per_object
def _calls_bound_in(loop: ast.For) -> List[Tuple[ast.expr, ast.Call, bool]]:
    """(target, call, iterated) for each ``target = call(...)`` and ``for target in call(...)`` in ``loop``
    (itself included), in ``ast.walk``'s order."""
    found = []
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, call, iterated = node.targets[0], node.value, False
        elif isinstance(node, ast.For):
            target, call, iterated = node.target, node.iter, True
        else:
            continue
        if isinstance(call, ast.Call):
            found.append((target, call, iterated))
    return found


def _names_trained_on(context, loop: ast.stmt) -> Set[str]:
    names: Set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call)
                and context.facts.resolve(dotted_name(item.context_expr.func) or "") == K.GRADIENT_TAPE
                for item in node.items):
            names |= {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "train_on_batch")
                or (isinstance(node.func, ast.Name) and _takes_a_gradient_step(context, node.func.id))):
            names |= {n.id for argument in [*node.args, *(k.value for k in node.keywords)]
                      for n in ast.walk(argument) if isinstance(n, ast.Name)}
    return names


def _takes_a_gradient_step(context, function: str) -> bool:
    """Does the notebook function take a gradient step (``tape.gradient``, ``apply_gradients``, ``minimize``)?"""
    found = context.facts.function(function)
    if found is None:
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("gradient", "apply_gradients", "minimize") for node in ast.walk(found[2]))


def _returns_rows(context, call: ast.Call) -> bool:
    """Is ``call`` a call of the notebook's function whose every returned value is rows of an array
    (``X[indices]``), directly or through a name it binds so?"""
    returns = context.facts.returned_values(call) or []
    parts = [part for value in returns for part in (value.elts if isinstance(value, ast.Tuple) else [value])]
    values = [context.facts.returned_through_bindings(call, part) for part in parts]
    return bool(values) and all(isinstance(v, ast.Subscript) and not isinstance(v.slice, ast.Constant) for v in values)


def _helper_batch_size(context, call: ast.Call) -> Optional[ast.expr]:
    """What ``call`` gives its function's batch-size parameter (named ``batch_size`` or ``*_size``)."""
    found = context.facts.called_function(call)
    if found is None:
        return None
    for position, parameter in enumerate(found[2]):
        if parameter == "batch_size" or parameter.endswith("batch_size"):
            if position < len(call.args):
                return call.args[position]
            return next((k.value for k in call.keywords if k.arg == parameter), None)
    return None


def _training_feed(context, site: CallSite, loop: ast.stmt) -> Optional[ast.Dict]:
    """The ``feed_dict`` display of a ``session.run`` in ``loop`` that runs a training op, else None; a
    name the loop binds to a display before the run (``feed_dict_train = {x: x_batch}``) is read as it."""
    feed = site.keyword("feed_dict")
    feed = feed.value if feed is not None else (site.node.args[1] if len(site.node.args) > 1 else None)
    if isinstance(feed, ast.Name):
        bound = [node.value for node in ast.walk(loop) if isinstance(node, ast.Assign) and len(node.targets) == 1
                 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == feed.id
                 and node.lineno < site.node.lineno]
        feed = max(bound, key=lambda value: value.lineno) if bound else None
    return feed if isinstance(feed, ast.Dict) and _runs_a_training_op(context, site) else None


def _runs_a_training_op(context, site: CallSite) -> bool:
    """Does ``session.run(fetches, ...)`` (or ``train_op.run(...)``) run an op that ``minimize`` or
    ``apply_gradients`` made? An evaluation on the whole validation set in the same loop does not train."""
    fetched = [site.node.func.value] if site.receiver is not None and not site.node.args else []
    fetches = site.argument(0, "fetches")
    fetched += [fetches] if fetches is not None else []
    for name in {node.id for part in fetched for node in ast.walk(part) if isinstance(node, ast.Name)}:
        for _cell, _facts, assignment in context.facts.assignments(name):
            calls = [node for node in ast.walk(context.facts.held_value(assignment)) if isinstance(node, ast.Call)]
            if any(isinstance(call.func, ast.Attribute) and call.func.attr in ("minimize", "apply_gradients")
                   for call in calls):
                return True
    return False


def _window_length(node: ast.Subscript) -> Optional[int]:
    """100 for ``x[i:i + 100]``; None when the bounds do not say."""
    rows = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
    upper, lower = rows.upper, rows.lower
    if (isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add) and ast.dump(upper.left) == ast.dump(lower)
            and int_literal(upper.right) is not None):
        return int_literal(upper.right)
    return None


def _is_placeholder(context, name: str) -> bool:
    return any(
        isinstance(assignment.value, ast.Call)
        and context.facts.resolve(dotted_name(assignment.value.func)) == "tensorflow.placeholder"
        for _cell, _facts, assignment in context.facts.assignments(name)
    )


def _batch_size_constant(context, cell: int, loop: ast.stmt, slices: List[ast.Subscript]):
    """(cell, facts, value) of the last module-level ``batch_size = 128`` before the loop that a slice's
    upper bound (``offset + batch_size``) reads, or None."""
    for node in slices:
        rows = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
        names = [name.id for name in ast.walk(rows.upper) if isinstance(name, ast.Name)]
        for name in names:
            found = [
                (c, f, a.value) for c, f, a in context.facts.assignments(name)
                if a.function is None and not a.tuple_target and int_literal(a.value) is not None
                and (c < cell or (c == cell and a.stmt.lineno < loop.lineno))
            ]
            if found:
                return found[-1]
    return None


def _loads_whole_split(context, site: CallSite) -> bool:
    """``tfds.load(..., batch_size=-1)``: the whole split as one batch of tensors (arrays, sliced where
    they are given to fit); a shard of its single element would give it all to rank 0."""
    if context.facts.resolve(site.dotted) != "tensorflow_datasets.load":
        return False
    size = site.keyword("batch_size")
    value = size.value if size is not None else None
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
        return isinstance(value, ast.Constant) and value.value == 1
    return False


def _io_read_sessions(context) -> Iterator:
    """``read_session.parallel_read_rows()`` of tensorflow_io's BigQuery client: a tf.data dataset."""
    if not context.facts.imports_module("tensorflow_io"):
        return iter(())
    return ((cell, facts, site) for cell, facts, site in context.facts.calls(*K.IO_DATASET_METHODS)
            if site.receiver is not None)


def is_validation_subset(site: CallSite) -> bool:
    subset = site.keyword("subset")
    return subset is not None and isinstance(subset.value, ast.Constant) and subset.value.value == "validation"


def batch_size_of(source: CallSite) -> Optional[ast.expr]:
    """The global batch a batched source is given (by name, or at its place for tf.data's CSV reader)."""
    position = K.BATCH_POSITIONS.get(source.method)
    if position is not None:
        return source.argument(position, "batch_size")
    keyword = source.keyword("batch_size")
    return keyword.value if keyword is not None else None


def seed_keyword(method: str) -> str:
    return K.SEED_KEYWORDS.get(method, "seed")


def needs_shared_seed(source: CallSite) -> bool:
    """A batched source that shuffles (by default or as asked) with a seed of its own per rank."""
    _batch, shuffles = K.BATCHED_SOURCE_DEFAULTS.get(source.method, (None, False))
    shuffle = source.keyword("shuffle")
    if shuffle is not None:
        shuffles = not (isinstance(shuffle.value, ast.Constant) and shuffle.value.value is False)
    return shuffles and source.keyword(seed_keyword(source.method)) is None


def with_shared_seed(facts: CellFacts, call: CallSite) -> str:
    """The call's text with ``seed=<shared seed>`` as its last argument."""
    return with_last_argument(facts, call, f"{seed_keyword(call.method)}={K.SHARED_SEED}")


def with_last_argument(facts: CellFacts, call: CallSite, argument: str) -> str:
    """The call's text with ``argument`` (``name=value``) added last."""
    text = facts.segment(call.node)
    inside = text[:-1].rstrip()
    separator = "" if inside.endswith(("(", ",")) else ", "
    return f"{inside}{separator}{argument})"


ONE_ELEMENT_REASON = N_(
    "the training data is one element repeated (Dataset.from_tensors(...).repeat()): every rank reads the "
    "same sample whatever the split, so there is nothing to shard"
)


def _reads_one_repeated_element(context) -> bool:
    """Every dataset the notebook makes is ``from_tensors`` (one element), and nothing else feeds training
    (no arrays to fit, no other source)."""
    sources = [site for _cell, facts, site in context.facts.calls_to(*K.DATASET_SOURCES) if not _for_evaluation(facts, site)]
    if not sources or any(site.method != "from_tensors" for site in sources):
        return False
    return not any(site.argument(1, "y") is not None for _cell, _facts, site in context.facts.keras_fits("fit"))


NO_DATASET_REASON = N_(
    "no dataset reaches the training: the notebook's datasets only show an API (nothing trains on them), "
    "and what its training steps read was not recognized; if that is data rather than tensors the notebook "
    "makes, give each rank its slice by hand"
)


def _training_reads_no_dataset(context) -> bool:
    """Datasets are made, none reaches the training, and no other input the rule knows is read (arrays
    given to fit, an Estimator's input, a session's feed, Keras' batching utilities)."""
    sources = [site for _cell, facts, site in context.facts.calls_to(*K.DATASET_SOURCES) if not _for_evaluation(facts, site)]
    if not sources or not all(site.method == "from_tensors" or feeds_no_training(context, site) for site in sources):
        return False
    if any(site.receiver is not None or context.facts.function(site.method) is None  # not a notebook's train()
           for _cell, _facts, site in context.facts.keras_fits(*K.KERAS_FIT_METHODS, "train_on_batch", "train", "train_and_evaluate")):
        return False
    if any(context.facts.calls_to(*K.BATCHED_SOURCES)) or any(_image_generator_flows(context)):
        return False
    return not any(site.keyword("feed_dict") is not None or len(site.node.args) > 1
                   for _cell, _facts, site in context.facts.calls("run"))


# Dataset methods that make the samples out of the source's elements (a time series' windows): a
# shard before them would give each rank every N-th time step, so it comes after them.
_SAMPLE_MAKERS = ("window", "flat_map")


def _samples_made_at(facts: CellFacts, source: CallSite, variable: Optional[str]) -> Optional[ast.stmt]:
    """The last ``variable = variable.window(...)`` / ``.flat_map(...)`` statement after the source,
    when the pipeline makes windows (``variable`` keeps the pipeline, statement by statement)."""
    if variable is None or not any(site.method == "window" for site in _pipeline_calls(facts, source, variable)):
        return None
    last = None
    for site in _pipeline_calls(facts, source, variable):
        if site.method in _SAMPLE_MAKERS and single_target(site.chain()[-1].stmt) == variable:
            last = site.chain()[-1].stmt
    return last


def _pipeline_calls(facts: CellFacts, source: CallSite, variable: str) -> List[CallSite]:
    """The calls on ``variable`` after the source, in the source's function, up to its batch."""
    start = source.chain()[-1].stmt.end_lineno
    calls = []
    for site in facts.calls:
        if site.function != source.function or site.node.lineno <= start or chain_root_name(site.receiver) != variable:
            continue
        if site.method in K.BATCH_METHODS:
            break
        calls.append(site)
    return calls


def _feeds_only_inference(facts: CellFacts, source: CallSite) -> bool:
    """Is the pipeline, in its function, given only to ``predict``/``evaluate`` (a forecast, a test
    score), never to training? Each rank would then predict on its part only."""
    top = source.chain()[-1]
    variable = single_target(top.stmt) if top.node is getattr(top.stmt, "value", None) else None
    if variable is None or source.function is None:
        return False
    uses = [site for site in facts.calls if site.function == source.function and site.node.args
            and isinstance(site.node.args[0], ast.Name) and site.node.args[0].id == variable
            and site.method in _INFERENCE_METHODS + K.KERAS_FIT_METHODS + ("train_on_batch",)]
    returned = any(isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id == variable
                   for node in ast.walk(facts.functions.get(source.function) or ast.Module(body=[], type_ignores=[])))
    return bool(uses) and not returned and all(site.method in _INFERENCE_METHODS for site in uses)


_INFERENCE_METHODS = ("predict", "evaluate", "predict_on_batch")


def _names_evaluation_data(node: ast.expr) -> bool:
    """Is the array a test or validation part by its own name (``mnist.test.images``, ``x_test``)?"""
    written = dotted_name(node) or (node.id if isinstance(node, ast.Name) else "")
    return K.named_for_evaluation(written)


def _for_evaluation(facts: CellFacts, site: CallSite) -> bool:
    names = [site.function or ""]
    target = single_target(site.chain()[-1].stmt)
    if target:
        names.append(target)
    return any(K.named_for_evaluation(name) for name in names)


def _batch_of(facts: CellFacts, source: CallSite) -> Optional[CallSite]:
    """The ``.batch(...)`` applied to this pipeline: in its chain, or later on the same variable."""
    for site in source.chain()[1:]:
        if site.method in K.BATCH_METHODS:
            return site
    top = source.chain()[-1]
    variable = single_target(top.stmt)
    if variable is None or top.stmt.value is not top.node:
        return None
    for site in facts.calls_by_method.get("batch", []) + facts.calls_by_method.get("padded_batch", []):
        if site.function == source.function and site.node.lineno > top.stmt.end_lineno and chain_root_name(site.receiver) == variable:
            return site
    return None



def _rank_free_shard_in(context, source: CallSite) -> Optional[CallSite]:
    """A ``.shard(count, index)`` in the source's chain whose index is known not to be a rank value."""
    rank_free = {id(use.node) for use in rank_free_shards(context.facts)}
    return next((site for site in source.chain()[1:] if site.method == "shard" and id(site.node) in rank_free), None)


def _batch_argument(batch: CallSite) -> Optional[ast.expr]:
    return batch.argument(0, "batch_size")


def _env_shard(cell, facts: CellFacts, source: CallSite, batch: Optional[CallSite], context) -> List[Edit]:
    # an even cut first: every rank as many samples, so as many steps
    cut = _even_cut(context, facts, source)
    shard = f"{{source}}{cut[0] if cut else ''}.shard({K.RANK_SIZE_EXPR}, {K.RANK_ID_EXPR})"
    top = source.chain()[-1]
    variable = single_target(top.stmt) if top.node is getattr(top.stmt, "value", None) else None
    windows = _samples_made_at(facts, source, variable)
    if windows is not None:
        edits = [insert_after(cell, facts, windows, f"{variable} = {shard.format(source=variable)}", [NEEDS_OS])]
    else:
        edits = [replace_with(cell, facts, source.node, shard, [NEEDS_OS], source=source.node)]
    size = _batch_argument(batch) if batch is not None else None
    if size is not None:
        edits += _divided(context, cell, facts, size, K.RANK_SIZE_EXPR, [NEEDS_OS])
    return edits


def _even_cut(context, facts: CellFacts, source: CallSite) -> Optional[Tuple[str, str, str]]:
    """(what to append before the shard, what it cuts, how, for a person) so that every rank gets as many samples: a
    shard of 33 windows gives rank 0 seventeen and rank 1 sixteen, and rank 0's last step waits in
    an all-reduce rank 1 never joins, on cards as here. Rows whose count a name holds (a list written
    in the notebook, the labels) are cut with .take; windows (their count unknown to tf.data after flat_map) are grouped by RANK_SIZE with the
    incomplete last group dropped."""
    if _repeated_forever(facts, source):
        return None  # the steps are counted by the training call, the same on every rank
    counted = _samples_named(context, source)
    if counted is not None:
        return (f".take(len({counted}) // {K.RANK_SIZE_EXPR} * {K.RANK_SIZE_EXPR})",
                _("the samples of {name}").format(name=counted), ".take")
    top = source.chain()[-1]
    variable = single_target(top.stmt) if top.node is getattr(top.stmt, "value", None) else None
    if _samples_made_at(facts, source, variable) is not None:
        return (f".batch({K.RANK_SIZE_EXPR}, drop_remainder=True).unbatch()", _("the windows"),
                _(".batch(RANK_SIZE, drop_remainder=True).unbatch(), since tf.data cannot count them"))
    return None


def _repeated_forever(facts: CellFacts, source: CallSite) -> bool:
    """Whether the pipeline made at ``source`` is repeated without a count (``.repeat()``), in its chain
    or on the name it is given, in its scope."""
    top = source.chain()[-1]
    variable = single_target(top.stmt) if top.node is getattr(top.stmt, "value", None) else None
    for site in facts.calls_by_method.get("repeat", []):
        count = site.argument(0, "count")
        if count is not None and not (isinstance(count, ast.Constant) and count.value in (None, -1)):
            continue
        if site in source.chain() or (variable is not None and site.function == source.function
                                      and site.node.lineno >= top.stmt.lineno and chain_root_name(site.receiver) == variable):
            return True
    return False


def _even_cut_note(context, facts: CellFacts, source: CallSite) -> str:
    cut = _even_cut(context, facts, source)
    if cut is None:
        return ""
    return _("; {what} are first cut to a multiple of RANK_SIZE ({how}), so that every rank runs as many steps "
             "(an uneven shard leaves one rank waiting in an all-reduce the other never joins)").format(
        what=cut[1], how=cut[2])


def _samples_named(context, source: CallSite) -> Optional[str]:
    """``from_tensor_slices((features, labels))`` with ``features`` a list written in the notebook
    (TensorFlow's migration guides train on three such rows): the name whose length is the sample
    count. A shard of 3 samples gives rank 0 two and rank 1 one: rank 0's second step waits in an
    all-reduce rank 1 never joins, on cards as here, so the fix cuts the count to a multiple of the
    ranks first."""
    if source.method != "from_tensor_slices":
        return None
    data = source.argument(0, "tensors")
    parts = data.elts if isinstance(data, ast.Tuple) else [data]
    for part in parts:  # ({'type': [...], ...}, labels): the labels' list counts the samples
        if not isinstance(part, ast.Name):
            continue
        bound = [a for _cell, _facts, a in context.facts.assignments(part.id) if a.function is None and not a.tuple_target]
        if bound and all(isinstance(a.value, ast.List) and a.value.elts and _is_samples(a.value) for a in bound):
            return part.id
    return _labels_named(context, source, parts) if isinstance(data, ast.Tuple) else None


def _labels_named(context, source: CallSite, parts: list) -> Optional[str]:
    """``from_tensor_slices((dict(dataframe), labels))``: the labels, last of the tuple, bound in the
    source's scope to rows (an array, a column popped from a table: the field's feature-column labs,
    303 rows as 97 and 96, 7 and 6 steps); never a dict, whose ``len`` counts its keys."""
    labels = parts[-1]
    if len(parts) < 2 or not isinstance(labels, ast.Name):
        return None
    bound = [a for _cell, _facts, a in context.facts.assignments(labels.id) if a.function == source.function]
    if not bound and _top_level_function(context, source.function) and not _local_to(context, source.function, labels.id):
        bound = [a for _cell, _facts, a in context.facts.assignments(labels.id) if a.function is None]  # a global
    if bound and not any(_dict_like(a.value) for a in bound if not a.tuple_target):
        return labels.id
    return None


def _top_level_function(context, name: Optional[str]) -> bool:
    """Whether ``name`` is a function defined at a cell's top level (its free names are the notebook's)."""
    defined = context.facts.function(name) if name is not None else None
    return defined is not None and defined[2] in defined[1].tree.body


def _local_to(context, function: str, name: str) -> bool:
    defined = context.facts.function(function)
    return defined is None or name in function_locals(defined[2])


def _dict_like(value: ast.expr) -> bool:
    return isinstance(value, (ast.Dict, ast.DictComp)) or (
        isinstance(value, ast.Call)
        and (dotted_name(value.func) or "").rsplit(".", 1)[-1] in ("dict", "OrderedDict", "defaultdict"))


def _steps_over(context, source: CallSite, batch: CallSite):
    """The loops iterating the pipeline made at ``source`` (by the names it and its batch are given)."""
    return loops_over(context, _pipeline_holders(context, source, batch))


def _pipeline_holders(context, source: CallSite, batch: CallSite) -> Set[str]:
    """The names the pipeline made at ``source`` goes by: those it and its batch are given, and the
    pipelines made from them."""
    names = {name for stmt in (source.chain()[-1].stmt, batch.stmt) if (name := single_target(stmt)) is not None}
    held = set()
    for name in names:
        held |= holders(context.facts, TrainingSplit(name, {name}))
    return held


def _sizes_note(edits: List[Edit]) -> str:
    if not edits:
        return ""
    cells = ", ".join(str(cell) for cell in sorted({edit.cell for edit in edits}))
    return _("; what the step makes per example with the global batch size (cell {cells}) takes the per-rank "
             "batch").format(cells=cells)


def _per_rank(size: Optional[ast.expr]) -> str:
    """The per-rank part of a global batch given by a name: ``batch_size // RANK_SIZE``."""
    return f"{size.id} // {K.RANK_SIZE_EXPR}" if isinstance(size, ast.Name) else ""


def _divided(context, cell, facts: CellFacts, size: ast.expr, divisor: str, needs) -> List[Edit]:
    """``size // divisor`` in place of the global batch ``size``; nothing when ``size`` is a number
    smaller than the rank count checked (``--ranks``): the division would give 0 (Keras then silently
    takes 32, tf.data a batch of nothing), so each rank keeps it, as batch-not-divisible says."""
    value = global_batch_value(context, size)
    if value is not None and value < context.options.ranks:
        return []
    pattern = "{size}" if _is_simple(size) else "({size})"
    return [replace_with(cell, facts, size, f"{pattern} // {divisor}", needs, size=size)]


def _binds_rank_batch(edits: List[Edit]) -> bool:
    """Whether the shard edits bind ``rank_batch_size`` (shard_and_rebatch_dataset), or divide in place."""
    return any(f"{RANK_BATCH} = " in edit.code for edit in edits)


def _expected_batch_shapes(context, source: CallSite, batch: Optional[CallSite]) -> List[Tuple[int, CellFacts, ast.Name]]:
    """(cell, facts, name) of the global batch read where a check expects it as a batch's rows
    (``assert images.shape == (BATCH_SIZE, HEIGHT, WIDTH)``, a course's shape test of the pipeline): in the
    code that draws from the pipeline (it calls the function making it, or reads a name holding it). Once
    the data is split, each rank draws the per-rank batch, and the check fails on every rank."""
    size = _batch_argument(batch) if batch is not None else None
    if not isinstance(size, ast.Name):
        return []
    value = global_batch_value(context, size)
    if value is not None and value < context.options.ranks:
        return []
    if source.function is not None and _local_to(context, source.function, size.id):
        return []  # the function's own batch size: the checks elsewhere name the batch otherwise
    maker = source.function
    held = _pipeline_holders(context, source, batch) if maker is None else set()
    found = []
    for cell, facts in context.facts.cells:
        for scope in [facts.tree, *facts.functions.values()]:
            nodes = list(own_nodes(scope))
            if not any(isinstance(node, ast.Compare) for node in nodes):
                continue  # nothing to expect a shape: no need to follow what the scope draws
            drawn = _drawn_names(nodes, maker, held)
            found += [(cell, facts, name) for name in dict.fromkeys(_expected_rows(nodes, size.id, drawn))]
    return found


def _reads_pipeline(node: ast.AST, maker: Optional[str], names: Set[str]) -> bool:
    """Whether ``node`` calls the function making the pipeline or reads one of ``names``."""
    return any((isinstance(part, ast.Name) and isinstance(part.ctx, ast.Load) and part.id in names)
               or (maker is not None and isinstance(part, ast.Call) and dotted_name(part.func) == maker)
               for part in ast.walk(node))


def _drawn_names(nodes: List[ast.AST], maker: Optional[str], held: Set[str]) -> Set[str]:
    """The names a scope binds to the pipeline or to what it draws from it (``data_iter =
    dataset.__iter__()``, ``images, labels = data_iter.get_next()``)."""
    drawn, changed = set(held), True
    assigns = [node for node in nodes if isinstance(node, ast.Assign)]
    while changed:
        changed = False
        for node in assigns:
            if _reads_pipeline(node.value, maker, drawn):
                targets = {part.id for target in node.targets for part in ast.walk(target)
                           if isinstance(part, ast.Name) and part.id not in drawn}
                drawn |= targets
                changed |= bool(targets)
    return drawn


def _expected_rows(nodes: List[ast.AST], size: str, drawn: Set[str]) -> Iterator[ast.Name]:
    """The reads of ``size`` as the rows a comparison expects of the ``.shape`` of a drawn batch: first
    of a shape written there or bound to a name compared there, or compared with ``.shape[0]``."""
    shapes = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if (lead := _leading(node.value, size)) is not None:
                shapes[node.targets[0].id] = lead
    for node in nodes:
        if not isinstance(node, ast.Compare) or not all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        if any(_is_shape(side) and _reads_pipeline(side.value, None, drawn) for side in sides):
            for side in sides:
                lead = _leading(side, size) if not isinstance(side, ast.Name) else shapes.get(side.id)
                if lead is not None:
                    yield lead
        if any(_is_rows_of_shape(side) and _reads_pipeline(side.value.value, None, drawn) for side in sides):
            yield from (side for side in sides if isinstance(side, ast.Name) and side.id == size)


def _leading(node: ast.AST, size: str) -> Optional[ast.Name]:
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        first = node.elts[0]
        if isinstance(first, ast.Name) and first.id == size:
            return first
    return None


def _is_shape(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _is_rows_of_shape(node: ast.AST) -> bool:
    return isinstance(node, ast.Subscript) and _is_shape(node.value) and int_literal(node.slice) == 0


def _calls_with_a_batch_of_one(context, source: CallSite, size: Optional[ast.expr]) -> list:
    """(cell, facts, literal) of the calls of the function making ``source`` that give its batch
    parameter ``size`` a literal 1 (Udacity's forecasting course prints a helper's windows with
    ``batch_size=1``): shard_and_rebatch_dataset raises on such a batch on more than one rank."""
    return [(cell, facts, given) for cell, facts, call, given in _helper_calls(context, source, size)
            if int_literal(given) == 1]


def _shown_at_a_batch_it_cannot_split(context, source: CallSite, size: Optional[ast.expr]) -> list:
    """(cell, facts, batch) of the top-level calls of the function making ``source`` that give its
    batch parameter ``size`` a global batch the ranks checked cannot split, and whose dataset only is
    shown until the name is bound again (TensorFlow's structured-data guides show ``df_to_dataset(train,
    batch_size=5)``, then train on the same helper at 32): each rank shows that many samples instead."""
    ranks = context.options.ranks
    found = []
    for cell, facts, call, given in _helper_calls(context, source, size):
        value = global_batch_value(context, given, (cell, call.node.lineno))
        if (value is not None and value > 1 and ranks > 1 and value % ranks and call.function is None
                and call.node is getattr(call.stmt, "value", None) and binding_trains_nothing(context, cell, call.stmt)):
            found.append((cell, facts, given))
    return found


def _helper_calls(context, source: CallSite, size: Optional[ast.expr]) -> Iterator[tuple]:
    """(cell, facts, call, argument) of each call of the function making ``source`` that gives its
    batch parameter ``size``."""
    if not isinstance(size, ast.Name) or source.function is None:
        return
    defined = context.facts.function(source.function)
    if defined is not None:
        yield from context.facts.given_to_parameter(defined[2], source.function, size.id)


def _shard_and_rebatch(context, cell, facts: CellFacts, source: CallSite, batch: CallSite) -> Optional[List[Edit]]:
    """The TF2 shape: ``ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, B)``."""
    size = _batch_argument(batch)
    if size is None:
        return None
    top = source.chain()[-1]
    stmt = top.stmt
    if top.node is not getattr(stmt, "value", None):
        return None
    variable = single_target(stmt) if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if variable is None and not isinstance(stmt, ast.Return):
        return None
    dataset = variable or "dataset"
    even = _even_cut(context, facts, source)
    needs = [NEEDS_NPU_DEVICE] + ([NEEDS_OS] if even else [])
    edits = [replace(cell, facts, size, RANK_BATCH, needs)]
    windows = _samples_made_at(facts, source, variable)
    anchor = _last_binding_before(facts, stmt, batch.stmt, size) if top is source and variable is not None else None
    if even and anchor is not None and _rebinds_between(facts, variable, stmt, anchor):
        # the dataset is shuffled or repeated before the rebatch: a take there would cut a repeated
        # stream to one epoch, so the cut goes on the rows themselves
        edits.append(replace_with(cell, facts, source.node, "{source}" + even[0], needs, source=source.node))
        even = None
    rebatch = (
        f"{dataset}, {RANK_BATCH} = {context.npu}.distribute.shard_and_rebatch_dataset"
        f"({dataset + (even[0] if even else '')}, {facts.segment(size)})"
    )
    if windows is not None:
        edits.append(insert_after(cell, facts, windows, rebatch, needs))
    elif anchor is not None:
        edits.append(insert_after(cell, facts, anchor, rebatch, needs))
    else:
        first = f"{dataset} = {standalone_code(facts, source.node)}"
        edits.append(insert_before(cell, facts, stmt, f"{first}\n{rebatch}", needs))
        edits.append(replace(cell, facts, source.node, dataset, needs))
    return edits


def _rebinds_between(facts: CellFacts, name: str, first: ast.stmt, last: ast.stmt) -> bool:
    """Whether a statement after ``first``, up to ``last``, of ``first``'s block binds ``name``."""
    block = _block_of(facts, first) or []
    if last not in block:
        return False
    return any(isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name
               for later in block[block.index(first) + 1:block.index(last) + 1] for node in ast.walk(later))


def _last_binding_before(facts: CellFacts, stmt: ast.stmt, until: ast.stmt, size: ast.expr) -> ast.stmt:
    """``stmt``, or the last statement after it in its block, before ``until``, that binds a name the
    global batch ``size`` reads (``BATCH_SIZE = 256`` between the source and its batch): the rebatch
    must come after it, or it would read the name before it exists."""
    read = {node.id for node in ast.walk(size) if isinstance(node, ast.Name)}
    block = _block_of(facts, stmt)
    if not read or block is None:
        return stmt
    last = stmt
    for later in block[block.index(stmt) + 1:]:
        if later is until or later.lineno >= until.lineno:
            break
        targets = [node.id for node in ast.walk(later) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)]
        if read & set(targets):
            last = later
    return last


def _block_of(facts: CellFacts, stmt: ast.stmt) -> Optional[list]:
    """The list of statements (a body, an else, a finally) ``stmt`` is one of."""
    return next((body for node in ast.walk(facts.tree) for body in _bodies(node) if stmt in body), None)


def _runs_before(facts: CellFacts, stmt: ast.stmt, later: ast.stmt) -> bool:
    """Whether every way to ``later`` passes ``stmt`` first: ``later`` is ``stmt`` or within a statement
    after it in its block."""
    block = _block_of(facts, stmt)
    if block is None:
        return False
    return any(after is later or any(node is later for node in ast.walk(after)) for after in block[block.index(stmt):])


def _bodies(node: ast.AST) -> List[list]:
    return [value for name in ("body", "orelse", "finalbody") if isinstance(value := getattr(node, name, None), list)]


def _array_leaves(node: ast.expr) -> List[Optional[ast.expr]]:
    """The arrays inside ``x``/``y`` of fit: the values of a dict or list of inputs, or ``node``.
    None marks a part that cannot be sliced safely (a comprehension, a starred element)."""
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            return [None]
        return [leaf for value in node.values for leaf in _array_leaves(value)]
    if isinstance(node, (ast.List, ast.Tuple)):
        if any(isinstance(element, ast.Starred) for element in node.elts):
            return [None]
        return [leaf for element in node.elts for leaf in _array_leaves(element)]
    if isinstance(node, (ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp, ast.Set)):
        return [None]
    return [node]


def _bound_to_a_container(context, x: ast.expr) -> bool:
    """``inputs = [a, b]; model.fit(inputs, y)``: slicing ``inputs`` would slice the list of inputs."""
    if not isinstance(x, ast.Name):
        return False
    values = [a.value for _cell, _facts, a in context.facts.assignments(x.id) if not a.tuple_target]
    return bool(values) and isinstance(values[-1], (ast.Dict, ast.List, ast.Tuple)) and not _is_samples(values[-1])


def _is_samples(node: ast.expr) -> bool:
    """``[-1, 0, 1]`` or ``[[0, 1], [1, 0]]``: a list of samples (numbers), which slices as an array."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and all(_is_samples(e) for e in node.elts)


def _array_edits(context, cell, facts: CellFacts, site: CallSite, arrays, define_rank: bool) -> List[Edit]:
    needs = [NEEDS_OS]
    rank_slice = _even_rank_rows(_rows_counted_by(facts, arrays, site.argument(1, "y")), "rank_id", "rank_size")
    edits = [_sliced(cell, facts, array, rank_slice, needs) for array in arrays]
    if define_rank:
        edits.insert(0, insert_before(
            cell, facts, site.stmt, f"rank_size, rank_id = {K.RANK_SIZE_EXPR}, {K.RANK_ID_EXPR}", needs
        ))
    batch_size = site.keyword("batch_size")
    if batch_size is not None:
        edits += _divided(context, cell, facts, batch_size.value, "rank_size", needs)
    else:
        edits.append(add_argument(cell, facts, site.node, "batch_size=32 // rank_size", needs))
    return edits


def _even_rank_rows(counted: str, rank_id: str = K.RANK_ID_EXPR, rank_size: str = K.RANK_SIZE_EXPR) -> str:
    """``[rank_id::rank_size][:len(x) // rank_size]``: this rank's every N-th row, as many on every rank.
    Without the cut, 303 rows give rank 0 152 and rank 1 151; when a rank's row count is a multiple of
    its batch (a batch of 1 here; 1,797 digits on 8 cards with a batch of 4), rank 0 takes one more step
    and waits in an all-reduce the others never join. At most RANK_SIZE - 1 rows are left out."""
    return f"[{rank_id}::{rank_size}][:len({counted}) // {rank_size}]"


def _even_rows_note() -> str:
    return _("; every rank keeps len(x) // RANK_SIZE of its rows, so that all ranks take as many steps (an uneven "
             "split leaves one rank waiting in an all-reduce the others never join)")


def _rows_counted_by(facts: CellFacts, arrays: List[ast.expr], labels: Optional[ast.expr]) -> str:
    """The code whose len() is the sample count: a named array among them, the labels first (the
    inputs, labels and weights of one call have as many rows, and the inputs may be a scipy sparse
    matrix, which has no len(); ``x.astype(np.float32)`` has ``x``'s rows), else the first one's code,
    computed again."""
    first = [leaf for leaf in _array_leaves(labels) if leaf is not None] if labels is not None else []
    kept = [_same_rows_as(array) for array in first + list(arrays)]
    named = [array for array in kept if isinstance(array, (ast.Name, ast.Attribute, ast.Subscript))]
    return facts.segment((named or kept)[0])


def _same_rows_as(array: ast.expr) -> ast.expr:
    while isinstance(array, ast.Call) and isinstance(array.func, ast.Attribute) and array.func.attr in ("astype", "copy"):
        array = array.func.value
    return array


def _sliced(cell, facts: CellFacts, array: ast.expr, rank_slice: str, needs) -> Edit:
    pattern = "{array}" if _is_simple(array) else "({array})"
    return replace_with(cell, facts, array, pattern + rank_slice, needs, array=array)


def _is_simple(node: ast.expr) -> bool:
    """Can an operator or a subscript follow this node's code without parentheses?"""
    return isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.Constant))
