"""Every rank writing checkpoints to one ``model_dir``: the ranks race on the same files (found by
the simulator: rank 1 failed with NotFoundError on rank 0's temporary checkpoint)."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from .. import knowledge as K
from ..findings import NEEDS_OS, Finding
from .base import Example, Rule, mentions, replace_with

MODEL_DIR_OWNERS = frozenset(
    {"tensorflow.estimator.RunConfig", "npu_bridge.NPURunConfig"} | K.ESTIMATORS
)


class SharedModelDir(Rule):
    code = "shared-model-dir"
    step = None
    severity = "warning"

    VALID = [
        "import os\nimport tensorflow as tf\n"
        "config = tf.estimator.RunConfig(model_dir='ckpt' if int(os.getenv('RANK_ID', '0')) == 0 else None)\n",
        "import tensorflow as tf\nconfig = tf.estimator.RunConfig(model_dir=None)\n",
        "import os\nimport tensorflow as tf\nest = tf.estimator.Estimator(model_fn, model_dir=f'ckpt_{os.environ[\"RANK_ID\"]}')\n",
    ]
    INVALID = [
        Example(
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir='/tmp/model', save_checkpoints_steps=50)\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\n",
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir='/tmp/model' if int(os.getenv('RANK_ID', '0')) == 0 else None, save_checkpoints_steps=50)\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*MODEL_DIR_OWNERS):
            keyword = site.keyword("model_dir")
            if keyword is None or (isinstance(keyword.value, ast.Constant) and keyword.value.value is None):
                continue
            if mentions(keyword.value, ("RANK", "rank")):
                continue
            yield self.finding(
                cell, facts, keyword.value,
                "every rank writes checkpoints to the same model_dir and the ranks race on its files: "
                "let rank 0 write it, the others their own temporary directory (model_dir=None)",
                [replace_with(cell, facts, keyword.value, "{model_dir} if int(os.getenv('RANK_ID', '0')) == 0 else None",
                              [NEEDS_OS], model_dir=keyword.value)],
            )
