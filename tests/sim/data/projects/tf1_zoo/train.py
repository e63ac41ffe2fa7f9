import argparse

import tensorflow.compat.v1 as tf
from npu_bridge.npu_init import *

from data import train_input_fn
from model import model_fn


def main(flags):
    config = npu_run_config_init(run_config=tf.estimator.RunConfig(model_dir=flags.model_dir))
    estimator = tf.estimator.Estimator(model_fn=model_fn, config=config, params={"learning_rate": 0.1})
    estimator.train(lambda: train_input_fn(flags.batch_size), max_steps=flags.steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", default="/tmp/zoo_model")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=16)
    main(parser.parse_args())
