"""Canned Estimators (the optimizer they build from a string made explicit and wrapped; boosted trees
have no gradient step) and work that is not data-parallel training (an input optimized instead of a
model; data from an environment instead of a dataset), on realistic multi-cell notebooks."""

import json

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.cli import main
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from

NOT_APPLICABLE = {"broadcast": "not-applicable", "allreduce": "not-applicable", "shard": "not-applicable"}
PRESENT = {"broadcast": "present", "allreduce": "present", "shard": "present"}


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


# ------------------------------------------------------------------------------ canned Estimators

PREMADE = """import pandas as pd
import tensorflow as tf
# %%
CSV_COLUMN_NAMES = ['SepalLength', 'SepalWidth', 'PetalLength', 'PetalWidth', 'Species']
train = pd.read_csv(train_path, names=CSV_COLUMN_NAMES, header=0)
train_y = train.pop('Species')
# %%
def input_fn(features, labels, training=True, batch_size=256):
    dataset = tf.data.Dataset.from_tensor_slices((dict(features), labels))
    if training:
        dataset = dataset.shuffle(1000, seed=7).repeat()
    return dataset.batch(batch_size)
# %%
my_feature_columns = []
for key in train.keys():
    my_feature_columns.append(tf.feature_column.numeric_column(key=key))
# %%
classifier = tf.estimator.DNNClassifier(
    feature_columns=my_feature_columns,
    # Two hidden layers of 30 and 10 nodes respectively.
    hidden_units=[30, 10],
    n_classes=3)
# %%
classifier.train(input_fn=lambda: input_fn(train, train_y, training=True), steps=5000)
"""


def test_a_premade_dnn_classifier_gets_its_default_optimizer_explicit_and_wrapped():
    before, after, again = fixed(PREMADE)
    allreduce = [finding for finding in before.findings if finding.code == "missing-allreduce"]
    assert len(allreduce) == 1 and allreduce[0].cell == 4
    assert "'Adagrad' (learning rate 0.05)" in allreduce[0].message
    assert "n_classes=3, optimizer=npu_distributed_optimizer_wrapper(tf.train.AdagradOptimizer(learning_rate=0.05)))" in after
    assert "hooks=npu_hooks_append()" in after and "from npu_bridge.npu_init import *\n" in after
    assert again.steps == PRESENT and again.problems == []


WIDE_AND_DEEP = """import tensorflow.compat.v1 as tf
# %%
wide_columns = [tf.feature_column.categorical_column_with_hash_bucket('occupation', 100)]
deep_columns = [tf.feature_column.numeric_column('age'), tf.feature_column.numeric_column('hours')]
# %%
model = tf.estimator.DNNLinearCombinedClassifier(
    model_dir=model_dir,
    linear_feature_columns=wide_columns,
    dnn_feature_columns=deep_columns,
    dnn_hidden_units=[100, 50],
    dnn_optimizer=tf.train.ProximalAdagradOptimizer(learning_rate=0.1, l1_regularization_strength=0.001))
# %%
model.train(input_fn=train_input_fn, steps=200)
"""


def test_wide_and_deep_wraps_the_given_dnn_optimizer_once_and_makes_the_linear_default_explicit():
    before, after, again = fixed(WIDE_AND_DEEP)
    messages = [finding.message for finding in before.findings if finding.code == "missing-allreduce"]
    assert len(messages) == 2
    # The hashed column of the linear part makes sparse gradients: both optimizers get them dense (one helper).
    assert "dnn_optimizer=npu_distributed_optimizer_wrapper(dense_gradients(tf.train.ProximalAdagradOptimizer(" in after
    assert "linear_optimizer=npu_distributed_optimizer_wrapper(dense_gradients(tf.train.FtrlOptimizer(" \
        "learning_rate=0.005)))" in after
    assert after.count("npu_distributed_optimizer_wrapper(") == 2 and after.count("def dense_gradients(") == 1
    assert again.steps["allreduce"] == "present" and "missing-allreduce" not in codes(again)


BOOSTED_TREES = """import numpy as np
import pandas as pd
import tensorflow as tf
# %%
dftrain = pd.read_csv('train.csv')
y_train = dftrain.pop('survived')
feature_columns = [tf.feature_column.numeric_column(name, dtype=tf.float32) for name in ['age', 'fare']]
# %%
def make_input_fn(X, y, n_epochs=None, shuffle=True):
    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices((dict(X), y))
        if shuffle:
            dataset = dataset.shuffle(627, seed=1)
        return dataset.repeat(n_epochs).batch(627)
    return input_fn
train_input_fn = make_input_fn(dftrain, y_train)
# %%
est = tf.estimator.BoostedTreesClassifier(feature_columns, n_batches_per_layer=1)
est.train(train_input_fn, max_steps=100)
"""


