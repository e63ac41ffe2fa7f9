import json
import os
from pathlib import Path

import pytest

from npu_migrate_nb.notebook import Cell, Notebook
from npu_migrate_nb.rules.base import CELL_SEPARATOR

# The tests read our English (the source text) whatever the machine's locale; the tests of Chinese
# choose it themselves (an environment of their own, --lang, %npu_lang, i18n.language).
for _variable in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
    os.environ.pop(_variable, None)
os.environ["LANG"] = "C.UTF-8"

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def notebook_from(text: str, path: str = "<example>") -> Notebook:
    """Cells separated by ``# %%`` lines, as in the rules' examples."""
    return Notebook(path, [Cell(i, "code", part) for i, part in enumerate(text.split(CELL_SEPARATOR))])


def joined(notebook: Notebook, sources) -> str:
    return CELL_SEPARATOR.join(sources.get(cell.index, cell.source) for cell in notebook.cells)


def notebook_json(cells, language="python", nbformat_minor=5):
    """A notebook document; ``cells`` are (cell_type, source) pairs."""
    def cell(kind, source):
        data = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            data.update(execution_count=None, outputs=[])
        return data

    return {
        "cells": [cell(kind, source) for kind, source in cells],
        "metadata": {
            "kernelspec": {"display_name": language, "language": language, "name": language},
            "language_info": {"name": language},
        },
        "nbformat": 4,
        "nbformat_minor": nbformat_minor,
    }


@pytest.fixture
def write_notebook(tmp_path):
    def write(cells, name="nb.ipynb", **kwargs):
        path = tmp_path / name
        path.write_text(json.dumps(notebook_json(cells, **kwargs), indent=1, ensure_ascii=False) + "\n")
        return path

    return write


def interruptible():
    """A child's SIGINT back to its default: a shell's background job (``pytest ... &``) starts with it
    ignored, its children inherit that, and a shell cannot trap a signal ignored at its start. The
    interrupt tests then would test the shell that ran them."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
