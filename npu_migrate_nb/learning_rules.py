"""Training by a rule the notebook writes itself: parameters rebound to themselves plus a term computed
from a window of the data, in a loop over the windows. An RBM's contrastive divergence is the common
case (``batch = X[start:end]``, then ``self.w = self.w + lr * (positive - negative) / rows``): no
variable, tape or optimizer, so none of the other training kinds sees it.

Distributed, the term is what the ranks must agree on (each computes it from its own rows; all-reduced,
every rank applies the same update), and the window is what they split (each takes every RANK_SIZE-th
row of it). Parameters that start from constants (``tf.zeros``) start alike on every rank.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from .facts import CellFacts, NotebookFacts, dotted_name, once_per_object

LEARNING_RULE = "learning-rule"
# Calls that make the same values on every rank (a parameter's start).
_CONSTANT_MAKERS = frozenset({
    "tensorflow.zeros", "tensorflow.ones", "tensorflow.zeros_like", "tensorflow.ones_like", "tensorflow.fill",
    "tensorflow.constant", "numpy.zeros", "numpy.ones", "numpy.full", "numpy.zeros_like", "numpy.ones_like",
})
# Calls in a loop that make it another kind of training: the other rules own it.
_OTHER_TRAINING = frozenset({"gradient", "apply_gradients", "minimize", "fit", "train_on_batch", "run"})
_MEANS = ("reduce_mean", "mean", "average")


@dataclass(eq=False)
class RuleUpdate:
    """One update of a learning rule: ``parameter = parameter + term`` (or ``-``, ``+=``, ``-=``)."""

    cell: int
    facts: CellFacts
    stmt: ast.stmt
    parameter: str  # "self.w"
    term: ast.expr
    window: ast.Subscript  # the rows the term is computed from: ``X[start:end]``
    averaged: bool  # the term is a mean over the window's rows (else a sum)

    @property
    def reduction(self) -> str:
        """What keeps one card's update: the mean of the ranks' means is the window's mean; sums add up."""
        return "mean" if self.averaged else "sum"


_cache: "weakref.WeakKeyDictionary[NotebookFacts, List[RuleUpdate]]" = weakref.WeakKeyDictionary()


def rule_updates(facts: NotebookFacts) -> List[RuleUpdate]:
    """Every learning-rule update of the notebook, in notebook order."""
    found = _cache.get(facts)
    if found is None:
        found = _cache[facts] = _find(facts) if facts.imports_module("tensorflow") else []
    return found


def starts_from_constants(facts: NotebookFacts, updates: List[RuleUpdate]) -> Optional[str]:
    """The call every updated parameter starts from when each one is made by a constant maker
    (``tf.zeros``), else None."""
    makers = set()
    for parameter in {update.parameter for update in updates}:
        starts = [a.value for _cell, _facts, a in facts.assignments(parameter) if not _is_update(a.stmt, parameter)]
        calls = [facts.resolve(dotted_name(value.func)) for value in starts if isinstance(value, ast.Call)]
        if not starts or len(calls) != len(starts) or not set(calls) <= _CONSTANT_MAKERS:
            return None
        makers |= set(calls)
    return sorted(makers)[0] if makers else None


def _find(facts: NotebookFacts) -> List[RuleUpdate]:
    found = []
    for index, cell_facts in facts.notebook_cells:
        for loop, windows in _windowed_loops(cell_facts):
            sources = _sources_in(loop)
            for stmt in ast.walk(loop):
                update = _update(stmt)
                if update is None:
                    continue
                parameter, term = update
                read = _closure(_names(term), sources)
                window = next((windows[name] for name in windows if name in read), None)
                if window is None or not _computes_with_tensorflow(facts, [term] + [
                        value for name in read for value in sources.get(name, ())]):
                    continue
                if any(u.stmt is stmt for u in found):
                    continue  # met again from an outer loop
                parts = [term] + [value for name in read for value in sources.get(name, ())]
                found.append(RuleUpdate(index, cell_facts, stmt, parameter, term, window, _averaged(parts, set(windows))))
    return found


@once_per_object
def _windowed_loops(cell: CellFacts) -> List[Tuple[ast.For, Dict[str, ast.Subscript]]]:
    """(loop, its windows) of each loop in a cell that takes windows of rows and calls no trainer."""
    if not any(_window(node) is not None for node in cell.nodes(ast.Assign)):
        return []  # no window anywhere in the cell: no loop's subtree walked
    found = []
    for loop in cell.nodes(ast.For):
        windows = {} if _trains_otherwise(loop) else _windows(loop)
        if windows:
            found.append((loop, windows))
    return found


def _trains_otherwise(loop: ast.For) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _OTHER_TRAINING
               for node in ast.walk(loop))


def _windows(loop: ast.For) -> Dict[str, ast.Subscript]:
    """``batch = X[start:end]`` in the loop: rows of an array between two computed bounds."""
    found = {}
    for node in ast.walk(loop):
        window = _window(node)
        if window is not None:
            found[node.targets[0].id] = window
    return found


