"""Bad input gets one clear line (file, cell, line), exit code 2 when unusable (0 for a skipped non-Python
notebook), and nothing is written."""

import json
import os

import pytest

from npu_migrate_nb.cli import main


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "content,expected",
    [
        (b'{"cells": [', "invalid JSON at line 1"),
        (b"[1, 2, 3]", "not a Jupyter notebook"),
        (b'{"metadata": {}}', "not a Jupyter notebook"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        (b'{"cells": [{"source": "x"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "malformed cell"),
        (b"\xff\xfe\xfa not utf-8", "not UTF-8"),
    ],
)
def test_unusable_notebook_is_one_line_and_exit_2(tmp_path, capsys, content, expected):
    path = tmp_path / "bad.ipynb"
    path.write_bytes(content)
    code, out, err = run(["check", str(path)], capsys)
    assert code == 2 and out == ""
    assert expected in err and str(path) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_file_and_a_directory_without_notebooks_or_scripts(tmp_path, capsys):
    assert run(["check", str(tmp_path / "nope.ipynb")], capsys)[0] == 2
    (tmp_path / "data.csv").write_text("x,y\n")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "old-checkpoint.ipynb").write_text("{")
    code, out, err = run(["check", str(tmp_path)], capsys)
    assert code == 2 and out == "" and f"{tmp_path}: no notebooks or scripts in this directory" in err, err
    assert len(err.strip().splitlines()) == 1


def test_one_bad_path_among_good_ones_still_reports_the_good(tmp_path, capsys, write_notebook):
    good = write_notebook([("code", "import tensorflow as tf\nx = tf.constant(1)\n")])
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    code, out, err = run(["check", str(good), str(bad), "--format", "json"], capsys)
    assert code == 2 and json.loads(out)["path"] == str(good) and "bad.ipynb" in err


def test_non_python_kernel_is_skipped_with_one_line_and_exit_0(capsys, write_notebook):
    path = write_notebook([("code", "library(tensorflow)\n")], language="R")
    code, out, err = run(["check", str(path)], capsys)
    assert code == 0 and err.strip() == f"npu-migrate-nb: {path}: not a Python notebook (R), skipped"
    assert out == ""


def test_non_python_kernel_in_json_has_its_language_and_no_steps(capsys, write_notebook):
    path = write_notebook([("code", "library(tensorflow)\n")], language="R")
    code, out, err = run(["check", str(path), "--format", "json"], capsys)
    report = json.loads(out)
    assert code == 0 and len(err.strip().splitlines()) == 1
    assert report["language"] == "R" and report["findings"] == [] and report["errors"] == []
    assert set(report["steps"].values()) == {"not-applicable"}


def test_a_folder_of_mixed_kernels_is_checked_and_the_others_skipped(capsys, write_notebook):
    python = write_notebook([("code", "import tensorflow as tf\nds = tf.data.Dataset.range(64).batch(16)\n"
                                      "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")], name="a.ipynb")
    julia = write_notebook([("code", "using Flux\n")], name="b.ipynb", language="julia")
    code, out, err = run(["check", str(python), str(julia)], capsys)
    assert code == 1 and "[missing-shard]" in out and str(julia) not in out  # the Python one decides
    assert err.strip() == f"npu-migrate-nb: {julia}: not a Python notebook (julia), skipped"
    clean = write_notebook([("code", "x = 1\n")], name="c.ipynb")
    assert run(["check", str(clean), str(julia)], capsys)[0] == 0


def test_fix_skips_a_non_python_kernel_and_writes_nothing(tmp_path, capsys, write_notebook):
    path = write_notebook([("code", "library(tensorflow)\n")], language="R")
    original = path.read_bytes()
    out_path = tmp_path / "out.ipynb"
    for target in (["-o", str(out_path)], ["--in-place"], ["--diff"], []):
        code, out, err = run(["fix", str(path), *target], capsys)
        assert code == 0 and out == "", target
        assert err.strip() == f"npu-migrate-nb: {path}: not a Python notebook (R), skipped"
    assert path.read_bytes() == original and sorted(os.listdir(tmp_path)) == ["nb.ipynb"]


