"""Sharding after batching: ranks split batches instead of samples, and the batch is not split."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from .. import knowledge as K
from ..facts import chain_root_name
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, replace


class ShardAfterBatch(Rule):
    """A shard after a batch splits whole batches among the ranks instead of samples: each rank gets
    batches of the global size, so one step on N cards processes N global batches, N times the
    single-card batch, and the learning rate no longer fits. Shard right after the source, then
    shuffle and batch. Fixed automatically when ``.shard`` is chained directly on ``.batch`` (the two
    swap); a batch in an earlier statement, or ``shard_and_rebatch_dataset`` on a batched dataset, is
    moved by hand."""

    code = "shard-after-batch"
    step = "shard"
    severity = "warning"

    VALID = [
        "import os\nds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(64)\n",
        # Windows batched inside flat_map are elements, not batches; the last assignment is unbatched.
        "import npu_device as npu\n"
        "ds = ds.window(8, shift=1, drop_remainder=True)\nds = ds.flat_map(lambda w: w.batch(8))\n"
        "ds = tf.data.Dataset.zip((ds.take(10), ds.skip(1).take(10)))\n"
        "ds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 8)\n",
    ]
    INVALID = [
        Example(
            "import os\nds = ds.batch(64).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
            "import os\nds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(64)\n",
        ),
        Example(
            "import npu_device as npu\n"
            "ds = ds.batch(64)\n"
            "ds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n",
        ),
        # Batched in one statement, sharded in the next.
        Example(
            "import os\n"
            "ds = tf.data.Dataset.range(64)\n"
            "ds = ds.shuffle(64).batch(16)\n"
            "ds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._chained(context)) + list(self._sharded_after_batch(context)) + list(
            self._rebatched_after_batch(context)
        )

    def _sharded_after_batch(self, context) -> Iterator[Finding]:
        """``ds = ds.batch(B)`` in one statement, ``ds = ds.shard(...)`` in a later one."""
        for cell, facts, site in context.facts.calls("shard"):
            root = chain_root_name(site.receiver)
            if root is None or _has_batch(site.receiver):
                continue
            batched = _batched_before(facts, root, site)
            if batched is not None:
                yield self.finding(
                    cell, facts, site.node,
                    _("shard after batch: {name} was batched at line {line}, so ranks split whole "
                      "batches of the global size; shard right after the source, then batch").format(
                        name=root, line=batched.lineno),
                )

    def _chained(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls("shard"):
            batch = site.receiver
            if not (isinstance(batch, ast.Call) and isinstance(batch.func, ast.Attribute)):
                continue
            if batch.func.attr not in K.BATCH_METHODS:
                continue
            base = facts.segment(batch.func.value)
            shard_args = ", ".join(facts.segment(arg) for arg in site.node.args)
            batch_args = facts.segment(batch)[len(facts.segment(batch.func)):]
            fixed = f"{base}.shard({shard_args}).{batch.func.attr}{batch_args}"
            yield self.finding(
                cell, facts, site.node,
                _("shard after batch: each rank gets whole batches of the global size; shard first, then batch"),
                [replace(cell, facts, site.node, fixed)],
            )

    def _rebatched_after_batch(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(K.SHARD_AND_REBATCH):
            dataset = site.argument(0, "dataset")
            if not isinstance(dataset, ast.Name):
                continue
            stmt = _batched_before(facts, dataset.id, site)
            if stmt is not None:
                yield self.finding(
                    cell, facts, site.node,
                    _("shard_and_rebatch_dataset is given {name} after it was batched "
                      "(cell line {line}): call it on the unbatched dataset, then batch with "
                      "the per-rank size it returns").format(name=dataset.id, line=stmt.lineno),
                )


def _has_batch(node) -> bool:
    while isinstance(node, (ast.Call, ast.Attribute)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in K.BATCH_METHODS:
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _batched_before(facts, name: str, site):
    """The last statement before ``site`` (same scope) that assigns ``name`` a batched pipeline."""
    found = None
    for assignment in facts.assignments.get(name, ()):
        if assignment.function == site.function and assignment.stmt.lineno < site.node.lineno:
            found = assignment.stmt if _has_batch(assignment.value) else None
    return found
