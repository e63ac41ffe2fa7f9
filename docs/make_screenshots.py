"""Make the README's screenshots in a real JupyterLab with Debian's chromium (Playwright's Python API).

    python docs/make_screenshots.py     # writes docs/panel.png, docs/panel-zh.png, docs/magic-report.png and docs/magic-run.png

Needs the ``lab`` extra, ``pip install playwright`` (the Python package only: the browser is
``/usr/bin/chromium``, never downloaded) and Debian's ``chromium``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from tests.browser.conftest import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from tests.jupyter_app import JupyterApp  # noqa: E402

SETUP = "%load_ext npu_migrate_nb\n%npu_sim on"
IMPORTS = "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()"
DATA = ("GLOBAL_BATCH = 64\nrng = np.random.RandomState(0)\nx = rng.rand(1024, 8).astype('float32')\n"
        "y = (x @ rng.rand(8, 1)).astype('float32')")
TRAIN = ("%%npu_distribute\n"
         "train_ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=1).batch(GLOBAL_BATCH, drop_remainder=True)\n"
         "model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation='relu', input_shape=(8,)), tf.keras.layers.Dense(1)])\n"
         "model.compile(optimizer='sgd', loss='mse')\n"
         "history = model.fit(train_ds, epochs=2, verbose=0)")
RUN_DATA = "%%npu_distribute --run -n 2\n" + IMPORTS + "\n" + DATA.replace("1024", "4096")
RUN_TRAIN = ("%%npu_distribute --run\n"
             "train_ds = tf.data.Dataset.from_tensor_slices((x, y))\n"
             "train_ds, rank_batch = npu.distribute.shard_and_rebatch_dataset(train_ds, GLOBAL_BATCH)\n"
             "train_ds = train_ds.shuffle(1024, seed=1).batch(rank_batch, drop_remainder=True)\n"
             "model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation='relu', input_shape=(8,)), tf.keras.layers.Dense(1)])\n"
             "npu.distribute.broadcast(model.trainable_variables)\n"
             "model.compile(optimizer=npu.distribute.npu_distributed_keras_optimizer_wrapper(tf.keras.optimizers.SGD()), loss='mse')\n"
             "history = model.fit(train_ds, epochs=3, verbose=2)")


def notebook(cells):
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
                  for source in cells],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def run_all_and_shoot(page, base, token, name, wait_text, out, cell_index, timeout_ms=60_000):
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    try:  # JupyterLab asks which kernel a new notebook gets
        page.locator(".jp-Dialog button.jp-mod-accept").wait_for(timeout=15_000)
        page.locator(".jp-Dialog button.jp-mod-accept").click()
    except Exception:
        pass
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
    news = page.locator(".jp-toast-button", has_text=re.compile(r"^(No|否)$"))
    if news.count():
        news.first.click()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    try:
        page.get_by_text(wait_text).first.wait_for(timeout=timeout_ms)
    except Exception:
        page.screenshot(path=out.replace(".png", "-failed.png"), full_page=True)
        raise
    page.wait_for_timeout(1500)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(cell_index)
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=out)


def set_lab_language(lab, locale: str) -> None:
    """What Settings → Language does (the lab reads it when a page loads)."""
    body = json.dumps({"raw": json.dumps({"locale": locale})}).encode()
    status, _, answer = lab.request("PUT", "/lab/api/settings/@jupyterlab/translation-extension:plugin", body)
    assert status == 204, answer


def shoot_panel(page, base, token, name, out):
    """The NPU Distribute panel on a single-card notebook: the checklist, the findings, the marked lines."""
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    try:
        page.locator(".jp-Dialog button.jp-mod-accept").wait_for(timeout=10_000)
        page.locator(".jp-Dialog button.jp-mod-accept").click()
    except Exception:
        pass
    news = page.locator(".jp-toast-button", has_text=re.compile(r"^(No|否)$"))
    if news.count():
        news.first.click()
    page.locator('li.lm-TabBar-tab[data-id="npu-migrate-nb-panel"]').click()
    page.locator("#npu-migrate-nb-panel button.npu-analyze").click()
    page.wait_for_function("document.querySelectorAll('#npu-migrate-nb-panel .npu-step-missing').length === 3")
    right = page.locator("#jp-right-stack").bounding_box()
    handles = [h for h in page.locator(".lm-SplitPanel-handle").all() if h.is_visible()]
    handle = min(handles, key=lambda h: abs(h.bounding_box()["x"] - right["x"]))
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(box["x"] - 260, box["y"] + 200, steps=10)
    page.mouse.up()
    page.locator(".jp-Notebook .npu-mark-error").first.hover()
    page.wait_for_timeout(800)
    page.screenshot(path=out)


def main() -> None:
    from playwright.sync_api import sync_playwright

    work = tempfile.mkdtemp(prefix="npu-shots-")
    try:
        with open(os.path.join(work, "report.ipynb"), "w") as stream:
            json.dump(notebook([SETUP, IMPORTS, DATA, TRAIN]), stream)
        shutil.copy(os.path.join(HERE, os.pardir, "examples", "keras_single_card.ipynb"), work)
        with open(os.path.join(work, "run.ipynb"), "w") as stream:
            json.dump(notebook(["%load_ext npu_migrate_nb", RUN_DATA, RUN_TRAIN]), stream)
        lab = JupyterApp(Path(work), "lab")
        base, token = lab.url, lab.token
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                shoot_panel(page, base, token, "keras_single_card.ipynb", os.path.join(HERE, "panel.png"))
                set_lab_language(lab, "zh_CN")  # Settings → Language → 中文: the panel as a Chinese reader sees it
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                shoot_panel(page, base, token, "keras_single_card.ipynb", os.path.join(HERE, "panel-zh.png"))
                set_lab_language(lab, "en")
                page = browser.new_page(viewport={"width": 1280, "height": 1400})
                run_all_and_shoot(page, base, token, "report.ipynb", "the notebook so far",
                                  os.path.join(HERE, "magic-report.png"), 3)
                page = browser.new_page(viewport={"width": 1280, "height": 1100})
                run_all_and_shoot(page, base, token, "run.ipynb", "each of the 2 ranks read a different first batch",
                                  os.path.join(HERE, "magic-run.png"), 2)
                browser.close()
        finally:
            lab.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
