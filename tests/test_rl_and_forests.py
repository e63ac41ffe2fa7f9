"""Training that the three steps fit differently: TF-Agents agents (experience from an environment, the
optimizer given to the agent), TensorFlow Decision Forests (no gradient step), a training step that reads
no data, an Estimator whose model_fn takes no gradient step, and a TF1 session that runs its initializer
op itself (``tf.global_variables_initializer().run()``)."""

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from

NOT_APPLICABLE = {"broadcast": "not-applicable", "allreduce": "not-applicable", "shard": "not-applicable"}


def fixed(text):
    """(the analysis before, the fixed text, the analysis of the fixed text)."""
    notebook = notebook_from(text)
    before = analyze(notebook)
    result = fix_notebook(notebook, before)
    assert not result.failed
    after_text = joined(notebook, result.sources)
    return before, after_text, analyze(notebook_from(after_text))


def codes(analysis):
    return [finding.code for finding in analysis.findings]


# ------------------------------------------------------------------------------ TF-Agents

DQN = """import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import suite_gym, tf_py_environment
from tf_agents.utils import common
# %%
train_py_env = suite_gym.load('CartPole-v0')
train_env = tf_py_environment.TFPyEnvironment(train_py_env)
# %%
optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
train_step_counter = tf.Variable(0)
agent = dqn_agent.DqnAgent(
    train_env.time_step_spec(),
    train_env.action_spec(),
    q_network=q_net,
    optimizer=optimizer,
    td_errors_loss_fn=common.element_wise_squared_loss,
    train_step_counter=train_step_counter)
agent.initialize()
# %%
dataset = replay_buffer.as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)
iterator = iter(dataset)
agent.train = common.function(agent.train)
for _ in range(20000):
    time_step, _ = collect_driver.run(time_step)
    experience, unused_info = next(iterator)
    train_loss = agent.train(experience).loss
# %%
optimizer = tf.keras.optimizers.Nadam(learning_rate=0.005)
"""


def test_a_tf_agents_agent_is_trained_with_its_optimizer_wrapped_and_its_variables_broadcast():
    before, after, again = fixed(DQN)
    assert before.framework == "tf-agents" and before.adapter == "npu_device"
    assert before.steps == {"broadcast": "missing", "allreduce": "missing", "shard": "not-applicable"}
    assert "environment" in before.reasons["shard"]
    # The optimizer given to the agent is the one created before it, not the later one of the same name.
    assert (
        "optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)\n"
        "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n" in after
    )
    assert "agent.initialize()\nnpu.distribute.broadcast(agent.trainable_variables)\n" in after
    assert after.endswith("optimizer = tf.keras.optimizers.Nadam(learning_rate=0.005)\n")
    assert again.steps == {"broadcast": "present", "allreduce": "present", "shard": "not-applicable"}
    assert [f.code for f in again.problems] == []


RANKING = """import tensorflow as tf
from tf_agents.bandits.agents import ranking_agent
# %%
scores_agent = ranking_agent.RankingAgent(
    time_step_spec=environment.time_step_spec(), action_spec=environment.action_spec(),
    scoring_network=scoring_network, optimizer=tf.compat.v1.train.AdamOptimizer(learning_rate=0.05))
# %%
cosine_agent = ranking_agent.RankingAgent(
    time_step_spec=environment.time_step_spec(), action_spec=environment.action_spec(),
    scoring_network=scoring_network, optimizer=tf.compat.v1.train.AdamOptimizer(learning_rate=0.05))
# %%
if agent_type == "scores":
    agent = scores_agent
else:
    agent = cosine_agent
# %%
for _ in range(100):
    driver.run()
    loss_info = agent.train(replay_buffer.gather_all())
"""


def test_agents_trained_through_another_name_are_each_wrapped_and_broadcast():
    before, after, again = fixed(RANKING)
    assert before.framework == "tf-agents"
    # TF-Agents trains eagerly (TensorFlow 2) and applies its tape's gradients: the TF2 wrapper
    # all-reduces them, whatever the optimizer's API (TF1's patches compute_gradients, unused here).
    assert after.count("npu.distribute.npu_distributed_keras_optimizer_wrapper("
                       "tf.compat.v1.train.AdamOptimizer(learning_rate=0.05))") == 2
    for name in ("scores_agent", "cosine_agent"):
        assert f"npu.distribute.broadcast({name}.trainable_variables)" in after
    assert again.steps == {"broadcast": "present", "allreduce": "present", "shard": "not-applicable"}


