"""End to end in a real browser against a real ``jupyter lab``: the NPU Distribute panel analyzes,
applies (undoably), and simulates; a ``%%npu_distribute`` widget's Apply changes its cell through the
comm route."""

import re

import pytest

from .conftest import ARTIFACTS, cell_texts, open_notebook, write_notebook

pytestmark = pytest.mark.sim  # the simulate step starts ranks
PANEL_TAB = 'li.lm-TabBar-tab[data-id="npu-migrate-nb-panel"]'


def open_panel(page):
    page.locator(PANEL_TAB).click()
    panel = page.locator("#npu-migrate-nb-panel")
    panel.wait_for(state="visible")
    return panel


def step_statuses(panel):
    return {row.get_attribute("data-step"): row.locator(".npu-step").inner_text()
            for row in panel.locator(".npu-steps tr").all()}


def wait_for_steps(page, panel, expected, timeout=30_000):
    page.wait_for_function(
        """([expected]) => {
            const rows = document.querySelectorAll('#npu-migrate-nb-panel .npu-steps tr');
            const seen = {};
            rows.forEach(row => { seen[row.dataset.step] = row.querySelector('.npu-step').textContent; });
            return Object.entries(expected).every(([step, status]) => seen[step] === status);
        }""",
        arg=[expected], timeout=timeout,
    )


