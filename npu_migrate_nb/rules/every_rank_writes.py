"""Every rank writing the same file: ``model.save``, ``save_weights``, ``tf.saved_model.save``, a
checkpoint's ``save``, ``ModelCheckpoint`` and ``BackupAndRestore`` run on every rank, and on one
server the ranks share its disk. Two ranks writing one checkpoint race on its temporary files (found
by the simulator: ``MergeV2Checkpoints ... my_checkpoint_temp/part-00000-of-00001 did not exist``)
or on an HDF5 file's lock. The fix: a save runs on rank 0 only; a ``ModelCheckpoint`` writes rank 0's
file where the notebook said, the other ranks' beside it in a ``rank_R`` folder; each rank backs up
and restores its own state (``BackupAndRestore``), so that every rank resumes at the same epoch.
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import CallSite, CellFacts, dotted_name, mentions, receiver_name
from ..findings import NEEDS_OS, Finding
from .base import Example, Rule, guard, rank_test_around, replace_with

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
_CALLBACKS = {
    "tensorflow.keras.callbacks.ModelCheckpoint": ("filepath", 0),
    "tensorflow.keras.callbacks.BackupAndRestore": ("backup_dir", 0),
    "tensorflow.keras.callbacks.experimental.BackupAndRestore": ("backup_dir", 0),
}
_BESIDE_FOR_OTHER_RANKS = (
    "{path} if int(os.getenv('RANK_ID', '0')) == 0 else "
    "os.path.join(os.path.dirname({path}), 'rank_' + os.getenv('RANK_ID', '0'), os.path.basename({path}))"
)
_PER_RANK = "os.path.join({path}, 'rank_' + os.getenv('RANK_ID', '0'))"


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
        # Nothing trains: one process, nothing to share.
        "import tensorflow as tf\nmodule = tf.Module()\ntf.saved_model.save(module, 'saved')\n",
    ]
    INVALID = [
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
            "== 0 else os.path.join(os.path.dirname(checkpoint_path), 'rank_' + os.getenv('RANK_ID', '0'), "
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
        # TensorFlow's SavedModel migration guide: TF1's SavedModelBuilder and simple_save.
        Example(
            "import tensorflow as tf\nimport tensorflow.compat.v1 as tf1\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "with tf1.Session() as sess:\n"
            "    builder = tf1.saved_model.Builder('saved-model-builder')\n"
            "    builder.add_meta_graph_and_variables(sess, tags=['serve'])\n"
            "    builder.save()\n"
            "    tf1.saved_model.simple_save(sess, 'simple-save', inputs={'input': x}, outputs={'output': y})\n",
            "import tensorflow as tf\nimport os\nimport tensorflow.compat.v1 as tf1\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y)\n"
            "with tf1.Session() as sess:\n"
            "    builder = tf1.saved_model.Builder('saved-model-builder')\n"
            "    builder.add_meta_graph_and_variables(sess, tags=['serve'])\n"
            "    if int(os.getenv('RANK_ID', '0')) == 0:\n        builder.save()\n"
            "    if int(os.getenv('RANK_ID', '0')) == 0:\n"
            "        tf1.saved_model.simple_save(sess, 'simple-save', inputs={'input': x}, outputs={'output': y})\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        return list(self._saves(context)) + list(self._callbacks(context))

    def _saves(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls(*_MODEL_METHODS, *_CHECKPOINT_METHODS, "simple_save"):
            what = _writer(context, site)
            if what is None or _on_one_rank(facts, site.stmt):
                continue
            message = (f"every rank runs this {what} and writes the same file: on one server the ranks share its "
                       "disk and race on its files; write it on rank 0 only")
            standalone = isinstance(site.stmt, ast.Expr) and site.stmt.value is site.node
            edits = [guard(cell, facts, site.stmt, RANK_ZERO, [NEEDS_OS])] if standalone else []
            yield self.finding(cell, facts, site.node, message, edits)

    def _callbacks(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*_CALLBACKS):
            name, position = _CALLBACKS[context.facts.resolve(site.dotted)]
            path = site.argument(position, name)
            if path is None or mentions(path, ("RANK", "rank")) or _on_one_rank(facts, site.stmt):
                continue
            simple = isinstance(path, (ast.Name, ast.Constant, ast.Attribute))
            if site.method == "ModelCheckpoint":
                message = ("every rank's ModelCheckpoint writes the same file: on one server the ranks share its disk "
                           "and race on it; rank 0 writes it where it is, the other ranks beside it in rank_R/")
                pattern = _BESIDE_FOR_OTHER_RANKS
            else:
                message = ("every rank's BackupAndRestore backs up to the same folder: each rank backs up and restores "
                           "its own state in a folder of its own, so that every rank resumes at the same epoch")
                pattern = _PER_RANK
            edits = [replace_with(cell, facts, path, pattern, [NEEDS_OS], path=path)] if simple else []
            yield self.finding(cell, facts, path, message, edits)


def _writer(context, site: CallSite) -> Optional[str]:
    """What ``site`` writes with ("tf.saved_model.save", "model.save_weights"), or None when it is
    not known to write a file (``list.save``...)."""
    resolved = context.facts.resolve(site.dotted)
    if resolved in _SAVE_FUNCTIONS:
        return site.dotted
    receiver = receiver_name(site)
    if receiver is None or resolved.startswith("tensorflow."):
        return None
    made_with = _made_with(context, receiver)
    if site.method in _CHECKPOINT_METHODS and made_with in _CHECKPOINT_MAKERS:
        return site.dotted
    if site.method in _MODEL_METHODS and made_with not in _CHECKPOINT_MAKERS and _is_a_model(context, receiver):
        return site.dotted
    return None


def _made_with(context, name: str) -> Optional[str]:
    values = [a.value for _, _, a in context.facts.assignments(name) if isinstance(a.value, ast.Call)]
    return context.facts.resolve(dotted_name(values[-1].func)) if values else None


def _is_a_model(context, name: str) -> bool:
    """Is ``name`` compiled, trained or built from Keras in the notebook?"""
    for method in ("compile", "fit", "fit_generator"):
        if any(site.dotted == f"{name}.{method}" for _, _, site in context.facts.calls(method)):
            return True
    made = _made_with(context, name) or ""
    return made.startswith("tensorflow.keras.")


def _on_one_rank(facts: CellFacts, stmt: ast.stmt) -> bool:
    """Is ``stmt`` inside an ``if`` that tests the rank (``if rank_id == 0:``)?"""
    return rank_test_around(facts, stmt) is not None
