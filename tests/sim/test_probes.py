"""The probes in one plain process (no MPI): what they record, and that they cost training nothing
per step. Each test runs in a subprocess, since the probes patch TensorFlow globally."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sim


def run(body: str) -> dict:
    script = textwrap.dedent("""
        import json, os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        import numpy as np
        import tensorflow as tf
        from npu_migrate_nb.sim import probes
        probes.install(seed=7)
        out = {}
    """) + textwrap.dedent(body) + "\nprint('OUT ' + json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][4:])


def test_the_fit_probe_adds_no_batch_hooks_and_gives_train_function_back():
    out = run("""
        x = np.arange(64, dtype="float32").reshape(16, 4) / 64
        y = x.sum(axis=1, keepdims=True)
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        probe = probes._make_fit_callback(model)
        lists = tf.keras.callbacks.CallbackList([probe], model=model)
        out["batch_hooks"] = lists._should_call_train_batch_hooks
        out["tf_logs"] = lists._supports_tf_logs
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        model.fit(dataset, epochs=2, verbose=0)
        own = model.train_function
        model.fit(dataset, epochs=1, verbose=0)
        out["restored"] = "train_function" not in model.__dict__ or model.train_function is own
        records = probes.take_records()
        out["moments"] = [r["moment"] for r in records if r["kind"] == "weights"]
        out["hashed"] = [r["fingerprint"] is not None for r in records if r["kind"] == "weights"]
        out["sampled"] = [len(r["samples"]) for r in records if r["kind"] == "weights"]
        out["inputs"] = [r["source"] for r in records if r["kind"] == "input"]
        out["rows"] = len([r for r in records if r["kind"] == "input"][0]["rows"])
    """)
    assert out["batch_hooks"] is False
    assert out["restored"] is True
    assert out["moments"] == ["start", "step1", "end", "start", "step1", "end"]
    # only a start is hashed (the broadcast check compares it bit for bit); every moment is sampled
    assert out["hashed"] == [True, False, False, True, False, False]
    assert out["sampled"] == [2] * 6
    assert out["inputs"] == ["keras fit dataset", "keras fit dataset"]
    assert out["rows"] == 4


def test_weights_are_read_without_a_copy_and_keep_what_was_read():
    out = run("""
        v = tf.Variable(np.arange(1 << 20, dtype="float32"))
        first, again = probes._read_without_copying([v])[0], probes._read_without_copying([v])[0]
        out["shared"] = bool(np.shares_memory(first, again))
        v.assign_add(tf.ones_like(v))  # copies the buffer first: a read still held keeps its value
        out["kept"] = float(first[5])
        out["now"] = float(probes._read_without_copying([v])[0][5])
        out["fingerprint"] = probes.fingerprint([first]) == probes.fingerprint([np.arange(1 << 20, dtype="float32")])
    """)
    assert out["shared"] is True
    assert out["kept"] == 5.0 and out["now"] == 6.0
    assert out["fingerprint"] is True


def test_an_eager_loop_reads_the_weights_only_at_the_steps_it_records():
    out = run("""
        reads = []
        original = probes._read_without_copying
        probes._read_without_copying = lambda variables: reads.append(len(variables)) or original(variables)
        w = tf.Variable(tf.ones([4, 2]))
        optimizer = tf.keras.optimizers.SGD(0.1)
        for step in range(6):
            optimizer.apply_gradients([(tf.fill([4, 2], float(step)), w)])
        records = probes.end_cell()
        out["reads"] = reads
        out["moments"] = [r["moment"] for r in records if r["kind"] == "weights"]
        out["end"] = [r["samples"][0].tolist() for r in records if r["moment"] == "end"]
        out["step1"] = [r["samples"][0].tolist() for r in records if r["moment"] == "step1"]
    """)
    assert out["reads"] == [1, 1, 1]  # the start, after the first update, the end; not every step
    assert out["moments"] == ["start", "step1", "end"]
    assert out["step1"] == [[1.0] * 8]  # the first update's gradient was zeros
    assert out["end"] == [[1.0 - 0.1 * (1 + 2 + 3 + 4 + 5)] * 8]


def test_the_dataset_observation_is_reused_and_shards_are_found_without_serializing():
    out = run("""
        r = tf.data.Dataset.range
        out["shards"] = [probes._dataset_is_sharded(d) for d in (
            r(10).shard(2, 0).batch(2).cache().prefetch(1), r(10).batch(2),
            r(4).interleave(lambda _: r(3).shard(2, 0)), tf.data.Dataset.zip((r(3), r(3).shard(2, 1))))]
        dataset = r(10).shard(2, 0).batch(2)
        calls = []
        original = tf.data.Dataset._as_serialized_graph
        tf.data.Dataset._as_serialized_graph = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
        for _ in range(3):
            probes.record_dataset_input("loop", dataset)
        records = probes.take_records()
        out["serialized"] = len(calls)
        out["same"] = len({(r["fingerprint"], r["sharded"], tuple(r["rows"])) for r in records})
        out["count"] = len(records)
    """)
    assert out["shards"] == [True, False, True, True]
    assert out["serialized"] == 0
    assert out["count"] == 3 and out["same"] == 1


def test_row_digests_are_a_multiset_of_rows_across_components():
    out = run("""
        a = (np.array([[1.0], [2.0]], "float32"), np.array([5, 6]))
        b = (np.array([[2.0], [1.0]], "float32"), np.array([6, 5]))
        c = (np.array([[1.0], [2.0]], "float32"), np.array([6, 5]))
        out["same_rows_reordered"] = probes.row_digests(a) == probes.row_digests(b)
        out["pairs_matter"] = probes.row_digests(a) != probes.row_digests(c)
        out["no_first_dim"] = probes.row_digests(np.float32(1.0))
    """)
    assert out == {"same_rows_reordered": True, "pairs_matter": True, "no_first_dim": None}


def test_a_hand_written_update_is_training_and_a_tour_of_the_tape_is_not():
    """Gradients of variables updated by no known optimizer count as training only when the
    variables change while the cell reads input; an optimizer's loop is seen by its own probe once."""
    out = run("""
        x = np.arange(64, dtype="float32").reshape(16, 4) / 64
        y = x.sum(axis=1, keepdims=True)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        def moments():
            return [(r["moment"], r["source"]) for r in probes.end_cell() if r["kind"] == "weights"]

        probes.begin_cell(1)  # a tour: a scalar minimized by hand, no data read
        w = tf.Variable(3.0)
        for _ in range(5):
            with tf.GradientTape() as tape:
                loss = (w - 1.0) ** 2
            w.assign_sub(0.1 * tape.gradient(loss, w))
        out["tour"] = moments()

        probes.begin_cell(2)  # an optimizer written by hand, on batches
        kernel, bias = tf.Variable(tf.zeros([4, 1])), tf.Variable(tf.zeros([1]))
        for features, targets in dataset:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(features @ kernel + bias - targets))
            for grad, var in zip(tape.gradient(loss, [kernel, bias]), [kernel, bias]):
                var.assign_sub(0.1 * grad)
        out["by_hand"] = moments()

        probes.begin_cell(3)  # a Keras optimizer's loop: its own probe, not the tape's
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
        optimizer = tf.keras.optimizers.SGD(0.1)
        for features, targets in dataset:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(features) - targets))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        out["optimizer"] = moments()
    """)
    assert out["tour"] == []
    assert out["by_hand"] == [["start", "tape gradient"], ["step1", "tape gradient"], ["end", "tape gradient"]]
    assert out["optimizer"] == [["start", "optimizer step"], ["step1", "optimizer step"], ["end", "optimizer step"]]