def test_syntax_error_names_cell_and_line_and_the_rest_is_analyzed(capsys, write_notebook):
    path = write_notebook(
        [
            ("markdown", "# title"),
            ("code", "import tensorflow as tf\n"),
            ("code", "x = 1\ndef broken(:\n    pass\n"),
            ("code", "ds = tf.data.Dataset.from_tensor_slices(x).batch(64)\n"
                     "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"),
        ]
    )
    code, out, err = run(["check", str(path)], capsys)
    assert code == 1
    assert f"{path}:cell 2:2:" in out and "syntax error" in out
    assert f"{path}:cell 3:1:" in out and "[missing-shard]" in out


def test_huge_cell_is_reported_not_parsed(capsys, write_notebook):
    path = write_notebook([("code", "import tensorflow as tf\n"), ("code", "x = 1\n" * 200_000)])
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1 and f"{path}:cell 1:1:1: error: cell too large" in out


def test_non_python_cell_magics_are_skipped_and_python_ones_analyzed(capsys, write_notebook):
    path = write_notebook(
        [
            ("code", "%%bash\nfor f in *; do echo $f; done\n"),
            ("code", "%%writefile train.py\nthis is not python(\n"),
            ("code", "%%time\nimport tensorflow as tf\nds = tf.data.Dataset.range(10).batch(4)\n"
                     "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"),
        ]
    )
    code, out, _ = run(["check", str(path), "--format", "json"], capsys)
    report = json.loads(out)
    assert report["errors"] == []
    assert {(f["cell"], f["code"]) for f in report["findings"]} >= {(2, "missing-shard")}


def test_a_shell_command_continued_with_a_backslash_is_ipython_not_a_syntax_error(capsys, write_notebook):
    # TensorFlow's SavedModel guide: ``!saved_model_cli run ... \`` with its options on the next line.
    command = "!saved_model_cli run --dir saved-model --tag_set serve \\\n --signature_def serving_default\n"
    path = write_notebook([("code", "import tensorflow as tf\n"), ("code", command + "x = 1\n")])
    code, out, _ = run(["check", str(path), "--format", "json"], capsys)
    assert json.loads(out)["errors"] == []


def test_lines_starting_with_percent_in_valid_python_are_python_and_magics_are_still_masked():
    from npu_migrate_nb.facts import facts_for

    formatting = 'print("%d of %d"\n      % (1, 2))\nx = 1\n'
    facts = facts_for(formatting)
    assert facts.tree is not None and facts.masked.originals == {} and facts.masked.code == formatting
    magic = facts_for("%matplotlib inline\nx = 1\n")
    assert magic.tree is not None and list(magic.masked.originals) == [0]


