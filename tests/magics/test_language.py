"""The magics and widgets speak the kernel's language: its environment (``LANG=zh_CN.UTF-8``), or
``%npu_lang`` for the session; finding codes, step keys and the code of fixes stay English.

The Chinese assertions need the compiled zh_CN catalog (``tools/catalog.py compile``)."""

import re

import pytest

from .kernel import Kernel, new_cell_id, ok, widget_states

LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
CJK = re.compile(r"[\u4e00-\u9fff]")
# Needs no cell run before it (TensorFlow is imported by the cell, which --check does not run).
CHECK = (
    "%%npu_distribute --check\nimport numpy as np\nimport tensorflow as tf\nx = y = np.zeros((4, 8))\n"
    "optimizer = tf.keras.optimizers.SGD(0.1)\n"
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(8,))])\n"
    "model.compile(optimizer=optimizer, loss='mse')\n"
    "history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)\n"
)
CODES = ("missing-allreduce", "missing-broadcast", "missing-shard")


def _kernel(language=None, widgets=False):
    env = {} if widgets else {"NPU_MIGRATE_NB_WIDGETS": "0"}
    if language is not None:
        env["LANG"] = language
    # Only LANG says the language (LANGUAGE and LC_ALL would win over it).
    return Kernel(extra_env=env, unset=LOCALE_VARIABLES[:3] + (() if language else ("LANG",)))


@pytest.fixture
def zh_kernel():
    kernel = _kernel("zh_CN.UTF-8")
    yield kernel
    kernel.shutdown()


@pytest.fixture
def en_kernel():
    kernel = _kernel("en_US.UTF-8")
    yield kernel
    kernel.shutdown()


def report_of(execution) -> str:
    # "npu_distribute" begins the report's first line in every language (its punctuation may differ).
    reports = [d["text/plain"] for d in execution.displays if "npu_distribute" in d.get("text/plain", "")]
    assert len(reports) == 1, execution.text()
    return reports[0]


def assert_chinese(report: str) -> None:
    assert "缺失" in report, report  # the status of the missing steps
    assert len(CJK.findall(report)) > 40, report  # sentences, not only the glossary's names of the steps
    assert "gradients are not aggregated" not in report and "missing  variable broadcast" not in report, report
    for code in CODES:  # finding codes are data: English in every language
        assert f"[{code}]" in report, report
    assert "npu_distributed_keras_optimizer_wrapper(optimizer)" in report  # the fix's code too


def assert_english(report: str) -> None:
    assert "npu_distribute: cell [" in report and "3 findings" in report, report
    assert "gradients are not aggregated" in report and "missing  variable broadcast (变量广播)" in report, report
    assert "缺失" not in report, report
    for code in CODES:
        assert f"[{code}]" in report, report


def test_a_kernel_started_in_a_chinese_locale_reports_in_chinese(zh_kernel):
    ok(zh_kernel, "%load_ext npu_migrate_nb")
    assert "zh_CN" in ok(zh_kernel, "from npu_migrate_nb import i18n\nprint(i18n.current())").stream()
    checked = ok(zh_kernel, CHECK)
    assert_chinese(report_of(checked))
    html = [d["text/html"] for d in checked.displays if "text/html" in d][0]
    assert "缺失" in html and "[missing-allreduce]" in html
    said = ok(zh_kernel, "%npu_lang").stream()
    assert "zh_CN" in said and "简体中文" in said and "环境" in said, said  # from the kernel's environment
    usage = ok(zh_kernel, "%%npu_distribute --help\npass").text()
    assert "--apply" in usage and "只显示报告" in usage and "report only" not in usage, usage


def test_npu_lang_switches_an_english_kernel_to_chinese_and_back(en_kernel):
    ok(en_kernel, "%load_ext npu_migrate_nb")
    assert_english(report_of(ok(en_kernel, CHECK)))
    said = ok(en_kernel, "%npu_lang").stream()
    assert said == ("language: en (English), from the kernel's environment\n"
                    "choices: en, zh_CN, or auto to follow the kernel's environment\n"), said
    switched = ok(en_kernel, "%npu_lang zh_CN").stream()
    assert "zh_CN" in switched and CJK.search(switched), switched  # said in the language just chosen
    assert_chinese(report_of(ok(en_kernel, CHECK)))
    ok(en_kernel, "%npu_lang zh-CN")  # the spelling of a browser's language works too
    assert_chinese(report_of(ok(en_kernel, CHECK)))
    back = ok(en_kernel, "%npu_lang en").stream()
    assert back == "language: en (English), chosen with %npu_lang\n", back
    assert_english(report_of(ok(en_kernel, CHECK)))
    ok(en_kernel, "%npu_lang zh_CN")
    auto = ok(en_kernel, "%npu_lang auto").stream()
    assert auto == "language: en (English), from the kernel's environment\n", auto
    assert_english(report_of(ok(en_kernel, CHECK)))


def test_an_unknown_language_is_one_line_of_error_and_changes_nothing(en_kernel):
    ok(en_kernel, "%load_ext npu_migrate_nb")
    ok(en_kernel, "%npu_lang en")
    bad = en_kernel.execute("%npu_lang xx", cell_id=new_cell_id())
    assert bad.status == "error"  # Run All stops here
    said = [line for line in bad.text().splitlines() if line.strip()]
    assert len(said) == 1 and "unknown language 'xx': choose one of en, zh_CN, auto" in said[0], said
    assert "Traceback" not in bad.text()
    still = ok(en_kernel, "%npu_lang").stream()
    assert still.startswith("language: en (English), chosen with %npu_lang\n"), still
    assert_english(report_of(ok(en_kernel, CHECK)))
    usage = ok(en_kernel, "%npu_lang --help").stream()
    assert "%npu_lang [LANGUAGE]" in usage and "zh_CN, zh-CN, en or auto" in usage, usage


def test_the_widgets_speak_the_kernels_language():
    kernel = _kernel("zh_CN.UTF-8", widgets=True)
    try:
        ok(kernel, "%load_ext npu_migrate_nb")
        shown = ok(kernel, CHECK)
        [bundle] = shown.displays
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert_chinese(bundle["text/plain"])  # the fallback for frontends without widgets
        states = list(widget_states(kernel).values())
        buttons = [s for s in states if s.get("_model_name") == "ButtonModel"]
        assert [b["description"] for b in buttons] == ["应用"] * 4, buttons
        assert all(CJK.search(b["tooltip"]) for b in buttons)
        titles = [t for s in states if s.get("_model_name") == "AccordionModel" for t in s.get("titles") or ()]
        assert "差异" in titles, titles
    finally:
        kernel.shutdown()
