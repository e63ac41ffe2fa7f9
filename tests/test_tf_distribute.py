"""Notebooks written for tf.distribute or Horovod: the strategy is removed (tf-distribute-leftover),
the adapter's steps are added by the missing-step rules, each once; Horovod's op=Sum is kept."""

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from

# The tensorflow.org custom-loop tutorial's shape, in cells.
CUSTOM_LOOP = (
    "import tensorflow as tf\n"
    "# %%\n"
    "strategy = tf.distribute.MirroredStrategy()\n"
    "GLOBAL_BATCH_SIZE = 64 * strategy.num_replicas_in_sync\n"
    "train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000, seed=1).batch(GLOBAL_BATCH_SIZE)\n"
    "train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)\n"
    "# %%\n"
    "with strategy.scope():\n"
    "    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(reduction=tf.keras.losses.Reduction.NONE)\n"
    "    def compute_loss(labels, predictions):\n"
    "        per_example_loss = loss_object(labels, predictions)\n"
    "        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)\n"
    "    model = create_model()\n"
    "    optimizer = tf.keras.optimizers.Adam()\n"
    "# %%\n"
    "def train_step(inputs):\n"
    "    images, labels = inputs\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = compute_loss(labels, model(images, training=True))\n"
    "    gradients = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(gradients, model.trainable_variables))\n"
    "    return loss\n"
    "\n"
    "@tf.function\n"
    "def distributed_train_step(dataset_inputs):\n"
    "    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))\n"
    "    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)\n"
    "# %%\n"
    "for x in train_dist_dataset:\n"
    "    total_loss = distributed_train_step(x)\n"
)

# tensorflow.org "Distributed training with Keras".
KERAS_FIT = (
    "import tensorflow as tf\n"
    "# %%\n"
    "strategy = tf.distribute.MirroredStrategy()\n"
    "print('Number of devices: {}'.format(strategy.num_replicas_in_sync))\n"
    "BATCH_SIZE = 64 * strategy.num_replicas_in_sync\n"
    "train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).map(scale).cache().shuffle(10000, seed=1).batch(BATCH_SIZE)\n"
    "# %%\n"
    "with strategy.scope():\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)), tf.keras.layers.Dense(10)])\n"
    "    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),\n"
    "                  optimizer=tf.keras.optimizers.Adam(), metrics=['accuracy'])\n"
    "# %%\n"
    "model.fit(train_dataset, epochs=12)\n"
)

# MultiWorkerMirroredStrategy with distribute_datasets_from_function and an InputContext.
FROM_FUNCTION = (
    "import tensorflow as tf\n"
    "# %%\n"
    "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
    "def dataset_fn(input_context):\n"
    "    batch_size = input_context.get_per_replica_batch_size(64)\n"
    "    d = tf.data.Dataset.from_tensor_slices((x, y)).repeat()\n"
    "    d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
    "    return d.batch(batch_size).prefetch(2)\n"
    "dist_ds = strategy.distribute_datasets_from_function(dataset_fn)\n"
    "# %%\n"
    "with strategy.scope():\n"
    "    model = create_model()\n"
    "    optimizer = tf.keras.optimizers.SGD(0.1)\n"
    "# %%\n"
    "@tf.function\n"
    "def step(inputs):\n"
    "    def replica_step(batch):\n"
    "        with tf.GradientTape() as tape:\n"
    "            loss = tf.reduce_sum(loss_object(batch[1], model(batch[0]))) / 64\n"
    "        grads = tape.gradient(loss, model.trainable_variables)\n"
    "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    "        return loss\n"
    "    return strategy.reduce('SUM', strategy.run(replica_step, args=(inputs,)), axis=None)\n"
    "# %%\n"
    "iterator = iter(dist_ds)\n"
    "for _ in range(10):\n"
    "    step(next(iterator))\n"
)


def fixed(text):
    notebook = notebook_from(text)
    analysis = analyze(notebook)
    result = fix_notebook(notebook, analysis)
    assert not result.failed
    return analysis, joined(notebook, result.sources)


def assert_stable(source):
    notebook = notebook_from(source)
    analysis = analyze(notebook)
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert [finding.code for finding in analysis.findings] == []
    assert joined(notebook, fix_notebook(notebook, analysis).sources) == source


