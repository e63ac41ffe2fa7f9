"""Cluster and training-epoch benchmarks for the simulated runner. Prints figures and ratios.

1. Cluster ready (4 ranks, TensorFlow imported in every rank) vs a bare ipyparallel MPI cluster
   start (4 engines) plus one TensorFlow import.                               goal: <= 1.5x
2. One epoch of a small Keras model on 2 ranks of the simulated cluster (ipyparallel MPI engines,
   probes installed, sharded with ``shard_and_rebatch_dataset``, gradients all-reduced by the
   optimizer wrapper) at global batch B vs one plain process at batch B.     goal: <= 1.5x

Two single processes are measured: one with TensorFlow's defaults, as the user runs it, and one
with tf.data autotuning off, as the ranks have it (the engine turns it off: in TF 2.15 an
iterator's teardown waits out the autotuner's sleep, which otherwise made epochs end at the next
10 * (2**k - 1) ms mark). The second is the stricter reference, the goal is judged on it; the first
shows that stall, which a plain process meets too.

The epoch figures are measured in the same run, in alternating rounds (each single process, then
the two ranks, and again), several epochs per round, after a warm-up; the medians are compared. A
loaded 2-core machine slows whatever runs at that moment: alternating spreads the load over all
sides. CPU time per epoch is printed too (one process; the busiest rank and both ranks together).

Three models: "mlp", an MNIST-sized multilayer perceptron (784-256-256-10, batch 256), the goal's
small model; "tiny" (32-64-64-1, batch 64), whose step is about a millisecond of framework
dispatch with almost no arithmetic: two ranks cannot halve anything there, so its ratio shows the
fixed cost per step of two processes and one all-reduce on a shared machine; and "resnet", a
ResNet-style CNN of 10.8 M parameters (43 MB of gradients per step) on synthetic 32x32 images,
batch 32, global batch 128, whose ratio shows what the all-reduce of a real model's gradients costs
(goal: <= 1.3x), and "resnet-b32", the same at batch 32, where a step's weight-sized work, done by
every rank, is a floor no simulator removes (no goal).

3. One full Ascend server (8 ranks) on this machine against 2 ranks (and 4), the same notebook and
   global batch, so the same total compute (ResNet-style model by default): cluster ready time,
   epoch time and CPU of all ranks, alternating rounds.       goals: epoch <= 1.5x, ready <= 2x
   Beside each size, its floor: as many plain processes (no MPI, no adapter, no collective), each
   with a rank's share of rows, batch and cores, training at the same time, measured in the same
   alternating rounds as the ranks. The floor's own 8-vs-2 ratio is what the machine imposes; the
   ranks' ratio to their floor is what the simulator adds.
   Then the memory of a rank (RSS at ready and after training, USS, PSS; median over the ranks),
   next to one plain process that imported TensorFlow and mpi4py.

Run: python benchmarks/bench_cluster.py [--quick] [--part ready|epoch|server|all] [--model NAME|all]
                                        [--server-ranks 2,4,8] [--server-model NAME]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npu_migrate_nb.sim.cluster import Cluster, find_mpiexec  # noqa: E402
from npu_migrate_nb.sim.rank_env import machine_cores  # noqa: E402

RANKS = 4
ROUNDS = 5
EPOCHS_PER_ROUND = 3
READY_REPEATS = 2
QUICK = False  # --quick (CI): one round of the ResNet epochs, whose medians are then of 2 epochs

MODELS = {
    "mlp": {"kind": "mlp", "rows": 8192, "features": 784, "hidden": [256, 256], "outputs": 10, "batch": 256},
    "tiny": {"kind": "mlp", "rows": 8192, "features": 32, "hidden": [64, 64], "outputs": 1, "batch": 64},
    # ResNet-style: 10.8 M parameters (43 MB of float32 gradients per step), most of them in the
    # late stages where the images are small. Global batch 128: 64 images per rank at 2 ranks, 16 on
    # a full 8-card server (real ResNet training uses 32 to 256 per card).
    "resnet": {"kind": "resnet", "rows": 1024, "image": 32, "widths": [64, 128, 256, 512], "blocks": [1, 1, 2, 2],
               "outputs": 10, "batch": 128, "goal": 1.3, "rounds": 3, "epochs_per_round": 2, "singles": ["untuned"]},
    # The same model at global batch 32: about 35 ms of each step on one core does not shrink with
    # the batch (the update of all 10.8 M weights, weight-sized work in the backward pass), and every
    # rank does it, so 2 ranks cannot halve the step: the ratio shows that floor, it has no goal.
    "resnet-b32": {"kind": "resnet", "rows": 256, "image": 32, "widths": [64, 128, 256, 512], "blocks": [1, 1, 2, 2],
                   "outputs": 10, "batch": 32, "goal": None, "rounds": 3, "epochs_per_round": 2, "singles": ["untuned"]},
}

EPOCH_SETUP = """
import os, time
import numpy as np
import tensorflow as tf
_spec = {spec!r}
_distributed = {distributed!r}
_untuned = {untuned!r}
_threads = {threads!r}
if _threads:  # a plain process standing in for one rank: the rank's share of the cores
    tf.config.threading.set_intra_op_parallelism_threads(_threads)
    tf.config.threading.set_inter_op_parallelism_threads(_threads)
