import tensorflow as tf


def _filter_and_allreduce_gradients(grads_and_vars):
    grads, variables = zip(*grads_and_vars)
    # The script's SUM strategy: on one card the default strategy's all-reduce changes nothing.
    allreduced_grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, list(grads))
    return allreduced_grads, variables


def minimize_using_explicit_allreduce(tape, optimizer, loss, trainable_variables):
    grads = tape.gradient(loss, trainable_variables)
    allreduced_grads, variables = _filter_and_allreduce_gradients(zip(grads, trainable_variables))
    optimizer.apply_gradients(zip(allreduced_grads, variables))
