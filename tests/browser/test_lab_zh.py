"""The panel in the lab's language, in a real browser against a real ``jupyter lab``: with
Settings → Language set to 中文 (JupyterLab's zh-CN language pack installed), the panel's buttons,
checklist, findings and simulated checks are Chinese (our catalog reaches the lab through the
``jupyterlab.locale`` entry point; the server answers in the lab's language); switched back to
English, they are English again."""

import json
import re

import pytest

from .conftest import ARTIFACTS, open_notebook, write_notebook
from .test_lab import open_panel, wait_for_steps

pytestmark = pytest.mark.sim  # the simulate step starts ranks
LANGUAGE_SETTINGS = "/lab/api/settings/@jupyterlab/translation-extension:plugin"
CJK = re.compile(r"[\u4e00-\u9fff]")


def set_lab_language(lab, locale: str) -> None:
    """What Settings → Language does: the translation extension's ``locale`` setting (the page reloads after)."""
    status, _, body = lab.request("PUT", LANGUAGE_SETTINGS, json.dumps({"raw": json.dumps({"locale": locale})}).encode())
    assert status == 204, body


def test_the_panel_speaks_the_lab_s_language_and_switches_back(lab, browser):
    name = write_notebook(lab.root, "keras_zh.ipynb", None, from_example="keras_single_card.ipynb")
    set_lab_language(lab, "zh_CN")
    try:
        page = open_notebook(browser, lab, name, kernel=False)
        page.locator(".lm-MenuBar-itemLabel", has_text="文件").first.wait_for(timeout=30_000)  # the lab itself
        panel = open_panel(page)
        assert panel.locator("button.npu-analyze").inner_text() == "分析 Notebook"
        assert panel.locator("button.npu-simulate").inner_text() == "在 2 个 rank 上模拟"  # a plural, as the lab says them
        panel.locator("button.npu-analyze").click()
        wait_for_steps(page, panel, {"broadcast": "缺失", "allreduce": "缺失", "shard": "缺失"})
        assert panel.locator(".npu-steps tr[data-step='broadcast'] td").first.inner_text() == "变量广播"
        findings = panel.locator(".npu-finding").all()
        assert len(findings) >= 3
        for finding in findings:
            text = finding.inner_text()
            assert CJK.search(text) and re.search(r"\[[a-z0-9-]+\]", text), text  # Chinese, with its English code
        marked = page.locator(".jp-Notebook .npu-mark-error").first.get_attribute("title")
        assert CJK.search(marked) and "[missing-" in marked

        panel.locator("button.npu-apply-all").click()
        wait_for_steps(page, panel, {"broadcast": "已有", "allreduce": "已有", "shard": "已有"})
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("Control+s")  # the English page below opens the adapted notebook
        page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=20_000)
        panel.locator("button.npu-simulate").click()
        page.wait_for_selector("#npu-migrate-nb-panel .npu-job-state[data-state='done']", timeout=240_000)
        assert panel.locator(".npu-job-state").inner_text() == "完成：5/5 个单元格，2 个 rank"
        checks = {row.get_attribute("data-check"): row.locator(".npu-check").inner_text()
                  for row in panel.locator(".npu-checks tr").all()}
        assert checks == {"broadcast": "通过", "allreduce": "通过", "shard": "通过"}, panel.inner_text()
        for row in panel.locator(".npu-checks tr").all():
            assert CJK.search(row.locator("td").nth(2).inner_text()), row.inner_text()  # the evidence too
        assert "检查得出结论后即停止" in panel.locator(".npu-proof").inner_text()  # what proof mode shortened
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "panel-zh.png"))
        page.close()
    finally:
        set_lab_language(lab, "en")

    page = open_notebook(browser, lab, name, kernel=False)
    page.locator(".lm-MenuBar-itemLabel", has_text="File").first.wait_for(timeout=30_000)
    panel = open_panel(page)
    assert panel.locator("button.npu-analyze").inner_text() == "Analyze notebook"
    panel.locator("button.npu-analyze").click()
    wait_for_steps(page, panel, {"broadcast": "present", "allreduce": "present", "shard": "present"})
    assert panel.locator(".npu-steps tr[data-step='broadcast'] td").first.inner_text() == "variable broadcast (变量广播)"
    assert not CJK.search(panel.locator(".npu-status-line").inner_text())
    page.close()
