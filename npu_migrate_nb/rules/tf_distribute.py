"""A tf.distribute strategy left in the script: on Ascend one process drives one chip, so the strategy
has nothing to mirror, and the adapter's broadcast, all-reduce and shard (added by the missing-step
rules) take its place. This rule removes the strategy, keeping what the script computed with it: a
``strategy.reduce`` across replicas becomes the adapter's all-reduce with the same reduction, an
``InputContext`` becomes the rank count and id, ``num_replicas_in_sync`` the rank count. Nothing of
the strategy is left that would reduce the gradients a second time.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

from .. import knowledge as K
from ..facts import CellFacts
from ..findings import NEEDS_NPU_DEVICE, NEEDS_OS, Edit, Finding
from ..i18n import _
from .base import Example, Rule, remove_statement, replace, replace_with, single_target

_PRELUDE = "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"

Conversion = Tuple[str, Optional[List[Edit]]]  # (what becomes of this use, its edits; None: by hand)


class TfDistributeLeftover(Rule):
    code = "tf-distribute-leftover"
    step = None
    severity = "error"

    VALID = [
        # The default strategy (what Keras itself asks for) is not a leftover.
        _PRELUDE + "strategy = tf.distribute.get_strategy()\nprint(strategy.num_replicas_in_sync)\n",
    ]
    INVALID = [
        # Keras fit under a MirroredStrategy scope: the scope gives way to its body, the replica count
        # is the rank count.
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "BATCH = 64 * strategy.num_replicas_in_sync\n"
            "with strategy.scope():\n"
            "    model = make_model()\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "BATCH = 64 * int(os.getenv('RANK_SIZE', '1'))\n"
            "model = make_model()\n",
        ),
        # The custom loop: run calls the step, reduce across replicas becomes the adapter's all-reduce
        # (same reduction), the distributed dataset the dataset itself.
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "dist_ds = strategy.experimental_distribute_dataset(ds)\n"
            "@tf.function\n"
            "def distributed_step(inputs):\n"
            "    losses = strategy.run(train_step, args=(inputs,))\n"
            "    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)\n",
            _PRELUDE + "dist_ds = ds\n"
            "@tf.function\n"
            "def distributed_step(inputs):\n"
            "    losses = train_step(inputs)\n"
            "    return npu.distribute.all_reduce(losses, reduction=\"sum\")\n",
        ),
        # A per-replica reduce along an axis: reduce this rank's value along it, then across ranks.
        Example(
            _PRELUDE + "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
            "total = strategy.reduce('MEAN', per_replica, axis=0)\n"
            "parts = strategy.experimental_local_results(per_replica)\n",
            _PRELUDE + "total = npu.distribute.all_reduce(tf.reduce_mean(per_replica, axis=0), reduction=\"mean\")\n"
            "parts = (per_replica,)\n",
        ),
        # distribute_datasets_from_function: the InputContext's pipeline count and id are the rank's.
        Example(
            _PRELUDE + "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
            "def dataset_fn(input_context):\n"
            "    batch_size = input_context.get_per_replica_batch_size(64)\n"
            "    ds = tf.data.Dataset.from_tensor_slices(x)\n"
            "    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
            "    return ds.batch(batch_size)\n"
            "# %%\n"
            "dist_ds = strategy.distribute_datasets_from_function(dataset_fn)\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def dataset_fn(input_context):\n"
            "    batch_size = 64 // int(os.getenv('RANK_SIZE', '1'))\n"
            "    ds = tf.data.Dataset.from_tensor_slices(x)\n"
            "    ds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "    return ds.batch(batch_size)\n"
            "# %%\n"
            "dist_ds = dataset_fn(tf.distribute.InputContext(num_input_pipelines=int(os.getenv('RANK_SIZE', '1')), "
            "input_pipeline_id=int(os.getenv('RANK_ID', '0')), num_replicas_in_sync=int(os.getenv('RANK_SIZE', '1'))))\n",
        ),
        # The same through a lambda that passes its InputContext on (tensorflow.org's multi-worker tutorial).
        Example(
            _PRELUDE + "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
            "def dataset_fn(global_batch_size, input_context):\n"
            "    batch_size = input_context.get_per_replica_batch_size(global_batch_size)\n"
            "    ds = tf.data.Dataset.from_tensor_slices(x)\n"
            "    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
            "    return ds.batch(batch_size)\n"
            "# %%\n"
            "dist_ds = strategy.distribute_datasets_from_function(\n"
            "    lambda input_context: dataset_fn(64, input_context))\n",
            "import tensorflow as tf\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n"
            "def dataset_fn(global_batch_size, input_context):\n"
            "    batch_size = global_batch_size // int(os.getenv('RANK_SIZE', '1'))\n"
            "    ds = tf.data.Dataset.from_tensor_slices(x)\n"
            "    ds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n"
            "    return ds.batch(batch_size)\n"
            "# %%\n"
            "dist_ds = (lambda input_context: dataset_fn(64, input_context))(tf.distribute.InputContext("
            "num_input_pipelines=int(os.getenv('RANK_SIZE', '1')), input_pipeline_id=int(os.getenv('RANK_ID', '0')), "
            "num_replicas_in_sync=int(os.getenv('RANK_SIZE', '1'))))\n",
        ),
        # A scope whose body holds an IPython line, which comes back as written: the scope stays, a no-op.
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "with strategy.scope():\n"
            "    %matplotlib inline\n"
            "    model = make_model()\n",
            _PRELUDE + "with tf.distribute.get_strategy().scope():\n"
            "    %matplotlib inline\n"
            "    model = make_model()\n",
        ),
        # A scope among other context managers: the default strategy's scope (a no-op) takes its place.
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "with strategy.scope(), tf.device('/cpu:0'):\n"
            "    model = make_model()\n",
            _PRELUDE + "with tf.distribute.get_strategy().scope(), tf.device('/cpu:0'):\n"
            "    model = make_model()\n",
        ),
        # An Estimator's RunConfig given the strategy: each rank trains one copy (RunConfig's default).
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "config = tf.estimator.RunConfig(train_distribute=strategy, eval_distribute=strategy)\n",
            _PRELUDE + "config = tf.estimator.RunConfig(train_distribute=None, eval_distribute=None)\n",
        ),
        # A strategy not kept in a name: reported, nothing is changed.
        Example(_PRELUDE + "with tf.distribute.MirroredStrategy().scope():\n    model = make_model()\n"),
        # A use with no counterpart (the strategy's internals): reported, nothing is changed.
        Example(
            _PRELUDE + "strategy = tf.distribute.MirroredStrategy()\n"
            "with strategy.scope():\n"
            "    model = make_model()\n"
            "strategy.extended.update(v, fn)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        findings: List[Finding] = []
        for cell, facts, site in context.facts.calls_to(*K.DISTRIBUTE_STRATEGIES):
            findings += self._strategy(context, cell, facts, site)
        return findings

    def _strategy(self, context, cell: int, facts: CellFacts, creation) -> List[Finding]:
        what = context.facts.resolve(creation.dotted).replace("tensorflow.", "tf.")
        name = single_target(creation.stmt) if getattr(creation.stmt, "value", None) is creation.node else None
        uses = list(_uses(context, name)) if name else []
        conversions = [(use, _convert(context, use)) for use in uses]
        by_hand = name is None or any(edits is None for _use, (_message, edits) in conversions)
        if by_hand:
            left = [
                _("cell {cell} line {line}: {code}").format(cell=use.cell, line=use.node.lineno, code=facts_segment(use))
                for use, (_message, edits) in conversions if edits is None
            ]
            message = _(
                "{strategy} left in the script: on Ascend each rank is one process on one chip, and the adapter's "
                "broadcast, all-reduce and shard replace the strategy; no automatic fix for {uses}: port it by hand"
            ).format(strategy=what, uses="; ".join(left) if left else _("a strategy not assigned to a name"))
            return [self.finding(cell, facts, creation.node, message)]
        message = _(
            "{strategy} left in the script: on Ascend each rank is one process on one chip, and the adapter's "
            "broadcast, all-reduce and shard replace the strategy; removed"
        ).format(strategy=what)
        found = [self.finding(cell, facts, creation.node, message, [remove_statement(cell, facts, creation.stmt)])]
        for use, (message, edits) in conversions:
            fix = _body_text(use.facts, use.statement) if any(edit.kind == "unwrap" for edit in edits) else None
            found.append(self.finding(use.cell, use.facts, use.outer,
                                      _("{code}: {explanation}").format(code=facts_segment(use), explanation=message),
                                      edits, fix=fix))
        return found


# ------------------------------------------------------------------------------ uses of the strategy


class _Use:
    """One mention of the strategy's name: ``outer`` is the attribute read, or the call made on it."""

    def __init__(self, cell: int, facts: CellFacts, node: ast.Name, parents: Dict[int, ast.AST]):
        self.cell, self.facts, self.node = cell, facts, node
        attribute = parents.get(id(node))
        self.attribute = attribute.attr if isinstance(attribute, ast.Attribute) and attribute.value is node else None
        call = parents.get(id(attribute)) if self.attribute else None
        self.call = call if isinstance(call, ast.Call) and call.func is attribute else None
        self.outer = self.call or (attribute if self.attribute else node)
        self.parent_of_outer = parents.get(id(self.outer))
        self.statement = parents.get(id(self.parent_of_outer))


