"""``run --profile NAME``: an existing ipyparallel profile's own launchers (here MPI engines, as a
user who outgrew one machine would configure for mpiexec across hosts, Slurm or SSH)."""

import json
import os
import subprocess
import sys

import psutil
import pytest

from npu_migrate_nb.sim.cluster import find_mpiexec

pytestmark = pytest.mark.sim

NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": (
            "import os\nimport numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "print('rank', os.environ['RANK_ID'], 'of', os.environ['RANK_SIZE'])\n"
            "ds = tf.data.Dataset.from_tensor_slices(np.arange(64, dtype='float32').reshape(32, 2))\n"
            "ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(ds, 8)\n"
            "ds = ds.batch(rank_batch_size)\n"
            "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])\n"
            "npu.distribute.broadcast(model.trainable_variables)\n"
            "optimizer = tf.keras.optimizers.SGD(0.01)\n"
            "for x in ds:\n"
            "    with tf.GradientTape() as tape:\n"
            "        loss = tf.reduce_mean(model(x))\n"
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    grads = npu.distribute.all_reduce(grads, reduction='mean')\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        )},
    ],
    "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_run_with_an_existing_mpi_profile(tmp_path):
    ipython_dir = tmp_path / "ipython"
    profile = ipython_dir / "profile_npu_cluster"
    profile.mkdir(parents=True)
    (profile / "ipcluster_config.py").write_text(
        "c = get_config()\n"
        "c.Cluster.engine_launcher_class = 'mpi'\n"
        f"c.MPIEngineSetLauncher.mpi_cmd = [{find_mpiexec()!r}]\n"
        "c.Cluster.controller_ip = '127.0.0.1'\n"
    )
    path = tmp_path / "loop.ipynb"
    path.write_text(json.dumps(NOTEBOOK))
    environment = dict(os.environ, IPYTHONDIR=str(ipython_dir), NPU_SIM_TEST_TAG=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate_nb", "run", str(path), "-n", "2", "--profile", "npu_cluster",
         "--format", "json", "--timeout", "120"],
        capture_output=True, text=True, env=environment, timeout=300,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    report = json.loads(done.stdout)
    outputs = sorted(rank["stdout"].strip() for rank in report["cells"][0]["ranks"])
    assert outputs == ["rank 0 of 2", "rank 1 of 2"]
    assert report["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
    leftovers = [p for p in psutil.process_iter(["environ"]) if (p.info["environ"] or {}).get("NPU_SIM_TEST_TAG") == str(tmp_path)]
    assert leftovers == []
