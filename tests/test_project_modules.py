"""A notebook is analyzed together with the modules of its own project that it imports; what comes
from code that cannot be seen makes a step ``unknown`` (with the reason), not ``missing``."""

import json
import subprocess
import sys
import textwrap

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.notebook import load
from npu_migrate_nb.rewrite import fix_notebook

ESTIMATOR_NOTEBOOK = """\
from npu_bridge.npu_init import *
import os
import tensorflow.compat.v1 as tf
from model import model_fn
estimator = tf.estimator.Estimator(model_fn=model_fn)
def input_fn():
    return tf.data.Dataset.range(64).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(8)
estimator.train(input_fn=input_fn, max_steps=4, hooks=npu_hooks_append())
"""

MODEL_WRAPPED = """\
from npu_bridge.npu_init import *
import tensorflow.compat.v1 as tf
def model_fn(features, labels, mode):
    loss = tf.reduce_mean(tf.layers.dense(tf.cast(features, tf.float32)[:, None], 1))
    optimizer = npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer(1e-3))
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
"""

MODEL_UNWRAPPED = """\
import tensorflow.compat.v1 as tf
def model_fn(features, labels, mode):
    loss = tf.reduce_mean(tf.layers.dense(tf.cast(features, tf.float32)[:, None], 1))
    optimizer = tf.train.AdamOptimizer(1e-3)
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
"""


def project(tmp_path, notebook_code, **modules):
    """A script-notebook and its modules (``name="source"``; ``pkg__mod`` is ``pkg/mod.py``)."""
    for name, source in modules.items():
        path = tmp_path.joinpath(*name.split("__")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    script = tmp_path / "train.py"
    script.write_text(notebook_code)
    return str(script)


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "npu_migrate_nb", *args], capture_output=True, text=True, cwd=cwd)


def test_a_step_done_in_an_imported_module_counts(tmp_path):
    analysis = analyze(load(project(tmp_path, ESTIMATOR_NOTEBOOK, model=MODEL_WRAPPED)))
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "present"}
    assert analysis.problems == []