BANDITS = """import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.bandits.agents import lin_ucb_agent
from tf_agents.environments import tf_py_environment
# %%
class SignAgent(tf_agent.TFAgent):
    def _train(self, experience, weights=None):
        return tf_agent.LossInfo((0,), ())
# %%
sign_agent = SignAgent()
sign_agent.train(experience)
# %%
environment = tf_py_environment.TFPyEnvironment(bandit_py_environment)
agent = lin_ucb_agent.LinearUCBAgent(time_step_spec=environment.time_step_spec(),
                                     action_spec=environment.action_spec())
for _ in range(100):
    driver.run()
    loss_info = agent.train(replay_buffer.gather_all())
"""


def test_agents_given_no_optimizer_take_no_step_that_applies():
    before, after, again = fixed(BANDITS)
    assert before.framework == "tf-agents"
    assert before.steps == NOT_APPLICABLE
    assert "SignAgent, LinearUCBAgent" in before.reasons["allreduce"]
    assert codes(before) == ["not-data-parallel"] and before.problems == []
    assert after == BANDITS


def test_a_class_named_agent_that_is_no_tf_agents_agent_is_not_an_agent():
    text = (
        "import tensorflow as tf\n"
        "class PolicyAgent:\n"
        "    pass\n"
        "agent = PolicyAgent()\n"
        "agent.train(batch)\n"
    )
    assert analyze(notebook_from(text)).framework == "none"


# ------------------------------------------------------------------------------ decision forests

FOREST = """import tensorflow_decision_forests as tfdf
import pandas as pd
# %%
train_ds = tfdf.keras.pd_dataframe_to_tf_dataset(pd.read_csv('penguins.csv'), label='species')
model_1 = tfdf.keras.RandomForestModel(verbose=2)
model_1.fit(train_ds)
# %%
model_1.compile(metrics=['accuracy'])
evaluation = model_1.evaluate(test_ds, return_dict=True)
"""


def test_a_decision_forest_takes_no_step_that_applies_compiled_or_not():
    for text in (FOREST, FOREST.replace("model_1.compile(metrics=['accuracy'])\n", "")):
        before, after, _ = fixed(text)
        assert before.framework == "decision-forests"
        assert before.steps == NOT_APPLICABLE
        assert "grow trees" in before.reasons["broadcast"]
        assert codes(before) == ["not-data-parallel"] and before.problems == []
        assert after == text


def test_a_forest_next_to_a_trained_neural_network_keeps_the_network_s_steps():
    text = FOREST + (
        "# %%\n"
        "nn_model = tf_keras.Sequential([tf_keras.layers.Dense(3)])\n"
        "nn_model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
        "nn_model.fit(x=train_ds, epochs=10)\n"
    )
    analysis = analyze(notebook_from(text))
    assert analysis.framework == "keras"
    assert analysis.steps["broadcast"] == analysis.steps["allreduce"] == "missing"
    assert analysis.steps["shard"] == "unknown"  # the dataset comes from tfdf's converter, not seen
    assert "grow trees" not in " ".join(analysis.reasons.values())


# ------------------------------------------------------------------------------ a step that reads no data

MINIMIZED_FUNCTION = """import tensorflow as tf
# %%
def loss(x):
    return 2 * (x ** 4) + 3 * (x ** 3) + 2

def grad(f, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        result = f(x)
    return tape.gradient(result, x)
# %%
x_star = tf.Variable(2.)
for iteration in range(100):
    x_star.assign_sub(1e-3 * grad(loss, x_star))
"""


def test_a_training_step_that_reads_no_data_has_nothing_to_shard():
    analysis = analyze(notebook_from(MINIMIZED_FUNCTION))
    assert analysis.framework == "custom-loop"
    assert analysis.steps["shard"] == "not-applicable"
    assert "reads no data" in analysis.reasons["shard"]
    assert "missing-shard" not in codes(analysis)


