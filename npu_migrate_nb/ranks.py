"""Where the notebook reads its rank: the rank-dependent split of the data (the shard step).

Rank values are known by their value, not their name: ``idx = int(os.environ['RANK_ID'])`` in one
cell makes ``files[idx::n]`` in another a shard, while ``ds.shard(2, 0)`` is none. A value is
followed through assignments (across cells), ``int()``/arithmetic, the notebook's own functions'
returns and, for a function's parameter, the arguments of the calls of that function.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from . import knowledge as K
from .facts import CellFacts, NotebookFacts, dotted_name, mentions
from .names import own_nodes

# The kinds of value (see knowledge.py, rank values), and one for a value that cannot be seen.
RANK, SIZE, DEVICE, DEVICES, SERVER, UNKNOWN = "rank", "size", "device", "devices", "server", "unknown"
Kinds = FrozenSet[str]
NONE: Kinds = frozenset()
_UNSEEN: Kinds = frozenset({UNKNOWN})
_PASS_THROUGH = frozenset({"int", "str", "float", "abs"})
_MAX_DEPTH = 12  # how many assignments and calls a value is followed through


class RankValues:
    """What the values of one notebook stand for (memoized: a notebook's facts never change)."""

    def __init__(self, facts: NotebookFacts):
        self.facts = facts
        self._names: Dict[Tuple[str, Optional[str]], Kinds] = {}

    def kinds(self, node: Optional[ast.AST], function: Optional[str], depth: int = 0) -> Kinds:
        """The kinds of value ``node`` (in ``function``, None at module level) can hold: empty for a
        value known not to be a rank quantity, ``unknown`` among them when part of it cannot be seen."""
        if node is None or isinstance(node, ast.Constant):
            return NONE
        if depth > _MAX_DEPTH:
            return _UNSEEN
        if isinstance(node, ast.Name):
            return self._name(node.id, function, depth)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, function, depth)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, function, depth)
        if isinstance(node, ast.Call):
            return self._call(node, function, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._sum(node, function, depth)
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.IfExp)):
            parts = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]
            return _union(self.kinds(part, function, depth + 1) for part in parts)
        return _UNSEEN

    def _sum(self, node: ast.BinOp, function: Optional[str], depth: int) -> Kinds:
        """``device_id + RANK_INDEX * 8`` is the rank: a device id offset by its server's first rank.
        Offset by a value that cannot be seen, it may well be the rank too."""
        left, right = self.kinds(node.left, function, depth + 1), self.kinds(node.right, function, depth + 1)
        for device, offset in ((left, right), (right, left)):
            if DEVICE in device and DEVICE not in offset and offset:
                return (device - {DEVICE}) | (offset - {SERVER}) | {RANK if SERVER in offset else UNKNOWN}
        return left | right

    # -- names and attributes
    def _name(self, name: str, function: Optional[str], depth: int) -> Kinds:
        key = (name, function)
        if key not in self._names:
            self._names[key] = NONE  # a name assigned from itself (i = i + 1) adds nothing
            self._names[key] = self._name_kinds(name, function, depth)
        return self._names[key]

    def _name_kinds(self, name: str, function: Optional[str], depth: int) -> Kinds:
        if function is not None and name in self._parameters(function):
            return self._parameter(name, function, depth)
        assignments = [(facts, a) for _, facts, a in self.facts.assignments(name)]
        local = [(facts, a) for facts, a in assignments if a.function == function]
        visible = local or [(facts, a) for facts, a in assignments if a.function is None] or assignments
        if not visible:
            return _UNSEEN  # a loop variable, an import, a global set elsewhere
        return _union(self._assigned(facts, a, name, depth) for facts, a in visible)

    def _assigned(self, facts: CellFacts, assignment, name: str, depth: int) -> Kinds:
        value = assignment.value
        if assignment.tuple_target:
            value = _element_for(assignment.stmt, name)
            if value is None:
                return _UNSEEN  # a, b = f(): which part is which cannot be seen
        return self.kinds(value, assignment.function, depth + 1)

    def _attribute(self, node: ast.Attribute, function: Optional[str], depth: int) -> Kinds:
        if node.attr in K.NPU_HANDLE_KINDS and self._is_npu_handle(node.value, function):
            return frozenset({K.NPU_HANDLE_KINDS[node.attr]})
        dotted = dotted_name(node)
        if dotted is None:
            return _UNSEEN
        assignments = list(self.facts.assignments(dotted))
        if not assignments:
            return _UNSEEN  # FLAGS.task_index, args.rank: set where it cannot be seen
        return _union(self._assigned(facts, a, dotted, depth) for _, facts, a in assignments)

    def _is_npu_handle(self, node: ast.AST, function: Optional[str]) -> bool:
        if isinstance(node, ast.Name):
            values = [a.value for _, _, a in self.facts.assignments(node.id) if not a.tuple_target]
            return any(self._is_npu_handle(value, function) for value in values if not isinstance(value, ast.Name))
        while isinstance(node, ast.Call):
            if self.facts.resolve(dotted_name(node.func)) in K.NPU_HANDLE_SOURCES:
                return True
            node = node.func.value if isinstance(node.func, ast.Attribute) else None
        return False

    # -- the environment, getters, the notebook's own functions
    def _subscript(self, node: ast.Subscript, function: Optional[str], depth: int) -> Kinds:
        if self.facts.resolve(dotted_name(node.value)) == K.ENVIRONMENT_MAPPING:
            return _environment_kind(node.slice)
        return _UNSEEN

    def _call(self, node: ast.Call, function: Optional[str], depth: int) -> Kinds:
        callee = self.facts.resolve(dotted_name(node.func))
        if callee in K.ENVIRONMENT_READS:
            return _environment_kind(node.args[0] if node.args else None)
        getter = K.RANK_GETTER_KINDS.get(callee) or K.RANK_GETTER_KINDS.get(self._star_imported(callee))
        if getter is not None:
            return frozenset({getter})
        if callee in _PASS_THROUGH and len(node.args) == 1:
            return self.kinds(node.args[0], function, depth + 1)
        if isinstance(node.func, ast.Name) and self.facts.function(node.func.id) is not None:
            return self._returned(node.func.id, depth)
        return _UNSEEN

    def _star_imported(self, callee: str) -> str:
        """``get_local_rank_size`` called bare after ``from npu_bridge.npu_init import *``."""
        if "." not in callee and any(module.startswith(("npu_bridge", "hccl")) for module in self.facts.star_modules):
            return "npu_bridge." + callee
        return callee

    def _returned(self, name: str, depth: int) -> Kinds:
        _, _, definition = self.facts.function(name)
        returns = [node.value for node in own_nodes(definition) if isinstance(node, ast.Return)]
        return _union(self.kinds(value, name, depth + 1) for value in returns) if returns else NONE

    # -- parameters: what the calls of the function pass
    def _parameters(self, function: str) -> List[str]:
        found = self.facts.function(function)
        if found is None:
            return []
        arguments = found[2].args
        return [arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]

    def _parameter(self, name: str, function: str, depth: int) -> Kinds:
        definition = self.facts.function(function)[2]
        arguments = definition.args
        positional = [arg.arg for arg in arguments.posonlyargs + arguments.args]
        position = positional.index(name) if name in positional else None
        passed = []
        for _, _, site in self.facts.calls(function):
            if site.dotted != function:
                continue
            value = _passed(site.node, name, position)
            passed.append(self.kinds(value, site.function, depth + 1) if value is not None else self._default(
                definition, name, depth))
        if not passed:
            return _UNSEEN  # called by a framework (an Estimator's input_fn) or not at all
        return _union(passed)

    def _default(self, definition, name: str, depth: int) -> Kinds:
        arguments = definition.args
        positional = arguments.posonlyargs + arguments.args
        defaults = dict(zip([arg.arg for arg in positional[len(positional) - len(arguments.defaults):]],
                            arguments.defaults))
        defaults.update({arg.arg: value for arg, value in zip(arguments.kwonlyargs, arguments.kw_defaults)
                         if value is not None})
        return self.kinds(defaults.get(name), None, depth + 1) if name in defaults else _UNSEEN


