"""The simulated Ascend adapter (npu_bridge / npu_device / hccl stand-ins) on real MPI ranks.

Each multi-rank test runs one script under ``mpiexec -n 2`` that prints a JSON line per rank;
the assertions compare the ranks (synchronised weights are equal, unsynchronised ones are not)
and check the numbers against the adapter's documented semantics.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PREAMBLE = r"""
import json, logging, os, sys
os.environ["RANK_ID"] = os.environ.get("PMI_RANK", "0")
os.environ["RANK_SIZE"] = os.environ.get("PMI_SIZE", "1")
sys.path.insert(0, REPO)
result = {"rank": int(os.environ["RANK_ID"])}
pitfalls = []

class _Pitfalls(logging.Handler):
    def emit(self, record):
        pitfalls.append(getattr(record, "pitfall", None))

logging.getLogger("npu_migrate_nb.sim").addHandler(_Pitfalls())

def write_rank_table(directory):
    size = int(os.environ["RANK_SIZE"])
    devices = [{"device_id": str(i), "device_ip": "192.168.100.%d" % (i + 1), "rank_id": str(i)}
               for i in range(size)]
    path = os.path.join(directory, "rank_table_%s.json" % os.environ["RANK_ID"])
    with open(path, "w") as handle:
        json.dump({"server_count": "1", "status": "completed", "version": "1.0",
                   "server_list": [{"server_id": "127.0.0.1", "device": devices}]}, handle)
    os.environ["RANK_TABLE_FILE"] = path

def emit():
    result["pitfalls"] = [p for p in pitfalls if p]
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")  # one write: ranks share the pipe
    sys.stdout.flush()
"""


def _env(extra_path=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, REPO) if p)
    for name in ("RANK_SIZE", "RANK_ID", "CM_WORKER_SIZE", "RANK_TABLE_FILE", "CM_CHIEF_IP"):
        env.pop(name, None)
    return env


def run_script(tmp_path, body, ranks=None, timeout=300, extra_path=None):
    script = tmp_path / "script.py"
    script.write_text(f"REPO = {REPO!r}\nWORK = {str(tmp_path)!r}\n" + PREAMBLE + textwrap.dedent(body))
    command = [sys.executable, str(script)]
    if ranks:
        command = ["mpiexec", "-n", str(ranks)] + command
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(extra_path))
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]
    expected = ranks or 1
    assert len(results) == expected, f"rc={done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-5000:]}"
    return sorted(results, key=lambda r: r["rank"])


TF2_RANKS = """
from npu_migrate_nb.sim import adapter
result["enabled"] = adapter.enable()
import numpy as np
import tensorflow as tf
import npu_device as npu
from npu_bridge.npu_init import npu_distributed_optimizer_wrapper
from hccl.manage.api import get_rank_size, get_rank_id

me = result["rank"]
try:
    get_rank_size()
    result["rank_size_before_init"] = "returned"
except ValueError:
    result["rank_size_before_init"] = "ValueError"
write_rank_table(WORK)

# open() without as_default(): every distribute API is a silent no-op
device = npu.open()
x = tf.constant([1.0 * (me + 1), 2.0])
var = tf.Variable([float(me)])
npu.distribute.broadcast([var])
dataset = tf.data.Dataset.range(8)
same_dataset, same_bs = npu.distribute.shard_and_rebatch_dataset(dataset, 8)
result["inert"] = [npu.distribute.all_reduce(x) is x, var.numpy().tolist(), same_dataset is dataset, same_bs]
device.as_default()
result["rank_size_after_open"] = [get_rank_size(), get_rank_id()]

# all_reduce: sum and mean (sum times 1/N), None entries, single values, integers, bad reduction
ints = tf.constant([3, 4 + me])
summed = npu.distribute.all_reduce([x, None, ints], reduction="sum")
mean = npu.distribute.all_reduce([x, ints])
result["sum"] = [summed[0].numpy().tolist(), summed[1] is None, summed[2].numpy().tolist()]
result["mean"] = mean[0].numpy().tolist()
result["mean_exact"] = bool(np.array_equal(mean[0].numpy(), summed[0].numpy() * np.float32(0.5)))
result["int_mean"] = [mean[1].dtype.name, mean[1].numpy().tolist()]
single = npu.distribute.all_reduce(x, "max")
result["single"] = [isinstance(single, tf.Tensor), single.numpy().tolist()]
result["tuple_gives_list"] = isinstance(npu.distribute.all_reduce((x,), "sum"), list)
try:
    npu.distribute.all_reduce(x, "avg")
