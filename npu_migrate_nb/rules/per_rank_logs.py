"""Callbacks that act on each rank's own logs: ``EarlyStopping`` and ``ReduceLROnPlateau`` read the
loss and metrics of the epoch, and on N ranks each rank's logs hold its own, from its own shard of
the data. The ranks then stop at different epochs (the one still training waits in an all-reduce
forever: the simulator saw Udacity's stateful-RNN forecast time out in its 500-epoch fit), or lower
the learning rate at different epochs (their weights drift apart). The fix, as Horovod's
``MetricAverageCallback`` does: average the logs across ranks before those callbacks read them."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import CallSite
from ..findings import NEEDS_NPU_DEVICE, Finding
from ..i18n import _
from .base import Example, Rule, keras_prefix, replace_with

_READERS = ("tensorflow.keras.callbacks.EarlyStopping", "tensorflow.keras.callbacks.ReduceLROnPlateau")


def average_logs_callback(context) -> str:
    """A Keras callback that replaces every value of the epoch's logs by its mean over the ranks (the
    adapter's all_reduce returns it unchanged on one card)."""
    return f"{keras_prefix(context)}.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: {logs_averaged(context)})"


def logs_averaged(context) -> str:
    """``logs.update(...)``: every value of the epoch's ``logs`` replaced by its mean over the ranks."""
    return (f"logs.update({{key: float({context.npu}.distribute.all_reduce({context.tf}.constant(value, {context.tf}.float32), "
            "reduction='mean')) for key, value in logs.items()})")


class PerRankLogs(Rule):
    code = "per-rank-logs"
    step = None
    severity = "error"

    VALID = [
        # The logs are averaged across ranks before EarlyStopping reads them.
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(ds, validation_data=val, callbacks=[tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, "
        "logs: logs.update({key: float(npu.distribute.all_reduce(tf.constant(value, tf.float32), reduction='mean')) "
        "for key, value in logs.items()})), tf.keras.callbacks.EarlyStopping(patience=5)])\n",
        # Callbacks that read no metric.
        "import tensorflow as tf\nmodel.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(ds, callbacks=[tf.keras.callbacks.LearningRateScheduler(lambda epoch: 1e-3)])\n",
    ]
    INVALID = [
        # Udacity's forecasting course: EarlyStopping on each rank's own validation loss.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "early_stopping = tf.keras.callbacks.EarlyStopping(patience=50)\n"
            "model.fit(train_set, epochs=500, validation_data=valid_set, callbacks=[early_stopping])\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "early_stopping = tf.keras.callbacks.EarlyStopping(patience=50)\n"
            "model.fit(train_set, epochs=500, validation_data=valid_set, callbacks=[tf.keras.callbacks.LambdaCallback("
            "on_epoch_end=lambda epoch, logs: logs.update({key: float(npu.distribute.all_reduce(tf.constant(value, "
            "tf.float32), reduction='mean')) for key, value in logs.items()})), early_stopping])\n",
        ),
        # Written in the list, after another callback: the average goes right before it.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[checkpoint, tf.keras.callbacks.ReduceLROnPlateau(monitor='loss')])\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "model.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(ds, callbacks=[checkpoint, tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: "
            "logs.update({key: float(npu.distribute.all_reduce(tf.constant(value, tf.float32), reduction='mean')) "
            "for key, value in logs.items()})), tf.keras.callbacks.ReduceLROnPlateau(monitor='loss')])\n",
        ),
        # TF1 Keras: reported; the average needs the TF2 adapter's all_reduce.
        Example(
            "import tensorflow.compat.v1 as tf\nfrom npu_bridge.npu_init import *\n"
            "sess = tf.Session()\nmodel.compile(optimizer='sgd', loss='mse')\n"
            "model.fit(x, y, callbacks=[tf.keras.callbacks.EarlyStopping(monitor='loss')])\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none" or "keras" not in context.frameworks or context.steps.get("shard") == "not-applicable":
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*_READERS):
            given = _given_to_fit(context, cell, site)
            if given is _NOT_GIVEN or (given is not None and _averaged_before(given)):
                continue
            edits = []
            if not context.tf1 and given is not None:
                list_cell, list_facts, _list, element = given
                edits = [replace_with(list_cell, list_facts, element, _literal(average_logs_callback(context)) + ", {node}",
                                      [NEEDS_NPU_DEVICE], node=element)]
            yield self.finding(
                cell, facts, site.node,
                _("{callback} reads this rank's own loss and metrics (each rank's logs come from its shard of the "
                  "data): the ranks {consequence}; average the logs across ranks before it reads them (as Horovod's "
                  "MetricAverageCallback does)").format(
                    callback=site.method,
                    consequence=_("stop at different epochs, and the one still training waits in an all-reduce "
                                  "forever") if site.method == "EarlyStopping" else
                    _("lower the learning rate at different epochs and drift apart"),
                ),
                edits,
            )


_NOT_GIVEN = object()  # no later fit takes the callback


def _given_to_fit(context, cell: int, site: CallSite):
    """(cell, facts, list, element) when the callback is an element of a later ``fit(callbacks=[...])``
    list, directly or by the name it is bound to; None when it reaches a later fit some other way;
    ``_NOT_GIVEN`` when no later fit takes it."""
    name = _bound_name(site)
    for fit_cell, fit_facts, fit in context.facts.keras_fits("fit"):
        keyword = fit.keyword("callbacks")
        # A tuner's search: the missing broadcast puts a callback first in its list that averages the logs.
        if keyword is None or fit_cell < cell or fit.method == "search":
            continue
        given = keyword.value
        if isinstance(given, ast.List):
            for element in given.elts:
                if element is site.node or (name is not None and isinstance(element, ast.Name) and element.id == name):
                    return fit_cell, fit_facts, given, element
        if name is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(given)):
            return None
    return _NOT_GIVEN


def _literal(code: str) -> str:
    """``code`` as a format pattern without holes."""
    return code.replace("{", "{{").replace("}", "}}")


def _bound_name(site: CallSite) -> Optional[str]:
    stmt = site.stmt
    if isinstance(stmt, ast.Assign) and stmt.value is site.node and len(stmt.targets) == 1:
        target = stmt.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    return None


def _averaged_before(given) -> bool:
    """Does a callback that all-reduces the logs come before the element in fit's list?"""
    _cell, facts, callbacks, element = given
    before = callbacks.elts[: [id(e) for e in callbacks.elts].index(id(element))]
    return any("all_reduce" in facts.segment(e) for e in before)
