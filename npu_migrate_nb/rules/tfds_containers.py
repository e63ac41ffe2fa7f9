"""The training split taken out of what ``tfds.load`` returns when that is not one dataset.

``tfds.load`` returns a dict of every split when no split is given, a list when ``split`` is a list, and
a ``(datasets, info)`` pair with ``with_info=True``. A ``.shard(...)`` on such a call fails on a tuple or
a list (issue 34: 11 of the 19 fixed corpus notebooks that failed on the ranks). The shard goes where
the training split is taken out instead: ``ds_train = ds_train.shard(...)`` after
``(ds_train, ds_test), info = tfds.load(..., split=['train', 'test'], with_info=True)``, or
``datasets['train'] = datasets['train'].shard(...)`` after ``datasets, info = tfds.load(...)``; the
other splits are evaluated whole on every rank, as on one card.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import List, Optional, Set, Tuple

from .. import knowledge as K
from ..facts import CallSite, CellFacts, chain_root_name
from .base import replace

TFDS_LOAD = "tensorflow_datasets.load"
TRAIN = "train"


@dataclass
class TrainingSplit:
    """Where the training split is once the load statement has run."""

    expression: str  # "ds_train", "datasets['train']", "splits[1]"
    names: Set[str]  # the names that hold it as it goes down the pipeline (for its batch)
    subscript: Optional[Tuple[str, object]] = None  # (container, key) when it stays in its container


def returns_a_container(context, site: CallSite) -> bool:
    """Is this a ``tfds.load`` whose result is not one dataset (a dict, a list, a pair with its info)?"""
    if context.facts.resolve(site.dotted) != TFDS_LOAD:
        return False
    return _with_info(site) or _split_kind(site) != "one"


def training_splits(context, site: CallSite) -> Optional[List[TrainingSplit]]:
    """The training splits of a container ``tfds.load``, from the statement that binds its result and
    the way the notebook takes them out; None when it cannot be told (the result indexed in place)."""
    stmt = site.stmt
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or stmt.value is not site.node:
        return None
    target = stmt.targets[0]
    if _with_info(site):
        if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != 2:
            return None
        target = target.elts[0]
    kind = _split_kind(site)
    if kind == "one":
        return [TrainingSplit(target.id, {target.id})] if isinstance(target, ast.Name) else None
    if kind == "list":
        splits = _split_list(site)
        if isinstance(target, (ast.Tuple, ast.List)):
            index = _training_index(splits, [e.id if isinstance(e, ast.Name) else "" for e in target.elts])
            part = target.elts[index] if index is not None else None
            return [TrainingSplit(part.id, {part.id})] if isinstance(part, ast.Name) else None
        if isinstance(target, ast.Name) and isinstance(site.argument(1, "split"), ast.List):
            taken = _keys_taken(context, target.id)
            index = next((key for key in taken if isinstance(key, int) and 0 <= key < len(splits)), None) \
                if taken else _training_index(splits, [""] * len(splits))
            return [TrainingSplit(f"{target.id}[{index}]", set(), (target.id, index))] if index is not None else None
        return None
    if isinstance(target, ast.Name):  # every split, in a dict keyed by name
        keys = [key for key in _keys_taken(context, target.id)
                if isinstance(key, str) and key.startswith(TRAIN)] or [TRAIN]
        return [TrainingSplit(f"{target.id}[{key!r}]", set(), (target.id, key)) for key in keys]
    return None


def _keys_taken(context, container: str) -> List[object]:
    """The keys of ``container[key]`` given to a name not named for evaluation, in notebook order."""
    keys: List[object] = []
    for _index, facts in context.facts.cells_mentioning(container):
        for stmt in facts.nodes(ast.Assign):
            if len(stmt.targets) == 1:
                for name, value in _pairs(stmt.targets[0], stmt.value):
                    base = _chain_base(value)
                    if isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name) \
                            and base.value.id == container and isinstance(base.slice, ast.Constant) \
                            and not K.named_for_evaluation(name) and base.slice.value not in keys:
                        keys.append(base.slice.value)
    return keys


def holders(facts_of_notebook, split: TrainingSplit) -> Set[str]:
    """The names the training split goes by in the notebook: those given ``container['train']`` (or
    ``container[i]``), and those made from it by a pipeline (``train = ds_train.map(f).shuffle(8)``)."""
    names = set(split.names)
    for _index, facts in facts_of_notebook.cells:
        for stmt in facts.nodes(ast.Assign):
            if len(stmt.targets) != 1:
                continue
            for target, value in _pairs(stmt.targets[0], stmt.value):
                if split.subscript is not None and _is_subscript_of(_chain_base(value), *split.subscript):
                    names.add(target)
    changed = True
    while changed:
        changed = False
        for _index, facts in facts_of_notebook.cells:
            for stmt in facts.nodes(ast.Assign):
                if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    if stmt.targets[0].id not in names and _flows_from(stmt.value, names) and not K.named_for_evaluation(stmt.targets[0].id):
                        names.add(stmt.targets[0].id)
                        changed = True
    return names


def first_batch(context, names: Set[str], after: Tuple[int, int], subscript: Optional[Tuple[str, object]] = None
                ) -> Optional[Tuple[int, CellFacts, CallSite]]:
    """The first ``.batch(...)`` (in notebook order, after ``after``) on a pipeline of these names, or of
    ``container[key]`` itself."""
    for cell, facts, site in context.facts.calls(*K.BATCH_METHODS):
        if (cell, site.node.lineno) <= after:
            continue
        if chain_root_name(site.receiver) in names or (subscript is not None and _is_subscript_of(_chain_base(site.receiver), *subscript)):
            return cell, facts, site
    return None


_ORDER_ONLY = {"shuffle", "batch", "prefetch", "cache", "repeat"}  # what adapt's statistics do not depend on


@dataclass
class WholeForAdapt:
    """A preprocessing layer's ``adapt`` reading the training split: it reads the whole split on every rank."""

    twin: Optional[str]  # the name the whole split keeps, bound before the shard; None: to do by hand
    edits: list  # the adapt calls re-rooted on it
    cells: List[int]


