"""Projects: a directory, or an entry script with its root (issue 36), through check and fix."""

import json
import os
import textwrap

import pytest

from npu_migrate_nb.cli import main
from npu_migrate_nb.project import find_root, open_project

# The vendor's TF2 example in miniature: the main script builds the model and loops, the gradient step
# is a helper of a package imported from the project's root, the data come from another module.
GRAD_UTILS = """\
import tensorflow as tf


def apply_gradients(optimizer, tape, loss, variables):
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
"""
DATA = """\
import tensorflow as tf


def make_dataset(batch_size):
    features = tf.random.stateless_normal([64, 4], seed=(1, 2))
    return tf.data.Dataset.from_tensor_slices((features, tf.reduce_sum(features, 1, keepdims=True))).batch(batch_size)
"""
MAIN = """\
import tensorflow as tf
from official.staging import grad_utils
from official.vision import data


def main():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    for x, y in data.make_dataset(16):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grad_utils.apply_gradients(optimizer, tape, loss, model.trainable_variables)


if __name__ == "__main__":
    main()
"""


def write_tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if text else "")
    return root


@pytest.fixture
def project(tmp_path):
    """A project whose main script is in a folder of its own, its package imported from the root."""
    return write_tree(tmp_path / "project", {
        "pyproject.toml": "[project]\nname = 'toy'\n",
        "official/__init__.py": "",
        "official/staging/__init__.py": "",
        "official/staging/grad_utils.py": GRAD_UTILS,
        "official/vision/__init__.py": "",
        "official/vision/data.py": DATA,
        "official/vision/train_main.py": MAIN,
        "official/vision/evaluate_main.py": MAIN.replace("main()", "evaluate_then_train()"),
        "README.md": "the data are synthetic\n",
    })


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------------------- the root

def test_the_root_is_the_nearest_folder_with_a_marker_else_above_the_top_package(tmp_path):
    write_tree(tmp_path, {"a/setup.py": "", "a/pkg/__init__.py": "", "a/pkg/sub/__init__.py": "",
                          "a/pkg/sub/train.py": "", "b/pkg/__init__.py": "", "b/pkg/train.py": "",
                          "c/train.py": ""})
    assert find_root(str(tmp_path / "a/pkg/sub/train.py")) == str(tmp_path / "a")
    assert find_root(str(tmp_path / "a/pkg")) == str(tmp_path / "a")
    assert find_root(str(tmp_path / "b/pkg/train.py")) == str(tmp_path / "b")  # above the top package
    assert find_root(str(tmp_path / "c/train.py")) == str(tmp_path / "c")  # no package: its own folder
    (tmp_path / "c" / ".git").mkdir()
    assert find_root(str(tmp_path / "c/train.py")) == str(tmp_path / "c")


def test_entries_are_notebooks_programs_and_files_nothing_imports(project):
    write_tree(project, {"tools/plot.py": "import matplotlib\n", "notes.ipynb": "",
                         ".ipynb_checkpoints/notes-checkpoint.ipynb": "", "build/lib/train_main.py": MAIN})
    found = open_project(str(project))
    relative = lambda paths: sorted(os.path.relpath(p, project) for p in paths)  # noqa: E731
    assert found.root == str(project)
    assert relative(found.entries) == ["notes.ipynb", "official/vision/evaluate_main.py",
                                       "official/vision/train_main.py", "tools/plot.py"]
    assert relative(found.modules) == ["official/__init__.py", "official/staging/__init__.py",
                                       "official/staging/grad_utils.py", "official/vision/__init__.py",
                                       "official/vision/data.py"]


# ---------------------------------------------------------------------------------------------- check

def test_check_a_directory_follows_the_modules_from_the_root_and_says_a_shared_module_once(project, capsys):
    code, out, err = run(["check", str(project), "--format", "json"], capsys)
    assert code == 1, err
    analyses = {os.path.basename(a["path"]): a for a in json.loads(out)}
    assert set(analyses) == {"train_main.py", "evaluate_main.py"}
    first, second = analyses["evaluate_main.py"], analyses["train_main.py"]  # in path order
    module_findings = [f for f in first["findings"] if f["path"] != first["path"]]
    assert {(os.path.basename(f["path"]), f["code"]) for f in module_findings} == {
        ("grad_utils.py", "missing-allreduce"), ("data.py", "missing-shard")}
    assert all(f["path"] == second["path"] for f in second["findings"])  # the modules were said with the first
    broadcast = [f for f in second["findings"] if f["code"] == "missing-broadcast"]
    assert [(f["line"], f["cell"]) for f in broadcast] == [(9, None)]  # the main script's loop, as the guide
    assert second["steps"] == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}


