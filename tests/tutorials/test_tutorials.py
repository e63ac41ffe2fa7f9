"""Every tutorial in notebooks/ (English) and notebooks/zh/ (Simplified Chinese) runs top to bottom on a
fresh kernel, and each cell that says what happens (metadata ``npu_migrate_nb.expect``) shows it.

An expectation is a text the cell's output must contain, or ``{"re": pattern}``, a regular expression
it must match (multiline). The Chinese tutorials expect our tool's messages with patterns that hold the
facts (the codes, the numbers, the code) whichever language the catalog has them in; their own
print() texts are Chinese and expected as they are."""

import os
import re
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.sim
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATTERN = "[0-9][0-9]_*.ipynb"
ENGLISH = sorted(NOTEBOOKS.glob(PATTERN))
CHINESE = sorted((NOTEBOOKS / "zh").glob(PATTERN))
TUTORIALS = ENGLISH + CHINESE
HANZI = re.compile(r"[\u4e00-\u9fff]")
# Lines a Chinese tutorial's code cell may add to its English original: our messages in Chinese, and a
# matplotlib font list that has the CJK glyphs.
ADDED_LINES = re.compile(r"%npu_lang zh_CN|plt\.rcParams\[\"(font\.sans-serif|axes\.unicode_minus)\"\] = .*")
CLI_LANGUAGE = " --lang zh_CN"  # added to the command lines that run our CLI


def tutorial_id(path: Path) -> str:
    return path.relative_to(NOTEBOOKS).with_suffix("").as_posix()  # 01_estimator..., zh/01_estimator...


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


def shows(text: str, expected) -> bool:
    if isinstance(expected, str):
        return expected in text
    return re.search(expected["re"], text, re.MULTILINE) is not None


def test_the_tutorials_are_committed_without_outputs():
    import nbformat

    assert len(ENGLISH) >= 1 and len(CHINESE) == len(ENGLISH)
    for path in TUTORIALS:
        notebook = nbformat.read(str(path), as_version=4)
        nbformat.validate(notebook)
        assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), path.name
        assert all(cell.get("execution_count") is None for cell in notebook.cells if cell.cell_type == "code")


def test_every_tutorial_has_its_chinese_translation():
    assert [path.name for path in CHINESE] == [path.name for path in ENGLISH]


@pytest.mark.parametrize("path", CHINESE, ids=[tutorial_id(path) for path in CHINESE])
def test_a_zh_tutorial_is_its_english_original_translated(path):
    """The same cells in the same order; markdown in Chinese; each code line the English one, or the same
    line with a string or comment in Chinese, or one of the lines a Chinese tutorial adds."""
    import nbformat

    chinese = nbformat.read(str(path), as_version=4)
    english = nbformat.read(str(NOTEBOOKS / path.name), as_version=4)
    assert [cell.cell_type for cell in chinese.cells] == [cell.cell_type for cell in english.cells]
    assert sum(1 for cell in chinese.cells if cell.cell_type == "code") >= 1
    for index, (zh, en) in enumerate(zip(chinese.cells, english.cells)):
        if zh.cell_type == "markdown":
            assert HANZI.search(zh.source), f"{path.name} cell {index}: markdown not translated"
            continue
        zh_lines = [line.replace(CLI_LANGUAGE, "") if line.startswith("!npu-migrate-nb ") else line
                    for line in zh.source.splitlines() if not ADDED_LINES.fullmatch(line)]
        en_lines = en.source.splitlines()
        assert len(zh_lines) == len(en_lines), f"{path.name} cell {index}: other lines than the English"
        for zh_line, en_line in zip(zh_lines, en_lines):
            assert zh_line == en_line or HANZI.search(zh_line), \
                f"{path.name} cell {index}: {zh_line!r} is neither {en_line!r} nor translated"
        expected = (zh.metadata.get("npu_migrate_nb") or {}).get("expect") or []
        assert len(expected) == len((en.metadata.get("npu_migrate_nb") or {}).get("expect") or [])
        for item in expected:
            assert isinstance(item, str) or re.compile(item["re"]), item
    assert any("%npu_lang zh_CN" in cell.source for cell in chinese.cells if cell.cell_type == "code")


@pytest.mark.parametrize("path", TUTORIALS, ids=[tutorial_id(path) for path in TUTORIALS])
def test_a_tutorial_runs_top_to_bottom_and_shows_what_its_text_says(path, monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("NPU_MIGRATE_NB_WIDGETS", "0")  # plain-text reports, to read here
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    files_before = set(NOTEBOOKS.rglob("*"))
    notebook = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first cell that fails
    executed = os.environ.get("NPU_EXECUTED_NOTEBOOKS")  # CI keeps the executed copy for the docs site
    if executed:
        target = Path(executed) / path.relative_to(NOTEBOOKS)  # zh/ for the Chinese ones
        target.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: the docs test, in another test process, may be reading the folder.
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        nbformat.write(notebook, str(partial))
        os.replace(partial, target)
    checked = 0
    for index, cell in enumerate(notebook.cells):
        expected = (cell.get("metadata", {}).get("npu_migrate_nb") or {}).get("expect") or []
        text = output_text(cell)
        for fragment in expected:
            assert shows(text, fragment), f"{path.name} cell {index}: {fragment!r} not in:\n{text[-3000:]}"
            checked += 1
    assert checked >= 3, f"{path.name}: only {checked} expectations: its cells should say what happens"
    leftover = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    _, alive = psutil.wait_procs(leftover, timeout=15)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
    litter = set(NOTEBOOKS.rglob("*")) - files_before
    assert not litter, f"{tutorial_id(path)} left files beside the tutorials: {sorted(litter)}"
