"""A Keras utility that batches and shuffles by itself (image_dataset_from_directory on a tiny image
folder): the single-card notebook fails the shard check on 2 ranks, the fixed one passes all three."""

import json

import numpy as np
import pytest

from sim_notebooks import cli as run_cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

CELLS = [
    "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()",
    "train_ds = tf.keras.utils.image_dataset_from_directory('photos', image_size=(8, 8), batch_size=16)\n"
    "train_ds = train_ds.map(lambda x, y: (x / 255.0, y)).prefetch(2)",
    "model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(8, 8, 3)), tf.keras.layers.Dense(2)])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.1), "
    "loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))",
    "history = model.fit(train_ds, epochs=1, verbose=0)",
]


def make_folder(tmp_path):
    """64 tiny PNGs in two class folders, each image different."""
    rng = np.random.RandomState(0)
    import tensorflow as tf

    for label in ("cats", "dogs"):
        (tmp_path / "photos" / label).mkdir(parents=True)
        for index in range(32):
            pixels = rng.randint(0, 255, size=(8, 8, 3)).astype("uint8")
            tf.io.write_file(str(tmp_path / "photos" / label / f"{index}.png"), tf.io.encode_png(pixels))


def cli(*args):
    return run_cli(*args, timeout=600)


def test_an_image_folder_pipeline_is_fixed_and_proven_on_two_ranks(tmp_path):
    make_folder(tmp_path)
    single = write_notebook(tmp_path / "single.ipynb", CELLS)
    code, out, err = cli("run", str(single), "-n", "2", "--format", "json")
    checks = json.loads(out)["checks"]
    assert checks["shard"] == "fail", (checks, err[-2000:])

    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(single), "-o", str(fixed))
    source = "".join("".join(c["source"]) for c in json.loads(fixed.read_text())["cells"])
    assert "seed=1234).unbatch().shard(" in source and ".batch(16 // int(os.getenv('RANK_SIZE', '1')))" in source
    assert "npu.distribute.broadcast(model.trainable_variables)" in source, err
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json")
    result = json.loads(out)
    assert result["checks"] == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, (
        result["check_details"]["shard"], err[-2000:])
    assert code == 0


def test_a_data_op_with_a_seed_of_its_own_draws_alike_on_every_rank_as_on_real_cards():
    from npu_migrate_nb.sim.cluster import Cluster

    code = (
        "import os\nimport tensorflow as tf\nds = tf.data.Dataset.range(100)\n"
        "seeded = [int(v) for v in ds.shuffle(100, seed=7).take(10)]\n"
        "unseeded = [int(v) for v in ds.shuffle(100).take(10)]\n"
        "tf.random.set_seed(5 + int(os.environ['RANK_ID']))  # the user's own, per rank: kept\n"
        "users = [int(v) for v in ds.shuffle(100, seed=7).take(10)]\n"
    )
    with Cluster(n=2) as cluster:
        cluster.view.execute(code, block=True)
        seeded, unseeded, users = (cluster.view.pull(name, block=True) for name in ("seeded", "unseeded", "users"))
    assert seeded[0] == seeded[1]  # no global seed on a real rank: the op's seed decides
    assert unseeded[0] != unseeded[1]  # no seed at all: each rank its own order, as on real cards
    assert users[0] != users[1]
