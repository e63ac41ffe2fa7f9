import numpy as np
import tensorflow.compat.v1 as tf

rng = np.random.RandomState(0)
FEATURES = rng.rand(512, 16).astype(np.float32)
LABELS = (FEATURES.sum(axis=1) * 4 / 16).astype(np.int32) % 4


def train_input_fn(batch_size):
    dataset = tf.data.Dataset.from_tensor_slices((FEATURES, LABELS))
    return dataset.shuffle(512, seed=1).repeat().batch(batch_size, drop_remainder=True)
