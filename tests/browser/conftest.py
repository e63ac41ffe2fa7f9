"""A real ``jupyter lab`` on loopback and Debian's chromium driven by Playwright's Python API.

The browser is ``/usr/bin/chromium`` (``.ci/run`` installs Debian's package when absent); Playwright
never downloads one. Screenshots land in ``$NPU_ARTIFACTS`` (default ``tests/browser/artifacts``).
"""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from ..jupyter_app import JupyterApp

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]
ARTIFACTS = Path(os.environ.get("NPU_ARTIFACTS", Path(__file__).parent / "artifacts"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = JupyterApp(tmp_path_factory.mktemp("lab"), "lab")
    yield server
    leftover = server.stop()
    assert not leftover, f"processes left behind: {leftover}"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "Debian's chromium is needed: apt-get install -y chromium (.ci/run does it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def write_notebook(root: Path, name: str, cells, from_example: str = None) -> str:
    if from_example:
        shutil.copy(Path(__file__).parents[2] / "examples" / from_example, root / name)
        return name
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source,
                   "id": f"cell{index}"} for index, source in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    (root / name).write_text(json.dumps(document))
    return name


def open_notebook(browser, lab: JupyterApp, name: str, kernel: bool = True):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    accept = page.locator(".jp-Dialog button.jp-mod-accept")
    try:  # JupyterLab asks which kernel a notebook without one gets
        accept.wait_for(timeout=5_000)
        accept.click()
    except Exception:
        pass
    if kernel:
        page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
    news = page.locator(".jp-toast-button", has_text=re.compile(r"^(No|否)$"))
    if news.count():
        news.first.click()
    return page


def cell_texts(page):
    """The text of every cell's editor, as shown."""
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell .cm-content')).map(node => node.innerText)"
    )
