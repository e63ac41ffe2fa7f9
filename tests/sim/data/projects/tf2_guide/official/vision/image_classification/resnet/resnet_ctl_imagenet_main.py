import argparse

import tensorflow as tf
from official.vision.image_classification.resnet import resnet_runnable


def run(flags_obj):
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        runnable = resnet_runnable.ResnetRunnable(flags_obj.batch_size, flags_obj.train_steps)
    loss = runnable.train()
    print("final loss", float(loss))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--train_steps", type=int, default=20)
    run(parser.parse_args())