def test_a_learning_rule_is_seen_at_its_rebinds_and_other_classes_are_left_alone():
    """A plain class a cell defined, whose float tensor attributes a loop rebinds from windows of the
    data (an RBM), trains: its start, first update and end are recorded, and the window is the input.
    A frozen dataclass, a property and a Keras model keep their own attribute setting."""
    out = run('''
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        cells = [
            "import dataclasses\\nimport numpy as np\\nimport tensorflow as tf\\n"
            "@dataclasses.dataclass(frozen=True)\\nclass Point:\\n    x: float\\n"
            "class Box:\\n    def __init__(self):\\n        self._size = 1\\n"
            "    @property\\n    def size(self):\\n        return self._size\\n"
            "    @size.setter\\n    def size(self, value):\\n        self._size = 2 * value\\n"
            "class RBM:\\n    def __init__(self):\\n        self.w = tf.zeros([4, 2])\\n        self.steps = 0\\n"
            "    def train(self, X):\\n"
            "        for start, end in zip(range(0, len(X), 8), range(8, len(X), 8)):\\n"
            "            batch = X[start:end]\\n"
            "            self.w = self.w + tf.matmul(tf.transpose(batch), tf.ones([8, 2])) / 8.0\\n"
            "            self.steps += 1\\n",
            "X = np.arange(128, dtype='float32').reshape(32, 4) / 128\\nrbm = RBM()\\nrbm.train(X)\\n"
            "box = Box()\\nbox.size = 5\\n"
            "try:\\n    Point(1.0).x = 2.0\\n    frozen = False\\nexcept dataclasses.FrozenInstanceError:\\n    frozen = True\\n",
        ]
        records = []
        for index, cell in enumerate(cells):
            probes.begin_cell(index)
            result = shell.run_cell(cell)
            assert result.error_in_exec is None, result.error_in_exec
            records += probes.end_cell()
        out["moments"] = [(r["moment"], r["source"], r["names"]) for r in records if r["kind"] == "weights"]
        out["inputs"] = [(r["source"], len(r["sample"])) for r in records if r["kind"] == "input"]
        out["steps"] = shell.user_ns["rbm"].steps
        out["size"] = shell.user_ns["box"].size
        out["frozen"] = shell.user_ns["frozen"]
    ''')
    assert out["moments"] == [["start", "learning rule", ["rbm.w"]], ["step1", "learning rule", ["rbm.w"]],
                              ["end", "learning rule", ["rbm.w"]]]
    assert out["inputs"] == [["window a learning rule reads", 8]]
    assert out["steps"] == 3 and out["size"] == 10 and out["frozen"] is True
