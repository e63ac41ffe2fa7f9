"""Data split by the device id (as in the vendor's model zoo): right on one server, wrong from two on.
The simulator lays 2 ranks out as 2 servers of 1 device (NPU_SIM_DEVICES_PER_SERVER=1): the already
distributed notebook fails the shard check there, and passes all three once device-id-shard fixes it."""

import json
import os

import pytest

from npu_migrate_nb.sim.rank_env import devices_per_server, rank_environment, rank_table

from sim_notebooks import cli as run_cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

CELLS = [
    "import os\nimport numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()",
    "rank_size = int(os.getenv('RANK_SIZE', '1'))\nrank_id = int(os.getenv('DEVICE_ID', '0'))",
    "rng = np.random.RandomState(0)\nx = rng.rand(256, 4).astype('float32')\ny = (x.sum(axis=1) > 2).astype('int32')\n"
    "train_ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(rank_size, rank_id).batch(32 // rank_size)",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])\n"
    "npu.distribute.broadcast(model.trainable_variables)\n"
    "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD(0.1))\n"
    "model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))",
    "history = model.fit(train_ds, epochs=1, verbose=0)",
]


def cli(*args, devices_per_server=None):
    environment = dict(os.environ)
    environment.pop("NPU_SIM_DEVICES_PER_SERVER", None)
    if devices_per_server is not None:
        environment["NPU_SIM_DEVICES_PER_SERVER"] = str(devices_per_server)
    return run_cli(*args, env=environment)


def test_two_servers_of_one_device_catch_a_device_id_shard_and_the_fix_passes(tmp_path):
    unfixed = write_notebook(tmp_path / "zoo.ipynb", CELLS)
    code, out, err = cli("check", str(unfixed), "--format", "json")
    codes = [finding["code"] for finding in json.loads(out)["findings"]]
    assert codes == ["device-id-shard"], (codes, err[-2000:])

    code, out, err = cli("run", str(unfixed), "-n", "2", "--format", "json", devices_per_server=1)
    result = json.loads(out)
    # Both ranks are device 0 and read the same part: the all-reduce cannot be told apart from none.
    assert result["checks"] == {"broadcast": "pass", "allreduce": "not-observed", "shard": "fail"}, (
        result["check_details"], err[-2000:])
    assert "same first batch" in result["check_details"]["shard"]["detail"]

    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(unfixed), "-o", str(fixed))
    source = "".join("".join(c["source"]) for c in json.loads(fixed.read_text())["cells"])
    assert ".shard(rank_size, int(os.getenv('RANK_ID', '0')))" in source, err
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json", devices_per_server=1)
    result = json.loads(out)
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, (
        result["check_details"], err[-2000:])
    assert code == 0


def test_on_one_server_the_device_id_is_the_rank_and_the_same_notebook_passes(tmp_path):
    unfixed = write_notebook(tmp_path / "zoo.ipynb", CELLS)
    code, out, err = cli("run", str(unfixed), "-n", "2", "--format", "json")
    assert json.loads(out)["checks"]["shard"] == "pass", err[-2000:]


def test_several_servers_restart_device_ids_in_the_table_and_the_environment():
    table = rank_table(4, 2)
    assert table["server_count"] == "2"
    assert [[(d["rank_id"], d["device_id"]) for d in s["device"]] for s in table["server_list"]] == [
        [("0", "0"), ("1", "1")], [("2", "0"), ("3", "1")]]
    assert len({s["server_id"] for s in table["server_list"]}) == 2
    assert len({d["device_ip"] for s in table["server_list"] for d in s["device"]}) == 4
    assert all(isinstance(v, str) for s in table["server_list"] for d in s["device"] for v in d.values())
    env = rank_environment(3, 4, "42", "/t/table.json", 2)
    assert (env["RANK_ID"], env["DEVICE_ID"], env["ASCEND_DEVICE_ID"]) == ("3", "1", "1")


def test_the_default_layout_is_one_server():
    assert devices_per_server(4, {}) == 4
    assert rank_table(3, devices_per_server(3, {})) == rank_table(3)
    assert rank_table(3)["server_count"] == "1"
    assert devices_per_server(4, {"NPU_SIM_DEVICES_PER_SERVER": "1"}) == 1
    with pytest.raises(ValueError, match="NPU_SIM_DEVICES_PER_SERVER"):
        devices_per_server(4, {"NPU_SIM_DEVICES_PER_SERVER": "0"})
