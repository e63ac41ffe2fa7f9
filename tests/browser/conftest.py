"""A real ``jupyter lab`` on loopback and Debian's chromium driven by Playwright's Python API.

The browser is ``/usr/bin/chromium`` (``.ci/run`` installs Debian's package when absent); Playwright
never downloads one. Screenshots land in ``$NPU_ARTIFACTS`` (default ``tests/browser/artifacts``).
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]
ARTIFACTS = Path(os.environ.get("NPU_ARTIFACTS", Path(__file__).parent / "artifacts"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    def __init__(self, root: Path):
        self.root = root
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}", "--ServerApp.port_retries=0", "--allow-root",
             f"--ServerApp.root_dir={root}"],
            stdout=open(root / "lab.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1"),
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2)
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not start:\n" + (root / "lab.log").read_text()[-3000:])
                time.sleep(0.25)

    def stop(self) -> None:
        descendants = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(signal.SIGTERM)  # the server shuts its kernels and jobs down
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs(descendants, timeout=10)
        self.leftover = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for process in self.leftover:
            process.kill()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    server = Lab(root)
    yield server
    server.stop()
    assert not server.leftover, f"processes left behind: {server.leftover}"


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


def open_notebook(browser, lab: Lab, name: str, kernel: bool = True):
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
    news = page.locator(".jp-toast-button", has_text="No")
    if news.count():
        news.first.click()
    return page


def cell_texts(page):
    """The text of every cell's editor, as shown."""
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell .cm-content')).map(node => node.innerText)"
    )
