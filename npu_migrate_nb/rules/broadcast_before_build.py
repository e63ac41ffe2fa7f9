"""Broadcasting a Keras model's variables before they exist broadcasts nothing."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ..facts import dotted_name
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule
from .broadcast import model_built_at


class BroadcastBeforeBuild(Rule):
    """A Keras model built lazily (a subclassed model, a ``Sequential`` without an input shape) has
    no variables until it is built or first called. Broadcasting ``model.trainable_variables`` before
    that broadcasts an empty list: the ranks start from different weights although the code looks
    right. Not fixed automatically: build the model first (``model.build(input_shape)``) or move the
    broadcast after the model is built."""

    code = "broadcast-before-build"
    step = "broadcast"
    severity = "error"

    VALID = [
        "import tensorflow as tf\nimport npu_device as npu\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "npu.distribute.broadcast(model.trainable_variables)\n",
        # A subclass whose __init__ makes only built models (tensorflow.org's VAE).
        "import tensorflow as tf\nimport npu_device as npu\n"
        "class VAE(tf.keras.Model):\n    def __init__(self):\n        super().__init__()\n"
        "        self.encoder = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)), tf.keras.layers.Dense(2)])\n"
        "model = VAE()\nnpu.distribute.broadcast(model.trainable_variables)\n",
        "import tensorflow as tf\nimport npu_device as npu\n"
        "class Net(tf.keras.Model):\n    pass\n"
        "model = Net()\nmodel.build((None, 4))\n"
        "npu.distribute.broadcast(model.trainable_variables)\n",
    ]
    INVALID = [
        # A subclassed model has no variables until it is built or called.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\n"
            "class Net(tf.keras.Model):\n    pass\n"
            "# %%\n"
            "model = Net()\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
        ),
        # A subclass that also makes a layer of its own: built on first call.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\n"
            "class VAE(tf.keras.Model):\n    def __init__(self):\n        super().__init__()\n"
            "        self.encoder = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)), tf.keras.layers.Dense(2)])\n"
            "        self.head = tf.keras.layers.Dense(1)\n"
            "model = VAE()\nnpu.distribute.broadcast(model.trainable_variables)\n"
        ),
        # Sequential without an input shape: built on first call.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to("npu_device.distribute.broadcast"):
            values = site.argument(0, "values")
            if not (isinstance(values, ast.Attribute) and values.attr in ("trainable_variables", "variables")):
                continue
            model = dotted_name(values.value)
            standalone = isinstance(site.stmt, ast.Expr) and site.stmt.value is site.node
            if model is None or site.function is not None or not standalone:
                continue
            if _unbuilt_at(context, model, cell, site.node.lineno):
                yield self.finding(
                    cell, facts, site.node,
                    _("{model} has no variables yet here (it is built on first call), so this broadcast "
                      "syncs nothing: call {model}.build(input_shape) first, or broadcast after the model is built"
                      ).format(model=model),
                )


def _unbuilt_at(context, model: str, cell: int, line: int) -> bool:
    """Is ``model`` a Keras model created, but not built, before (cell, line)?"""
    if model_built_at(context, model, cell, line) is not False:
        return False
    created = [a for c, _unused, a in context.facts.assignments(model) if a.function is None and (c, a.stmt.lineno) < (cell, line)]
    return isinstance(created[-1].value, ast.Call) and _is_keras_model(context, created[-1].value)


def _is_keras_model(context, call: ast.Call) -> bool:
    name = context.facts.resolve(dotted_name(call.func))
    if name.startswith("tensorflow.keras."):
        return True
    if isinstance(call.func, ast.Name):
        for _unused, facts in context.facts.cells:
            cls = facts.classes.get(call.func.id) if call.func.id in facts.names else None
            if cls is not None:
                return any(
                    context.facts.resolve(dotted_name(base)).startswith("tensorflow.keras") for base in cls.bases
                )
    return False
