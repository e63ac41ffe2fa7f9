"""Steps divided by the rank size: with the batch split across ranks, each rank runs every step."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ..findings import Finding
from .. import knowledge as K
from ..i18n import _
from .base import Example, Rule, rank_size_mention, replace

STEP_KEYWORDS = ("max_steps", "steps", "steps_per_epoch")


class DoubleStepDivision(Rule):
    """Dividing the step count by the rank count is right when each rank keeps the whole batch
    (Horovod's recipe). Once the global batch is split across ranks (``shard_and_rebatch_dataset``, or
    the shard fix of this run), an epoch already takes as many steps as on one card: divided again,
    each rank runs 1/N of the steps and the cards together see 1/N of the data. The fix removes the
    division."""

    code = "double-step-division"
    step = None
    severity = "warning"

    VALID = [
        "estimator = tf.estimator.Estimator(model_fn=f)\n"
        "estimator.train(train_data_fn, max_steps=num_steps, hooks=hooks)\n",
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds, steps_per_epoch=total // batch)\n",
        # Each rank keeps the whole batch (sharded, not split): dividing the steps keeps the epoch.
        "import os\nds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(64)\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(ds, steps_per_epoch=1000 // int(os.getenv('RANK_SIZE', '1')))\n",
    ]
    INVALID = [
        # The seed: the batch is about to be split, so max_steps=num_steps // rank_size becomes max_steps=num_steps.
        Example(
            "import tensorflow as tf\n"
            "def train_data_fn():\n"
            "    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n"
            "estimator.train(train_data_fn, max_steps=num_steps // rank_size, hooks=training_hooks)\n",
            "import tensorflow as tf\n"
            "def train_data_fn():\n"
            "    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n"
            "estimator.train(train_data_fn, max_steps=num_steps, hooks=training_hooks)\n",
        ),
        Example(
            "import os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds.batch(rank_batch_size), steps_per_epoch=1000 // int(os.getenv('RANK_SIZE', '1')))\n",
            "import os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds.batch(rank_batch_size), steps_per_epoch=1000)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        # Dividing the steps is right when each rank keeps the whole batch (Horovod's way, or a shard
        # without a batch split); it is wrong once the global batch is split across ranks, in the
        # code already or by this run's shard fix.
        if not (batch_is_split(context) or context.shard_fix_splits_batch):
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls("train", "fit", "TrainSpec"):
            for keyword in site.node.keywords:
                value = keyword.value
                if keyword.arg not in STEP_KEYWORDS or not isinstance(value, ast.BinOp):
                    continue
                if not isinstance(value.op, (ast.FloorDiv, ast.Div)) or not rank_size_mention(value.right, context):
                    continue
                yield self.finding(
                    cell, facts, value,
                    _("{keyword} is divided by the rank size: the global batch is already split across "
                      "ranks, so each rank must run all {steps} steps").format(
                        keyword=keyword.arg, steps=facts.segment(value.left)),
                    [replace(cell, facts, value, facts.segment(value.left))],
                )


def batch_is_split(context) -> bool:
    """Is the global batch split across ranks (shard_and_rebatch_dataset, or a batch divided by the rank size)?"""
    if any(context.facts.calls_to(K.SHARD_AND_REBATCH)):
        return True
    # ``.batch(rank_size, drop_remainder=True).unbatch()`` aligns a shard to whole rounds of ranks (the
    # shard fix of an ordered series): the elements come out one by one, no batch is split.
    unbatched = {id(site.node.func.value) for _unused, _unused, site in context.facts.calls("unbatch")
                 if isinstance(site.node.func, ast.Attribute)}
    for _unused, _unused, site in context.facts.calls(*K.BATCH_METHODS):
        if id(site.node) in unbatched:
            continue
        size = site.argument(0, "batch_size")
        if size is not None and (rank_size_mention(size, context) or _is_rank_batch_name(size)):
            return True
    for _unused, _unused, site in context.facts.keras_fits("fit"):
        keyword = site.keyword("batch_size")
        if keyword is not None and rank_size_mention(keyword.value, context):
            return True
    return False


def _is_rank_batch_name(node) -> bool:
    return isinstance(node, ast.Name) and node.id in ("rank_batch_size", "local_batch_size", "per_replica_batch_size")