except ValueError:
    result["bad_reduction"] = "ValueError"

# broadcast(model.trainable_variables): weights follow rank 0, BN moving statistics do not
tf.random.set_seed(10 + me)
model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,)), tf.keras.layers.BatchNormalization()])
model.layers[1].moving_mean.assign(tf.fill([4], float(me)))
npu.distribute.broadcast(model.trainable_variables)
result["broadcast_trainable"] = [w.numpy().round(6).tolist() for w in model.trainable_variables]
result["broadcast_moving_mean"] = model.layers[1].moving_mean.numpy().tolist()

# shard_and_rebatch_dataset: (shard(N, rank), global_bs // N), no batching, ValueError
sharded, batch = npu.distribute.shard_and_rebatch_dataset(tf.data.Dataset.range(8), 4)
result["shard"] = [[int(v) for v in sharded.as_numpy_iterator()], batch]
try:
    npu.distribute.shard_and_rebatch_dataset(tf.data.Dataset.range(8), 5)
except ValueError:
    result["shard_not_divisible"] = "ValueError"

# custom loop: gradients all-reduced inside tf.function
tf.random.set_seed(20 + me)
loop_model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(3,)),
                                  tf.keras.layers.Dense(1)])
npu.distribute.broadcast(loop_model.trainable_variables)
loop_opt = tf.keras.optimizers.SGD(0.05)
rng = np.random.default_rng(me)
features = rng.standard_normal((32, 3)).astype("float32")
labels = rng.standard_normal((32, 1)).astype("float32")

@tf.function
def train_step(inputs, targets):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(loop_model(inputs) - targets))
    grads = tape.gradient(loss, loop_model.trainable_variables)
    grads = npu.distribute.all_reduce(grads, "mean")
    loop_opt.apply_gradients(zip(grads, loop_model.trainable_variables))

for step in range(4):
    train_step(features[step * 8:(step + 1) * 8], labels[step * 8:(step + 1) * 8])
result["loop_weights"] = [w.numpy().round(5).tolist() for w in loop_model.trainable_variables]