def _body_text(facts: CellFacts, stmt: ast.With) -> str:
    """What an unwrapped ``with`` leaves: its body, dedented (for people)."""
    first, last = stmt.body[0], stmt.body[-1]
    return textwrap.dedent("".join(facts.lines[first.lineno - 1:last.end_lineno])).rstrip("\n")


def facts_segment(use: _Use) -> str:
    text = use.facts.segment(use.outer)
    return text if len(text) <= 60 else text[:57] + "..."


def _uses(context, name: str) -> Iterator[_Use]:
    for cell, facts in context.facts.cells_mentioning(name):
        for node, ancestors in facts.loads(name):
            chain = ancestors + (node,)  # each node's parent is the one before it: all _Use asks of
            yield _Use(cell, facts, node, {id(chain[i]): chain[i - 1] for i in range(1, len(chain))})


def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


# RunConfig's arguments that hand an Estimator's training or evaluation to a strategy.
_RUN_CONFIG_STRATEGIES = frozenset({"train_distribute", "eval_distribute"})


def _convert(context, use: _Use) -> Conversion:
    if use.attribute == "num_replicas_in_sync" and use.call is None:
        return _("one replica per rank: the replica count is the rank count"), [
            replace(use.cell, use.facts, use.outer, K.RANK_SIZE_EXPR, [NEEDS_OS])]
    keyword = use.parent_of_outer
    if use.attribute is None and isinstance(keyword, ast.keyword) and keyword.arg in _RUN_CONFIG_STRATEGIES:
        return _("the Estimator trains one copy on each rank: {argument}=None, RunConfig's default").format(
            argument=keyword.arg), [replace(use.cell, use.facts, use.node, "None")]
    converter = _CALLS.get(use.attribute) if use.call is not None else None
    if converter is None:
        return _("no counterpart on Ascend"), None
    return converter(context, use)


