"""Shapes of real training notebooks (issue 9): Keras fit on a model compiled elsewhere, fit_generator,
tensorflow_io readers, lists given to fit, tfds' whole-split tensors, compile without an optimizer."""

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import apply_edits, fix_notebook
from npu_migrate_nb.rules.keras_defaults import default_optimizer_argument

from .conftest import joined, notebook_from

FACTORY = (
    "import tensorflow as tf\n"
    "def create_model():\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "    model.compile(optimizer='adam', loss='mse')\n"
    "    return model\n"
    "# %%\n"
    "base_model = create_model()\n"
    "base_model.fit(x_train, y_train, epochs=5)\n"
)


def test_fit_on_a_model_returned_by_a_compiling_function_is_keras_training():
    analysis = analyze(notebook_from(FACTORY))
    assert analysis.framework == "keras"
    assert analysis.steps == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}


def test_the_factory_gets_the_wrapped_optimizer_and_the_fit_its_broadcast_and_slices():
    notebook = notebook_from(FACTORY)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam())" in fixed
    assert "npu.distribute.broadcast(base_model.trainable_variables)\n" in fixed
    assert ("base_model.fit(x_train[rank_id::rank_size][:len(y_train) // rank_size], "
            "y_train[rank_id::rank_size][:len(y_train) // rank_size]") in fixed
    assert analyze(notebook_from(fixed)).steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}


def test_a_factory_of_an_imported_module_counts_by_its_function_name():
    code = FACTORY.replace("base_model = create_model()", "base_model = models.create_model()")
    assert analyze(notebook_from(code)).framework == "keras"


def test_fit_on_a_name_neither_compiled_nor_made_by_a_compiling_function_is_not_keras():
    code = FACTORY.replace("base_model = create_model()", "base_model = RandomForest()")
    assert analyze(notebook_from(code)).framework == "none"


def test_fit_on_a_loop_variable_over_collected_compiled_models_is_keras_training():
    code = (
        "import tensorflow as tf\n"
        "models = []\n"
        "for _ in range(3):\n"
        "    m = Ranker()\n"
        "    m.compile(optimizer=optimizer)\n"
        "    models.append(m)\n"
        "# %%\n"
        "def run(models):\n"
        "    for model in models:\n"
        "        model.fit(train, epochs=2)\n"
    )
    assert analyze(notebook_from(code)).framework == "keras"
    uncollected = code.replace("    models.append(m)\n", "")
    assert analyze(notebook_from(uncollected)).framework == "none"


def test_fit_generator_is_keras_training():
    code = (
        "import tensorflow as tf\n"
        "model.compile(optimizer='adam', loss='binary_crossentropy')\n"
        "history = model.fit_generator(train_data_gen, steps_per_epoch=10, epochs=2)\n"
    )
    assert analyze(notebook_from(code)).framework == "keras"


def test_a_list_of_inputs_is_still_not_sliced_as_samples():
    code = (
        "import tensorflow as tf\n"
        "inputs = [images, tags]\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(inputs, y, epochs=2)\n"
    )
    analysis = analyze(notebook_from(code))
    [finding] = [f for f in analysis.findings if f.code == "missing-shard"]
    assert not finding.edits and "not done automatically" in finding.message


@pytest.mark.parametrize("source", [
    "tfio.IODataset.from_kafka('train', partition=0, offset=0)",
    "tfio.experimental.elasticsearch.ElasticsearchIODataset(nodes=[NODES], index='train')",
])
def test_tensorflow_io_readers_are_sharded_pipelines(source):
    code = (
        "import tensorflow as tf\nimport tensorflow_io as tfio\n"
        f"train_ds = {source}\n"
        "train_ds = train_ds.map(decode).batch(64)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n"
    )
    notebook = notebook_from(code)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert "train_ds, rank_batch_size = npu.distribute.shard_and_rebatch_dataset(train_ds, 64)" in fixed
    assert analyze(notebook_from(fixed)).steps["shard"] == "present"


def test_a_kafka_consumer_group_is_not_sharded_again():
    """The broker gives each consumer of a group its own partitions already."""
    code = (
        "import tensorflow as tf\nimport tensorflow_io as tfio\n"
        "train_ds = tfio.experimental.streaming.KafkaGroupIODataset(topics=['train'], group_id='g')\n"
        "train_ds = train_ds.map(decode).batch(64)\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(train_ds)\n"
    )
    findings = [f for f in analyze(notebook_from(code)).findings if f.code == "missing-shard"]
    assert all(not f.edits for f in findings)