def _window(node: ast.AST) -> Optional[ast.Subscript]:
    """``X[start:end]`` when ``node`` is ``name = X[start:end]`` (bounds computed, no step), else None."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
        return None
    value = _without_rank_rows(node.value)
    if isinstance(value, ast.Subscript) and isinstance(value.value, (ast.Name, ast.Attribute)):
        rows = value.slice.elts[0] if isinstance(value.slice, ast.Tuple) and value.slice.elts else value.slice
        if isinstance(rows, ast.Slice) and rows.step is None and all(
                bound is not None and not isinstance(bound, ast.Constant) for bound in (rows.lower, rows.upper)):
            return value
    return None


def _without_rank_rows(value: ast.expr) -> ast.expr:
    """``X[start:end]`` of ``X[start:end][rank_id::rank_size]`` (a window the fix split already)."""
    while (isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice) and value.slice.step is not None
           and isinstance(value.value, ast.Subscript)):
        value = value.value
    return value


def _sources_in(loop: ast.For) -> Dict[str, List[ast.expr]]:
    """name -> the values the loop assigns it."""
    sources: Dict[str, List[ast.expr]] = {}
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                for name in (e.id for e in elements if isinstance(e, ast.Name)):
                    sources.setdefault(name, []).append(node.value)
    return sources


def _closure(names: Set[str], sources: Dict[str, List[ast.expr]]) -> Set[str]:
    """``names`` and the names the loop computes them from."""
    seen, pending = set(), list(names)
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending.extend(n for value in sources.get(name, ()) for n in _names(value))
    return seen


def _names(node: ast.AST) -> Set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _update(stmt: ast.AST):
    """(parameter, term) of ``p = p + term``, ``p = p - term``, ``p += term``, ``p -= term``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub)):
        target = dotted_name(stmt.target)
        return (target, stmt.value) if target else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.BinOp) \
            and isinstance(stmt.value.op, (ast.Add, ast.Sub)):
        target = dotted_name(stmt.targets[0])
        if target and dotted_name(stmt.value.left) == target:
            return target, stmt.value.right
    return None


def _is_update(stmt: ast.stmt, parameter: str) -> bool:
    found = _update(stmt)
    return found is not None and found[0] == parameter


def _computes_with_tensorflow(facts: NotebookFacts, parts: List[ast.expr]) -> bool:
    """Is a TensorFlow op in the term or in what the loop computes it from (``parts``)? A counter's
    ``+= 1`` is not a rule, nor numpy's arithmetic."""
    return any(isinstance(node, ast.Call) and facts.resolve(dotted_name(node.func)).startswith("tensorflow.")
               for part in parts for node in ast.walk(part))


def _averaged(parts: List[ast.expr], windows: Set[str]) -> bool:
    """Is the term (``parts``: it and what the loop computes it from) a mean over the window's rows:
    divided by its row count, or a mean op?"""
    for node in (node for part in parts for node in ast.walk(part)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)) and _names(node.right) & windows:
            return True
        if isinstance(node, ast.Call) and (dotted_name(node.func) or "").rsplit(".", 1)[-1] in _MEANS:
            return True
    return False


# The rules' examples (allreduce, shard, broadcast): an RBM trained by contrastive divergence.
EXAMPLE_RBM = (
    "import tensorflow as tf\n"
    "class RBM:\n"
    "    def __init__(self, n_visible, n_hidden, lr=1.0, batchsize=100):\n"
    "        self.lr, self.batchsize = lr, batchsize\n"
    "        self.w = {start}([n_visible, n_hidden])\n"
    "        self.vb = tf.zeros([n_visible])\n"
    "    def train(self, X, epochs=10):\n"
    "        for epoch in range(epochs):\n"
    "            for start, end in zip(range(0, len(X), self.batchsize), range(self.batchsize, len(X), self.batchsize)):\n"
    "                batch = {window}\n"
    "                h0 = tf.nn.sigmoid(tf.matmul(batch, self.w))\n"
    "                v1 = tf.nn.sigmoid(tf.matmul(h0, tf.transpose(self.w)))\n"
    "                h1 = tf.nn.sigmoid(tf.matmul(v1, self.w))\n"
    "                self.w = self.w + {w_term}\n"
    "                self.vb = self.vb + {vb_term}\n"
    "rbm = RBM(784, 200)\n"
    "rbm.train(train_data)\n"
)
EXAMPLE_RBM_PARTS = {
    "start": "tf.zeros",
    "window": "X[start:end]",
    "w_term": "self.lr * (tf.matmul(tf.transpose(batch), h0) - tf.matmul(tf.transpose(v1), h1)) / "
              "tf.cast(tf.shape(batch)[0], tf.float32)",
    "vb_term": "self.lr * tf.reduce_mean(batch - v1, 0)",
}
