"""Gradient aggregation (梯度聚合): gradients are all-reduced across ranks before the update."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, List, Optional

from .. import knowledge as K
from ..facts import CallSite, CellFacts, dotted_name
from ..findings import NEEDS_NPU_BRIDGE, NEEDS_NPU_DEVICE, Edit, Finding
from ..analysis import is_distributed_argument
from .base import Example, Rule, add_argument, insert_after, keras_prefix, replace, single_target, wrap
from .reduction import reduction_for

TF1_WRAPPER = "npu_distributed_optimizer_wrapper"


class MissingAllreduce(Rule):
    code = "missing-allreduce"
    step = "allreduce"
    severity = "error"

    VALID = [
        # The seed's method one: the optimizer is wrapped where it is created.
        "from npu_bridge.npu_init import *\n"
        "import tensorflow as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)\n"
        "    optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"
        "    train_op = optimizer.minimize(loss=features, global_step=tf.train.get_global_step())\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=features, train_op=train_op)\n"
        "estimator = tf.estimator.Estimator(model_fn=model_fn)\n",
        # The second seed: grads are all-reduced right after tape.gradient.
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "@tf.function\n"
        "def step(x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
        "    opt.apply_gradients(zip(grads, model.trainable_variables))\n",
        # Nothing trains: nothing to aggregate.
        "import tensorflow as tf\nx = tf.constant(1.0)\n",
        # The unified NPUOptimizer all-reduces (mean) with is_distributed=True.
        "from npu_bridge.npu_init import *\n"
        "import tensorflow as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
        "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_distributed=True)\n"
        "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
        "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
        "estimator = NPUEstimator(model_fn=model_fn)\n",
        # NPULossScaleOptimizer from its own module, is_distributed given by position.
        "import tensorflow as tf\n"
        "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
        "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
        "optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
        "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), True)\n"
        "train_op = optimizer.minimize(loss)\n"
        "with tf.Session() as sess:\n"
        "    sess.run(train_op)\n",
    ]

    INVALID = [
        # Estimator: the optimizer is created in model_fn, in another cell than the training call.
        Example(
            "import tensorflow as tf\n"
            "# %%\n"
            "def cnn_model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(features)\n"
            "    if mode == tf.estimator.ModeKeys.TRAIN:\n"
            "        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)  # SGD\n"
            "        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())\n"
            "        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "# %%\n"
            "def cnn_model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(features)\n"
            "    if mode == tf.estimator.ModeKeys.TRAIN:\n"
            "        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)  # SGD\n"
            "        optimizer = npu_distributed_optimizer_wrapper(optimizer)\n"
            "        train_op = optimizer.minimize(loss=loss, global_step=tf.train.get_global_step())\n"
            "        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "# %%\n"
            "estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)\n",
            adapter="npu_bridge",
        ),
        # NPUOptimizer without is_distributed (default False): it does not aggregate; the fix sets it.
        Example(
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
            "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_loss_scale=False)\n"
            "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
            "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "estimator = NPUEstimator(model_fn=model_fn)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow as tf\n"
            "def model_fn(features, labels, mode):\n"
            "    loss = tf.reduce_mean(tf.layers.dense(features, 1))\n"
            "    optimizer = NPUOptimizer(tf.train.AdamOptimizer(1e-3), is_loss_scale=False, is_distributed=True)\n"
            "    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())\n"
            "    return NPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n"
            "estimator = NPUEstimator(model_fn=model_fn)\n",
            adapter="npu_bridge",
        ),
        # NPULossScaleOptimizer with is_distributed=False, the optimizer it wraps created before it.
        Example(
            "import tensorflow as tf\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
            "optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
            "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), is_distributed=False)\n"
            "train_op = optimizer.minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(train_op)\n",
            "import tensorflow as tf\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer\n"
            "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager\n"
            "optimizer = tf.train.MomentumOptimizer(0.01, 0.9)\n"
            "optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(2 ** 10), is_distributed=True)\n"
            "train_op = optimizer.minimize(loss)\n"
            "with tf.Session() as sess:\n"
            "    sess.run(train_op)\n",
            adapter="npu_bridge",
        ),
        # TF1 optimizer created inline, in a helper, through a compat.v1 alias.
        Example(
            "import tensorflow.compat.v1 as tf\n"
            "def make_train_op(loss):\n"
            "    return tf.train.AdamOptimizer(1e-3).minimize(loss)\n"
            "estimator = tf.estimator.Estimator(model_fn=None)\n",
            "from npu_bridge.npu_init import *\n"
            "import tensorflow.compat.v1 as tf\n"
            "def make_train_op(loss):\n"
            "    return npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer(1e-3)).minimize(loss)\n"
            "estimator = tf.estimator.Estimator(model_fn=None)\n",
        ),
        # TF2 Keras with a string optimizer.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(dataset, epochs=1)\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam()), loss='mse')\n"
            "model.fit(dataset, epochs=1)\n",
            adapter="npu_device",
        ),
        # TF2 Keras with an optimizer object created at module level, in its own cell.
        Example(
            "from tensorflow import keras\n"
            "# %%\n"
            "opt = keras.optimizers.SGD(0.1)\n"
            "# %%\n"
            "model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(opt, loss='mse')\n"
            "model.fit(x, y, batch_size=32)\n",
            "from tensorflow import keras\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "# %%\n"
            "opt = keras.optimizers.SGD(0.1)\n"
            "opt = npu.distribute.npu_distributed_keras_optimizer_wrapper(opt)\n"
            "# %%\n"
            "model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])\n"
            "model.compile(opt, loss='mse')\n"
            "model.fit(x, y, batch_size=32)\n",
        ),
        # TF2 custom loop, loss divided by the global batch size: "sum" keeps the single-card math.
        Example(
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "GLOBAL_BATCH = 64\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        per_example = loss_object(y, model(x, training=True))\n"
            "        loss = tf.reduce_sum(per_example) * (1.0 / GLOBAL_BATCH)\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "GLOBAL_BATCH = 64\n"
            "@tf.function\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        per_example = loss_object(y, model(x, training=True))\n"
            "        loss = tf.reduce_sum(per_example) * (1.0 / GLOBAL_BATCH)\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    grads = npu.distribute.all_reduce(grads, reduction=\"sum\")\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        ),
        # TF2 custom loop with a mean loss and the gradient used inline.
        Example(
            "import tensorflow as tf\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
            "import tensorflow as tf\n"
            "import npu_device as npu\n"
            "npu.open().as_default()\n"
            "def train_step(x, y):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
            "    optimizer.apply_gradients(zip(npu.distribute.all_reduce(tape.gradient(loss, model.trainable_variables), reduction=\"mean\"), model.trainable_variables))\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.steps["allreduce"] != "missing" or _horovod_optimizer(context):
            return []
        findings: List[Finding] = list(self._set_is_distributed(context))
        if context.tf1:
            findings += self._wrap_tf1_optimizers(context)
        if "keras" in context.frameworks:
            findings += self._wrap_compiled_optimizers(context)
        if "custom-loop" in context.frameworks and not context.tf1:
            findings += self._all_reduce_gradients(context)
        return findings or self.unlocated(
            context, "gradients are not aggregated across ranks, and neither the optimizer nor the gradient "
            "computation was recognized"
        )

    # -- NPUOptimizer / NPULossScaleOptimizer: all-reduce only with is_distributed=True
    def _set_is_distributed(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*K.DISTRIBUTED_FLAG_OPTIMIZERS):
            value = is_distributed_argument(context.facts, site)
            if value is None:
                edit = add_argument(cell, facts, site.node, "is_distributed=True")
            else:
                edit = replace(cell, facts, value, "True")
            yield self.finding(
                cell, facts, site.node,
                f"gradients are not aggregated across ranks: {site.method} all-reduces them only with "
                "is_distributed=True (the default is False)",
                [edit],
            )

    # -- TF1: wrap every tf.train optimizer where it is created
    def _wrap_tf1_optimizers(self, context) -> Iterator[Finding]:
        given = _given_to_flag_optimizers(context)
        for cell, facts, site in context.facts.calls_to(*K.TF1_OPTIMIZERS):
            if _already_wrapped(context, site) or id(site.node) in given or (
                (site.function, single_target(site.stmt)) in given
            ):
                continue  # the fix sets is_distributed=True on the NPUOptimizer it is given to
            yield self.finding(
                cell,
                facts,
                site.node,
                f"gradients are not aggregated across ranks: wrap this {site.method} with "
                f"{TF1_WRAPPER} (all-reduce, mean) where it is created",
                [_wrap_creation(cell, facts, site, TF1_WRAPPER, NEEDS_NPU_BRIDGE)],
            )

    # -- Keras compile/fit: wrap the optimizer given to compile (resolving strings)
    def _wrap_compiled_optimizers(self, context) -> Iterator[Finding]:
        wrapper = TF1_WRAPPER if context.tf1 else f"{context.npu}.distribute.npu_distributed_keras_optimizer_wrapper"
        needs = NEEDS_NPU_BRIDGE if context.tf1 else NEEDS_NPU_DEVICE
        seen = set()
        for cell, facts, site in context.facts.calls("compile"):
            optimizer = site.argument(0, "optimizer")
            if optimizer is None:
                continue
            found = self._compiled_optimizer_fix(context, cell, facts, site, optimizer, wrapper, needs)
            if found is not None and (found.cell, found.line, found.column) not in seen:
                seen.add((found.cell, found.line, found.column))
                yield found

    def _compiled_optimizer_fix(self, context, cell, facts, site, optimizer, wrapper, needs) -> Optional[Finding]:
        message = f"gradients are not aggregated across ranks: wrap the optimizer given to compile with {wrapper.rsplit('.', 1)[-1]}"
        if isinstance(optimizer, ast.Constant) and isinstance(optimizer.value, str):
            class_name = K.KERAS_OPTIMIZER_STRINGS.get(optimizer.value.lower())
            if class_name is None:
                return self.finding(cell, facts, optimizer, message + f" (unknown optimizer {optimizer.value!r})")
            code = f"{wrapper}({keras_prefix(context)}.optimizers.{class_name}())"
            return self.finding(cell, facts, optimizer, message, [replace(cell, facts, optimizer, code, [needs])])
        if isinstance(optimizer, ast.Name):
            creation = _creation_of(context, optimizer.id, site)
            if creation is not None and not _ran_already(context, creation[0], cell):
                c_cell, c_facts, c_site = creation
                return self.finding(
                    c_cell, c_facts, c_site.node, message,
                    [_wrap_creation(c_cell, c_facts, c_site, wrapper, needs)],
                )
        return self.finding(cell, facts, optimizer, message, [wrap(cell, facts, optimizer, wrapper, [needs])])

    # -- TF2 custom loops: all-reduce right after tape.gradient
    def _all_reduce_gradients(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls("gradient"):
            if site.receiver is None or len(site.node.args) + len(site.node.keywords) < 2:
                continue
            reduction, reason = reduction_for(context, facts, site)
            function = f"{context.npu}.distribute.all_reduce"
            target = single_target(site.stmt)
            if target is not None and site.stmt.value is site.node:
                edit = insert_after(
                    cell, facts, site.stmt, f'{target} = {function}({target}, reduction="{reduction}")',
                    [NEEDS_NPU_DEVICE],
                )
            else:
                edit = replace(
                    cell, facts, site.node,
                    f'{function}({facts.segment(site.node)}, reduction="{reduction}")', [NEEDS_NPU_DEVICE],
                )
            yield self.finding(
                cell, facts, site.node,
                f'gradients are not all-reduced across ranks: add {function}(..., reduction="{reduction}") '
                f"after tape.gradient ({reason})",
                [edit],
            )


def _ran_already(context, creation_cell: int, use_cell: int) -> bool:
    """In a kernel (the cell magic), the cell that created the optimizer has run and will not run
    again: wrap it where this cell uses it instead."""
    return context.options.current_cell == use_cell and creation_cell != use_cell


def _wrap_creation(cell: int, facts: CellFacts, site: CallSite, wrapper: str, needs: str) -> Edit:
    """The seed's shape: ``opt = Opt(...)`` gets ``opt = wrapper(opt)`` after it; otherwise wrap inline."""
    target = single_target(site.stmt)
    if target is not None and site.stmt.value is site.node:
        return insert_after(cell, facts, site.stmt, f"{target} = {wrapper}({target})", [needs])
    return wrap(cell, facts, site.node, wrapper, [needs])