def _scope(context, use: _Use) -> Conversion:
    item, stmt = use.parent_of_outer, use.statement
    if (isinstance(item, ast.withitem) and isinstance(stmt, ast.With) and stmt.items == [item]
            and item.optional_vars is None and not _holds_ipython_lines(use.facts, stmt)):
        return _("its body stays, out of the scope: one copy of each variable per rank, synchronized by the "
                 "adapter's broadcast and all-reduce"), [Edit(use.cell, "unwrap", use.facts.start(stmt), use.facts.end(stmt))]
    return (
        _("the default strategy's scope (a no-op): one copy of each variable per rank, synchronized by "
          "the adapter's broadcast and all-reduce"),
        [replace(use.cell, use.facts, use.node, f"{context.tf}.distribute.get_strategy()")],
    )


def _holds_ipython_lines(facts: CellFacts, stmt: ast.With) -> bool:
    """IPython lines (``%matplotlib inline``) come back as they were written, indented: a body that
    holds one cannot be moved out of its block."""
    return any(isinstance(node, ast.stmt) and facts.is_ipython_line(node) for node in ast.walk(stmt))


def _run(context, use: _Use) -> Conversion:
    if _is_strategy_call(use.parent_of_outer, use.node.id, "reduce"):
        return _("the step runs once on this rank (converted with the reduce around it)"), []
    built = _run_pattern(use.call)
    if built is None:
        return _("no function given"), None
    pattern, parts = built
    return _("the step runs once on this rank"), [replace_with(use.cell, use.facts, use.call, pattern, **parts)]


def _is_strategy_call(node: Optional[ast.AST], name: str, method: str) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
        and isinstance(node.func.value, ast.Name) and node.func.value.id == name
    )


def _run_pattern(call: ast.Call) -> Optional[Tuple[str, Dict[str, ast.AST]]]:
    """``fn(a, b, k=v)`` for ``strategy.run(fn, args=(a, b), kwargs={'k': v})``, with holes."""
    function = _argument(call, 0, "fn")
    args, kwargs = _argument(call, 1, "args"), _argument(call, 2, "kwargs")
    if function is None:
        return None
    parts: Dict[str, ast.AST] = {"fn": function}
    holes: List[str] = []
    if isinstance(args, (ast.Tuple, ast.List)):
        for index, element in enumerate(args.elts):
            parts[f"a{index}"] = element
            holes.append(f"{{a{index}}}")
    elif args is not None and not _is_none(args):
        parts["args"] = args
        holes.append("*{args}")
    if isinstance(kwargs, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in kwargs.keys):
        for index, (key, value) in enumerate(zip(kwargs.keys, kwargs.values)):
            parts[f"k{index}"] = value
            holes.append(f"{key.value}={{k{index}}}")
    elif kwargs is not None and not _is_none(kwargs):
        parts["kwargs"] = kwargs
        holes.append("**{kwargs}")
    return "{fn}(" + ", ".join(holes) + ")", parts