def test_the_custom_loop_tutorial_loses_its_strategy_and_gains_each_step_once():
    analysis, source = fixed(CUSTOM_LOOP)
    assert analysis.steps == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
    assert "strategy" not in source
    assert "\nmodel = create_model()\n" in source
    assert "per_replica_losses = train_step(dataset_inputs)" in source
    # The loss divided by the global batch keeps the strategy's SUM: once, by the adapter.
    assert source.count('npu.distribute.all_reduce(gradients, reduction="sum")') == 1
    assert 'return npu.distribute.all_reduce(per_replica_losses, reduction="sum")' in source
    assert "GLOBAL_BATCH_SIZE = 64 * int(os.getenv('RANK_SIZE', '1'))" in source
    assert "shard_and_rebatch_dataset(train_dataset, GLOBAL_BATCH_SIZE)" in source
    assert "train_dist_dataset = train_dataset\n" in source
    assert source.count("npu.distribute.broadcast(model.trainable_variables)") == 1
    assert_stable(source)


def test_keras_fit_under_a_scope_keeps_the_model_code_and_wraps_the_optimizer_once():
    _, source = fixed(KERAS_FIT)
    assert "\n# %%\nmodel = tf.keras.Sequential(" in source  # out of the scope, dedented
    assert "scope()" not in source
    assert "optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.Adam())" in source
    assert "format(int(os.getenv('RANK_SIZE', '1')))" in source
    assert "MirroredStrategy" not in source
    assert_stable(source)


def test_an_input_context_becomes_the_rank_and_the_pipeline_is_sharded_once():
    analysis, source = fixed(FROM_FUNCTION)
    assert [f.code for f in analysis.findings if f.code == "missing-shard"] == []  # the InputContext's shard is ours
    assert "batch_size = 64 // int(os.getenv('RANK_SIZE', '1'))" in source
    assert "d = d.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))" in source
    assert "shard_and_rebatch_dataset" not in source
    assert "dist_ds = dataset_fn(tf.distribute.InputContext(num_input_pipelines=int(os.getenv('RANK_SIZE', '1'))" in source
    assert 'return npu.distribute.all_reduce(replica_step(inputs), reduction="sum")' in source
    assert source.count('all_reduce(grads, reduction="sum")') == 1  # divided by the global batch: a sum
    assert_stable(source)


def test_the_edits_of_the_rules_do_not_overlap():
    for text in (CUSTOM_LOOP, KERAS_FIT, FROM_FUNCTION):
        analysis = analyze(notebook_from(text))
        spans = sorted(
            (edit.cell, edit.start, edit.end, finding.code)
            for finding in analysis.findings for edit in finding.edits if edit.kind == "replace"
        )
        for (cell, _, end, code), (next_cell, start, _, next_code) in zip(spans, spans[1:]):
            assert cell != next_cell or end <= start or code == next_code, (code, next_code)


def test_a_strategy_used_in_a_way_without_counterpart_is_reported_and_left_alone():
    text = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nrun_training(strategy)\n"
    analysis = analyze(notebook_from(text))
    (finding,) = [f for f in analysis.findings if f.code == "tf-distribute-leftover"]
    assert not finding.edits and "port it by hand" in finding.message
    assert "cell 0 line 3: strategy" in finding.message


def test_horovod_op_sum_is_kept_by_the_tape_all_reduce():
    text = (
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_sum(model(x)) / GLOBAL_BATCH\n"
        "tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    _, source = fixed(text)
    assert 'grads = npu.distribute.all_reduce(grads, reduction="sum")' in source
    assert "hvd" not in source


def test_a_loss_divided_by_the_global_batch_is_summed_even_where_horovod_averaged_and_the_fix_is_stable():
    # Horovod's average of a loss over the global batch was 1/N of the single-card gradient: the loss
    # decides ("sum"), the message says Horovod averaged, and a second check agrees with the fix.
    text = (
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_sum(model(x)) / GLOBAL_BATCH\n"
        "tape = hvd.DistributedGradientTape(tape)\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
    )
    analysis, source = fixed(text)
    assert 'all_reduce(grads, reduction="sum")' in source
    assert any("averaged" in f.message for f in analysis.findings if f.code == "missing-allreduce")
    assert "reduction-mismatch" not in [f.code for f in analyze(notebook_from(source)).findings]


def test_a_per_rank_mean_loss_with_horovod_sum_stays_a_sum_when_fixed_twice():
    text = (
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = loss_fn(y, model(x))\n"
        "tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    _, source = fixed(text)
    assert 'reduction="sum"' in source
    notebook = notebook_from(source)
    assert "reduction-mismatch" not in [f.code for f in analyze(notebook).findings]
