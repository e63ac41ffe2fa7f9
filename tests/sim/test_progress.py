"""Live training progress: each rank publishes where its Keras fit (or Estimator.train) is, and the
runner hands every change to a ``progress(rank, data)`` callback while the cell runs."""

import io
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from npu_migrate_nb.sim import runner as runner_module
from npu_migrate_nb.sim.cluster import Cluster
from npu_migrate_nb.sim.runner import Runner

pytestmark = pytest.mark.sim

SETUP = """
import time
import numpy as np
import tensorflow as tf

def _slow(a, b):
    time.sleep(0.03)  # a slow input pipeline: long enough for the progress watcher to see steps
    return a, b

_x = np.random.RandomState(0).rand(160, 4).astype("float32")
_y = _x.sum(axis=1, keepdims=True)
dataset = (tf.data.Dataset.from_tensor_slices((_x, _y)).batch(8)
           .map(lambda a, b: tf.py_function(_slow, [a, b], [tf.float32, tf.float32]))
           .map(lambda a, b: (tf.ensure_shape(a, [None, 4]), tf.ensure_shape(b, [None, 1]))))
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
"""
STEPS = 20  # 160 rows, batch 8: about 0.6 s per epoch


@pytest.fixture(scope="module")
def cluster():
    with Cluster(n=2) as started:
        started_runner = Runner(started, timeout=120, echo=io.StringIO(), errors=io.StringIO())
        assert started_runner.run_cell(0, SETUP).status == "ok"
        yield started


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, rank, data):
        self.calls.append((rank, json.loads(json.dumps(data))))

    def of(self, rank):
        return [data for r, data in self.calls if r == rank]


def run_cell(cluster, index, source, progress):
    output = io.StringIO()
    runner = Runner(cluster, timeout=120, echo=output, errors=output, progress=progress)
    outcome = runner.run_cell(index, source)
    assert outcome.status == "ok", output.getvalue()
    return runner, output.getvalue()


def test_every_rank_reports_epochs_and_increasing_steps_up_to_the_end_of_fit(cluster):
    recorder = Recorder()
    run_cell(cluster, 1, "history = model.fit(dataset, epochs=2, verbose=0)\nprint(len(history.history['loss']))",
             recorder)
    for rank in cluster.ranks:
        states = recorder.of(rank)
        assert states, f"rank {rank}: no progress reported ({recorder.calls})"
        assert all(s["kind"] == "keras" and s["cell"] == 1 and s["epochs"] == 2 for s in states), states
        final = states[-1]
        assert final["running"] is False, states
        assert (final["epoch"], final["step"], final["steps"]) == (2, STEPS, STEPS), final
        assert "loss" in final["metrics"], final
        running = [(s["epoch"], s["step"]) for s in states if s["running"]]
        assert running == sorted(running), states  # never goes back
        # Seen in the middle of an epoch: the step is read while the fit runs, not only at its ends.
        assert any(0 < step < STEPS for epoch, step in running if epoch >= 1), states
        assert len({position for position in running if position[0] >= 1}) >= 3, states


def test_an_unknown_length_dataset_learns_its_steps_after_the_first_epoch(cluster):
    recorder = Recorder()
    run_cell(cluster, 2, "model.fit(dataset.filter(lambda a, b: True), epochs=2, verbose=0)", recorder)
    for rank in cluster.ranks:
        states = recorder.of(rank)
        assert states and states[0]["steps"] is None, states
        assert {s["steps"] for s in states if s["epoch"] == 2} == {STEPS}, states
        assert (states[-1]["running"], states[-1]["epoch"], states[-1]["step"]) == (False, 2, STEPS), states


def test_a_failing_progress_callback_does_not_break_the_run(cluster):
    calls = []

    def broken(rank, data):
        calls.append(rank)
        raise RuntimeError("the widget is gone")

    runner, output = run_cell(cluster, 3, "model.fit(dataset, epochs=1, verbose=0)\nprint('after fit')", broken)
    assert calls, "the callback was never called"
    assert "[rank 0] after fit" in output and "[rank 1] after fit" in output
    assert "the widget is gone" in output  # said once, then ignored
    assert output.count("progress display failed") == 1
    # The records still arrive and the next cell runs.
    assert any(r["kind"] == "weights" and r["moment"] == "end" for r in runner.records[0])
    assert runner.run_cell(4, "print('next')").status == "ok"


def test_progress_files_are_reported_once_per_change_and_malformed_ones_skipped(tmp_path):
    files = runner_module._ProgressFiles(SimpleNamespace(state_dir=str(tmp_path), ranks=[0, 1]))
    path = runner_module.progress_path(str(tmp_path), 0)

    def write(text):
        with open(path + ".tmp", "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(path + ".tmp", path)

    assert files.changes() == []  # no file yet
    write("{not json")
    assert files.changes() == []
    write('{"running": true, "step": 1}')
    assert files.changes() == [(0, {"running": True, "step": 1})]
    assert files.changes() == []  # unchanged: not even read again
    write('{"running": true, "step": 1}')
    assert files.changes() == []  # rewritten, same text: no news
    write('{"running": false, "step": 2}')
    files.mark()  # before a cell: what is there is not news
    assert files.changes() == []
    write("[1, 2]")
    assert files.changes() == []


def test_without_a_callback_no_progress_file_is_read(cluster, monkeypatch):
    looked = []
    monkeypatch.setattr(runner_module, "progress_path", lambda *args: looked.append(args) or "/nonexistent")
    run_cell(cluster, 5, "model.fit(dataset, epochs=1, verbose=0)", None)
    assert looked == []


def test_estimator_train_reports_its_steps():
    script = textwrap.dedent("""
        import json, os, tempfile
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        import numpy as np
        import tensorflow as tf
        from npu_migrate_nb.sim import probes
        probes.install(seed=7)
        seen = []
        probes.progress.wake = lambda: seen.append(probes.progress.snapshot())  # at the end of a call

        class Look(tf.compat.v1.train.SessionRunHook):  # the user's hooks run before the probe's
            def after_run(self, run_context, run_values):
                seen.append(probes.progress.snapshot())

        x = np.random.RandomState(0).rand(64, 4).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        v1 = tf.compat.v1

        def model_fn(features, labels, mode):
            loss = v1.losses.mean_squared_error(labels, v1.layers.dense(features, 1))
            train_op = v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=v1.train.get_global_step())
            return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)

        estimator = tf.estimator.Estimator(model_fn=model_fn, model_dir=tempfile.mkdtemp())
        input_fn = lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
        probes.begin_cell(7)
        estimator.train(input_fn, steps=5, hooks=[Look()])
        estimator.train(input_fn, max_steps=8, hooks=[Look()])
        print("OUT " + json.dumps(seen))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUT ")]
    assert lines, done.stderr[-3000:]
    seen = json.loads(lines[-1][4:])
    summary = [(s["kind"], s["call"], s["running"], s["step"], s["steps"], s["cell"]) for s in seen]
    first = [("estimator", 1, True, step, 5, 7) for step in range(5)] + [("estimator", 1, False, 5, 5, 7)]
    second = [("estimator", 2, True, step, 3, 7) for step in range(3)] + [("estimator", 2, False, 3, 3, 7)]
    assert summary == first + second, seen
