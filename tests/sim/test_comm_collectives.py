"""The MPI collectives of the simulator (npu_migrate_nb.sim.comm), on real multi-rank MPI jobs.

Each multi-rank test writes one script, runs it with ``mpiexec -n N`` and checks the JSON line
every rank prints, so several behaviours share one (slow) TensorFlow start.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PREAMBLE = r"""
import json, os, sys
os.environ["RANK_ID"] = os.environ.get("PMI_RANK", "0")
os.environ["RANK_SIZE"] = os.environ.get("PMI_SIZE", "1")
sys.path.insert(0, REPO)
result = {}
def emit():
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")  # one write: ranks share the pipe
    sys.stdout.flush()
"""


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    for name in ("RANK_SIZE", "RANK_ID", "CM_WORKER_SIZE", "RANK_TABLE_FILE", "CM_CHIEF_IP"):
        env.pop(name, None)
    return env


def run_script(tmp_path, body, ranks=None, timeout=240, env=None):
    """Run ``body`` on ``ranks`` MPI ranks (or as a plain process); return each rank's RESULT."""
    script = tmp_path / "script.py"
    script.write_text(f"REPO = {REPO!r}\n" + PREAMBLE + textwrap.dedent(body))
    command = [sys.executable, str(script)]
    if ranks:
        command = ["mpiexec", "-n", str(ranks)] + command
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env={**_env(), **(env or {})})
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]
    return done, results


def _by_rank(done, results, ranks):
    assert len(results) == ranks, f"rc={done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return sorted(results, key=lambda r: r["rank"])


COLLECTIVES_2 = """
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me, n = comm.rank(), comm.size()
result["rank"], result["size"] = me, n

# eager: every reduction, mixed dtypes fused in one call, a half-precision value
values = [tf.constant([1.0, 2.0]) * (me + 1), tf.constant([[me + 5]], tf.int32), tf.constant(1.5, tf.float16)]
for op in ("sum", "max", "min", "prod"):
    result["eager_" + op] = [v.numpy().tolist() for v in comm.all_reduce(values, op)]
result["eager_dtypes"] = [v.dtype.name for v in comm.all_reduce(values, "sum")]

# inside tf.function
@tf.function
def reduce_in_function(x):
    return comm.all_reduce([x, 2 * x], "sum", scale=1.0 / n)
result["function"] = [v.numpy().tolist() for v in reduce_in_function(tf.constant([float(me)]))]

# TF1 graph: 40 variables, one collective per gradient, run several times
graph = tf.Graph()
with graph.as_default():
    variables = [tf.compat.v1.Variable(tf.fill([i + 1], float(me + i)), name=f"v{i}") for i in range(40)]
    loss = tf.add_n([tf.reduce_sum(v * v) for v in variables])
    grads = tf.compat.v1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    reduced = [comm.all_reduce([g], "sum")[0] for g, _ in grads]
    broadcast = comm.broadcast([v.value() for v in variables], root=1)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for _ in range(3):
            sums = session.run(reduced)
        received = session.run(broadcast)
result["graph_sums_ok"] = all(np.allclose(sums[i], sum(2.0 * (k + i) for k in range(n))) for i in range(40))
result["graph_broadcast_ok"] = all(np.allclose(received[i], 1.0 + i) for i in range(40))

# ranks that disagree get an error on every rank, and the communicator stays usable
try:
    comm.allreduce_arrays([np.ones(3 + me, np.float32)])
    result["mismatch"] = None
except comm.CollectiveMismatchError as exc:
    result["mismatch"] = str(exc)
result["after_mismatch"] = comm.allreduce_arrays([np.ones(2, np.float64)])[0].tolist()
result["current_after"] = comm.current_collective()
result["completed"] = comm.status()["completed"]
emit()
"""


@pytest.mark.sim
def test_collectives_on_two_ranks_eager_function_and_graph(tmp_path):
    done, results = run_script(tmp_path, COLLECTIVES_2, ranks=2)
    rank0, rank1 = _by_rank(done, results, 2)
    for r in (rank0, rank1):
        assert r["size"] == 2
        assert r["eager_sum"] == [[3.0, 6.0], [[11]], 3.0]
        assert r["eager_max"] == [[2.0, 4.0], [[6]], 1.5]
        assert r["eager_min"] == [[1.0, 2.0], [[5]], 1.5]
        assert r["eager_prod"] == [[2.0, 8.0], [[30]], 2.25]
        assert r["eager_dtypes"] == ["float32", "int32", "float16"]
        assert r["function"] == [[0.5], [1.0]]
        assert r["graph_sums_ok"] is True
        assert r["graph_broadcast_ok"] is True
        assert "ranks reached different collectives" in r["mismatch"]
        assert "rank 0:" in r["mismatch"] and "rank 1:" in r["mismatch"]
        assert r["after_mismatch"] == [2.0, 2.0]
        assert r["current_after"] is None
    assert rank0["completed"] == rank1["completed"]


