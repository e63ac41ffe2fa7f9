"""A shard by the chip's device id (DEVICE_ID, ASCEND_DEVICE_ID, the local rank): the device id is the
rank on one server only; from the second server on it starts again at 0, so two servers read the same
part of the data and the rest is never read."""

from __future__ import annotations

from typing import Iterable, List

from .. import knowledge as K
from ..findings import NEEDS_OS, Edit, Finding
from ..i18n import _
from ..ranks import DEVICE, RANK, ShardUse, shard_uses, unjudged_shards
from .base import Example, Rule, replace


class DeviceIdShard(Rule):
    code = "device-id-shard"
    step = "shard"
    severity = "warning"

    VALID = [
        "import os\nimport tensorflow as tf\n"
        "ds = tf.data.TFRecordDataset(files).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
        "estimator = tf.estimator.Estimator(model_fn=model_fn)\n",
        # The local rank pins the chip (right); the data is split by the rank.
        "import tensorflow as tf\nimport horovod.tensorflow.keras as hvd\n"
        "gpus = tf.config.list_physical_devices('GPU')\n"
        "tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')\n"
        "# %%\n"
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).batch(32)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
    ]

    INVALID = [
        # As in the vendor's model zoo: the "rank" read from DEVICE_ID in a setup cell.
        Example(
            "import os\nimport tensorflow as tf\n"
            "rank_size = int(os.getenv('RANK_SIZE', '1'))\n"
            "rank_id = int(os.getenv('DEVICE_ID', '0'))\n"
            "# %%\n"
            "def input_fn():\n"
            "    ds = tf.data.TFRecordDataset(files).shard(rank_size, rank_id)\n"
            "    return ds.batch(32 // rank_size)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
            "estimator.train(input_fn, max_steps=100)\n",
            "import os\nimport tensorflow as tf\n"
            "rank_size = int(os.getenv('RANK_SIZE', '1'))\n"
            "rank_id = int(os.getenv('DEVICE_ID', '0'))\n"
            "# %%\n"
            "def input_fn():\n"
            "    ds = tf.data.TFRecordDataset(files).shard(rank_size, int(os.getenv('RANK_ID', '0')))\n"
            "    return ds.batch(32 // rank_size)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=model_fn)\n"
            "estimator.train(input_fn, max_steps=100)\n",
        ),
        # The chips of one server as the count, the local chip as the index.
        Example(
            "import os\nimport tensorflow as tf\n"
            "from hccl.manage.api import get_local_rank_size\n"
            "device = int(os.environ['ASCEND_DEVICE_ID'])\n"
            "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(get_local_rank_size(), device).batch(32)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
            "import os\nimport tensorflow as tf\n"
            "from hccl.manage.api import get_local_rank_size\n"
            "device = int(os.environ['ASCEND_DEVICE_ID'])\n"
            "ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(int(os.getenv('RANK_SIZE', '1')), "
            "int(os.getenv('RANK_ID', '0'))).batch(32)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        ),
        # A list of files sliced by the device id.
        Example(
            "import os\nimport tensorflow as tf\n"
            "files = sorted(tf.io.gfile.glob('data/*.tfrecord'))[int(os.getenv('DEVICE_ID'))::int(os.getenv('RANK_SIZE'))]\n"
            "ds = tf.data.TFRecordDataset(files).batch(32)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
            "import os\nimport tensorflow as tf\n"
            "files = sorted(tf.io.gfile.glob('data/*.tfrecord'))[int(os.getenv('RANK_ID', '0'))::int(os.getenv('RANK_SIZE'))]\n"
            "ds = tf.data.TFRecordDataset(files).batch(32)\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        ),
    ]

    def prepare(self, context) -> None:
        # A .shard whose index comes from a flag or a framework's argument may well be the rank:
        # neither present nor missing (missing-shard's fix would shard twice).
        unjudged = unjudged_shards(context.facts)
        if unjudged and context.steps.get("shard") == "missing":
            use = unjudged[0]
            context.mark(
                "shard", "unknown",
                _("the shard index `{index}` (cell {cell}) comes from a value "
                  "that cannot be seen here (a flag, a parameter, a launcher's variable): check that it is "
                  "RANK_ID and the count RANK_SIZE").format(index=use.facts.segment(use.index), cell=use.cell),
            )

    def check(self, context) -> Iterable[Finding]:
        if context.steps.get("shard") == "not-applicable":
            return []
        findings: List[Finding] = []
        for use in shard_uses(context.facts):
            if use.by == DEVICE or (use.by == RANK and use.counts_devices):
                findings.append(self._finding(use))
        return findings

    def _finding(self, use: ShardUse) -> Finding:
        edits: List[Edit] = []
        count_too = use.counts_devices and use.count is not None
        if use.by == DEVICE:
            edits.append(replace(use.cell, use.facts, use.index, K.RANK_ID_EXPR, [NEEDS_OS]))
            if count_too:
                message = _(
                    "the shard index `{index}` holds a device id (DEVICE_ID, ASCEND_DEVICE_ID "
                    "or the local rank), the rank on one server only: beyond one server (8 chips) device ids start "
                    "again at 0, so two servers read the same part; take RANK_ID, and RANK_SIZE for the count, "
                    "not the chips of one server"
                ).format(index=use.facts.segment(use.index))
            else:
                message = _(
                    "the shard index `{index}` holds a device id (DEVICE_ID, ASCEND_DEVICE_ID "
                    "or the local rank), the rank on one server only: beyond one server (8 chips) device ids start "
                    "again at 0, so two servers read the same part; take RANK_ID"
                ).format(index=use.facts.segment(use.index))
        else:
            message = _(
                "the shard count `{count}` is the chips of one server, not the rank "
                "count: beyond one server the ranks from that count on have no part (an error); take RANK_SIZE"
            ).format(count=use.facts.segment(use.count))
        if count_too:
            edits.append(replace(use.cell, use.facts, use.count, K.RANK_SIZE_EXPR, [NEEDS_OS]))
        return self.finding(use.cell, use.facts, use.node, message, edits)
