"""The vendor guide's own code shapes (../shared/seeds/): single-card in, distributed out."""

from npu_migrate_nb.analysis import Options, analyze
from npu_migrate_nb.rewrite import fix_notebook

from .conftest import joined, notebook_from

ESTIMATOR_SINGLE_CARD = """\
import os
import tensorflow as tf
from npu_bridge.npu_init import *
rank_size = int(os.getenv('RANK_SIZE', '1'))
def train_data_fn():
  return tf.data.TFRecordDataset(files).map(parse).shuffle(1000).repeat().batch(64)
# %%
def cnn_model_fn(features,labels,mode):
  # build the network
  logits = tf.layers.dense(features, 10)
  # compute the loss
  loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
  # Configure the TrainingOp(for TRAIN mode)
  if mode == tf.estimator.ModeKeys.TRAIN:
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001) # 使用SGD优化器
    train_op=optimizer.minimize(loss=loss,global_step=tf.train.get_global_step()) # 最小化loss
    return tf.estimator.EstimatorSpec(mode=mode,loss=loss,train_op=train_op)
# %%
estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)
hook=hk._LoggerHook(FLAGS)
training_hooks = []
training_hooks.append(hook)
estimator.train(train_data_fn, max_steps=num_steps // rank_size, hooks=training_hooks)
"""

METHOD_ONE = """\
import os
import tensorflow as tf
from npu_bridge.npu_init import *
# %%
def cnn_model_fn(features,labels,mode):
  logits = tf.layers.dense(features, 10)
  loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
  if mode == tf.estimator.ModeKeys.TRAIN:
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)
    optimizer = npu_distributed_optimizer_wrapper(optimizer) # 梯度更新
    train_op=optimizer.minimize(loss=loss,global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode=mode,loss=loss,train_op=train_op)
# %%
estimator = tf.estimator.Estimator(model_fn=cnn_model_fn)
hook=hk._LoggerHook(FLAGS)
training_hooks = []
training_hooks.append(hook)
training_hooks.append(NPUBroadcastGlobalVariablesHook(0,int(os.getenv('RANK_ID','0')))) # 变量广播
estimator.train(train_data_fn, max_steps=num_steps, hooks=training_hooks)
"""

METHOD_TWO = METHOD_ONE.replace(
    "training_hooks.append(NPUBroadcastGlobalVariablesHook(0,int(os.getenv('RANK_ID','0')))) # 变量广播\n", ""
).replace("hooks=training_hooks)", "hooks=npu_hooks_append(training_hooks))  # 变量广播")

TF2_DISTRIBUTED = """\
import tensorflow as tf
import npu_device as npu
npu.open().as_default()
# %%
with distribute_utils.get_strategy_scope(strategy):
  runnable = resnet_runnable.ResnetRunnable(flags_obj, time_callback, per_epoch_steps)
  npu.distribute.broadcast(runnable.model.trainable_variables)
# %%
def _filter_and_allreduce_gradients(grads_and_vars, allreduce_precision="float32", bytes_per_pack=0):
  allreduced_grads = tf.distribute.get_strategy().extended._replica_ctx_all_reduce(tf.distribute.ReduceOp.SUM, grads, hints)
  allreduced_grads = npu.distribute.all_reduce(allreduced_grads,reduction="sum")
  return allreduced_grads, variables
# %%
def input_fn(input_context, batch_size):
  dataset = tf.data.Dataset.list_files(pattern)
  if input_context:
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  dataset, batch_size = npu.distribute.shard_and_rebatch_dataset(dataset, batch_size)
  return dataset.batch(batch_size)
# %%
def step_fn(inputs):
  images, labels = inputs
  with tf.GradientTape() as tape:
    logits = model(images, training=True)
    loss = tf.reduce_sum(prediction_loss) * (1.0 / batch_size)
  grads = tape.gradient(loss, model.trainable_variables)
"""


def codes(text, **options):
    return sorted({f.code for f in analyze(notebook_from(text), Options(**options)).findings})


def test_single_card_estimator_seed_misses_broadcast_and_allreduce_and_divides_steps():
    analysis = analyze(notebook_from(ESTIMATOR_SINGLE_CARD))
    assert analysis.framework == "estimator" and analysis.adapter == "npu_bridge"
    assert analysis.steps["broadcast"] == "missing" and analysis.steps["allreduce"] == "missing"
    found = {f.code: f for f in analysis.findings}
    assert {"missing-broadcast", "missing-allreduce", "double-step-division"} <= set(found)
    assert (found["missing-allreduce"].cell, found["missing-allreduce"].line) == (1, 8)
    assert found["double-step-division"].cell == 2


def test_both_seed_methods_are_accepted_as_distributed():
    for text in (METHOD_ONE, METHOD_TWO):
        analysis = analyze(notebook_from(text))
        assert analysis.steps["broadcast"] == "present"
        assert analysis.steps["allreduce"] == "present"
        assert not {"missing-broadcast", "missing-allreduce", "double-step-division"} & {f.code for f in analysis.findings}


def test_fix_of_the_single_card_seed_gives_method_two_by_default():
    notebook = notebook_from(ESTIMATOR_SINGLE_CARD)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    assert "    optimizer = npu_distributed_optimizer_wrapper(optimizer)\n" in fixed
    assert "estimator.train(train_data_fn, max_steps=num_steps, hooks=npu_hooks_append(training_hooks))" in fixed
    assert "# 使用SGD优化器" in fixed and "# 最小化loss" in fixed  # comments kept


def test_fix_of_the_single_card_seed_gives_method_one_on_request():
    notebook = notebook_from(ESTIMATOR_SINGLE_CARD)
    analysis = analyze(notebook, Options(broadcast_style="hook"))
    fixed = joined(notebook, fix_notebook(notebook, analysis).sources)
    assert (
        "training_hooks.append(hook)\n"
        "training_hooks.append(NPUBroadcastGlobalVariablesHook(0, int(os.getenv('RANK_ID', '0'))))\n"
        "estimator.train(train_data_fn, max_steps=num_steps, hooks=training_hooks)"
    ) in fixed
    assert analyze(notebook_from(fixed)).steps["broadcast"] == "present"


def test_tf2_seed_is_fully_distributed_and_keeps_the_original_sum():
    analysis = analyze(notebook_from(TF2_DISTRIBUTED))
    assert analysis.adapter == "npu_device"
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert "reduction-mismatch" not in {f.code for f in analysis.findings}


def test_tf2_seed_with_mean_instead_of_sum_is_a_reduction_mismatch():
    text = TF2_DISTRIBUTED.replace('all_reduce(allreduced_grads,reduction="sum")', "all_reduce(allreduced_grads)")
    # The all-reduce here is not fed by tape.gradient directly: the ReduceOp.SUM of the script decides.
    text += "  grads = npu.distribute.all_reduce(grads)\n"
    analysis = analyze(notebook_from(text))
    mismatch = [f for f in analysis.findings if f.code == "reduction-mismatch"]
    assert mismatch and '"sum" keeps the single-card math' in mismatch[0].message


def test_tf1_shard_on_the_tool_shape_is_recognized():
    text = "import os\nimport tensorflow as tf\nds = ds.shard(int(os.getenv('RANK_SIZE')), int(os.getenv('RANK_ID')))\n"
    assert "missing-shard" not in codes(text)
