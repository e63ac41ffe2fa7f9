"""tools/min_constraints.py: the constraints file of CI's minimum-versions step."""

import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import min_constraints  # noqa: E402

PROJECT = {
    "name": "npu-migrate-nb",
    "dependencies": ["libcst>=1.1", "ipython>=8.0"],
    "optional-dependencies": {
        "sim": ["tensorflow-cpu==2.15.*", "numpy<2", "mpich>=4.2.3", "IPython>=8.5,<10"],
        "test": ["pytest-jupyter[server]>=0.8", "ipykernel~=6.22"],
        "all": ["npu-migrate-nb[sim,test]"],
    },
}


def test_each_floor_is_pinned_and_a_requirement_without_one_is_left_to_pip():
    pinned = {name: str(version) for name, version in min_constraints.constraints(PROJECT, ["sim"]).items()}
    assert pinned == {"libcst": "1.1", "ipython": "8.5", "tensorflow-cpu": "2.15.0", "mpich": "4.2.3"}


def test_an_extra_that_names_the_project_brings_its_extras():
    pinned = min_constraints.constraints(PROJECT, ["all"])
    assert {"tensorflow-cpu", "mpich", "pytest-jupyter", "ipykernel"} <= set(pinned)
    assert str(pinned["ipykernel"]) == "6.22"


def test_the_real_pyproject_gives_a_pin_for_every_floor_it_declares():
    completed = subprocess.run([sys.executable, str(ROOT / "tools" / "min_constraints.py"), "sim", "lab", "test"],
                               capture_output=True, text=True, check=True)
    pins = dict(line.split("==") for line in completed.stdout.splitlines() if not line.startswith("#"))
    project = min_constraints.tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for requirement in min_constraints.requirements(project, ["sim", "lab", "test"]):
        floor = min_constraints.lowest_version(requirement)
        name = requirement.name.lower().replace("_", "-")
        assert (name in pins) == (floor is not None), requirement
    assert pins["tensorflow-cpu"] == "2.15.0" and "numpy" not in pins
    assert all(Requirement(f"{name}=={version}") for name, version in pins.items())
