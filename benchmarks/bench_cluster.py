"""Cluster and training-step benchmarks for the simulated runner. Prints figures and ratios.

1. Cluster ready (4 ranks, TensorFlow imported in every rank) vs a bare ipyparallel MPI cluster
   start (4 engines) plus one TensorFlow import.                               goal: <= 1.5x
2. One epoch of a small Keras model on 2 ranks at global batch B (sharded, gradients all-reduced)
   vs one process at batch B.                                                  goal: <= 1.5x

Run: python benchmarks/bench_cluster.py
"""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npu_migrate_nb.sim.cluster import Cluster, find_mpiexec  # noqa: E402

RANKS = 4
GLOBAL_BATCH = 64

EPOCH_CODE = """
import os, time
import numpy as np
import tensorflow as tf
distributed = {distributed}
if distributed:
    import npu_device as npu
    npu.open().as_default()
rng = np.random.RandomState(0)
x = rng.rand(8192, 32).astype("float32")
y = rng.rand(8192, 1).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y))
batch = {batch}
if distributed:
    dataset, batch = npu.distribute.shard_and_rebatch_dataset(dataset, batch)
dataset = dataset.batch(batch).cache()
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu", input_shape=(32,)),
                             tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)
if distributed:
    npu.distribute.broadcast(model.trainable_variables)
    optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)
model.compile(optimizer=optimizer, loss="mse")
model.fit(dataset, epochs=1, verbose=0)  # warm-up: tracing
started = time.perf_counter()
model.fit(dataset, epochs=1, verbose=0)
epoch_s = time.perf_counter() - started
print("EPOCH", epoch_s)
"""


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


def single_process_epoch() -> float:
    code = EPOCH_CODE.format(distributed=False, batch=GLOBAL_BATCH)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.split("EPOCH")[-1])


def two_rank_epoch() -> float:
    with Cluster(n=2) as cluster:
        result = cluster.view.execute(EPOCH_CODE.format(distributed=True, batch=GLOBAL_BATCH))
        result.get()
        return max(float(out.split("EPOCH")[-1]) for out in result.stdout)


def main() -> None:
    bare = min(bare_cluster_start() for _ in range(2))
    tf_import = min(one_tensorflow_import() for _ in range(2))
    ours = min(our_cluster_ready() for _ in range(2))
    print(f"cluster ready, {RANKS} ranks with TensorFlow: {ours:.2f} s")
    print(f"bare ipyparallel MPI start {bare:.2f} s + one TensorFlow import {tf_import:.2f} s = {bare + tf_import:.2f} s")
    print(f"  ratio {ours / (bare + tf_import):.2f}x (goal <= 1.5x)")
    single = single_process_epoch()
    double = two_rank_epoch()
    print(f"epoch, one process at batch {GLOBAL_BATCH}: {single:.3f} s")
    print(f"epoch, 2 ranks at global batch {GLOBAL_BATCH}: {double:.3f} s")
    print(f"  ratio {double / single:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