NATIVE_2 = """
import threading, time
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me, n = comm.rank(), comm.size()
result["rank"] = me
rng = np.random.default_rng(7 + me)
values = [rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(7).astype(np.float32)]
integers = [np.arange(6, dtype=np.int64) * (me + 2), np.array([me + 3], np.int32)]

@tf.function
def reduce_in_graph(tensors, op, scale=None):
    return comm.all_reduce(tensors, op, scale=scale)

def op_types(tensors, op):
    graph = reduce_in_graph.get_concrete_function([tf.constant(t) for t in tensors], op).graph
    return sorted({o.type for o in graph.get_operations() if o.name.startswith("all_reduce")})

# the graph path against the numpy path on the same arrays: identical bits
same = {}
for op in ("sum", "max", "min", "prod"):
    graph = [t.numpy() for t in reduce_in_graph([tf.constant(v) for v in values], op)]
    same[op] = all(np.array_equal(g, e) for g, e in zip(graph, comm.allreduce_arrays(values, op)))
graph = [t.numpy() for t in reduce_in_graph([tf.constant(v) for v in values], "sum", 1.0 / n)]
same["mean"] = all(np.array_equal(g, e) for g, e in zip(graph, comm.allreduce_arrays(values, "sum", scale=1.0 / n)))
same["int64"] = np.array_equal(reduce_in_graph([tf.constant(integers[0])], "sum")[0].numpy(),
                               comm.allreduce_arrays(integers[:1])[0])
result["same_as_numpy_path"] = same
result["kernels"] = {"float32": op_types(values, "sum"), "mixed": op_types(integers, "sum")}

# broadcast in a graph: several dtypes in one call, and one tensor alone, from rank 1
@tf.function
def broadcast_in_graph(tensors):
    return comm.broadcast(tensors, root=1)

sent = [values[0], integers[0], np.array([me % 2 == 0, True]), np.full(3, me + 0.5, np.float16)]
graph = [t.numpy() for t in broadcast_in_graph([tf.constant(v) for v in sent])]
single = broadcast_in_graph([tf.constant(values[1])])[0].numpy()
result["broadcast_same_as_numpy_path"] = (all(np.array_equal(g, e) for g, e in zip(graph, comm.broadcast_arrays(sent, 1)))
                                          and np.array_equal(single, comm.broadcast_arrays(values[1:], 1)[0]))
result["broadcast_dtypes"] = [g.dtype.name for g in graph]
broadcast_graph = broadcast_in_graph.get_concrete_function([tf.constant(v) for v in sent]).graph
result["kernels"]["broadcast"] = sorted({o.type for o in broadcast_graph.get_operations()
                                         if o.name.startswith("broadcast")})

# while one rank waits in a graph all-reduce, it says which one
if me == 0:
    seen = []
    waiter = threading.Thread(target=lambda: reduce_in_graph([tf.constant(values[1])], "sum"))
    waiter.start()
    while comm.current_collective() is None:
        time.sleep(0.005)
    seen.append(comm.current_collective())
    seen.append(comm.status()["waiting_s"] is not None)
    waiter.join()
    result["seen_while_waiting"] = seen
else:
    time.sleep(1.0)
    reduce_in_graph([tf.constant(values[1])], "sum")
result["current_after"] = comm.current_collective()

# results are views of recycled fused buffers: a buffer is reused only once nothing refers to it
big = [rng.standard_normal(1 << 18).astype(np.float32), rng.standard_normal(1001).astype(np.float32)]
held = {"graph": reduce_in_graph([tf.constant(v) for v in big], "sum"),
        "eager": comm.all_reduce([tf.constant(v) for v in big], "sum")}
kept = {path: [t.numpy().copy() for t in tensors] for path, tensors in held.items()}
for k in range(3):
    reduce_in_graph([tf.constant(v * (k + 2)) for v in big], "sum")
    comm.all_reduce([tf.constant(v * (k + 2)) for v in big], "sum")
result["held_results_unchanged"] = {path: all(np.array_equal(t.numpy(), c) for t, c in zip(held[path], kept[path]))
                                    for path in held}
# where each result lies (``.numpy()`` would copy): on 64-byte boundaries, as TensorFlow needs
result["aligned"] = all(t._numpy().ctypes.data % 64 == 0 for tensors in held.values() for t in tensors)

# ranks that disagree inside graphs fail on every rank with the same message; the next call works
try:
    reduce_in_graph([tf.ones([3 + me])], "sum")
    result["mismatch"] = None
except tf.errors.OpError as exc:
    result["mismatch"] = exc.message
result["after_mismatch"] = reduce_in_graph([tf.ones([2])], "sum")[0].numpy().tolist()
result["completed"] = comm.status()["completed"]
emit()
"""


@pytest.mark.sim
def test_graph_collectives_run_in_the_native_kernels_with_the_numpy_paths_results(tmp_path):
    done, results = run_script(tmp_path, NATIVE_2, ranks=2)
    rank0, rank1 = _by_rank(done, results, 2)
    for r in (rank0, rank1):
        assert r["kernels"] == {"float32": ["NpuSimAllReduce"], "mixed": ["PyFunc"], "broadcast": ["NpuSimBroadcast"]}
        assert r["broadcast_same_as_numpy_path"] is True
        assert r["broadcast_dtypes"] == ["float32", "int64", "bool", "float16"]
        assert r["same_as_numpy_path"] == {"sum": True, "max": True, "min": True, "prod": True,
                                           "mean": True, "int64": True}
        assert "ranks reached different collectives" in r["mismatch"]
        assert "rank 0: all_reduce #" in r["mismatch"] and "rank 1: all_reduce #" in r["mismatch"]
        assert r["after_mismatch"] == [2.0, 2.0]
        assert r["current_after"] is None
        assert r["held_results_unchanged"] == {"graph": True, "eager": True}
        assert r["aligned"] is True
    assert rank0["seen_while_waiting"][0].startswith("all_reduce #") and rank0["seen_while_waiting"][1]
    assert rank0["completed"] == rank1["completed"]


