"""The field corpus builder takes, with each notebook, the modules of its folder it imports."""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "field"))

import build_field_corpus  # noqa: E402


def _commit(work: Path, files: dict) -> str:
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    run = lambda *args: subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True).stdout
    run("init", "-q")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "book")
    return run("rev-parse", "HEAD").strip()


def test_the_modules_a_notebook_imports_from_its_folder_come_with_it_and_theirs_too(tmp_path):
    cell = {"cell_type": "code", "source": "import numpy as np\nfrom mnist import MNIST\n%matplotlib inline", "metadata": {}}
    document = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    commit = _commit(tmp_path, {
        "book/01.ipynb": json.dumps(document),
        "book/mnist.py": "import gzip\nfrom download import download\n",
        "book/download.py": "def f():\n    import cache\n",
        "book/cache.py": "",
        "book/unused.py": "",
        "numpy.py": "",  # not beside the notebook
    })
    modules = build_field_corpus.modules_beside(tmp_path / ".git", commit, "book/01.ipynb", document)
    assert modules == ["book/mnist.py", "book/download.py", "book/cache.py"]