if _distributed:
    import npu_device as npu
    npu.open().as_default()
_rng = np.random.RandomState(0)
if _spec["kind"] == "resnet":
    _x = _rng.rand(_spec["rows"], _spec["image"], _spec["image"], 3).astype("float32")
else:
    _x = _rng.rand(_spec["rows"], _spec["features"]).astype("float32")
if _spec["outputs"] == 1:
    _y = _rng.rand(_spec["rows"], 1).astype("float32")
    _loss = "mse"
else:
    _y = _rng.randint(0, _spec["outputs"], _spec["rows"]).astype("int64")
    _loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
_dataset = tf.data.Dataset.from_tensor_slices((_x, _y))
_batch = _spec["batch"]
if _distributed:
    _dataset, _batch = npu.distribute.shard_and_rebatch_dataset(_dataset, _batch)
_dataset = _dataset.batch(_batch).cache()
if _untuned:
    _options = tf.data.Options()
    _options.autotune.enabled = False
    _dataset = _dataset.with_options(_options)


def _residual_block(x, width, stride):
    layers = tf.keras.layers
    shortcut = x
    if stride != 1 or x.shape[-1] != width:
        shortcut = layers.BatchNormalization()(layers.Conv2D(width, 1, stride, use_bias=False)(x))
    y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 3, stride, "same", use_bias=False)(x)))
    y = layers.BatchNormalization()(layers.Conv2D(width, 3, 1, "same", use_bias=False)(y))
    return layers.ReLU()(layers.Add()([shortcut, y]))


def _resnet(spec):
    layers = tf.keras.layers
    inputs = tf.keras.Input((spec["image"], spec["image"], 3))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(32, 3, 2, "same", use_bias=False)(inputs)))
    for stage, (width, blocks) in enumerate(zip(spec["widths"], spec["blocks"])):
        for block in range(blocks):
            x = _residual_block(x, width, 2 if block == 0 and stage > 0 else 1)
    outputs = layers.Dense(spec["outputs"])(layers.GlobalAveragePooling2D()(x))
    return tf.keras.Model(inputs, outputs)


if _spec["kind"] == "resnet":
    _model = _resnet(_spec)
else:
    _model = tf.keras.Sequential(
        [tf.keras.layers.Dense(_spec["hidden"][0], activation="relu", input_shape=(_spec["features"],))]
        + [tf.keras.layers.Dense(units, activation="relu") for units in _spec["hidden"][1:]]
        + [tf.keras.layers.Dense(_spec["outputs"])])
_optimizer = tf.keras.optimizers.SGD(0.01)
if _distributed:
    npu.distribute.broadcast(_model.trainable_variables)
    _optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(_optimizer)
_model.compile(optimizer=_optimizer, loss=_loss)
_model.fit(_dataset, epochs=1, verbose=0)  # warm-up: tracing, the cache filled


def run_epochs(count):
    times = []
    for _ in range(count):
        wall, cpu = time.perf_counter(), time.process_time()
        _model.fit(_dataset, epochs=1, verbose=0)
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return times
"""

SINGLE_WORKER = """
import json, sys
exec(compile(sys.argv[1], "<setup>", "exec"))
print("READY", flush=True)
for line in sys.stdin:
    print("TIMES " + json.dumps(run_epochs(int(line))), flush=True)
