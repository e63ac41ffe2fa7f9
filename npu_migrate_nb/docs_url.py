"""Where the documentation lives, and the page of each finding code: ``<DOCS_URL>codes/<code>/``.

The site's address comes from, first found wins:
  1. the environment variable ``NPU_MIGRATE_NB_DOCS_URL`` (a team that hosts the site elsewhere, or
     ``file:///.../site/`` for a local build), read at each call so a process can change it;
  2. the ``Documentation`` entry of the package's ``[project.urls]`` (its installed metadata);
  3. ``DEFAULT_DOCS_URL``, the same address, when the metadata has no such entry (an older install).
It always ends in ``/``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Optional

ENVIRONMENT_VARIABLE = "NPU_MIGRATE_NB_DOCS_URL"
DEFAULT_DOCS_URL = "https://npu-migrate-nb.readthedocs.io/en/latest/"
DISTRIBUTION = "npu-migrate-nb"


@lru_cache(maxsize=None)
def _metadata_url() -> Optional[str]:
    """The ``Documentation`` project URL of the installed package, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        entries = metadata(DISTRIBUTION).get_all("Project-URL") or []
    except (ImportError, PackageNotFoundError):  # not installed: run from a checkout
        return None
    for entry in entries:
        label, _comma, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip()
    return None


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def package_docs_url() -> str:
    """The package's own documentation address (its ``Documentation`` URL), ending in ``/``."""
    return _with_slash(_metadata_url() or DEFAULT_DOCS_URL)


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


# The address when the package was imported (``docs_url()`` follows later changes of the environment).
DOCS_URL = docs_url()
