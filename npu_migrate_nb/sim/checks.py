"""The three run-time checks, judged from what the probes recorded in every rank.

* ``broadcast``: trainable variables identical on all ranks when training starts.
* ``allreduce``: every rank changed its weights by the same amount during training while the
  ranks read different data. Comparing the change (end - start) rather than the end values keeps
  this check independent of the broadcast: with aggregated gradients every rank applies the same
  updates even from different starting weights. When every rank read the same data, equal weights
  prove nothing: ``not-observed``.
* ``shard``: the ranks' first input batches differ, and each rank's pipeline is deterministic
  (otherwise an unseeded shuffle alone would make them differ) or shards by rank.

Data that is one sample repeated (``Dataset.from_tensors(...).repeat()``, a batch of identical rows
on every rank) cannot be split and gives every rank the same gradients: ``shard`` and ``allreduce``
are ``not-applicable`` there, with that reason.

Each check is ``pass``, ``fail`` or ``not-observed`` with one line: what was seen, on which cell,
which step fixes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..i18n import N_, _

PASS, FAIL, NOT_OBSERVED = "pass", "fail", "not-observed"
NOT_APPLICABLE = "not-applicable"  # the analyzer says the step does not apply to this notebook, and why

# How the checks and their results are shown to a person (the keys stay English data, as in JSON).
CHECK_LABELS = {"broadcast": N_("broadcast"), "allreduce": N_("allreduce"), "shard": N_("shard")}
STATUS_LABELS = {
    PASS: N_("pass"),
    FAIL: N_("fail"),
    NOT_OBSERVED: N_("not-observed"),
    NOT_APPLICABLE: N_("not-applicable"),
    "skipped": N_("skipped"),
}


def check_label(name: str) -> str:
    """A check's name as shown to a person (``broadcast`` in English)."""
    return _(CHECK_LABELS[name]) if name in CHECK_LABELS else name


def status_label(status: str) -> str:
    """A check's result as shown to a person (``pass``, ``fail``, ``not-observed`` in English)."""
    return _(STATUS_LABELS[status]) if status in STATUS_LABELS else status


# The step that fixes each check, by what the probes saw training with.
FIXES = {
    "broadcast": {
        "estimator": N_("append NPUBroadcastGlobalVariablesHook(0, rank_id) to the training hooks, "
                        "or pass hooks=npu_hooks_append(hooks) to train"),
        "keras fit": N_("after the model is built: npu.distribute.broadcast(model.trainable_variables) "
                        "(TF1 Keras: callbacks=[NPUBroadcastGlobalVariablesCallback(0)])"),
        "optimizer step": N_("after the model is built: npu.distribute.broadcast(model.trainable_variables)"),
        "learning rule": N_("start the parameters alike on every rank (a constant, or a draw seeded alike)"),
    },
    "allreduce": {
        "estimator": N_("optimizer = npu_distributed_optimizer_wrapper(optimizer) in the model_fn (a TF2 canned "
                        "Estimator: optimizer=lambda: npu.distribute.npu_distributed_keras_optimizer_wrapper(...))"),
        "keras fit": N_("optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer) "
                        "(TF1: npu_distributed_optimizer_wrapper)"),
        "optimizer step": N_("grads = npu.distribute.all_reduce(grads, reduction='mean') before apply_gradients, "
                             "or wrap the optimizer with npu.distribute.npu_distributed_keras_optimizer_wrapper"),
        "tape gradient": N_("grads = npu.distribute.all_reduce(grads, reduction='mean') right after tape.gradient"),
        "learning rule": N_("all-reduce what each update adds: p = p + npu.distribute.all_reduce(term, reduction='mean')"),
    },
    "shard": {
        "estimator": N_("in the input_fn: dataset.shard(int(os.environ['RANK_SIZE']), int(os.environ['RANK_ID'])) "
                        "before batching, with the batch size divided by RANK_SIZE"),
        "estimator numpy arrays": N_("numpy_input_fn(x=x[rank_id::rank_size][:len(x) // rank_size], "
                                     "y=y[rank_id::rank_size][:len(x) // rank_size], batch_size=batch_size // rank_size)"),
        "keras fit arrays": N_("model.fit(x[rank_id::rank_size][:len(x) // rank_size], y[rank_id::rank_size][:len(x) // "
                               "rank_size], batch_size=batch_size // rank_size)"),
        "arrays the step reads": N_("each rank keeps its rows where the arrays are made: x = x[rank_id::rank_size]"),
        "graph constants the step reads": N_("each rank keeps its rows where the arrays are made: x = x[rank_id::rank_size]"),
        "window a learning rule reads": N_("each rank takes its rows of each window: batch = x[start:end][rank_id::rank_size]"),
        "default": N_("dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, global_batch_size), "
                      "then dataset.batch(batch_size)"),
    },
}


def fix_for(check: str, source: Optional[str]) -> str:
    steps = FIXES[check]
    key = "estimator" if source and source.startswith("estimator") and source not in steps else source
    step = steps.get(key, steps.get("default", steps.get("optimizer step", "")))
    return _("fix: {step}").format(step=_(step) if step else step)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    cell: Optional[int] = None

    def to_json(self) -> dict:
        return asdict(self)