def test_boosted_trees_alone_make_gradient_aggregation_not_applicable_with_the_reason():
    analysis = analyze(notebook_from(BOOSTED_TREES))
    assert analysis.steps["allreduce"] == "not-applicable"
    assert analysis.reasons["allreduce"].startswith("boosted trees take no gradient step to aggregate")
    assert "missing-allreduce" not in codes(analysis)
    assert {"missing-broadcast", "missing-shard"} <= set(codes(analysis))


def test_boosted_trees_next_to_a_linear_model_leave_the_linear_model_to_be_wrapped():
    text = BOOSTED_TREES.replace(
        "est = tf.estimator.BoostedTreesClassifier",
        "linear_est = tf.estimator.LinearClassifier(feature_columns)\n"
        "linear_est.train(train_input_fn, max_steps=100)\n"
        "est = tf.estimator.BoostedTreesClassifier",
    )
    before, after, again = fixed(text)
    assert before.steps["allreduce"] == "missing"
    assert [finding.cell for finding in before.findings if finding.code == "missing-allreduce"] == [3]
    assert "LinearClassifier(feature_columns, optimizer=npu_distributed_optimizer_wrapper(" \
        "tf.train.FtrlOptimizer(learning_rate=0.2)))" in after
    assert "BoostedTreesClassifier(feature_columns, n_batches_per_layer=1)\n" in after


def test_an_optimizer_from_elsewhere_or_a_v2_estimator_is_reported_at_the_argument_not_fixed():
    for text, where in (
        ("import tensorflow as tf\nfrom my_project.optim import tuned_optimizer\n"
         "est = tf.estimator.DNNRegressor(hidden_units=[8], feature_columns=columns, optimizer=tuned_optimizer())\n"
         "est.train(input_fn=train_input_fn, steps=10)\n", "tuned_optimizer()"),
        ("import tensorflow as tf\n"
         "est = tf.compat.v2.estimator.DNNRegressor(hidden_units=[8], feature_columns=columns, optimizer='Adam')\n"
         "est.train(input_fn=train_input_fn, steps=10)\n", "'Adam'"),
    ):
        notebook = notebook_from(text)
        analysis = analyze(notebook)
        [finding] = [finding for finding in analysis.findings if finding.code == "missing-allreduce"]
        line = text.splitlines()[finding.line - 1]
        assert line[finding.column - 1:finding.end_column - 1] == where and finding.edits == ()


# ------------------------------------------------------------------------------ not data-parallel

DEEPDREAM = """import numpy as np
import tensorflow as tf
import PIL.Image
# %%
url = 'https://storage.googleapis.com/download.tensorflow.org/example_images/YellowLabradorLooking_new.jpg'
original_img = download(url, max_dim=500)
# %%
base_model = tf.keras.applications.InceptionV3(include_top=False, weights='imagenet')
names = ['mixed3', 'mixed5']
layers = [base_model.get_layer(name).output for name in names]
dream_model = tf.keras.Model(inputs=base_model.input, outputs=layers)
# %%
def calc_loss(img, model):
    img_batch = tf.expand_dims(img, axis=0)
    layer_activations = model(img_batch)
    return tf.reduce_sum([tf.math.reduce_mean(act) for act in layer_activations])
# %%
class DeepDream(tf.Module):
    def __init__(self, model):
        self.model = model

    @tf.function(input_signature=(tf.TensorSpec(shape=[None, None, 3], dtype=tf.float32),
                                  tf.TensorSpec(shape=[], dtype=tf.int32),
                                  tf.TensorSpec(shape=[], dtype=tf.float32)))
    def __call__(self, img, steps, step_size):
        loss = tf.constant(0.0)
        for n in tf.range(steps):
            with tf.GradientTape() as tape:
                tape.watch(img)
                loss = calc_loss(img, self.model)
            gradients = tape.gradient(loss, img)
            gradients /= tf.math.reduce_std(gradients) + 1e-8
            img = img + gradients * step_size
            img = tf.clip_by_value(img, -1, 1)
        return loss, img
# %%
deepdream = DeepDream(dream_model)
loss, img = deepdream(tf.keras.applications.inception_v3.preprocess_input(original_img), 100, 0.01)
"""

