"""``%%npu_distribute`` in a real IPython kernel, driven as JupyterLab drives it (cell ids sent)."""

import pytest

from .kernel import Kernel, new_cell_id, ok, widget_states

IMPORTS = "import numpy as np\nimport tensorflow as tf\nx = np.zeros((64, 8), 'float32')\ny = np.zeros((64, 1), 'float32')"
KERAS_CELL = (
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(8,))])\n"
    "model.compile(optimizer=optimizer, loss='mse')\n"
    "history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)\n"
)


@pytest.fixture
def kernel():
    kernel = Kernel(extra_env={"NPU_MIGRATE_NB_WIDGETS": "0"})
    yield kernel
    kernel.shutdown()


@pytest.fixture
def widget_kernel():
    kernel = Kernel()
    yield kernel
    kernel.shutdown()


def report_of(execution) -> str:
    reports = [d["text/plain"] for d in execution.displays if "npu_distribute:" in d.get("text/plain", "")]
    assert len(reports) == 1, execution.text()
    return reports[0]


def test_loading_imports_no_tensorflow_and_the_magics_exist(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    shown = ok(kernel, "import sys\nprint('tensorflow' in sys.modules, sorted(get_ipython().magics_manager.magics['cell']))")
    assert shown.stream().startswith("False"), shown.text()
    assert "npu_distribute" in shown.stream()
    usage = ok(kernel, "%%npu_distribute --help\npass")
    assert "--apply" in usage.text() and "--reduction" in usage.text()


def test_the_cell_is_analyzed_with_the_cells_run_before_it_and_then_run(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, IMPORTS)
    ok(kernel, "optimizer = tf.keras.optimizers.SGD(0.1)")  # two cells before the magic
    ok(kernel, "unrelated = 1")
    execution = ok(kernel, "%%npu_distribute\n" + KERAS_CELL)
    report = report_of(execution)
    # The number JupyterLab shows beside the cell ([5]) is the one the report names, whichever IPython
    # (9 counts the cell before it runs, 8 after).
    assert execution.reply["content"]["execution_count"] == 5
    assert "cell [5]: 3 findings" in report
    # The optimizer made in cell [3] is found, and wrapped where this cell uses it (cell [3] has run).
    assert "line 3:25: error: gradients are not aggregated" in report
    assert "fix: model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer), loss='mse')" in report
    assert "missing  variable broadcast (变量广播)" in report
    assert "missing  dataset sharding (数据集分片)" in report
    html = [d["text/html"] for d in execution.displays if "text/html" in d][0]
    assert '<tr class="error" title="gradients are not aggregated' in html  # the line is marked
    assert "[missing-allreduce]" in html
    ran = ok(kernel, "print(len(history.history['loss']))")
    assert ran.stream().strip() == "1"


def test_check_and_diff_do_not_run_the_cell(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "import tensorflow as tf\noptimizer = 'unused'")
    checked = ok(kernel, "%%npu_distribute --check\nran_check = True\n" + KERAS_CELL)
    assert "missing-allreduce" in report_of(checked)
    diff = ok(kernel, "%%npu_distribute --diff\nran_diff = True\n" + KERAS_CELL)
    text = diff.stream()
    assert text.startswith("--- a/cell [4]\n+++ b/cell [4]\n"), text
    assert "+model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer), loss='mse')" in text
    assert "+import npu_device as npu\n+npu.open().as_default()\n" in text  # setup: the import cell has run
    assert not diff.displays
    names = ok(kernel, "print('ran_check' in dir(), 'ran_diff' in dir())")
    assert names.stream().strip() == "False False"


def test_apply_replaces_the_cell_runs_the_adapted_code_and_twice_changes_nothing(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "%npu_sim on")
    ok(kernel, IMPORTS)
    cell_id = new_cell_id()
    # Keras 2.15 optimizers serve one model: a cell that builds a model makes its optimizer too.
    applied = ok(kernel, "%%npu_distribute --apply\noptimizer = tf.keras.optimizers.SGD(0.1)\n" + KERAS_CELL,
                 cell_id=cell_id)
    [payload] = applied.payload
    assert payload["source"] == "set_next_input" and payload["replace"] is True
    new_text = payload["text"]
    assert new_text.startswith("%%npu_distribute --apply\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n")
    assert "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)\n" in new_text
    assert "x[rank_id::rank_size]" in new_text
    # What ran is the adapted code (the wrapped optimizer on one card), and the report is on it.
    assert "cell [4]: nothing missing or wrong here" in report_of(applied)
    assert "present  gradient aggregation" in report_of(applied)
    ran = ok(kernel, "print(rank_size, rank_id, len(history.history['loss']))")
    assert ran.stream().strip() == "1 0 1"
    # The frontend put the text in the cell; the user runs it again: nothing more to change.
    again = ok(kernel, new_text, cell_id=cell_id)
    assert again.payload == []
    assert "nothing missing or wrong here" in report_of(again)


def test_a_cell_with_a_syntax_error_gets_a_report_naming_the_line_not_a_traceback(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    execution = ok(kernel, "%%npu_distribute --check\nimport tensorflow as tf\nmodel = (\n")
    report = report_of(execution)
    assert "cannot be analyzed" in report and "line 3:" in report and "syntax error" in report
    assert "Traceback" not in execution.text()


def test_ipython_lines_in_the_cell_are_handled_as_the_cli_does(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "import tensorflow as tf\noptimizer = tf.keras.optimizers.SGD(0.1)\nimport numpy as np\nx = y = np.zeros((4, 1))")
    execution = ok(kernel, "%%npu_distribute --diff\n!echo hello\n%time model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
                           "model.compile(optimizer=optimizer, loss='mse')\nmodel.fit(x, y)\n")
    text = execution.stream()
    assert " !echo hello\n" in text and " %time model = tf.keras.Sequential" in text  # kept byte for byte
    assert "+model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)" in text


def test_the_analyzer_options_are_those_of_the_command_line(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "%npu_sim on")
    ok(kernel, "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\nGLOBAL = 32")
    loop = ("with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(model(x)) / GLOBAL\n"
            "grads = tape.gradient(loss, model.trainable_variables)\n")
    default = ok(kernel, "%%npu_distribute --diff\n" + loop).stream()
    assert 'reduction="sum"' in default
    forced = ok(kernel, "%%npu_distribute --diff --reduction mean\n" + loop).stream()
    assert 'reduction="mean"' in forced
    estimator = ok(kernel, "%%npu_distribute --diff --broadcast-style hook\nhooks = []\n"
                           "est = tf.estimator.Estimator(model_fn=f)\nest.train(input_fn, hooks=hooks)\n").stream()
    assert "NPUBroadcastGlobalVariablesHook(0" in estimator
    bad = kernel.execute("%%npu_distribute --reduction median\npass", cell_id=new_cell_id())
    assert bad.status == "error" and "UsageError" in bad.text() and "median" in bad.text()
    for options in ("--run --steps -1", "--run --steps 2 --full"):
        bad = kernel.execute(f"%%npu_distribute {options}\npass", cell_id=new_cell_id())
        assert bad.status == "error" and "UsageError" in bad.text() and "--steps" in bad.text(), bad.text()


def test_unload_removes_the_magics(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "%unload_ext npu_migrate_nb")
    gone = kernel.execute("%%npu_distribute --check\npass", cell_id=new_cell_id())
    assert gone.status == "error" and "npu_distribute" in gone.text()
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "%%npu_distribute --check\npass")


def test_npu_sim_makes_the_stand_ins_importable_at_rank_size_one(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    missing = kernel.execute("import npu_device", cell_id=new_cell_id())
    assert missing.status == "error" and "ModuleNotFoundError" in missing.text()
    ok(kernel, "%npu_sim on")
    shown = ok(kernel, "import npu_device as npu\nnpu.open().as_default()\n"
                       "print(npu.distribute.all_reduce([1.5, None, 2.0], reduction='sum'))")
    assert shown.stream().strip() == "[1.5, None, 2.0]"
    ok(kernel, "%npu_sim off")
    again = kernel.execute("import importlib, sys\nsys.modules.pop('npu_device', None)\nimport npu_device", cell_id=new_cell_id())
    assert again.status == "error" and "ModuleNotFoundError" in again.text()


def test_npu_sim_refuses_to_shadow_a_real_adapter_unless_forced(kernel, tmp_path):
    fake = tmp_path / "npu_device"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    ok(kernel, f"import sys\nsys.path.insert(0, {str(tmp_path)!r})")
    ok(kernel, "%load_ext npu_migrate_nb")
    refused = kernel.execute("%npu_sim on", cell_id=new_cell_id())
    assert refused.status == "error" and "real Ascend adapter" in refused.text()
    ok(kernel, "%npu_sim on --force")
    shown = ok(kernel, "import npu_device\nprint(hasattr(npu_device, 'REAL'))")
    assert shown.stream().strip() == "False"


def test_the_panel_reports_every_cell_run_so_far(kernel):
    ok(kernel, "%load_ext npu_migrate_nb")
    ok(kernel, "import tensorflow as tf\noptimizer = tf.keras.optimizers.SGD(0.1)\nimport numpy as np\nx = y = np.zeros((4, 8))")
    ok(kernel, "%%npu_distribute\n" + KERAS_CELL)
    panel = ok(kernel, "%npu_panel")
    text = panel.displays[0]["text/plain"]
    # The whole notebook: the optimizer is wrapped where cell [2] makes it.
    assert "npu_distribute: cell [2]: 1 finding\n  line 2:13: error: gradients are not aggregated" in text
    assert "npu_distribute: cell [3]: 2 findings" in text
    assert "missing  gradient aggregation (梯度聚合)" in text
    same = ok(kernel, "import npu_migrate_nb\nnpu_migrate_nb.panel()")
    assert same.displays[0]["text/plain"] == text


# ----------------------------------------------------------------------------- widgets and Apply


def _frontend(kernel, with_extension: bool, answer_ok: bool = True):
    """Play JupyterLab: with our extension, answer hello and replace-cell; without it, close the comm
    (what JupyterLab does for an unknown comm target)."""
    requests = []

    def on_open(message):
        content = message["content"]
        if content.get("target_name") != "npu_migrate_nb":
            return
        if with_extension:
            kernel.send_comm(content["comm_id"], {"action": "hello", "version": "test"})
        else:
            kernel.send_comm(content["comm_id"], {}, kind="comm_close")

    def on_msg(message):
        data = message["content"]["data"]
        if data.get("action") == "replace-cell":
            requests.append(data)
            reply = {"action": "replaced", "request": data["request"], "ok": answer_ok}
            if not answer_ok:
                reply["reason"] = "the cell changed since it was analyzed"
            kernel.send_comm(message["content"]["comm_id"], reply)

    kernel.on_comm_open, kernel.on_comm_msg = on_open, on_msg
    return requests


def _click(kernel, states, description):
    [button] = [cid for cid, s in states.items() if s.get("_model_name") == "ButtonModel" and s.get("description") == description][:1]
    kernel.send_comm(button, {"method": "custom", "content": {"event": "click"}})
    kernel.settle(1.5)
    return button


def test_the_widget_report_applies_a_finding_through_the_lab_extension(widget_kernel):
    kernel = widget_kernel
    requests = _frontend(kernel, with_extension=True)
    ok(kernel, "%load_ext npu_migrate_nb")
    kernel.settle(0.5)  # the hello round trip
    ok(kernel, "import tensorflow as tf\noptimizer = tf.keras.optimizers.SGD(0.1)\nimport numpy as np\nx = y = np.zeros((4, 8))")
    cell_id = new_cell_id()
    source = "%%npu_distribute --check\n" + KERAS_CELL
    shown = ok(kernel, source, cell_id=cell_id)
    [bundle] = shown.displays
    assert "application/vnd.jupyter.widget-view+json" in bundle and "missing-allreduce" in bundle["text/plain"]
    assert "text/html" in bundle  # for frontends without widgets
    states = widget_states(kernel)
    buttons = [s for s in states.values() if s.get("_model_name") == "ButtonModel"]
    assert [b["description"] for b in buttons] == ["Apply"] * 4  # three findings and "all of them"
    assert not any(s.get("_model_name") == "TextareaModel" for s in states.values())
    _click(kernel, states, "Apply")
    [request] = requests
    assert request["cell_id"] == cell_id and request["expected"] == source
    assert request["source"].startswith("%%npu_distribute --check\n")
    assert "npu_distributed_keras_optimizer_wrapper(optimizer)" in request["source"]
    assert "x[rank_id::rank_size]" not in request["source"]  # one finding's fix only
    statuses = [s["value"] for s in widget_states(kernel).values() if s.get("_model_name") == "HTMLModel"]
    assert any(value.startswith("<b>applied</b>") for value in statuses), statuses


def test_a_refused_apply_says_why_and_without_the_extension_the_code_to_paste_is_shown(widget_kernel):
    kernel = widget_kernel
    _frontend(kernel, with_extension=False)
    ok(kernel, "%load_ext npu_migrate_nb")
    kernel.settle(0.5)
    ok(kernel, "import tensorflow as tf\noptimizer = tf.keras.optimizers.SGD(0.1)\nimport numpy as np\nx = y = np.zeros((4, 8))")
    ok(kernel, "%%npu_distribute --check\n" + KERAS_CELL)
    states = widget_states(kernel)
    pastes = [s["value"] for s in states.values() if s.get("_model_name") == "TextareaModel"]
    assert len(pastes) == 4 and "npu_distributed_keras_optimizer_wrapper(optimizer)" in pastes[0]
    notes = [s["value"] for s in states.values() if s.get("_model_name") == "HTMLModel"]
    assert any("paste the adapted cell below" in value for value in notes)


def test_in_a_terminal_apply_prints_the_adapted_cell_and_the_report_is_plain_text(tmp_path):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        shell.run_cell("%load_ext npu_migrate_nb")
        shell.run_cell("import tensorflow as tf")
        shell.run_cell("%%npu_distribute --apply --check\\noptimizer = tf.keras.optimizers.SGD(0.1)\\n"
                       "model.compile(optimizer=optimizer, loss='mse')\\nmodel.fit(x, y)\\n")
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "npu_distribute: the adapted cell (paste it in place of the old one):" in done.stdout
    assert "%%npu_distribute --apply --check\nimport os\nimport npu_device as npu\nnpu.open().as_default()\n" in done.stdout
    assert "optimizer = npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer)" in done.stdout
    assert "the notebook so far (framework keras" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_cells_modules_are_read_from_the_project_root_above_the_kernels_folder(kernel, tmp_path):
    """A notebook in ``notebooks/`` of a project importing ``official.model`` from the project's root
    (its pyproject.toml): the report names the module's line, as ``check`` on the project does."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "official").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "official" / "__init__.py").write_text("")
    (tmp_path / "official" / "model.py").write_text(
        "import tensorflow.compat.v1 as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.AdamOptimizer(1e-3)\n"
        "    train_op = optimizer.minimize(tf.reduce_mean(features))\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=tf.reduce_mean(features), train_op=train_op)\n")
    ok(kernel, f"import os\nos.chdir({str(tmp_path / 'notebooks')!r})\n%load_ext npu_migrate_nb")
    execution = ok(kernel, "%%npu_distribute --check\nimport tensorflow.compat.v1 as tf\n"
                           "from official.model import model_fn\nest = tf.estimator.Estimator(model_fn=model_fn)\n"
                           "est.train(lambda: None, max_steps=1)")
    report = report_of(execution)
    assert "official/model.py" in report and "gradients are not aggregated" in report, report