def test_a_dataset_made_only_to_be_printed_does_not_make_the_step_read_data():
    shown = MINIMIZED_FUNCTION + "# %%\nds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\nprint(next(iter(ds)))\n"
    analysis = analyze(notebook_from(shown))
    assert analysis.steps["shard"] == analysis.steps["allreduce"] == "not-applicable"
    trained = MINIMIZED_FUNCTION + "# %%\nds = tf.data.Dataset.from_tensor_slices([1, 2, 3])\nmodel.fit(ds)\n"
    assert analyze(notebook_from(trained)).steps["shard"] != "not-applicable"


def test_a_training_step_that_reads_no_data_has_no_gradients_to_aggregate():
    # Every rank computes the same gradients from the same loss: averaging them changes nothing
    # (TensorFlow's optimizers guide: the ranks' allreduce check could only say not-observed).
    analysis = analyze(notebook_from(MINIMIZED_FUNCTION))
    assert analysis.steps["allreduce"] == "not-applicable"
    assert "same gradients" in analysis.reasons["allreduce"]
    assert "missing-allreduce" not in codes(analysis)


def test_a_training_step_on_the_notebook_s_arrays_or_a_helper_still_shards():
    on_arrays = (
        "import tensorflow as tf\n"
        "(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()\n"
        "def train_step():\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(y_train, model(x_train))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    through_helper = (
        "import tensorflow as tf\n"
        "def compute_loss():\n"
        "    return loss_fn(labels, model(images))\n"
        "def train_step():\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = compute_loss()\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    bound_in_the_tape = (
        "import tensorflow as tf\n"
        "def train_step():\n"
        "    with tf.GradientTape() as tape:\n"
        "        x = x_train\n"
        "        loss = tf.reduce_mean(model(x))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    for text in (on_arrays, through_helper, bound_in_the_tape):
        analysis = analyze(notebook_from(text))
        assert analysis.steps["shard"] == "missing", text
        assert "missing-shard" in codes(analysis)


# ------------------------------------------------------------------------------ Estimator, TF1 session

COUNTER_MODEL_FN = """import tensorflow as tf
import tensorflow.compat.v1 as tf1
# %%
def model_fn(features, labels, mode):
    output = add_two(features['input'])
    step = tf1.train.get_global_step()
    return tf.estimator.EstimatorSpec(mode, predictions=output, train_op=step.assign_add(1), loss=tf.constant(0.))
est = tf.estimator.Estimator(model_fn, 'estimator-checkpoints')
def train_fn():
    return tf.data.Dataset.from_tensors({'input': 3.})
est.train(train_fn, steps=1)
"""


def test_a_model_fn_that_only_counts_steps_has_no_gradients_to_aggregate():
    analysis = analyze(notebook_from(COUNTER_MODEL_FN))
    assert analysis.steps["allreduce"] == "not-applicable"
    assert "no gradient step" in analysis.reasons["allreduce"]
    assert analysis.steps["broadcast"] == "missing"  # its variables still start apart
    with_optimizer = COUNTER_MODEL_FN.replace(
        "    step = tf1.train.get_global_step()\n",
        "    step = tf1.train.get_global_step()\n    tf1.train.AdamOptimizer().minimize(tf.reduce_sum(output))\n",
    )
    assert analyze(notebook_from(with_optimizer)).steps["allreduce"] == "missing"


UDACITY = """import tensorflow as tf
# %%
graph = tf.Graph()
with graph.as_default():
    tf_train_dataset = tf.constant(train_dataset[:10000, :])
    weights = tf.Variable(tf.truncated_normal([784, 10]))
    loss = tf.reduce_mean(tf.matmul(tf_train_dataset, weights))
    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
# %%
with tf.Session(graph=graph) as session:
    tf.global_variables_initializer().run()
    print('Initialized')
    for step in range(801):
        _, l = session.run([optimizer, loss])
"""


def test_an_initializer_op_run_in_its_session_is_followed_by_the_broadcast_run_the_same_way():
    before, after, again = fixed(UDACITY)
    assert before.adapter == "npu_bridge"
    assert (
        "    tf.global_variables_initializer().run()\n"
        "    tf.group([tf.assign(var, hccl_ops.broadcast([var], 0)[0]) for var in tf.trainable_variables()]).run()\n"
        "    print('Initialized')\n" in after
    )
    assert again.steps["broadcast"] == "present"
    assert "missing-broadcast" not in codes(again)
