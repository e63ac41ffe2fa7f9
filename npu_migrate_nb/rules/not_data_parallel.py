"""Work that is not data-parallel training: a gradient step on an input (DeepDream, style transfer, an
adversarial example) or training data that comes from an environment instead of a dataset
(reinforcement learning). The steps that do not apply are marked not-applicable, with the reason, and
one info finding says what to split across ranks instead."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, List, Optional

from .. import knowledge as K
from ..facts import CallSite, CellFacts, dotted_name, mentions, receiver_name
from ..findings import STEPS, Finding
from .base import Example, Rule

RANK_ID = K.RANK_ID_EXPR
RANK_SIZE = K.RANK_SIZE_EXPR


@dataclass
class GradientStep:
    cell: int
    facts: CellFacts
    site: CallSite
    inputs: List[str]  # the names the step differentiates or updates


@dataclass
class EnvironmentStep:
    cell: int
    facts: CellFacts
    site: CallSite  # ``env.step(...)``
    environment: str


class NotDataParallel(Rule):
    code = "not-data-parallel"
    step = None
    severity = "info"

    VALID = [
        # A normal custom loop: the gradient is taken with respect to the model's variables.
        "import tensorflow as tf\n"
        "base = tf.keras.applications.MobileNetV2(include_top=False, weights='imagenet')\n"
        "base.trainable = False\n"
        "model = tf.keras.Sequential([base, tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(2)])\n"
        "for images, labels in dataset:\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(labels, model(images, training=True))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        # A model written from scratch: its tf.Variables start from random values, they are its weights.
        "import tensorflow as tf\n"
        "W = tf.Variable(tf.random.normal([784, 10]))\n"
        "b = tf.Variable(tf.zeros([10]))\n"
        "for x, y in dataset:\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, tf.matmul(x, W) + b))\n"
        "    dW, db = tape.gradient(loss, [W, b])\n"
        "    W.assign_sub(0.1 * dW)\n"
        "    b.assign_sub(0.1 * db)\n",
        # Adversarial training: gradients on the input AND on the model's variables: data-parallel training.
        "import tensorflow as tf\n"
        "model = tf.keras.applications.ResNet50(weights=None, classes=10)\n"
        "for images, labels in dataset:\n"
        "    with tf.GradientTape() as tape:\n"
        "        tape.watch(images)\n"
        "        loss = loss_fn(labels, model(images))\n"
        "    adversarial = images + 0.01 * tf.sign(tape.gradient(loss, images))\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(labels, model(adversarial))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
        # Something called step and reset that is no environment, with a dataset.
        "import tensorflow as tf\n"
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)\n"
        "scheduler.reset()\n"
        "for xb, yb in ds:\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(yb, model(xb))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    scheduler.step()\n",
    ]

    INVALID = [
        # Style transfer: the image is the variable; VGG19's weights are loaded, not trained.
        Example(
            "import tensorflow as tf\n"
            "# %%\n"
            "content_image = load_img(content_path)\n"
            "vgg = tf.keras.applications.VGG19(include_top=False, weights='imagenet')\n"
            "vgg.trainable = False\n"
            "extractor = tf.keras.Model([vgg.input], [vgg.get_layer('block5_conv2').output])\n"
            "image = tf.Variable(content_image)\n"
            "opt = tf.keras.optimizers.Adam(learning_rate=0.02, beta_1=0.99, epsilon=1e-1)\n"
            "# %%\n"
            "@tf.function()\n"
            "def train_step(image):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = style_content_loss(extractor(image))\n"
            "    grad = tape.gradient(loss, image)\n"
            "    opt.apply_gradients([(grad, image)])\n"
            "    image.assign(tf.clip_by_value(image, 0.0, 1.0))\n"
            "# %%\n"
            "for n in range(10):\n"
            "    train_step(image)\n",
        ),
        # An adversarial example (FGSM): the gradient of the loss with respect to the watched input image.
        Example(
            "import tensorflow as tf\n"
            "pretrained_model = tf.keras.applications.MobileNetV2(include_top=True, weights='imagenet')\n"
            "pretrained_model.trainable = False\n"
            "def create_adversarial_pattern(input_image, input_label):\n"
            "    with tf.GradientTape() as tape:\n"
            "        tape.watch(input_image)\n"
            "        loss = loss_object(input_label, pretrained_model(input_image))\n"
            "    gradient = tape.gradient(loss, input_image)\n"
            "    return tf.sign(gradient)\n"
            "perturbations = create_adversarial_pattern(image, label)\n",
        ),
        # Reinforcement learning: the data comes from an environment, the model is trained.
        Example(
            "import gym\n"
            "import tensorflow as tf\n"
            "# %%\n"
            "env = gym.make('CartPole-v1')\n"
            "model = ActorCritic(num_actions=2, num_hidden_units=128)\n"
            "optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)\n"
            "# %%\n"
            "def env_step(action):\n"
            "    state, reward, done, truncated, info = env.step(action)\n"
            "    return state, reward, done\n"
            "# %%\n"
            "@tf.function\n"
            "def train_step(initial_state):\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = episode_loss(initial_state, model)\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            "# %%\n"
            "for episode in range(100):\n"
            "    initial_state, info = env.reset()\n"
            "    train_step(tf.constant(initial_state, dtype=tf.float32))\n",
        ),
    ]

    def prepare(self, context) -> None:
        steps = optimized_inputs(context)
        if steps:
            reason = _input_reason(steps)
            for step in STEPS:
                context.mark(step, "not-applicable", reason)
            return
        environment = environment_step(context)
        if environment is not None:
            context.mark("shard", "not-applicable", _environment_reason(environment))

    def check(self, context) -> Iterable[Finding]:
        steps = optimized_inputs(context)
        if steps:
            first = steps[0]
            return [self.finding(first.cell, first.facts, first.site.node, _input_message(steps))]
        environment = environment_step(context)
        if environment is not None:
            message = _environment_message(environment)
            return [self.finding(environment.cell, environment.facts, environment.site.node, message)]
        return []


# ------------------------------------------------------------------------------ optimizing an input


def optimized_inputs(context) -> Optional[List[GradientStep]]:
    """The notebook's gradient steps when every one of them updates an input of a ready-made model
    (a tape-watched tensor, a tf.Variable that starts from data) and nothing trains a model."""
    if context.frameworks != ["custom-loop"] or not _loads_pretrained_model(context):
        return None
    steps: List[GradientStep] = []
    for cell, facts, site in context.facts.calls("gradient", "apply_gradients", "minimize"):
        if site.method == "gradient" and (site.receiver is None or len(site.node.args) + len(site.node.keywords) < 2):
            continue  # not tape.gradient(target, sources)
        inputs = _updated_inputs(context, site)
        if inputs is None:
            return None
        steps.append(GradientStep(cell, facts, site, inputs))
    return steps if any(step.site.method == "gradient" for step in steps) else None


def _updated_inputs(context, site: CallSite) -> Optional[List[str]]:
    if site.method == "gradient":
        variables = site.argument(1, "sources")
    elif site.method == "apply_gradients":
        variables = _paired_variables(site.argument(0, "grads_and_vars"))
    else:
        variables = site.argument(1, "var_list")
    names = _names_in(variables)
    if not names or not all(_is_input(context, name, site.function) for name in names):
        return None
    return names


def _paired_variables(pairs: Optional[ast.expr]) -> Optional[ast.expr]:
    """``v`` of ``[(g, v)]``, ``vs`` of ``zip(gs, vs)``."""
    if isinstance(pairs, (ast.List, ast.Tuple)) and all(
        isinstance(pair, ast.Tuple) and len(pair.elts) == 2 for pair in pairs.elts
    ):
        return ast.List(elts=[pair.elts[1] for pair in pairs.elts])
    if isinstance(pairs, ast.Call) and dotted_name(pairs.func) == "zip" and len(pairs.args) == 2:
        return pairs.args[1]
    return None


def _names_in(node: Optional[ast.expr]) -> Optional[List[str]]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts and all(isinstance(e, ast.Name) for e in node.elts):
        return [element.id for element in node.elts]
    return None


def _is_input(context, name: str, function: Optional[str]) -> bool:
    """Is ``name``, in the step's function, an input? Its bindings there and at module level (other
    functions' locals of the same name are other values) are read."""
    bound = [
        assignment.value for _, _, assignment in context.facts.assignments(name)
        if assignment.function in (None, function)
    ]
    if any(mentions(value, ("variables", "weights")) for value in bound):
        return False
    return _is_watched(context, name) or _is_variable_from_data(context, bound)


