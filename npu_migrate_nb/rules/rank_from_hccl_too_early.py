"""``get_rank_id()``/``get_rank_size()`` raise ValueError until collective communication is initialised."""

from __future__ import annotations

from typing import Iterable, Iterator

from .. import knowledge as K
from ..findings import NEEDS_OS, Finding
from ..i18n import _
from .base import Example, Rule, replace

REPLACEMENTS = {
    "npu_bridge.get_rank_id": K.RANK_ID_EXPR,
    "npu_bridge.get_rank_size": K.RANK_SIZE_EXPR,
    "npu_bridge.get_local_rank_id": "int(os.getenv('ASCEND_DEVICE_ID', os.getenv('DEVICE_ID', '0')))",
}


class RankFromHcclTooEarly(Rule):
    """``get_rank_id()`` and ``get_rank_size()`` (``npu_bridge``, ``hccl.manage.api``) ask the
    collective communication library, which is initialised only when the session starts: called while
    the graph and the input pipeline are built (to shard the data, to size the batch) they raise
    ValueError on the cards. The launcher's environment (``RANK_ID``, ``RANK_SIZE``) gives the same
    values at any time; the fix reads it."""

    code = "rank-from-hccl-too-early"
    step = None
    severity = "warning"

    VALID = [
        "import os\nrank_size = int(os.getenv('RANK_SIZE', '1'))\n",
    ]
    INVALID = [
        # get_local_rank_id() as a shard index is a device id: device-id-shard makes that one RANK_ID.
        Example(
            "import os\nfrom npu_bridge.npu_init import *\nimport tensorflow as tf\nrank_size = get_rank_size()\n"
            "ds = tf.data.Dataset.range(8).shard(rank_size, get_local_rank_id())\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
            "import os\nfrom npu_bridge.npu_init import *\nimport tensorflow as tf\n"
            "rank_size = int(os.getenv('RANK_SIZE', '1'))\n"
            "ds = tf.data.Dataset.range(8).shard(rank_size, get_local_rank_id())\n"
            "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n",
        ),
        Example(
            "import os\nfrom hccl.manage.api import get_rank_size, get_rank_id\n"
            "ds = ds.shard(get_rank_size(), get_rank_id())\n",
            "import os\nfrom hccl.manage.api import get_rank_size, get_rank_id\n"
            "ds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        rewritten = _rewritten_by_device_id_shard(context)
        for cell, facts, site in context.facts.calls_to(*REPLACEMENTS):
            name = context.facts.resolve(site.dotted)
            if site.node.args or site.node.keywords:
                continue  # a group other than the world group: leave it to the user
            start, end = facts.start(site.node), facts.end(site.node)
            if any(c == cell and s <= start and end <= e for c, s, e in rewritten):
                continue  # a device shard's index: device-id-shard reads RANK_ID there instead
            yield self.finding(
                cell, facts, site.node,
                _("{function}() raises ValueError until collective communication is initialised "
                  "(when the session starts); read the environment instead, which works at any time").format(
                    function=site.method),
                [replace(cell, facts, site.node, REPLACEMENTS[name], [NEEDS_OS])],
            )


def _rewritten_by_device_id_shard(context):
    """(cell, start, end) of what the device-id-shard fixes replace (that rule runs before this one)."""
    return [
        (edit.cell, edit.start, edit.end)
        for finding in context.findings if finding.code == "device-id-shard"
        for edit in finding.edits if edit.kind == "replace"
    ]