FGSM = """import tensorflow as tf
import matplotlib.pyplot as plt
# %%
pretrained_model = tf.keras.applications.MobileNetV2(include_top=True, weights='imagenet')
pretrained_model.trainable = False
decode_predictions = tf.keras.applications.mobilenet_v2.decode_predictions
# %%
image_path = tf.keras.utils.get_file('YellowLabradorLooking_new.jpg', image_url)
image = preprocess(tf.image.decode_image(tf.io.read_file(image_path)))
label = tf.reshape(tf.one_hot(208, 1000), (1, 1000))
loss_object = tf.keras.losses.CategoricalCrossentropy()
# %%
def create_adversarial_pattern(input_image, input_label):
    with tf.GradientTape() as tape:
        tape.watch(input_image)
        prediction = pretrained_model(input_image)
        loss = loss_object(input_label, prediction)
    gradient = tape.gradient(loss, input_image)
    return tf.sign(gradient)
# %%
perturbations = create_adversarial_pattern(image, label)
for eps in [0, 0.01, 0.1, 0.15]:
    adv_x = tf.clip_by_value(image + eps * perturbations, -1, 1)
    display_images(adv_x, f'Epsilon = {eps:0.3f}')
"""


def test_deepdream_and_fgsm_are_not_data_parallel_one_info_finding_and_nothing_to_fix(tmp_path, capsys):
    for text, cell, name in ((DEEPDREAM, 4, "img"), (FGSM, 3, "input_image")):
        notebook = notebook_from(text)
        analysis = analyze(notebook)
        assert analysis.steps == NOT_APPLICABLE
        assert all(name in reason for reason in analysis.reasons.values())
        [finding] = analysis.findings
        assert (finding.code, finding.severity, finding.step, finding.cell) == ("not-data-parallel", "info", None, cell)
        assert "split the work instead" in finding.message and finding.edits == ()
        assert analysis.problems == [] and fix_notebook(notebook, analysis).sources == {}
    path = tmp_path / "deepdream.py"
    path.write_text(DEEPDREAM.replace("# %%\n", ""))
    assert main(["check", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == NOT_APPLICABLE


ACTOR_CRITIC = """import collections
import gym
import numpy as np
import tensorflow as tf
# %%
env = gym.make("CartPole-v1")
seed = 42
tf.random.set_seed(seed)
np.random.seed(seed)
# %%
class ActorCritic(tf.keras.Model):
    def __init__(self, num_actions, num_hidden_units):
        super().__init__()
        self.common = tf.keras.layers.Dense(num_hidden_units, activation="relu")
        self.actor = tf.keras.layers.Dense(num_actions)
        self.critic = tf.keras.layers.Dense(1)

    def call(self, inputs):
        x = self.common(inputs)
        return self.actor(x), self.critic(x)
model = ActorCritic(2, 128)
# %%
def env_step(action):
    state, reward, done, truncated, info = env.step(action)
    return state.astype(np.float32), np.array(reward, np.int32), np.array(done, np.int32)
# %%
optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)

@tf.function
def train_step(initial_state, model, optimizer, gamma, max_steps_per_episode):
    with tf.GradientTape() as tape:
        action_probs, values, rewards = run_episode(initial_state, model, max_steps_per_episode)
        returns = get_expected_return(rewards, gamma)
        loss = compute_loss(action_probs, values, returns)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return tf.math.reduce_sum(rewards)
# %%
for i in range(500):
    initial_state, info = env.reset()
    initial_state = tf.constant(initial_state, dtype=tf.float32)
    episode_reward = int(train_step(initial_state, model, optimizer, 0.99, 500))
"""


def test_reinforcement_learning_needs_no_shard_but_still_broadcast_and_all_reduce():
    before, after, again = fixed(ACTOR_CRITIC)
    assert before.steps == {"broadcast": "missing", "allreduce": "missing", "shard": "not-applicable"}
    assert "env.step" in before.reasons["shard"]
    [info] = [finding for finding in before.findings if finding.code == "not-data-parallel"]
    assert info.cell == 3 and info.severity == "info" and "env.reset(seed=SEED + int(os.getenv('RANK_ID', '0')))" in info.message
    assert "missing-shard" not in codes(before)
    assert "grads = npu.distribute.all_reduce(grads" in after
    # The subclassed model builds its variables on its first call, inside train_step: a broadcast before
    # the loop would find none, so it comes after the first step (issue 21, class 3).
    assert ("    episode_reward = int(train_step(initial_state, model, optimizer, 0.99, 500))\n"
            "    if optimizer.iterations == 1:\n        npu.distribute.broadcast(model.trainable_variables)\n") in after
    assert again.steps == {"broadcast": "present", "allreduce": "present", "shard": "not-applicable"}
    assert [finding.code for finding in again.problems] == []


# ------------------------------------------------------------------------------ never for training

TRAINING_NOTEBOOKS = {
    # Transfer learning with a ready-made base, trained with fit.
    "transfer learning": """import tensorflow as tf
# %%
train_ds = tf.keras.utils.image_dataset_from_directory('flowers', image_size=(160, 160), batch_size=32)
base_model = tf.keras.applications.MobileNetV2(input_shape=(160, 160, 3), include_top=False, weights='imagenet')
base_model.trainable = False
model = tf.keras.Sequential([base_model, tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(5)])
# %%
model.compile(optimizer=tf.keras.optimizers.Adam(1e-4), loss='sparse_categorical_crossentropy')
model.fit(train_ds, epochs=10)
""",
    # A GAN: two models, each gradient taken with respect to a model's variables.
    "gan": """import tensorflow as tf
# %%
generator = make_generator_model()
discriminator = make_discriminator_model()
noise_dim = 100
# %%
@tf.function
def train_step(images):
    noise = tf.random.normal([256, noise_dim])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator(noise, training=True)
        gen_loss = generator_loss(discriminator(generated_images, training=True))
        disc_loss = discriminator_loss(discriminator(images, training=True), discriminator(generated_images, training=True))
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
# %%
for epoch in range(50):
    for image_batch in train_dataset:
        train_step(image_batch)
""",
    # A gradient penalty watches an input, but the model's variables are trained too.
    "wgan-gp": """import tensorflow as tf
critic = tf.keras.models.load_model('critic.keras')
def train_step(real, fake):
    with tf.GradientTape() as tape:
        alpha = tf.random.uniform([real.shape[0], 1, 1, 1])
        interpolated = real + alpha * (fake - real)
        with tf.GradientTape() as inner:
            inner.watch(interpolated)
            score = critic(interpolated)
        penalty = tf.reduce_mean((tf.norm(inner.gradient(score, interpolated), axis=1) - 1.0) ** 2)
        loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * penalty
    grads = tape.gradient(loss, critic.trainable_variables)
    optimizer.apply_gradients(zip(grads, critic.trainable_variables))
""",
    # Weights written by hand, next to a ready-made feature extractor from TF Hub.
    "hand-written weights": """import tensorflow as tf
import tensorflow_hub as hub
# %%
embed = hub.load('https://tfhub.dev/google/nnlm-en-dim50/2')
w = tf.Variable(5.0)
b = tf.Variable(0.0)
# %%
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - (w * tf.reduce_mean(embed(x), axis=1) + b)))
    dw, db = tape.gradient(loss, [w, b])
    w.assign_sub(0.1 * dw)
    b.assign_sub(0.1 * db)
""",
    # An environment used only to evaluate a policy trained on a logged dataset.
    "offline rl": """import gym
import tensorflow as tf
# %%
dataset = tf.data.Dataset.from_tensor_slices((states, actions)).shuffle(1000, seed=1).batch(64)
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation='relu', input_shape=(4,)), tf.keras.layers.Dense(2)])
model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
model.fit(dataset, epochs=5)
# %%
env = gym.make('CartPole-v1')
state, info = env.reset(seed=0)
for t in range(200):
    state, reward, done, truncated, info = env.step(int(tf.argmax(model(state[None]), axis=1)[0]))
""",
}


def test_training_notebooks_are_never_taken_for_work_that_is_not_data_parallel():
    for name, text in TRAINING_NOTEBOOKS.items():
        analysis = analyze(notebook_from(text))
        assert "not-data-parallel" not in codes(analysis), name
        assert "not-applicable" not in analysis.steps.values(), (name, analysis.steps, analysis.reasons)


# tensorflow.org's optimizers guide: a function minimized from x = tf.Variable(2.), its optimizers'
# slots tf.zeros; the fix once broadcast a plotted tensor (x_vals, given to grad's parameter) and the
# real broadcast, which assigns into variables, would fail on it.
CONSTANT_START = (
    "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
    "x_vals = tf.cast(tf.linspace(-2, 2, 201), tf.float32)\n"
    "def loss(x):\n    return 2 * (x ** 4) + 3 * (x ** 3) + 2\n"
    "def grad(f, x):\n    with tf.GradientTape() as tape:\n        tape.watch(x)\n        result = f(x)\n"
    "    return tape.gradient(result, x)\n"
    "plt.plot(x_vals, grad(loss, x_vals))\n# %%\n"
    "def convergence_test(optimizer, loss_fn, grad_fn=grad, init_val=2., max_iters=200):\n"
    "    x_star = tf.Variable(init_val)\n    slot = tf.Variable(tf.zeros(shape=[]))\n"
    "    for _ in range(max_iters):\n        x_star.assign_sub(0.01 * grad_fn(loss_fn, x_star))\n"
    "convergence_test(None, loss_fn=loss)\n"
)


def test_variables_that_start_from_constants_need_no_broadcast_and_no_tensor_is_broadcast():
    before, after_text, after = fixed(CONSTANT_START)
    assert before.steps["broadcast"] == "not-applicable" and "starts from a constant" in before.reasons["broadcast"]
    assert "broadcast(" not in after_text
    given = CONSTANT_START.replace("convergence_test(None, loss_fn=loss)", "convergence_test(None, loss, grad, 3.)")
    assert analyze(notebook_from(given)).steps["broadcast"] == "missing"  # a start the call gives: not known