Records = Dict[int, List[dict]]  # rank -> the records its probes made, in order


def evaluate(records: Records, size: int) -> Dict[str, Check]:
    judged = {}
    records = in_rank_0s_start_order(records)
    for step, check in (("broadcast", check_broadcast), ("allreduce", check_allreduce), ("shard", check_shard)):
        try:
            judged[step] = check(records, size)
        except Exception as error:  # records of a shape no check expected: said, and the run goes on
            judged[step] = Check(step, NOT_OBSERVED, _("the records could not be judged ({error}): please report "
                                                       "this notebook").format(error=f"{type(error).__name__}: {error}"))
    return judged


def not_applicable_where_the_analysis_says(checks: Dict[str, Check], analysis) -> Dict[str, Check]:
    """A step the analyzer found not applicable (an input optimized instead of weights, data from an
    environment, trees instead of gradients) is said so, with its reason, rather than judged: what the
    probes see there (one variable alike on every rank) would prove nothing."""
    if analysis.framework == "none":  # the analyzer saw no training; the ranks may have: keep their verdict
        return checks
    judged = dict(checks)
    for step, status in analysis.steps.items():
        if status == NOT_APPLICABLE and step in judged:
            judged[step] = Check(step, NOT_APPLICABLE, analysis.reasons.get(step) or _("not applicable"),
                                 judged[step].cell)
    return judged


# ------------------------------------------------------------------------------- selections


def in_rank_0s_start_order(records: Records, reference: Optional[List[dict]] = None) -> Records:
    """The records, each rank's first start of training being of the variables rank 0 (or
    ``reference``) started first, when that rank started them in the same cell too. Two models updated
    in one step (a GAN's two ``apply_gradients`` in one ``tf.function``) start in an order the graph does
    not fix, so that each rank may see the other first: the checks would compare different models."""
    reference = records.get(0, []) if reference is None else reference
    wanted = first_start(reference)
    if wanted is None:
        return records
    ordered = {}
    for rank, rank_records in records.items():
        first = first_start(rank_records)
        same = _start_of(rank_records, wanted["names"])
        if first is None or same is None or same is first or same["cell"] != first["cell"]:
            ordered[rank] = rank_records
            continue
        swapped = list(rank_records)
        i, j = (next(k for k, record in enumerate(swapped) if record is wanted_one) for wanted_one in (first, same))
        swapped[i], swapped[j] = {**same, "seq": first["seq"]}, {**first, "seq": same["seq"]}
        ordered[rank] = swapped
    return ordered


def first_start(rank_records: List[dict]) -> Optional[dict]:
    return next((r for r in rank_records if r["kind"] == "weights" and r["moment"] == "start"), None)


def last_end(rank_records: List[dict], start: dict) -> Optional[dict]:
    """The last end of the start's variables. A TF1 notebook that resets its graph and builds another
    model may reuse the names with other shapes: those are another training's end."""
    ends = [r for r in rank_records if r["kind"] == "weights" and r["moment"] == "end" and r["seq"] > start["seq"]]
    same_variables = [r for r in ends if r["names"] == start["names"] and _same_shapes(r, start)]
    return (same_variables or ends or [None])[-1]


def _same_shapes(record: dict, other: dict) -> bool:
    samples, others = record.get("samples") or [], other.get("samples") or []
    return len(samples) == len(others) and all(np.shape(a) == np.shape(b) for a, b in zip(samples, others))


def training_input(rank_records: List[dict]) -> Optional[dict]:
    """The input read for training: the last one read before training started, else the first."""
    inputs = [r for r in rank_records if r["kind"] == "input"]
    if not inputs:
        return None
    start = first_start(rank_records)
    if start is not None:
        before = [r for r in inputs if r["seq"] < start["seq"]]
        if before:
            return before[-1]
    return inputs[0]


def _where(record: Optional[dict]) -> str:
    if record is None or record.get("cell") is None:
        return ""
    return _(" (cell {cell}, {source})").format(cell=record["cell"], source=record["source"])


def _missing(records: Records, size: int, select) -> List[int]:
    return [rank for rank in range(size) if select(records.get(rank, [])) is None]


def _groups(values: Dict[int, str]) -> str:
    """'rank 0: ab12, ranks 1,2: cd34'."""
    by_value: Dict[str, List[int]] = {}
    for rank, value in sorted(values.items()):
        by_value.setdefault(value, []).append(rank)
    parts = []
    for value, ranks in by_value.items():
        listed = ",".join(map(str, ranks))
        parts.append((_("rank {ranks}: {value}") if len(ranks) == 1 else _("ranks {ranks}: {value}")).format(
            ranks=listed, value=value))
    return _("; ").join(parts)


def _ranks(ranks: List[int]) -> str:
    return ",".join(map(str, ranks))


# --------------------------------------------------------------------------------- broadcast