def test_a_read_session_of_a_notebook_without_tensorflow_io_is_not_a_source():
    code = (
        "import tensorflow as tf\n"
        "ds = session.parallel_read_rows()\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds.batch(8))\n"
    )
    findings = [f for f in analyze(notebook_from(code)).findings if f.code == "missing-shard"]
    assert all(".shard(" not in edit.code for f in findings for edit in f.edits)


def test_tfds_whole_split_tensors_are_sliced_at_fit_not_sharded_as_one_element():
    code = (
        "import tensorflow as tf\nimport tensorflow_datasets as tfds\n"
        "train = tfds.as_numpy(tfds.load('mnist', split='train', batch_size=-1))\n"
        "x_train, y_train = train['image'], train['label']\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(x_train, y_train, batch_size=64)\n"
    )
    notebook = notebook_from(code)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert ".shard(" not in fixed
    assert ("model.fit(x_train[rank_id::rank_size][:len(y_train) // rank_size], "
            "y_train[rank_id::rank_size][:len(y_train) // rank_size], batch_size=64 // rank_size,") in fixed


def _compile_site(code):
    analysis = analyze(notebook_from(code))
    [(cell, facts, site)] = list(analysis.context.facts.calls("compile"))
    return analysis.context, cell, facts, site


def test_compile_without_an_optimizer_gets_keras_default_rmsprop_wrapped():
    code = "import tensorflow as tf\nmodel.compile(loss='binary_crossentropy', metrics=['accuracy'])\nmodel.fit(ds)\n"
    context, cell, facts, site = _compile_site(code)
    wrapper = "npu.distribute.npu_distributed_keras_optimizer_wrapper"
    edit = default_optimizer_argument(context, cell, facts, site, wrapper, "npu_device")
    assert apply_edits(code, [edit]).splitlines()[1] == (
        "model.compile(loss='binary_crossentropy', metrics=['accuracy'], "
        "optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.RMSprop()))"
    )


@pytest.mark.parametrize("call", [
    "model.compile('adam', loss='mse')",
    "model.compile(optimizer='adam', loss='mse')",
    "model.compile(loss='mse', **settings)",
    "model.compile()",
])
def test_a_compile_that_has_or_may_have_an_optimizer_gets_none_added(call):
    context, cell, facts, site = _compile_site(f"import tensorflow as tf\n{call}\nmodel.fit(ds)\n")
    assert default_optimizer_argument(context, cell, facts, site, "wrap", "npu_device") is None


FED_BY_OFFSET = (
    "import tensorflow as tf\n"
    "batch_size = 16\n"
    "x = tf.placeholder(tf.float32, shape=(batch_size, 1))\n"
    "train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss(x))\n"
    "# %%\n"
    "with tf.Session() as session:\n"
    "    session.run(tf.global_variables_initializer())\n"
    "    for step in range(6):\n"
    "        offset = (step * batch_size) % (train_labels.shape[0] - batch_size)\n"
    "        batch_data = train_dataset[offset:(offset + batch_size), :]\n"
    "        session.run(train_op, feed_dict={x: batch_data, y: train_labels[offset:(offset + batch_size)]})\n"
)


class _Session:
    """Records what each step feeds."""

    def __init__(self):
        self.fed = []

    def __enter__(self):
        return self

    def __exit__(self, *error):
        return False

    def run(self, fetches, feed_dict=None):
        if feed_dict:
            self.fed.append([value.copy() for value in feed_dict.values()])


def _fed_rows(fixed_cells, rank_size, rank_id, monkeypatch):
    import types

    import numpy as np

    monkeypatch.setenv("RANK_SIZE", str(rank_size))
    monkeypatch.setenv("RANK_ID", str(rank_id))
    session = _Session()
    fake_tf = types.SimpleNamespace(Session=lambda: session, global_variables_initializer=lambda: None)
    rows = np.arange(64, dtype=float).reshape(64, 1)
    namespace = {"tf": fake_tf, "train_dataset": rows, "train_labels": rows[:, 0], "x": "x", "y": "y", "train_op": None}
    setup, loop = fixed_cells
    exec("import os\n" + setup.splitlines()[2], namespace)  # the batch size line
    exec(loop, namespace)
    return namespace["batch_size"], [set(step[0][:, 0]) for step in session.fed]


