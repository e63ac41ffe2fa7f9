"""The corpus benchmark's offline stand-ins for downloads: what a notebook installs or loads is
answered from what is here, in the real formats, or the notebook is left out with the reason."""

import subprocess
import sys
from pathlib import Path


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import offline_data  # noqa: E402
from npu_migrate_nb.rules.base import CELL_SEPARATOR  # noqa: E402

from .conftest import notebook_from  # noqa: E402


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


def _tables_home(tmp_path, source):
    """The fake home a notebook with ``source`` gets (its tables written), as the benchmark makes it."""
    return offline_data.home_for(str(tmp_path / "homes"), offline_data.sizes_for(source))


_NO_NETWORK = (
    "import socket, sys; sys.path.insert(0, %r)\n"
    "def refuse(*args): raise AssertionError('a connection was attempted')\n"
    "socket.socket.connect = refuse\n"
    "import offline_data\n"
    "offline_data.install(%r)\n"
    "import pandas as pd\n"
    "kinds = lambda frame: ''.join(dtype.kind for dtype in frame.dtypes)\n"
)


def test_a_notebook_gets_the_tables_its_code_names_in_its_own_home(tmp_path):
    source = ('df = pd.read_csv("https://data.heatonresearch.com/data/t81-558/auto-mpg.csv")\n'
              "from tensorflow.keras.datasets import mnist\n")
    shares = offline_data.sizes_for(source)
    home = offline_data.home_for(str(tmp_path), shares)
    assert shares == {"mnist": offline_data.SMALL, "auto_mpg": 1.0}
    assert home != offline_data.home_for(str(tmp_path), {"mnist": offline_data.SMALL})
    heart = "get_file('heart.csv', 'http://storage.googleapis.com/download.tensorflow.org/data/heart.csv')"
    assert offline_data.tables_used(heart) == ["heart"]  # http or https
    table = Path(home) / ".keras/tables/data.heatonresearch.com/data/t81-558/auto-mpg.csv"
    assert table.read_text().count("\n") == 399  # the header and the 398 cars