def check_broadcast(records: Records, size: int) -> Check:
    if size < 2:
        return Check("broadcast", NOT_OBSERVED, _("one rank: nothing to compare"))
    missing = _missing(records, size, first_start)
    if missing:
        return Check(
            "broadcast",
            NOT_OBSERVED,
            _("no training step seen on rank(s) {ranks} "
              "(watched: Keras fit, Estimator.train, optimizer apply_gradients, tape gradients of variables updated by hand, "
              "tensors a learning rule rebinds)").format(ranks=_ranks(missing)),
        )
    starts = {rank: first_start(records[rank]) for rank in range(size)}
    cell = starts[0]["cell"]
    empty = [rank for rank, start in starts.items() if not start["count"]]
    if empty:
        return Check(
            "broadcast",
            NOT_OBSERVED,
            _("training started with no trainable variables on rank(s) {ranks}{where}: nothing to compare").format(
                ranks=_ranks(empty), where=_where(starts[0])),
            cell,
        )
    verdict = _broadcast_verdict(records, size, starts)
    for names in _other_trained_sets(records[0], starts[0]) if verdict.status == PASS else ():
        others = {rank: _start_of(records.get(rank, []), names) for rank in range(size)}
        if all(start is not None and start["count"] for start in others.values()):
            other = _broadcast_verdict(records, size, others)
            if other.status == FAIL:  # a second model trained beside the first (a GAN's generator)
                return other
    return verdict


def _other_trained_sets(rank_records: List[dict], first: dict) -> List[list]:
    """The variables of the other models a custom loop trained, each with its own start."""
    names = []
    for record in rank_records:
        if record["kind"] == "weights" and record["moment"] == "start" and record["names"] != first["names"] \
                and record["source"] in ("optimizer step", "tape gradient", "learning rule") and record["names"] not in names:
            names.append(record["names"])
    return names


def _start_of(rank_records: List[dict], names: list) -> Optional[dict]:
    return next((r for r in rank_records if r["kind"] == "weights" and r["moment"] == "start"
                 and r["names"] == names), None)


def _broadcast_verdict(records: Records, size: int, starts: Dict[int, dict]) -> Check:
    cell = starts[0]["cell"]
    prints = {rank: start["fingerprint"] for rank, start in starts.items()}
    count = starts[0]["count"]
    when = _("when training started")
    if starts[0].get("after_first_step"):
        when = _("after the first batch (the model built its variables on its first batch)")
    if len(set(prints.values())) == 1:
        return Check(
            "broadcast",
            PASS,
            _("{count} trainable variables identical on all {size} ranks {when}{where}").format(
                count=count, size=size, when=when, where=_where(starts[0])),
            cell,
        )
    if _broadcast_after_the_first_update(records, size, starts):
        return Check(
            "broadcast",
            PASS,
            _("{count} trainable variables identical on all {size} ranks after the first update{where}: "
              "they differed when training started, and were broadcast after the first step (a model that builds "
              "its variables on its first call)").format(count=count, size=size, where=_where(starts[0])),
            cell,
        )
    return Check(
        "broadcast",
        FAIL,
        _("trainable variables differ across ranks {when}{where}: {groups}; {fix}").format(
            when=when, where=_where(starts[0]), groups=_groups(prints), fix=fix_for("broadcast", starts[0]["source"])),
        cell,
    )


def _broadcast_after_the_first_update(records: Records, size: int, starts: Dict[int, dict]) -> bool:
    """Did the ranks start apart and hold the same weights after the first update? With aggregated
    gradients every rank applies the same update, so ranks that started apart stay apart unless a
    broadcast came in between: only the samples are compared (a start's fingerprint is exact, a
    later moment has samples only), so the starts' samples must differ too."""
    def samples(record):
        return [np.asarray(part) for part in record["samples"]]

    def same(a, b):
        return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))

    firsts = {rank: _first_step(records[rank], starts[rank]) for rank in range(size)}
    if any(first is None or first["names"] != starts[rank]["names"] for rank, first in firsts.items()):
        return False
    started_apart = any(not same(samples(starts[0]), samples(starts[rank])) for rank in range(1, size))
    return started_apart and all(same(samples(firsts[0]), samples(firsts[rank])) for rank in range(1, size))


# --------------------------------------------------------------------------------- allreduce


def _change(rank_records: List[dict], from_first_step: bool = False) -> Optional[List[np.ndarray]]:
    """What training changed in the weights: end - start, or end - the first step's result when the
    ranks were broadcast after their first update (the broadcast, not training, moved them then)."""
    start = first_start(rank_records)
    end = last_end(rank_records, start) if start else None
    if from_first_step and start is not None:
        start = _first_step(rank_records, start)
    if start is None or end is None or end["names"] != start["names"] or not _same_shapes(start, end):
        return None
    return [np.asarray(e) - np.asarray(s) for s, e in zip(start["samples"], end["samples"])]


