"""The ``check`` and ``fix`` commands: formats, exit codes, byte-identical untouched parts."""

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys

from npu_migrate_nb.cli import main
from npu_migrate_nb.docs_url import DEFAULT_DOCS_URL, ENVIRONMENT_VARIABLE, docs_url

from .conftest import EXAMPLES

LINE = re.compile(r"^(?P<path>.+):cell (?P<cell>\d+):(?P<line>\d+):(?P<col>\d+): (?P<severity>error|warning|info): .+ \[(?P<code>[a-z0-9-]+)\]$")


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_report_is_one_line_per_finding_then_the_steps(capsys):
    path = str(EXAMPLES / "keras_single_card.ipynb")
    code, out, _ = run(["check", path], capsys)
    assert code == 1
    lines = out.strip().splitlines()
    findings = [line for line in lines if LINE.match(line)]
    assert len(findings) == 3 and all(LINE.match(line)["path"] == path for line in findings)
    assert lines[len(findings)] == f"{path}: framework keras, adapter npu_device, TensorFlow 2 (it imports the TF2 adapter (npu_device))"
    assert [" ".join(line.split(":")[0].split()) for line in lines[-3:]] == ["MISSING variable broadcast (变量广播)",
                                                                  "MISSING gradient aggregation (梯度聚合)",
                                                                  "MISSING dataset sharding (数据集分片)"]


def test_json_report_schema(capsys):
    path = str(EXAMPLES / "custom_loop_single_card.ipynb")
    code, out, _ = run(["check", path, "--format", "json"], capsys)
    report = json.loads(out)
    assert code == 1
    assert set(report) == {"path", "language", "framework", "adapter", "mode", "mode_reason", "steps", "reasons",
                           "findings", "errors"}
    assert report["mode"] == "tf2" and report["mode_reason"]
    assert report["framework"] == "custom-loop" and report["adapter"] == "npu_device"
    assert report["steps"] == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
    for finding in report["findings"]:
        assert set(finding) == {"code", "step", "severity", "cell", "line", "column", "end_line", "end_column",
                                "message", "fix", "url"}
        assert finding["step"] in ("broadcast", "allreduce", "shard", None)
    allreduce = next(f for f in report["findings"] if f["code"] == "missing-allreduce")
    assert allreduce["fix"] == 'grads = npu.distribute.all_reduce(grads, reduction="sum")'
    assert "global batch size" in allreduce["message"]


def test_json_gives_each_finding_the_page_of_its_code(capsys, monkeypatch):
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    path = str(EXAMPLES / "keras_single_card.ipynb")
    _, out, _ = run(["check", path, "--format", "json"], capsys)
    report = json.loads(out)
    docs = docs_url()  # the package's Documentation URL, as the build wrote it
    assert report["findings"] and docs == _project_docs_url()
    for finding in report["findings"]:
        assert finding["url"] == f"{docs}codes/{finding['code']}/"
    assert all("url" not in error for error in report["errors"])  # a cell error has no code, so no page


def _project_docs_url() -> str:
    """pyproject's [project.urls] Documentation as installed (the literal default on an older install)."""
    entries = importlib.metadata.metadata("npu-migrate-nb").get_all("Project-URL") or []
    urls = [entry.partition(",")[2].strip() for entry in entries if entry.partition(",")[0].strip() == "Documentation"]
    url = urls[0] if urls else DEFAULT_DOCS_URL
    return url if url.endswith("/") else url + "/"


def test_the_docs_url_comes_from_the_environment_when_set(capsys, monkeypatch):
    path = str(EXAMPLES / "keras_single_card.ipynb")
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "file:///srv/npu-docs/site")  # no trailing slash: one is added
    _, out, _ = run(["check", path, "--format", "json"], capsys)
    urls = {finding["code"]: finding["url"] for finding in json.loads(out)["findings"]}
    assert urls["missing-shard"] == "file:///srv/npu-docs/site/codes/missing-shard/"
    assert set(urls.values()) == {f"file:///srv/npu-docs/site/codes/{code}/" for code in urls}
    _, text, _ = run(["check", path], capsys)
    assert "file:///" not in text  # the linter-style lines stay as they were