# model.fit with both wrappers, new and legacy Keras optimizers (many variables)
def fit(make_optimizer, wrap):
    net = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh", input_shape=(3,))] +
                              [tf.keras.layers.Dense(6, activation="tanh") for _ in range(14)] +
                              [tf.keras.layers.Dense(1)])
    start = np.random.default_rng(30 + me)  # a different start on every rank, the same every fit
    net.set_weights([0.5 * start.standard_normal(w.shape) for w in net.get_weights()])
    npu.distribute.broadcast(net.trainable_variables)
    net.compile(optimizer=wrap(make_optimizer()), loss="mse")
    net.fit(features, labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return [float(np.abs(w.numpy()).sum()) for w in net.trainable_variables]

keras_wrapper = npu.distribute.npu_distributed_keras_optimizer_wrapper
result["variables_in_fit"] = 32
result["fit"] = {
    "keras_wrapper_new": fit(lambda: tf.keras.optimizers.SGD(0.05), keras_wrapper),
    "keras_wrapper_legacy": fit(lambda: tf.keras.optimizers.legacy.SGD(0.05), keras_wrapper),
    "tf1_wrapper_new": fit(lambda: tf.keras.optimizers.SGD(0.05), npu_distributed_optimizer_wrapper),
    "tf1_wrapper_legacy": fit(lambda: tf.keras.optimizers.legacy.SGD(0.05), npu_distributed_optimizer_wrapper),
    "not_wrapped": fit(lambda: tf.keras.optimizers.SGD(0.05), lambda opt: opt),
}

# the TF2 broadcast callback never broadcasts (real defect) and says so
tf.random.set_seed(40 + me)
unsynced = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
unsynced.compile(optimizer="sgd", loss="mse")
from npu_device.distribute.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_device.distribute.hccl import npu_callbacks_append
callback = NPUBroadcastGlobalVariablesCallback(0)
unsynced.fit(features, labels[:, :1].repeat(2, axis=1), batch_size=8, epochs=1, verbose=0, callbacks=[callback])
result["defective_callback_weights"] = [w.numpy().round(6).tolist() for w in unsynced.trainable_variables]
appended = npu_callbacks_append((tf.keras.callbacks.History(),))
result["callbacks_append_tuple"] = len(appended)
emit()
"""


@pytest.mark.sim
def test_tf2_distribute_apis_on_two_ranks(tmp_path):
    rank0, rank1 = run_script(tmp_path, TF2_RANKS, ranks=2)
    for r in (rank0, rank1):
        me = r["rank"]
        assert r["enabled"] is True
        assert r["rank_size_before_init"] == "ValueError"
        assert r["inert"] == [True, [float(me)], True, 8]
        assert r["rank_size_after_open"] == [2, me]
        assert r["sum"] == [[3.0, 4.0], True, [6, 9]]
        assert r["mean"] == [1.5, 2.0] and r["mean_exact"] is True
        assert r["int_mean"] == ["float64", [3.0, 4.5]]
        assert r["single"] == [True, [2.0, 2.0]]
        assert r["tuple_gives_list"] is True
        assert r["bad_reduction"] == "ValueError"
        assert r["broadcast_moving_mean"] == [float(me)] * 4
        assert r["shard"] == [[me, me + 2, me + 4, me + 6], 2]
        assert r["shard_not_divisible"] == "ValueError"
        assert r["callbacks_append_tuple"] == 1
        assert "tf2-broadcast-callback" in r["pitfalls"] and "hooks-tuple" in r["pitfalls"]
    assert rank0["broadcast_trainable"] == rank1["broadcast_trainable"]
    assert rank0["loop_weights"] == rank1["loop_weights"]
    for name in ("keras_wrapper_new", "keras_wrapper_legacy", "tf1_wrapper_new", "tf1_wrapper_legacy"):
        assert rank0["fit"][name] == pytest.approx(rank1["fit"][name], rel=1e-6), name
        assert len(rank0["fit"][name]) == rank0["variables_in_fit"]
    # both wrappers compute the same mean gradient from the same start
    assert rank0["fit"]["keras_wrapper_new"] == pytest.approx(rank0["fit"]["tf1_wrapper_new"], rel=1e-5)
    assert rank0["fit"]["keras_wrapper_legacy"] == pytest.approx(rank0["fit"]["tf1_wrapper_legacy"], rel=1e-5)
    assert rank0["fit"]["not_wrapped"] != pytest.approx(rank1["fit"]["not_wrapped"], rel=1e-6)
    assert rank0["defective_callback_weights"] != rank1["defective_callback_weights"]


TF1_RANKS = """
import tensorflow as real_tf
real_tf.compat.v1.disable_v2_behavior()
_ = (real_tf.keras, real_tf.estimator, real_tf.compat.v1.layers, real_tf.compat.v1.estimator)
sys.modules["tensorflow"] = real_tf.compat.v1   # what the engine does for TF1 notebooks
from npu_migrate_nb.sim import adapter
adapter.enable()
import numpy as np
import tensorflow as tf
from npu_bridge.npu_init import *

me = result["rank"]
result["star_exports"] = [name for name in ("tf", "os", "hccl_ops", "NPURunConfig", "npu_config_proto",
                                            "npu_callbacks_append", "init_resource") if name in globals()]
result["npu_config_proto"] = isinstance(npu_config_proto(), tf.ConfigProto)

# hccl_ops in a session
with tf.Graph().as_default(), tf.Session(config=npu_config_proto()) as session:
    value = tf.constant([1.0 + me, 5.0 - me])
    # all-reduces and broadcasts are ordered within their own kind: fetch them in separate runs
    fetched = session.run([hccl_ops.allreduce(value, "sum"), hccl_ops.allreduce(value, "max")])
    fetched.append(session.run(hccl_ops.broadcast([value], 1)))
    result["hccl_ops"] = [fetched[0].tolist(), fetched[1].tolist(), fetched[2][0].tolist()]
    try:
        hccl_ops.allreduce(value, "mean")
    except ValueError:
        result["hccl_mean"] = "ValueError"

# Session: 32 variables, wrapper and NPUDistributedOptimizer, broadcast hook (trainable only)
with tf.Graph().as_default():
    weights = [tf.Variable(tf.fill([2], float(me + 1)), name="w%d" % i) for i in range(32)]
    frozen = tf.Variable([float(me)], trainable=False, name="frozen")
    loss = tf.add_n([tf.reduce_sum(w) * (me + 1) for w in weights])
    wrapped = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(1.0))
    grads = [g for g, _ in wrapped.compute_gradients(loss)]
    step_vars = [tf.Variable([0.0], name="s%d" % i) for i in range(3)]
    step_loss = tf.add_n([tf.reduce_sum(v) * (me + 1) for v in step_vars])
    train_op = NPUDistributedOptimizer(tf.train.GradientDescentOptimizer(1.0)).minimize(step_loss, var_list=step_vars)
    hook = NPUBroadcastGlobalVariablesHook(0, me)
    with tf.train.MonitoredSession(hooks=[hook]) as session:
        after_broadcast = session.run(weights[:2] + [frozen])
        grad_values = session.run(grads)
        session.run(train_op)
        stepped = session.run(step_vars)