def _reduce(context, use: _Use) -> Conversion:
    call = use.call
    reduction = _reduction_of(_argument(call, 0, "reduce_op"))
    value, axis = _argument(call, 1, "value"), _argument(call, 2, "axis")
    if reduction is None or value is None or context.tf1:
        return _("a reduction the adapter cannot express here"), None
    npu, tf = context.npu, context.tf
    inner = "{value}"
    parts: Dict[str, ast.AST] = {"value": value}
    if _is_strategy_call(value, use.node.id, "run"):
        # One edit for both: the rewriter cannot fill a hole with a node that has an edit of its own.
        built = _run_pattern(value)
        if built is None:
            return _("no function given to run"), None
        inner, parts = built
    if axis is None or _is_none(axis):
        pattern = f'{npu}.distribute.all_reduce({inner}, reduction="{reduction}")'
        why = _("the sum across replicas becomes the sum across ranks") if reduction == "sum" else \
            _("the mean across replicas becomes the mean across ranks")
    else:
        local = "reduce_sum" if reduction == "sum" else "reduce_mean"
        pattern = f'{npu}.distribute.all_reduce({tf}.{local}({inner}, axis={{axis}}), reduction="{reduction}")'
        parts = {**parts, "axis": axis}
        why = _("this rank's value is reduced along axis {axis}, then across ranks "
                "({reduction}; a mean is exact with equal per-rank batches)").format(
            axis=use.facts.segment(axis), reduction=reduction)
    return why, [replace_with(use.cell, use.facts, call, pattern, [NEEDS_NPU_DEVICE], **parts)]


def _distribute_dataset(context, use: _Use) -> Conversion:
    dataset = _argument(use.call, 0, "dataset")
    if dataset is None:
        return _("no dataset given"), None
    return _("the rank iterates its own shard of the dataset (see missing-shard)"), [
        replace_with(use.cell, use.facts, use.call, "{dataset}", dataset=dataset)]


def _datasets_from_function(context, use: _Use) -> Conversion:
    function = _argument(use.call, 0, "dataset_fn")
    found = dataset_function(context, function)
    if found is None or not shards_by_input_context(found[2], found[3]):
        return _("a dataset function that does not shard by its InputContext"), None
    cell, facts, definition, parameter = found
    values = K.INPUT_CONTEXT_VALUES
    input_context = (
        f"{context.tf}.distribute.InputContext(num_input_pipelines={values['num_input_pipelines']}, "
        f"input_pipeline_id={values['input_pipeline_id']}, num_replicas_in_sync={values['num_replicas_in_sync']})"
    )
    if isinstance(function, ast.Lambda):  # the rewriter drops parentheses around a hole: spelled out
        code = f"({use.facts.segment(function)})({input_context})"
        edits = [replace(use.cell, use.facts, use.call, code, [NEEDS_OS])]
    else:
        edits = [replace_with(use.cell, use.facts, use.call, "{fn}(" + input_context + ")", [NEEDS_OS], fn=function)]
    edits += _input_context_edits(cell, facts, definition, parameter)
    return _("the function is called with this rank's InputContext: one pipeline per rank, its id the rank id"), edits


def dataset_function(context, function: Optional[ast.expr]):
    """(cell, facts, definition, InputContext parameter) of the notebook function given to
    ``distribute_datasets_from_function``: by name, or called by a one-parameter lambda that passes
    its InputContext on (``lambda input_context: dataset_fn(batch_size, input_context)``)."""
    if isinstance(function, ast.Name):
        found = context.facts.function(function.id)
        return None if found is None else (*found, input_context_parameter(found[2]))
    if not (isinstance(function, ast.Lambda) and len(function.args.args) == 1 and isinstance(function.body, ast.Call)
            and isinstance(function.body.func, (ast.Name, ast.Attribute))):
        return None
    callee = function.body.func
    found = context.facts.function(callee.id if isinstance(callee, ast.Name) else callee.attr)  # module.f too
    if found is None:
        return None
    passed = function.args.args[0].arg
    parameter = _parameter_given(found[2], function.body, passed)
    return None if parameter is None else (*found, parameter)


