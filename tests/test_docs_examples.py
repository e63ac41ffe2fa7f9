"""What the README and the site show ``check`` and ``fix`` printing is what they print today (they are
fast and never import TensorFlow; ``run``'s output carries timings and is left out)."""

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

COMMAND = re.compile(r"^\$ (npu-migrate-nb (?:check|fix) [^|]*)$")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def shown_commands():
    for page in PAGES:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            command, output = None, []
            for line in block.splitlines() + ["$ end"]:
                if line.startswith("$ "):
                    if command and output:
                        yield page.relative_to(ROOT).as_posix(), command, output
                    match = COMMAND.match(line)
                    command, output = (match.group(1) if match else None), []
                else:
                    output.append(line)


SHOWN = list(shown_commands())


def test_the_pages_show_commands_to_compare():
    assert {page for page, _command, _output in SHOWN} >= {"README.md", "docs/guide/check.md", "docs/guide/fix.md"}


@pytest.mark.parametrize("page,command,output", SHOWN, ids=[f"{p}: {c}" for p, c, _ in SHOWN])
def test_a_command_on_a_page_prints_what_the_page_shows(page, command, output, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for project in (ROOT / "tests" / "sim" / "data" / "projects").iterdir():  # the projects guide's
        shutil.copytree(project, tmp_path / project.name)
    result = subprocess.run(
        [sys.executable, "-m", "npu_migrate_nb", *shlex.split(command)[1:]], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT)),
    )
    assert result.stdout.rstrip("\n").splitlines() == output, f"{page} shows an output of `{command}` that is out of date"
