"""A literal global batch that the rank count does not divide: the ranks cannot split it evenly."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from .. import knowledge as K
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, int_literal
from .training_reach import binding_trains_nothing


class BatchNotDivisible(Rule):
    """The global batch is split across ranks (``global // N`` samples each). When N does not divide
    it, ``shard_and_rebatch_dataset`` raises ValueError, or each rank gets ``global // N`` samples and
    the remainder is lost every step: a step no longer processes the single-card batch. The rank count
    checked is ``--ranks`` (default 8, one Ascend server). Not fixed automatically: choose a multiple
    of the rank count."""

    code = "batch-not-divisible"
    step = "shard"
    severity = "warning"

    VALID = [
        "ds = ds.batch(64)\n",
        "BATCH = 128\nds = ds.batch(BATCH)\n",
        # A batch of 1 is not split: each rank reads one sample a step (missing-shard says what that means).
        "ds = ds.batch(1)\n",
        # A helper's dataset shown at a batch of 5, then made again at the training's 32 (TensorFlow's
        # structured-data guides): the 5 trains on nothing (missing-shard has each rank show 5 samples).
        "import npu_device as npu\n"
        "def df_to_dataset(frame, batch_size=32):\n"
        "    ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds_of(frame), batch_size)\n"
        "    return ds.batch(rank_batch_size)\n"
        "batch_size = 5\n"
        "train_ds = df_to_dataset(train, batch_size=batch_size)\n"
        "example_batch = next(iter(train_ds))[0]\n"
        "print(layer(example_batch))\n"
        "batch_size = 32\n"
        "train_ds = df_to_dataset(train, batch_size=batch_size)\n"
        "model.fit(train_ds)\n",
        # One element repeated: sharding does not apply, so no batch is split.
        "import tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
        "ds = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)\nmodel.fit(ds)\n",
    ]
    INVALID = [
        Example("ds = ds.batch(100)\n"),
        # Smaller than the rank count: each rank would get 0 samples (Keras then silently uses 32).
        Example("model.fit(x, y, batch_size=1)\n"),
        Example("ds = ds.batch(4)\n"),
        Example("BATCH_SIZE = 60\nds = ds.batch(BATCH_SIZE)\n"),
        Example("import npu_device as npu\nds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 30)\n"),
        Example("model.fit(x, y, batch_size=50)\n"),
        # A helper that batches with its parameter, called with a small batch that trains too.
        Example("import npu_device as npu\n"
                "def df_to_dataset(frame, batch_size=32):\n"
                "    ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds_of(frame), batch_size)\n"
                "    return ds.batch(rank_batch_size)\n"
                "batch_size = 5\n"
                "small_ds = df_to_dataset(train, batch_size=batch_size)\n"
                "model.fit(small_ds)\n"
                "batch_size = 32\n"
                "train_ds = df_to_dataset(train, batch_size=batch_size)\n"),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework != "none" and context.steps.get("shard") == "not-applicable":  # nothing is split
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        ranks = context.options.ranks
        for cell, facts, site, size, at in _given_through_helpers(context, _batch_sizes(context)):
            value = global_batch_value(context, size, at)
            if value is None or ranks <= 1 or value % ranks == 0:
                continue
            if value < ranks and site.method != "shard_and_rebatch_dataset":  # which raises, whatever the size
                if value == 1 and site.method in K.BATCH_METHODS:
                    continue  # a pipeline's batch of 1: missing-shard says what sharding it means
                yield self.finding(
                    cell, facts, size,
                    _("a global batch of {value} cannot be split across {ranks} ranks (each would get 0 samples "
                      "a step): each rank keeps a batch of {value}, so a step trains on RANK_SIZE x {value} "
                      "samples; scale the learning rate or the steps where the single-card math matters (or "
                      "check with --ranks N)").format(value=value, ranks=ranks),
                )
                continue
            yield self.finding(
                cell, facts, size,
                _("global batch {value} is not divisible by {ranks} ranks: {consequence}; use a multiple of {ranks} "
                  "(or check with --ranks N)").format(
                    value=value, ranks=ranks,
                    consequence=_("shard_and_rebatch_dataset raises ValueError")
                    if site.method == "shard_and_rebatch_dataset"
                    else _("each rank would get {per_rank} samples and {lost} are lost per step").format(
                        per_rank=value // ranks, lost=value % ranks),
                ),
            )


def _batch_sizes(context):
    for cell, facts, site in context.facts.calls(*K.BATCH_METHODS):
        size = site.argument(0, "batch_size")
        if size is not None and site.receiver is not None:
            yield cell, facts, site, size
    for cell, facts, site in context.facts.calls_to(K.SHARD_AND_REBATCH):
        size = site.argument(1, "global_bs")
        if size is not None:
            yield cell, facts, site, size
    for cell, facts, site in context.facts.keras_fits("fit"):
        keyword = site.keyword("batch_size")
        if keyword is not None:
            yield cell, facts, site, keyword.value
    for cell, facts, site in context.facts.calls(*K.BATCHED_SOURCE_DEFAULTS):  # sources that batch
        position = K.BATCH_POSITIONS.get(site.method)
        size = site.argument(position, "batch_size") if position is not None else (
            site.keyword("batch_size").value if site.keyword("batch_size") is not None else None)
        if size is not None:
            yield cell, facts, site, size


def _given_through_helpers(context, sizes):
    """Each batch size, and for one that is a parameter of the helper it is in (``def
    df_to_dataset(frame, batch_size=32)`` batching with it), what each of the helper's top-level calls
    gives it instead (``df_to_dataset(train, batch_size=32)``): the helper runs with every one of them.
    A call whose dataset is only shown (``batch_size=5`` beside the training's 32) trains on nothing:
    missing-shard's fix has each rank show that many samples."""
    for cell, facts, site, size in sizes:
        yield cell, facts, site, size, None
        function = facts.functions.get(site.function) if site.function and isinstance(size, ast.Name) else None
        if function is None:
            continue
        for c_cell, c_facts, call, given in context.facts.given_to_parameter(function, site.function, size.id):
            shown_only = call.node is getattr(call.stmt, "value", None) and binding_trains_nothing(
                context, c_cell, call.stmt)
            if call.function is None and not shown_only:  # valued where it is called: the notebook may rebind the name later
                yield c_cell, c_facts, site, given, (c_cell, call.node.lineno)


def global_batch_value(context, size: ast.expr, at: Optional[tuple] = None) -> Optional[int]:
    """The number a global batch expression stands for: a literal, or a name bound once to one (or,
    ``at`` a (cell, line) of the notebook's top level, to one by its last binding before it)."""
    return int_literal(size) if not isinstance(size, ast.Name) else _constant(context, size.id, at)


def _constant(context, name: str, at: Optional[tuple] = None) -> Optional[int]:
    bound = [(c, a) for c, _unused, a in context.facts.assignments(name) if a.function is None and not a.tuple_target]
    if len(bound) == 1:
        return int_literal(bound[0][1].value)
    before = [a for c, a in bound if at is not None and (c, a.stmt.lineno) < at]
    return int_literal(before[-1].value) if len(bound) > 1 and before else None
