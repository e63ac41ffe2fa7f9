"""Real notebooks, offline: Keras' dataset loaders served from synthetic files in their own formats.

The run-time corpus benchmark (``bench_corpus_run.py``) and its CI test run public tutorials whose
code is left untouched, on a machine with no internet. What the notebooks would download is made
here instead, once per folder, in the exact file format each loader reads (the same file names,
archive layouts, dtypes and per-sample shapes), with random contents:

* ``mnist.npz``, Fashion-MNIST's four ``idx`` files (gzip), CIFAR-10's and CIFAR-100's pickled
  batches (the folders the loaders untar to), ``imdb.npz`` and ``reuters.npz`` with their word
  indexes, ``boston_housing.npz``; scikit-learn's California housing cache (``cal_housing_py3.pkz``);
* the notebook-made files that a course reads from an earlier notebook (``notMNIST.pickle``);
* TensorFlow Datasets through its own mock (``tfds.testing.mock_data``): every dataset's real features
  (shapes, dtypes, class counts from its published metadata) with random contents, no download.

Sizes: a tenth of the real sample counts, so that a corpus run stays within an hour on two cores,
except where the loader itself hard-codes the count (CIFAR-10 fills five batches of 10,000) or the
notebook's code names a count that a tenth would not reach (an integer literal above the small size,
``x_train[:10000]``): then the real count. :func:`sizes_for` decides; the decision is in the run's
output.

:func:`install` runs in every simulated rank (and on the single card) before the notebook: ``HOME``
points at the folder (``~/.keras/datasets`` is where the loaders look), the loaders' hash check
accepts the files made here and only those, and any download raises ``OfflineError`` naming the URL:
no download is ever attempted. ``pip install`` of a package that is installed is a no-op (it is
printed); of one that is not, an ``OfflineError``.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import pickle
import re
import shlex
import struct
from dataclasses import dataclass
from typing import Dict, Iterable, Optional

import numpy as np

# Marks a folder whose files are complete (written last).
_DONE = ".complete"


class OfflineError(RuntimeError):
    """The notebook asked for something from the network."""


@dataclass(frozen=True)
class Dataset:
    module: str  # the Keras loader module: tf.keras.datasets.<module>.load_data
    train: int  # the real sample counts
    test: int
    fixed_by_loader: bool = False  # the loader hard-codes the counts: the fake must have them


DATASETS: Dict[str, Dataset] = {
    "mnist": Dataset("mnist", 60000, 10000),
    "fashion_mnist": Dataset("fashion_mnist", 60000, 10000),
    "cifar10": Dataset("cifar10", 50000, 10000, fixed_by_loader=True),
    "cifar100": Dataset("cifar100", 50000, 10000),
    "imdb": Dataset("imdb", 25000, 25000),
    "reuters": Dataset("reuters", 8982, 2246),
    "boston_housing": Dataset("boston_housing", 404, 102),
    # scikit-learn's loader (Hands-On ML's regression chapters): its cache file, where it looks first.
    "fetch_california_housing": Dataset("sklearn.datasets", 20640, 0),
}
SMALL = 0.1  # the share of the real counts a fake has by default
_NOTEBOOK_FILES = {"notMNIST.pickle": (200000, 10000, 10000)}  # train, valid, test: the course's sizes


def datasets_used(source: str) -> list:
    """The Keras datasets a notebook's code loads (``tf.keras.datasets.mnist``, ``from ... import mnist``)."""
    return sorted(name for name in DATASETS if re.search(rf"\b{name}\b", source))


def sizes_for(source: str) -> Dict[str, float]:
    """Per dataset the notebook loads, the share of the real counts its fake gets: SMALL, or 1.0 when
    the loader needs the real counts or the code has an integer literal above the small training count
    (a slice or a reshape the small fake would not reach)."""
    literals = [int(text) for text in re.findall(r"(?<![\w.])\d{3,7}(?![\w.])", source)]
    shares = {}
    for name in datasets_used(source):
        dataset = DATASETS[name]
        small = int(dataset.train * SMALL)
        needs_real = dataset.fixed_by_loader or any(small < value <= dataset.train for value in literals)
        shares[name] = 1.0 if needs_real else SMALL
    return shares


def home_for(root: str, shares: Dict[str, float]) -> str:
    """The folder (a fake ``HOME``) with each dataset at its share, made once and reused."""
    key = "-".join(f"{name}{share:g}" for name, share in sorted(shares.items())) or "none"
    home = os.path.join(root, key)
    if os.path.exists(os.path.join(home, _DONE)):
        return home
    folder = os.path.join(home, ".keras", "datasets")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, share in shares.items():
        dataset = DATASETS[name]
        _WRITERS[name](folder, rng, round(dataset.train * share), round(dataset.test * share))
    open(os.path.join(home, _DONE), "w").close()
    return home