def test_old_notebook_format_is_upgraded(tmp_path, capsys):
    v3 = {
        "nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "old"},
        "worksheets": [{"cells": [{"cell_type": "code", "input": "import tensorflow as tf\nx = 1\n",
                                   "language": "python", "outputs": [], "metadata": {}}], "metadata": {}}],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3))
    code, out, err = run(["check", str(path), "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["framework"] == "none"


def test_fix_of_unusable_input_writes_nothing(tmp_path, capsys):
    path = tmp_path / "bad.ipynb"
    path.write_text("{not json")
    out_path = tmp_path / "out.ipynb"
    code, _, err = run(["fix", str(path), "-o", str(out_path)], capsys)
    assert code == 2 and not out_path.exists()
    code, _, _ = run(["fix", str(path), "--in-place"], capsys)
    assert code == 2 and path.read_text() == "{not json" and not (tmp_path / "bad.ipynb.orig").exists()
    assert sorted(os.listdir(tmp_path)) == ["bad.ipynb"]


def test_atomic_write_leaves_the_target_untouched_when_writing_fails(tmp_path, monkeypatch):
    from npu_migrate_nb import notebook

    target = tmp_path / "nb.ipynb"
    target.write_text("original")

    def failing_replace(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(notebook.os, "replace", failing_replace)
    with pytest.raises(OSError):
        notebook.atomic_write(str(target), "new text")
    assert target.read_text() == "original"
    assert os.listdir(tmp_path) == ["nb.ipynb"]  # no temporary file left behind


def test_fix_writes_a_notebook_that_was_already_invalid_in_its_own_way(tmp_path, capsys):
    # A kernelspec without display_name fails nbformat's schema; fixing must not refuse over that.
    document = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                   "source": "import tensorflow as tf\nds = tf.data.Dataset.range(64).batch(16)\n"
                             "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n"}],
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path, out_path = tmp_path / "loose.ipynb", tmp_path / "fixed.ipynb"
    path.write_text(json.dumps(document))
    code, _, err = run(["fix", str(path), "-o", str(out_path)], capsys)
    assert code == 0, err
    fixed = json.loads(out_path.read_text())
    assert "shard_and_rebatch_dataset" in fixed["cells"][0]["source"]
    assert fixed["metadata"] == document["metadata"]


def test_fix_refuses_to_write_a_notebook_its_change_made_invalid(tmp_path, capsys, monkeypatch, write_notebook):
    from npu_migrate_nb import notebook

    path = write_notebook([("code", "import tensorflow as tf\nds = tf.data.Dataset.range(64).batch(16)\n"
                                    "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")])
    original = path.read_bytes()
    # A cell source the schema does not allow, as a broken fix would produce.
    monkeypatch.setattr(notebook, "_source_in_layout", lambda source, layout: {"not": "a source"})
    out_path = tmp_path / "out.ipynb"
    for target in (["-o", str(out_path)], ["--in-place"]):
        code, out, err = run(["fix", str(path), *target], capsys)
        assert code == 2 and out == "" and "Traceback" not in err
        assert err.strip() == f"npu-migrate-nb: {path}: refusing to write an invalid notebook: "\
            "{'not': 'a source'} is not valid under any of the given schemas"
    assert path.read_bytes() == original and sorted(os.listdir(tmp_path)) == ["nb.ipynb"]


def _nbformat_accepts(document):
    import copy
    import warnings

    import nbformat

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            nbformat.validate(copy.deepcopy(document), version=4)
        except nbformat.ValidationError:
            return False
    return True


def _variants():
    from .conftest import notebook_json

    def variant(change, minor=5):
        document = notebook_json([("markdown", "# title"), ("code", "import tensorflow as tf\n")],
                                 nbformat_minor=minor)
        change(document)
        return document

    def with_ids(*ids):
        def change(document):
            for cell, cell_id in zip(document["cells"], ids):
                cell["id"] = cell_id
        return change

    def set_in(keys, value):
        def change(document):
            target = document
            for key in keys[:-1]:
                target = target[key]
            target[keys[-1]] = value
        return change

    unchanged = lambda document: None  # noqa: E731
    yield from (variant(unchanged, minor) for minor in range(6))  # valid, ids missing in 4.5
    yield variant(with_ids("a", "b"))
    yield variant(with_ids("a", "a"))  # duplicate ids: nbformat repairs them, it does not refuse
    yield variant(with_ids("a", "b"), minor=4)  # ids are not part of 4.4
    yield variant(with_ids("not an id!", "b"))
    yield variant(set_in(["metadata", "kernelspec"], {"name": "python3"}))
    yield variant(set_in(["cells", 1, "source"], 42))
    yield variant(set_in(["cells", 1, "outputs"], [{"output_type": "bogus"}]))
    yield variant(set_in(["cells", 0, "cell_type"], "heading"))
    yield variant(set_in(["cells", 1, "execution_count"], "1"))
    yield variant(set_in(["extra"], 1))
    yield variant(set_in(["metadata", "anything"], {"goes": True}))


@pytest.mark.parametrize("document", list(_variants()))
def test_the_schema_check_before_writing_agrees_with_nbformat(document):
    from npu_migrate_nb.notebook import _schema_accepts

    assert _schema_accepts(document) == _nbformat_accepts(document)


def test_a_notebook_from_the_future_is_left_to_nbformat(tmp_path, capsys, write_notebook):
    from npu_migrate_nb.notebook import _schema_accepts

    path = write_notebook([("code", "import tensorflow as tf\nds = tf.data.Dataset.range(64).batch(16)\n"
                                    "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")],
                          nbformat_minor=9)
    assert not _schema_accepts(json.loads(path.read_text()))  # nbformat relaxes its schema for these
    code, _, err = run(["fix", str(path), "-o", str(tmp_path / "out.ipynb")], capsys)
    assert code == 0, err
