"""What the simulator's end-to-end tests share: a notebook written from cell sources, and the CLI run
as a user runs it."""

import json
import subprocess
import sys


def write_notebook(path, cells):
    """A Python notebook at ``path`` whose code cells are ``cells``."""
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
                  for c in cells],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 4,
    }
    path.write_text(json.dumps(document))
    return path


def cli(*args, cwd=None, env=None, timeout=900):
    """``npu-migrate-nb ARGS`` in a process of its own: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "npu_migrate_nb", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)
    return done.returncode, done.stdout, done.stderr