def _creation_of(context, name: str, use: CallSite):
    """The optimizer constructor call assigned to ``name``, preferring the use's own scope."""
    candidates = []
    for cell, facts, assignment in context.facts.assignments(name):
        value = assignment.value
        if isinstance(value, ast.Call) and context.facts.resolve(dotted_name(value.func)) in K.OPTIMIZERS:
            site = next((s for s in facts.calls if s.node is value), None)
            if site is not None:
                candidates.append((assignment.function == use.function, cell, facts, site))
    if not candidates:
        return None
    candidates.sort(key=lambda item: item[0])
    _, cell, facts, site = candidates[-1]
    return cell, facts, site


def _given_to_flag_optimizers(context) -> set:
    """The optimizers given to NPUOptimizer/NPULossScaleOptimizer: their constructor calls (by id)
    and the (function, name) they are bound to."""
    given: set = set()
    for _, _, site in context.facts.calls_to(*K.DISTRIBUTED_FLAG_OPTIMIZERS):
        inner = site.argument(0, "opt")
        if isinstance(inner, ast.Call):
            given.add(id(inner))
        elif isinstance(inner, ast.Name):
            given.add((site.function, inner.id))
    return given


def _already_wrapped(context, site: CallSite) -> bool:
    outer = site.argument_of
    return outer is not None and context.facts.resolve(outer.dotted) in K.ALLREDUCE_FORMS


def _horovod_optimizer(context) -> bool:
    return any(name.endswith("DistributedOptimizer") for name in _resolved_calls(context, "DistributedOptimizer"))


def _resolved_calls(context, method: str):
    for _, _, site in context.facts.calls(method):
        resolved = context.facts.resolve(site.dotted)
        if resolved.startswith("horovod."):
            yield resolved