def _is_watched(context, name: str) -> bool:
    """``tape.watch(name)``: a tensor, not a variable, is differentiated."""
    return any(
        site.receiver is not None and len(site.node.args) == 1 and isinstance(site.node.args[0], ast.Name)
        and site.node.args[0].id == name
        for _, _, site in context.facts.calls("watch")
    )


def _is_variable_from_data(context, bound: List[ast.expr]) -> bool:
    """Every binding is ``tf.Variable(x)`` with ``x`` data (an image), not fresh numbers (weights)."""
    variables = [value for value in bound if _is_call_to(context, value, "tensorflow.Variable")]
    if not variables or len(variables) != len(bound):
        return False
    return all(value.args and not _is_fresh_value(context, value.args[0]) for value in variables)


def _is_fresh_value(context, node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.UnaryOp, ast.List, ast.Tuple)):
        return True
    if not isinstance(node, ast.Call):
        return False
    name = context.facts.resolve(dotted_name(node.func))
    return name in K.FRESH_VALUE_CALLS or name.startswith(K.FRESH_VALUE_PREFIXES)


def _is_call_to(context, node: ast.expr, qualified: str) -> bool:
    return isinstance(node, ast.Call) and context.facts.resolve(dotted_name(node.func)) == qualified


def _loads_pretrained_model(context) -> bool:
    for _, _, site in context.facts.all_calls():
        name = context.facts.resolve(site.dotted)
        if name in K.PRETRAINED_MODEL_LOADERS or name.startswith(K.PRETRAINED_MODEL_PREFIXES):
            return True
    return False