def write_notebook_files(folder: str, source: str) -> list:
    """Files a notebook reads from an earlier notebook of its course, made in its folder."""
    written = []
    for name, (train, valid, test) in _NOTEBOOK_FILES.items():
        if name in source and not os.path.exists(os.path.join(folder, name)):
            _write_not_mnist(os.path.join(folder, name), train, valid, test)
            written.append(name)
    return written


# ---------------------------------------------------------------------------------- the formats


def _images(rng, count: int, shape) -> np.ndarray:
    return rng.integers(0, 256, (count, *shape), dtype=np.uint8)


def _labels(rng, count: int, classes: int, dtype=np.uint8) -> np.ndarray:
    return rng.integers(0, classes, count).astype(dtype)


def _write_mnist(folder, rng, train, test):
    np.savez_compressed(
        os.path.join(folder, "mnist.npz"),
        x_train=_images(rng, train, (28, 28)), y_train=_labels(rng, train, 10),
        x_test=_images(rng, test, (28, 28)), y_test=_labels(rng, test, 10),
    )


def _write_fashion_mnist(folder, rng, train, test):
    """The four idx files, gzipped: labels after an 8-byte header, images after a 16-byte one."""
    target = os.path.join(folder, "fashion-mnist")
    os.makedirs(target, exist_ok=True)
    for prefix, count in (("train", train), ("t10k", test)):
        labels, images = _labels(rng, count, 10), _images(rng, count, (28, 28))
        with gzip.open(os.path.join(target, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as stream:
            stream.write(struct.pack(">II", 2049, count) + labels.tobytes())
        with gzip.open(os.path.join(target, f"{prefix}-images-idx3-ubyte.gz"), "wb") as stream:
            stream.write(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())


def _pickle_batch(path: str, count: int, rng, labels: Dict[str, int]) -> None:
    """A CIFAR batch as the loaders unpickle it: bytes keys, rows of 3072 channel-major bytes."""
    batch = {b"data": _images(rng, count, (3072,))}
    for key, classes in labels.items():
        batch[key.encode()] = [int(v) for v in rng.integers(0, classes, count)]
    with open(path, "wb") as stream:
        pickle.dump(batch, stream, protocol=2)


def _untarred(folder: str, name: str) -> str:
    """The folder ``get_file(..., untar=True)`` returns; the archive beside it only has to exist."""
    target = os.path.join(folder, name)
    os.makedirs(target, exist_ok=True)
    open(target + ".tar.gz", "wb").close()
    return target


def _write_cifar10(folder, rng, train, test):
    target = _untarred(folder, "cifar-10-batches-py")
    per_batch = train // 5
    for index in range(1, 6):
        _pickle_batch(os.path.join(target, f"data_batch_{index}"), per_batch, rng, {"labels": 10})
    _pickle_batch(os.path.join(target, "test_batch"), test, rng, {"labels": 10})


def _write_cifar100(folder, rng, train, test):
    target = _untarred(folder, "cifar-100-python")
    for name, count in (("train", train), ("test", test)):
        _pickle_batch(os.path.join(target, name), count, rng, {"fine_labels": 100, "coarse_labels": 20})


def _sequences(rng, count: int, vocabulary: int, lengths=(20, 400)) -> np.ndarray:
    """Word-index lists as the npz files store them (object arrays of lists, indices from 1)."""
    sizes = rng.integers(lengths[0], lengths[1], count)
    return np.array([rng.integers(1, vocabulary, size).tolist() for size in sizes], dtype=object)


def _write_word_index(path: str, vocabulary: int) -> None:
    with open(path, "w", encoding="utf-8") as stream:
        json.dump({f"word{index}": index for index in range(1, vocabulary)}, stream)


def _write_imdb(folder, rng, train, test):
    vocabulary = 88585
    np.savez_compressed(
        os.path.join(folder, "imdb.npz"),
        x_train=_sequences(rng, train, vocabulary), y_train=_labels(rng, train, 2, np.int64),
        x_test=_sequences(rng, test, vocabulary), y_test=_labels(rng, test, 2, np.int64),
    )
    _write_word_index(os.path.join(folder, "imdb_word_index.json"), vocabulary)


def _write_reuters(folder, rng, train, test):
    """One x and one y: the loader shuffles them and splits off its own test share."""
    vocabulary, count = 30980, train + test
    np.savez_compressed(os.path.join(folder, "reuters.npz"),
                        x=_sequences(rng, count, vocabulary, (10, 300)), y=_labels(rng, count, 46, np.int64))
    _write_word_index(os.path.join(folder, "reuters_word_index.json"), vocabulary)


def _write_boston_housing(folder, rng, train, test):
    count = train + test
    np.savez(os.path.join(folder, "boston_housing.npz"),
             x=rng.normal(10.0, 5.0, (count, 13)), y=rng.uniform(5.0, 50.0, count))


def _write_not_mnist(path: str, train: int, valid: int, test: int) -> None:
    """The pickle the Udacity course's first notebook writes: float32 images in [-0.5, 0.5], int labels."""
    rng = np.random.default_rng(1)
    data = {}
    for part, count in (("train", train), ("valid", valid), ("test", test)):
        data[f"{part}_dataset"] = (rng.random((count, 28, 28), dtype=np.float32) - 0.5)
        data[f"{part}_labels"] = rng.integers(0, 10, count).astype(np.int32)
    with open(path, "wb") as stream:
        pickle.dump(data, stream, pickle.HIGHEST_PROTOCOL)


def _write_california_housing(folder, rng, train, test):
    """scikit-learn's cache of the California housing data (``~/scikit_learn_data/cal_housing_py3.pkz``,
    a joblib dump): per district the house value in dollars, then median income, age, total rooms,
    total bedrooms, population, households, latitude, longitude, in the order the loader stores them."""
    import joblib

    households = rng.uniform(50, 2000, train)
    income = rng.uniform(0.5, 15, train)
    columns = [
        np.clip(income * 40000 + rng.normal(0, 30000, train), 15000, 500001),
        income,
        rng.integers(1, 53, train).astype(float),
        households * rng.uniform(3, 8, train),
        households * rng.uniform(0.8, 1.5, train),
        households * rng.uniform(2, 4, train),
        households,
        rng.uniform(32.5, 42, train),
        rng.uniform(-124.3, -114.3, train),
    ]
    target = os.path.join(os.path.dirname(os.path.dirname(folder)), "scikit_learn_data")
    os.makedirs(target, exist_ok=True)
    joblib.dump(np.stack(columns, axis=1), os.path.join(target, "cal_housing_py3.pkz"), compress=6)


_WRITERS = {
    "mnist": _write_mnist,
    "fashion_mnist": _write_fashion_mnist,
    "cifar10": _write_cifar10,
    "cifar100": _write_cifar100,
    "imdb": _write_imdb,
    "reuters": _write_reuters,
    "boston_housing": _write_boston_housing,
    "fetch_california_housing": _write_california_housing,
}


# ------------------------------------------------------------------------------ in every rank


def install(home: str) -> None:
    """In a rank (or a single-card process), before the notebook: the loaders read ``home``'s files,
    TensorFlow Datasets serves its own mock data, downloads raise, ``pip install`` of installed
    packages is a no-op."""
    os.environ["HOME"] = home
    _serve_loaders_from(os.path.join(home, ".keras"))
    _mock_tensorflow_datasets()
    _serve_tf1_mnist_loader()
    _answer_pip_offline()


_TF1_MNIST = "tensorflow.examples.tutorials.mnist"


def _serve_tf1_mnist_loader() -> None:
    """``from tensorflow.examples.tutorials.mnist import input_data``: TensorFlow 1.15's loader
    (``tf1_mnist_input_data``), where the installed TensorFlow has none (never over a real one)."""
    import importlib.util
    import sys
    import types

    try:
        if importlib.util.find_spec("tensorflow.examples") is not None:
            return
    except ImportError:
        return  # no TensorFlow
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(_TF1_MNIST + ".input_data", os.path.join(here, "tf1_mnist_input_data.py"))
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    parent = None
    for name in ("tensorflow.examples", "tensorflow.examples.tutorials", _TF1_MNIST):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules[name] = package
        if parent is not None:
            setattr(parent, name.rsplit(".", 1)[1], package)
        parent = package
    parent.input_data = loader
    sys.modules[_TF1_MNIST + ".input_data"] = loader


# Examples per split of a mocked TensorFlow Datasets dataset: a few hundred steps of a small batch.
TFDS_EXAMPLES = 512
_tfds_mock = None


def _mock_tensorflow_datasets() -> None:
    """``tfds.load``/``tfds.builder`` give random examples of each dataset's real features, from
    TensorFlow Datasets' own ``tfds.testing.mock_data`` (its test mock: the dataset's published
    metadata, shapes and dtypes, no download), for the rest of the process. Nothing when TensorFlow
    Datasets is not installed (its notebooks are then left out)."""
    global _tfds_mock
    if _tfds_mock is not None:
        return
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        return
    _tfds_mock = tfds.testing.mock_data(num_examples=TFDS_EXAMPLES)
    _tfds_mock.__enter__()  # left entered: the notebook's cells run after this returns
    _give_splits_their_names(tfds)


# Split names as TensorFlow Datasets' catalog publishes them, for the datasets whose names are not
# train/test. The mock knows a dataset's splits only from metadata the pip package does not ship, so
# ``tfds.load(name)`` (every split, in a dict) found none: KeyError 'train' in every notebook that
# loads that way, on one card as on the ranks.
CATALOG_SPLITS = {
    "cats_vs_dogs": ("train",),
    "tf_flowers": ("train",),
    "rock_paper_scissors": ("train", "test"),
    "imdb_reviews": ("train", "test", "unsupervised"),
    "glue": ("train", "validation", "test"),
    "ted_hrlr_translate": ("train", "validation", "test"),
    "cycle_gan": ("trainA", "trainB", "testA", "testB"),
    "penguins": ("train",),
    "iris": ("train",),
    "horses_or_humans": ("train", "test"),
    "beans": ("train", "validation", "test"),
    "oxford_flowers102": ("train", "validation", "test"),
    "caltech_birds2011": ("train", "test"),
    "stanford_dogs": ("train", "test"),
    "food101": ("train", "validation"),
    "malaria": ("train",),
    "cassava": ("train", "validation", "test"),
    "wmt14_translate": ("train", "validation", "test"),
    "squad": ("train", "validation"),
    "ag_news_subset": ("train", "test"),
    "movielens": ("train",),
    "wine_quality": ("train",),
    "titanic": ("train",),
}


def _give_splits_their_names(tfds) -> None:
    from tensorflow_datasets.core import splits as tfds_splits

    published = tfds.core.DatasetInfo.splits

    def splits(info):
        found = published.fget(info)
        if len(found):
            return found
        names = CATALOG_SPLITS.get(info.name.split("/")[0], ("train", "test"))
        return tfds_splits.SplitDict(
            [tfds_splits.SplitInfo(name=name, shard_lengths=[TFDS_EXAMPLES], num_bytes=0) for name in names],
)

    tfds.core.DatasetInfo.splits = property(splits, published.fset)


def _serve_loaders_from(root: str) -> None:
    from keras.src.utils import data_utils

    checked = data_utils.validate_file
    if getattr(checked, "_offline", False):
        return

    def validate_file(fpath, file_hash, algorithm="auto", chunk_size=65535):
        if os.path.abspath(fpath).startswith(root + os.sep):
            return True  # made by this module: its hash is not the real file's
        return checked(fpath, file_hash, algorithm, chunk_size)

    def urlretrieve(url, *args, **kwargs):
        raise OfflineError(f"offline: the notebook downloads {url}")

    validate_file._offline = True
    data_utils.validate_file = validate_file
    data_utils.urlretrieve = urlretrieve


def _answer_pip_offline() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell.system, "_offline", False):
        return
    system = shell.system

    def offline_system(command, *args, **kwargs):
        packages = pip_installs(command)
        if packages is None:
            return system(command, *args, **kwargs)
        return _pretend_installed(packages)

    def pip_magic(line):
        packages = pip_installs("pip " + line)
        return _pretend_installed(packages or [])

    offline_system._offline = True
    shell.system = offline_system
    shell.register_magic_function(pip_magic, "line", "pip")


def pip_installs(command: str) -> Optional[list]:
    """The requirements of a ``pip install`` shell command (``python -m pip`` too), else None."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    for index, word in enumerate(words):
        if os.path.basename(word) in ("pip", "pip3") or (word == "-m" and words[index + 1:index + 2] == ["pip"]):
            rest = words[index + (2 if word == "-m" else 1):]
            if rest[:1] != ["install"]:
                return None
            return [item for item in rest[1:] if not item.startswith("-")]
    return None


def _pretend_installed(requirements: Iterable[str]) -> None:
    missing = [req for req in requirements if not _installed(req)]
    if missing:
        raise OfflineError(f"offline: the notebook installs {' '.join(missing)}, which is not installed here")
    print(f"(offline: pip install skipped, already installed: {' '.join(requirements)})")


# TensorFlow under another name or version (a notebook asks for tf-nightly, or pins 2.8): the
# simulator's engine is the TensorFlow installed here, whatever the notebook asks for.
_TENSORFLOW_FLAVOURS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tf-nightly-cpu",
                        "tf-nightly-gpu", "tensorflow-estimator", "tf-estimator-nightly", "keras", "tf-keras-nightly"}


def _installed(requirement: str) -> bool:
    name = re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0]
    if not name or "/" in name or name.endswith((".whl", ".tar.gz", ".zip")):
        return False
    if name.lower().replace("_", "-") in _TENSORFLOW_FLAVOURS:
        name = "tensorflow-cpu"
    elif name.lower().replace("_", "-") == "tfds-nightly":  # TensorFlow Datasets' nightly: the one installed
        name = "tensorflow-datasets"
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
