"""Work that is not data-parallel training: a gradient step on an input (DeepDream, style transfer, an
adversarial example), training data that comes from an environment instead of a dataset (reinforcement
learning, TF-Agents agents), a training step that reads no data, decision forests (no gradient step) and
TF-Agents agents given no optimizer (closed-form bandits), and a loop fitting a Keras model and other
libraries' models in turn (an ensemble: its fit is left as written). The steps that do not apply are marked
not-applicable, with the reason, and one info finding says what to split across ranks instead."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional

from .. import knowledge as K
from ..facts import CallSite, CellFacts, dotted_name, mentions, receiver_name
from ..findings import STEPS, Finding
from ..i18n import N_, _
from .base import Example, Rule
from .training_reach import feeds_no_training

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
    """Data-parallel training copies the model to every card and splits the training data; the three
    steps keep the copies equal. Work without a training dataset has nothing for the shard to split,
    and sometimes no gradients to aggregate, so those steps are marked not-applicable rather than
    missing, and this finding (severity info: ``check`` does not fail on it) says what the ranks could
    split instead. Nothing is changed automatically: how to spread such work is a design choice."""

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
        # A training step without arguments that reads the notebook's arrays: data-parallel training.
        "import tensorflow as tf\n"
        "(x_train, y_train), _ = load_data()\n"
        "def train_step():\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(y_train, model(x_train))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "for _ in range(10):\n"
        "    train_step()\n",
        # A loop over Keras models only: data-parallel training, each fit distributed.
        "import tensorflow as tf\n"
        "small = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
        "large = tf.keras.Sequential([tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])\n"
        "for model in [small, large]:\n"
        "    model.compile(loss='mse', optimizer='adam')\n"
        "    model.fit(x_train, y_train)\n",
    ]

    INVALID = [
        # An ensemble: one loop fits a Keras model and scikit-learn's in turn (its fit is left as written).
        Example(
            "import tensorflow as tf\n"
            "from sklearn.neighbors import KNeighborsClassifier\n"
            "from sklearn.ensemble import RandomForestClassifier\n"
            "def build():\n"
            "    model = tf.keras.Sequential([tf.keras.layers.Dense(2, activation='softmax')])\n"
            "    model.compile(loss='sparse_categorical_crossentropy', optimizer='adam')\n"
            "    return model\n"
            "models = [build(), KNeighborsClassifier(n_neighbors=3), RandomForestClassifier()]\n"
            "for j, model in enumerate(models):\n"
            "    model.fit(x_train, y_train)\n",
        ),
        # The same ensemble filled in by append and extend.
        Example(
            "import tensorflow as tf\n"
            "from sklearn.linear_model import LogisticRegression\n"
            "from sklearn.svm import SVC\n"
            "network = tf.keras.Sequential([tf.keras.layers.Dense(2, activation='softmax')])\n"
            "network.compile(loss='sparse_categorical_crossentropy', optimizer='adam')\n"
            "models = []\n"
            "models.append(network)\n"
            "models.extend([LogisticRegression(), SVC()])\n"
            "for model in models:\n"
            "    model.fit(x_train, y_train)\n",
        ),
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
        # TF-Agents: experience comes from the environment, no dataset to shard.
        Example(
            "import tensorflow as tf\n"
            "from tf_agents.agents.dqn import dqn_agent\n"
            "from tf_agents.environments import suite_gym, tf_py_environment\n"
            "# %%\n"
            "train_env = tf_py_environment.TFPyEnvironment(suite_gym.load('CartPole-v0'))\n"
            "optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)\n"
            "agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=q_net, optimizer=optimizer)\n"
            "agent.initialize()\n"
            "# %%\n"
            "for _ in range(1000):\n"
            "    experience, _ = next(iterator)\n"
            "    train_loss = agent.train(experience).loss\n",
        ),
        # Decision forests: no gradient step, no step applies.
        Example(
            "import tensorflow_decision_forests as tfdf\n"
            "train_ds = tfdf.keras.pd_dataframe_to_tf_dataset(train_df, label='species')\n"
            "model = tfdf.keras.RandomForestModel()\n"
            "model.compile(metrics=['accuracy'])\n"
            "model.fit(train_ds)\n",
        ),
        # A bandit agent given no optimizer: closed-form updates, no step applies.
        Example(
            "import tensorflow as tf\n"
            "from tf_agents.bandits.agents import lin_ucb_agent\n"
            "from tf_agents.environments import tf_py_environment\n"
            "environment = tf_py_environment.TFPyEnvironment(bandit_py_environment)\n"
            "agent = lin_ucb_agent.LinearUCBAgent(time_step_spec=environment.time_step_spec(), "
        "action_spec=environment.action_spec())\n"
            "for _ in range(100):\n"
            "    driver.run()\n"
            "    loss_info = agent.train(replay_buffer.gather_all())\n",
        ),
        # A training step that reads no data (a loaded model fine-tuned on a constant).
        Example(
            "import tensorflow as tf\n"
            "imported = tf.saved_model.load(path)\n"
            "optimizer = tf.keras.optimizers.SGD(0.05)\n"
            "def train_step():\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = (10. - imported(tf.constant(2.))) ** 2\n"
            "    variables = tape.watched_variables()\n"
            "    grads = tape.gradient(loss, variables)\n"
            "    optimizer.apply_gradients(zip(grads, variables))\n"
            "for _ in range(10):\n"
            "    train_step()\n",
        ),
    ]

    def prepare(self, context) -> None:
        if context.frameworks == ["decision-forests"]:
            for step in STEPS:  # whatever could not be seen (the forest's package): no step applies
                context.steps[step] = "not-applicable"
                context.reasons[step] = _(DECISION_FOREST_REASON)
            return
        if "tf-agents" in context.frameworks:
            self._prepare_agents(context)
            return
        steps = optimized_inputs(context)
        if steps:
            reason = _input_reason(steps)
            for step in STEPS:
                context.mark(step, "not-applicable", reason)
            return
        environment = environment_step(context)
        if environment is not None:
            context.mark("shard", "not-applicable", _environment_reason(environment))
        else:
            steps = data_free_steps(context)
            if not steps:
                return
            context.mark("shard", "not-applicable", _(NO_DATA_REASON))
            context.mark("allreduce", "not-applicable", _(NO_DATA_ALLREDUCE_REASON))
            if variables_start_from_constants(context):
                context.mark("broadcast", "not-applicable", _(CONSTANT_START_REASON))
            elif _updates_only_constant_started(context, steps):
                context.mark("broadcast", "not-applicable", _(CONSTANT_SOURCES_REASON))

    def _prepare_agents(self, context) -> None:
        agents = trained_agents(context.facts)
        if not any(agent.optimizer is not None for agent in agents):
            reason = _no_optimizer_reason(agents)
            for step in STEPS:
                context.mark(step, "not-applicable", reason)
        else:
            context.mark("shard", "not-applicable", _(AGENT_SHARD_REASON))

    def check(self, context) -> Iterable[Finding]:
        return self._check_work(context) + list(self._mixed_model_loops(context))

    def _mixed_model_loops(self, context) -> Iterator[Finding]:
        """A loop fitting models of several libraries (a Keras wrapper beside scikit-learn's): the
        missing-step rules leave its fit alone (see ``NotebookFacts.fits_other_libraries``); say so."""
        for cell, facts, site in context.facts.calls("fit"):
            models = context.facts.models_looped_over(facts, site)
            theirs = [context.facts.another_librarys_model(model, site.function) for model in models]
            if any(theirs) and not all(theirs):
                written = ", ".join(dict.fromkeys(_model_written(facts, model) for model in models))
                yield self.finding(cell, facts, site.node, _(MIXED_LOOP_MESSAGE).format(models=written))

    def _check_work(self, context) -> List[Finding]:
        if context.frameworks == ["decision-forests"]:
            cell, facts, site = next(context.facts.keras_fits("fit", "fit_generator"))
            return [self.finding(cell, facts, site.node, _(DECISION_FOREST_REASON))]
        if "tf-agents" in context.frameworks:
            return self._check_agents(context)
        steps = optimized_inputs(context)
        if steps:
            first = steps[0]
            return [self.finding(first.cell, first.facts, first.site.node, _input_message(steps))]
        environment = environment_step(context)
        if environment is not None:
            message = _environment_message(environment)
            return [self.finding(environment.cell, environment.facts, environment.site.node, message)]
        data_free = data_free_steps(context)
        if data_free:
            first = data_free[0]
            return [self.finding(first.cell, first.facts, first.site.node, _(NO_DATA_MESSAGE))]
        return []

    def _check_agents(self, context) -> List[Finding]:
        agents = trained_agents(context.facts)
        first = agents[0]
        if any(agent.optimizer is not None for agent in agents):
            message = _(AGENT_MESSAGE).format(rank_id=RANK_ID)
        else:
            message = _("{reason}: variable broadcast, gradient aggregation and dataset sharding do not apply").format(
                reason=_no_optimizer_reason(agents))
        return [self.finding(first.cell, first.facts, first.site.node, message)]


# {models}: the models the loop fits, as written (e.g. "KerasClassifier, KNeighborsClassifier").
MIXED_LOOP_MESSAGE = N_(
    "this fit trains, in turn, models of several libraries ({models}): only the Keras ones take gradient "
    "steps, and the data, batch and callbacks a fix would give them break the others, so it is left as "
    "written; distribute the Keras models in a loop of their own, and train the others on all the data"
)


def _model_written(facts: CellFacts, model: ast.expr) -> str:
    """``KNeighborsClassifier`` for ``KNeighborsClassifier(n_neighbors=3)``, a name as it is."""
    called = model.func if isinstance(model, ast.Call) else model
    return (dotted_name(called) or facts.segment(model)).rsplit(".", 1)[-1]


DECISION_FOREST_REASON = N_(
    "decision forests grow trees from the whole dataset and take no gradient step: train on one card "
    "(TF-DF's own distributed training uses a ParameterServerStrategy, not the NPU's collectives)"
)
AGENT_SHARD_REASON = N_(
    "the agent trains on experience its environment produces (collected into a replay buffer), not on a "
    "dataset: there is no dataset to shard"
)
# {rank_id}: the rank's id, as the fixes write it (RANK_ID).
AGENT_MESSAGE = N_(
    "the agent trains on experience from an environment, not a dataset, so dataset sharding does not apply; "
    "its variables are still broadcast and the gradients of its optimizer all-reduced. So that the ranks do "
    "not collect the same experience, give each rank's environment its own seed, e.g. "
    "py_env.seed(SEED + {rank_id}) on the Python environment before wrapping it in TFPyEnvironment"
)


def _no_optimizer_reason(agents: List[Agent]) -> str:
    names = ", ".join(dict.fromkeys(agent.site.method for agent in agents))
    return _(
        "the agents ({names}) are given no optimizer: they update their statistics in closed form (or by a "
        "rule of their own), with no gradient step to aggregate, and each rank would learn on its own: "
        "train on one card"
    ).format(names=names)


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
        assignment.value for _cell, _facts, assignment in context.facts.assignments(name)
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
        for _cell, _facts, site in context.facts.calls("watch")
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
    for _cell, _facts, site in context.facts.all_calls():
        name = context.facts.resolve(site.dotted)
        if name in K.PRETRAINED_MODEL_LOADERS or name.startswith(K.PRETRAINED_MODEL_PREFIXES):
            return True
    return False


def _input_names(steps: List[GradientStep]) -> str:
    return ", ".join(dict.fromkeys(name for step in steps for name in step.inputs))


def _input_reason(steps: List[GradientStep]) -> str:
    return _(
        "not data-parallel training: the gradient steps update {inputs}, an input of a "
        "ready-made model, not model weights"
    ).format(inputs=_input_names(steps))


def _input_message(steps: List[GradientStep]) -> str:
    return _(
        "not data-parallel training: the gradient steps update {inputs}, an input of a "
        "ready-made model, not its weights, so variable broadcast, gradient aggregation and dataset sharding "
        "do not apply (on N ranks every rank would repeat the same optimization). To use several cards, "
        "split the work instead: give each rank its own inputs (inputs[{rank_id}::{rank_size}]), "
        "or run one notebook per image"
    ).format(inputs=_input_names(steps), rank_id=RANK_ID, rank_size=RANK_SIZE)


# ------------------------------------------------------------------------------ an environment


def environment_step(context) -> Optional[EnvironmentStep]:
    """The first ``env.step(...)`` of an environment that is also reset, in a notebook that trains
    and reads no dataset."""
    if context.framework == "none":
        return None
    reset = {receiver_name(site) for _cell, _facts, site in context.facts.calls("reset")} - {None}
    for cell, facts, site in context.facts.calls("step"):
        name = receiver_name(site)
        if name in reset and _is_environment(context, name):
            return None if _reads_dataset(context) else EnvironmentStep(cell, facts, site, name)
    return None


def _is_environment(context, name: str) -> bool:
    for _cell, _facts, assignment in context.facts.assignments(name):
        value = assignment.value
        if isinstance(value, ast.Call):
            if context.facts.resolve(dotted_name(value.func)).startswith(K.ENVIRONMENT_PREFIXES):
                return True
    environments_imported = any(
        context.facts.imports_module(prefix.rstrip(".")) for prefix in K.ENVIRONMENT_PREFIXES
    )
    return environments_imported and "env" in name.lower()


def _reads_dataset(context) -> bool:
    """Does the training read a dataset? Datasets made only to show an API (printed, iterated by a
    function that trains nothing) do not count."""
    sources = [*context.facts.calls_to(*K.DATASET_SOURCES), *context.facts.calls_to(*K.BATCHED_SOURCES)]
    if any(not feeds_no_training(context, site) for _cell, _facts, site in sources):
        return True
    return any(
        context.facts.resolve(site.dotted).startswith(K.DATA_READER_PREFIXES)
        for _cell, _facts, site in context.facts.all_calls()
    )


def _environment_reason(environment: EnvironmentStep) -> str:
    return _(
        "the training data comes from an environment ({environment}.step), not a dataset: "
        "there is no dataset to shard"
    ).format(environment=environment.environment)


def _environment_message(environment: EnvironmentStep) -> str:
    env = environment.environment
    return _(
        "the training data comes from an environment ({environment}.step), not a dataset, so dataset sharding "
        "does not apply; the model's variables are still broadcast and its gradients all-reduced. So that the "
        "ranks do not collect the same experience, split the environment instead: give each rank's environment "
        "its own seed, e.g. {environment}.reset(seed=SEED + {rank_id})"
    ).format(environment=env, rank_id=RANK_ID)


# ------------------------------------------------------------------------------ a training step without data

NO_DATA_REASON = N_(
    "the training step reads no data: its loss comes from constants and the variables it optimizes, "
    "so there is no dataset to shard"
)
NO_DATA_ALLREDUCE_REASON = N_(
    "the training step reads no data: from the same variables every rank computes the same gradients, "
    "so averaging them across ranks changes nothing"
)
NO_DATA_MESSAGE = N_(
    "the training step reads no data (its loss comes from constants and the variables it optimizes), so dataset "
    "sharding and gradient aggregation do not apply: every rank computes the same gradients"
)


CONSTANT_START_REASON = N_(
    "every variable the training updates starts from a constant (tf.Variable(2.), tf.zeros(...)) and no "
    "model or layer makes weights of its own: every rank starts from the same values, so there is nothing "
    "to broadcast"
)
CONSTANT_SOURCES_REASON = N_(
    "every variable the training steps differentiate starts from a constant wherever a step is given it "
    "(tf.Variable(2.)): every rank starts from the same values, so there is nothing to broadcast"
)
_CONSTANT_MAKERS = ("tensorflow.zeros", "tensorflow.ones", "tensorflow.zeros_like", "tensorflow.ones_like")


_WEIGHTLESS_KERAS = tuple(f"{keras}.{part}." for keras in ("tensorflow.keras", "keras")
                          for part in ("optimizers", "losses", "metrics"))


def variables_start_from_constants(context) -> bool:
    """Every ``tf.Variable`` the notebook makes starts from a constant, or from a parameter whose
    default is one and which no call gives; no Keras model, layer or loaded model makes weights."""
    for _cell, _facts, site in context.facts.all_calls():
        name = context.facts.resolve(site.dotted)
        if name.startswith(_WEIGHTLESS_KERAS):
            continue  # an optimizer's slots and a metric's totals start at zero on every rank
        if name.startswith(("tensorflow.keras.", "keras.", "tensorflow.saved_model.", "tensorflow_hub.")):
            return False
    made = list(context.facts.calls_to("tensorflow.Variable"))
    return bool(made) and all(_constant_start(context, facts, site) for _cell, facts, site in made)


def _constant_start(context, facts: CellFacts, site: CallSite) -> bool:
    value = site.argument(0, "initial_value")
    if _constant_made(context, value):
        return True
    if not isinstance(value, ast.Name) or site.function is None:
        return False
    function = facts.functions.get(site.function)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    defaults = dict(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
    if value.id not in defaults or not _is_constant(defaults[value.id]):
        return False
    position = positional.index(value.id)
    return all(len(call.node.args) <= position and call.keyword(value.id) is None
               and not any(isinstance(arg, ast.Starred) for arg in call.node.args)
               and not any(keyword.arg is None for keyword in call.node.keywords)
               for _cell, _facts, call in context.facts.calls(site.function))


def _is_constant(node: Optional[ast.expr]) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def data_free_steps(context) -> Optional[List[GradientStep]]:
    """The notebook's ``tape.gradient`` calls when the notebook reads no dataset and, in each, the tape
    records a loss computed only from constants, watched tensors and the tape's own intermediate values
    (a function minimized, a loaded model fine-tuned on a constant)."""
    if context.frameworks != ["custom-loop"] or context.tf1 or _reads_dataset(context):
        return None
    steps: List[GradientStep] = []
    for cell, facts, site in context.facts.calls("gradient"):
        if site.receiver is None or len(site.node.args) + len(site.node.keywords) < 2:
            continue
        function = facts.functions.get(site.function) if site.function else None
        tapes = _tapes_of(context, facts, site, function)
        if not tapes or not all(_tape_reads_no_data(context, tape, _Scope(cell, facts, function)) for tape in tapes):
            return None
        steps.append(GradientStep(cell, facts, site, []))
    return steps or None


@dataclass
class _Scope:
    """Where a tape is: its cell, and the function it is in (None: the cell's top level)."""
    cell: int
    facts: CellFacts
    function: Optional[ast.AST]


def _tapes_of(context, facts: CellFacts, site: CallSite, function: Optional[ast.AST]) -> List[ast.With]:
    """The tape blocks whose gradient ``site`` takes: those of its function, or at a cell's top level,
    the top-level ``with tf.GradientTape() as <receiver>`` before it (TensorFlow's guides take a
    gradient in a cell of its own)."""
    if function is not None:
        return [node for node in ast.walk(function) if _is_tape_block(context, node)]
    if facts.tree is None or site.function is not None:
        return []
    receiver = receiver_name(site)
    return [stmt for stmt in facts.tree.body if _is_tape_block(context, stmt) and stmt.lineno < site.node.lineno
            and any(isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == receiver for item in stmt.items)]


def _updates_only_constant_started(context, steps: List[GradientStep]) -> bool:
    """Does every step differentiate only variables made from constants (``tape.gradient(L, [w])``
    with ``w = tf.Variable(2.)`` wherever the step is given it)? A layer the notebook makes only to
    time it is not trained: its weights need no broadcast."""
    for step in steps:
        sources = step.site.argument(1, "sources")
        names = sources.elts if isinstance(sources, (ast.List, ast.Tuple)) else [sources]
        function = step.facts.functions.get(step.site.function) if step.site.function else None
        scope = _Scope(step.cell, step.facts, function)
        if not names or not all(isinstance(name, ast.Name) and
                                _made_from_constants_here(context, name.id, step.site.node.lineno, scope)
                                for name in names):
            return False
    return True


def _is_tape_block(context, node: ast.AST) -> bool:
    return isinstance(node, ast.With) and any(
        _is_call_to(context, item.context_expr, K.GRADIENT_TAPE) for item in node.items
    )


def _tape_reads_no_data(context, tape: ast.With, scope: Optional["_Scope"] = None) -> bool:
    known = {
        call.args[0].id for call in ast.walk(tape)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "watch"
        and len(call.args) == 1 and isinstance(call.args[0], ast.Name)
    }
    known |= {
        target.id for node in ast.walk(tape) if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)
    }
    nodes = [node for stmt in tape.body for node in ast.walk(stmt)]
    for node in nodes:
        if isinstance(node, ast.Call):
            if not node.args and not node.keywords and _is_notebook_function(context, node.func):
                return False  # a function of the notebook that may read data itself
            values = [*node.args, *(keyword.value for keyword in node.keywords)]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            values = [node.value]  # ``x = x_train`` brings data in without a call
        else:
            continue
        unknown = {name for value in values for name in _value_names(value)} - known
        if unknown and not (scope is not None and all(_made_from_constants_here(context, name, tape.lineno, scope)
                                                      for name in unknown)):
            return False
    return True


def _made_from_constants_here(context, name: str, line: int, scope: "_Scope") -> bool:
    """Does ``name``, read in the tape, hold only what the notebook makes from constants
    (``tf.constant([-1.])``, ``tf.Variable(2.)``, a number)? At a cell's top level, the value it was
    last bound to before the tape; a parameter of the tape's function, what every call passes for it
    (TensorFlow's tf.function guide trains ``train_step(w, x, y, opt)`` on such tensors)."""
    if name in context.facts.aliases:
        return True  # a module (``tf``), not data
    if scope.function is None:
        return _constant_made(context, context.facts.bound_before(name, scope.cell, line, None))
    position = _parameter_position(scope.function, name)
    if position is None:
        return False
    calls = list(_calls_of(context, scope))
    return bool(calls) and all(_passes_a_constant(context, cell, call, position, name) for cell, call in calls)


# Tensors that hold what their value argument holds (a constant, or data).
_TENSORS_OF_A_VALUE = {"tensorflow.constant": 0, "tensorflow.Variable": 0, "tensorflow.convert_to_tensor": 0,
                       "tensorflow.fill": 1}


def _constant_made(context, node: Optional[ast.expr]) -> bool:
    """Is ``node`` made from constants only: a number, a list of them, ``tf.zeros(...)``,
    ``tf.constant([-1.])``, ``tf.Variable(2.)``?"""
    if node is None:
        return False
    if _is_constant(node):
        return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_constant_made(context, element) for element in node.elts)
    if not isinstance(node, ast.Call):
        return False
    called = context.facts.resolve(dotted_name(node.func))
    if called in _TENSORS_OF_A_VALUE:
        position = _TENSORS_OF_A_VALUE[called]
        return position < len(node.args) and _constant_made(context, node.args[position])
    return called in _CONSTANT_MAKERS  # zeros and ones, whatever their shape