def _largest_difference(changes: Dict[int, List[np.ndarray]]) -> tuple:
    """(rank differing most from rank 0, its largest element difference, the tolerance)."""
    reference = changes[0]
    scale = max((float(np.max(np.abs(c))) for c in reference if c.size), default=0.0)
    tolerance = 1e-4 * scale + 1e-6
    worst_rank, worst = 0, 0.0
    for rank, change in changes.items():
        for a, b in zip(reference, change):
            difference = float(np.max(np.abs(a - b))) if a.size else 0.0
            if difference > worst:
                worst_rank, worst = rank, difference
    return worst_rank, worst, tolerance


ONE_SAMPLE = N_("every rank's training batches hold one sample, repeated (one-element data such as "
                "Dataset.from_tensors(...).repeat())")


def one_sample_repeated(inputs: Dict[int, Optional[dict]]) -> bool:
    """Is every rank's first training batch one and the same row, repeated? Such data cannot be
    split: which rank reads which part does not show, and does not change the gradients."""
    rows = [record.get("rows") if record else None for record in inputs.values()]
    if any(not digests or len(digests) < 2 for digests in rows):
        return False
    return len({digest for digests in rows for digest in digests}) == 1


def ranks_read_same_data(records: Records, size: int) -> Optional[bool]:
    inputs = {rank: training_input(records.get(rank, [])) for rank in range(size)}
    if any(record is None for record in inputs.values()):
        return None
    return len({record["fingerprint"] for record in inputs.values()}) == 1


def _skipped_updates(records: Records, size: int) -> str:
    """'; rank 1 skipped its update at step 3 ...' when some rank skipped a step the others applied."""
    skipped = {rank: {r["step"] for r in records.get(rank, []) if r["kind"] == "skipped update"} for rank in range(size)}
    everyone = set.intersection(*skipped.values())
    alone = {rank: sorted(steps - everyone) for rank, steps in skipped.items() if steps - everyone}
    if not alone:
        return ""
    which = ", ".join(_("rank {rank} skipped its update at step {steps}").format(
        rank=rank, steps=", ".join(map(str, steps))) for rank, steps in alone.items())
    return _("; {which} (its loss-scale optimizer saw its float status overflow) while the other ranks applied "
             "theirs: NPULossScaleOptimizer(..., is_distributed=True) has every rank skip the same steps").format(
        which=which)


def check_allreduce(records: Records, size: int) -> Check:
    if size < 2:
        return Check("allreduce", NOT_OBSERVED, _("one rank: nothing to compare"))
    starts = {rank: first_start(records.get(rank, [])) for rank in range(size)}
    late = all(starts.values()) and _broadcast_after_the_first_update(records, size, starts)
    changes = {rank: _change(records.get(rank, []), from_first_step=late) for rank in range(size)}
    missing = [rank for rank, change in changes.items() if change is None]
    if missing:
        return Check(
            "allreduce",
            NOT_OBSERVED,
            _("no complete training (start and end weights) seen on rank(s) {ranks}").format(ranks=_ranks(missing)),
        )
    start = first_start(records[0])
    end = last_end(records[0], start)
    cells = _cells(start["cell"], end["cell"])
    rank, difference, tolerance = _largest_difference(changes)
    same_data = ranks_read_same_data(records, size)
    if difference > tolerance:
        return Check(
            "allreduce",
            FAIL,
            _("weights changed differently on each rank during training ({cells}, {source}): "
              "rank {rank} differs from rank 0 by up to {difference}{skipped}; {fix}").format(
                cells=cells, source=start["source"], rank=rank, difference=f"{difference:.3g}",
                skipped=_skipped_updates(records, size), fix=fix_for("allreduce", start["source"])),
            end["cell"],
        )
    if same_data is None:
        return Check(
            "allreduce",
            NOT_OBSERVED,
            _("weights changed identically on all ranks ({cells}) but the input was not observed, "
              "so it is unknown whether the ranks read different data").format(cells=cells),
            end["cell"],
        )
    if same_data and one_sample_repeated({r: training_input(records.get(r, [])) for r in range(size)}):
        return Check(
            "allreduce",
            NOT_APPLICABLE,
            _("weights changed identically on all ranks ({cells}); {one_sample}, so every rank computes the same "
              "gradients and averaging them changes nothing").format(cells=cells, one_sample=_(ONE_SAMPLE)),
            end["cell"],
        )
    if same_data:
        return Check(
            "allreduce",
            NOT_OBSERVED,
            _("weights changed identically on all ranks ({cells}), but every rank read the same data, "
              "which proves nothing; shard the data first ({fix})").format(
                cells=cells, fix=fix_for("shard", start["source"])),
            end["cell"],
        )
    return Check(
        "allreduce",
        PASS,
        _("weights changed identically on all {size} ranks ({cells}, {source}) "
          "while the ranks read different data").format(size=size, cells=cells, source=start["source"]),
        end["cell"],
    )


def _cells(first: int, last: int) -> str:
    """'cells 3-5', or 'cell 3' when both are the same."""
    if first != last:
        return _("cells {first}-{last}").format(first=first, last=last)
    return _("cell {cell}").format(cell=first)


# ------------------------------------------------------------------------------------- shard


