"""Every rank writing checkpoints to one ``model_dir``: the ranks race on the same files (found by
the simulator: rank 1 failed with NotFoundError on rank 0's temporary checkpoint).

The fix gives every rank a folder of its own in it, rank 0 included: were rank 0 alone to keep
``model_dir`` (and the others a fresh one), rank 0 would resume from a checkpoint left there by an
earlier run while the others start over, and the ranks would run different numbers of steps
(rank-dependent-steps)."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from .. import knowledge as K
from ..findings import NEEDS_OS, Finding
from ..i18n import _
from .base import Example, Rule, mentions, replace_with

MODEL_DIR_OWNERS = frozenset(
    {"tensorflow.estimator.RunConfig", "npu_bridge.NPURunConfig"} | K.ESTIMATORS
)


PER_RANK_MODEL_DIR = "os.path.join({model_dir}, 'rank_' + os.getenv('RANK_ID', '0'))"


class SharedModelDir(Rule):
    code = "shared-model-dir"
    step = None
    severity = "warning"

    VALID = [
        "import os\nimport tensorflow as tf\n"
        "config = tf.estimator.RunConfig(model_dir=os.path.join('ckpt', 'rank_' + os.getenv('RANK_ID', '0')))\n",
        "import tensorflow as tf\nconfig = tf.estimator.RunConfig(model_dir=None)\n",
        "import os\nimport tensorflow as tf\nest = tf.estimator.Estimator(model_fn, model_dir=f'ckpt_{os.environ[\"RANK_ID\"]}')\n",
    ]
    INVALID = [
        # Given by position (TensorFlow's SavedModel migration guide).
        Example(
            "import tensorflow as tf\nest = tf.estimator.Estimator(model_fn, 'estimator-checkpoints')\n"
            "est.train(train_fn, steps=1)\n",
            "import tensorflow as tf\nimport os\n"
            "est = tf.estimator.Estimator(model_fn, os.path.join('estimator-checkpoints', 'rank_' + os.getenv('RANK_ID', '0')))\n"
            "est.train(train_fn, steps=1)\n",
        ),
        Example(
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir='/tmp/model', save_checkpoints_steps=50)\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\n",
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir=os.path.join('/tmp/model', 'rank_' + os.getenv('RANK_ID', '0')), save_checkpoints_steps=50)\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*MODEL_DIR_OWNERS):
            position = _MODEL_DIR_POSITION.get(context.facts.resolve(site.dotted), 99)
            model_dir = site.argument(position, "model_dir")
            if model_dir is None or (isinstance(model_dir, ast.Constant) and model_dir.value is None):
                continue
            if mentions(model_dir, ("RANK", "rank")):
                continue
            yield self.finding(
                cell, facts, model_dir,
                _("every rank writes checkpoints to the same model_dir and the ranks race on its files: give each "
                  "rank a folder of its own in it (each resumes from its own checkpoints, so all run the same steps)"),
                [replace_with(cell, facts, model_dir, PER_RANK_MODEL_DIR, [NEEDS_OS], model_dir=model_dir)],
            )


# Where model_dir may be given by position: Estimator(model_fn, model_dir=None, ...), RunConfig(model_dir=None, ...).
_MODEL_DIR_POSITION = {"tensorflow.estimator.Estimator": 1, "tensorflow.estimator.RunConfig": 0}