def _parameter_position(function: ast.AST, name: str) -> Optional[int]:
    """The position a caller gives ``name`` at (``self`` of a method not counted)."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if name not in positional:
        return None
    method = positional and positional[0] == "self"
    return positional.index(name) - (1 if method else 0)


def _calls_of(context, scope: "_Scope"):
    """(cell, call) for every call of the tape's function: by its name, by a name bound to
    ``tf.function(f)``, and, for a class's ``__call__``, on a name bound to an instance of it."""
    function = scope.function
    names = {function.name}
    if function.name == "__call__":
        owner = next((c for c in scope.facts.classes.values() if function in c.body), None)
        if owner is None:
            return
        names = _instances_of(context, owner.name)
    else:
        names |= _wrapped_names(context, function.name)
    for name in names:
        for cell, _facts, call in context.facts.calls(name):
            if call.dotted == name:
                yield cell, call


def _instances_of(context, class_name: str) -> set:
    return {a.target for cell, facts in context.facts.cells_mentioning(class_name)
            for assignments in facts.assignments.values() for a in assignments
            if isinstance(a.value, ast.Call) and isinstance(a.value.func, ast.Name) and a.value.func.id == class_name}


def _wrapped_names(context, function_name: str) -> set:
    """Names bound to ``tf.function(function_name)``."""
    return {a.target for cell, facts in context.facts.cells_mentioning(function_name)
            for assignments in facts.assignments.values() for a in assignments
            if isinstance(a.value, ast.Call) and a.value.args and isinstance(a.value.args[0], ast.Name)
            and a.value.args[0].id == function_name and context.facts.resolve(dotted_name(a.value.func)) == "tensorflow.function"}


