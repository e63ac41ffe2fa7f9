"""The dry run of exactly what will be launched: each bundled example notebook, fixed, exported, and
run by its own launch script with --simulate on 2 ranks passes the three run-time checks."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate_nb.cli import main

pytestmark = pytest.mark.sim
EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


@pytest.mark.parametrize("name", ["keras_single_card", "custom_loop_single_card", "estimator_single_card"])
def test_a_fixed_and_exported_example_passes_the_three_checks_on_the_simulator(tmp_path, name):
    fixed, job = tmp_path / f"{name}.ipynb", tmp_path / "job"
    assert main(["fix", str(EXAMPLES / f"{name}.ipynb"), "-o", str(fixed)]) == 0
    assert main(["export", str(fixed), "-o", str(job)]) == 0
    env = dict(os.environ, PYTHON=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run(["bash", str(job / "run_distributed.sh"), "--simulate", "-n", "2"], env=env,
                          capture_output=True, text=True, timeout=900)
    checks = dict(re.findall(r"^  (broadcast|allreduce|shard) +(\S+)", done.stdout, re.MULTILINE))
    assert checks == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, (
        done.stdout[-3000:], done.stderr[-3000:])
    assert "cells (2 ranks" in done.stdout and done.returncode == 0
    # The runner names train.py's cells by their `# %% cell N` markers: the notebook's own indices.
    cells = [int(index) for index in re.findall(r"^  cell (\d+): ", done.stdout, re.MULTILINE)]
    assert cells == list(range(len(json.loads(fixed.read_text())["cells"])))