result["hook_broadcast"] = [a.tolist() for a in after_broadcast]
result["grads_are_mean"] = all(np.allclose(g, 1.5) for g in grad_values) and len(grad_values) == 32
result["npu_distributed_optimizer"] = [s.tolist() for s in stepped]

# Estimators: method one (hook), method two (npu_hooks_append), NPUEstimator, and no broadcast
class CountingHook(tf.train.SessionRunHook):
    calls = 0
    def after_run(self, run_context, run_values):
        CountingHook.calls += 1

def model_fn(features, labels, mode, params):
    w = tf.get_variable("w", initializer=tf.fill([3, 1], float(me) + 0.5))
    b = tf.get_variable("b", initializer=[float(me)])
    tf.get_variable("frozen", initializer=[float(me)], trainable=False)
    loss = tf.reduce_mean(tf.square(tf.matmul(features, w) + b - labels))
    optimizer = npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.05))
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

def input_fn():
    rng = np.random.default_rng(me)
    data = (rng.standard_normal((40, 3)).astype("float32"), rng.standard_normal((40, 1)).astype("float32"))
    return tf.data.Dataset.from_tensor_slices(data).batch(4).repeat()

def train(name, hooks, estimator_class=tf.estimator.Estimator, config_class=tf.estimator.RunConfig):
    config = config_class(model_dir=os.path.join(WORK, "rank%d" % me, name), save_checkpoints_steps=100)
    estimator = estimator_class(model_fn=model_fn, config=config, params={})
    estimator.train(input_fn, max_steps=5, hooks=hooks)
    return {v: estimator.get_variable_value(v).round(6).tolist() for v in ("w", "b", "frozen", "global_step")}

result["estimator"] = {
    "method_one": train("one", [CountingHook(), NPUBroadcastGlobalVariablesHook(0, me)]),
    "method_two": train("two", npu_hooks_append([CountingHook()])),
    "npu_estimator": train("npu", [], NPUEstimator, NPURunConfig),
    "no_broadcast": train("none", []),
}
result["counting_hook_calls"] = CountingHook.calls
result["hooks_append_tuple"] = len(npu_hooks_append((CountingHook(), CountingHook())))
try:
    NPUEstimator(model_fn=model_fn, config=tf.estimator.RunConfig())
except ValueError:
    result["npu_estimator_needs_npu_config"] = "ValueError"

# TF1 Keras: wrapper + NPUBroadcastGlobalVariablesCallback
model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,),
                             kernel_initializer=tf.keras.initializers.Constant(float(me)))])
model.compile(optimizer=npu_distributed_optimizer_wrapper(tf.keras.optimizers.SGD(0.05)), loss="mse")
rng = np.random.default_rng(me)
model.fit(rng.standard_normal((16, 3)), rng.standard_normal((16, 2)), batch_size=4, epochs=1, verbose=0,
          callbacks=[NPUBroadcastGlobalVariablesCallback(0)])