def _passes_a_constant(context, cell: int, call: CallSite, position: int, name: str) -> bool:
    keyword = call.keyword(name)
    given = keyword.value if keyword is not None else (call.node.args[position] if position < len(call.node.args) else None)
    if given is None or any(isinstance(arg, ast.Starred) for arg in call.node.args):
        return False
    if isinstance(given, ast.Name):
        given = context.facts.bound_before(given.id, cell, call.node.lineno, call.function)
    return _constant_made(context, given)


def _is_notebook_function(context, callee: ast.expr) -> bool:
    return isinstance(callee, ast.Name) and context.facts.function(callee.id) is not None


def _value_names(node: ast.expr) -> List[str]:
    """The names an expression reads as values (not the functions it calls)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Call):
        return [name for argument in [*node.args, *(k.value for k in node.keywords)] for name in _value_names(argument)]
    return [name for child in ast.iter_child_nodes(node) for name in _value_names(child)]


# ------------------------------------------------------------------------------ TF-Agents, decision forests


@dataclass
class Agent:
    cell: int
    facts: CellFacts
    site: CallSite  # the agent's constructor call
    name: str
    optimizer: Optional[ast.expr]  # the ``optimizer=`` given, None for agents without one (LinUCB)


def trained_agents(facts) -> List[Agent]:
    """The TF-Agents agents the notebook builds and trains (``agent.train(...)`` on the agent's name, or
    on a name bound to it, as ``agent = cosine_distance_agent``), in notebook order. Only the names
    something is trained on are looked up: the analysis runs on every edit."""
    trained = {receiver_name(site) for _cell, _facts, site in facts.calls("train")} - {None}
    for name in list(trained):
        trained |= {a.value.id for _cell, _facts, a in facts.assignments(name) if isinstance(a.value, ast.Name)}
    return _built_agents(facts, trained)


def _built_agents(facts, names) -> List[Agent]:
    found = []
    for name in names:
        for cell, cell_facts, assignment in facts.assignments(name):
            stmt, value = assignment.stmt, assignment.value
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(value, ast.Call)):
                continue
            site = next((s for s in cell_facts.calls_by_method.get(_method_of(value), ()) if s.node is value), None)
            if site is not None and _is_agent_constructor(facts, site):
                keyword = site.keyword("optimizer")
                found.append(Agent(cell, cell_facts, site, name, keyword.value if keyword else None))
    return sorted(found, key=lambda agent: (agent.cell, agent.site.node.lineno, agent.site.node.col_offset))


def _method_of(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")


def _is_agent_constructor(facts, site: CallSite) -> bool:
    if facts.resolve(site.dotted).startswith(K.AGENT_PREFIXES):
        return site.method.endswith("Agent")
    if not isinstance(site.node.func, ast.Name):
        return False
    for _cell, cell_facts in facts.cells_mentioning(site.node.func.id):
        cls = cell_facts.classes.get(site.node.func.id)
        if cls is not None:
            return any(facts.resolve(dotted_name(base)).startswith(K.AGENT_PREFIXES) for base in cls.bases)
    return False


def trains_only_decision_forests(facts) -> bool:
    """Every ``fit`` is called on a TensorFlow Decision Forests model (a name bound only to one)."""
    receivers = [receiver_name(site) for _cell, _facts, site in facts.keras_fits("fit", "fit_generator")]
    return bool(receivers) and all(name is not None and _is_decision_forest(facts, name) for name in receivers)


def _is_decision_forest(facts, name: str) -> bool:
    values = [assignment.value for _cell, _facts, assignment in facts.assignments(name)]
    return bool(values) and all(
        isinstance(value, ast.Call) and facts.resolve(dotted_name(value.func)).startswith(K.DECISION_FOREST_PREFIX)
        for value in values
    )