def check_shard(records: Records, size: int) -> Check:
    if size < 2:
        return Check("shard", NOT_OBSERVED, _("one rank: nothing to compare"))
    inputs = {rank: training_input(records.get(rank, [])) for rank in range(size)}
    missing = [rank for rank, record in inputs.items() if record is None]
    if missing:
        return Check(
            "shard",
            NOT_OBSERVED,
            _("no input batch seen on rank(s) {ranks} "
              "(watched: fit's x, Estimator input_fn datasets, datasets iterated eagerly, a session's feeds, "
              "the arrays a step reads, the window a learning rule reads)").format(
                ranks=_ranks(missing)),
        )
    first = inputs[0]
    cell = first["cell"]
    prints = {rank: record["fingerprint"] for rank, record in inputs.items()}
    if one_sample_repeated(inputs):
        return Check("shard", NOT_APPLICABLE, _("{one_sample}{where}: whatever the split, each rank reads "
                                                "that sample, so there is nothing to shard").format(
            one_sample=_(ONE_SAMPLE), where=_where(first)), cell)
    if len(set(prints.values())) < size:
        return Check(
            "shard",
            FAIL,
            _("ranks read the same first batch{where}: {groups}; {fix}").format(
                where=_where(first), groups=_groups(prints), fix=fix_for("shard", first["source"])),
            cell,
        )
    shared = _shared_samples(inputs)
    if shared is not None:
        (rank_a, rank_b), common, seen = shared
        return Check(
            "shard",
            FAIL,
            _("ranks read the same samples{where}: {common} of the first {seen} rows rank {rank_b} read were "
              "also read by rank {rank_a} (each rank reads the whole dataset, or shuffles before sharding); "
              "{fix}").format(where=_where(first), common=common, seen=seen, rank_b=rank_b, rank_a=rank_a,
                              fix=fix_for("shard", first["source"])),
            cell,
        )
    uneven = uneven_steps(records, size)
    if uneven is not None:
        record, planned = uneven
        return Check("shard", FAIL, _(
            "the ranks would train for different numbers of steps{where}: {counts}; past the shortest, a rank "
            "waits in an all-reduce the others never join (proof mode stopped every rank before that). Give "
            "every rank as many rows: x[rank_id::rank_size][:len(x) // rank_size], or a dataset cut to a "
            "multiple of RANK_SIZE before .shard").format(
                where=_where(record), counts=_groups({rank: f"{count:,}" for rank, count in planned.items()})),
            record["cell"])
    random = [rank for rank, record in inputs.items() if record.get("deterministic") is False]
    unsharded = [rank for rank in random if not inputs[rank].get("sharded")]
    if unsharded:
        return Check(
            "shard",
            NOT_OBSERVED,
            _("first batches differ{where}, but the input pipeline is random (an unseeded shuffle?) "
              "and does not shard by rank, so the difference does not show that each rank reads its own part; "
              "seed the shuffle to check, or shard before shuffling").format(where=_where(first)),
            cell,
        )
    return Check("shard", PASS, _("each of the {size} ranks read a different first batch{where}").format(
        size=size, where=_where(first)), cell)


def uneven_steps(records: Records, size: int) -> Optional[Tuple[dict, Dict[int, int]]]:
    """(rank 0's record, steps or loop turns by rank) of the first training call proof mode cut whose
    length, as written, differs from rank to rank; None when all agree or cannot be told. Proof mode
    cuts every rank at the same step, so an uneven shard (303 rows: 152 and 151, a batch of 1) would
    otherwise pass, and then hang on cards at the last step of the rank with more."""
    cut = {rank: [r for r in records.get(rank, []) if r["kind"] == "shortened"] for rank in range(size)}
    for index, first in enumerate(cut[0]):
        calls = [cut[rank][index] if index < len(cut[rank]) else None for rank in range(size)]
        if any(call is None or (call["cell"], call["source"]) != (first["cell"], first["source"]) for call in calls):
            return None  # the ranks cut different calls: their order cannot be matched
        planned = {rank: call["written"] if call.get("written") is not None else call.get("iterations")
                   for rank, call in enumerate(calls)}
        if None not in planned.values() and len(set(planned.values())) > 1:
            return first, planned
    return None


def _shared_samples(inputs):
    """((rank a, rank b), rows in common, rows b read) for the first pair of ranks that read common
    samples; None when they share none, or when that cannot be told (no sample, or data whose rows
    repeat within one rank, such as constant test data)."""
    samples = {rank: record.get("sample") for rank, record in inputs.items()}
    if any(not sample for sample in samples.values()):
        return None
    if any(len(set(sample)) < 0.9 * len(sample) for sample in samples.values()):
        return None
    ranks = sorted(samples)
    for index, rank_a in enumerate(ranks):
        for rank_b in ranks[index + 1:]:
            common = len(set(samples[rank_a]) & set(samples[rank_b]))
            if common > _explained_by_duplicates(inputs[rank_b], samples[rank_b]):
                return (rank_a, rank_b), common, len(samples[rank_b])
    return None


