"""``export ENTRY -o JOB -- ARGS`` for a project's entry script (issue 36): the launcher runs the entry
in place, with its arguments and the project's root on PYTHONPATH, from a rank folder that links the
entry's folder; shellcheck-clean; and its dry run on the simulator passes the three checks."""

import shutil
import subprocess
from pathlib import Path

import pytest

from npu_migrate_nb.cli import main

PROJECTS = Path(__file__).resolve().parent.parent / "sim" / "data" / "projects"
ENTRY = "official/vision/image_classification/resnet/resnet_ctl_imagenet_main.py"
# Records what it was started with: its arguments, PYTHONPATH, its working directory and what it sees there.
STAND_IN_PYTHON = """#!/usr/bin/env bash
{
  printf 'arg=%s\\n' "$@"
  echo "pythonpath=$PYTHONPATH"
  echo "cwd=$PWD"
  echo "sees=$(ls | tr '\\n' ' ')"
} > seen.txt
"""


@pytest.fixture
def fixed_project(tmp_path):
    project = tmp_path / "tf2_guide"
    shutil.copytree(PROJECTS / "tf2_guide", project)
    fixed = tmp_path / "tf2_distributed"
    assert main(["fix", str(project), "-o", str(fixed)]) == 0
    return fixed


def export(fixed, job, *extra):
    return main(["export", str(fixed / ENTRY), "-o", str(job), "--devices-per-server", "2", *extra,
                 "--", "--train_steps", "8", "--note=two words"])


def test_the_launcher_runs_the_entry_in_place_with_its_arguments_and_root(fixed_project, tmp_path):
    job = tmp_path / "job"
    assert export(fixed_project, job) == 0
    assert sorted(p.name for p in job.iterdir()) == ["README.md", "run_distributed.sh"]  # no train.py: in place
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STAND_IN_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "hccn_tool").write_text('#!/usr/bin/env bash\necho "ipaddr:192.168.10.$(($2 + 100))"\n')
    (bin_dir / "hccn_tool").chmod(0o755)
    done = subprocess.run(["bash", str(job / "run_distributed.sh")], capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "GRACE_SECONDS": "5", "PYTHONPATH": "/elsewhere"})
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        seen = (job / f"rank_{rank}" / "seen.txt").read_text().splitlines()
        args = [line[len("arg="):] for line in seen if line.startswith("arg=")]
        assert Path(args[0]).resolve() == (fixed_project / ENTRY).resolve()
        assert args[1:] == ["--train_steps", "8", "--note=two words"]
        values = dict(line.split("=", 1) for line in seen if not line.startswith("arg="))
        root, rest = values["pythonpath"].split(":", 1)
        assert Path(root).resolve() == fixed_project.resolve() and rest == "/elsewhere"
        assert Path(values["cwd"]) == job / f"rank_{rank}"
        assert "resnet_runnable.py" in values["sees"].split()  # the entry's folder, linked
    assert "in place, in its project" in (job / "README.md").read_text()


def test_the_project_launcher_is_shellcheck_clean(fixed_project, tmp_path):
    job = tmp_path / "job"
    assert export(fixed_project, job) == 0
    done = subprocess.run(["shellcheck", str(job / "run_distributed.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.sim
def test_the_dry_run_of_a_project_job_passes_the_three_checks(fixed_project, tmp_path):
    job = tmp_path / "job"
    assert main(["export", str(fixed_project / ENTRY), "-o", str(job), "--devices-per-server", "2",
                 "--", "--train_steps", "8"]) == 0
    done = subprocess.run(["bash", str(job / "run_distributed.sh"), "--simulate", "-n", "2"], capture_output=True,
                          text=True, timeout=900, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for step in ("broadcast", "allreduce", "shard"):
        assert any(line.split()[:2] == [step, "pass"] for line in done.stdout.splitlines()), done.stdout[-3000:]
