"""Real notebooks, offline: Keras' dataset loaders served from synthetic files in their own formats.

The run-time corpus benchmark (``bench_corpus_run.py``) and its CI test run public tutorials whose
code is left untouched, on a machine with no internet. What the notebooks would download is made
here instead, once per folder, in the exact file format each loader reads (the same file names,
archive layouts, dtypes and per-sample shapes), with random contents:

* ``mnist.npz`` and the same samples as MNIST's four ``idx`` files (gzip, served at their public URLs to
  ``urllib.request.urlretrieve``, which books' download helpers call), Fashion-MNIST's four, CIFAR-10's and CIFAR-100's pickled
  batches (the folders the loaders untar to), ``imdb.npz`` and ``reuters.npz`` with their word
  indexes, ``boston_housing.npz``; scikit-learn's California housing cache (``cal_housing_py3.pkz``);
* the notebook-made files that a course reads from an earlier notebook (``notMNIST.pickle``);
* TensorFlow Datasets through its own mock (``tfds.testing.mock_data``): every dataset's real features
  (shapes, dtypes, class counts from its published metadata) with random contents, no download;
* small public tables that notebooks read by their URL (:data:`TABLES`: the t81-558 course's CSV files,
  TensorFlow's iris, titanic and heart tables, the California housing training split, the monthly
  sunspots): each in its real layout (column names and order, header line or none, separator, value
  types, the categories the notebooks use, missing-value markers), served where the notebook reads it:
  ``pandas.read_csv(url)``, ``tf.keras.utils.get_file(fname, url)``, ``!wget url``,
  ``urllib.request.urlretrieve(url, filename)``.

Sizes: a tenth of the real sample counts, so that a corpus run stays within an hour on two cores,
except where the loader itself hard-codes the count (CIFAR-10 fills five batches of 10,000) or the
notebook's code names a count that a tenth would not reach (an integer literal above the small size,
``x_train[:10000]``): then the real count. :func:`sizes_for` decides; the decision is in the run's
output.

:func:`install` runs in every simulated rank (and on the single card) before the notebook: ``HOME``
points at the folder (``~/.keras/datasets`` is where the loaders look), the loaders' hash check
accepts the files made here and only those, a table's URL gives its local copy, and any other
download raises ``OfflineError`` naming the URL: no download is ever attempted. ``pip install`` of a
package that is installed is a no-op (it is printed); of one that is not, an ``OfflineError``.
"""

from __future__ import annotations

import functools
import gzip
import importlib.metadata
import json
import os
import pickle
import re
import shlex
import shutil
import struct
import tempfile
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional
from urllib.parse import urlsplit

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


def tables_used(source: str) -> list:
    """The tables of :data:`TABLES` whose URL the notebook's code names (``http`` or ``https``)."""
    return sorted(name for name, table in TABLES.items() if table.url.split("://", 1)[1] in source)


def sizes_for(source: str) -> Dict[str, float]:
    """Per dataset the notebook loads, the share of the real counts its fake gets: SMALL, or 1.0 when
    the loader needs the real counts or the code has an integer literal above the small training count
    (a slice or a reshape the small fake would not reach). Per table it reads by URL, 1.0 (a table has
    the rows :data:`TABLES` gives it)."""
    literals = [int(text) for text in re.findall(r"(?<![\w.])\d{3,7}(?![\w.])", source)]
    shares = {}
    for name in datasets_used(source):
        dataset = DATASETS[name]
        small = int(dataset.train * SMALL)
        needs_real = dataset.fixed_by_loader or any(small < value <= dataset.train for value in literals)
        shares[name] = 1.0 if needs_real else SMALL
    shares.update((name, 1.0) for name in tables_used(source))
    return shares


