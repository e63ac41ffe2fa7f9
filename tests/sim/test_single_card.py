"""Single-card math (N ranks at global batch B reach one card's weights at batch B) and Keras
models that build their variables on their first batch, on real TensorFlow, MPI and ipyparallel."""

import io
import json
import subprocess
import sys

import pytest

from npu_migrate_nb.notebook import load
from npu_migrate_nb.sim import checks
from npu_migrate_nb.sim.cluster import Cluster
from npu_migrate_nb.sim.runner import Runner

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "data"))
from make_notebooks import DATA, notebook  # noqa: E402

pytestmark = pytest.mark.sim

HEAD = "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n" + DATA
SHARDED = '''dataset = tf.data.Dataset.from_tensor_slices((x, y))
dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, GLOBAL_BATCH)
dataset = dataset{shuffle}.batch(batch_size)
'''
SEQUENTIAL = '''model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
npu.distribute.broadcast(model.trainable_variables)
'''


def custom_loop(reduction):
    """The loss is a sum divided by the GLOBAL batch: "sum" keeps the single-card math, "mean" halves it."""
    return [HEAD, SHARDED.format(shuffle="") + SEQUENTIAL + "optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)",
            f'''@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(features, training=True) - labels)) / GLOBAL_BATCH
    grads = tape.gradient(loss, model.trainable_variables)
    grads = npu.distribute.all_reduce(grads, reduction="{reduction}")
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss''',
            "for epoch in range(2):\n    for features, labels in dataset:\n        loss = train_step(features, labels)\n"
            "print('loss', round(float(loss), 4))"]


def keras_fit(shuffle=""):
    return [HEAD, SHARDED.format(shuffle=shuffle) + SEQUENTIAL
            + "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.05))\n"
            "model.compile(optimizer=optimizer, loss='mse')",
            "history = model.fit(dataset, epochs=2, verbose=0)\nprint('loss', round(history.history['loss'][-1], 4))"]


def subclassed_fit(broadcast_callback=True):
    """A subclassed model has no variables until its first batch: the analyzer's fix broadcasts them
    from a callback at the end of batch 0."""
    callback = ("tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch == 0 and "
                "npu.distribute.broadcast(model.trainable_variables))" if broadcast_callback else "")
    return [HEAD, '''class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="relu")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))
''' + SHARDED.format(shuffle="") + '''model = Net()
optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(learning_rate=0.05))
model.compile(optimizer=optimizer, loss="mse")''',
            f"history = model.fit(dataset, epochs=2, verbose=0, callbacks=[{callback}])\n"
            "print('loss', round(history.history['loss'][-1], 4))"]


@pytest.fixture(scope="module")
def cluster():
    with Cluster(n=2) as started:
        yield started


