"""The corpus benchmark's offline stand-ins for downloads: what a notebook installs or loads is
answered from what is here, in the real formats, or the notebook is left out with the reason."""

import subprocess
import sys
from pathlib import Path


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import offline_data  # noqa: E402


def test_pip_install_lines_are_read_as_pip_reads_them():
    assert offline_data.pip_installs("pip install -q tensorflow-datasets 'keras>=2'") == ["tensorflow-datasets", "keras>=2"]
    assert offline_data.pip_installs("python -m pip install -U tfds-nightly") == ["tfds-nightly"]
    assert offline_data.pip_installs("pip list") is None
    assert offline_data.pip_installs("ls -la") is None


def test_nightlies_are_the_installed_packages():
    assert offline_data._installed("tf-nightly")
    assert offline_data._installed("tfds-nightly")  # TensorFlow Datasets' nightly (custom_training_walkthrough)
    assert not offline_data._installed("surely-not-a-package-here")


def test_tfds_load_of_every_split_gives_the_catalog_names_offline():
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import offline_data\n"
        "offline_data._mock_tensorflow_datasets()\n"
        "import tensorflow_datasets as tfds\n"
        "datasets, info = tfds.load('mnist', with_info=True, as_supervised=True)\n"
        "cycle = tfds.load('cycle_gan/horse2zebra', as_supervised=True)\n"
        "print(sorted(datasets), sorted(cycle), info.splits['train'].num_examples, len(list(datasets['train'])))\n"
    ) % str(BENCHMARKS)
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stdout
    assert printed.strip().splitlines()[-1] == (
        f"['test', 'train'] ['testA', 'testB', 'trainA', 'trainB'] {offline_data.TFDS_EXAMPLES} {offline_data.TFDS_EXAMPLES}")


def test_tensorflow_1s_mnist_loader_is_served_where_tensorflow_has_none(tmp_path):
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import offline_data\n"
        "offline_data.install(offline_data.home_for(%r, {'mnist': 0.1}))\n"
        "from tensorflow.examples.tutorials.mnist import input_data\n"
        "mnist = input_data.read_data_sets('/tmp/data/', one_hot=True)\n"
        "x, y = mnist.train.next_batch(700)\n"
        "x, y = mnist.train.next_batch(700)  # past the end of an epoch: the rest, then a new shuffle\n"
        "print(x.shape, x.dtype, float(x.max()) <= 1.0, y.shape, mnist.train.num_examples,\n"
        "      mnist.train.epochs_completed, mnist.validation.num_examples, mnist.test.images.shape)\n"
    ) % (str(BENCHMARKS), str(tmp_path))
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert printed.stdout.strip().splitlines()[-1] == "(700, 784) float32 True (700, 10) 1000 1 5000 (1000, 784)", printed.stderr[-2000:]


def test_scikit_learns_california_housing_is_read_from_its_own_cache(tmp_path):
    """Hands-On ML's regression chapters: ``fetch_california_housing`` finds its cache file and never
    downloads; the loader's own transformations (averages per household, value in 100,000s) apply."""
    source = "from sklearn.datasets import fetch_california_housing\nhousing = fetch_california_housing()\n"
    shares = offline_data.sizes_for(source)
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import offline_data\n"
        "offline_data.install(offline_data.home_for(%r, %r))\n"
        "from sklearn.datasets import fetch_california_housing\n"
        "housing = fetch_california_housing(download_if_missing=False)\n"
        "frame = fetch_california_housing(as_frame=True).frame\n"
        "print(housing.data.shape, housing.target.shape, housing.feature_names[0], list(frame.columns)[-1],\n"
        "      bool(housing.target.max() <= 5.00001), bool(1 < housing.data[:, 2].mean() < 10))\n"
    ) % (str(BENCHMARKS), str(tmp_path), shares)
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert shares == {"fetch_california_housing": offline_data.SMALL}
    assert printed.stdout.strip().splitlines()[-1] == "(2064, 8) (2064,) MedInc MedHouseVal True True", printed.stderr[-2000:]
