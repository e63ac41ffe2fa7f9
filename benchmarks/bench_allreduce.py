"""All-reduce of 64 MB float32 on 2 ranks: the simulator vs raw MPI vs TensorFlow's own ring.

    python benchmarks/bench_allreduce.py            # launches everything itself
    mpiexec -n 2 python benchmarks/bench_allreduce.py

Measures, on this machine:
  * ``npu.distribute.all_reduce`` (the simulated adapter, default reduction "mean", eager) and
    the same with reduction "sum";
  * a raw ``MPI.COMM_WORLD.Allreduce`` on the same buffer (preallocated receive buffer);
  * ``tf.distribute.MultiWorkerMirroredStrategy`` with the RING implementation over gRPC on
    127.0.0.1, the peer users would otherwise reach for (two separate worker processes, since the
    strategy must be created before TensorFlow's context starts).
Each figure is the median of several timed repetitions after a warm-up.
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

MEGABYTES = 64
ELEMENTS = MEGABYTES * 1024 * 1024 // 4
REPEATS = 7
HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))


def _median_time(step, barrier) -> float:
    step()  # warm-up
    times = []
    for _ in range(REPEATS):
        barrier()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


def mpi_part() -> dict:
    """Run on every MPI rank; returns the timings (seconds) on rank 0."""
    _rank_env()
    sys.path.insert(0, REPO)
    import numpy as np
    from mpi4py import MPI
    import tensorflow as tf
    from npu_migrate_nb.sim import adapter
    adapter.enable()
    import npu_device as npu

    npu.open().as_default()
    world = MPI.COMM_WORLD
    data = np.random.default_rng(world.rank).random(ELEMENTS, dtype=np.float32)
    received = np.empty_like(data)
    tensor = tf.constant(data)

    raw = _median_time(lambda: world.Allreduce(data, received), world.Barrier)
    mean = _median_time(lambda: npu.distribute.all_reduce(tensor), world.Barrier)
    total = _median_time(lambda: npu.distribute.all_reduce(tensor, "sum"), world.Barrier)
    check = npu.distribute.all_reduce(tensor, "sum").numpy()
    world.Allreduce(data, received)
    assert np.array_equal(check, received), "simulated all_reduce disagrees with MPI"
    return {"raw_mpi": raw, "npu_mean": mean, "npu_sum": total, "ranks": world.size}


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
    data = tf.random.uniform([ELEMENTS], dtype=tf.float32, seed=index)

    @tf.function
    def step():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", data))

    def run():
        strategy.experimental_local_results(step())[0].numpy()

    def barrier():  # a tiny collective lines the two workers up
        strategy.experimental_local_results(strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.ones([1]))))[0].numpy()

    barrier()
    return {"mwms": _median_time(run, barrier)}


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


def print_table(mpi: dict, mwms: dict) -> None:
    rate = lambda seconds: MEGABYTES / seconds  # noqa: E731
    rows = [
        ("raw MPI Allreduce (mpi4py, buffer)", mpi["raw_mpi"]),
        ("npu.distribute.all_reduce  mean", mpi["npu_mean"]),
        ("npu.distribute.all_reduce  sum", mpi["npu_sum"]),
        ("MultiWorkerMirroredStrategy RING/gRPC", mwms["mwms"]),
    ]
    print(f"\nall-reduce of {MEGABYTES} MB float32 on {mpi['ranks']} ranks, 127.0.0.1, median of {REPEATS}")
    print(f"{'implementation':40} {'time (ms)':>10} {'MB/s':>9} {'vs raw MPI':>11}")
    for name, seconds in rows:
        print(f"{name:40} {seconds * 1e3:10.1f} {rate(seconds):9.0f} {seconds / mpi['raw_mpi']:10.2f}x")
    ratio = mpi["npu_mean"] / mpi["raw_mpi"]
    verdict = "OK" if ratio <= 1.4 else "ABOVE GOAL"
    print(f"\nall_reduce (mean) / raw MPI = {ratio:.2f}x (goal <= 1.4x: {verdict})")
    print(f"MWMS {rate(mwms['mwms']):.0f} MB/s vs MPI {rate(mpi['raw_mpi']):.0f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi-part", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mwms-worker", nargs=2, metavar=("INDEX", "PORTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mwms_worker:
        index, ports = args.mwms_worker
        print(json.dumps(mwms_worker(int(index), [int(p) for p in ports.split(",")])), flush=True)
        return
    if "PMI_RANK" in os.environ:  # started by mpiexec
        timings = mpi_part()
        if os.environ["PMI_RANK"] == "0":
            if args.mpi_part:
                print(json.dumps(timings), flush=True)
            else:
                print_table(timings, run_mwms_pair())
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    sys.path.insert(0, REPO)
    from npu_migrate_nb.sim.cluster import find_mpiexec  # the mpich wheel's, next to this Python

    done = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, HERE, "--mpi-part"], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"MPI part failed:\n{done.stderr[-3000:]}")
    print_table(json.loads(_result_line(done.stdout)), run_mwms_pair())


if __name__ == "__main__":
    main()