def home_for(root: str, shares: Dict[str, float]) -> str:
    """The folder (a fake ``HOME``) with each dataset and table at its share, made once and reused while
    this module's writers stay as they are (a home made by older writers may lack a file they now make)."""
    key = "-".join(f"{name}{share:g}" for name, share in sorted(shares.items())) or "none"
    home = os.path.join(root, _writers_version(), key)
    if os.path.exists(os.path.join(home, _DONE)):
        return home
    folder = os.path.join(home, ".keras", "datasets")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, share in shares.items():
        if name in TABLES:
            _write_table(_tables_folder(home), name, share)
            continue
        dataset = DATASETS[name]
        _WRITERS[name](folder, rng, round(dataset.train * share), round(dataset.test * share))
    open(os.path.join(home, _DONE), "w").close()
    return home


@functools.lru_cache(maxsize=None)
def _writers_version() -> str:
    with open(__file__, "rb") as source:
        return f"{zlib.crc32(source.read()):08x}"


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
    """``mnist.npz`` (Keras' loader), and the same samples as the four idx files of the original
    distribution (:data:`SERVED_FILES`: what the notebooks and books reading them by URL download)."""
    x_train, y_train = _images(rng, train, (28, 28)), _labels(rng, train, 10)
    x_test, y_test = _images(rng, test, (28, 28)), _labels(rng, test, 10)
    np.savez_compressed(os.path.join(folder, "mnist.npz"), x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    target = os.path.join(folder, "mnist-idx")
    _write_idx(target, "train", x_train, y_train)
    _write_idx(target, "t10k", x_test, y_test)


def _write_fashion_mnist(folder, rng, train, test):
    target = os.path.join(folder, "fashion-mnist")
    for prefix, count in (("train", train), ("t10k", test)):
        labels, images = _labels(rng, count, 10), _images(rng, count, (28, 28))
        _write_idx(target, prefix, images, labels)


def _write_idx(target: str, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """MNIST's two idx files of a split, gzipped: labels after an 8-byte header, images after a 16-byte one."""
    os.makedirs(target, exist_ok=True)
    count, rows, columns = images.shape
    with gzip.open(os.path.join(target, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as stream:
        stream.write(struct.pack(">II", 2049, count) + labels.tobytes())
    with gzip.open(os.path.join(target, f"{prefix}-images-idx3-ubyte.gz"), "wb") as stream:
        stream.write(struct.pack(">IIII", 2051, count, rows, columns) + images.tobytes())


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


# ------------------------------------------------------------------------- tables read by URL


@dataclass(frozen=True)
class Table:
    """A small public table a notebook reads by its URL, made in its real layout."""
    url: str
    rows: int  # the real row count, unless the writer says it is a modest part of a large file
    write: Callable  # write(path, rng, rows)


def _lines(path: str, header: Optional[str], rows: Iterable) -> None:
    with open(path, "w", encoding="utf-8", newline="") as stream:
        if header is not None:
            stream.write(header + "\n")
        for fields in rows:
            stream.write(",".join(fields) + "\n")


def _number(value: float, digits: int = 4, point: bool = False) -> str:
    """As the tables print numbers: ``18``, ``17.5``, ``0.07871`` (no trailing zeros); ``point``: a
    whole number keeps one decimal (``26.0``)."""
    text = f"{float(value):.{digits}f}".rstrip("0")
    return text + "0" if point and text.endswith(".") else text.rstrip(".")


def _write_jh_simple(path, rng, rows):
    """The t81-558 course's ``jh-simple-dataset.csv``: a header, then per person an id from 1, a job
    code (33 of them), an area ``a``-``d``, an income in dollars (``NA`` where missing), an aspect, a
    number of subscriptions, two distances, a saving rate, an age, three densities in [0, 1] and the
    product bought, ``a``-``g`` (the class)."""
    jobs = ("11 al am ax bf by cv de dz e2 f8 gj gv kd ke kl kp ks kw mm nb nn ob pe po pq pz qp qw rn sa "
            "vv zz").split()
    job = rng.choice(jobs, rows)
    area = rng.choice(list("abcd"), rows, p=[0.1, 0.15, 0.5, 0.25])
    product = rng.choice(list("abcdefg"), rows, p=[0.16, 0.3, 0.3, 0.1, 0.05, 0.05, 0.04])
    income = np.clip(rng.normal(50000, 15000, rows), 10000, 150000)
    missing = rng.random(rows) < 0.03
    aspect = rng.integers(0, 6000, rows) / 120
    subscriptions = rng.integers(0, 6, rows)
    healthy, unhealthy = rng.uniform(0, 100, rows), rng.uniform(0, 100, rows)
    save_rate = rng.integers(0, 101, rows)
    age = rng.integers(18, 81, rows)
    densities = rng.random((rows, 3))
    _lines(path, "id,job,area,income,aspect,subscriptions,dist_healthy,save_rate,dist_unhealthy,age,"
                 "pop_dense,retail_dense,crime,product",
           ([str(i + 1), job[i], area[i], "NA" if missing[i] else f"{income[i]:.0f}", _number(aspect[i], 6),
             str(subscriptions[i]), _number(healthy[i], 6), str(save_rate[i]), _number(unhealthy[i], 6),
             str(age[i]), *(f"{value:.6f}" for value in densities[i]), product[i]] for i in range(rows)))


def _write_auto_mpg(path, rng, rows):
    """The t81-558 copy of UCI's auto-mpg: a header, then per car its mpg, cylinders, displacement,
    horsepower (``?`` for the six unknown), weight, acceleration, model year (70-82), origin (1-3)
    and name."""
    cylinders = rng.choice([3, 4, 5, 6, 8], rows, p=[0.01, 0.51, 0.01, 0.21, 0.26])
    displacement = np.clip(cylinders * rng.normal(40, 6, rows), 68, 455).round() + 0.5 * (rng.random(rows) < 0.02)
    horsepower = np.clip(displacement * 0.4 + rng.normal(30, 12, rows), 46, 230).round()
    weight = np.clip(displacement * 7.5 + rng.normal(1500, 250, rows), 1613, 5140).round()
    acceleration = np.clip(rng.normal(15.5, 2.7, rows), 8, 24.8).round(1)
    year = rng.integers(70, 83, rows)
    origin = np.where(cylinders >= 6, 1, rng.choice([1, 2, 3], rows, p=[0.5, 0.25, 0.25]))
    mpg = np.clip(60 - weight / 100 + (year - 70) * 0.8 + rng.normal(0, 3, rows), 9, 46.6).round(1)
    unknown = set(rng.choice(rows, min(6, rows), replace=False).tolist())
    makes = ["ford", "chevrolet", "plymouth", "amc", "dodge", "toyota", "datsun", "volkswagen", "honda",
             "buick", "pontiac", "mazda", "fiat", "peugeot", "audi", "volvo"]
    models = ["pinto", "maverick", "impala", "corolla", "civic", "rabbit", "hornet", "custom", "deluxe",
              "sw", "gl", "510", "malibu", "satellite"]
    _lines(path, "mpg,cylinders,displacement,horsepower,weight,acceleration,year,origin,name",
           ([_number(mpg[i]), str(cylinders[i]), _number(displacement[i]),
             "?" if i in unknown else _number(horsepower[i]), _number(weight[i]), _number(acceleration[i]),
             str(year[i]), str(origin[i]), f"{rng.choice(makes)} {rng.choice(models)}"] for i in range(rows)))


# Mean and spread of sepal length, sepal width, petal length, petal width per species (setosa,
# versicolor, virginica), as Fisher's measurements have them.
_IRIS = np.array([[[5.01, 3.43, 1.46, 0.25], [0.35, 0.38, 0.17, 0.11]],
                  [[5.94, 2.77, 4.26, 1.33], [0.52, 0.31, 0.47, 0.2]],
                  [[6.59, 2.97, 5.55, 2.03], [0.64, 0.32, 0.55, 0.27]]])


def _iris_measures(rng, species: np.ndarray) -> np.ndarray:
    mean, spread = _IRIS[species, 0], _IRIS[species, 1]
    return np.clip(rng.normal(mean, spread), 0.1, None).round(1)


def _write_heaton_iris(path, rng, rows):
    """The t81-558 iris: a quoted header (``"sepal_l","sepal_w","petal_l","petal_w","species"``), then
    the four measurements in cm and the species (``Iris-setosa``, ``Iris-versicolor``,
    ``Iris-virginica``), one species after the other."""
    species = np.arange(rows) * 3 // rows
    names = ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
    _lines(path, '"sepal_l","sepal_w","petal_l","petal_w","species"',
           ([*(f"{value:.1f}" for value in measures), names[kind]]
            for measures, kind in zip(_iris_measures(rng, species), species)))


def _write_tf_iris(path, rng, rows):
    """TensorFlow's iris split (``iris_training.csv``, ``iris_test.csv``): a first line of its own
    (the row count, the feature count, the three class names), then the four measurements in cm and
    the class index 0-2, shuffled."""
    species = rng.permutation(np.arange(rows) % 3)
    _lines(path, f"{rows},4,setosa,versicolor,virginica",
           ([*(f"{value:.1f}" for value in measures), str(kind)]
            for measures, kind in zip(_iris_measures(rng, species), species)))


# (mean, spread) of the ten nucleus features: radius, texture, perimeter, area, smoothness,
# compactness, concavity, concave points, symmetry, fractal dimension; mean, standard error, worst.
_WDBC = {
    "mean": [14.1, 19.3, 92.0, 655, 0.096, 0.104, 0.089, 0.049, 0.181, 0.063],
    "se": [0.405, 1.22, 2.87, 40.3, 0.007, 0.025, 0.032, 0.0118, 0.0205, 0.0038],
    "worst": [16.3, 25.7, 107.3, 881, 0.132, 0.254, 0.272, 0.115, 0.29, 0.084],
}
_WDBC_FEATURES = ("radius texture perimeter area smoothness compactness concavity concave_points symmetry "
                  "fractal_dimension").split()


def _write_wdbc(path, rng, rows):
    """The t81-558 copy of the Wisconsin diagnostic breast cancer table: a header, then per sample an
    id, the diagnosis (``M`` or ``B``, 212 to 357) and 30 features (``mean_``, ``se_``, ``worst_`` of
    the ten nucleus measurements)."""
    malignant = rng.permutation(np.arange(rows) < round(rows * 212 / 569))
    columns = []
    for part, means in _WDBC.items():
        for index, mean in enumerate(means):
            larger = 1 + 0.35 * malignant if index in (0, 2, 3, 6, 7) else 1 + 0.1 * malignant
            columns.append(mean * larger * rng.lognormal(0, 0.25, rows))
    values = np.stack(columns, axis=1)
    ids = 8670 + rng.choice(911311832, rows, replace=False)
    header = ",".join(["id", "diagnosis"] + [f"{part}_{name}" for part in _WDBC for name in _WDBC_FEATURES])
    _lines(path, header, ([str(ids[i]), "M" if malignant[i] else "B", *(f"{value:.4g}" for value in values[i])]
                          for i in range(rows)))


def _write_daily_sunspots(path, rng, rows):
    """SILSO's daily total sunspot number (``SN_d_tot_V2.0.csv``, the t81-558 copy): no header, fields
    separated by ``;`` in fixed widths: year, month, day, the date in fractions of a year, the number
    (``-1`` when no observation), its standard deviation (``-1.0``), the number of observations (0 when
    none) and the definitive (1) or provisional (0) mark. The real file has every day from 1818
    (72,865 in the course's copy, the early decades with days unobserved); this one, the last
    ``rows`` days to 2017-06-30, a month without observations first."""
    import datetime

    last = datetime.date(2017, 6, 30)
    with open(path, "w", encoding="utf-8", newline="") as stream:
        for index in range(rows):
            day = last - datetime.timedelta(days=rows - 1 - index)
            length = 366 if day.year % 4 == 0 and (day.year % 100 or day.year % 400 == 0) else 365
            fraction = day.year + (day.timetuple().tm_yday - 0.5) / length
            if index < 30:
                number, error, observations = -1, -1.0, 0
            else:
                cycle = 1 - np.cos(2 * np.pi * (fraction - 1986.7) / 11)
                number = int(max(0, 80 * cycle + rng.normal(0, 15)))
                error, observations = round(1 + rng.random() * 8, 1), int(rng.integers(10, 46))
            definitive = int(index < rows - 180)
            stream.write(f"{day.year:4d};{day.month:02d};{day.day:02d};{fraction:8.3f};{number:4d};"
                         f"{error:5.1f};{observations:4d};{definitive}\n")


def _write_monthly_sunspots(path, rng, rows):
    """The monthly mean total sunspot number of TensorFlow's course (``Sunspots.csv``, Kaggle's copy):
    a header whose first name is empty (``,Date,Monthly Mean Total Sunspot Number``), then the row
    index, the month's last day and the number, from January 1749 (3,235 months, to July 2018)."""
    import calendar

    cycle = 1 - np.cos(2 * np.pi * (np.arange(rows) + 60) / 132)  # eleven years
    values = np.clip(80 * cycle + rng.normal(0, 20, rows), 0, None)
    fields = []
    for index in range(rows):
        year, month = 1749 + index // 12, index % 12 + 1
        last = calendar.monthrange(year, month)[1]
        fields.append([str(index), f"{year}-{month:02d}-{last:02d}", f"{values[index]:.1f}"])
    _lines(path, ",Date,Monthly Mean Total Sunspot Number", fields)


def _write_california_housing_train(path, rng, rows):
    """Google's machine learning crash course split of the California housing data
    (``california_housing_train.csv``): a quoted header, then per district its longitude, latitude,
    median age, total rooms, total bedrooms, population, households, median income (in 10,000s) and
    median house value, every number with six decimals, from the east (longitude -114.3) westwards."""
    households = rng.uniform(50, 2000, rows).round()
    income = rng.uniform(0.5, 15, rows)
    columns = [
        np.sort(rng.uniform(-124.35, -114.31, rows))[::-1],
        rng.uniform(32.54, 41.95, rows),
        rng.integers(1, 53, rows).astype(float),
        (households * rng.uniform(3, 8, rows)).round(),
        (households * rng.uniform(0.8, 1.5, rows)).round(),
        (households * rng.uniform(2, 4, rows)).round(),
        households,
        income,
        np.clip(income * 40000 + rng.normal(0, 30000, rows), 14999, 500001).round(),
    ]
    header = ",".join(f'"{name}"' for name in ("longitude", "latitude", "housing_median_age", "total_rooms",
                                                "total_bedrooms", "population", "households", "median_income",
                                                "median_house_value"))
    values = np.stack(columns, axis=1)
    _lines(path, header, ([f"{value:.6f}" for value in row] for row in values))


def _write_titanic(path, rng, rows):
    """TensorFlow's titanic split (``train.csv``, ``eval.csv``): a header, then per passenger
    survived (0/1), sex (``male``/``female``), age, siblings and spouses, parents and children, fare,
    class (``First``/``Second``/``Third``), deck (``A``-``G`` or ``unknown``), embark town
    (``Southampton``/``Cherbourg``/``Queenstown``/``unknown``) and alone (``y``/``n``)."""
    klass = rng.choice(["First", "Second", "Third"], rows, p=[0.24, 0.21, 0.55])
    sex = rng.choice(["male", "female"], rows, p=[0.65, 0.35])
    age = np.clip(rng.normal(29.5, 13, rows), 0.75, 80).round()
    siblings = rng.choice([0, 1, 2, 3, 4, 5, 8], rows, p=[0.68, 0.23, 0.03, 0.02, 0.02, 0.01, 0.01])
    parents = rng.choice([0, 1, 2, 3, 4, 5], rows, p=[0.76, 0.13, 0.08, 0.01, 0.01, 0.01])
    scale = {"First": (4.2, 0.6), "Second": (2.9, 0.4), "Third": (2.2, 0.4)}
    fare = np.array([rng.lognormal(*scale[name]) for name in klass])
    deck = np.where(klass == "First", rng.choice(list("ABCDE") + ["unknown"], rows),
                    np.where(rng.random(rows) < 0.9, "unknown", rng.choice(list("DEFG"), rows)))
    town = rng.choice(["Southampton", "Cherbourg", "Queenstown", "unknown"], rows, p=[0.72, 0.19, 0.085, 0.005])
    chance = np.where(sex == "female", 0.74, 0.19) * np.where(klass == "Third", 0.7, 1.2)
    survived = (rng.random(rows) < chance).astype(int)
    _lines(path, "survived,sex,age,n_siblings_spouses,parch,fare,class,deck,embark_town,alone",
           ([str(survived[i]), sex[i], f"{age[i]:.1f}", str(siblings[i]), str(parents[i]),
             _number(fare[i], point=True), klass[i], deck[i], town[i],
             "y" if siblings[i] + parents[i] == 0 else "n"] for i in range(rows)))


def _write_heart(path, rng, rows):
    """The Cleveland clinic's heart disease table as TensorFlow serves it (``heart.csv``): a header, then
    per patient age, sex, chest pain type (0-4), resting blood pressure, cholesterol, fasting blood
    sugar, resting ECG (0-2), maximum heart rate, exercise angina, ST depression (``oldpeak``), slope
    (1-3), vessels (``ca``, 0-3), ``thal`` as text (``normal``, ``reversible``, ``fixed``, and one row
    each of ``1`` and ``2``) and the target (0/1)."""
    thal = rng.choice(["normal", "reversible", "fixed"], rows, p=[0.56, 0.38, 0.06])
    thal[:3] = ["normal", "reversible", "fixed"]
    thal[3:5] = ["1", "2"]
    thal = rng.permutation(thal)
    columns = [  # age, sex, cp, trestbps, chol, fbs, restecg, thalach, exang
        rng.integers(29, 78, rows), rng.choice([0, 1], rows, p=[0.32, 0.68]),
        rng.choice(5, rows, p=[0.02, 0.08, 0.16, 0.28, 0.46]), rng.integers(94, 201, rows),
        rng.integers(126, 565, rows), rng.choice([0, 1], rows, p=[0.85, 0.15]),
        rng.choice(3, rows, p=[0.49, 0.02, 0.49]), rng.integers(71, 203, rows),
        rng.choice([0, 1], rows, p=[0.67, 0.33]),
    ]
    oldpeak = np.clip(rng.exponential(1.0, rows), 0, 6.2).round(1)
    tail = [rng.choice([1, 2, 3], rows, p=[0.47, 0.46, 0.07]), rng.choice(4, rows, p=[0.58, 0.22, 0.13, 0.07])]
    target = rng.choice([0, 1], rows, p=[0.73, 0.27])
    _lines(path, "age,sex,cp,trestbps,chol,fbs,restecg,thalach,exang,oldpeak,slope,ca,thal,target",
           ([*(str(column[i]) for column in columns), f"{oldpeak[i]:.1f}", *(str(column[i]) for column in tail),
             thal[i], str(target[i])] for i in range(rows)))


_HEATON = "https://data.heatonresearch.com/data/t81-558/"
_TF_DATA = "https://storage.googleapis.com/download.tensorflow.org/data/"
TABLES: Dict[str, Table] = {
    "jh_simple": Table(_HEATON + "jh-simple-dataset.csv", 2000, _write_jh_simple),
    "auto_mpg": Table(_HEATON + "auto-mpg.csv", 398, _write_auto_mpg),
    "heaton_iris": Table(_HEATON + "iris.csv", 150, _write_heaton_iris),
    "wdbc": Table(_HEATON + "wcbreast_wdbc.csv", 569, _write_wdbc),
    "sunspots_daily": Table(_HEATON + "SN_d_tot_V2.0.csv", 10000, _write_daily_sunspots),
    "california_housing_train": Table("https://storage.googleapis.com/ml_universities/california_housing_train.csv",
                                      17000, _write_california_housing_train),
    "iris_training": Table(_TF_DATA + "iris_training.csv", 120, _write_tf_iris),
    "iris_test": Table(_TF_DATA + "iris_test.csv", 30, _write_tf_iris),
    "titanic_train": Table("https://storage.googleapis.com/tf-datasets/titanic/train.csv", 627, _write_titanic),
    "titanic_eval": Table("https://storage.googleapis.com/tf-datasets/titanic/eval.csv", 264, _write_titanic),
    "sunspots_monthly": Table("https://storage.googleapis.com/tensorflow-1-public/course4/Sunspots.csv", 3235,
                              _write_monthly_sunspots),
    "heart": Table(_TF_DATA + "heart.csv", 303, _write_heart),
}


# Dataset files notebooks and their books' helper modules download by URL (``urllib.request.urlretrieve``),
# served from the files made for the dataset: URL prefix -> the folder under ~/.keras/datasets its writer
# fills (MNIST's: ``_write_mnist``). The file name is the URL's last part.
SERVED_FILES = {
    "https://storage.googleapis.com/cvdf-datasets/mnist/": "mnist-idx",
    "http://yann.lecun.com/exdb/mnist/": "mnist-idx",
    "https://ossci-datasets.s3.amazonaws.com/mnist/": "mnist-idx",
}


def dataset_file_for(url: str) -> Optional[str]:
    """The path under ``~/.keras/datasets`` of a dataset file served at ``url``, else None."""
    for prefix, folder in SERVED_FILES.items():
        if url.startswith(prefix) and "/" not in url[len(prefix):]:
            return os.path.join(folder, url[len(prefix):])
    return None


def table_for(url: str) -> Optional[str]:
    """The name of the table at ``url`` (``http`` or ``https``), else None."""
    address = url.split("://", 1)[-1] if url.startswith(("http://", "https://")) else None
    return next((name for name, table in TABLES.items() if table.url.split("://", 1)[1] == address), None)


def _tables_folder(home: str) -> str:
    return os.path.join(home, ".keras", "tables")


def _table_path(folder: str, name: str) -> str:
    """Where a table is kept: its URL's host and path under ``folder``."""
    parts = urlsplit(TABLES[name].url)
    return os.path.join(folder, parts.netloc, *parts.path.strip("/").split("/"))


def _write_table(folder: str, name: str, share: float = 1.0) -> None:
    table, path = TABLES[name], _table_path(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table.write(path, np.random.default_rng(zlib.crc32(name.encode())), max(1, round(table.rows * share)))


# ------------------------------------------------------------------------------ in every rank


def install(home: str) -> None:
    """In a rank (or a single-card process), before the notebook: the loaders read ``home``'s files,
    TensorFlow Datasets serves its own mock data, a table's URL (``pandas.read_csv``, ``get_file``,
    ``!wget``) gives ``home``'s copy, other downloads raise, ``pip install`` of installed packages is a
    no-op."""
    global _served_home
    os.environ["HOME"] = home
    _served_home = home
    _serve_loaders_from(os.path.join(home, ".keras"))
    _serve_urllib()
    _serve_tables_to_pandas()
    _mock_tensorflow_datasets()
    _serve_tf1_mnist_loader()
    _answer_pip_offline()
    _restore_numpy_aliases()


# NumPy's aliases of the builtins, deprecated in 1.20 and removed in 1.24: the notebooks of that era (and
# the helper modules their books ship) read them (``y.astype(np.int)``), as their authors ran them.
_NUMPY_ALIASES = {"int": int, "float": float, "bool": bool, "object": object, "complex": complex, "str": str}


def _restore_numpy_aliases() -> None:
    for name, builtin in _NUMPY_ALIASES.items():
        if name not in np.__dict__:
            setattr(np, name, builtin)


# The home this process serves (install's), None before install.
_served_home: Optional[str] = None


def is_served(url: str) -> bool:
    """Whether ``url`` is a table or a dataset file this module makes (where the notebook's code names it)."""
    return table_for(url) is not None or dataset_file_for(url) is not None


def served_file(url: str) -> Optional[str]:
    """The local copy of the table or dataset file at ``url``, None when ``url`` is none of them; an
    ``OfflineError`` when it is one but this home was made without it (its code did not name it)."""
    name, dataset_file = table_for(url), dataset_file_for(url)
    if name is None and dataset_file is None:
        return None
    home = _served_home or ""
    path = (_table_path(_tables_folder(home), name) if name is not None
            else os.path.join(home, ".keras", "datasets", dataset_file))
    if _served_home is None or not os.path.exists(path):
        raise OfflineError(f"offline: the notebook downloads {url}, a file made only where the code names it")
    return path


def _copy(source: str, target: str) -> None:
    """``source`` to ``target`` whole or not at all (two ranks may fetch the same file at once)."""
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".offline-")
    os.close(handle)
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


_REMOTE = re.compile(r"^[A-Za-z][\w+.-]*://")


def _serve_tables_to_pandas() -> None:
    """``pandas.read_csv(url)`` of a table reads its local copy (every other argument as given); of any
    other URL, an ``OfflineError`` (pandas would download it)."""
    try:
        import pandas
    except ImportError:
        return
    read_csv = pandas.read_csv
    if getattr(read_csv, "_offline", False):
        return

    def local(source):
        if isinstance(source, str) and _REMOTE.match(source) and not source.startswith("file:"):
            path = served_file(source)
            if path is None:
                raise OfflineError(f"offline: the notebook downloads {source}")
            return path
        return source

    @functools.wraps(read_csv)
    def offline_read_csv(*args, **kwargs):
        if args:
            args = (local(args[0]), *args[1:])
        elif "filepath_or_buffer" in kwargs:
            kwargs["filepath_or_buffer"] = local(kwargs["filepath_or_buffer"])
        return read_csv(*args, **kwargs)

    offline_read_csv._offline = True
    pandas.read_csv = offline_read_csv


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

    validate_file._offline = True
    data_utils.validate_file = validate_file
    data_utils.urlretrieve = _offline_urlretrieve  # get_file(fname, origin) of a served file: its copy


def _offline_urlretrieve(url, filename=None, reporthook=None, data=None):
    """``urlretrieve`` (urllib's signature, which Keras' ``get_file`` calls too) of a served file copies it
    where asked; of any other URL, an ``OfflineError``: no download is attempted."""
    from email.message import Message

    served = served_file(url)
    if served is None:
        raise OfflineError(f"offline: the notebook downloads {url}")
    if filename is None:
        return served, Message()
    _copy(served, filename)  # at once: no progress to report
    return filename, Message()


def _serve_urllib() -> None:
    """``urllib.request.urlretrieve``, what books' download helpers call, gives the served files."""
    import urllib.request

    urllib.request.urlretrieve = _offline_urlretrieve


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
        if _fetch_tables(command):
            return None
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


def _fetch_tables(command: str) -> bool:
    """``wget [-q] [-nc] [-O file] url`` (a shell line) of tables: their copies, where wget would write
    them; False, nothing done, for any other command (a wget of anything else runs as written)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return False
    if not words or os.path.basename(words[0]) != "wget":
        return False
    target, urls, keep = None, [], False
    rest = iter(words[1:])
    for word in rest:
        if word in ("-O", "--output-document"):
            target = next(rest, None)
        elif word.startswith("--output-document="):
            target = word.split("=", 1)[1]
        elif word in ("-nc", "--no-clobber"):
            keep = True
        elif not word.startswith("-"):
            urls.append(word)
    if not urls or not all(is_served(url) for url in urls):
        return False
    for url in urls:
        path = target or os.path.basename(urlsplit(url).path)
        if keep and os.path.exists(path):
            print(f"File '{path}' already there; not retrieving.")
            continue
        _copy(served_file(url), path)
        print(f"(offline: {url} served from the local copy, saved to '{path}')")
    return True


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