@pytest.mark.sim
@pytest.mark.parametrize("env", [{"NPU_SIM_NATIVE": "0"}, {"CXX": "/bin/false"}], ids=["switched-off", "no-compiler"])
def test_without_the_native_kernel_graph_all_reduce_takes_the_numpy_path(tmp_path, env):
    env = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # an empty cache: "no-compiler" must build
    done, results = run_script(tmp_path, NATIVE_2, ranks=2, env=env)
    for r in _by_rank(done, results, 2):
        assert r["kernels"] == {"float32": ["PyFunc"], "mixed": ["PyFunc"], "broadcast": ["PyFunc"]}
        assert all(r["same_as_numpy_path"].values()) and r["broadcast_same_as_numpy_path"] is True
        assert "ranks reached different collectives" in r["mismatch"]
    if env.get("CXX"):
        assert done.stderr.count("native all-reduce unavailable") == 2  # one line per rank


MEAN_4 = """
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me, n = comm.rank(), comm.size()
result["rank"] = me
rng = np.random.default_rng(me)
local = rng.standard_normal(1000).astype(np.float32)
everyone = np.empty((n, 1000), np.float32)
from mpi4py import MPI
MPI.COMM_WORLD.Allgather(local, everyone)
summed = comm.all_reduce([tf.constant(local)], "sum")[0].numpy()
mean = comm.all_reduce([tf.constant(local)], "sum", scale=1.0 / n)[0].numpy()
result["sum_matches_mpi"] = bool(np.array_equal(summed, comm.allreduce_arrays([local])[0]))
result["sum_close"] = bool(np.allclose(summed, everyone.sum(axis=0), rtol=1e-5, atol=1e-5))
result["mean_is_sum_times_reciprocal"] = bool(np.array_equal(mean, summed * np.float32(1.0 / n)))
result["mean_is_sum_over_n"] = bool(np.array_equal(mean, summed / np.float32(n)))
received = comm.broadcast([tf.constant(local)], root=3)[0].numpy()
result["broadcast_from_3"] = bool(np.array_equal(received, everyone[3]))
emit()
"""


@pytest.mark.sim
def test_mean_is_sum_times_one_over_n_on_four_ranks(tmp_path):
    done, results = run_script(tmp_path, MEAN_4, ranks=4)
    for r in _by_rank(done, results, 4):
        assert r == {"rank": r["rank"], "sum_matches_mpi": True, "sum_close": True,
                     "mean_is_sum_times_reciprocal": True, "mean_is_sum_over_n": True,
                     "broadcast_from_3": True}


INTERRUPT_2 = """
import os, signal, threading, time
import numpy as np
from npu_migrate_nb.sim import comm

me = comm.rank()
result["rank"] = me
comm.barrier()
if me == 0:
    seen = []
    def interrupt_when_waiting():
        while comm.current_collective() is None:
            time.sleep(0.01)
        seen.append(comm.current_collective())
        seen.append(comm.status()["current"])
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt_when_waiting, daemon=True).start()
    try:
        comm.allreduce_arrays([np.ones(4, np.float32)])   # rank 1 never joins
        result["outcome"] = "returned"
    except KeyboardInterrupt:
        result["outcome"] = "KeyboardInterrupt"
    result["seen"] = seen
    result["broken"] = comm.status()["broken"]
    try:
        comm.allreduce_arrays([np.ones(4, np.float32)])
    except comm.CollectiveError as exc:
        result["next_call"] = str(exc)
    # also to a file: the exit aborts MPI, and mpiexec can drop what it had not yet forwarded
    with open(os.environ["INTERRUPT_RESULT"], "w") as out:
        json.dump(result, out)
    emit()
else:
    emit()
    time.sleep(60)
"""


@pytest.mark.sim
def test_a_collective_that_never_completes_can_be_interrupted(tmp_path):
    # rank 0 exits through MPI_Abort (its communicator is broken), which also ends rank 1
    written = tmp_path / "rank0.json"
    done, _ = run_script(tmp_path, INTERRUPT_2, ranks=2, timeout=120, env={"INTERRUPT_RESULT": str(written)})
    assert written.exists(), f"rc={done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rank0 = json.loads(written.read_text())
    assert rank0["outcome"] == "KeyboardInterrupt"
    assert rank0["seen"][0].startswith("all_reduce #")
    assert rank0["seen"][1] == rank0["seen"][0]
    assert rank0["seen"][0] in rank0["broken"]
    assert "communicator unusable" in rank0["next_call"]
    assert done.returncode != 0