def test_json_for_several_paths_is_a_list(capsys):
    paths = [str(EXAMPLES / "keras_single_card.ipynb"), str(EXAMPLES / "estimator_single_card.ipynb")]
    _, out, _ = run(["check", *paths, "--format", "json"], capsys)
    assert [item["path"] for item in json.loads(out)] == paths


def test_fix_then_check_is_clean_and_untouched_cells_are_byte_identical(tmp_path, capsys):
    source = EXAMPLES / "estimator_single_card.ipynb"
    fixed = tmp_path / "fixed.ipynb"
    code, _, err = run(["fix", str(source), "-o", str(fixed)], capsys)
    assert code == 0, err
    before, after = json.loads(source.read_text()), json.loads(fixed.read_text())
    changed = [i for i, (a, b) in enumerate(zip(before["cells"], after["cells"])) if a != b]
    assert changed == [3, 5, 6]
    assert before["metadata"] == after["metadata"]
    for index, (a, b) in enumerate(zip(before["cells"], after["cells"])):
        if index not in changed:
            assert json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)
        else:
            assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    # Outside the changed cells, the file's text is the original's, line for line.
    original_lines, fixed_lines = source.read_text().splitlines(), fixed.read_text().splitlines()
    assert original_lines[:10] == fixed_lines[:10] and original_lines[-12:] == fixed_lines[-12:]
    assert run(["check", str(fixed)], capsys)[0] == 0


def test_fixing_a_fixed_notebook_changes_nothing(tmp_path, capsys):
    first, second = tmp_path / "1.ipynb", tmp_path / "2.ipynb"
    run(["fix", str(EXAMPLES / "custom_loop_single_card.ipynb"), "-o", str(first)], capsys)
    code, _, err = run(["fix", str(first), "-o", str(second)], capsys)
    assert code == 0 and "applied 0 fix(es)" in err
    assert first.read_bytes() == second.read_bytes()


def test_fix_in_place_keeps_the_original_beside_it(tmp_path, capsys):
    path = tmp_path / "keras.ipynb"
    shutil.copy(EXAMPLES / "keras_single_card.ipynb", path)
    original = path.read_bytes()
    code, _, _ = run(["fix", str(path), "--in-place"], capsys)
    assert code == 0
    assert (tmp_path / "keras.ipynb.orig").read_bytes() == original and path.read_bytes() != original


def test_fix_without_a_target_prints_the_diff_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "keras.ipynb"
    shutil.copy(EXAMPLES / "keras_single_card.ipynb", path)
    original = path.read_bytes()
    code, out, err = run(["fix", str(path)], capsys)
    assert path.read_bytes() == original and "nothing written" in err
    assert f"--- a/{path}:cell 5\n+++ b/{path}:cell 5\n" in out
    assert "+npu.distribute.broadcast(model.trainable_variables)\n" in out
    assert code == 0  # what is left after the fix: nothing


def test_scripts_are_one_cell_and_findings_name_their_lines(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\nds = tf.data.Dataset.range(8).batch(4)\n"
                      "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")
    code, out, _ = run(["check", str(script)], capsys)
    assert code == 1 and f"{script}:2:" in out and ":cell " not in out
    marked = tmp_path / "marked.py"  # the percent format's cells are the analyzer's: lines are the file's
    marked.write_text("# %%\nimport tensorflow as tf\n\n# %%\nds = tf.data.Dataset.range(8).batch(4)\n"
                      "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")
    code, out, _ = run(["check", str(marked), "--format", "json"], capsys)
    [shard] = [f for f in json.loads(out)["findings"] if f["code"] == "missing-shard"]
    assert (shard["path"], shard["line"], shard["cell"]) == (str(marked), 5, None)
    out_path = tmp_path / "train_fixed.py"
    run(["fix", str(script), "-o", str(out_path)], capsys)
    assert "shard_and_rebatch_dataset(ds, 4)" in out_path.read_text()


