import tensorflow as tf
from official.staging.training import grad_utils
from official.vision.image_classification.resnet import imagenet_preprocessing


class ResnetRunnable:
    def __init__(self, batch_size, steps):
        self.batch_size = batch_size
        self.steps = steps
        self.model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                          tf.keras.layers.Dense(2)])
        self.optimizer = tf.keras.optimizers.SGD(0.1)
        self.input_fn = imagenet_preprocessing.input_fn

    def train_step(self, iterator):
        images, labels = next(iterator)
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            prediction_loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.reduce_sum(prediction_loss) * (1.0 / self.batch_size)
        grad_utils.minimize_using_explicit_allreduce(tape, self.optimizer, loss, self.model.trainable_variables)
        return loss

    def train(self):
        iterator = iter(self.input_fn(is_training=True, batch_size=self.batch_size))
        for _ in range(self.steps):
            loss = self.train_step(iterator)
        return loss