def whole_for_adapt(context, split: TrainingSplit, names: Set[str], after: Tuple[int, int],
                    function: Optional[str]) -> Optional[WholeForAdapt]:
    """Each ``layer.adapt(ds.map(...))`` on the training split's pipeline (``names``) after ``after`` reads
    the whole split instead of the rank's shard: vocabularies, means and bins are then the same on every
    rank, as on one card (adapted on shards, a word gets a different id on each rank). Only where the
    pipeline up to the adapt shuffles, batches, caches or prefetches (nothing the statistics depend on):
    the twin is batched with the global batch when the pipeline was; None when there is nothing to do or
    the pipeline does more (a ``map`` the adapt would then miss). ``function``: the load's; the adapt
    must be in it too (the twin is its local)."""
    adapts = []
    for cell, facts, site in context.facts.calls("adapt"):
        data = site.argument(0, "data")
        root = _root_name(data)
        if (cell, site.node.lineno) > after and root is not None and root.id in names:
            adapts.append((cell, facts, site, root))
    if not adapts:
        return None
    by_hand = WholeForAdapt(None, [], sorted({cell for cell, _f, _s, _r in adapts}))
    if any(site.function != function for _c, _f, site, _r in adapts):
        return by_hand  # another scope: the twin would not be bound there
    last = max((cell, site.node.lineno) for cell, _f, site, _r in adapts)
    if not _order_only_between(context, names, after, last, split.subscript):
        return None
    twin = _twin_name(split)
    edits, cells = [], []
    batched = first_batch(context, names, after, split.subscript)
    for cell, facts, site, root in adapts:
        code = twin
        if batched is not None and (batched[0], batched[2].node.lineno) < (cell, site.node.lineno) \
                and not _batches(site.argument(0, "data")):
            if batched[2].function != function:
                return by_hand  # its batch size is not known in the adapt's scope
            size = batched[2].argument(0, "batch_size")
            code += f".batch({batched[1].segment(size)})" if size is not None else ""
        edits.append(replace(cell, facts, root, code))
        cells.append(cell)
    return WholeForAdapt(twin, edits, sorted(set(cells)))


