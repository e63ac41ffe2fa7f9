"""Every tutorial in notebooks/ runs top to bottom on a fresh kernel, and each cell that says what
happens (metadata ``npu_migrate_nb.expect``: texts its output must contain) shows it."""

from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.sim
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TUTORIALS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def output_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("display_data", "execute_result"):
            parts.append(output.get("data", {}).get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append("\n".join(output.get("traceback", [])))
    return "\n".join(parts)


def test_the_tutorials_are_committed_without_outputs():
    import nbformat

    assert len(TUTORIALS) >= 1
    for path in TUTORIALS:
        notebook = nbformat.read(str(path), as_version=4)
        nbformat.validate(notebook)
        assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), path.name


@pytest.mark.parametrize("path", TUTORIALS, ids=[path.stem for path in TUTORIALS])
def test_a_tutorial_runs_top_to_bottom_and_shows_what_its_text_says(path, monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("NPU_MIGRATE_NB_WIDGETS", "0")  # plain-text reports, to read here
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    files_before = set(NOTEBOOKS.rglob("*"))
    notebook = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError on the first cell that fails
    checked = 0
    for index, cell in enumerate(notebook.cells):
        expected = (cell.get("metadata", {}).get("npu_migrate_nb") or {}).get("expect") or []
        text = output_text(cell)
        for fragment in expected:
            assert fragment in text, f"{path.name} cell {index}: {fragment!r} not in:\n{text[-3000:]}"
            checked += 1
    assert checked >= 3, f"{path.name}: only {checked} expectations: its cells should say what happens"
    leftover = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    _, alive = psutil.wait_procs(leftover, timeout=15)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
    litter = set(NOTEBOOKS.rglob("*")) - files_before
    assert not litter, f"{path.name} left files beside the tutorials: {sorted(litter)}"
