"""The lab extension and the server extension as installed by the README's set-up command, the wheel
that carries them, and the front end's own jest suite."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LABEXTENSION = ROOT / "labextension"


def run(*command, cwd=ROOT, timeout=600):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, NO_COLOR="1", FORCE_COLOR="0"))
    return done.returncode, done.stdout + done.stderr


def test_jupyter_lists_both_extensions_enabled_and_ok():
    code, text = run(sys.executable, "-m", "jupyter", "labextension", "list")
    assert code == 0, text
    line = next(line for line in text.splitlines() if "npu-migrate-nb" in line)
    assert "enabled" in line and "OK" in line, text
    code, text = run(sys.executable, "-m", "jupyter", "server", "extension", "list")
    assert code == 0, text
    lines = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()  # jupyter_server colours "enabled" and "OK"
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("npu_migrate_nb") and "enabled" in line)
    # Its validation follows within a few lines ("npu_migrate_nb 0.1.0 OK"; jupyter_server 2.4 says first how
    # long the import took).
    assert any(re.search(r"npu_migrate_nb\b.*\bOK\b", line) or "is OK" in line for line in lines[at + 1:at + 5]), text


def test_the_panel_logic_passes_its_jest_suite():
    jlpm = shutil.which("jlpm")
    assert jlpm, "jlpm comes with jupyterlab (the lab extra)"
    if not (LABEXTENSION / "node_modules").is_dir():
        code, text = run(jlpm, "install", "--immutable", cwd=LABEXTENSION)
        assert code == 0, text
    code, text = run(jlpm, "test", "--ci", cwd=LABEXTENSION)
    assert code == 0, text
    assert "Tests:" in text and " failed" not in text, text


def source_copy(target: Path) -> Path:
    """The project's files at ``target``, its front end's node_modules linked, not copied: pip builds a
    wheel in the tree it is given, and the build rewrites ``npu_migrate_nb/labextension``, which the
    lab of a browser test running beside this one serves."""
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "site", "node_modules", "labextension", "lib", "__pycache__", "artifacts"))
    shutil.copytree(LABEXTENSION, target / "labextension", ignore=shutil.ignore_patterns("node_modules", "lib"))
    (target / "labextension" / "node_modules").symlink_to(LABEXTENSION / "node_modules", target_is_directory=True)
    return target


def test_the_wheel_carries_the_built_extension_and_the_server_config(tmp_path):
    source = source_copy(tmp_path / "source")
    code, text = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(source), timeout=900)
    assert code == 0, text[-3000:]
    [wheel] = list(tmp_path.glob("npu_migrate_nb-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    data = "npu_migrate_nb-0.1.0.data/data/"
    share = data + "share/jupyter/labextensions/npu-migrate-nb/"
    assert share + "package.json" in names and share + "install.json" in names
    assert any(name.startswith(share + "static/remoteEntry.") for name in names)
    assert data + "etc/jupyter/jupyter_server_config.d/npu_migrate_nb.json" in names
    assert "npu_migrate_nb/server/__init__.py" in names