def test_a_step_missing_in_a_module_is_reported_there_and_fixed_there(tmp_path):
    path = project(tmp_path, ESTIMATOR_NOTEBOOK, model=MODEL_UNWRAPPED)
    result = cli("check", path, "--format", "json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert result.returncode == 1
    [finding] = [f for f in report["findings"] if f["code"] == "missing-allreduce"]
    assert (finding["path"], finding["cell"], finding["line"]) == ("model.py", None, 4)
    text = cli("check", path, cwd=tmp_path).stdout
    assert "model.py:4:17: error: gradients are not aggregated" in text

    fixed = cli("fix", path, "--in-place", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert "model.py: fixed in place" in fixed.stderr
    module = (tmp_path / "model.py").read_text()
    assert module.startswith("from npu_bridge.npu_init import *\nimport tensorflow.compat.v1 as tf\n")
    assert "    optimizer = npu_distributed_optimizer_wrapper(optimizer)\n" in module
    assert (tmp_path / "model.py.orig").read_text() == MODEL_UNWRAPPED
    assert cli("check", path, cwd=tmp_path).returncode == 0


def test_without_in_place_a_module_is_not_written_but_its_diff_is_shown(tmp_path):
    path = project(tmp_path, ESTIMATOR_NOTEBOOK, model=MODEL_UNWRAPPED)
    result = cli("fix", path, "-o", str(tmp_path / "out.py"), cwd=tmp_path)
    assert "+++ b/model.py" in result.stdout and "npu_distributed_optimizer_wrapper(optimizer)" in result.stdout
    assert "model.py: has fixes too, not written" in result.stderr
    assert (tmp_path / "model.py").read_text() == MODEL_UNWRAPPED
    assert result.returncode == 1  # the step is still missing in what is on disk


def test_packages_relative_imports_and_cycles_are_followed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    notebook = ESTIMATOR_NOTEBOOK.replace("from model import model_fn", "from trainer.model import model_fn")
    path = project(
        tmp_path, notebook,
        trainer____init__="",
        trainer__model="from .optim import make_optimizer\nimport tensorflow.compat.v1 as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    loss = tf.reduce_mean(tf.cast(features, tf.float32))\n"
        "    train_op = make_optimizer().minimize(loss)\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)\n",
        trainer__optim="from npu_bridge.npu_init import *\nimport tensorflow.compat.v1 as tf\n"
        "from . import model  # a cycle\n"
        "def make_optimizer():\n"
        "    return npu_distributed_optimizer_wrapper(tf.train.GradientDescentOptimizer(0.1))\n",
    )
    analysis = analyze(load(path))
    assert analysis.steps["allreduce"] == "present"
    assert sorted(module.path for module in analysis.context.modules.found) == ["trainer/model.py", "trainer/optim.py"]


@pytest.mark.parametrize(
    "model_import,modules,reason",
    [
        ("from model import model_fn", {}, "model_fn comes from model: there is no model.py next to the notebook"),
        ("from model import model_fn", {"model": "def model_fn(:\n"},
         "model_fn comes from model: model.py cannot be analyzed (line 1: syntax error"),
        ("from nbformat import model_fn", {},
         "model_fn comes from nbformat: nbformat is an installed package, whose code is not analyzed"),
    ],
    ids=["no-file", "syntax-error", "installed-package"],
)
def test_a_model_fn_that_cannot_be_seen_makes_aggregation_unknown_with_the_reason(tmp_path, model_import, modules, reason):
    path = project(tmp_path, ESTIMATOR_NOTEBOOK.replace("from model import model_fn", model_import), **modules)
    result = cli("check", path, "--format", "json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert report["steps"]["allreduce"] == "unknown"
    assert report["reasons"]["allreduce"].startswith(reason)
    assert not [f for f in report["findings"] if f["code"] == "missing-allreduce"]
    assert result.returncode == 0  # unknown is said, not failed: the step may well be done there
    assert f"?  gradient aggregation (梯度聚合): unknown ({reason}" in cli("check", path, cwd=tmp_path).stdout


def test_a_dataset_from_code_that_cannot_be_seen_makes_sharding_unknown(tmp_path):
    path = project(
        tmp_path,
        "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\nimport data_lib\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "npu.distribute.broadcast(model.trainable_variables)\n"
        "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD()), loss='mse')\n"
        "train = data_lib.make_dataset('train')\n"
        "model.fit(train, epochs=1)\n",
    )
    analysis = analyze(load(path))
    assert analysis.steps == {"broadcast": "present", "allreduce": "present", "shard": "unknown"}
    assert analysis.reasons["shard"].startswith("data_lib.make_dataset comes from data_lib: there is no data_lib.py")


def test_the_fix_of_a_module_needing_the_tf2_adapter_imports_it_there_and_opens_the_device_in_the_notebook(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = project(
        tmp_path,
        "import tensorflow as tf\nfrom steps import train_step\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n",
        steps="import tensorflow as tf\n"
        "def train_step(model, optimizer, x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
    )
    notebook = load(path)
    result = fix_notebook(notebook, analyze(notebook))
    [(module, (_, fixed_module))] = result.modules.items()
    assert module == "steps.py"
    assert fixed_module.startswith("import tensorflow as tf\nimport npu_device as npu\ndef train_step")
    assert '    grads = npu.distribute.all_reduce(grads, reduction="mean")\n' in fixed_module
    assert "npu.open()" not in fixed_module
    assert result.sources[0].startswith("import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n")


def test_a_module_the_notebook_writes_itself_is_read_from_its_cell_and_fixed_there():
    from tests.conftest import joined, notebook_from

    notebook = notebook_from(
        "%%writefile mnist_setup.py\n"
        "import tensorflow as tf\n"
        "def build_and_compile_model():\n"
        "    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
        "    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss='mse')\n"
        "    return model\n"
        "# %%\n"
        "import tensorflow as tf\nimport mnist_setup\n"
        "model = mnist_setup.build_and_compile_model()\nmodel.fit(ds, epochs=1)\n"
    )
    analysis = analyze(notebook)
    [finding] = [f for f in analysis.findings if f.code == "missing-allreduce"]
    assert finding.path == "mnist_setup.py" and finding.line == 4
    result = fix_notebook(notebook, analysis)
    assert result.modules == {}  # nothing to write beside the notebook: its cell writes the file
    fixed = joined(notebook, result.sources)
    assert fixed.startswith(
        "%%writefile mnist_setup.py\nimport tensorflow as tf\nimport npu_device as npu\ndef build_and_compile_model():\n"
    )
    assert "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(" in fixed
    assert analyze(notebook_from(fixed)).steps["allreduce"] == "present"


def test_modules_past_the_limit_are_unseen_with_the_reason_and_the_command_line_reads_more(tmp_path):
    """The panel's analysis reads at most MAX_MODULES modules; one past it is not "missing" its step but
    unknown, with why; the command line reads up to MAX_PROJECT_MODULES (a project's own package)."""
    from npu_migrate_nb.analysis import Options

    code = ESTIMATOR_NOTEBOOK.replace("from model import model_fn", "import helpers\nfrom model import model_fn")
    path = project(tmp_path, code, helpers="import a\nimport b\n", a="", b="", model=MODEL_WRAPPED)
    few = analyze(load(path), Options(max_modules=2))
    assert [m.path.rsplit("/", 1)[-1] for m in few.context.modules.found] == ["helpers.py", "model.py"]
    assert few.steps["allreduce"] == "present"  # model.py came before the limit
    few = analyze(load(path), Options(max_modules=1))
    assert few.steps["allreduce"] == "unknown"
    assert few.reasons["allreduce"] == "model_fn comes from model: not analyzed: more than 1 modules are imported"
    report = json.loads(cli("check", path, "--format", "json", cwd=tmp_path).stdout)
    assert report["steps"]["allreduce"] == "present"
