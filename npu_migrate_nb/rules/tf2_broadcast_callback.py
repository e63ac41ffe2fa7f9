"""The TF2 ``NPUBroadcastGlobalVariablesCallback`` never broadcasts (its hook is defined inside ``__init__``)."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import receiver_name
from ..findings import NEEDS_NPU_DEVICE, Finding
from ..i18n import _
from .base import Example, Rule, insert_before, remove_element, remove_statement, replace
from .broadcast import (
    adapter_broadcast_callback, defective_callback_given_to_search, first_batch_broadcast, model_is_built_before_fit,
)


class TF2BroadcastCallback(Rule):
    """In the TF2 adapter, ``NPUBroadcastGlobalVariablesCallback`` defines its broadcast hook
    inside ``__init__`` instead of as a method, so Keras never calls it: ``fit`` runs without a
    broadcast and the ranks keep their own initial weights. ``npu_callbacks_append`` appends that
    callback under TF2 too. The fix replaces it with ``npu.distribute.broadcast(model.trainable_variables)``
    before ``fit`` when the model is built there, else with a callback that broadcasts once the model is
    built by its first batch."""

    code = "tf2-broadcast-callback"
    step = "broadcast"
    severity = "error"

    VALID = [
        "import npu_device as npu\nnpu.distribute.broadcast(model.trainable_variables)\nmodel.fit(ds)\n",
        # The TF1 callback works.
        "from npu_bridge.npu_init import *\nmodel.fit(x, y, callbacks=[NPUBroadcastGlobalVariablesCallback(0)])\n",
    ]
    INVALID = [
        # A subclassed model has no variables before fit: a working callback takes the defective one's place.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "class Net(tf.keras.Model):\n"
            "    def call(self, x):\n"
            "        return x\n"
            "model = Net()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[npu.distribute.NPUBroadcastGlobalVariablesCallback(0)])\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "class Net(tf.keras.Model):\n"
            "    def call(self, x):\n"
            "        return x\n"
            "model = Net()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: "
            "batch == 0 and npu.distribute.broadcast(model.trainable_variables))])\n",
        ),
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[tb, npu.distribute.NPUBroadcastGlobalVariablesCallback(0)])\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit(ds, callbacks=[tb])\n",
        ),
        # What the vendor's TF2 tool leaves: npu_callbacks_append, whose callback never broadcasts.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=npu.distribute.npu_callbacks_append([tb]))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "model.fit(ds, callbacks=[tb])\n",
        ),
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "from npu_device.distribute import npu_callbacks_append\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=npu_callbacks_append(callbacks))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "from npu_device.distribute import npu_callbacks_append\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[*callbacks, tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, "
            "logs: batch == 0 and npu.distribute.broadcast(model.trainable_variables))])\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        if context.tf1:
            return
        for cell, facts, site in tf2_callbacks_appends(context):
            yield self.finding(
                cell, facts, site.node,
                _("npu_callbacks_append under the TF2 adapter appends NPUBroadcastGlobalVariablesCallback, which "
                  "never broadcasts (a defect of the adapter): call {npu}.distribute.broadcast("
                  "model.trainable_variables) before fit instead").format(npu=context.npu),
                broadcast_instead_of_append(context, cell, facts, site),
            )
        given_to_searches = {id(defective_callback_given_to_search(context, search))
                             for _cell, _facts, search in context.facts.keras_fits("fit") if search.method == "search"}
        for cell, facts, site in context.facts.calls("NPUBroadcastGlobalVariablesCallback"):
            if not adapter_broadcast_callback(context, site.dotted):
                continue
            if id(site.node) in given_to_searches:
                continue  # missing-broadcast puts the search's own callback in its place
            edits = broadcast_instead_of_callback(context, cell, facts, site)
            yield self.finding(
                cell, facts, site.node,
                _("the TF2 NPUBroadcastGlobalVariablesCallback never broadcasts (a defect of the adapter): "
                  "call {npu}.distribute.broadcast(model.trainable_variables) before fit instead").format(
                    npu=context.npu),
                edits,
            )


def broadcast_instead_of_callback(context, cell, facts, site):
    """Edits that replace a broadcast callback given to fit by a broadcast that works: before fit
    when the model is built, else a callback that broadcasts after the first batch."""
    fit = _fit_using(facts, site)
    if fit is None:
        return []
    model = receiver_name(fit)
    if not model_is_built_before_fit(context, model, fit, cell):
        return [replace(cell, facts, site.node, first_batch_broadcast(context, model), [NEEDS_NPU_DEVICE])]
    parent = _list_holding(site)
    if parent is not None:
        removal = remove_element(cell, facts, site.node)
    elif site.argument_of is not None and site.argument_of.method == "append" and site.stmt.value is site.argument_of.node:
        removal = remove_statement(cell, facts, site.stmt)
    else:
        return []
    return [removal, _broadcast_before(context, cell, facts, fit, model)]


def tf2_callbacks_appends(context):
    """``npu_callbacks_append`` calls that come from the TF2 adapter (npu_device)."""
    for cell, facts, site in context.facts.calls("npu_callbacks_append"):
        if context.facts.resolve(site.dotted).startswith("npu_device."):
            yield cell, facts, site


def broadcast_instead_of_append(context, cell, facts, site):
    """``callbacks=npu_callbacks_append(cbs)`` becomes ``callbacks=cbs`` with a broadcast that works:
    before fit when the model is built, else a callback that broadcasts after the first batch."""
    fit = _fit_using(facts, site)
    if fit is None:
        return []
    model = receiver_name(fit)
    given = site.argument(0, "callbacks_list")
    kept = facts.segment(given) if given is not None else None
    if not model_is_built_before_fit(context, model, fit, cell):
        callback = first_batch_broadcast(context, model)
        code = f"[*{kept}, {callback}]" if kept else f"[{callback}]"
        return [replace(cell, facts, site.node, code, [NEEDS_NPU_DEVICE])]
    return [replace(cell, facts, site.node, kept or "[]"), _broadcast_before(context, cell, facts, fit, model)]


def _broadcast_before(context, cell, facts, fit, model: str):
    code = f"{context.npu}.distribute.broadcast({model}.trainable_variables)"
    return insert_before(cell, facts, fit.stmt, code, [NEEDS_NPU_DEVICE])


def _fit_using(facts, site) -> Optional[object]:
    fits = facts.calls_by_method.get("fit", ())
    for fit in fits:
        if fit.node.lineno >= site.node.lineno and fit.function == site.function and receiver_name(fit):
            return fit
    return None


def _list_holding(site) -> Optional[ast.List]:
    for node in ast.walk(site.stmt):
        if isinstance(node, ast.List) and any(element is site.node for element in node.elts):
            return node
    return None