def _input_names(steps: List[GradientStep]) -> str:
    return ", ".join(dict.fromkeys(name for step in steps for name in step.inputs))


def _input_reason(steps: List[GradientStep]) -> str:
    return (
        f"not data-parallel training: the gradient steps update {_input_names(steps)}, an input of a "
        "ready-made model, not model weights"
    )


def _input_message(steps: List[GradientStep]) -> str:
    return (
        f"not data-parallel training: the gradient steps update {_input_names(steps)}, an input of a "
        "ready-made model, not its weights, so variable broadcast, gradient aggregation and dataset sharding "
        "do not apply (on N ranks every rank would repeat the same optimization). To use several cards, "
        f"split the work instead: give each rank its own inputs (inputs[{RANK_ID}::{RANK_SIZE}]), "
        "or run one notebook per image"
    )


# ------------------------------------------------------------------------------ an environment


def environment_step(context) -> Optional[EnvironmentStep]:
    """The first ``env.step(...)`` of an environment that is also reset, in a notebook that trains
    and reads no dataset."""
    if context.framework == "none":
        return None
    reset = {receiver_name(site) for _, _, site in context.facts.calls("reset")} - {None}
    for cell, facts, site in context.facts.calls("step"):
        name = receiver_name(site)
        if name in reset and _is_environment(context, name):
            return None if _reads_dataset(context) else EnvironmentStep(cell, facts, site, name)
    return None


def _is_environment(context, name: str) -> bool:
    for _, _, assignment in context.facts.assignments(name):
        value = assignment.value
        if isinstance(value, ast.Call):
            if context.facts.resolve(dotted_name(value.func)).startswith(K.ENVIRONMENT_PREFIXES):
                return True
    environments_imported = any(
        context.facts.imports_module(prefix.rstrip(".")) for prefix in K.ENVIRONMENT_PREFIXES
    )
    return environments_imported and "env" in name.lower()


def _reads_dataset(context) -> bool:
    if any(context.facts.calls_to(*K.DATASET_SOURCES)) or any(context.facts.calls_to(*K.BATCHED_SOURCES)):
        return True
    return any(
        context.facts.resolve(site.dotted).startswith(K.DATA_READER_PREFIXES) for _, _, site in context.facts.all_calls()
    )


def _environment_reason(environment: EnvironmentStep) -> str:
    return (
        f"the training data comes from an environment ({environment.environment}.step), not a dataset: "
        "there is no dataset to shard"
    )


def _environment_message(environment: EnvironmentStep) -> str:
    env = environment.environment
    return (
        f"the training data comes from an environment ({env}.step), not a dataset, so dataset sharding does not "
        "apply; the model's variables are still broadcast and its gradients all-reduced. So that the ranks "
        "do not collect the same experience, split the environment instead: give each rank's environment its "
        f"own seed, e.g. {env}.reset(seed=SEED + {RANK_ID})"
    )
