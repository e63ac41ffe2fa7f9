"""Every rank writing the same file: ``model.save``, ``save_weights``, ``tf.saved_model.save``, a
checkpoint's ``save``, ``ModelCheckpoint`` and ``BackupAndRestore`` run on every rank, and on one
server the ranks share its disk. Two ranks writing one checkpoint race on its temporary files (found
by the simulator: ``MergeV2Checkpoints ... my_checkpoint_temp/part-00000-of-00001 did not exist``)
or on an HDF5 file's lock. The fix: a save runs on rank 0 only; a ``ModelCheckpoint`` writes rank 0's
file where the notebook said, the other ranks' in a folder beside rank 0's (``training_1_rank_R``); each rank backs up
and restores its own state (``BackupAndRestore``), so that every rank resumes at the same epoch.
"""

from __future__ import annotations

import ast
import posixpath
from typing import Iterable, Iterator, List, Optional

from ..facts import CallSite, CellFacts, dotted_name, mentions, receiver_name
from ..findings import NEEDS_OS, Finding
from ..i18n import N_, _
from .base import Example, Rule, guard, guard_span, rank_test_around, replace, replace_with

RANK_ZERO = "int(os.getenv('RANK_ID', '0')) == 0"
# Functions that write a model (canonical names), and what they are called in the message.
_SAVE_FUNCTIONS = frozenset({"tensorflow.saved_model.save", "tensorflow.keras.models.save_model",
                             "tensorflow.saved_model.simple_save"})
# Methods that write files, by what their receiver was made with.
_MODEL_METHODS = ("save", "save_weights")
_CHECKPOINT_MAKERS = frozenset({"tensorflow.train.Checkpoint", "tensorflow.train.CheckpointManager",
                                "tensorflow.train.Saver", "tensorflow.saved_model.Builder",
                                "tensorflow.saved_model.builder.SavedModelBuilder"})
_CHECKPOINT_METHODS = ("save", "write")
# An Estimator's export: a folder named by the second under the base, which the second rank to export in
# that second finds there (AlreadyExistsError: file already exists).
_EXPORT_METHODS = ("export_saved_model", "export_savedmodel")
_CALLBACKS = {
    "tensorflow.keras.callbacks.ModelCheckpoint": ("filepath", 0),
    "tensorflow.keras.callbacks.BackupAndRestore": ("backup_dir", 0),
    "tensorflow.keras.callbacks.experimental.BackupAndRestore": ("backup_dir", 0),
    # Not a callback, but a folder the same way: its save() writes there, and a custom loop restores
    # from it (TensorFlow's fault-tolerance guide loads the last epoch's checkpoint).
    "tensorflow.train.CheckpointManager": ("directory", 1),
}
_MANAGER = "tensorflow.train.CheckpointManager"
# A folder beside rank 0's, not in it: code that lists rank 0's folder (the latest checkpoint by
# name, Keras' save-and-load tutorial) finds only rank 0's files there.
_BESIDE_FOR_OTHER_RANKS = (
    "{path} if int(os.getenv('RANK_ID', '0')) == 0 else "
    "os.path.join((os.path.dirname({path}) or '.') + '_rank_' + os.getenv('RANK_ID', '0'), os.path.basename({path}))"
)
_PER_RANK = "os.path.join({path}, 'rank_' + os.getenv('RANK_ID', '0'))"
# A file saved and read back in one cell: rank 0's where the notebook said, the others' beside it.
_PER_RANK_FILE = (
    "{path} if int(os.getenv('RANK_ID', '0')) == 0 else "
    "os.path.join(os.path.dirname({path}), 'rank_' + os.getenv('RANK_ID', '0') + '_' + os.path.basename({path}))"
)
# Where each save method takes its path (position, keyword).
_SAVE_PATHS = {"save": (0, "filepath"), "save_weights": (0, "filepath"), "write": (0, "file_prefix"),
               "export_saved_model": (0, "export_dir_base"), "export_savedmodel": (0, "export_dir_base"),
               "tensorflow.saved_model.save": (1, "export_dir"), "tensorflow.keras.models.save_model": (1, "filepath")}
# Calls that read back what a save wrote, with the position of their path.
_READS = {"tensorflow.keras.models.load_model": 0, "tensorflow.saved_model.load": 0, "load_weights": 0}
# A directory of its own for each process that makes it: every rank writes in a folder of its own.
_OWN_COPY = N_("(rank 0 where the notebook said, the others beside it as rank_R_<name>)")
_PER_PROCESS_DIRS = frozenset({"tempfile.mkdtemp", "tempfile.TemporaryDirectory", "tempfile.mkstemp",
                               "tempfile.NamedTemporaryFile"})