def test_the_t81_558_course_tables_are_read_by_url_in_their_layouts_and_other_urls_raise(tmp_path):
    """Jeff Heaton's course reads its CSV files with ``pd.read_csv(url, na_values=['NA', '?'])``: the
    local copies in the real columns, types and missing-value markers; a URL that is not served raises
    ``OfflineError`` at once, no connection made."""
    source = "\n".join(f'"{offline_data.TABLES[name].url}"' for name in
                       ("jh_simple", "auto_mpg", "heaton_iris", "wdbc", "sunspots_daily"))
    code = _NO_NETWORK % (str(BENCHMARKS), _tables_home(tmp_path, source)) + (
        "url = 'https://data.heatonresearch.com/data/t81-558/'\n"
        "df = pd.read_csv(url + 'jh-simple-dataset.csv', na_values=['NA', '?'])\n"
        "print(df.shape, ','.join(df.columns), kinds(df), df['income'].isna().any(), ''.join(sorted(df['product'].unique())),\n"
        "      ''.join(sorted(df['area'].unique())), df['job'].nunique())\n"
        "df = pd.read_csv(url + 'auto-mpg.csv', na_values=['NA', '?'])\n"
        "print(df.shape, ','.join(df.columns), kinds(df), df['horsepower'].isna().sum())\n"
        "df = pd.read_csv(url + 'iris.csv', na_values=['NA', '?'])\n"
        "print(df.shape, ','.join(df.columns), kinds(df), ','.join(pd.get_dummies(df['species']).columns))\n"
        "df = pd.read_csv(url + 'wcbreast_wdbc.csv', na_values=['NA', '?'])\n"
        "print(df.shape, df.columns[2], df.columns[-1], kinds(df).count('f'), df['diagnosis'].map({'M': 1, 'B': 0}).sum())\n"
        "names = ['year', 'month', 'day', 'dec_year', 'sn_value', 'sn_error', 'obs_num', 'unused1']\n"
        "df = pd.read_csv(url + 'SN_d_tot_V2.0.csv', sep=';', header=None, names=names, na_values=['-1'], index_col=False)\n"
        "start = max(df[df['obs_num'] == 0].index.tolist()) + 1\n"
        "print(df.shape, kinds(df), start, (df[start:]['year'] < 2000).any() and (df['year'] >= 2000).any())\n"
        "try:\n"
        "    pd.read_csv(url + 'iris_cost.csv', na_values=['NA', '?'])\n"
        "except offline_data.OfflineError as error:\n"
        "    print(type(error).__name__, str(error).split()[-1])\n"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert printed.stdout.strip().splitlines() == [
        "(2000, 14) id,job,area,income,aspect,subscriptions,dist_healthy,save_rate,dist_unhealthy,age,pop_dense,"
        "retail_dense,crime,product iOOffifififffO True abcdefg abcd 33",
        "(398, 9) mpg,cylinders,displacement,horsepower,weight,acceleration,year,origin,name fiffifiiO 6",
        "(150, 5) sepal_l,sepal_w,petal_l,petal_w,species ffffO Iris-setosa,Iris-versicolor,Iris-virginica",
        "(569, 32) mean_radius worst_fractal_dimension 30 212",
        "(10000, 8) iiififii 30 True",
        "OfflineError https://data.heatonresearch.com/data/t81-558/iris_cost.csv",
    ], printed.stderr[-2000:]


def test_google_storage_tables_are_read_by_pandas_from_their_urls(tmp_path):
    """The GCP courses' California housing split, TensorFlow's titanic and heart tables, read with
    ``pd.read_csv(url)`` as the notebooks do: the real columns, types and categories."""
    source = "\n".join(offline_data.TABLES[name].url for name in
                       ("california_housing_train", "titanic_train", "titanic_eval", "heart"))
    code = _NO_NETWORK % (str(BENCHMARKS), _tables_home(tmp_path, source)) + (
        "df = pd.read_csv('https://storage.googleapis.com/ml_universities/california_housing_train.csv', sep=',')\n"
        "print(df.shape, ','.join(df.columns), kinds(df), df['longitude'].iloc[0] > df['longitude'].iloc[-1])\n"
        "train = pd.read_csv('https://storage.googleapis.com/tf-datasets/titanic/train.csv')\n"
        "test = pd.read_csv('https://storage.googleapis.com/tf-datasets/titanic/eval.csv')\n"
        "print(train.shape, test.shape, ','.join(train.columns), kinds(train),\n"
        "      *('/'.join(sorted(train[name].unique())) for name in ('sex', 'class', 'embark_town', 'alone')))\n"
        "df = pd.read_csv('https://storage.googleapis.com/download.tensorflow.org/data/heart.csv')\n"
        "print(df.shape, ','.join(df.columns), kinds(df), '/'.join(sorted(set(df['thal']))), type(df['thal'][0]).__name__)\n"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert printed.stdout.strip().splitlines() == [
        "(17000, 9) longitude,latitude,housing_median_age,total_rooms,total_bedrooms,population,households,"
        "median_income,median_house_value fffffffff True",
        "(627, 10) (264, 10) survived,sex,age,n_siblings_spouses,parch,fare,class,deck,embark_town,alone iOfiifOOOO "
        "female/male First/Second/Third Cherbourg/Queenstown/Southampton/unknown n/y",
        "(303, 14) age,sex,cp,trestbps,chol,fbs,restecg,thalach,exang,oldpeak,slope,ca,thal,target iiiiiiiiifiiOi "
        "1/2/fixed/normal/reversible str",
    ], printed.stderr[-2000:]


def test_get_file_of_a_served_table_gives_its_copy_and_of_anything_else_raises(tmp_path):
    """TensorFlow's iris split (its first line: count, features, class names), heart and titanic
    through ``tf.keras.utils.get_file(fname, origin)``, read as the tutorials read them."""
    source = "\n".join(offline_data.TABLES[name].url for name in ("iris_training", "iris_test", "heart", "titanic_train"))
    code = _NO_NETWORK % (str(BENCHMARKS), _tables_home(tmp_path, source)) + (
        "import os, tensorflow as tf\n"
        "url = 'https://storage.googleapis.com/download.tensorflow.org/data/iris_training.csv'\n"
        "path = tf.keras.utils.get_file(fname=os.path.basename(url), origin=url)\n"
        "columns = ['sepal_length', 'sepal_width', 'petal_length', 'petal_width', 'species']\n"
        "features, labels = next(iter(tf.data.experimental.make_csv_dataset(path, 32, column_names=columns,\n"
        "                                                                  label_name='species', num_epochs=1)))\n"
        "test = pd.read_csv(tf.keras.utils.get_file('iris_test.csv', url.replace('training', 'test')), names=columns, header=0)\n"
        "print(open(path).readline().strip(), len(features), labels.dtype.name, test.shape, sorted(test['species'].unique().tolist()))\n"
        "heart = pd.read_csv(tf.keras.utils.get_file('heart.csv', 'https://storage.googleapis.com/download.tensorflow.org/data/heart.csv'))\n"
        "titanic = tf.keras.utils.get_file('train.csv', 'https://storage.googleapis.com/tf-datasets/titanic/train.csv')\n"
        "types = [int(), str(), float(), int(), int(), float(), str(), str(), str(), str()]\n"
        "print(heart.shape, len(list(tf.data.experimental.CsvDataset(titanic, record_defaults=types, header=True))),\n"
        "     os.path.dirname(titanic) == os.path.expanduser('~/.keras/datasets'))\n"
        "try:\n"
        "    tf.keras.utils.get_file('abalone_train.csv', url.replace('iris_training', 'abalone_train'))\n"
        "except offline_data.OfflineError as error:\n"
        "    print(type(error).__name__, os.path.basename(str(error)))\n"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert [line for line in printed.stdout.splitlines() if not line.startswith("Downloading data from")] == [
        "120,4,setosa,versicolor,virginica 4 int32 (30, 5) [0, 1, 2]",
        "(303, 14) 627 True",
        "OfflineError abalone_train.csv",
    ], printed.stderr[-2000:]


def test_wget_of_a_served_table_in_a_shell_line_saves_its_copy(tmp_path):
    """TensorFlow's course ``!wget -nc``s the monthly sunspots, then reads ``./Sunspots.csv`` with the
    csv module: the copy is saved where wget would save it, once."""
    source = "!wget -nc " + offline_data.TABLES["sunspots_monthly"].url
    code = _NO_NETWORK.replace("import offline_data\n", "from IPython.core.interactiveshell import InteractiveShell\n"
                               "shell = InteractiveShell.instance()\nimport offline_data\n") % (
        str(BENCHMARKS), _tables_home(tmp_path, source)) + (
        "import csv, os\n"
        "os.chdir(%r)\n"
        "shell.run_cell(%r)\n"
        "shell.run_cell(%r)\n"
        "with open('./Sunspots.csv') as stream:\n"
        "    reader = csv.reader(stream, delimiter=',')\n"
        "    header = next(reader)\n"
        "    rows = [(int(row[0]), float(row[2])) for row in reader]\n"
        "print(header, len(rows), rows[-1][0])\n"
    ) % (str(tmp_path), source, source)
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert printed.stdout.strip().splitlines()[-2:] == [
        "File 'Sunspots.csv' already there; not retrieving.",
        "['', 'Date', 'Monthly Mean Total Sunspot Number'] 3235 3234",
    ], printed.stderr[-2000:]


def test_the_benchmark_selects_a_notebook_whose_only_downloads_are_served_tables():
    import bench_corpus_run

    def reason(*sources):
        return bench_corpus_run.left_out_because(notebook_from(CELL_SEPARATOR.join(sources)))

    iris = "https://storage.googleapis.com/download.tensorflow.org/data/iris_training.csv"
    assert reason('df = pd.read_csv("https://data.heatonresearch.com/data/t81-558/jh-simple-dataset.csv")') is None
    assert reason(f'url = "{iris}"\npath = tf.keras.utils.get_file(fname=os.path.basename(url),\n origin=url)') is None
    assert reason("!wget -nc https://storage.googleapis.com/tensorflow-1-public/course4/Sunspots.csv") is None
    assert reason('pd.read_csv("https://data.heatonresearch.com/data/t81-558/iris_cost.csv")').startswith("reads a remote file")
    assert reason(f'pd.read_csv("{iris}")', "tf.keras.utils.get_file('x.zip', 'https://example.com/x.zip')").startswith(
        "downloads a file")
    assert reason("!wget https://example.com/Sunspots.csv").startswith("downloads with a shell command")


def test_numpys_removed_aliases_are_there_for_the_notebooks_of_their_era():
    """``np.int`` (removed in NumPy 1.24) is the builtin again in a process the harness installed: a book's
    notebook of that era (``(iris.target == 0).astype(np.int)``) runs as its author ran it."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import numpy as np, offline_data\n"
            "assert not hasattr(np, 'int')\noffline_data._restore_numpy_aliases()\n"
            "print(np.array([1.5, 2.5]).astype(np.int).tolist(), np.float is float, np.bool is bool)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(BENCHMARKS.parent))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1,", "2]", "True", "True"]


# A book's helper modules beside its notebooks, in the shape of Hvass-Labs' mnist.py and download.py:
# the URL is built at run time, the file fetched with urllib, then read as raw idx bytes.
_BOOK_DOWNLOAD = '''\
"""Downloads, e.g. download(base_url="https://www.cs.toronto.edu/~kriz/", filename="cifar-10-python.tar.gz")."""
import os
import urllib.request


def download(base_url, filename, download_dir):
    save_path = os.path.join(download_dir, filename)
    if not os.path.exists(save_path):
        os.makedirs(download_dir, exist_ok=True)
        urllib.request.urlretrieve(url=base_url + filename, filename=save_path)
'''
_BOOK_MNIST = '''\
import gzip
import os
import numpy as np
from download import download

base_url = "https://storage.googleapis.com/cvdf-datasets/mnist/"


class MNIST:
    def __init__(self, data_dir="data/MNIST/"):
        self.data_dir = data_dir
        self.num_train = 55000
        self.x_train = self._load("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:self.num_train] / 255.0
        self.y_train_cls = self._load("train-labels-idx1-ubyte.gz", 8)[:self.num_train].astype(np.int)
        self.x_test = self._load("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784) / 255.0

    def _load(self, filename, offset):
        download(base_url=base_url, filename=filename, download_dir=self.data_dir)
        with gzip.open(os.path.join(self.data_dir, filename), "rb") as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
'''


def _book(folder, cells):
    """A notebook of ``cells`` beside the book's two helper modules, as the field corpus writes them."""
    import nbformat

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "download.py").write_text(_BOOK_DOWNLOAD)
    (folder / "mnist.py").write_text(_BOOK_MNIST)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbformat.write(notebook, str(folder / "chapter.ipynb"))
    return folder / "chapter.ipynb"


def test_a_books_helper_downloading_mnist_by_url_reads_the_served_idx_files(tmp_path):
    """The helper's literal count (55000) is read with the notebook's code: the fake has the real counts;
    its urlretrieve of the idx files gets the files made for the home, any other URL raises."""
    import bench_corpus_run
    from npu_migrate_nb.notebook import load

    path = _book(tmp_path / "book", ["from mnist import MNIST\ndata = MNIST(data_dir='data/MNIST/')"])
    notebook = load(str(path))
    shares = offline_data.sizes_for(bench_corpus_run.code_run(notebook, bench_corpus_run.modules_beside(notebook)))
    assert shares == {"mnist": 1.0}
    code = _NO_NETWORK % (str(BENCHMARKS), offline_data.home_for(str(tmp_path / "homes"), shares)) + (
        f"import os, urllib.request; os.chdir({str(path.parent)!r}); sys.path.insert(0, '')\n"
        "from mnist import MNIST\n"
        "data = MNIST(data_dir='data/MNIST/')\n"
        "print(data.x_train.shape, data.y_train_cls.dtype.kind, data.x_test.shape, float(data.x_train.max()) <= 1.0)\n"
        "try:\n"
        "    urllib.request.urlretrieve('https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz', 'c.tar.gz')\n"
        "except offline_data.OfflineError as error:\n"
        "    print(type(error).__name__, os.path.exists('c.tar.gz'))\n"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert printed.stdout.splitlines() == ["(55000, 784) i (10000, 784) True", "OfflineError False"], printed.stderr[-2000:]


def test_the_benchmark_reads_the_modules_beside_a_notebook_for_what_it_needs(tmp_path):
    """Imports of the modules it imports count (a helper's missing package leaves the notebook out,
    naming it); a data file a module names by URL does too; a URL in a docstring does not."""
    import bench_corpus_run
    from npu_migrate_nb.notebook import load

    path = _book(tmp_path / "book", ["from mnist import MNIST\ndata = MNIST()"])
    assert bench_corpus_run.left_out_because(load(str(path))) is None
    assert sorted(bench_corpus_run.modules_beside(load(str(path)))) == ["download", "mnist"]

    (path.parent / "mnist.py").write_text(_BOOK_MNIST.replace("import gzip", "import gzip\nimport prettytensor"))
    assert bench_corpus_run.left_out_because(load(str(path))) == "needs prettytensor (not installed)"

    (path.parent / "mnist.py").write_text(_BOOK_MNIST.replace(
        "https://storage.googleapis.com/cvdf-datasets/mnist/", "https://example.com/digits.tar.gz"))
    assert bench_corpus_run.left_out_because(load(str(path))).startswith("reads a remote file in mnist.py")
