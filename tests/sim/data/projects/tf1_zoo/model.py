import tensorflow.compat.v1 as tf


def model_fn(features, labels, mode, params):
    hidden = tf.layers.dense(features, 32, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, 4)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