@pytest.fixture(scope="module")
def write(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebooks")

    def write_notebook(name, cells):
        path = folder / f"{name}.ipynb"
        path.write_text(json.dumps(notebook(cells), indent=1))
        return str(path)

    return write_notebook


def run(cluster, path, compare=True):
    echo = io.StringIO()
    result = Runner(cluster, timeout=120, echo=echo, errors=echo).run_notebook(load(path), compare_single_card=compare)
    assert result.cells_ok, echo.getvalue()
    return result


def test_sum_over_a_loss_divided_by_the_global_batch_reproduces_one_card(cluster, write):
    result = run(cluster, write("loop_sum", custom_loop("sum")))
    check = result.single_card
    assert check.status == "pass", check
    assert "2 ranks reached the weights one card reaches" in check.detail
    assert result.ok and result.to_json()["single_card_math"] == "pass"


def test_mean_over_a_loss_divided_by_the_global_batch_halves_the_updates(cluster, write):
    result = run(cluster, write("loop_mean", custom_loop("mean")))
    check = result.single_card
    assert check.status == "fail", check
    assert "the first update was 1/2 of one card's" in check.detail
    assert 'reduction="sum"' in check.detail
    # the three checks cannot see it: every rank applied the same (wrong) update
    assert {c.status for c in result.checks.values()} == {"pass"}
    assert not result.ok


def test_keras_fit_with_sgd_on_an_unshuffled_sharded_dataset_reproduces_one_card(cluster, write):
    result = run(cluster, write("keras_sgd", keras_fit()))
    assert result.single_card.status == "pass", result.single_card
    assert "keras fit" in result.single_card.detail


def run_with_runner(cluster, path):
    echo = io.StringIO()
    runner = Runner(cluster, timeout=120, echo=echo, errors=echo)
    result = runner.run_notebook(load(path), compare_single_card=True)
    assert result.cells_ok, echo.getvalue()
    return result, runner


def test_a_shuffle_after_the_shard_is_held_fixed_for_the_comparison_only(cluster, write):
    # unseeded, as users write it: each rank reorders its own samples; one card shuffles them all
    result, runner = run_with_runner(cluster, write("keras_shuffled", keras_fit(".shuffle(64)")))
    check = result.single_card
    assert check.status == "pass", check
    assert "held fixed in both runs: the shuffle after the shard (cell 1, line 3)" in check.detail
    assert "first update 1.00x one card's" in check.detail
    # the main run, and its three checks, saw the notebook as it is: the shuffle ran
    assert {c.status for c in result.checks.values()} == {"pass"}
    assert checks.training_input(runner.records[0])["deterministic"] is False


def test_a_shuffle_before_the_shard_is_never_touched(cluster, write):
    # an unseeded shuffle before the shard gives each rank a different permutation to shard: ranks
    # read each other's samples; the comparison must not hide it by passing that shuffle through
    cells = keras_fit()
    cells[1] = cells[1].replace("from_tensor_slices((x, y))", "from_tensor_slices((x, y)).shuffle(64)")
    result, _ = run_with_runner(cluster, write("keras_shuffled_before", cells))
    assert result.checks["shard"].status == "fail", result.checks["shard"]
    check = result.single_card
    assert check.status == "not-observed", check
    assert "a shuffle before the shard draws differently in the two runs" in check.detail
    assert "\n" not in check.detail


def test_dropout_runs_as_at_inference_in_both_runs_of_the_comparison(cluster, write):
    cells = keras_fit(".shuffle(64)")
    cells[1] = cells[1].replace('tf.keras.layers.Dense(1)])',
                                'tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(1)])')
    result, _ = run_with_runner(cluster, write("keras_dropout", cells))
    check = result.single_card
    assert check.status == "pass", check
    assert "Dropout as at inference" in check.detail and "the shuffle after the shard" in check.detail
    assert {c.status for c in result.checks.values()} == {"pass"}


def test_fit_arrays_shuffled_by_fit_are_read_in_order_for_the_comparison(cluster, write):
    cells = [HEAD, "rank, size = int(os.environ['RANK_ID']), int(os.environ['RANK_SIZE'])\n"
             "x_rank, y_rank = x[rank::size], y[rank::size]\n" + SEQUENTIAL
             + "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.05))\n"
             "model.compile(optimizer=optimizer, loss='mse')",
             "model.fit(x_rank, y_rank, batch_size=GLOBAL_BATCH // size, epochs=2, verbose=0)"]
    cells[0] = "import os\n" + cells[0]
    result, _ = run_with_runner(cluster, write("keras_arrays", cells))
    check = result.single_card
    assert check.status == "pass", check
    assert "held fixed in both runs: fit's shuffle of arrays" in check.detail


def test_the_single_card_comparison_is_opt_in(cluster, write):
    result = run(cluster, write("keras_plain", keras_fit()), compare=False)
    assert result.single_card is None
    assert result.to_json()["single_card_math"] == "skipped"
    assert set(result.to_json()["checks"]) == {"broadcast", "allreduce", "shard"}


def test_a_model_built_on_its_first_batch_is_observed_after_the_broadcast(cluster, write):
    result = run(cluster, write("subclassed", subclassed_fit()), compare=False)
    check = result.checks["broadcast"]
    assert check.status == "pass", check
    assert check.detail.startswith("4 trainable variables identical on all 2 ranks after the first batch")
    assert result.checks["allreduce"].status == "pass", result.checks["allreduce"]


def test_a_model_built_on_its_first_batch_without_broadcast_fails(cluster, write):
    result = run(cluster, write("subclassed_unbroadcast", subclassed_fit(broadcast_callback=False)), compare=False)
    assert result.checks["broadcast"].status == "fail", result.checks["broadcast"]


def test_cli_reports_single_card_math_in_json_and_text(write):
    path = write("cli_loop_mean", custom_loop("mean"))
    command = [sys.executable, "-m", "npu_migrate_nb", "run", path, "-n", "2", "--compare-single-card",
               "--format", "json"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 1, completed.stderr
    report = json.loads(completed.stdout)
    assert report["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
    assert report["single_card_math"] == "fail" and report["ok"] is False
    assert "1/2 of one card's" in report["check_details"]["single_card_math"]["detail"]


def test_cli_fixed_estimator_reproduces_one_card():
    """TF1 Estimator: its graph seed comes from the rank's seed, so one card starts where rank 0 did."""
    path = __import__("os").path.join(__import__("os").path.dirname(__file__), "data", "estimator_fixed.ipynb")
    command = [sys.executable, "-m", "npu_migrate_nb", "run", path, "-n", "2", "--compare-single-card"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    line = next(text for text in completed.stdout.splitlines() if text.startswith("single-card math:"))
    assert "pass" in line and "(cell 3, estimator)" in line


def test_a_function_loop_is_observed_for_two_steps_and_a_later_cell_that_splits_the_ranks_fails(cluster, write):
    # In a tf.function the optimizer probe reads the variables at the first two steps only (training
    # then pays nothing for it); a later cell that trains is still seen through the step counter.
    local_steps = '''@tf.function
def local_step(features, labels):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(features, training=True) - labels)) / GLOBAL_BATCH
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
for features, labels in dataset:
    local_step(features, labels)'''
    count = "from npu_migrate_nb.sim import probes\nprint('observed steps', probes._loop_tracker.observed_steps)"
    cells = custom_loop("sum") + [count, local_steps]
    result = run(cluster, write("loop_then_local_steps", cells), compare=False)
    counted = result.to_json()["cells"][4]["ranks"]
    assert [r["stdout"].strip() for r in counted] == ["observed steps 2"] * 2
    assert result.checks["broadcast"].status == "pass"
    assert result.checks["allreduce"].status == "fail", result.checks["allreduce"]
    assert result.checks["allreduce"].cell == 5 and "cells 3-5" in result.checks["allreduce"].detail