ABORT_2 = """
import threading, time
import numpy as np
from npu_migrate_nb.sim import comm

me = comm.rank()
result["rank"] = me
comm.barrier()
if me == 0:
    seen = []
    def abort_when_waiting():
        while comm.current_collective() is None:
            time.sleep(0.01)
        seen.append(comm.current_collective())
        comm.abort("cell timed out")
    threading.Thread(target=abort_when_waiting, daemon=True).start()
    try:
        comm.allreduce_arrays([np.ones(4, np.float32)])   # rank 1 never joins
        result["outcome"] = "returned"
    except comm.CollectiveAborted as exc:
        result["outcome"] = str(exc)
    result["seen"] = seen
    result["broken"] = comm.status()["broken"]
    # also to a file: the exit aborts MPI (the communicator is broken), and mpiexec, tearing the
    # ranks down, can drop what it had not yet forwarded of their output
    with open(os.environ["ABORT_RESULT"], "w") as out:
        json.dump(result, out)
    emit()
else:
    emit()
    time.sleep(60)
"""


@pytest.mark.sim
def test_abort_ends_a_wait_and_current_collective_names_it(tmp_path):
    written = tmp_path / "rank0.json"
    done, _ = run_script(tmp_path, ABORT_2, ranks=2, timeout=120, env={"ABORT_RESULT": str(written)})
    assert written.exists(), f"rc={done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    r = json.loads(written.read_text())
    assert r["seen"][0].startswith("all_reduce #")
    assert r["outcome"].startswith("cell timed out") and f"while waiting in {r['seen'][0]}" in r["outcome"]
    assert r["seen"][0] in r["broken"]


LATE_RANK_2 = """
import time
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me = comm.rank()
result["rank"] = me
values = [tf.ones([1000])]
in_graph = tf.function(lambda: comm.all_reduce(values, "sum"))
in_graph()  # traced, the native kernel loaded
from mpi4py import MPI
cpu_while_waiting = {}
# MPICH's own blocking wait, the reference: it polls on its core for as long as it waits
paths = (("mpich", MPI.COMM_WORLD.Barrier), ("eager", lambda: comm.all_reduce(values, "sum")), ("graph", in_graph))
for path, call in paths:
    comm.barrier()
    if me == 1:
        time.sleep(2.0)
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    cpu_while_waiting[path] = (time.process_time() - cpu, time.perf_counter() - wall)
result["cpu_while_waiting"] = cpu_while_waiting
emit()
"""


@pytest.mark.sim
def test_a_rank_waiting_for_a_late_rank_sleeps_instead_of_spinning(tmp_path):
    # judged against MPICH's own wait in the same run, which keeps rank 0 polling on its core: on an
    # idle machine it burns ~the whole 2 s and a napping rank ~2% of that; a machine loaded by other
    # work takes from the spinning rank and adds to the napping rank's wake-ups, the ratio stays far below 1/2
    done, results = run_script(tmp_path, LATE_RANK_2, ranks=2)
    waits = _by_rank(done, results, 2)[0]["cpu_while_waiting"]
    spinning_cpu, _ = waits.pop("mpich")
    for path, (cpu, wall) in waits.items():
        assert wall > 1.5, path
        assert cpu < 0.5 * spinning_cpu, (path, cpu, spinning_cpu)


NOOP_SINGLE = """
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

result["rank"] = comm.rank()
result["size"] = comm.size()
result["under_mpi"] = comm.under_mpi()
x = tf.constant([1.0, 2.0])
result["eager"] = comm.all_reduce([x], "sum")[0].numpy().tolist()
result["broadcast"] = comm.broadcast([x], 0)[0].numpy().tolist()
result["mpi_imported"] = "mpi4py.MPI" in sys.modules
os.environ["RANK_SIZE"] = "2"
try:
    comm.all_reduce([x], "sum")
    result["two_without_mpi"] = "ran"
except comm.CollectiveError as exc:
    result["two_without_mpi"] = str(exc)
os.environ["CM_WORKER_SIZE"] = "2"
try:
    comm.env_rank_size()
except ValueError as exc:
    result["both_sizes"] = str(exc)
emit()
"""


@pytest.mark.sim
def test_rank_size_one_is_a_no_op_without_mpi(tmp_path):
    done, results = run_script(tmp_path, NOOP_SINGLE)
    assert results, done.stderr[-3000:]
    (r,) = results
    assert (r["rank"], r["size"], r["under_mpi"]) == (0, 1, False)
    assert r["eager"] == [1.0, 2.0] and r["broadcast"] == [1.0, 2.0]
    assert r["mpi_imported"] is False
    assert "not started by mpiexec" in r["two_without_mpi"]
    assert "CM_WORKER_SIZE" in r["both_sizes"]


