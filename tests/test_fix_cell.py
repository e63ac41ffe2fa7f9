"""Fixing one cell of a notebook whose other cells have already run (what ``%%npu_distribute --apply``
does), the kernel's cells as a notebook, and the one-cell reports."""

import json

from npu_migrate_nb import i18n
from npu_migrate_nb.analysis import Options, analyze
from npu_migrate_nb.docs_url import code_url
from npu_migrate_nb.kernel_cells import ExecutedCells
from npu_migrate_nb.report import cell_report_html, cell_report_text
from npu_migrate_nb.rewrite import fix_cell

from .conftest import notebook_from

KERAS_FIT = "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nmodel.compile(optimizer=optimizer, loss='mse')\nmodel.fit(x, y, batch_size=32)\n"


def fixed(text, index, **options):
    notebook = notebook_from(text)
    analysis = analyze(notebook, Options(current_cell=index, **options))
    return notebook, analysis, fix_cell(notebook, analysis, index)


def test_setup_that_belongs_in_a_cell_that_ran_goes_at_the_top_of_this_one_after_its_magic_line():
    _, _, result = fixed("import tensorflow as tf\n# %%\n%%npu_distribute --apply\n" + KERAS_FIT, 1)
    assert result.setup_moved_here
    assert result.source.startswith("%%npu_distribute --apply\nimport os\nimport npu_device as npu\nnpu.open().as_default()\nmodel = ")


def test_the_bridge_star_import_is_followed_by_the_notebook_tensorflow_import_again():
    text = ("import tensorflow.compat.v1 as tf\n# %%\n"
            "opt = tf.train.GradientDescentOptimizer(0.1)\ntrain_op = opt.minimize(loss)\n"
            "with tf.train.MonitoredTrainingSession() as s:\n    s.run(train_op)\n")
    _, _, result = fixed(text, 1)
    # npu_init exports a tf of its own: the notebook's compat.v1 tf must win again.
    assert result.source.startswith("from npu_bridge.npu_init import *\nimport tensorflow.compat.v1 as tf\nopt = ")
    assert "opt = npu_distributed_optimizer_wrapper(opt)" in result.source


def test_an_optimizer_made_in_a_cell_that_ran_is_wrapped_where_this_cell_uses_it():
    text = "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\noptimizer = tf.keras.optimizers.SGD(0.1)\n# %%\n" + KERAS_FIT
    notebook, analysis, result = fixed(text, 2)
    assert "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(optimizer), loss='mse')" in result.source
    assert result.source.startswith("import os\nmodel = ")  # for the shard fix; npu_device is set up already
    assert result.elsewhere == []
    # Without a current cell (the CLI), the wrap goes where the optimizer is made.
    whole = analyze(notebook)
    assert [f.cell for f in whole.findings if f.code == "missing-allreduce"] == [1]


def test_fixing_a_fixed_cell_changes_nothing_and_cells_without_findings_are_left_alone():
    text = "import tensorflow as tf\n# %%\n" + KERAS_FIT
    notebook, _, result = fixed(text, 1)
    again = notebook_from("import tensorflow as tf\n# %%\n" + result.source)
    assert fix_cell(again, analyze(again, Options(current_cell=1)), 1).source is None
    assert fix_cell(notebook, analyze(notebook, Options(current_cell=0)), 0).source is None


def test_one_code_only_fixes_that_finding():
    notebook = notebook_from("import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n" + KERAS_FIT)
    analysis = analyze(notebook, Options(current_cell=1))
    only = fix_cell(notebook, analysis, 1, codes={"missing-shard"})
    assert "x[rank_id::rank_size]" in only.source and "wrapper" not in only.source


def test_the_reduction_option_overrides_what_the_loss_says():
    loop = ("import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n# %%\n"
            "with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(model(x)) / 64\n"
            "grads = tape.gradient(loss, model.trainable_variables)\nopt.apply_gradients(zip(grads, model.trainable_variables))\n")
    assert 'reduction="sum"' in fixed(loop, 1)[2].source
    assert 'reduction="mean"' in fixed(loop, 1, reduction="mean")[2].source


def test_the_cell_report_names_lines_marks_them_and_escapes_the_code():
    text = "import tensorflow as tf\n# %%\n%%npu_distribute\n" + KERAS_FIT.replace("loss='mse'", "loss='<mse>'")
    notebook = notebook_from(text)
    analysis = analyze(notebook, Options(current_cell=1))
    plain = cell_report_text(analysis, 1, "cell [7]", {0: "cell [6]", 1: "cell [7]"})
    assert plain.startswith("npu_distribute: cell [7]: 3 findings\n  line 3:")
    assert "  missing  gradient aggregation (梯度聚合)" in plain
    html = cell_report_html(analysis, 1, notebook.cells[1].source, "cell [7]")
    assert "&lt;mse&gt;" in html and "<mse>" not in html
    assert '<tr class="error" title="gradients are not aggregated' in html
    assert 'class="npu-status missing">missing</span>' in html


