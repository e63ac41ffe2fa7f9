"""Where the documentation lives, and the page of each finding code: ``<DOCS_URL>codes/<code>/``.

The site's address comes from, first found wins:
  1. the environment variable ``NPU_MIGRATE_NB_DOCS_URL`` (a team that hosts the site elsewhere, or
     ``file:///.../site/`` for a local build), read at each call so a process can change it;
  2. the ``Documentation`` entry of pyproject's ``[project.urls]``, which the build writes into
     ``_build_info.py`` (reading the installed metadata instead would cost every ``check`` the
     import of ``importlib.metadata``);
  3. ``DEFAULT_DOCS_URL``, the same address, in a checkout that was never built.
It always ends in ``/``.
"""

from __future__ import annotations

import os

ENVIRONMENT_VARIABLE = "NPU_MIGRATE_NB_DOCS_URL"
DEFAULT_DOCS_URL = "https://npu-migrate-nb.readthedocs.io/en/latest/"


def _built_url() -> str:
    """pyproject's Documentation URL as the build wrote it, or the default."""
    try:
        from ._build_info import DOCUMENTATION_URL
    except ImportError:  # a checkout that was never built (pip install -e writes it)
        return DEFAULT_DOCS_URL
    return DOCUMENTATION_URL or DEFAULT_DOCS_URL


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def package_docs_url() -> str:
    """The package's own documentation address (its ``Documentation`` URL), ending in ``/``."""
    return _with_slash(_built_url())


def docs_url() -> str:
    """The documentation site's address now (the environment variable, else the package's), ending in ``/``."""
    chosen = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    return _with_slash(chosen) if chosen else package_docs_url()


def code_url(code: str) -> str:
    """The page that explains finding code ``code``: ``<DOCS_URL>codes/<code>/``."""
    return f"{docs_url()}codes/{code}/"


def codes_url() -> str:
    """The page that lists every finding code."""
    return f"{docs_url()}codes/"
