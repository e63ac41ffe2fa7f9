"""Bad input gets one clear line (file, cell, line), exit code 2 when unusable, and nothing is written."""

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


def test_missing_file_and_directory(tmp_path, capsys):
    assert run(["check", str(tmp_path / "nope.ipynb")], capsys)[0] == 2
    code, _, err = run(["check", str(tmp_path)], capsys)
    assert code == 2 and "is a directory" in err


def test_one_bad_path_among_good_ones_still_reports_the_good(tmp_path, capsys, write_notebook):
    good = write_notebook([("code", "import tensorflow as tf\nx = tf.constant(1)\n")])
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    code, out, err = run(["check", str(good), str(bad), "--format", "json"], capsys)
    assert code == 2 and json.loads(out)["path"] == str(good) and "bad.ipynb" in err


def test_non_python_kernel_is_refused(capsys, write_notebook):
    path = write_notebook([("code", "library(tensorflow)\n")], language="R")
    code, out, err = run(["check", str(path)], capsys)
    assert code == 2 and err.strip() == f"npu-migrate-nb: {path}: not a Python notebook (R)"
    assert out == ""


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