def test_a_session_fed_by_offset_gives_each_rank_its_own_rows_and_one_card_its_old_ones(monkeypatch):
    notebook = notebook_from(FED_BY_OFFSET)
    analysis = analyze(notebook)
    fixed = fix_notebook(notebook, analysis, {"missing-shard", "missing-setup"}).sources
    cells = [fixed.get(cell.index, cell.source) for cell in notebook.cells]
    assert cells[0].splitlines()[2] == "batch_size = 16 // int(os.getenv('RANK_SIZE', '1'))"

    single_batch, single = _fed_rows(cells, 1, 0, monkeypatch)
    assert single_batch == 16 and single[1] == set(range(16, 32))  # one card: as before the fix
    rank_steps = [_fed_rows(cells, 2, rank, monkeypatch) for rank in (0, 1)]
    assert all(batch == 8 for batch, _ in rank_steps)
    for step in range(6):
        rows_0, rows_1 = rank_steps[0][1][step], rank_steps[1][1][step]
        assert len(rows_0) == len(rows_1) == 8 and not rows_0 & rows_1
    assert analyze(notebook_from(joined(notebook, fixed))).steps["shard"] == "present"


def test_an_image_iterator_that_fit_does_not_train_on_is_left_as_it_is():
    """``next(...)`` of a Keras iterator (a Sequence has no ``__next__``) and an iterator only looked at."""
    code = (
        "import tensorflow as tf\n"
        "img_gen = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1./255)\n"
        "images, labels = next(img_gen.flow_from_directory(flowers))\n"
        "train_gen = img_gen.flow_from_directory(flowers, batch_size=64)\n"
        "plot(train_gen[0])\n"
        "train_gen = img_gen.flow_from_directory(flowers, batch_size=64, shuffle=True)\n"
        "model.compile(optimizer='adam', loss='mse')\nmodel.fit(train_gen, epochs=2)\n"
    )
    notebook = notebook_from(code)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert "images, labels = next(img_gen.flow_from_directory(flowers))\n" in fixed
    assert "train_gen = img_gen.flow_from_directory(flowers, batch_size=64)\nplot(train_gen[0])\n" in fixed
    assert ("train_gen = RankBatches(img_gen.flow_from_directory(flowers, batch_size=64 // "
            "int(os.getenv('RANK_SIZE', '1')), shuffle=True))") in fixed


def test_a_lambda_given_to_distribute_datasets_from_function_shards_once_by_rank():
    from npu_migrate_nb.rules.tf_distribute import TfDistributeLeftover

    [example] = [e for e in TfDistributeLeftover.INVALID if "lambda input_context" in e.before]
    notebook = notebook_from(example.before + "# %%\nmodel.compile(optimizer='sgd', loss='mse')\nmodel.fit(dist_ds)\n")
    analysis = analyze(notebook)
    assert not [f for f in analysis.findings if f.code == "missing-shard"]  # the dataset function's own shard
    fixed = joined(notebook, fix_notebook(notebook, analysis).sources)
    assert fixed.count(".shard(") == 1
    assert analyze(notebook_from(fixed)).steps["shard"] == "present"


WRITES_ITS_MODULE = (
    "%%writefile mnist_setup.py\n"
    "import tensorflow as tf\n"
    "def build_and_compile_cnn_model():\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
    "    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss='mse')\n"
    "    return model\n"
    "# %%\n"
    "import tensorflow as tf\n"
    "import mnist_setup\n"
    "model = mnist_setup.build_and_compile_cnn_model()\n"
    "model.fit(x, y, batch_size=8)\n"
)


def test_a_module_the_notebook_writes_is_read_from_its_cell():
    from npu_migrate_nb.modules import written_modules

    notebook = notebook_from(WRITES_ITS_MODULE)
    assert written_modules(notebook) == {"mnist_setup": (0, WRITES_ITS_MODULE.split("# %%\n")[0].split("\n", 1)[1])}
    analysis = analyze(notebook)
    assert analysis.framework == "keras"
    [module] = analysis.context.modules.found
    assert (module.name, module.path, module.cell) == ("mnist_setup", "mnist_setup.py", 0)
    [allreduce] = [f for f in analysis.findings if f.code == "missing-allreduce"]
    assert allreduce.path == "mnist_setup.py" and allreduce.line == 4  # the compile, in the module's own lines


def test_an_appended_or_non_python_written_file_is_no_module():
    from npu_migrate_nb.modules import written_modules

    appended = WRITES_ITS_MODULE.replace("%%writefile mnist_setup.py", "%%writefile -a mnist_setup.py")
    config = WRITES_ITS_MODULE.replace("%%writefile mnist_setup.py", "%%writefile mnist_setup.json")
    assert written_modules(notebook_from(appended)) == {}
    assert written_modules(notebook_from(config)) == {}