_values: "weakref.WeakKeyDictionary[NotebookFacts, RankValues]" = weakref.WeakKeyDictionary()


def rank_values(facts: NotebookFacts) -> RankValues:
    """The notebook's rank values (one memo per analysis)."""
    values = _values.get(facts)
    if values is None:
        values = _values[facts] = RankValues(facts)
    return values


def computes_rank_size(facts: NotebookFacts, node: ast.AST, function: Optional[str]) -> bool:
    """Does ``node`` compute with the rank count, by value (``n = get_rank_size()`` ... ``64 // n``)?"""
    return SIZE in rank_values(facts).kinds(node, function)


def is_rank_id(facts: NotebookFacts, node: ast.AST, function: Optional[str]) -> bool:
    return RANK in rank_values(facts).kinds(node, function)


# ------------------------------------------------------------------------------------- shards


@dataclass(eq=False)
class ShardUse:
    """A rank-dependent split: ``ds.shard(count, index)`` or ``files[index::count]``."""

    cell: int
    facts: CellFacts
    node: ast.AST  # the shard call or the subscript
    index: ast.expr
    count: Optional[ast.expr]
    index_kinds: Kinds
    count_kinds: Kinds

    @property
    def by(self) -> str:
        """What splits the data: the rank, the device id, a value that cannot be seen, or neither."""
        for kind in (RANK, DEVICE, UNKNOWN):
            if kind in self.index_kinds:
                return kind
        return UNKNOWN if SERVER in self.index_kinds else "other"  # one part per server: host-level

    @property
    def counts_devices(self) -> bool:
        return DEVICES in self.count_kinds and SIZE not in self.count_kinds