def test_an_entry_script_sees_its_project_root_by_default_or_with_root(project, tmp_path, capsys):
    script = project / "official/vision/train_main.py"
    code, out, _ = run(["check", str(script)], capsys)
    assert "grad_utils.py" in out and "installed package" not in out
    elsewhere = write_tree(tmp_path / "loose", {"train_main.py": MAIN})
    code, out, _ = run(["check", str(elsewhere / "train_main.py"), "--format", "json"], capsys)
    assert json.loads(out)["steps"]["allreduce"] == "unknown"  # official.* cannot be seen
    code, out, _ = run(["check", str(elsewhere / "train_main.py"), "--root", str(project), "--format", "json"],
                       capsys)
    assert json.loads(out)["steps"]["allreduce"] == "missing"


# ------------------------------------------------------------------------------------------------ fix

def test_fix_a_directory_into_a_copy_edits_each_file_once_and_the_copy_checks_clean(project, tmp_path, capsys):
    before = {path: path.read_text() for path in project.rglob("*") if path.is_file()}
    out_dir = tmp_path / "fixed"
    code, out, err = run(["fix", str(project), "-o", str(out_dir)], capsys)
    assert {path: path.read_text() for path in project.rglob("*") if path.is_file()} == before
    assert (out_dir / "README.md").read_text() == "the data are synthetic\n"  # the whole tree
    grad_utils = (out_dir / "official/staging/grad_utils.py").read_text()
    assert grad_utils.count("npu.distribute.all_reduce(grads") == 1, grad_utils  # two entries, one edit
    assert "shard_and_rebatch_dataset" in (out_dir / "official/vision/data.py").read_text()
    main_script = (out_dir / "official/vision/train_main.py").read_text()
    assert "    npu.distribute.broadcast(model.trainable_variables)\n    for x, y in" in main_script
    code, out, err = run(["check", str(out_dir)], capsys)
    assert code == 0, out + err


def test_fix_a_directory_prints_a_diff_per_file_or_writes_in_place_with_backups(project, capsys):
    code, out, err = run(["fix", str(project)], capsys)
    assert out.count("--- a/") == 4 and ":cell" not in out
    assert "--- a/official/staging/grad_utils.py\n+++ b/official/staging/grad_utils.py\n" in out  # patch -p1
    assert "nothing written" in err and not list(project.rglob("*.orig"))
    code, out, err = run(["fix", str(project), "--in-place"], capsys)
    backups = sorted(os.path.relpath(p, project) for p in project.rglob("*.orig"))
    assert backups == ["official/staging/grad_utils.py.orig", "official/vision/data.py.orig",
                       "official/vision/evaluate_main.py.orig", "official/vision/train_main.py.orig"]
    assert (project / "official/staging/grad_utils.py.orig").read_text() == GRAD_UTILS
    assert run(["check", str(project)], capsys)[0] == 0


def test_fix_refuses_an_existing_output_and_a_directory_without_code(project, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    code, out, err = run(["fix", str(project), "-o", str(taken)], capsys)
    assert code == 2 and f"{taken}: already exists" in err and not list(taken.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(["fix", str(empty)], capsys)
    assert code == 2 and "no notebooks or scripts in this directory" in err


def test_a_notebook_of_the_directory_gets_its_diff_per_cell(tmp_path, capsys):
    cells = ["import tensorflow as tf\nx = tf.ones([64, 4])\ny = tf.ones([64, 1])",
             "model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])\n"
             "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(x, y, batch_size=16, epochs=1)"]
    document = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                           "source": source} for source in cells],
                "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    folder = tmp_path / "nbs"
    folder.mkdir()
    (folder / "train.ipynb").write_text(json.dumps(document))
    code, out, err = run(["fix", str(folder)], capsys)
    assert "--- a/train.ipynb:cell 1\n+++ b/train.ipynb:cell 1\n" in out, out + err
    assert "npu_distributed_keras_optimizer_wrapper" in out