# Arrays given to fit: the share of a rank's rows that may equal another rank's rows by the data's own
# duplicates. Ranks given the same arrays fail before this, by the fingerprint of the whole arrays.
ARRAY_DUPLICATES_SHARE = 1 / 16
ARRAY_SOURCES = ("keras fit arrays", "estimator numpy arrays")  # a rank's whole arrays, recorded at once


def _explained_by_duplicates(record: dict, sample: List[str]) -> int:
    """Data can hold the same sample twice (the n-grams of a chorus sung twice, reviews made only of
    unknown words): a correct shard of arrays then gives two ranks equal rows, which digests cannot
    tell from one row read twice (issue 34: two text notebooks failed a correct shard by 4 rows in
    128). For arrays, a few such rows are the data's; a dataset's sample ends at its first repeated row,
    and its ranks may read the same rows in other orders, so any row in common counts there, unless the
    pipeline is random and sharded: a generator drawing samples with replacement (a course's
    ``np.random.randint`` per sample) gives each rank draws that meet by chance, as one card's do."""
    random_draws = record.get("deterministic") is False and record.get("sharded")  # sampled with replacement
    return int(len(sample) * ARRAY_DUPLICATES_SHARE) if record.get("source") in ARRAY_SOURCES or random_draws else 0


# ---------------------------------------------------------------------------- single-card math

SINGLE_CARD = "single_card_math"
# Largest difference between an N-rank update and one card's, as a share of one card's: summing in
# another order stays far below it; a wrong reduction is off by a factor of N.
FIRST_UPDATE_RTOL = 1e-3
# The same for the final weights, per step taken: float-order differences grow with every step (a
# ResNet at learning rate 0.5 drifted by 1e-2 of the change in 24 steps, its first update exact),
# up to a cap a wrong reduction still exceeds.
SINGLE_CARD_RTOL = 1e-3
SINGLE_CARD_RTOL_CAP = 0.05


def _rows_union(inputs: Dict[int, dict]):
    from collections import Counter

    union: Counter = Counter()
    for record in inputs.values():
        union.update(record["rows"])
    return union


def _flat(samples: List[np.ndarray]) -> np.ndarray:
    arrays = [np.asarray(a, dtype=np.float64).reshape(-1) for a in samples]
    return np.concatenate(arrays) if arrays else np.zeros(0)


def check_single_card(records: Records, size: int, single: Optional[List[dict]]) -> Check:
    """Does the N-rank run reach the weights one card reaches at the same global batch?

    ``records``: the N ranks' records of the comparison run; ``single``: the records of the same
    notebook run on one rank (RANK_SIZE=1) seeded like rank 0, so that it starts from rank 0's
    initial weights. Both ran with the shuffles after the shard and training-mode randomness held
    fixed ("held" records). Comparable only when the ranks' first batches together are exactly the
    single card's first batch (as multisets of rows).
    """
    name = SINGLE_CARD
    if size < 2:
        return Check(name, NOT_OBSERVED, _("one rank: nothing to compare"))
    if single is None:
        return Check(name, NOT_OBSERVED, _("the single-card run did not complete"))
    single = in_rank_0s_start_order({0: single}, records.get(0, []))[0]
    records = in_rank_0s_start_order(records)
    missing = _missing(records, size, first_start)
    if missing or first_start(single) is None:
        where = _("rank(s) {ranks}").format(ranks=_ranks(missing)) if missing else _("the single-card run")
        return Check(name, NOT_OBSERVED, _("no training step seen on {where}").format(where=where))
    starts = {rank: first_start(records[rank]) for rank in range(size)}
    ends = {rank: last_end(records[rank], starts[rank]) for rank in range(size)}
    start1 = first_start(single)
    end1 = last_end(single, start1)
    if any(end is None for end in ends.values()) or end1 is None:
        return Check(name, NOT_OBSERVED, _("no complete training (start and end weights) seen in both runs"))
    cell = ends[0]["cell"]
    where = _where(starts[0])
    shapes = [np.asarray(a).shape for a in start1["samples"]]
    for record in list(starts.values()) + list(ends.values()) + [end1]:
        if [np.asarray(a).shape for a in record["samples"]] != shapes:
            return Check(name, NOT_OBSERVED, _("the runs trained different variables{where}").format(where=where),
                         cell)
    if not any(int(np.prod(shape)) for shape in shapes):
        return Check(name, NOT_OBSERVED, _("no trainable variables{where}").format(where=where), cell)
    unlike = _different_data(records, size, single, where)
    if unlike:
        return Check(name, NOT_OBSERVED, unlike, cell)

    # Same start: rank 0's initial weights (the broadcast gives them to every rank).
    start_n, start_1 = _flat(starts[0]["samples"]), _flat(start1["samples"])
    weight_scale = float(np.max(np.abs(start_1))) if start_1.size else 0.0
    if float(np.max(np.abs(start_n - start_1))) > 1e-6 * weight_scale + 1e-7:
        reason = (_("the first update ran before the weights were made equal (broadcast after the first batch)")
                  if starts[0].get("after_first_step") or start1.get("after_first_step")
                  else _("its initialisation is not reproducible from the seeds"))
        return Check(name, NOT_OBSERVED, _("the single-card run did not start from rank 0's weights{where}: "
                                           "{reason}").format(where=where, reason=reason), cell)
    change1 = _flat(end1["samples"]) - start_1
    scale = float(np.max(np.abs(change1))) if change1.size else 0.0
    if scale == 0.0:
        return Check(name, NOT_OBSERVED, _("training did not change the weights on one card{where}").format(
            where=where), cell)
    context = _("{cells}, {source}").format(cells=_cells(starts[0]["cell"], cell), source=starts[0]["source"])
    first = _first_update(records[0], starts[0], single, start1)
    if first is not None and first["relative"] > FIRST_UPDATE_RTOL:
        return Check(name, FAIL, _("the {size}-rank run did not reproduce one card's training ({context}): its "
                                   "first update differs from one card's by {relative}; {hint}").format(
            size=size, context=context, relative=f"{first['relative']:.0%}",
            hint=_reduction_hint(first["factor"], size, _("the first update was"))), cell)

    worst_rank, worst = 0, 0.0
    for rank in range(size):
        difference = float(np.max(np.abs(_flat(ends[rank]["samples"]) - _flat(end1["samples"]))))
        if difference > worst:
            worst_rank, worst = rank, difference
    relative = worst / scale
    steps = _steps_taken(single, start1, end1)
    tolerance = final_tolerance(steps)
    if relative <= tolerance:
        first_said = (_("first update {factor}x one card's, ").format(factor=f"{first['factor']:.2f}")
                      if first is not None else "")
        return Check(name, PASS, _("{size} ranks reached the weights one card reaches at the same global batch "
                                   "({context}): {first_said}final weights within {worst} ({relative} of the change "
                                   "training made{over_steps}){held_fixed}").format(
            size=size, context=context, first_said=first_said, worst=f"{worst:.2g}", relative=f"{relative:.1e}",
            over_steps=_over_steps(steps), held_fixed=_held_fixed(records[0], single)), cell)
    if first is not None:  # the first update matched: the runs parted later
        cause = _("the first update matched one card's ({factor}x), so later steps differ: the data of later "
                  "batches, a learning-rate schedule or other per-rank state").format(factor=f"{first['factor']:.2f}")
    else:
        change_n = _flat(ends[0]["samples"]) - start_n
        cause = _reduction_hint(_factor(change_n, change1), size)
    return Check(name, FAIL, _("the {size}-rank run did not reproduce one card's training ({context}): rank "
                               "{rank}'s weights differ from one card's by up to {worst} ({relative} of the change "
                               "training made{over_steps}, tolerance {tolerance}); {cause}").format(
        size=size, context=context, rank=worst_rank, worst=f"{worst:.3g}", relative=f"{relative:.1%}",
        over_steps=_over_steps(steps), tolerance=f"{tolerance:.1%}", cause=cause), cell)


