"""The simulator's collectives against raw MPI on the same bytes, 4 KB to 256 MB, on 2 ranks.

    python benchmarks/bench_allreduce.py [--quick|--full] [--no-mwms]   # launches everything itself

For each size, on 2 MPI ranks (the mpich wheel's mpiexec), with a barrier before every timed call:
  * ``npu.distribute.all_reduce`` "sum" and "mean", and ``npu.distribute.broadcast`` (variables
    assigned in place, as the adapter does);
  * in a ``tf.function`` (where training steps run; the native kernel, and the numpy_function
    path forced) and eagerly (a list in, eager tensors out, no ``.numpy()``);
  * one tensor, and a gradient list of the same bytes: up to 160 tensors of mixed sizes (one large
    kernel, then a small bias and a tiny normalisation scale, repeated), as a real model's;
  * against a raw ``MPI.COMM_WORLD.Allreduce`` (preallocated receive buffer) or ``Bcast`` of the
    same bytes, timed in alternation with it (a loaded machine slows both alike).
Each figure is the median over repetitions after a warm-up, the slower rank's. Printed: the ratio
to raw MPI per size, and the cost per call beyond raw MPI in microseconds, next to what calling an
empty ``tf.function`` costs (every graph call, a training step's too, pays that) and what a
``tf.function`` that passes the list's variables to one op (``IdentityN``) costs (what a list
broadcast in a graph paid TensorFlow before it took the list as one input, a resource made at
tracing).

Also (unless --no-mwms): 64 MB through ``tf.distribute.MultiWorkerMirroredStrategy`` (RING over
gRPC on 127.0.0.1), the peer users would otherwise reach for.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

KB, MB = 1024, 1024 * 1024
SIZES = {"quick": [4 * KB, 256 * KB, 4 * MB, 64 * MB],
         "full": [4 * KB, 64 * KB, 1 * MB, 16 * MB, 64 * MB, 256 * MB]}
MWMS_BYTES = 64 * MB
HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
GRADIENT_LIST_LENGTH = 160
CASES = [  # (name, collective, where, shape)
    ("reference: empty tf.function call", "none", "graph", "one"),
    ("sum      graph native", "sum", "native", "one"),
    ("sum      graph native", "sum", "native", "list"),
    ("mean     graph native", "mean", "native", "one"),
    ("mean     graph native", "mean", "native", "list"),
    ("sum      graph numpy_function", "sum", "numpy", "one"),
    ("sum      graph numpy_function", "sum", "numpy", "list"),
    ("sum      eager", "sum", "eager", "one"),
    ("sum      eager", "sum", "eager", "list"),
    ("mean     eager", "mean", "eager", "one"),
    ("mean     eager", "mean", "eager", "list"),
    ("reference: variables to an op", "handles", "graph", "list"),
    ("broadcast graph", "broadcast", "graph", "one"),
    ("broadcast graph", "broadcast", "graph", "list"),
    ("broadcast eager", "broadcast", "eager", "one"),
    ("broadcast eager", "broadcast", "eager", "list"),
]


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    for unit, factor in (("MB", MB), ("KB", KB), ("B", 1)):
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def repeats_for(nbytes: int) -> int:
    return 7 if nbytes >= 16 * MB else 15 if nbytes >= MB else 51


def gradient_sizes(elements: int) -> list:
    """Element counts of a model-like gradient list summing to ``elements``: kernel, bias, scale."""
    length = max(2, min(GRADIENT_LIST_LENGTH, elements // 64))
    weights = [(1000, 30, 1)[i % 3] for i in range(length)]
    sizes = [max(1, elements * w // sum(weights)) for w in weights]
    sizes[0] += elements - sum(sizes)
    return sizes


def _rank_env() -> None:
    os.environ["RANK_SIZE"] = os.environ.get("PMI_SIZE", "2")
    os.environ["RANK_ID"] = os.environ.get("PMI_RANK", "0")
    os.environ.pop("CM_WORKER_SIZE", None)
    table = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_rank_table_{os.getppid()}.json")
    devices = [{"device_id": str(i), "device_ip": f"127.0.0.{i + 2}", "rank_id": str(i)}
               for i in range(int(os.environ["RANK_SIZE"]))]
    with open(table, "w") as handle:
        json.dump({"server_count": "1", "status": "completed", "version": "1.0",
                   "server_list": [{"server_id": "127.0.0.1", "device": devices}]}, handle)
    os.environ["RANK_TABLE_FILE"] = table


def _alternating_medians(ours, raw, barrier, repeats: int) -> tuple:
    ours(), raw()  # warm-up: tracing, pooled buffers
    times = {"ours": [], "raw": []}
    for _ in range(repeats):
        for name, step in (("raw", raw), ("ours", ours)):
            barrier()
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["ours"]), statistics.median(times["raw"])


def _case_step(npu, comm, tf, collective: str, where: str, tensors: list, variables: list):
    if collective == "none":  # what any graph call costs, a training step's included
        return tf.function(lambda: None)
    if collective == "handles":  # what TensorFlow charges to pass a list's variables to any one op
        return tf.function(lambda: tf.raw_ops.IdentityN(input=[v.handle for v in variables]) and None)
    if collective == "broadcast":
        if where == "eager":
            return lambda: npu.distribute.broadcast(variables)
        broadcast_in_graph = tf.function(lambda: npu.distribute.broadcast(variables))
        return broadcast_in_graph
    if where == "eager":
        return lambda: npu.distribute.all_reduce(tensors, collective)
    # outputs unused: a training step consumes them inside the graph; the op is stateful, it runs
    function = tf.function(lambda: npu.distribute.all_reduce(tensors, collective) and None)
    if where == "numpy":
        with comm.numpy_path_in_graphs():
            function.get_concrete_function()
    return function


def mpi_part(sizes: list) -> dict:
    """Run on every MPI rank; returns {case: {size: (ours s, raw s)}} (the slower rank's medians)."""
    _rank_env()
    sys.path.insert(0, REPO)
    import numpy as np
    from mpi4py import MPI
    import tensorflow as tf
    from npu_migrate_nb.sim import adapter, comm
    adapter.enable()
    import npu_device as npu

    npu.open().as_default()
    world = MPI.COMM_WORLD
    rng = np.random.default_rng(world.rank)
    results = {}
    for nbytes in sizes:
        elements = nbytes // 4
        data = rng.random(elements, dtype=np.float32)
        received = np.empty_like(data)
        pieces = {"one": [elements], "list": gradient_sizes(elements)}
        for name, collective, where, shape in CASES:
            arrays = np.split(data, np.cumsum(pieces[shape])[:-1])
            tensors = [tf.constant(a) for a in arrays]
            variables = [tf.Variable(t) for t in tensors] if collective in ("broadcast", "handles") else []
            ours = _case_step(npu, comm, tf, collective, where, tensors, variables)
            raw = ((lambda: world.Bcast(data)) if collective in ("broadcast", "handles")
                   else (lambda: world.Allreduce(data, received)))
            timing = _alternating_medians(ours, raw, world.Barrier, repeats_for(nbytes))
            slower = max(world.allgather(timing))
            results.setdefault(f"{name} ({shape})", {})[nbytes] = slower
            del tensors, variables, ours
        check = npu.distribute.all_reduce(tf.constant(data), "sum").numpy()
        world.Allreduce(data, received)
        assert np.array_equal(check, received), "simulated all_reduce disagrees with MPI"
    return {"cases": results, "ranks": world.size}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mwms_worker(index: int, ports: list[int]) -> dict:
    """One MultiWorkerMirroredStrategy worker; returns its median all-reduce time."""
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": index}})
    import tensorflow as tf
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    data = tf.random.uniform([MWMS_BYTES // 4], dtype=tf.float32, seed=index)

    @tf.function
    def step():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", data))

    def run():
        strategy.experimental_local_results(step())[0].numpy()

    def barrier():  # a tiny collective lines the two workers up
        strategy.experimental_local_results(strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.ones([1]))))[0].numpy()

    barrier()
    run()
    times = []
    for _ in range(7):
        barrier()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return {"mwms": statistics.median(times)}


def run_mwms_pair() -> dict:
    ports = [_free_port(), _free_port()]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for name in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMI_ID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"):
        env.pop(name, None)
    workers = [subprocess.Popen([sys.executable, HERE, "--mwms-worker", str(i), ",".join(map(str, ports))],
                                stdout=subprocess.PIPE, text=True, env=env) for i in range(2)]
    results = [json.loads(_result_line(w.communicate(timeout=600)[0])) for w in workers]
    return {"mwms": max(r["mwms"] for r in results)}


def _result_line(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith("{")][-1]


def _size_label(nbytes: int) -> str:
    return f"{nbytes // MB} MB" if nbytes >= MB else f"{nbytes // KB} KB"


def print_sweep(mpi: dict) -> None:
    cases = mpi["cases"]
    sizes = sorted({int(size) for timings in cases.values() for size in timings})
    header = f"{'':40}" + "".join(f"{_size_label(size):>10}" for size in sizes)
    first = next(iter(cases.values()))
    print(f"\ncollectives on {mpi['ranks']} ranks vs raw MPI on the same bytes (float32; median, slower rank)")
    print(header)
    print(f"{'raw MPI Allreduce (ms)':40}" + "".join(f"{first[str(s)][1] * 1e3:10.3f}" for s in sizes))
    broadcasts = [timings for name, timings in cases.items() if name.startswith("broadcast")]
    if broadcasts:
        print(f"{'raw MPI Bcast (ms)':40}" + "".join(f"{broadcasts[0][str(s)][1] * 1e3:10.3f}" for s in sizes))
    print("ratio to raw MPI:")
    for name, timings in cases.items():
        print(f"{name:40}" + "".join(f"{timings[str(s)][0] / timings[str(s)][1]:9.2f}x" for s in sizes))
    print("cost per call beyond raw MPI (microseconds):")
    for name, timings in cases.items():
        print(f"{name:40}" + "".join(f"{(timings[str(s)][0] - timings[str(s)][1]) * 1e6:10.0f}" for s in sizes))
    goal = [timings[str(s)][0] / timings[str(s)][1] for name, timings in cases.items() for s in sizes
            if s >= 64 * MB and "numpy_function" not in name and "reference" not in name]
    if goal:
        print(f"\nworst ratio at 64 MB and above (native graph path, eager, broadcast): {max(goal):.2f}x "
              f"(goal <= 1.2x: {'OK' if max(goal) <= 1.2 else 'ABOVE GOAL'})")


def print_mwms(mpi: dict, mwms: dict) -> None:
    raw = mpi["cases"]["sum      graph native (one)"].get(str(MWMS_BYTES))
    line = f"\nMultiWorkerMirroredStrategy RING/gRPC, {MWMS_BYTES // MB} MB: {mwms['mwms'] * 1e3:.1f} ms"
    if raw:
        line += f" ({mwms['mwms'] / raw[1]:.2f}x raw MPI; {MWMS_BYTES / MB / mwms['mwms']:.0f} MB/s)"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", dest="sizes", action="store_const", const="full", default="full",
                        help="4 KB, 64 KB, 1 MB, 16 MB, 64 MB, 256 MB (default)")
    parser.add_argument("--quick", dest="sizes", action="store_const", const="quick",
                        help="4 KB, 256 KB, 4 MB, 64 MB")
    parser.add_argument("--sizes", dest="custom", metavar="LIST",
                        help="sizes of your own, e.g. 64MB,256MB (instead of --quick/--full)")
    parser.add_argument("--no-mwms", action="store_true", help="skip MultiWorkerMirroredStrategy")
    parser.add_argument("--mpi-part", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mwms-worker", nargs=2, metavar=("INDEX", "PORTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.custom:
        SIZES["custom"] = [_parse_size(text) for text in args.custom.split(",")]
        args.sizes = "custom"
    if args.mwms_worker:
        index, ports = args.mwms_worker
        print(json.dumps(mwms_worker(int(index), [int(p) for p in ports.split(",")])), flush=True)
        return
    if args.mpi_part:  # started by mpiexec
        timings = mpi_part(SIZES[args.sizes])
        if os.environ["PMI_RANK"] == "0":
            print(json.dumps(timings), flush=True)
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    sys.path.insert(0, REPO)
    from npu_migrate_nb.sim.cluster import find_mpiexec  # the mpich wheel's

    started = time.perf_counter()
    size_flags = ["--sizes", args.custom] if args.custom else [f"--{args.sizes}"]
    done = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, HERE, "--mpi-part", *size_flags],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"MPI part failed:\n{done.stderr[-3000:]}")
    mpi = json.loads(_result_line(done.stdout))
    print_sweep(mpi)
    if not args.no_mwms:
        print_mwms(mpi, run_mwms_pair())
    print(f"\n(benchmark took {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