def _parameter_given(definition: ast.AST, call: ast.Call, name: str) -> Optional[str]:
    """The parameter of ``definition`` that ``call`` binds to the variable ``name``."""
    for keyword in call.keywords:
        if isinstance(keyword.value, ast.Name) and keyword.value.id == name:
            return keyword.arg
    arguments = getattr(definition, "args", None)
    positional = (arguments.posonlyargs + arguments.args) if arguments is not None else []
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Name) and argument.id == name and index < len(positional):
            return positional[index].arg
    return None


def _experimental_local_results(context, use: _Use) -> Conversion:
    value = _argument(use.call, 0, "value")
    if value is None:
        return _("no value given"), None
    return _("one replica per rank: its value alone"), [
        replace_with(use.cell, use.facts, use.call, "({value},)", value=value)]


_CALLS = {
    "scope": _scope,
    "run": _run,
    "reduce": _reduce,
    "experimental_distribute_dataset": _distribute_dataset,
    "distribute_datasets_from_function": _datasets_from_function,
    "experimental_local_results": _experimental_local_results,
}


# ------------------------------------------------------------------------------ the InputContext


def input_context_parameter(definition: ast.AST) -> Optional[str]:
    arguments = getattr(definition, "args", None)
    positional = (arguments.posonlyargs + arguments.args) if arguments is not None else []
    return positional[0].arg if positional else None


def shards_by_input_context(definition: ast.AST, parameter: Optional[str] = None) -> bool:
    """Does this dataset function call ``.shard`` with its InputContext's values?"""
    parameter = parameter or input_context_parameter(definition)
    if parameter is None:
        return False
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "shard"
        and any(isinstance(name, ast.Name) and name.id == parameter for arg in node.args for name in ast.walk(arg))
        for node in ast.walk(definition)
    )


def dataset_functions_owned(context) -> Set[str]:
    """Dataset functions given to ``distribute_datasets_from_function`` that shard by their
    InputContext: this rule turns that shard into the rank's, so missing-shard leaves them alone."""
    owned = set()
    for _cell, _facts, site in context.facts.calls("distribute_datasets_from_function"):
        found = dataset_function(context, _argument(site.node, 0, "dataset_fn"))
        if found is not None and shards_by_input_context(found[2], found[3]):
            owned.add(found[2].name)
    return owned


def _input_context_edits(cell: int, facts: CellFacts, definition: ast.AST, parameter: Optional[str] = None) -> List[Edit]:
    parameter = parameter or input_context_parameter(definition)
    parents = _parents(definition)
    edits = []
    for node in ast.walk(definition):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == parameter):
            continue
        if node.attr in K.INPUT_CONTEXT_VALUES:
            edits.append(replace(cell, facts, node, K.INPUT_CONTEXT_VALUES[node.attr], [NEEDS_OS]))
        call = parents.get(id(node))
        if node.attr == "get_per_replica_batch_size" and isinstance(call, ast.Call) and call.args:
            edits.append(_per_rank_batch(cell, facts, call, parents.get(id(call))))
    return edits


def _per_rank_batch(cell: int, facts: CellFacts, call: ast.Call, parent: Optional[ast.AST]) -> Edit:
    batch = call.args[0]
    alone = isinstance(parent, (ast.Call, ast.Assign, ast.keyword, ast.Return))
    if isinstance(batch, (ast.Name, ast.Constant, ast.Attribute)):
        pattern = "{batch} // " + K.RANK_SIZE_EXPR
        return replace_with(cell, facts, call, pattern if alone else f"({pattern})", [NEEDS_OS], batch=batch)
    # The rewriter drops parentheses around a hole: spell them out in the text.
    code = f"({facts.segment(batch)}) // {K.RANK_SIZE_EXPR}"
    return replace(cell, facts, call, code if alone else f"({code})", [NEEDS_OS])


# ------------------------------------------------------------------------------ small helpers


def _argument(call: ast.Call, position: int, name: str) -> Optional[ast.expr]:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    return positional[position] if position < len(positional) else None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _reduction_of(node: Optional[ast.AST]) -> Optional[str]:
    """``ReduceOp.SUM``/``"SUM"`` -> "sum", ``ReduceOp.MEAN``/``"MEAN"`` -> "mean"."""
    if isinstance(node, ast.Attribute):
        text = node.attr
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    else:
        return None
    return {"SUM": "sum", "MEAN": "mean"}.get(text.upper())