def final_tolerance(steps: Optional[int]) -> float:
    """How far the final weights may be from one card's, as a share of the change training made."""
    if not steps:
        return SINGLE_CARD_RTOL_CAP if steps is None else SINGLE_CARD_RTOL
    return min(SINGLE_CARD_RTOL_CAP, SINGLE_CARD_RTOL * steps)


def _over_steps(steps: Optional[int]) -> str:
    return _(", {steps} steps").format(steps=steps) if steps else ""


def _factor(change_n: np.ndarray, change1: np.ndarray) -> float:
    """How large ``change_n`` is along ``change1`` (1.0: the same update)."""
    denominator = float(np.dot(change1, change1))
    return float(np.dot(change_n, change1) / denominator) if denominator else float("nan")


def _first_update(rank_records: List[dict], start: dict, single: List[dict], start1: dict) -> Optional[dict]:
    """{"factor", "relative"}: rank 0's first update against one card's, when both were observed."""
    step_n, step_1 = _first_step(rank_records, start), _first_step(single, start1)
    if step_n is None or step_1 is None:
        return None
    start_n, start_1 = _flat(start["samples"]), _flat(start1["samples"])
    change_n, change1 = _flat(step_n["samples"]) - start_n, _flat(step_1["samples"]) - start_1
    if change_n.shape != change1.shape:
        return None
    scale = float(np.max(np.abs(change1))) if change1.size else 0.0
    if scale == 0.0:
        return None
    return {"factor": _factor(change_n, change1), "relative": float(np.max(np.abs(change_n - change1))) / scale}


def _steps_taken(rank_records: List[dict], start: dict, end: dict) -> Optional[int]:
    """Optimizer steps between ``start`` and ``end`` (the "end" records count them), None if unknown."""
    counted = [r.get("steps") for r in rank_records if r["kind"] == "weights" and r["moment"] == "end"
               and start["seq"] < r["seq"] <= end["seq"]]
    if not counted or any(not isinstance(steps, int) for steps in counted):
        return None
    return sum(counted)