def shard_uses(facts: NotebookFacts) -> Iterator[ShardUse]:
    """Every ``.shard(...)`` call (but tf.distribute's input contexts), and every subscript whose
    slice holds a rank or device value, in notebook order."""
    values = rank_values(facts)
    for cell, cell_facts, site in facts.calls("shard"):
        if site.receiver is None or mentions(site.node, ("input_context", "input_pipeline")):
            continue
        count, index = site.argument(0, "num_shards"), site.argument(1, "index")
        if index is None:
            continue
        yield ShardUse(cell, cell_facts, site.node, index, count,
                       values.kinds(index, site.function), values.kinds(count, site.function))
    if not any(facts.uses_name(word) for word in _RANK_SOURCE_WORDS):
        return  # no value in the notebook can be a rank: no slice holds one
    for cell, cell_facts in facts.cells:
        for node, function in _subscripts(cell_facts):
            use = _slice_use(values, cell, cell_facts, node, function)
            if use is not None:
                yield use


def has_rank_shard(facts: NotebookFacts) -> bool:
    """Is the data split by rank? A split by the device id counts: it is present, but wrong beyond
    one server (``device-id-shard`` warns)."""
    if any(facts.calls_to(K.SHARD_AND_REBATCH)):
        return True
    return any(use.by in (RANK, DEVICE) for use in shard_uses(facts))


def unjudged_shards(facts: NotebookFacts) -> List[ShardUse]:
    """``.shard(...)`` calls whose index comes from a value that cannot be seen (a flag, a framework's
    argument): they may well shard by rank."""
    return [use for use in shard_uses(facts) if use.by == UNKNOWN and isinstance(use.node, ast.Call)]


def rank_free_shards(facts: NotebookFacts) -> List[ShardUse]:
    """``.shard(2, 0)``, ``.shard(n, i)`` with ``i`` known not to be a rank value: a split that every
    rank makes alike (missing-shard should rewrite its arguments rather than add a second shard)."""
    return [use for use in shard_uses(facts) if use.by == "other" and isinstance(use.node, ast.Call)]