LARGE_MEANS = """
import hashlib
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me, n = comm.rank(), comm.size()
result["rank"] = me
rng = np.random.default_rng(11 + me)
# 1.2 MB and 4 MB: above the 1 MB where a mean that is not a power of two is scattered
shapes = {"one": [(1_000_003,)], "list": [(300, 1001), (7,), (5, 5, 3), (700_001,)]}

@tf.function
def mean_in_graph(tensors, divide):
    if divide:  # TF1's way: sum, then divided by N
        return comm.all_reduce(tensors, "sum", divisor=float(n))
    return comm.all_reduce(tensors, "sum", scale=1.0 / n)

for name, wanted in shapes.items():
    values = [rng.standard_normal(s).astype(np.float32) for s in wanted]
    summed = comm.allreduce_arrays(values, "sum")
    for divide in (False, True):
        label = f"{name}/{'divisor' if divide else 'scale'}"
        numpy_path = comm.allreduce_arrays(values, "sum", **({"divisor": float(n)} if divide else {"scale": 1.0 / n}))
        native = [t.numpy() for t in mean_in_graph([tf.constant(v) for v in values], divide)]
        result[label] = {
            "native_is_numpy_path": all(np.array_equal(a, b) for a, b in zip(native, numpy_path)),
            "exactly_sum_over_n": all(np.array_equal(a, s / np.float32(n)) for a, s in zip(native, summed)),
            "close_to_sum_over_n": all(np.allclose(a, s / np.float32(n), rtol=1e-6, atol=1e-7)
                                       for a, s in zip(native, summed)),
            "shapes": [list(a.shape) for a in native],
        }
# every rank holds the same bits (each share was scaled by one rank and gathered by all)
digests = comm._mpi().COMM_WORLD.allgather(hashlib.sha256(b"".join(a.tobytes() for a in native)).hexdigest())
result["same_on_every_rank"] = len(set(digests)) == 1
emit()
"""


@pytest.mark.sim
@pytest.mark.parametrize("ranks", [2, 3])
def test_large_means_are_sum_over_n_on_both_paths(tmp_path, ranks):
    """A mean over a power-of-two rank count is scaled while fused (bits of sum, then scale); over
    3 ranks, above 1 MB, it is a reduce-scatter, a scale and an all-gather: the sum's order may
    change the last bit, so it is close, and the native kernel still gives the numpy path's bits."""
    done, results = run_script(tmp_path, LARGE_MEANS, ranks=ranks, timeout=300)
    for r in _by_rank(done, results, ranks):
        for label in ("one/scale", "one/divisor", "list/scale", "list/divisor"):
            case = r[label]
            assert case["native_is_numpy_path"], (ranks, label)
            assert case["close_to_sum_over_n"], (ranks, label)
            if ranks == 2:  # a + b is b + a: no order to differ in
                assert case["exactly_sum_over_n"], label
        assert r["list/scale"]["shapes"] == [[300, 1001], [7], [5, 5, 3], [700001]]
        assert r["same_on_every_rank"]


BROADCAST_VARIABLES = """
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

me, n = comm.rank(), comm.size()
result["rank"] = me

def address(variable):
    value = variable.value()
    return int(value._numpy().ctypes.data) if value.dtype != tf.bool else 0

def values(variables):
    return [v.numpy().tolist() for v in variables]

def asks_for_huge_pages(address, nbytes):
    # madvise(MADV_HUGEPAGE) marks the mapping "hg" in /proc/self/smaps (the buffer's whole 2 MB
    # pages only: its first and last bytes may lie in unmarked parts of the mapping)
    overlaps = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(x, 16) for x in head.split("-"))
            overlaps = low < address + nbytes and address < high
        elif head == "VmFlags:" and overlaps and "hg" in line.split():
            return True
    return False

# several dtypes in one call, eagerly, from rank 1
mixed = [tf.Variable(np.full((3, 4), me, np.float32)), tf.Variable(np.arange(5) * (me + 1)),
         tf.Variable([me % 2 == 0, True]), tf.Variable(np.full(3, me + 0.5, np.float16))]
held = mixed[0].value()  # a tensor read before: it must keep the value it was read with
comm.broadcast_variables(mixed, root=1)
result["mixed"] = values(mixed)
result["held"] = held.numpy().tolist()

# one large variable received into its own buffer, in a tf.function, from rank 0
large = tf.Variable(np.full(1 << 20, me, np.float32))
before = address(large)
broadcast_in_graph = tf.function(lambda: comm.broadcast_variables([large], root=0) and None)
broadcast_in_graph()
first = address(large)
broadcast_in_graph()
result["large"] = float(large.numpy().sum())
result["same_buffer"] = address(large) == first
result["moved_once"] = first != before
result["huge_pages_asked"] = asks_for_huge_pages(first, 4 << 20)
result["kernels"] = sorted({o.type for o in broadcast_in_graph.get_concrete_function().graph.get_operations()
                            if o.type.startswith(("NpuSim", "PyFunc", "AssignVariable"))})

# a model's list (mixed sizes, 5 MB): moved once into one buffer, each variable at its 64-byte
# boundary, then sent and received where the variables lie, even after an update in place
model = [tf.Variable(np.full(s, me + 1, np.float32)) for s in (1000001, 7, 300003, 2, 5)]
broadcast_model = tf.function(lambda: comm.broadcast_variables(model, root=0) and None)
broadcast_model()
# the function takes the list as one input (TensorFlow's cost of a call grows with its inputs)
result["list_inputs"] = [len(broadcast_model.get_concrete_function().captured_inputs),
                         len(tf.function(lambda: [v.read_value() for v in model]).get_concrete_function().captured_inputs)]
laid_out = [address(v) for v in model]
expected, end = [], laid_out[0]
for v in model:
    expected.append(end)
    end = (end + 4 * int(np.prod(v.shape)) + 63) // 64 * 64
result["list_contiguous"] = laid_out == expected
model[2].assign_sub(tf.fill(model[2].shape, float(me + 1)))  # as an optimizer's update: in place
result["update_in_place"] = address(model[2]) == laid_out[2]
kept = model[2].value()  # a read held over the next broadcast keeps its value; the list moves
broadcast_model()
result["list_values"] = [float(v.numpy().sum()) for v in model]
result["kept"] = float(kept.numpy().sum())
result["list_moved_for_the_held_read"] = [address(v) for v in model] != laid_out
del kept
again = [address(v) for v in model]
broadcast_model()
result["list_stays"] = [address(v) for v in model] == again
result["list_huge_pages_asked"] = asks_for_huge_pages(again[0], 4 * 1000001)

# a variable made and initialized by the function that broadcasts it (it does not exist at tracing)
lazy = []
@tf.function
def make_and_broadcast():
    if not lazy:
        lazy.append(tf.Variable(tf.fill([3], float(me + 2))))
    comm.broadcast_variables(lazy, root=1)
make_and_broadcast()
result["lazy"] = lazy[0].numpy().tolist()

# a TF1 graph with reference variables: the broadcast-and-assign path, run by a session
graph = tf.Graph()
with graph.as_default():
    reference = tf.compat.v1.Variable(np.full(4, me, np.float32), use_resource=False)
    op = comm.broadcast_variables([reference], root=1)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(reference.initializer)
        session.run(op)
        result["reference"] = session.run(reference).tolist()
emit()
"""