result["tf1_keras"] = [w.round(6).tolist() for w in model.get_weights()]
emit()
"""


@pytest.mark.sim
def test_tf1_session_estimator_and_keras_on_two_ranks(tmp_path):
    rank0, rank1 = run_script(tmp_path, TF1_RANKS, ranks=2)
    for r in (rank0, rank1):
        me = r["rank"]
        assert r["star_exports"] == ["tf", "os", "hccl_ops", "NPURunConfig", "npu_config_proto",
                                     "npu_callbacks_append", "init_resource"]
        assert r["npu_config_proto"] is True
        assert r["hccl_ops"] == [[3.0, 9.0], [2.0, 5.0], [2.0, 4.0]]
        assert r["hccl_mean"] == "ValueError"
        assert r["hook_broadcast"] == [[1.0, 1.0], [1.0, 1.0], [float(me)]]
        assert r["grads_are_mean"] is True
        assert r["npu_distributed_optimizer"] == [[-1.5]] * 3
        for name in ("method_one", "method_two", "npu_estimator", "no_broadcast"):
            assert r["estimator"][name]["frozen"] == [float(me)], name
            assert r["estimator"][name]["global_step"] == 5, name
        assert r["counting_hook_calls"] == 10  # 5 steps each with method one and method two
        assert r["hooks_append_tuple"] == 1
        assert "hooks-tuple" in r["pitfalls"]
        assert r["npu_estimator_needs_npu_config"] == "ValueError"
    for name in ("method_one", "method_two", "npu_estimator"):
        for variable in ("w", "b"):
            assert rank0["estimator"][name][variable] == rank1["estimator"][name][variable], (name, variable)
    assert rank0["estimator"]["no_broadcast"]["w"] != rank1["estimator"]["no_broadcast"]["w"]
    assert rank0["tf1_keras"] == rank1["tf1_keras"]


SINGLE_CARD = """
try:
    import npu_bridge
    result["import_before_enable"] = "imported"
except ImportError:
    result["import_before_enable"] = "ImportError"
from npu_migrate_nb.sim import adapter
result["enabled"] = adapter.enable()
import numpy as np
import tensorflow as tf
import npu_device as npu
from npu_bridge.npu_init import *
from npu_bridge.hccl import hccl_ops
import npu_bridge
result["simulated"] = [npu.__simulated__, npu_bridge.__simulated__]

try:
    get_rank_size()
except ValueError:
    result["rank_size_before_init"] = "ValueError"