def modules_imported_by(argv, modules):
    """(exit code, which of ``modules`` the command imported), in a fresh process."""
    probe = (
        "import sys\nfrom npu_migrate_nb.cli import main\n"
        f"code = main({argv!r})\n"
        f"sys.stderr.write(repr((code, sorted(m for m in {tuple(modules)!r} if m in sys.modules))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return eval(done.stderr.strip().splitlines()[-1])


def test_check_never_imports_tensorflow_libcst_or_nbformat():
    _, heavy = modules_imported_by(["check", str(EXAMPLES / "keras_single_card.ipynb")],
                                   ("tensorflow", "libcst", "nbformat", "IPython"))
    assert heavy == []


def test_fix_validates_without_importing_nbformat(tmp_path):
    # nbformat's import (jsonschema's format checkers) cost fix 1.4 s of its 1.9 s; its schema is used directly.
    argv = ["fix", str(EXAMPLES / "keras_single_card.ipynb"), "-o", str(tmp_path / "out.ipynb")]
    assert modules_imported_by(argv, ("tensorflow", "nbformat", "jsonschema", "IPython")) == (0, [])
    assert "npu.distribute.broadcast" in (tmp_path / "out.ipynb").read_text()


def test_fix_keeps_cells_without_ids_as_they_were(tmp_path, capsys, write_notebook):
    # nbformat 4.5 cells should have ids; nbformat.validate gives them random ones, fix must not.
    path = write_notebook([("markdown", "# title"),
                           ("code", "import tensorflow as tf\nds = tf.data.Dataset.range(64).batch(16)\n"
                                    "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(ds)\n")])
    out_path = tmp_path / "out.ipynb"
    code, _, err = run(["fix", str(path), "-o", str(out_path)], capsys)
    assert code == 0, err
    before, after = json.loads(path.read_text()), json.loads(out_path.read_text())
    assert after["cells"][0] == before["cells"][0] and "id" not in after["cells"][1]
    assert "shard_and_rebatch_dataset" in "".join(after["cells"][1]["source"])


def test_fix_field_reads_as_the_code_after_the_fix(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        "import tensorflow as tf\n"
        "est = tf.estimator.Estimator(model_fn=model_fn)\n"
        "est.train(input_fn=train_input_fn,\n"
        "          steps=100)  # train\n"
    )
    _, out, _ = run(["check", str(script), "--format", "json"], capsys)
    fixes = {f["code"]: f["fix"] for f in json.loads(out)["findings"]}
    assert fixes["missing-broadcast"] == (
        "est.train(input_fn=train_input_fn,\n"
        "          steps=100, hooks=npu_hooks_append())  # train"
    )


def test_rank_counts_below_one_are_usage_errors(capsys):
    import pytest

    for bad in ("0", "-2"):
        with pytest.raises(SystemExit) as exit_info:
            main(["check", str(EXAMPLES / "keras_single_card.ipynb"), "--ranks", bad])
        assert exit_info.value.code == 2
        assert "must be at least 1" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ language

HAN = re.compile(r"[\u4e00-\u9fff]")
EXAMPLE = str(EXAMPLES / "keras_single_card.ipynb")


def speaking_chinese(monkeypatch, lang="zh_CN.UTF-8"):
    """The environment of a Chinese desktop: LANG only (LANGUAGE, LC_ALL and LC_MESSAGES would win over it)."""
    for variable in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANG", lang)


def english_environment(monkeypatch):
    speaking_chinese(monkeypatch, "C.UTF-8")


def test_check_speaks_the_language_of_the_environment(monkeypatch, capsys):
    speaking_chinese(monkeypatch)
    code, out, _ = run(["check", EXAMPLE], capsys)
    assert code == 1
    summary = out.strip().splitlines()[-4:]
    assert summary[0].startswith(f"{EXAMPLE}: 框架 keras，适配器 npu_device，TensorFlow 2"), summary
    assert [" ".join(line.split()) for line in summary[1:]] == ["缺失 变量广播：缺失", "缺失 梯度聚合：缺失",
                                                                "缺失 数据集分片：缺失"]
    findings = [line for line in out.splitlines() if LINE.match(line)]
    assert len(findings) == 3 and all(HAN.search(line.split(": ", 2)[2]) for line in findings), findings


def test_lang_en_overrides_a_chinese_environment(monkeypatch, capsys):
    english_environment(monkeypatch)
    english = run(["check", EXAMPLE], capsys)
    speaking_chinese(monkeypatch)
    for argv in (["--lang", "en", "check", EXAMPLE], ["check", EXAMPLE, "--lang=en"]):
        assert run(argv, capsys) == english
    assert not HAN.search(english[1].replace("变量广播", "").replace("梯度聚合", "").replace("数据集分片", ""))
    # --lang wins over the environment for one call only: the next call follows the environment again.
    assert "缺失" in run(["check", EXAMPLE], capsys)[1]


def test_lang_zh_cn_is_accepted_before_and_after_the_command(monkeypatch, capsys):
    english_environment(monkeypatch)
    before = run(["--lang", "zh-CN", "check", EXAMPLE], capsys)
    after = run(["check", EXAMPLE, "--lang", "zh_CN"], capsys)
    assert before == after and "适配器 npu_device" in before[1]


def test_json_keeps_its_keys_and_codes_and_translates_its_messages(monkeypatch, capsys):
    english_environment(monkeypatch)
    path = str(EXAMPLES / "custom_loop_single_card.ipynb")
    english = json.loads(run(["check", path, "--format", "json"], capsys)[1])
    chinese = json.loads(run(["check", path, "--format", "json", "--lang", "zh_CN"], capsys)[1])

    def shape(report):
        return {key: value for key, value in report.items() if key not in ("findings", "mode_reason", "reasons")}

    assert shape(english) == shape(chinese) and set(english) == set(chinese)
    assert english["steps"] == chinese["steps"] and set(english["reasons"]) == set(chinese["reasons"])
    assert len(english["findings"]) == len(chinese["findings"])
    for en, zh in zip(english["findings"], chinese["findings"]):
        assert {k: v for k, v in en.items() if k != "message"} == {k: v for k, v in zh.items() if k != "message"}
        assert en["message"] != zh["message"] and HAN.search(zh["message"]), (en, zh)


def test_an_unknown_language_is_a_one_line_usage_error(monkeypatch, capsys):
    english_environment(monkeypatch)
    for argv in (["--lang", "fr", "check", EXAMPLE], ["check", EXAMPLE, "--lang=fr"]):
        code, out, err = run(argv, capsys)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "'fr'" in err and "en, zh_CN" in err, err


def test_the_help_is_in_the_chosen_language(monkeypatch, capsys):
    import pytest

    english_environment(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["--lang", "zh_CN", "check", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "显示本帮助信息并退出" in out and ".ipynb Notebook、.py 脚本或目录" in out and "--lang {en,zh_CN}" in out
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "show this help message and exit" in capsys.readouterr().out


def test_fix_reports_in_the_chosen_language(monkeypatch, tmp_path, capsys):
    english_environment(monkeypatch)
    code, _, err = run(["fix", EXAMPLE, "-o", str(tmp_path / "out.ipynb"), "--lang", "zh_CN"], capsys)
    assert code == 0, err
    assert "处修复，已写入" in err and "（修复后）: 框架 keras" in err, err


def test_export_writes_the_readme_in_the_chosen_language_and_the_script_in_english(monkeypatch, tmp_path, capsys):
    english_environment(monkeypatch)
    written = {}
    for language in ("en", "zh_CN"):
        folder = tmp_path / language
        code, _, err = run(["export", EXAMPLE, "-o", str(folder), "--force", "--lang", language], capsys)
        assert code == 0, err
        written[language] = {name: (folder / name).read_text(encoding="utf-8")
                             for name in ("train.py", "run_distributed.sh", "README.md")}
    assert written["en"]["train.py"] == written["zh_CN"]["train.py"]
    assert written["en"]["run_distributed.sh"] == written["zh_CN"]["run_distributed.sh"]
    assert written["en"]["README.md"].startswith("# Training job exported from keras_single_card.ipynb")
    assert written["zh_CN"]["README.md"].startswith("# 从 keras_single_card.ipynb 导出的训练作业")
    for placeholder in ("@NOTEBOOK@", "@SERVERS@", "@DEVICES_PER_SERVER@", "@RANK_SIZE@", "@LAST_SERVER@"):
        assert placeholder not in written["zh_CN"]["README.md"]