@pytest.mark.sim
def test_broadcast_variables_in_place(tmp_path):
    done, results = run_script(tmp_path, BROADCAST_VARIABLES, ranks=2, timeout=300)
    rank0, rank1 = _by_rank(done, results, 2)
    for r in (rank0, rank1):
        assert r["mixed"] == [[[1.0] * 4] * 3, [0, 2, 4, 6, 8], [False, True], [1.5] * 3]
        assert r["large"] == 0.0  # rank 0's zeros everywhere
        # the first broadcast gives a large variable a buffer that asks for huge pages (MPI's copy
        # into 4 KB pages ran at half speed), once: later ones receive where the variable lies
        assert r["moved_once"] and r["huge_pages_asked"]
        assert r["same_buffer"]
        assert r["kernels"] == ["NpuSimBroadcastVariableList"]
        assert r["list_inputs"] == [1, 5]
        assert r["lazy"] == [3.0] * 3  # rank 1's
        assert r["reference"] == [1.0] * 4
        assert r["list_contiguous"] and r["update_in_place"] and r["list_stays"], r
        assert r["list_values"] == [1000001.0, 7.0, 0.0, 2.0, 5.0]  # rank 0's, its update included
        assert r["list_moved_for_the_held_read"] == (r["rank"] == 1)  # only a receiver must not write
        assert r["list_huge_pages_asked"]
    assert rank0["kept"] == 0.0 and rank1["kept"] == -300003.0  # as read before the broadcast
    assert rank0["held"] == [[0.0] * 4] * 3  # what rank 0 had read stays as read
    assert rank1["held"] == [[1.0] * 4] * 3


SHARED_SUMS = """
import hashlib
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

comm.init()
me, n = comm.rank(), comm.size()
result["rank"] = me
rng = np.random.default_rng(me)
sizes = [300001, 7, 25, 70001]  # 1.5 MB of float32: several 256 KB chunks, a tensor across chunk ends
floats = [rng.standard_normal(s).astype(np.float32) for s in sizes]
ints = [np.arange(s, dtype=np.int64) * (me + 1) for s in sizes]
reference = [comm._mpi().COMM_WORLD.allreduce(a) for a in floats]  # MPI's own sum, pickled

def graph(values, **kwargs):
    return [t.numpy() for t in tf.function(lambda: comm.all_reduce([tf.constant(v) for v in values], **kwargs))()]

eager = comm.allreduce_arrays(floats, "sum")
native = graph(floats, op="sum")
result["native_is_numpy_path"] = all(np.array_equal(a, b) for a, b in zip(eager, native))
result["close_to_mpi"] = all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(eager, reference))
result["ints_exact"] = all(np.array_equal(a, np.arange(a.size) * (n * (n + 1) // 2))
                           for a in comm.allreduce_arrays(ints, "sum") + graph(ints, op="sum"))
mean_numpy = comm.allreduce_arrays(floats, "sum", divisor=n)
mean_native = graph(floats, op="sum", divisor=n)
result["mean_native_is_numpy_path"] = all(np.array_equal(a, b) for a, b in zip(mean_numpy, mean_native))
result["mean_close"] = all(np.allclose(a, b / np.float32(n), rtol=1e-5, atol=1e-6) for a, b in zip(mean_numpy, reference))
result["shapes"] = [list(a.shape) for a in native]
result["numpy_sums"] = comm.shared_sums
result["native_sums"] = comm._native.lib.npu_sim_shared_sums() if comm._native is not None else None
digest = hashlib.sha256(b"".join(a.tobytes() for a in eager + mean_numpy)).hexdigest()
result["same_on_every_rank"] = len(set(comm._mpi().COMM_WORLD.allgather(digest))) == 1
emit()
"""