npu.open().as_default()
x = tf.constant([1.0, 2.0])
values = [x, None]
var = tf.Variable([7.0])
dataset = tf.data.Dataset.range(6)
optimizer = tf.keras.optimizers.SGD()
result["tf2_unchanged"] = [
    npu.distribute.all_reduce(x) is x,
    npu.distribute.all_reduce(values, "sum") is values,
    npu.distribute.broadcast([var]) is None and var.numpy().tolist() == [7.0],
    npu.distribute.shard_and_rebatch_dataset(dataset, 6) == (dataset, 6),
    npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer) is optimizer,
    hccl_ops.allreduce(x, "sum") is x,
]
graph = tf.Graph()
with graph.as_default():
    w = tf.compat.v1.Variable([1.0])
    wrapped = npu_distributed_optimizer_wrapper(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    wrapped.compute_gradients(tf.reduce_sum(w * 3.0))
    hook = npu_hooks_append([])[0]
    hook.begin()
    result["tf1_graph_op_types"] = sorted({op.type for op in graph.get_operations()} & {"PyFunc", "NoOp"})

npu.npu_device.close()
os.environ["RANK_SIZE"] = "2"
os.environ["CM_WORKER_SIZE"] = "2"
try:
    npu.open()
except ValueError:
    result["both_sizes"] = "ValueError"
del os.environ["CM_WORKER_SIZE"]
try:
    npu.open()
except RuntimeError as exc:
    result["no_rank_table"] = str(exc)
emit()
"""


@pytest.mark.sim
def test_single_card_everything_is_a_no_op(tmp_path):
    (r,) = run_script(tmp_path, SINGLE_CARD)
    assert r["import_before_enable"] == "ImportError"
    assert r["enabled"] is True
    assert r["simulated"] == [True, True]
    assert r["rank_size_before_init"] == "ValueError"
    assert r["tf2_unchanged"] == [True] * 6
    assert r["tf1_graph_op_types"] == ["NoOp"]
    assert r["both_sizes"] == "ValueError"
    assert "RANK_TABLE_FILE" in r["no_rank_table"]


REAL_ADAPTER_PRESENT = """
from npu_migrate_nb.sim import adapter
result["enabled"] = adapter.enable()
result["on_path"] = adapter.ADAPTER_DIR in sys.path
import npu_bridge
result["which"] = getattr(npu_bridge, "WHO", "stand-in")
emit()
"""


@pytest.mark.sim
def test_enable_never_shadows_a_real_adapter(tmp_path):
    real = tmp_path / "site" / "npu_bridge"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("WHO = 'real'\n")
    (r,) = run_script(tmp_path, REAL_ADAPTER_PRESENT, extra_path=str(tmp_path / "site"))
    assert r == {"rank": 0, "enabled": False, "on_path": False, "which": "real", "pitfalls": []}


@pytest.mark.sim
def test_stand_ins_are_not_importable_from_a_normal_interpreter():
    done = subprocess.run([sys.executable, "-c", "import npu_migrate_nb.sim.adapter\nimport npu_bridge"],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr
    for name in ("npu_device", "hccl"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                              env=_env(), timeout=60)
        assert done.returncode != 0, name


TF1_SEMANTICS = """
import tensorflow as real_tf
real_tf.compat.v1.disable_v2_behavior()
_ = (real_tf.keras, real_tf.estimator, real_tf.compat.v1.layers)
sys.modules["tensorflow"] = real_tf.compat.v1
from npu_migrate_nb.sim import adapter
adapter.enable()
import numpy as np
import tensorflow as tf
from npu_bridge.npu_init import *
from npu_bridge.estimator.npu import npu_optimizer

me = result["rank"]

def error_of(call):
    try:
        call()
    except Exception as exc:
        return type(exc).__name__
    return None

with tf.Graph().as_default(), tf.Session() as session:
    x = tf.constant([1.0 + me, 2.0])
    result["float64"] = error_of(lambda: hccl_ops.allreduce(tf.constant([1.0], tf.float64), "sum"))
    summed = hccl_ops.allreduce(x, "sum")
    grad = tf.gradients(summed, x)[0]
    pair = hccl_ops.broadcast([x, tf.constant([7 * (me + 1)])], 1)
    result["broadcast_list"] = [type(pair).__name__, len(pair)]
    sparse = tf.IndexedSlices(tf.fill([1, 2], float(me + 1)), tf.constant([me]), tf.constant([4, 2]))
    gathered = npu_optimizer.allreduce(sparse)
    result["sparse_type"] = type(gathered).__name__
    values = session.run([grad, summed])
    values += session.run([pair[0], pair[1]])
    values += session.run([gathered.values, gathered.indices])
    result["grad"] = values[0].tolist()
    result["broadcast"] = [values[2].tolist(), values[3].tolist()]
    result["sparse"] = [values[4].tolist(), values[5].tolist()]
    result["hook_root_none"] = error_of(lambda: NPUBroadcastGlobalVariablesHook().begin())

os.environ["DEVICE_ID"] = str(me)
with tf.Graph().as_default():
    a = tf.Variable([1.0 * (me + 1)], name="a")
    b = tf.Variable([10.0 * (me + 1), 0.0], name="b")
    loss = tf.reduce_sum(a) * (me + 1) + tf.reduce_sum(b) * 3.0 * (me + 1)
    sharded = NPUDistributedOptimizer(tf.train.GradientDescentOptimizer(1.0), is_weight_update_sharding=True)
    train_op = sharded.minimize(loss)
    owners = [npu_optimizer.util.get_gid_by_weight(v) for v in (a, b)]
    single = tf.Variable([0.0], name="single")
    too_few = error_of(lambda: NPUDistributedOptimizer(tf.train.GradientDescentOptimizer(1.0),
                                                       is_weight_update_sharding=True).minimize(tf.reduce_sum(single)))
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        session.run(train_op)
        result["sharded"] = [v.tolist() for v in session.run([a, b])]
result["owners"] = owners
result["too_few_gradients"] = too_few
del os.environ["DEVICE_ID"]
with tf.Graph().as_default():
    v = tf.Variable([1.0, 2.0])
    result["no_device_id"] = error_of(lambda: NPUDistributedOptimizer(tf.train.GradientDescentOptimizer(1.0),
                                      is_weight_update_sharding=True).minimize(tf.reduce_sum(v)))

# the TF1 Keras callback broadcasts every initialised global variable: moving statistics too
model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,)), tf.keras.layers.BatchNormalization()])
model.compile(optimizer="sgd", loss="mse")
keras_session = tf.keras.backend.get_session()
model.layers[1].moving_mean.load([float(me)] * 2, keras_session)
callback = NPUBroadcastGlobalVariablesCallback(0)
callback.set_model(model)
callback.on_batch_begin(0)
result["moving_mean"] = keras_session.run(model.layers[1].moving_mean).tolist()