def _slice_use(values: RankValues, cell: int, facts: CellFacts, node: ast.Subscript,
               function: Optional[str]) -> Optional[ShardUse]:
    part = node.slice
    if isinstance(part, ast.Slice):
        bounds = [bound for bound in (part.lower, part.upper) if bound is not None]
        for bound in bounds:
            kinds = values.kinds(bound, function)
            if RANK in kinds or DEVICE in kinds:
                return ShardUse(cell, facts, node, bound, part.step, kinds, values.kinds(part.step, function))
        return None
    kinds = values.kinds(part, function)
    # parts[rank] splits by rank; gpus[local_rank] pins a device, which is no split of the data.
    if isinstance(part, (ast.Name, ast.Attribute, ast.Call)) and RANK in kinds:
        return ShardUse(cell, facts, node, part, None, kinds, NONE)
    return None


# Every rank value starts from one of these words (os.environ, getenv, get_rank_id, hvd.rank, ...).
_RANK_SOURCE_WORDS = ("environ", "getenv", "get_rank_id", "get_local_rank_id", "rank", "local_rank", "worker_id")
_subscripts_of: "weakref.WeakKeyDictionary[CellFacts, List[Tuple[ast.Subscript, Optional[str]]]]" = (
    weakref.WeakKeyDictionary()
)


def _subscripts(facts: CellFacts) -> List[Tuple[ast.Subscript, Optional[str]]]:
    """Loaded subscripts of a cell whose slice is not constant, each with its innermost enclosing
    function (kept with the cell's facts, which are shared by every analysis of the same text)."""
    found = _subscripts_of.get(facts)
    if found is None:
        functions = facts.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
        found = _subscripts_of[facts] = [
            (node, _innermost_function(functions, node)) for node in facts.nodes(ast.Subscript)
            if isinstance(node.ctx, ast.Load) and _may_hold_rank(node.slice)
        ]
        found.sort(key=lambda entry: (entry[0].lineno, entry[0].col_offset))
    return found


def _innermost_function(functions, node: ast.AST) -> Optional[str]:
    """The name of the innermost of ``functions`` around ``node`` (the one starting last), or None."""
    around = None
    position = (node.lineno, node.col_offset)
    for function in functions:
        if (function.lineno, function.col_offset) <= position <= (function.end_lineno, function.end_col_offset) \
                and (around is None or (function.lineno, function.col_offset) > (around.lineno, around.col_offset)):
            around = function
    return around.name if around is not None else None


def _may_hold_rank(part: ast.AST) -> bool:
    """A cheap filter: constant slices (x[:100], x[0]) hold no rank."""
    return any(isinstance(child, (ast.Name, ast.Attribute, ast.Call)) for child in ast.walk(part))


# ------------------------------------------------------------------------------------- helpers


def _union(parts) -> Kinds:
    result = set()
    for kinds in parts:
        result |= kinds
    return frozenset(result)


def _environment_kind(name: Optional[ast.AST]) -> Kinds:
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        # A variable of its own (WORKER_INDEX) is set by a launcher that cannot be seen.
        return frozenset({K.RANK_ENVIRONMENT_KINDS.get(name.value, UNKNOWN)})
    return _UNSEEN


def _element_for(stmt: ast.stmt, name: str) -> Optional[ast.expr]:
    """The value bound to ``name`` by ``a, b = x, y`` (None when the right side is no display)."""
    if not isinstance(stmt, ast.Assign):
        return None
    for target in stmt.targets:
        if not isinstance(target, (ast.Tuple, ast.List)) or not isinstance(stmt.value, (ast.Tuple, ast.List)):
            continue
        if len(target.elts) != len(stmt.value.elts) or any(isinstance(e, ast.Starred) for e in stmt.value.elts):
            continue
        for element, value in zip(target.elts, stmt.value.elts):
            if dotted_name(element) == name:
                return value
    return None


def _passed(call: ast.Call, name: str, position: Optional[int]) -> Optional[ast.expr]:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    args = call.args
    if position is not None and position < len(args) and not any(isinstance(a, ast.Starred) for a in args[:position + 1]):
        return args[position]
    return None