"""


# ------------------------------------------------------------------------------ cluster ready


def bare_cluster_start() -> float:
    import ipyparallel as ipp
    from traitlets.config import Config

    config = Config()
    config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    started = time.perf_counter()
    cluster = ipp.Cluster(engines="mpi", n=RANKS, profile_dir=tempfile.mkdtemp(), log_level=40, config=config)
    client = cluster.start_and_connect_sync()
    client.wait_for_engines(RANKS, timeout=300)
    elapsed = time.perf_counter() - started
    client.close()
    cluster.stop_cluster_sync()
    return elapsed


def one_tensorflow_import() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True, capture_output=True)
    return time.perf_counter() - started


def our_cluster_ready() -> float:
    started = time.perf_counter()
    cluster = Cluster(n=RANKS).start()
    elapsed = time.perf_counter() - started
    cluster.stop()
    return elapsed


def cluster_ready_part() -> None:
    bare = min(bare_cluster_start() for _ in range(READY_REPEATS))
    tf_import = min(one_tensorflow_import() for _ in range(READY_REPEATS))
    ours = min(our_cluster_ready() for _ in range(READY_REPEATS))
    print(f"cluster ready, {RANKS} ranks with TensorFlow: {ours:.2f} s")
    print(f"bare ipyparallel MPI start {bare:.2f} s + one TensorFlow import {tf_import:.2f} s = {bare + tf_import:.2f} s")
    print(f"  ratio {ours / (bare + tf_import):.2f}x (goal <= 1.5x)")


# ------------------------------------------------------------------------------------- epochs


class SingleProcess:
    """One plain Python process (no MPI, no adapter, no probes) that keeps its model between rounds."""

    def __init__(self, spec: dict, untuned: bool, threads: int = 0, wait: bool = True):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        setup = EPOCH_SETUP.format(spec=spec, distributed=False, untuned=untuned, threads=threads)
        self.process = subprocess.Popen([sys.executable, "-c", SINGLE_WORKER, setup], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        if wait:
            self.ready()

    def ready(self) -> None:
        self._expect("READY")

    def start_epochs(self, count: int) -> None:
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()

    def finish_epochs(self) -> list:
        return [tuple(t) for t in json.loads(self._expect("TIMES"))]

    def _expect(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise RuntimeError(f"the single process ended (exit {self.process.wait()})")

    def epochs(self, count: int) -> list:
        self.start_epochs(count)
        return self.finish_epochs()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def two_rank_epochs(cluster: Cluster, count: int) -> list:
    """Per epoch: (wall of the slowest rank, CPU of the busiest rank, CPU of both ranks)."""
    cluster.view.execute(f"_bench_times = run_epochs({count})").get()
    per_rank = cluster.view.pull("_bench_times", block=True)
    return [(max(t[i][0] for t in per_rank), max(t[i][1] for t in per_rank), sum(t[i][1] for t in per_rank))
            for i in range(count)]


def epoch_part(name: str) -> float:
    spec = MODELS[name]
    rounds, per_round = spec.get("rounds", ROUNDS), spec.get("epochs_per_round", EPOCHS_PER_ROUND)
    if QUICK and spec["kind"] == "resnet":
        rounds = 1  # an epoch takes seconds to half a minute: one round of 2 epochs in CI
    singles = {kind: SingleProcess(spec, untuned=kind == "untuned")
               for kind in spec.get("singles", ["defaults", "untuned"])}
    ones = {kind: [] for kind in singles}
    twos = []
    try:
        with Cluster(n=2) as cluster:
            cluster.view.execute(EPOCH_SETUP.format(spec=spec, distributed=True, untuned=False, threads=0)).get()
            for _ in range(rounds):
                for kind, single in singles.items():
                    ones[kind] += single.epochs(per_round)
                twos += two_rank_epochs(cluster, per_round)
    finally:
        for single in singles.values():
            single.close()
    two_wall = statistics.median(t[0] for t in twos)
    two_cpu_max = statistics.median(t[1] for t in twos)
    two_cpu_sum = statistics.median(t[2] for t in twos)
    steps = -(-spec["rows"] // spec["batch"])
    print(f"\nepoch of model {name!r} ({_describe(spec)}, {spec['rows']} rows, global batch {spec['batch']}, "
          f"{steps} steps), median of {rounds}x{per_round} epochs in alternating rounds:")
    print(f"  2 ranks (cluster):                    wall {two_wall:.3f} s   CPU {two_cpu_max:.3f} s busiest rank, "
          f"{two_cpu_sum:.3f} s both")
    labels = {kind: label for kind, label in (("defaults", "one process, TensorFlow defaults:"),
                                              ("untuned", "one process, tf.data autotuning off:")) if kind in ones}
    ratios = {}
    for kind, label in labels.items():
        one_wall = statistics.median(t[0] for t in ones[kind])
        one_cpu = statistics.median(t[1] for t in ones[kind])
        ratios[kind] = two_wall / one_wall
        print(f"  {label:<37} wall {one_wall:.3f} s   CPU {one_cpu:.3f} s   "
              f"ratio {ratios[kind]:.2f}x wall, {two_cpu_max / one_cpu:.2f}x CPU of the busiest rank")
    goal = spec.get("goal", 1.5)
    print(f"  goal: <= {goal}x the untuned process: {ratios['untuned']:.2f}x" if goal else
          f"  no goal (a floor of data parallelism on shared cores, see MODELS): {ratios['untuned']:.2f}x")
    for kind, label in labels.items():
        print(f"  all epochs, {label:<37} {' '.join(f'{t[0]:.2f}' for t in ones[kind])}")
    print(f"  all epochs, {'2 ranks:':<37} {' '.join(f'{t[0]:.2f}' for t in twos)}")
    return ratios["untuned"]


def _describe(spec: dict) -> str:
    if spec["kind"] == "resnet":
        return (f"ResNet-style CNN, {spec['image']}x{spec['image']} images, widths {spec['widths']}, "
                f"blocks {spec['blocks']}")
    return "-".join(map(str, [spec["features"], *spec["hidden"], spec["outputs"]]))


# ------------------------------------------------------------------- one server: 8 ranks vs 2


def cluster_epochs(cluster: Cluster, count: int) -> list:
    """Per epoch: (wall of the slowest rank, CPU of all ranks together)."""
    cluster.view.execute(f"_bench_times = run_epochs({count})").get()
    per_rank = cluster.view.pull("_bench_times", block=True)
    return [(max(t[i][0] for t in per_rank), sum(t[i][1] for t in per_rank)) for i in range(count)]


def _resident_kinds(pid: int) -> dict:
    """What a process's RSS is made of (kB in /proc/PID/status): anonymous memory (heaps: Python,
    TensorFlow's tensors, the model), file pages (mapped libraries, shared by every rank through
    the page cache), shared memory (MPI's shared-memory segments)."""
    kinds = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                kinds[name[3:].lower()] = int(value.split()[0]) * 1024
    return kinds


def rank_memory(cluster: Cluster) -> dict:
    """Median over the ranks of RSS, USS (pages only this rank has), PSS, and RSS by kind, in MB."""
    pids = list(cluster.rank_pids.values())
    infos = [psutil.Process(pid).memory_full_info() for pid in pids]
    memory = {field: statistics.median(getattr(info, field) for info in infos) / 2**20 for field in ("rss", "uss", "pss")}
    kinds = [_resident_kinds(pid) for pid in pids]
    memory.update({kind: statistics.median(k.get(kind, 0) for k in kinds) / 2**20 for kind in ("anon", "file", "shmem")})
    return memory


def plain_tensorflow_rss() -> float:
    """RSS (MB) of one plain process that imported TensorFlow and mpi4py and ran one op."""
    code = ("import tensorflow as tf, psutil; from mpi4py import MPI; tf.constant(1.0) + 1; "
            "print(psutil.Process().memory_info().rss)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return int(done.stdout.split()[-1]) / 2**20


class PlainProcesses:
    """The floor under n ranks: n plain processes (no MPI, no adapter, no collective), each with
    a rank's share of the rows, batch and cores, training at the same time."""

    def __init__(self, spec: dict, n: int):
        share = dict(spec, rows=spec["rows"] // n, batch=spec["batch"] // n)
        cores = machine_cores()
        self.processes = [SingleProcess(share, untuned=True, threads=max(1, cores // n), wait=False)
                          for _ in range(n)]
        for process in self.processes:
            process.ready()

    def epochs(self, count: int) -> list:
        """Per epoch: (wall of the slowest process, CPU of all processes together), as
        :func:`cluster_epochs` gives for the ranks."""
        for process in self.processes:
            process.start_epochs(count)
        times = [process.finish_epochs() for process in self.processes]
        return [(max(t[i][0] for t in times), sum(t[i][1] for t in times)) for i in range(count)]

    def close(self) -> None:
        for process in self.processes:
            process.close()


def server_part(name: str, sizes=(2, 4, 8), rounds: int = 3, per_round: int = 2) -> None:
    """The same notebook on a full 8-device server and on 2 and 4 ranks, same global batch."""
    spec = MODELS[name]
    clusters, floors, ready, memory = {}, {}, {}, {}
    try:
        for n in sizes:
            started = time.perf_counter()
            clusters[n] = Cluster(n=n).start()
            ready[n] = time.perf_counter() - started
            memory[n] = {"ready": rank_memory(clusters[n])}
            clusters[n].view.execute(EPOCH_SETUP.format(spec=spec, distributed=True, untuned=False, threads=0)).get()
        for n in sizes:
            floors[n] = PlainProcesses(spec, n)
        # each size's ranks and its floor in the same rounds: a loaded machine slows both alike
        epochs = {n: [] for n in sizes}
        floor_epochs = {n: [] for n in sizes}
        for _ in range(rounds):
            for n, cluster in clusters.items():
                epochs[n] += cluster_epochs(cluster, per_round)
                floor_epochs[n] += floors[n].epochs(per_round)
        for n, cluster in clusters.items():
            memory[n]["trained"] = rank_memory(cluster)
    finally:
        for floor in floors.values():
            floor.close()
        for cluster in clusters.values():
            cluster.stop()
    base = min(sizes)
    print(f"\none server on this {os.cpu_count()}-core machine, model {name!r} ({_describe(spec)}), global batch "
          f"{spec['batch']} at every size; median of {rounds}x{per_round} epochs in alternating rounds:")
    wall = {n: statistics.median(t[0] for t in epochs[n]) for n in sizes}
    floor = {n: statistics.median(t[0] for t in floor_epochs[n]) for n in sizes}
    floor_cpu = {n: statistics.median(t[1] for t in floor_epochs[n]) for n in sizes}
    for n in sizes:
        cpu = statistics.median(t[1] for t in epochs[n])
        print(f"  {n} ranks: cluster ready {ready[n]:6.2f} s ({ready[n] / ready[base]:.2f}x {base} ranks)   "
              f"epoch {wall[n]:.3f} s ({wall[n] / wall[base]:.2f}x {base} ranks), CPU of all ranks {cpu:.2f} s; "
              f"{n} plain processes with a rank's share, no MPI: epoch {floor[n]:.3f} s "
              f"({floor[n] / floor[base]:.2f}x {base}), CPU {floor_cpu[n]:.2f} s; the ranks {wall[n] / floor[n]:.2f}x "
              f"that, CPU {cpu / floor_cpu[n]:.2f}x")
    top = max(sizes)
    if name != "resnet":
        # A small model's step is framework dispatch, which every rank pays in full: its ratio shows the
        # machine's floor and the ranks' fixed cost, not what the goal is set on (the same compute split).
        print(f"  (the epoch goal is set on the ResNet model; '{name}' shows the fixed cost per rank)")
    print(f"  goals: epoch {top} vs {base} ranks <= 1.5x: {wall[top] / wall[base]:.2f}x "
          f"(with no collectives at all, {top} plain processes vs {base}: {floor[top] / floor[base]:.2f}x); "
          f"ready <= 2x: {ready[top] / ready[base]:.2f}x")
    print(f"memory per rank (MB, median over the ranks; one plain process with TensorFlow and mpi4py: "
          f"RSS {plain_tensorflow_rss():.0f}):")
    print(f"  {'ranks':>5} {'RSS ready':>10} {'RSS trained':>12} {'USS trained':>12} {'PSS trained':>12}"
          f"   trained RSS = {'anonymous':>9} + {'files':>5} + {'shm':>5}")
    for n in sizes:
        ready_rss, trained = memory[n]["ready"]["rss"], memory[n]["trained"]
        print(f"  {n:>5} {ready_rss:10.0f} {trained['rss']:12.0f} {trained['uss']:12.0f} {trained['pss']:12.0f}"
              f"                 {trained['anon']:9.0f} + {trained['file']:5.0f} + {trained['shmem']:5.0f}")
    print("  anonymous: heaps (Python, TensorFlow, the model, its gradients and optimizer state, recycled "
          "collective buffers); files: mapped libraries (TensorFlow's ~1 GB of code), shared by all ranks "
          "through the page cache (PSS counts them once per machine); shm: MPI's shared-memory segments")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("ready", "epoch", "server", "all"), default="all")
    parser.add_argument("--model", choices=(*MODELS, "all"), default="all", help="models of the epoch part")
    parser.add_argument("--server-ranks", default="2,4,8", help="cluster sizes of the server part")
    parser.add_argument("--server-model", choices=tuple(MODELS), default="resnet", help="model of the server part")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and repetitions (one round of the ResNet epochs), server part at 2 and 8 ranks only (CI)")
    args = parser.parse_args()
    if args.quick:
        global ROUNDS, EPOCHS_PER_ROUND, READY_REPEATS, QUICK
        ROUNDS, EPOCHS_PER_ROUND, READY_REPEATS, QUICK = 3, 2, 1, True
        args.server_ranks = "2,8"
    started = time.perf_counter()
    if args.part in ("ready", "all"):
        cluster_ready_part()
    if args.part in ("epoch", "all"):
        for name in MODELS if args.model == "all" else [args.model]:
            epoch_part(name)
    if args.part in ("server", "all"):
        server_part(args.server_model, tuple(int(n) for n in args.server_ranks.split(",")), rounds=1 if QUICK else 3)
    print(f"\n(benchmark took {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
