"""TensorFlow 1's MNIST loader (``tensorflow.examples.tutorials.mnist.input_data``), for the corpus
benchmark only: TF1 notebooks (TensorFlow-Examples, courses of the TF 1 era) load MNIST with it, and
TensorFlow 1.15, the vendor's TF1 line, ships it; TensorFlow 2.15, the simulator's engine, does not.

Its API and behaviour as TF 1.15 has them (``tensorflow/contrib/learn/python/learn/datasets/mnist.py``):
``read_data_sets(train_dir, fake_data=False, one_hot=False, dtype=float32, reshape=True,
validation_size=5000, seed=None, source_url=...)`` returns ``Datasets(train, validation, test)`` of
``DataSet`` (``images``, ``labels``, ``num_examples``, ``epochs_completed``, ``next_batch``, whose
shuffle and epoch wrap-around are the original's). The samples are the benchmark's synthetic
``mnist.npz`` (Keras' format) in ``~/.keras/datasets``, never a download: ``train_dir`` is not read.
"""

from __future__ import annotations

import collections
import os

import numpy

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])
DEFAULT_SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FLOAT32, UINT8 = "float32", "uint8"


def dense_to_one_hot(labels_dense, num_classes):
    num_labels = labels_dense.shape[0]
    index_offset = numpy.arange(num_labels) * num_classes
    labels_one_hot = numpy.zeros((num_labels, num_classes))
    labels_one_hot.flat[index_offset + labels_dense.ravel()] = 1
    return labels_one_hot


class DataSet(object):
    def __init__(self, images, labels, fake_data=False, one_hot=False, dtype=FLOAT32, reshape=True, seed=None):
        numpy.random.seed(seed)
        dtype = numpy.dtype(getattr(dtype, "as_numpy_dtype", dtype))
        if dtype not in (numpy.uint8, numpy.float32):
            raise TypeError("Invalid image dtype %r, expected uint8 or float32" % dtype)
        assert images.shape[0] == labels.shape[0], "images.shape: %s labels.shape: %s" % (images.shape, labels.shape)
        self._num_examples = images.shape[0]
        if reshape:
            images = images.reshape(images.shape[0], images.shape[1] * images.shape[2])
        if dtype == numpy.float32:
            images = images.astype(numpy.float32)
            images = numpy.multiply(images, 1.0 / 255.0)
        self._images = images
        self._labels = labels
        self._epochs_completed = 0
        self._index_in_epoch = 0

    @property
    def images(self):
        return self._images

    @property
    def labels(self):
        return self._labels

    @property
    def num_examples(self):
        return self._num_examples

    @property
    def epochs_completed(self):
        return self._epochs_completed

    def next_batch(self, batch_size, fake_data=False, shuffle=True):
        start = self._index_in_epoch
        if self._epochs_completed == 0 and start == 0 and shuffle:
            perm0 = numpy.arange(self._num_examples)
            numpy.random.shuffle(perm0)
            self._images = self.images[perm0]
            self._labels = self.labels[perm0]
        if start + batch_size > self._num_examples:
            self._epochs_completed += 1
            rest_num_examples = self._num_examples - start
            images_rest_part = self._images[start:self._num_examples]
            labels_rest_part = self._labels[start:self._num_examples]
            if shuffle:
                perm = numpy.arange(self._num_examples)
                numpy.random.shuffle(perm)
                self._images = self.images[perm]
                self._labels = self.labels[perm]
            start = 0
            self._index_in_epoch = batch_size - rest_num_examples
            end = self._index_in_epoch
            return (numpy.concatenate((images_rest_part, self._images[start:end]), axis=0),
                    numpy.concatenate((labels_rest_part, self._labels[start:end]), axis=0))
        self._index_in_epoch += batch_size
        end = self._index_in_epoch
        return self._images[start:end], self._labels[start:end]


def read_data_sets(train_dir, fake_data=False, one_hot=False, dtype=FLOAT32, reshape=True, validation_size=5000,
                   seed=None, source_url=DEFAULT_SOURCE_URL):
    with numpy.load(os.path.join(os.path.expanduser("~"), ".keras", "datasets", "mnist.npz")) as files:
        train_images, train_labels = files["x_train"][..., None], files["y_train"]
        test_images, test_labels = files["x_test"][..., None], files["y_test"]
    if one_hot:
        train_labels, test_labels = dense_to_one_hot(train_labels, 10), dense_to_one_hot(test_labels, 10)
    if not 0 <= validation_size <= len(train_images):
        raise ValueError("Validation size should be between 0 and {}. Received: {}.".format(len(train_images), validation_size))
    validation_images, validation_labels = train_images[:validation_size], train_labels[:validation_size]
    train_images, train_labels = train_images[validation_size:], train_labels[validation_size:]
    options = dict(dtype=dtype, reshape=reshape, seed=seed)
    return Datasets(train=DataSet(train_images, train_labels, **options),
                    validation=DataSet(validation_images, validation_labels, **options),
                    test=DataSet(test_images, test_labels, **options))


def load_mnist(train_dir="MNIST-data"):
    return read_data_sets(train_dir)
