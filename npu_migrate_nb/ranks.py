"""Where the notebook reads its rank: the rank-dependent split of the data (the shard step)."""

from __future__ import annotations

import ast

from . import knowledge as K
from .facts import NotebookFacts, mentions


def has_rank_shard(facts: NotebookFacts) -> bool:
    if any(facts.calls_to(K.SHARD_AND_REBATCH)):
        return True
    for _, cell, site in facts.calls("shard"):
        if site.receiver is not None and not mentions(site.node, ("input_context", "input_pipeline")):
            return True
    return any(_has_rank_slice(cell) for _, cell in facts.cells)


def _has_rank_slice(cell) -> bool:
    return ("rank_id" in cell.names or "RANK_ID" in cell.names or "getenv" in cell.names) and any(
        isinstance(node, ast.Subscript) and mentions(node.slice, ("rank", "RANK_ID"))
        for node in ast.walk(cell.tree)
    )
