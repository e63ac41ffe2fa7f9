"""What ``check`` and ``fix`` import: nothing they do not use on the path they take (a user waits for
every import at start-up; the design page promises this list). Each command runs in a fresh
interpreter on a notebook with IPython syntax, the path that reads IPython's input transformer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NEVER_AT_START = ("IPython", "libcst", "nbformat", "tensorflow", "importlib.metadata", "babel", "numpy")
PROBE = """
import json, sys
from npu_migrate_nb.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.__stdout__.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""

CELLS = [
    "%matplotlib inline\nimport numpy as np\nimport tensorflow as tf\n!pip list | head -3\nimport npu_device as npu\n",
    "x = np.random.rand(64, 4).astype('float32')\ny = x.sum(axis=1, keepdims=True)\n"
    "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)\n",
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nfiles = !ls\n"
    "model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss='mse')\n%time model.fit(ds, epochs=1)\n",
]


def notebook(folder: Path) -> Path:
    path = folder / "magics.ipynb"
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}
                  for source in CELLS],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    return path


def imported_by(*arguments: str) -> set:
    completed = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True,
                               cwd=ROOT, timeout=120)
    marker = completed.stdout.rindex("MODULES ")
    return set(json.loads(completed.stdout[marker + len("MODULES "):]))


@pytest.mark.parametrize("form", ["text", "json"])
def test_check_imports_none_of_the_heavy_modules(tmp_path, form):
    modules = imported_by("check", str(notebook(tmp_path)), "--format", form)
    assert {"npu_migrate_nb.analysis", "npu_migrate_nb.ipython_syntax"} <= modules
    assert sorted(name for name in NEVER_AT_START if name in modules) == []


def test_fix_imports_libcst_to_rewrite_and_nothing_else_heavy(tmp_path):
    modules = imported_by("fix", str(notebook(tmp_path)), "-o", str(tmp_path / "fixed.ipynb"))
    assert (tmp_path / "fixed.ipynb").exists() and "libcst" in modules
    assert sorted(name for name in NEVER_AT_START if name != "libcst" and name in modules) == []
