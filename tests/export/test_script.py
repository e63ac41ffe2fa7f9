"""train.py: the notebook's cells as a script. IPython syntax translated and every change reported;
cells kept apart by ``# %% cell N`` markers that ``load`` reads back as the notebook's cells; a
notebook that still misses a step is refused."""

import ast
import re
import json
import subprocess
import sys
from pathlib import Path

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.cli import main
from npu_migrate_nb.notebook import load

DATA = Path(__file__).resolve().parent.parent / "sim" / "data"

MAGIC_CELLS = [
    ("markdown", "# A notebook with IPython in it\n%%time is text here\n"),
    ("code", "%matplotlib inline\n%load_ext autoreload\n%autoreload 2\nimport os\nname = 'world'\n"),
    ("code", "%%time\ntotal = sum(range(10))\n%time again = total + 1\n"),
    ("code", "!echo hello {name} > greeting.txt\nfiles = !ls\nif files:\n    !pip install nothing-at-all\n"
             "%env MY_FLAG=1\n"),
    ("code", "%%bash\necho this is not Python\nexit 1\n"),
    ("code", "%%writefile helper.py\nVALUE = 42\n"),
    ("code", "%%capture captured\nprint('hidden')\n"),
    ("code", "%run helper.py\nlen?\nprint(VALUE, again, os.environ['MY_FLAG'], open('greeting.txt').read().strip(),\n"
             "      'greeting.txt' in files)\n"),
    ("code", "def ask():\n    return input('name? ')\n# %% a comment that looks like a marker\ndisplay('shown')\n"),
    ("raw", "raw text"),
]


def write_notebook(path, cells):
    document = {
        "cells": [dict(cell_type=kind, metadata={}, source=source,
                       **({"outputs": [], "execution_count": None} if kind == "code" else {}))
                  for kind, source in cells],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 4,
    }
    path.write_text(json.dumps(document))
    return path


def export(capsys, *args):
    code = main(["export", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_magics_shell_lines_and_foreign_cells_become_a_script_that_parses_and_runs(tmp_path, capsys):
    notebook = write_notebook(tmp_path / "magic.ipynb", MAGIC_CELLS)
    code, out, err = export(capsys, notebook, "-o", tmp_path / "job")
    assert code == 0, err
    script = (tmp_path / "job" / "train.py").read_text()
    ast.parse(script)
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path / "job", capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hidden\n42 46 1 hello world True\nshown\n"

    assert "subprocess.run(f'echo hello {name} > greeting.txt', shell=True, check=True)" in script
    assert "# echo this is not Python" in script and "exit 1\n" not in script.replace("# exit 1\n", "")
    reported = out.splitlines()
    for expected in (
        f"{notebook}:cell 1:1: info: removed: `%matplotlib inline`",
        f"{notebook}:cell 2:1: info: kept: `%%time`",
        f"{notebook}:cell 3:1: info: subprocess: `!echo hello {{name}} > greeting.txt`",
        f"{notebook}:cell 3:2: info: subprocess: `files = !ls`",
        f"{notebook}:cell 3:4: warning: comment: `!pip install nothing-at-all`",
        f"{notebook}:cell 4:1: warning: comment: `%%bash` cell: not Python",
        f"{notebook}:cell 5:1: info: translated: `%%writefile helper.py`",
        f"{notebook}:cell 6:1: info: kept: `%%capture captured`",
        f"{notebook}:cell 7:2: info: removed: `len?`",
        f"{notebook}:cell 8:2: warning: interactive: input() reads stdin",
    ):
        assert any(line.startswith(expected) for line in reported), (expected, reported)


def test_the_markers_give_the_notebooks_cells_back(tmp_path, capsys):
    notebook = write_notebook(tmp_path / "magic.ipynb", MAGIC_CELLS)
    export(capsys, notebook, "-o", tmp_path / "job")
    script_path = tmp_path / "job" / "train.py"
    cells = load(str(script_path)).cells
    assert [(cell.index, cell.cell_type) for cell in cells] == [
        (index, kind) for index, (kind, _) in enumerate(MAGIC_CELLS)]
    assert "".join(cell.source for cell in cells) == script_path.read_text()
    assert cells[8].source.startswith("# %% cell 8\n") and "display('shown')" in cells[8].source


def test_a_fixed_notebook_exported_is_analyzed_like_the_notebook(tmp_path, capsys):
    code, _, err = export(capsys, DATA / "loop_fixed.ipynb", "-o", tmp_path / "job")
    assert code == 0, err
    notebook, script = load(str(DATA / "loop_fixed.ipynb")), load(str(tmp_path / "job" / "train.py"))
    assert [cell.index for cell in script.code_cells] == [cell.index for cell in notebook.code_cells]
    assert analyze(script).steps == analyze(notebook).steps == {
        "broadcast": "present", "allreduce": "present", "shard": "present"}


def test_a_notebook_with_a_step_missing_is_refused_with_the_findings(tmp_path, capsys):
    code, _, err = export(capsys, DATA / "keras_single.ipynb", "-o", tmp_path / "job")
    assert code == 1 and not (tmp_path / "job").exists()
    assert "not exported" in err and "[missing-shard]" in err and "MISSING" in err
    code, _, err = export(capsys, DATA / "keras_single.ipynb", "-o", tmp_path / "job", "--force")
    assert code == 0 and (tmp_path / "job" / "train.py").exists()


def test_the_layout_is_written_into_the_launch_script_and_the_readme(tmp_path, capsys):
    export(capsys, DATA / "keras_fixed.ipynb", "-o", tmp_path / "job", "--devices-per-server", "4", "--servers", "2")
    launcher = (tmp_path / "job" / "run_distributed.sh").read_text()
    assert "DEVICES_PER_SERVER=4\n" in launcher and "SERVER_COUNT=2\n" in launcher
    assert not re.search(r"@[A-Z_]+@", launcher)  # every placeholder filled
    readme = (tmp_path / "job" / "README.md").read_text()
    assert "4 devices: 8 ranks" in readme and "--server-index K" in readme and "here 0 to 1" in readme
    assert (tmp_path / "job" / "run_distributed.sh").stat().st_mode & 0o111


def test_fix_on_an_exported_script_keeps_every_cell(tmp_path, capsys):
    """Needs ``render`` to join a script's cells (see the report): a script is no longer one cell."""
    export(capsys, DATA / "keras_single.ipynb", "-o", tmp_path / "job", "--force")
    script, fixed = tmp_path / "job" / "train.py", tmp_path / "fixed.py"
    assert main(["fix", str(script), "-o", str(fixed)]) == 0
    before, after = load(str(script)).cells, load(str(fixed)).cells
    assert [cell.source.splitlines()[0] for cell in after] == [cell.source.splitlines()[0] for cell in before]
    assert "npu.distribute.broadcast(model.trainable_variables)" in after[-1].source
    assert set(analyze(load(str(fixed))).steps.values()) == {"present"}