def test_analyze_apply_undo_and_simulate_from_the_panel(lab, browser):
    name = write_notebook(lab.root, "keras_single_card.ipynb", None, from_example="keras_single_card.ipynb")
    page = open_notebook(browser, lab, name, kernel=False)
    before = cell_texts(page)
    panel = open_panel(page)
    panel.locator("button.npu-analyze").click()
    missing = {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
    wait_for_steps(page, panel, missing)
    assert panel.locator(".npu-finding").count() >= 3
    # Each finding's code links to its page on the documentation site.
    link = panel.locator(".npu-finding[data-code='missing-shard'] a").first
    assert link.get_attribute("href").endswith("/codes/missing-shard/") and link.inner_text() == "[missing-shard]"
    assert page.locator(".jp-Notebook .npu-mark-error").count() >= 3  # the lines marked in the editors
    marked = page.locator(".jp-Notebook .npu-mark-error").first.get_attribute("title")
    assert "[missing-" in marked

    panel.locator("button.npu-apply-all").click()
    present = {"broadcast": "present", "allreduce": "present", "shard": "present"}
    wait_for_steps(page, panel, present)
    after = cell_texts(page)
    assert after != before
    assert any("shard_and_rebatch_dataset" in text for text in after)
    assert any("npu_distributed_keras_optimizer_wrapper" in text for text in after)
    assert page.locator(".jp-Notebook .npu-mark-error").count() == 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel.png"))

    # Undo in the cell the broadcast went into: that step is missing again (the panel re-analyzes by itself).
    changed = next(i for i, (old, new) in enumerate(zip(before, after)) if old != new and "broadcast" in new)
    editor = page.locator(".jp-Notebook .jp-Cell").nth(changed).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+z")
    wait_for_steps(page, panel, {"broadcast": "missing"})
    assert cell_texts(page)[changed] == before[changed]
    page.keyboard.press("Control+Shift+z")  # redo
    wait_for_steps(page, panel, present)

    panel.locator("button.npu-simulate").click()
    page.wait_for_selector("#npu-migrate-nb-panel .npu-job-state[data-state='done']", timeout=240_000)
    checks = {row.get_attribute("data-check"): row.locator(".npu-check").inner_text()
              for row in panel.locator(".npu-checks tr").all()}
    assert checks == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, panel.inner_text()
    assert "Epoch" in panel.locator(".npu-rank pre").first.inner_text()  # rank 0 is open
    proof = panel.locator(".npu-proof-call")  # proof mode, Simulate's default: the fit was shortened
    assert proof.count() == 1 and re.search(r"keras fit: 3 of \d+ steps", proof.inner_text()), panel.inner_text()
    # Every verdict inside the panel, not pushed past its edge by the evidence.
    right = panel.bounding_box()["x"] + panel.bounding_box()["width"]
    assert all(b["x"] + b["width"] <= right + 1 for b in (badge.bounding_box() for badge in panel.locator(".npu-checks .npu-check").all()))
    # Above the checks it qualifies, not under their evidence.
    assert panel.evaluate("p => !!(p.querySelector('.npu-proof').compareDocumentPosition("
                          "p.querySelector('.npu-checks')) & Node.DOCUMENT_POSITION_FOLLOWING)")
    page.screenshot(path=str(ARTIFACTS / "panel-simulated.png"))
    page.close()


def test_apply_in_the_magic_widget_changes_its_cell_through_the_comm(lab, browser):
    cells = [
        "%load_ext npu_migrate_nb",
        "import tensorflow as tf\noptimizer = tf.keras.optimizers.SGD(0.1)",
        "%%npu_distribute --check\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
        "model.compile(optimizer=optimizer, loss='mse')\nmodel.fit(x, y, batch_size=32)",
    ]
    name = write_notebook(lab.root, "magic.ipynb", cells)
    page = open_notebook(browser, lab, name)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    report = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-OutputArea")
    apply_button = report.locator("button", has_text="Apply").first
    apply_button.wait_for(timeout=120_000)
    apply_button.click()
    report.get_by_text("applied").first.wait_for(timeout=20_000)
    text = cell_texts(page)[2]
    assert text.startswith("%%npu_distribute --check")
    assert "npu_distributed_keras_optimizer_wrapper(optimizer)" in text, text
    page.screenshot(path=str(ARTIFACTS / "magic-apply.png"))
    page.close()


def test_the_panel_names_a_finding_in_the_notebooks_own_module_and_says_why_a_step_is_unknown(lab, browser):
    (lab.root / "model.py").write_text(
        "import tensorflow.compat.v1 as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.AdamOptimizer(1e-3)\n"
        "    train_op = optimizer.minimize(tf.reduce_mean(features))\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=tf.reduce_mean(features), train_op=train_op)\n"
    )
    cells = ["import tensorflow.compat.v1 as tf\nfrom model import model_fn\nfrom data_lib import input_fn",
             "est = tf.estimator.Estimator(model_fn=model_fn)\nest.train(input_fn, max_steps=10)"]
    name = write_notebook(lab.root, "project.ipynb", cells)
    page = open_notebook(browser, lab, name, kernel=False)
    panel = open_panel(page)
    panel.locator("button.npu-analyze").click()
    wait_for_steps(page, panel, {"broadcast": "missing", "allreduce": "missing", "shard": "unknown"})
    reason = panel.locator(".npu-steps tr[data-step='shard'] .npu-step-reason").inner_text()
    assert reason.startswith("input_fn comes from data_lib: there is no data_lib.py next to the notebook"), reason
    in_module = panel.locator(".npu-finding[data-code='missing-allreduce']")
    assert "model.py line 3:" in in_module.inner_text()
    assert in_module.locator("button.npu-apply").count() == 0  # the notebook's model cannot write model.py
    assert "npu-migrate-nb fix NOTEBOOK --in-place" in in_module.locator(".npu-module-note").inner_text()
    # Only the notebook's own cells are marked: the broadcast line, not line 3 of some cell for model.py.
    assert page.locator(".jp-Notebook .npu-mark-error").count() == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel-module.png"))
    page.close()


def test_the_panel_says_whether_a_cell_that_failed_on_the_ranks_fails_on_one_card_too(lab, browser):
    cells = ["import os", "if os.environ['RANK_ID'] == '1':\n    raise ValueError('only rank 1 fails')"]
    name = write_notebook(lab.root, "rank_one_fails.ipynb", cells)
    page = open_notebook(browser, lab, name, kernel=False)
    panel = open_panel(page)
    panel.locator("button.npu-simulate").click()
    verdict = panel.locator(".npu-one-card[data-status='runs']")
    verdict.wait_for(timeout=240_000)  # after the ranks' run, the cells up to the failed one on one card
    assert "runs on one card: the distributed run breaks it" in verdict.inner_text(), panel.inner_text()
    assert "cells up to 1 ran at rank size 1" in verdict.locator(".npu-one-card-more").inner_text()
    failed = panel.locator(".npu-failed-cell[data-cell='1']")
    assert failed.inner_text() == "cell 1 failed on rank 1: ValueError: only rank 1 fails", panel.inner_text()
    page.wait_for_selector("#npu-migrate-nb-panel .npu-job-state[data-state='done']", timeout=60_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel-one-card.png"))
    page.close()