def _root_name(node: Optional[ast.AST]) -> Optional[ast.Name]:
    base = _chain_base(node)
    return base if isinstance(base, ast.Name) else None


def _batches(node: Optional[ast.AST]) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in K.BATCH_METHODS for n in ast.walk(node)) if node else False


def _order_only_between(context, names: Set[str], after: Tuple[int, int], until: Tuple[int, int],
                        subscript: Optional[Tuple[str, object]]) -> bool:
    """Does every rebinding of the pipeline's names between the two places only reorder or batch it
    (besides taking the split out of its container)?"""
    for name in names:
        for cell, _facts, assignment in context.facts.assignments(name):
            if not after < (cell, assignment.stmt.lineno) < until:
                continue
            if subscript is not None and (assignment.tuple_target or _is_subscript_of(assignment.value, *subscript)):
                continue  # ``train, test = datasets['train'], datasets['test']``
            value, methods = assignment.value, []
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                methods.append(value.func.attr)
                value = value.func.value
            if not (isinstance(value, ast.Name) and value.id in names and set(methods) <= _ORDER_ONLY):
                return False
    return True


def _twin_name(split: TrainingSplit) -> str:
    if split.subscript is None:
        return f"{split.expression}_whole"
    container, key = split.subscript
    return f"{container}_{key}_whole" if isinstance(key, str) and key.isidentifier() else f"{container}_whole"


def _chain_base(node: Optional[ast.AST]) -> Optional[ast.AST]:
    """``datasets['train']`` for ``datasets['train'].map(f).batch(8)``: what a chain of calls starts from."""
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def files_shuffled_alike(context, load: CallSite) -> Optional[str]:
    """``read_config=tfds.ReadConfig(shuffle_seed=...)`` for a load that shuffles its files with no read
    config of its own: unseeded, each rank reads the files in an order of its own, and a shard of those
    streams gives ranks overlapping samples. None when nothing is to add."""
    shuffled = load.keyword("shuffle_files")
    if shuffled is None or not (isinstance(shuffled.value, ast.Constant) and shuffled.value.value is True):
        return None
    if load.keyword("read_config") is not None:
        return None
    tfds = context.facts.alias_for("tensorflow_datasets")
    return f"read_config={tfds}.ReadConfig(shuffle_seed={K.SHARED_SEED})" if tfds else None


def _pairs(target: ast.expr, value: ast.expr) -> List[Tuple[str, ast.expr]]:
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        return [(t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name)]
    return []


def _is_subscript_of(node: ast.expr, container: str, key: object) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == container \
        and isinstance(node.slice, ast.Constant) and node.slice.value == key


def _flows_from(value: ast.expr, names: Set[str]) -> bool:
    """Is ``value`` a chain of calls on one of ``names`` (``ds.map(f).cache()``)?"""
    return isinstance(value, ast.Call) and chain_root_name(value) in names



def _with_info(site: CallSite) -> bool:
    keyword = site.keyword("with_info")
    return keyword is not None and isinstance(keyword.value, ast.Constant) and keyword.value.value is True


def _split_kind(site: CallSite) -> str:
    """"all" (no split: a dict of them), "list" (a list or tuple of splits), "one", or "unknown"."""
    split = site.argument(1, "split")
    if split is None or (isinstance(split, ast.Constant) and split.value is None):
        return "all"
    if isinstance(split, (ast.List, ast.Tuple)):
        return "list"
    return "one"


def _split_list(site: CallSite) -> List[Optional[str]]:
    split = site.argument(1, "split")
    return [element.value if isinstance(element, ast.Constant) and isinstance(element.value, str) else None
            for element in split.elts]


def _training_index(splits: List[Optional[str]], names: List[str]) -> Optional[int]:
    """The split the model trains on: the first named ``train...`` whose variable is not named for
    evaluation (``ds_val`` from ``train[90%:]``)."""
    if len(names) != len(splits):
        return None
    for index, (split, name) in enumerate(zip(splits, names)):
        if split is not None and split.split("[")[0].strip() == TRAIN and not K.named_for_evaluation(name):
            return index
    return None