os.environ["CM_WORKER_SIZE"] = "2"
result["both_sizes"] = error_of(util.get_ranksize)
del os.environ["CM_WORKER_SIZE"]
emit()
"""

TF2_SEMANTICS = """
from npu_migrate_nb.sim import adapter
adapter.enable()
import numpy as np
import tensorflow as tf
import npu_device as npu
from npu_device.distribute.npu_callbacks import broadcast_keras_model

me = result["rank"]
write_rank_table(WORK)
npu.open().as_default()
model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,),
                             kernel_initializer=tf.keras.initializers.Constant(float(me)))])
broadcast_keras_model(model, root_rank=1)
result["from_rank"] = float(model.trainable_variables[0].numpy()[0, 0])
try:
    npu.distribute.all_reduce([tf.constant([1.0], tf.float64)], "sum")
except TypeError:
    result["float64"] = "TypeError"
npu.npu_device.close()
os.environ["CM_CHIEF_IP"] = "127.0.0.1"
table = os.environ.pop("RANK_TABLE_FILE")
try:
    npu.open()
except RuntimeError as exc:
    result["chief_without_port"] = str(exc)
os.environ["RANK_TABLE_FILE"] = table
try:
    npu.open()
except RuntimeError as exc:
    result["chief_and_table"] = str(exc)
emit()
"""


@pytest.mark.sim
def test_the_real_adapters_semantics_on_two_ranks(tmp_path):
    rank0, rank1 = run_script(tmp_path, TF1_SEMANTICS, ranks=2)
    for r in (rank0, rank1):
        assert r["float64"] == "TypeError"  # HcomAllReduce's registered dtypes
        assert r["grad"] == [2.0, 2.0]  # the gradient of a sum over ranks is the upstream summed
        assert r["broadcast_list"] == ["list", 2] and r["broadcast"] == [[2.0, 2.0], [14]]
        assert r["sparse_type"] == "IndexedSlices" and r["sparse"] == [[[0.5, 0.5], [1.0, 1.0]], [0, 1]]
        assert r["hook_root_none"] == "TypeError"
        assert r["owners"] == [0, 1]
        # a (rank 0's share) and b (rank 1's, which starts at 20 there) each updated by its owner with the
        # mean gradient, then broadcast from it
        assert r["sharded"] == [[1.0 - 1.5], [20.0 - 4.5, 0.0 - 4.5]]
        assert r["too_few_gradients"] == "ValueError" and r["no_device_id"] == "ValueError"
        assert r["moving_mean"] == [0.0, 0.0]
        assert r["both_sizes"] == "ValueError"
    rank0, rank1 = run_script(tmp_path, TF2_SEMANTICS, ranks=2)
    for r in (rank0, rank1):
        assert r["from_rank"] == 0.0  # broadcast_keras_model sends from rank 0 whatever root it is given
        assert r["float64"] == "TypeError"
        assert "CM_CHIEF_PORT" in r["chief_without_port"]
        assert "cannot be configured at the same time" in r["chief_and_table"]