def test_the_html_report_links_each_code_to_its_page_and_the_text_report_does_not():
    text = "import tensorflow as tf\n# %%\n%%npu_distribute\n" + KERAS_FIT
    notebook = notebook_from(text)
    analysis = analyze(notebook, Options(current_cell=1))
    codes = {finding.code for finding in analysis.findings}
    assert "missing-allreduce" in codes
    html = cell_report_html(analysis, 1, notebook.cells[1].source, "cell [7]")
    elsewhere = cell_report_html(analysis, 0, notebook.cells[0].source, "cell [6]")  # the same findings, listed
    for report in (html, elsewhere):
        for code in codes:
            assert (f'<a class="npu-code-link" href="{code_url(code)}" target="_blank" rel="noopener" '
                    f'title="what {code} means, in the documentation"><span class="npu-code-name">[{code}]</span></a>'
                    in report)
    with i18n.language("zh_CN"):
        zh = cell_report_html(analysis, 1, notebook.cells[1].source, "cell [7]")
        plain = cell_report_text(analysis, 1, "cell [7]")
    assert 'title="文档中 missing-allreduce 的含义"' in zh
    assert "http" not in plain and "[missing-allreduce]" in plain


def test_a_syntax_error_is_reported_with_its_line():
    notebook = notebook_from("import tensorflow as tf\n# %%\nmodel = (\n")
    plain = cell_report_text(analyze(notebook), 1, "cell [2]")
    assert "cell [2]: cannot be analyzed\n  line 1:" in plain and "syntax error" in plain


class _Info:
    def __init__(self, raw_cell, cell_id=None):
        self.raw_cell, self.cell_id, self.store_history, self.silent = raw_cell, cell_id, True, False


def test_a_cell_run_again_replaces_its_earlier_run_and_deleted_cells_drop_out():
    cells = ExecutedCells()
    cells.record("a = 1", 1, "id-a")
    cells.record("b = 2", 2, "id-b")
    cells.record("a = 10", 3, "id-a")
    assert [(c.source, c.label) for c in cells.cells] == [("a = 10", "cell [3]"), ("b = 2", "cell [2]")]
    cells.record("c = 3", 4, "id-c", deleted=("id-b",))
    assert [c.source for c in cells.cells] == ["a = 10", "c = 3"]


def test_without_cell_ids_the_same_code_under_other_magic_options_is_one_cell():
    cells = ExecutedCells()
    cells.record("import tensorflow as tf", 1)
    cells.record("%%npu_distribute --check\nx = 1", 2)
    cells.record("%%npu_distribute --apply\nx = 1", 3)
    notebook, index, labels = cells.notebook()
    assert [c.source for c in notebook.cells] == ["import tensorflow as tf", "%%npu_distribute --apply\nx = 1"]
    assert index == 1 and labels == {0: "cell [1]", 1: "cell [3]"}
    cells.replace_current("%%npu_distribute --apply\nx = 2")
    cells.record("%%npu_distribute\nx = 2", 4)
    assert [c.source for c in cells.cells][-1] == "%%npu_distribute\nx = 2" and len(cells.cells) == 2


def test_a_current_cell_that_was_not_recorded_is_added_last():
    cells = ExecutedCells()
    cells.record("a = 1", 1)
    notebook, index, labels = cells.notebook("%%npu_distribute\nb = 2\n")
    assert index == 1 and labels[1] == "this cell" and notebook.cells[1].source == "%%npu_distribute\nb = 2\n"
    # IPython hands a cell magic its body with a newline added: still the recorded cell.
    cells.record("%%npu_distribute\nb = 2", 2)
    assert cells.notebook("%%npu_distribute\nb = 2\n")[1] == 1 and len(cells.notebook()[0].cells) == 2


def test_check_and_fix_take_the_reduction_option(tmp_path, write_notebook):
    from npu_migrate_nb.cli import main

    path = write_notebook([("code", "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
                                    "with tf.GradientTape() as tape:\n    loss = tf.reduce_sum(model(x)) / 64\n"
                                    "grads = tape.gradient(loss, model.trainable_variables)\n")])
    out = tmp_path / "out.ipynb"
    assert main(["fix", str(path), "-o", str(out), "--reduction", "mean"]) == 1  # no model: broadcast left
    source = "".join(json.loads(out.read_text())["cells"][0]["source"])
    assert 'npu.distribute.all_reduce(grads, reduction="mean")' in source
