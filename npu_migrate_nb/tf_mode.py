"""Which TensorFlow a notebook's code is written for: TensorFlow 1 (graph mode, the ``npu_bridge``
adapter on TensorFlow 1.15) or TensorFlow 2 (eager, ``npu_device``), and why, in one place.

The analysis picks the adapter from it, ``fix`` the APIs it inserts, and the simulator the mode its
ranks run in (TF1: ``tf.compat.v1.disable_v2_behavior()`` and ``import tensorflow`` giving
``tf.compat.v1``, as TensorFlow 1.15 behaves). In order:

1. the notebook turns TensorFlow 2 behaviour off itself (``disable_v2_behavior``,
   ``disable_eager_execution``, the TF2 adapter's ``npu.compat.enable_v1()``): TF1;
2. it turns eager execution on itself (``enable_eager_execution``): TF2 behaviour;
3. it imports the TF2 adapter (``npu_device``, as the vendor's TF2 tool leaves scripts), or calls it
   by its alias ``npu`` imported out of sight: TF2;
4. it calls, through ``import tensorflow``, a name that exists only in TensorFlow 1 (``tf.Session``,
   ``tf.placeholder``, ``tf.train.AdamOptimizer``, ``tf.layers``, ``tf.contrib``): TF1;
5. it imports TensorFlow only as ``tensorflow.compat.v1`` and calls TF1's API with it (sessions,
   placeholders, ``tf.train`` optimizers), which TensorFlow 2 runs only in graph mode: TF1 (beside a
   plain ``import tensorflow``, as TensorFlow's migration guides write, it is a compat.v1 part);
6. it imports the TF1 adapter (``npu_bridge``, as the vendor's tool leaves TF1 scripts), or calls
   its API bare, and does not import the TF2 one: TF1;
7. it trains only Estimators, with no TF2-only code (``.numpy()``, ``tf.saved_model.load(path)``): TF1, where Ascend runs
   Estimators (the TF1 adapter's NPUEstimator and hooks, on TensorFlow 1.15);
8. otherwise TF2; a ``tf.compat.v1`` part (an Estimator, a ``tf.compat.v1.Session`` under
   ``tf.Graph().as_default()``) runs in graph mode inside it, as TensorFlow 2 runs it.

Every reason names the call and its cell, so that a person can see why.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

from . import knowledge as K
from .facts import NPU_BRIDGE_NAMES, NPU_DEVICE_ALIAS, CallSite, CellFacts, NotebookFacts
from .i18n import _

TF1, TF2 = "tf1", "tf2"
# HCCL's rank getters (hccl.manage.api) serve TF2 programs too: calling them says nothing of the mode.
_ALSO_IN_TF2 = frozenset({"get_rank_size", "get_rank_id", "get_local_rank_id"})


@dataclass(frozen=True)
class Mode:
    name: str  # TF1 | TF2
    reason: str  # why, for a person
    cell: Optional[int] = None  # the cell of the call that decided, if one did

    @property
    def tf1(self) -> bool:
        return self.name == TF1


def tensorflow_mode(facts: NotebookFacts, frameworks=()) -> Mode:
    """``frameworks``: what the notebook trains with (analysis: "estimator", "keras", ...)."""
    found = _first(facts, facts.calls_to(*K.TF2_BEHAVIOUR_OFF))
    if found:
        cell, site = found
        return Mode(TF1, _("the notebook turns TensorFlow 2 behaviour off itself ({call}(), cell {cell})").format(
            call=_callee(site), cell=cell), cell)
    found = _first(facts, facts.calls_to(*K.TF2_BEHAVIOUR_ON))
    if found:
        cell, site = found
        return Mode(TF2, _("the notebook turns eager execution on itself ({call}(), cell {cell})").format(
            call=_callee(site), cell=cell), cell)
    if _imports_the_tf2_adapter(facts):
        return Mode(TF2, _("it imports the TF2 adapter (npu_device)"))
    found = _first(facts, _tf1_only_calls(facts))
    if found:
        cell, site = found
        return Mode(TF1, _("{call} (cell {cell}) exists only in TensorFlow 1: TF1 code, run in graph mode").format(
            call=_callee(site), cell=cell), cell)
    found = _first(facts, _tf1_calls_of_a_v1_only_notebook(facts))
    if found:
        cell, site = found
        return Mode(TF1, _("it imports TensorFlow only as tensorflow.compat.v1 and calls TF1's API with it "
                           "({call}, cell {cell}), which runs only in graph mode").format(call=_callee(site), cell=cell),
                    cell)
    if not facts.imports_module("npu_device"):
        if facts.imports_module("npu_bridge"):
            return Mode(TF1, _("it imports the TF1 adapter (npu_bridge)"))
        tf1_api = NPU_BRIDGE_NAMES - _ALSO_IN_TF2
        found = _first(facts, (entry for entry in facts.calls(*tf1_api) if entry[2].dotted in tf1_api))
        if found:
            cell, site = found
            return Mode(TF1, _("it calls the TF1 adapter's {call} (cell {cell})").format(call=site.dotted, cell=cell),
                        cell)
    if list(frameworks) == ["estimator"]:
        eager = _first(facts, _tf2_only_code(facts))
        if eager is None:
            return Mode(TF1, _("it trains only Estimators, which Ascend runs with the TF1 adapter (TensorFlow 1.15)"))
        cell, site = eager
        return Mode(TF2, _("it trains Estimators and has TF2-only code ({call}(), cell {cell})").format(
            call=_callee(site), cell=cell), cell)
    found = _first(facts, _compat_v1_calls(facts))
    if found:
        cell, site = found
        return Mode(TF2, _("TF2 code with tf.compat.v1 parts ({call}, cell {cell}), which TensorFlow 2 runs "
                           "as they are (in graph mode where they build a graph)").format(call=_callee(site), cell=cell),
                    cell)
    return Mode(TF2, _("no TensorFlow 1-only API in the code"))


def _first(facts: NotebookFacts, found: Iterator[Tuple[int, CellFacts, CallSite]]) -> Optional[Tuple[int, CallSite]]:
    """The first of ``found`` in notebook order, in the notebook's own cells (its modules do not
    decide its mode)."""
    own = {index for index, _facts in facts.notebook_cells}
    first = min(((cell, site.node.lineno, site.node.col_offset, id(site), site) for cell, _facts, site in found
                 if cell in own), default=None)
    return None if first is None else (first[0], first[-1])


def _imports_the_tf2_adapter(facts: NotebookFacts) -> bool:
    """``import npu_device`` (its ``compat.v1`` copy of the TF1 adapter does not count: TF2 code with a
    TF1 part imports it; the notebook's own modules do not decide)."""
    own = {index for index, _facts in facts.notebook_cells}
    if any(fact.module.split(".")[0] == "npu_device" and not fact.module.startswith("npu_device.compat")
           for index, cell_facts in facts.cells if index in own for fact in cell_facts.imports):
        return True
    # ``npu.distribute...`` with the adapter's alias imported out of sight (facts.resolve reads it as
    # npu_device): setup's fix imports it, and the mode must not change between that fix and the next
    # analysis.
    return any(facts.resolve(site.dotted).startswith("npu_device.")
               and not facts.resolve(site.dotted).startswith("npu_device.compat.")
               for index, _facts, site in facts.all_calls(mentioning=NPU_DEVICE_ALIAS) if index in own and site.dotted)


def _callee(site: CallSite) -> str:
    return site.dotted or f"...{site.method}"


def _written(facts: NotebookFacts, site: CallSite) -> str:
    """The callee as written, its alias expanded but not made canonical: ``tensorflow.compat.v1.Session``
    stays itself, where the analysis' canonical names read ``tensorflow.Session`` for both."""
    head, _dot, rest = (site.dotted or "").partition(".")
    module = facts.aliases.get(head)
    if module is None:
        return site.dotted or ""
    return module + ("." + rest if rest else "")


def _tf1_only_calls(facts: NotebookFacts):
    methods = {name.rsplit(".", 1)[-1] for name in K.TF1_ONLY_CALLS}
    for cell, cell_facts, site in facts.calls(*methods):
        if _written(facts, site) in K.TF1_ONLY_CALLS:
            yield cell, cell_facts, site
    for module in K.TF1_ONLY_MODULES:
        word = module.rstrip(".").rsplit(".", 1)[-1]
        for cell, cell_facts, site in facts.all_calls(mentioning=word):
            if _written(facts, site).startswith(module):
                yield cell, cell_facts, site


def _tf1_calls_of_a_v1_only_notebook(facts: NotebookFacts):
    modules = set(facts.aliases.values())
    if "tensorflow.compat.v1" not in modules or "tensorflow" in modules:
        return
    methods = {name.rsplit(".", 1)[-1] for name in K.TF1_ONLY_CALLS}
    for cell, cell_facts, site in facts.calls(*methods):
        if _written(facts, site).startswith("tensorflow.compat.v1.") and facts.resolve(site.dotted) in K.TF1_ONLY_CALLS:
            yield cell, cell_facts, site


def _tf2_only_code(facts: NotebookFacts):
    """Calls TensorFlow 1.15 cannot run: ``.numpy()`` (eager), TF2's ``tf.saved_model.load(path)``
    (TF1's takes a session, the tags and the path), and names it does not have (``tf.random.set_seed``)."""
    yield from facts.calls("numpy")
    for cell, cell_facts, site in facts.calls(*(name.rsplit(".", 1)[-1] for name in K.TF2_ONLY_CALLS)):
        if _written(facts, site) in K.TF2_ONLY_CALLS:
            yield cell, cell_facts, site
    for cell, cell_facts, site in facts.calls("load"):
        if _written(facts, site) == "tensorflow.saved_model.load" and len(site.node.args) == 1:
            yield cell, cell_facts, site
    yield from _datasets_iterated_in_python(facts)


# A dataset's own methods: ``for x in ds.take(1)`` at a cell's top level iterates it in Python, which only
# eager execution does (TF1's graph mode raises "only supports Python-style iteration in eager mode").
_DATASET_METHODS = frozenset({"take", "skip", "batch", "unbatch", "padded_batch", "shuffle", "repeat",
                              "prefetch", "cache", "filter", "shard"})


def _datasets_iterated_in_python(facts: NotebookFacts):
    for method in sorted(_DATASET_METHODS):
        for cell, cell_facts, site in facts.calls(method):
            if site.function is None and site.receiver is not None and any(
                    isinstance(loop, ast.For) and loop.iter is site.node for loop in cell_facts.nodes(ast.For)):
                yield cell, cell_facts, site


def _compat_v1_calls(facts: NotebookFacts):
    for cell, cell_facts, site in facts.all_calls(mentioning="compat"):
        if _written(facts, site).startswith("tensorflow.compat.v1."):
            yield cell, cell_facts, site
    for local, module in facts.aliases.items():
        if module == "tensorflow.compat.v1":
            for cell, cell_facts, site in facts.all_calls(mentioning=local):
                if (site.dotted or "").startswith(local + "."):
                    yield cell, cell_facts, site
