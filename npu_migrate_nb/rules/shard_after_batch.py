"""Sharding after batching: ranks split batches instead of samples, and the batch is not split."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from .. import knowledge as K
from ..findings import Finding
from .base import Example, Rule, replace


class ShardAfterBatch(Rule):
    code = "shard-after-batch"
    step = "shard"
    severity = "warning"

    VALID = [
        "import os\nds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(64)\n",
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
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._chained(context)) + list(self._rebatched_after_batch(context))

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
                "shard after batch: each rank gets whole batches of the global size; shard first, then batch",
                [replace(cell, facts, site.node, fixed)],
            )

    def _rebatched_after_batch(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(K.SHARD_AND_REBATCH):
            dataset = site.argument(0, "dataset")
            if not isinstance(dataset, ast.Name):
                continue
            for batch in facts.calls_by_method.get("batch", ()):
                stmt = batch.stmt
                if (
                    batch.function == site.function
                    and stmt.lineno < site.node.lineno
                    and isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == dataset.id for t in stmt.targets)
                ):
                    yield self.finding(
                        cell, facts, site.node,
                        f"shard_and_rebatch_dataset is given {dataset.id} after it was batched "
                        f"(cell line {stmt.lineno}): call it on the unbatched dataset, then batch with "
                        "the per-rank size it returns",
                    )
                    break
