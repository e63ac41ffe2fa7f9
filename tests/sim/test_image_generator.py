"""Keras' ImageDataGenerator iterators (keras.utils.Sequence of batches) on a tiny image folder: the
fixed notebook gives each of 2 ranks its own half of every epoch's images, in per-rank batches, the
same number of steps on both; and it trains on 2 ranks (broadcast, identical updates) and on one card."""

import json

import pytest

from sim_notebooks import write_notebook  # same folder: on sys.path (rootdir-less sim tests)
from test_batched_sources import cli, make_folder

pytestmark = pytest.mark.sim

CELLS = [
    "import numpy as np\nimport tensorflow as tf\nfrom tensorflow.keras.preprocessing.image import ImageDataGenerator",
    "image_gen = ImageDataGenerator(rescale=1./255, horizontal_flip=True)\n"
    "train_data_gen = image_gen.flow_from_directory(batch_size=16, directory='photos', shuffle=True,\n"
    "                                               target_size=(8, 8), class_mode='binary')",
    "model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(8, 8, 3)), tf.keras.layers.Dense(1)])\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))",
    "history = model.fit(train_data_gen, epochs=2, verbose=0)",
]

# Which images each rank's batches hold, epoch by epoch (the augmentation only flips: a flipped image
# is known by its sorted pixels).
SEEN = (
    "def seen(sequence, epochs=2):\n"
    "    per_epoch = []\n"
    "    for _ in range(epochs):\n"
    "        keys = [tuple(np.sort(image.ravel()).round(4)) for index in range(len(sequence))\n"
    "                for image in sequence[index][0]]\n"
    "        per_epoch.append((keys, [len(sequence[index][0]) for index in range(len(sequence))]))\n"
    "        sequence.on_epoch_end()\n"
    "    return per_epoch\n"
    "observed = seen(train_data_gen)\n"
)


def fixed_notebook(tmp_path):
    make_folder(tmp_path)
    single = write_notebook(tmp_path / "single.ipynb", CELLS)
    fixed = tmp_path / "fixed.ipynb"
    code, _, err = cli("fix", str(single), "-o", str(fixed))
    assert code == 0, err
    cells = ["".join(cell["source"]) for cell in json.loads(fixed.read_text())["cells"]]
    return fixed, cells


def test_each_rank_reads_its_own_half_of_every_epoch_in_per_rank_batches(tmp_path):
    from npu_migrate_nb.sim.cluster import Cluster

    fixed, cells = fixed_notebook(tmp_path)
    source = "\n".join(cells)
    assert "train_data_gen = RankBatches(image_gen.flow_from_directory(batch_size=16 // int(os.getenv('RANK_SIZE', '1'))" in source
    with Cluster(n=2) as cluster:
        cluster.view.execute(f"import os\nos.chdir({str(tmp_path)!r})", block=True)
        for cell in cells[:2]:
            cluster.view.execute(cell, block=True)
        cluster.view.execute(SEEN, block=True)
        observed = cluster.view.pull("observed", block=True)
    for epoch in range(2):
        (keys_0, sizes_0), (keys_1, sizes_1) = observed[0][epoch], observed[1][epoch]
        assert sizes_0 == sizes_1 == [8] * 4  # 64 images, global batch 16: 4 steps of 8 per rank
        assert not set(keys_0) & set(keys_1)
        assert len(set(keys_0) | set(keys_1)) == 64
    assert observed[0][0][0] != observed[0][1][0]  # a new shared order each epoch


def test_the_fixed_notebook_trains_on_two_ranks_and_on_one_card(tmp_path):
    fixed, _ = fixed_notebook(tmp_path)
    code, out, err = cli("run", str(fixed), "-n", "2", "--format", "json")
    result = json.loads(out)
    assert code in (0, 1) and result["checks"]["broadcast"] == "pass", (result["checks"], err[-2000:])
    # The simulator's probes do not read a Sequence's batches (the shard is proven above): the
    # all-reduce is seen as identical updates, with the input unobserved.
    assert "weights changed identically on all ranks" in result["check_details"]["allreduce"]["detail"]
    code, out, err = cli("run", str(fixed), "-n", "1", "--format", "json")
    assert all(cell["ranks"][0]["error"] is None for cell in json.loads(out)["cells"]), err[-2000:]