class EveryRankWrites(Rule):
    code = "every-rank-writes"
    step = None
    severity = "warning"

    VALID = [
        # Written on rank 0 only.
        "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
        "if int(os.getenv('RANK_ID', '0')) == 0:\n    model.save_weights('ckpt')\n",
        # A per-rank path.
        "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
        "model.fit(x, y, callbacks=[tf.keras.callbacks.BackupAndRestore(f\"backup_{os.environ['RANK_ID']}\")])\n",
        # A folder every rank may make.
        "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\nos.makedirs('ckpt', exist_ok=True)\n",
        # Nothing trains: one process, nothing to share.
        "import tensorflow as tf\nmodule = tf.Module()\ntf.saved_model.save(module, 'saved')\n",
        # A folder each process makes for itself (TensorFlow's ragged-tensor guide): every rank has its own.
        "import tempfile\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
        "path = tempfile.mkdtemp()\nmodel.save(path + '/my_model.keras')\n"
        "restored = tf.keras.models.load_model(path + '/my_model.keras')\n",
        # A folder each process makes for itself, reached through two names (TensorFlow's core MLP guide):
        # each rank saves and reads back its own copy; a guard would leave the other ranks nothing to load.
        'import os\n'
        'import tempfile\n'
        'import tensorflow as tf\n'
        'model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n'
        "model.compile('sgd', 'mse')\n"
        'model.fit(x, y)\n'
        '# %%\n'
        'models = tempfile.mkdtemp()\n'
        "save_path = os.path.join(models, 'mlp_model_export')\n"
        'tf.saved_model.save(model, save_path)\n'
        '# %%\n'
        'reloaded = tf.saved_model.load(save_path)\n',
        # Data every rank prepares, removed by every rank: on several servers each has its own copy.
        "import os\nimport shutil\nimport tensorflow as tf\ntrain_dir = os.path.join(dataset_dir, 'train')\n"
        "shutil.rmtree(os.path.join(train_dir, 'unsup'))\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n",
        # A file rank 0 wrote, removed by every rank that may: errors ignored, or a missing file caught.
        "import os\nimport shutil\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
        "if int(os.getenv('RANK_ID', '0')) == 0:\n    with open('logs', 'w') as f:\n        f.write('1')\n"
        "shutil.rmtree('logs', ignore_errors=True)\n",
        "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
        "if int(os.getenv('RANK_ID', '0')) == 0:\n    with open('done.txt', 'w') as f:\n        f.write('1')\n"
        "try:\n    os.remove('done.txt')\nexcept FileNotFoundError:\n    pass\n",
    ]
    INVALID = [
        # A Saver a helper builds and returns among the graph's parts (Hands-On ML, ch. 9), and the
        # file beside its checkpoint that says which epoch it holds: rank 0 writes both; every rank
        # removing that file at the end, the second would raise FileNotFoundError.
        Example(
            "import os\nimport tensorflow as tf\n"
            "def build(X, y):\n"
            "    loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 1) - y))\n"
            "    training_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)\n"
            "    saver = tf.train.Saver()\n"
            "    return loss, training_op, saver\n"
            "loss, training_op, saver = build(X, y)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(tf.global_variables_initializer())\n"
            "    for epoch in range(100):\n"
            "        sess.run(training_op, feed_dict={X: X_batch, y: y_batch})\n"
            "        if epoch % 10 == 0:\n"
            "            saver.save(sess, '/tmp/model.ckpt')\n"
            "            with open('/tmp/model.ckpt.epoch', 'wb') as f:\n"
            "                f.write(b'%d' % (epoch + 1))\n"
            "    os.remove('/tmp/model.ckpt.epoch')\n",
            "import os\nimport tensorflow as tf\n"
            "def build(X, y):\n"
            "    loss = tf.reduce_mean(tf.square(tf.layers.dense(X, 1) - y))\n"
            "    training_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)\n"
            "    saver = tf.train.Saver()\n"
            "    return loss, training_op, saver\n"
            "loss, training_op, saver = build(X, y)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(tf.global_variables_initializer())\n"
            "    for epoch in range(100):\n"
            "        sess.run(training_op, feed_dict={X: X_batch, y: y_batch})\n"
            "        if epoch % 10 == 0:\n"
            "            if int(os.getenv('RANK_ID', '0')) == 0:\n"
            "                saver.save(sess, '/tmp/model.ckpt')\n"
            "                with open('/tmp/model.ckpt.epoch', 'wb') as f:\n"
            "                    f.write(b'%d' % (epoch + 1))\n"
            "    if int(os.getenv('RANK_ID', '0')) == 0:\n"
            "        os.remove('/tmp/model.ckpt.epoch')\n",
        ),
        # A file the notebook writes on rank 0 only, removed by every rank.
        Example(
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    with open('done.txt', 'w') as f:\n        f.write('1')\n"
            "# %%\nos.remove('done.txt')\n",
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    with open('done.txt', 'w') as f:\n        f.write('1')\n"
            "# %%\nif int(os.getenv('RANK_ID', '0')) == 0:\n    os.remove('done.txt')\n",
        ),
        Example(
            "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
            "model.compile('sgd', 'mse')\nmodel.fit(x, y)\n# %%\n# keep it\nmodel.save_weights('my_checkpoint')\n",
            "import tensorflow as tf\nimport os\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
            "model.compile('sgd', 'mse')\nmodel.fit(x, y)\n# %%\n# keep it\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    model.save_weights('my_checkpoint')\n",
        ),
        Example(
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
            "checkpoint_path = 'training_1/cp.ckpt'\n"
            "cp_callback = tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_path, save_weights_only=True)\n"
            "model.fit(x, y, callbacks=[cp_callback])\n",
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
            "checkpoint_path = 'training_1/cp.ckpt'\n"
            "cp_callback = tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_path if int(os.getenv('RANK_ID', '0')) "
            "== 0 else os.path.join((os.path.dirname(checkpoint_path) or '.') + '_rank_' + os.getenv('RANK_ID', '0'), "
            "os.path.basename(checkpoint_path)), save_weights_only=True)\n"
            "model.fit(x, y, callbacks=[cp_callback])\n",
        ),
        Example(
            "import tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
            "model.fit(x, y, callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir='/tmp/backup')])\n",
            "import tensorflow as tf\nimport os\nmodel.compile('sgd', 'mse')\n"
            "model.fit(x, y, callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join('/tmp/backup', "
            "'rank_' + os.getenv('RANK_ID', '0')))])\n",
        ),
        Example(
            "import tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "checkpoint = tf.train.Checkpoint(model=model)\ncheckpoint.write('ckpt/model')\n"
            "tf.saved_model.save(model, 'saved')\n",
            "import tensorflow as tf\nimport os\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "checkpoint = tf.train.Checkpoint(model=model)\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    checkpoint.write('ckpt/model')\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    tf.saved_model.save(model, 'saved')\n",
        ),
        # Saved and read back in one cell (TensorFlow's feature-column migration guide): saved on rank 0
        # only, the other ranks would read a file not written yet; each rank saves and reads its own copy.
        Example(
            "import tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "model.save('model.keras')\nrestored = tf.keras.models.load_model('model.keras')\n",
            "import tensorflow as tf\nimport os\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "model.save('model.keras' if int(os.getenv('RANK_ID', '0')) == 0 else 'rank_' + os.getenv('RANK_ID', '0') "
            "+ '_model.keras')\n"
            "restored = tf.keras.models.load_model('model.keras' if int(os.getenv('RANK_ID', '0')) == 0 else 'rank_' + "
            "os.getenv('RANK_ID', '0') + '_model.keras')\n",
        ),
        # The same with a path held in an expression: split when it runs.
        Example(
            "import tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "model.save_weights(folder + '/w.h5')\nmodel.load_weights(folder + '/w.h5')\n",
            "import tensorflow as tf\nimport os\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "model.save_weights(folder + '/w.h5' if int(os.getenv('RANK_ID', '0')) == 0 else os.path.join(os.path.dirname("
            "folder + '/w.h5'), 'rank_' + os.getenv('RANK_ID', '0') + '_' + os.path.basename(folder + '/w.h5')))\n"
            "model.load_weights(folder + '/w.h5' if int(os.getenv('RANK_ID', '0')) == 0 else os.path.join(os.path.dirname("
            "folder + '/w.h5'), 'rank_' + os.getenv('RANK_ID', '0') + '_' + os.path.basename(folder + '/w.h5')))\n",
        ),
        # Keras' save-and-load tutorial makes its checkpoint folder on every rank.
        Example(
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "os.mkdir('./checkpoints')\n",
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "os.makedirs('./checkpoints', exist_ok=True)\n",
        ),
        # TensorFlow's SavedModel migration guide: TF1's SavedModelBuilder (it refuses a folder that exists: a
        # copy per rank) and simple_save.
        Example(
            "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "with tf1.Session() as sess:\n"
            "    builder = tf1.saved_model.Builder('saved-model-builder')\n"
            "    builder.add_meta_graph_and_variables(sess, tags=['serve'])\n"
            "    builder.save()\n"
            "    tf1.saved_model.simple_save(sess, 'simple-save', inputs={'input': x}, outputs={'output': y})\n",
            "import tensorflow as tf\nimport os\nimport tensorflow.compat.v1 as tf1\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "with tf1.Session() as sess:\n"
            "    builder = tf1.saved_model.Builder('saved-model-builder' if int(os.getenv('RANK_ID', '0')) == 0 else "
            "'rank_' + os.getenv('RANK_ID', '0') + '_saved-model-builder')\n"
            "    builder.add_meta_graph_and_variables(sess, tags=['serve'])\n"
            "    builder.save()\n"
            "    if int(os.getenv('RANK_ID', '0')) == 0:\n"
            "        tf1.saved_model.simple_save(sess, 'simple-save', inputs={'input': x}, outputs={'output': y})\n",
        ),
        # The same guide exports an Estimator (a folder named by the second: the second rank to export in that
        # second raised AlreadyExistsError) and moves the export: rank 0 exports, with what uses the export.
        Example(
            "import tensorflow as tf\nest = tf.estimator.Estimator(model_fn, 'ckpt')\nest.train(input_fn)\n# %%\n"
            "path = est.export_saved_model('exported', serving_input_fn)\n\n# a folder of its own\n"
            "!rm -rf estimator-model\nimport shutil\nshutil.move(path, 'estimator-model')\nprint('exported')\n",
            "import tensorflow as tf\nimport os\nest = tf.estimator.Estimator(model_fn, 'ckpt')\nest.train(input_fn)\n# %%\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n"
            "    path = est.export_saved_model('exported', serving_input_fn)\n\n    # a folder of its own\n"
            "    !rm -rf estimator-model\n    import shutil\n    shutil.move(path, 'estimator-model')\nprint('exported')\n",
        ),
        # What the export returns is read in a later cell, where the other ranks would not have it: said, not fixed.
        Example(
            "import tensorflow as tf\nest = tf.estimator.Estimator(model_fn, 'ckpt')\nest.train(input_fn)\n# %%\n"
            "path = est.export_saved_model('exported', serving_input_fn)\n# %%\nprint(path)\n",
        ),
        # ... or in the loop's next turn (a custom loop restoring the checkpoint it saved at the end of the
        # previous epoch): said, not fixed.
        Example(
            "import tensorflow as tf\nmodel.compile('sgd', 'mse')\ncheckpoint = tf.train.Checkpoint(model=model)\n"
            "for epoch in range(3):\n    if epoch > 0:\n        checkpoint.restore(path)\n    model.fit(x, y)\n"
            "    path = checkpoint.save('ckpt/model')\n",
        ),
        # TensorFlow's fault-tolerance guide: a CheckpointManager's folder, shared; its save() returns the
        # path the next epoch restores. Each rank keeps its checkpoints in a folder of its own.
        Example(
            "import tensorflow as tf\nmanager = tf.train.CheckpointManager(checkpoint, 'ckpt', max_to_keep=2)\n"
            "for epoch in range(3):\n    if epoch > 0:\n        tf.train.load_checkpoint(save_path)\n"
            "    with tf.GradientTape() as tape:\n        loss = loss_fn(y, model(x))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights))\n"
            "    save_path = manager.save()\n",
            "import tensorflow as tf\nimport os\nmanager = tf.train.CheckpointManager(checkpoint, os.path.join('ckpt', "
            "'rank_' + os.getenv('RANK_ID', '0')), max_to_keep=2)\n"
            "for epoch in range(3):\n    if epoch > 0:\n        tf.train.load_checkpoint(save_path)\n"
            "    with tf.GradientTape() as tape:\n        loss = loss_fn(y, model(x))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights))\n"
            "    save_path = manager.save()\n",
        ),
        # A model of the notebook's own class deriving from Keras' Model, trained in a custom loop (TensorFlow-Examples): its save_weights raced on the ranks.
        Example(
            'import tensorflow as tf\n'
            'from tensorflow.keras import Model, layers\n'
            'class NeuralNet(Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'for x, y in train_data:\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(neural_net(x), y)\n'
            '    gradients = g.gradient(loss, neural_net.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, neural_net.trainable_variables))\n'
            '# %%\n'
            'neural_net.save_weights(filepath="./tfmodel.ckpt")\n',
            'import tensorflow as tf\n'
            'import os\n'
            'from tensorflow.keras import Model, layers\n'
            'class NeuralNet(Model):\n'
            '    def __init__(self):\n'
            '        super().__init__()\n'
            '        self.out = layers.Dense(10)\n'
            '    def call(self, x):\n'
            '        return self.out(x)\n'
            'neural_net = NeuralNet()\n'
            'optimizer = tf.keras.optimizers.Adam(0.01)\n'
            'for x, y in train_data:\n'
            '    with tf.GradientTape() as g:\n'
            '        loss = loss_of(neural_net(x), y)\n'
            '    gradients = g.gradient(loss, neural_net.trainable_variables)\n'
            '    optimizer.apply_gradients(zip(gradients, neural_net.trainable_variables))\n'
            '# %%\n'
            "if int(os.getenv('RANK_ID', '0')) == 0:\n"
            '    neural_net.save_weights(filepath="./tfmodel.ckpt")\n',
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        rank_zero_files = _written_on_one_rank(context)
        found = list(self._saves(context, rank_zero_files)) + list(self._callbacks(context)) + list(self._folders(context))
        return found + list(self._removals(context, rank_zero_files))

    def _removals(self, context, rank_zero_files: set) -> Iterator[Finding]:
        """``os.remove(path)`` on every rank of a file only rank 0 writes (as the notebook has it or as
        the fix makes it): the other ranks raise FileNotFoundError. Not a file every rank has (data a
        cell prepares: on several servers, each has its own copy to remove)."""
        for cell, facts, site in context.facts.calls_to(*_REMOVERS):
            path = site.argument(0, "path")
            if path is None or _on_one_rank(facts, site.stmt) or facts.segment(path) not in rank_zero_files:
                continue
            if _per_process(context, path) or _ignores_errors(site) or _missing_file_handled(facts, site.stmt):
                continue
            if not (isinstance(site.stmt, ast.Expr) and site.stmt.value is site.node):
                continue
            yield self.finding(
                cell, facts, site.node,
                _("every rank runs this {function} on a file only rank 0 writes: the other ranks raise "
                  "FileNotFoundError; remove it on rank 0 only").format(function=site.dotted),
                [guard(cell, facts, site.stmt, RANK_ZERO, [NEEDS_OS])],
            )

    def _folders(self, context) -> Iterator[Finding]:
        """``os.mkdir(path)`` on every rank: the second rank to get there raises FileExistsError."""
        for cell, facts, site in context.facts.calls_to("os.mkdir", "os.makedirs"):
            keyword = site.keyword("exist_ok")  # os.mkdir has none; os.makedirs(name, mode, exist_ok)
            exist_ok = keyword.value if keyword is not None else (site.argument(2, "exist_ok") if site.method == "makedirs" else None)
            path = site.argument(0, "name" if site.method == "makedirs" else "path")
            if path is None or (exist_ok is not None and not (isinstance(exist_ok, ast.Constant) and not exist_ok.value)):
                continue
            if _on_one_rank(facts, site.stmt) or mentions(path, ("RANK", "rank")) or _per_process(context, path):
                continue
            mode = site.argument(1, "mode")
            arguments = facts.segment(path) + (f", {facts.segment(mode)}" if mode is not None else "")
            yield self.finding(
                cell, facts, site.node,
                _("every rank runs this {function} on the same folder: on one server the ranks share its disk, and "
                  "the second to get there raises FileExistsError; os.makedirs(..., exist_ok=True) lets every rank "
                  "through").format(function=site.method),
                [replace(cell, facts, site.node, f"os.makedirs({arguments}, exist_ok=True)", [NEEDS_OS])],
            )

    def _saves(self, context, rank_zero_files: set) -> Iterator[Finding]:
        """``rank_zero_files``: gets the paths (as written) of the files the fix writes on rank 0 only."""
        guarded_companions: set = set()
        for cell, facts, site in context.facts.calls(*_MODEL_METHODS, *_CHECKPOINT_METHODS, *_EXPORT_METHODS,
                                                     "simple_save"):
            what = _writer(context, site)
            if what is None or _on_one_rank(facts, site.stmt):
                continue
            if _made_with(context, receiver_name(site)) == _MANAGER:
                continue  # its folder, made per rank where the manager is made (_callbacks)
            path = _save_path(context, site)
            if path is not None and (mentions(path, ("RANK", "rank")) or _per_process(context, path)):
                continue
            builder = _builder_path(context, site)
            if builder is not None:
                b_cell, b_facts, b_path = builder
                if mentions(b_path, ("RANK", "rank")):
                    continue
                message = _("every rank runs this {writer} into the same folder, and SavedModelBuilder refuses a folder "
                            "that exists (the second rank raises 'Export directory ... already exists'): each rank "
                            "exports its own copy {own_copy}").format(writer=what, own_copy=_(_OWN_COPY))
                yield self.finding(cell, facts, site.node, message, [_per_rank_file(b_cell, b_facts, b_path)])
                continue
            reads = _reads_back(context, facts, site, path) if path is not None else []
            if reads:
                message = _("every rank runs this {writer} and writes the same file, then reads it back in this cell: "
                            "on one server the ranks share its disk and race on it, and written on rank 0 only it "
                            "would not be there yet for the others; each rank saves and reads its own copy "
                            "{own_copy}").format(writer=what, own_copy=_(_OWN_COPY))
                edits = [_per_rank_file(cell, facts, node) for node in [path, *reads]]
                yield self.finding(cell, facts, site.node, message, edits)
                continue
            standalone = isinstance(site.stmt, ast.Expr) and site.stmt.value is site.node
            edit = guard(cell, facts, site.stmt, RANK_ZERO, [NEEDS_OS]) if standalone else \
                _guard_with_uses(context, cell, facts, site.stmt)
            companions = [] if edit is None else [
                stmt for stmt in _files_written_beside(facts, site.stmt) if id(stmt) not in guarded_companions]
            guarded_companions.update(id(stmt) for stmt in companions)
            if edit is not None and not standalone:
                message = _("every rank runs this {writer} and writes the same file: on one server the ranks share its "
                            "disk and race on its files; write it on rank 0 only, with the statements after it that "
                            "use what it returns").format(writer=what)
            else:
                message = _("every rank runs this {writer} and writes the same file: on one server the ranks share its "
                            "disk and race on its files; write it on rank 0 only").format(writer=what)
            if edit is not None:
                rank_zero_files.update(facts.segment(node) for node in [path, *map(_opened_path, companions)]
                                       if node is not None)
            if companions:
                message += _(", with the file written beside it (line {line})").format(line=companions[0].lineno)
            edits = [edit] + [guard(cell, facts, stmt, RANK_ZERO, [NEEDS_OS]) for stmt in companions]
            following = _following(facts, site.stmt, companions) if standalone else []
            if following:  # one guard over the save and the files written right after it
                edits = [guard_span(cell, facts, site.stmt, following[-1], RANK_ZERO, [NEEDS_OS])] + [
                    guard(cell, facts, stmt, RANK_ZERO, [NEEDS_OS]) for stmt in companions if stmt not in following]
            yield self.finding(cell, facts, site.node, message, edits if edit is not None else [])

    def _callbacks(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*_CALLBACKS):
            name, position = _CALLBACKS[context.facts.resolve(site.dotted)]
            path = site.argument(position, name)
            if path is None or mentions(path, ("RANK", "rank")) or _on_one_rank(facts, site.stmt):
                continue
            if _per_process(context, path):
                continue
            simple = isinstance(path, (ast.Name, ast.Constant, ast.Attribute))
            if site.method == "ModelCheckpoint":
                message = _("every rank's ModelCheckpoint writes the same file: on one server the ranks share its disk "
                            "and race on it; rank 0 writes it where it is, the other ranks in a folder beside it "
                            "(<folder>_rank_R)")
                pattern = _BESIDE_FOR_OTHER_RANKS
            elif site.method == "CheckpointManager":
                message = _("every rank's CheckpointManager saves into the same folder: on one server the ranks share "
                            "its disk and race on its files; each rank saves and restores its own checkpoints in a "
                            "folder of its own, so that every rank restores the same step")
                pattern = _PER_RANK
            else:
                message = _("every rank's BackupAndRestore backs up to the same folder: each rank backs up and restores "
                            "its own state in a folder of its own, so that every rank resumes at the same epoch")
                pattern = _PER_RANK
            edits = [replace_with(cell, facts, path, pattern, [NEEDS_OS], path=path)] if simple else []
            yield self.finding(cell, facts, path, message, edits)


_REMOVERS = frozenset({"os.remove", "os.unlink", "shutil.rmtree"})
_MISSING_FILE_ERRORS = frozenset({"FileNotFoundError", "OSError", "IOError", "Exception", "BaseException"})


def _ignores_errors(site: CallSite) -> bool:
    """``shutil.rmtree(path, ignore_errors=True)``."""
    given = site.argument(1, "ignore_errors")
    return given is not None and not (isinstance(given, ast.Constant) and not given.value)


def _missing_file_handled(facts: CellFacts, stmt: ast.stmt) -> bool:
    """Is ``stmt`` in the body of a ``try`` that catches a missing file (or ``contextlib.suppress``)?"""
    for node in facts.nodes(ast.Try, ast.With):
        if not any(inner is stmt for inner in ast.walk(node)):
            continue
        if isinstance(node, ast.Try):
            caught = {dotted_name(h.type) if h.type is not None else "BaseException" for h in node.handlers}
            caught |= {dotted_name(e) for h in node.handlers if isinstance(h.type, ast.Tuple) for e in h.type.elts}
            if caught & _MISSING_FILE_ERRORS and any(inner is stmt for part in node.body for inner in ast.walk(part)):
                return True
        elif any(isinstance(item.context_expr, ast.Call) and (dotted_name(item.context_expr.func) or "").endswith("suppress")
                 for item in node.items):
            return True
    return False


def _files_written_beside(facts: CellFacts, save: ast.stmt) -> List[ast.stmt]:
    """The ``with open(path, "w")`` statements in the block of a checkpoint's ``save`` (the epoch a
    run stopped at, written with it): every rank would write them too, and only rank 0 has the
    checkpoint they describe. Not those that bind a name read after them (the closed file handle aside)."""
    block = _block_of(facts.tree, save) or []
    found = []
    for stmt in block:
        if not isinstance(stmt, ast.With) or stmt is save:
            continue
        opened = [item for item in stmt.items if _opens_for_writing(item.context_expr)]
        if not opened or len(opened) != len(stmt.items):
            continue
        path = opened[0].context_expr.args[0] if opened[0].context_expr.args else None
        if path is None or mentions(path, ("RANK", "rank")):
            continue
        bound = set().union(*(_bound_names(part) for part in stmt.body))
        if any(isinstance(node, ast.Name) and node.id in bound and isinstance(node.ctx, ast.Load)
               and node.lineno > stmt.end_lineno for node in facts.nodes(ast.Name)):
            continue
        found.append(stmt)
    return found


def _following(facts: CellFacts, stmt: ast.stmt, among: List[ast.stmt]) -> List[ast.stmt]:
    """The statements of ``among`` that come right after ``stmt`` in its block, one after another."""
    block = _block_of(facts.tree, stmt) or []
    place = next((i for i, s in enumerate(block) if s is stmt), len(block))
    found = []
    for after in block[place + 1:]:
        if not any(after is s for s in among):
            break
        found.append(after)
    return found


def _opened_path(stmt: ast.With) -> Optional[ast.expr]:
    return stmt.items[0].context_expr.args[0]


def _written_on_one_rank(context) -> set:
    """The paths (as written) of the files the notebook opens for writing under a rank test."""
    return {facts.segment(site.node.args[0]) for _cell, facts, site in context.facts.calls("open")
            if _opens_for_writing(site.node) and _on_one_rank(facts, site.stmt)}


def _opens_for_writing(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" and node.args):
        return False
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


def _guard_with_uses(context, cell: int, facts: CellFacts, stmt: ast.stmt):
    """A rank-0 guard around ``stmt`` (which binds what a save returns) and the statements after it in
    its block, through the last one that reads a name bound there (Estimator's export path, moved to
    a folder of its own); None when the statement binds nothing or a name bound there is read outside
    the span, where the other ranks would not have it."""
    block = _block_of(facts.tree, stmt)
    if block is None or not _bound_names(stmt):
        return None
    first = next(i for i, s in enumerate(block) if s is stmt)
    last, bound = first, set(_bound_names(stmt))
    for index in range(first + 1, len(block)):
        if _read_names(block[index]) & bound:
            for between in block[last + 1:index + 1]:
                bound |= _bound_names(between)
            last = index
    start, end = stmt.lineno, block[last].end_lineno
    # Read anywhere else in the cell: after the span, or before it in a loop's next turn (the
    # fault-tolerance guide loads the checkpoint it saved at the end of the previous epoch).
    read_outside = {node.id for node in facts.nodes(ast.Name)
                    if isinstance(node.ctx, ast.Load) and not start <= node.lineno <= end}
    if bound & read_outside or any(index > cell for name in bound for index, _where in context.facts.cells_mentioning(name)):
        return None
    return guard_span(cell, facts, stmt, block[last], RANK_ZERO, [NEEDS_OS])


def _block_of(tree: ast.AST, stmt: ast.stmt) -> Optional[list]:
    """The statement list that holds ``stmt``."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(item is stmt for item in block):
                return block
    return None


def _bound_names(stmt: ast.stmt) -> set:
    """The names a statement binds with an assignment (imports bind the same module on every rank)."""
    return {node.id for node in ast.walk(stmt) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _read_names(stmt: ast.stmt) -> set:
    return {node.id for node in ast.walk(stmt) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _writer(context, site: CallSite) -> Optional[str]:
    """What ``site`` writes with ("tf.saved_model.save", "model.save_weights"), or None when it is
    not known to write a file (``list.save``...)."""
    resolved = context.facts.resolve(site.dotted)
    if resolved in _SAVE_FUNCTIONS:
        return site.dotted
    receiver = receiver_name(site)
    if receiver is None or resolved.startswith("tensorflow."):
        return None
    if site.method in _EXPORT_METHODS:
        return site.dotted
    made_with = _made_with(context, receiver)
    if site.method in _CHECKPOINT_METHODS and made_with in _CHECKPOINT_MAKERS:
        return site.dotted
    if site.method in _MODEL_METHODS and made_with not in _CHECKPOINT_MAKERS and _is_a_model(context, receiver):
        return site.dotted
    return None


def _per_rank_file(cell: int, facts: CellFacts, path: ast.expr):
    """``path`` on rank 0, ``rank_R_<name>`` beside it on the others; a literal path is split here."""
    if isinstance(path, ast.Constant) and isinstance(path.value, str):
        folder, name = posixpath.split(path.value)
        prefix = posixpath.join(folder, "rank_") if folder else "rank_"
        code = f"{path.value!r} if {RANK_ZERO} else {prefix!r} + os.getenv('RANK_ID', '0') + {'_' + name!r}"
        return replace(cell, facts, path, code, [NEEDS_OS])
    return replace_with(cell, facts, path, _PER_RANK_FILE, [NEEDS_OS], path=path)


_BUILDERS = frozenset({"tensorflow.saved_model.Builder", "tensorflow.saved_model.builder.SavedModelBuilder"})


def _builder_path(context, site: CallSite):
    """(cell, facts, export_dir) of the SavedModelBuilder whose ``save`` this is, else None."""
    receiver = receiver_name(site)
    if site.method != "save" or receiver is None:
        return None
    for cell, facts, assignment in reversed(list(context.facts.assignments(receiver))):
        value = assignment.value
        if isinstance(value, ast.Call) and context.facts.resolve(dotted_name(value.func)) in _BUILDERS:
            made = next((s for s in facts.calls if s.node is value), None)
            path = made.argument(0, "export_dir") if made is not None else None
            return (cell, facts, path) if path is not None else None
    return None


def _save_path(context, site: CallSite) -> Optional[ast.expr]:
    resolved = context.facts.resolve(site.dotted)
    position, name = _SAVE_PATHS.get(resolved, _SAVE_PATHS.get(site.method, (None, None)))
    return site.argument(position, name) if name is not None else None


def _per_process(context, path: ast.expr, depth: int = 3) -> bool:
    """Is ``path`` in a folder each process makes for itself (``tempfile.mkdtemp()``), directly or
    through the names it is made from (``save_path = os.path.join(models, 'export')`` with ``models =
    tempfile.mkdtemp()``)? Each rank then writes its own copy already, and reads it back."""
    for node in ast.walk(path):
        if isinstance(node, ast.Call) and context.facts.resolve(dotted_name(node.func)) in _PER_PROCESS_DIRS:
            return True
        if isinstance(node, ast.Name) and depth > 0:
            values = [a.value for _c, _f, a in context.facts.assignments(node.id) if a.function is None]
            if values and _per_process(context, values[-1], depth - 1):
                return True
    return False


def _reads_back(context, facts: CellFacts, save: CallSite, path: ast.expr) -> list:
    """The paths of the calls after ``save`` in its cell that read back what it wrote (the same path text)."""
    text = facts.segment(path)
    reads = []
    for site in facts.calls:
        if site.node.lineno <= save.stmt.end_lineno:
            continue
        position = _READS.get(context.facts.resolve(site.dotted), _READS.get(site.method))
        argument = site.argument(position, "filepath") if position is not None else None
        if argument is not None and facts.segment(argument) == text:
            reads.append(argument)
    return reads


def _made_with(context, name: str) -> Optional[str]:
    """What made the object ``name`` holds (a Saver a helper builds and returns among others, too)."""
    values = [context.facts.held_value(a) for _cell, _facts, a in context.facts.assignments(name)
              if isinstance(a.value, ast.Call)]
    return context.facts.resolve(dotted_name(values[-1].func)) if values and isinstance(values[-1], ast.Call) else None


def _is_a_model(context, name: str) -> bool:
    """Is ``name`` compiled, trained or built from Keras in the notebook?"""
    for method in ("compile", "fit", "fit_generator"):
        if any(site.dotted == f"{name}.{method}" for _cell, _facts, site in context.facts.calls(method)):
            return True
    made = _made_with(context, name) or ""
    return made.startswith("tensorflow.keras.") or _subclasses_a_keras_model(context, made)


def _subclasses_a_keras_model(context, class_name: str) -> bool:
    """Is ``class_name`` a class of the notebook deriving from Keras' Model (``class NeuralNet(Model)``)?"""
    for _cell, facts in context.facts.cells_mentioning(class_name):
        found = facts.classes.get(class_name)
        if found is not None:
            return any(context.facts.resolve(dotted_name(base)) in ("tensorflow.keras.Model", "tensorflow.keras.models.Model",
                                                                    "keras.Model", "keras.models.Model")
                       for base in found.bases)
    return False


def _on_one_rank(facts: CellFacts, stmt: ast.stmt) -> bool:
    """Is ``stmt`` inside an ``if`` that tests the rank (``if rank_id == 0:``)?"""
    return rank_test_around(facts, stmt) is not None