def _different_data(records: Records, size: int, single: List[dict], where: str) -> Optional[str]:
    """Why the runs did not read the same data (the ranks' first batches together are not the
    single card's first batch), or None when they did."""
    inputs = {rank: training_input(records.get(rank, [])) for rank in range(size)}
    input1 = training_input(single)
    if any(r is None or r.get("rows") is None for r in list(inputs.values()) + [input1]):
        return _("the rows of the first batches were not observed{where} (watched: datasets iterated eagerly or "
                 "given to fit/Estimator, fit arrays)").format(where=where)
    from collections import Counter

    union, rows1 = _rows_union(inputs), Counter(input1["rows"])
    if union == rows1:
        return None
    common = sum((union & rows1).values())
    if any(r.get("deterministic") is False for r in list(inputs.values()) + [input1]):
        why = _("a shuffle before the shard draws differently in the two runs (unseeded, or not seeded "
                "alike); seed it (shuffle(n, seed=...)) to compare")
    else:
        why = _("the ranks do not split the single card's batches (a per-rank batch that is not the global "
                "batch divided by the rank count, or a split that is not by rank)")
    return _("the {size} ranks' first batches together ({rows} rows) are not the single card's "
             "first batch ({rows1} rows, {common} in common){where}: {why}").format(
        size=size, rows=sum(union.values()), rows1=sum(rows1.values()), common=common, where=where, why=why)


def _site_label(site) -> str:
    cell, function, line = site
    if function == "<module>":
        return _("cell {cell}, line {line}").format(cell=cell, line=line)
    return _("in {function}(), line {line}").format(function=function, line=line)


def _held_fixed(rank_records: List[dict], single: List[dict]) -> str:
    """'; held fixed in both runs: ...' for what the comparison neutralised, or ''."""
    held = [r for r in rank_records + single if r["kind"] == "held"]
    sites = sorted({tuple(r["site"]) for r in held if r["what"] == "shuffle"}, key=repr)
    parts = []
    if sites:
        label = _("the shuffle") if len(sites) == 1 else _("{count} shuffles").format(count=len(sites))
        parts.append(_("{label} after the shard ({sites})").format(
            label=label, sites=", ".join(_site_label(site) for site in sites)))
    if any(r["what"] == "fit shuffle" for r in held):
        parts.append(_("fit's shuffle of arrays"))
    layers = sorted({r["layer"] for r in held if r["what"] == "random layer"})
    if layers:
        parts.append(_("{layers} as at inference").format(layers=", ".join(layers)))
    return _("; held fixed in both runs: {parts}").format(parts=_("; ").join(parts)) if parts else ""


def _first_step(rank_records: List[dict], start: dict) -> Optional[dict]:
    return next((r for r in rank_records if r["kind"] == "weights" and r["moment"] == "step1"
                 and r["seq"] > start["seq"] and r["names"] == start["names"]), None)


def _reduction_hint(factor: float, size: int, which: Optional[str] = None) -> str:
    """What the ratio between the N-rank updates and one card's says about the reduction."""
    which = which if which is not None else _("the updates were")
    if abs(factor - 1.0 / size) <= 0.1 / size:
        return _("{which} 1/{size} of one card's: the gradients were averaged although the loss is already "
                 "divided by the global batch size; use all_reduce(grads, reduction=\"sum\")").format(
            which=which, size=size)
    if abs(factor - size) <= 0.1 * size:
        return _("{which} {size} times one card's: the gradients were summed although each rank's loss is a "
                 "mean over its own batch; use reduction=\"mean\" (or divide the loss by the global batch)").format(
            which=which, size=size)
    return _("{which} {factor} times one card's: check the gradient reduction (\"mean\" for a loss "
             "averaged over the rank's batch, \"sum\" for a loss divided by the global batch), the learning rate, "
             "the number of steps, and random ops in the training step (the comparison holds only Keras random "
             "layers and tf.nn.dropout fixed)").format(which=which, factor=f"{factor:.2f}")


# ------------------------------------------------------------------------------ files written twice


def file_clashes(records: Records, size: int) -> List[dict]:
    """The files several ranks wrote in the same cell: ``{"path", "ranks", "api", "cell"}``, in the
    order first written. On one server the ranks share a disk, and race on such a file."""
    writers: Dict[tuple, dict] = {}
    for rank in range(size):
        for record in records.get(rank, []):
            if record["kind"] != "write":
                continue
            key = (record["cell"], record["path"])
            entry = writers.setdefault(key, {"path": record["path"], "ranks": [], "api": record["source"],
                                             "cell": record["cell"], "seq": record["seq"]})
            if rank not in entry["ranks"]:
                entry["ranks"].append(rank)
    clashes = sorted((entry for entry in writers.values() if len(entry["ranks"]) > 1), key=lambda e: e["seq"])
    return [{key: value for key, value in entry.items() if key != "seq"} for entry in clashes]


def clash_text(clash: dict) -> str:
    ranks = ",".join(map(str, clash["ranks"]))
    return _("ranks {ranks} all wrote {path} ({api}, cell {cell}): on one server the "
             "ranks share a disk and race on its files; write it on rank 0 only (every-rank-writes)").format(
        ranks=ranks, path=clash["path"], api=clash["api"], cell=clash["cell"])