@pytest.mark.sim
@pytest.mark.parametrize("ranks", [2, 3])
def test_large_sums_go_through_shared_memory_in_chunks_on_both_paths(tmp_path, ranks):
    """Sums above the threshold go through the shared window (small slots here: many chunks, a
    tensor split across them): integers exact, floats MPI's sum up to order, the native kernel
    the numpy path's bits, every rank the same bits."""
    env = {"NPU_SIM_SHARED_MIN_BYTES": "65536", "NPU_SIM_SHARED_SLOT_BYTES": str(256 * 1024)}
    done, results = run_script(tmp_path, SHARED_SUMS, ranks=ranks, timeout=300, env=env)
    for r in _by_rank(done, results, ranks):
        assert r["ints_exact"] and r["close_to_mpi"] and r["mean_close"], r
        assert r["native_is_numpy_path"] and r["mean_native_is_numpy_path"], r
        assert r["shapes"] == [[300001], [7], [25], [70001]]
        assert r["same_on_every_rank"]
        assert r["numpy_sums"] == 3 and r["native_sums"] == 3, r  # each path took it, nothing else did


@pytest.mark.sim
def test_without_the_native_kernel_large_sums_still_go_through_shared_memory(tmp_path):
    env = {"NPU_SIM_NATIVE": "0", "NPU_SIM_SHARED_MIN_BYTES": "65536", "NPU_SIM_SHARED_SLOT_BYTES": str(256 * 1024)}
    done, results = run_script(tmp_path, SHARED_SUMS, ranks=2, timeout=300, env=env)
    for r in _by_rank(done, results, 2):
        assert r["ints_exact"] and r["close_to_mpi"] and r["mean_close"] and r["same_on_every_rank"], r
        assert r["native_sums"] is None and r["numpy_sums"] == 6, r  # graph calls took the numpy path too


SHARED_RESULTS = """
import numpy as np
import tensorflow as tf
from npu_migrate_nb.sim import comm

comm.init()
me, n = comm.rank(), comm.size()
result["rank"] = me
lib = comm._native.lib
sizes = [300001, 7, 70001]  # 1.5 MB of float32 through 256 KB slots: chunks, a tensor across their ends
base = [np.arange(s, dtype=np.float32) % 1000 for s in sizes]

def values(call):  # rank- and call-dependent, exact in float32
    return [b * np.float32(me + 1) + np.float32(call) for b in base]

def expected(call, divisor=1):
    return [(b * np.float32(n * (n + 1) // 2) + np.float32(n * call)) / np.float32(divisor) for b in base]

step = tf.function(lambda xs: comm.all_reduce(list(xs), op="sum"))
doubled = tf.function(lambda xs: [t * 2.0 for t in comm.all_reduce(list(xs), op="sum")])
mean = tf.function(lambda xs: comm.all_reduce(list(xs), op="sum", divisor=n))

def run(function, call):
    return function([tf.constant(v) for v in values(call)])

def exact(tensors, arrays):
    return all(np.array_equal(t.numpy(), a) for t, a in zip(tensors, arrays))

trace = []
def note(label):
    trace.append([label, int(lib.npu_sim_shared_sums()), int(lib.npu_sim_region_sums()), int(lib.npu_sim_regions())])

ok = exact(run(step, 1), expected(1)); note("first: sizes the slots, copies out")
ok &= exact(run(step, 2), expected(2)); note("region 0, released")
held = run(step, 3); note("region 0, held")
ok &= exact(run(step, 4), expected(4)); note("region 0 busy: region 1")
held_too = run(step, 5); note("region 1, held")
ok &= exact(run(step, 6), expected(6)); note("both busy: copies out")
result["held_kept"] = exact(held, expected(3)) and exact(held_too, expected(5))  # never written again
del held, held_too
ok &= exact(run(step, 7), expected(7)); note("released: region 0 again")
# held on one rank only: no rank may write that region (rank 0 offers it no more)
kept = run(step, 8) if me == 0 else None
if me != 0:
    run(step, 8)
note("region 0; rank 0 holds it")
ok &= exact(run(step, 9), expected(9)); note("region 1 on every rank")
result["one_rank_held_kept"] = me != 0 or exact(kept, expected(8))
del kept
# an op consuming the outputs never writes into the region (its buffer is never forwarded)
result["consumer"] = all(exact(run(doubled, 10), [e * np.float32(2) for e in expected(10)]) for _ in range(3))
result["mean"] = exact(run(mean, 11), expected(11, divisor=n))
result["exact"] = bool(ok)
result["trace"] = trace
emit()
"""


@pytest.mark.sim
@pytest.mark.parametrize("ranks", [2, 3])
def test_large_sums_land_in_a_shared_region_written_again_only_once_every_rank_let_go(tmp_path, ranks):
    """The results of a large sum are slices of one region every rank shares, no copy-out; a region
    that any rank still holds an output of is not written: another is made (two at most), then the
    results are copied out as before; what a rank held keeps its values."""
    env = {"NPU_SIM_SHARED_MIN_BYTES": "65536", "NPU_SIM_SHARED_SLOT_BYTES": str(256 * 1024)}
    done, results = run_script(tmp_path, SHARED_RESULTS, ranks=ranks, timeout=300, env=env)
    for r in _by_rank(done, results, ranks):
        assert r["exact"] and r["held_kept"] and r["one_rank_held_kept"], r
        assert r["consumer"] and r["mean"], r
        # [label, shared sums, of them through a region, regions made]
        assert [row[1:] for row in r["trace"]] == [
            [1, 0, 0], [2, 1, 1], [3, 2, 1], [4, 3, 2], [5, 4, 2], [6, 4, 2], [7, 5, 2], [8, 6, 2], [9, 7, 2]], r


