"""Fixtures for the server extension's tests: pytest-jupyter's in-process Jupyter server.

pytest-jupyter's fixtures come in by import rather than ``pytest_plugins = [...]``: pytest accepts
``pytest_plugins`` only in the top-level conftest, and refuses to collect this directory with it
when the whole suite runs (``pytest`` from the root, as CI does). Imported here, the fixtures and
hooks (async tests run on the server's loop) apply to this directory only.
Needs ``pip install "pytest-jupyter[server]>=0.7"``.
"""

import json
import os
from pathlib import Path

import psutil
import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F401,F403 (fixtures and hooks of the plugin)

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_NAMES = ("custom_loop_single_card.ipynb", "estimator_single_card.ipynb", "keras_single_card.ipynb")


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"npu_migrate_nb": True}}}


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text(encoding="utf-8"))


@pytest.fixture
def post(jp_fetch):
    """POST a JSON body (or raw bytes) to ``npu-migrate/<endpoint>``; the response, whatever its code."""

    async def send(endpoint: str, body, **kwargs):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return await jp_fetch("npu-migrate", endpoint, method="POST", body=data, raise_error=False, **kwargs)

    return send


@pytest.fixture
def job_request(jp_fetch):
    """GET or DELETE ``npu-migrate/simulate/<id>``: (code, JSON body)."""

    async def send(job_id: str, method: str = "GET"):
        response = await jp_fetch("npu-migrate", "simulate", job_id, method=method, raise_error=False,
                                  request_timeout=60)
        return response.code, json.loads(response.body)

    return send


def reply(response) -> dict:
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    return json.loads(response.body)


def descendants() -> set:
    """The processes under this test process, as psutil.Process objects (compared by pid and start time)."""
    return set(psutil.Process(os.getpid()).children(recursive=True))


def still_running(processes) -> list:
    """Those of ``processes`` still there after up to 10 s (zombies of orphans are reaped by init)."""
    _, alive = psutil.wait_procs(list(processes), timeout=10)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