@pytest.mark.parametrize("factor", [None, 0.5])
@pytest.mark.parametrize("chunk", [16, 48, 1000])
def test_the_fused_buffer_assembled_chunk_by_chunk_is_the_fused_buffer(factor, chunk):
    """What each rank writes to its slot, a chunk at a time (tensors cut at chunk ends, the padding
    between them zeroed), is exactly the fused buffer of the other paths."""
    import numpy as np
    sys.path.insert(0, REPO)
    from npu_migrate_nb.sim import comm

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(size).astype(np.float32) for size in (5, 37, 1, 300, 17)]
    offsets, count = comm._layout([a.size for a in arrays], 4)
    whole = np.full(count, np.nan, np.float32)
    comm._fuse_into(whole, arrays, offsets, factor)
    pieces = []
    for start in range(0, count, chunk):
        part = np.full(min(chunk, count - start), np.nan, np.float32)
        comm._fuse_range(part, arrays, offsets, start, factor)
        pieces.append(part)
    assert np.array_equal(np.concatenate(pieces), whole)
    expected = np.zeros(count, np.float32)
    for a, offset in zip(arrays, offsets):
        expected[offset:offset + a.size] = a * np.float32(factor or 1)
    assert np.array_equal(whole, expected)


SMALL_DEV_SHM = SHARED_SUMS.replace("sizes = [300001, 7, 25, 70001]", "sizes = [3000001, 7, 25, 2000001]").replace(
    "emit()", """result["numpy_slot"] = int(comm._slots[0].size) if comm._slots is not None else 0
result["native_slot"] = comm._native.lib.npu_sim_shared_slot_bytes() if comm._native is not None else None
emit()""")


@pytest.mark.sim
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounting a small /dev/shm needs root")
@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("dev_shm", ["40m", "4m"])
def test_a_small_dev_shm_gets_smaller_slots_or_mpi_instead_of_a_bus_error(tmp_path, dev_shm, native):
    """Docker's /dev/shm is 64 MB by default. A window of 32 MB slots beyond its free space maps and
    then dies of SIGBUS at the first page the tmpfs cannot give: the slots are sized to half of what
    is free (40 MB: smaller slots, 20 MB sums in chunks), or, under 4 MB (a 4 MB tmpfs), large sums go
    through MPI_Allreduce with a one-line note. Each rank runs in a mount namespace of its own with
    a tmpfs of that size on /dev/shm (MPICH's own segments live there too)."""
    script = tmp_path / "script.py"
    script.write_text(f"REPO = {REPO!r}\n" + PREAMBLE + textwrap.dedent(SMALL_DEV_SHM))
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount -t tmpfs -o size={dev_shm} tmpfs /dev/shm && exec mpiexec -n 2 "$0" "$1"',
               sys.executable, str(script)]
    env = {**_env(), "NPU_SIM_NATIVE": native, "NPU_SIM_SHARED_MIN_BYTES": "65536"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    for r in _by_rank(done, results, 2):
        assert r["ints_exact"] and r["close_to_mpi"] and r["mean_close"] and r["same_on_every_rank"], r
        assert r["native_is_numpy_path"] and r["mean_native_is_numpy_path"], r
        assert r["shapes"] == [[3000001], [7], [25], [2000001]]
        slot = r["numpy_slot"] if native == "0" else r["native_slot"]
        sums = r["numpy_sums"] + (r["native_sums"] or 0)
        if dev_shm == "40m":  # 2 slots within half of at most 40 MB, under the 32 MB configured; chunks
            assert 4 << 20 <= slot <= 10 << 20 and sums == 6, r
        else:
            assert slot == 0 and sums == 0, r
    if dev_shm == "4m":
        assert done.stderr.count("/dev/shm has") == 1 and "--shm-size" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("configured, free, ranks, slot", [
    (32 << 20, -1, 8, 32 << 20),            # no /dev/shm to ask: as configured
    (32 << 20, 24 << 30, 8, 32 << 20),      # a roomy one: as configured
    (32 << 20, 64 << 20, 2, 16 << 20),      # half of what is free, in pages
    (32 << 20, 22 << 20, 8, 0),             # Docker's 64 MB at 8 ranks (MPICH took 41): 1.4 MB, too small
    (32 << 20, 100 << 20 | 123, 3, 4266 * 4096),  # 17 476 266 bytes rounded down to whole pages
    (256 << 10, 1 << 20, 2, 256 << 10),     # a small configured slot fits, and is kept
    (256 << 10, 600 << 10, 2, 0),           # half of that: 150 KB is below the configured 256 KB
])
def test_the_slot_is_sized_to_half_of_what_dev_shm_has_free(configured, free, ranks, slot):
    sys.path.insert(0, REPO)
    from npu_migrate_nb.sim import comm

    assert comm._slot_that_fits(configured, free, ranks) == slot
