"""The notebook model: read a notebook or a script into cells, write changed cells back atomically.

Reading parses the JSON directly (importing ``nbformat`` costs about a second for its schema
checkers); ``nbformat`` is used only to upgrade old notebooks. What we write is checked against
nbformat's own schema files with ``fastjsonschema``, and ``nbformat.validate`` words any refusal.
Writing keeps the original file's key order, indentation and line layout, so that every cell we
did not change, every output and all metadata stay byte-identical.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .i18n import _

# A cell larger than this is not analyzed (it is almost always generated data, not code).
MAX_CELL_CHARS = 1_000_000


class InputError(Exception):
    """Input that cannot be used at all: the CLI prints it on one line and exits with code 2."""

    def __init__(self, path: str, message: str, cell: Optional[int] = None, line: Optional[int] = None):
        self.path = path
        self.message = message
        self.cell = cell
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path
        if self.cell is not None:
            where += f":cell {self.cell}"
            if self.line is not None:
                where += f":{self.line}"
        return f"{where}: {self.message}"


@dataclass
class Cell:
    index: int  # index into the notebook's ``cells`` list, markdown included
    cell_type: str  # "code", "markdown" or "raw"
    source: str


@dataclass
class Notebook:
    path: str
    cells: List[Cell]
    language: str = "python"
    kind: str = "notebook"  # "notebook" or "script"
    document: Optional[Dict[str, Any]] = field(default=None, repr=False)  # the parsed JSON
    indent: Optional[int] = 1
    trailing_newline: bool = True

    @property
    def code_cells(self) -> List[Cell]:
        return [cell for cell in self.cells if cell.cell_type == "code"]

    @property
    def is_python(self) -> bool:
        return self.language.lower() in ("python", "python3", "ipython", "ipython3")


def read_text(path: str) -> str:
    """Read a file as UTF-8 text, refusing binary files with a clear message."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        raise InputError(path, _("no such file")) from None
    except IsADirectoryError:
        raise InputError(path, _("is a directory, not a notebook or script")) from None
    except OSError as error:
        raise InputError(path, _("cannot read: {error}").format(error=error.strerror or error)) from None
    if b"\x00" in data[:8192]:
        raise InputError(path, _("binary file, not a notebook or script"))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(path, _("not UTF-8 text (byte {position})").format(position=error.start)) from None


def load(path: str) -> Notebook:
    """Load ``path``: ``.ipynb`` as a notebook, anything else as a Python script: one cell per
    ``# %%`` marker (the percent format of jupytext and editors), or one cell without markers."""
    text = read_text(path)
    if str(path).endswith(".ipynb"):
        return loads_notebook(text, path)
    return Notebook(path=str(path), cells=script_cells(text), kind="script", document=None)


# ``# %%``, ``#%%``, ``# %% title [markdown]``: a cell starts; its type is in brackets (code if none).
_CELL_MARKER = re.compile(r"^#[ \t]?%%(?:[ \t].*)?$")
_MARKED_TYPE = re.compile(r"\[(markdown|md|raw)\]")


def script_cells(text: str) -> List[Cell]:
    """A script's cells. Each cell's source starts with its marker line and the cells joined give the
    text back (what comes before the first marker, a header, joins the first cell)."""
    lines = text.splitlines(keepends=True)
    starts = [number for number, line in enumerate(lines) if _CELL_MARKER.match(line.rstrip("\r\n"))]
    if not starts:
        return [Cell(0, "code", text)]
    starts[0] = 0
    bounds = zip(starts, starts[1:] + [len(lines)])
    return [Cell(index, _marked_type(lines[start:end]), "".join(lines[start:end]))
            for index, (start, end) in enumerate(bounds)]


def _marked_type(lines: List[str]) -> str:
    marker = next(line for line in lines if _CELL_MARKER.match(line.rstrip("\r\n")))
    found = _MARKED_TYPE.search(marker)
    if found is None:
        return "code"
    return "raw" if found.group(1) == "raw" else "markdown"


def loads_notebook(text: str, path: str = "<notebook>") -> Notebook:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(path, _("invalid JSON at line {line} column {column}: {message}").format(
            line=error.lineno, column=error.colno, message=error.msg)) from None
    if not isinstance(document, dict) or not ("cells" in document or "worksheets" in document):
        raise InputError(path, _("not a Jupyter notebook (no 'cells' list)"))
    major = document.get("nbformat")
    if major != 4:
        document = _upgrade(document, path)
    cells_json = document.get("cells")
    if not isinstance(cells_json, list):
        raise InputError(path, _("not a Jupyter notebook ('cells' is not a list)"))
    cells = [_cell_from_json(index, cell_json, path) for index, cell_json in enumerate(cells_json)]
    return Notebook(
        path=str(path),
        cells=cells,
        language=_language_of(document),
        kind="notebook",
        document=document,
        indent=_detect_indent(text),
        trailing_newline=text.endswith("\n"),
    )


def _upgrade(document: Dict[str, Any], path: str) -> Dict[str, Any]:
    import nbformat  # only old notebooks pay for this import

    try:
        node = nbformat.from_dict(document)
        upgraded = nbformat.convert(node, 4)
    except Exception as error:  # nbformat raises a variety of errors for malformed input
        raise InputError(path, _("cannot upgrade notebook format {version!r}: {error}").format(
            version=document.get("nbformat"), error=error)) from None
    return json.loads(json.dumps(upgraded))


def _cell_from_json(index: int, cell_json: Any, path: str) -> Cell:
    if not isinstance(cell_json, dict) or "cell_type" not in cell_json:
        raise InputError(path, _("malformed cell (no 'cell_type')"), cell=index)
    source = cell_json.get("source", "")
    if isinstance(source, list):
        if not all(isinstance(part, str) for part in source):
            raise InputError(path, _("malformed cell source"), cell=index)
        source = "".join(source)
    elif not isinstance(source, str):
        raise InputError(path, _("malformed cell source"), cell=index)
    return Cell(index, str(cell_json["cell_type"]), source)


def _language_of(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata") or {}
    language_info = metadata.get("language_info") or {}
    kernelspec = metadata.get("kernelspec") or {}
    language = language_info.get("name") or kernelspec.get("language")
    if not language:
        kernel_name = str(kernelspec.get("name", ""))
        language = "python" if (not kernel_name or "python" in kernel_name) else kernel_name
    return str(language)


def _detect_indent(text: str) -> Optional[int]:
    match = re.search(r"^\{\s*?\n( +)\"", text)
    if match:
        return len(match.group(1))
    return None if "\n" not in text.strip() else 1


# ----------------------------------------------------------------------------------------- writing


def render(notebook: Notebook, new_sources: Mapping[int, str]) -> str:
    """The file's new text, with ``new_sources`` (cell index -> source) replacing those cells."""
    if notebook.kind == "script":  # its cells (one per ``# %%`` marker) joined give the file back
        return "".join(new_sources.get(cell.index, cell.source) for cell in notebook.cells)
    document = notebook.document
    assert document is not None
    changed = dict(document)
    changed["cells"] = list(document["cells"])
    for index, source in new_sources.items():
        cell_json = dict(changed["cells"][index])
        cell_json["source"] = _source_in_layout(source, cell_json.get("source"))
        changed["cells"][index] = cell_json
    _validate(changed, document, notebook.path)
    text = json.dumps(changed, indent=notebook.indent, ensure_ascii=False)
    return text + "\n" if notebook.trailing_newline else text


def _source_in_layout(source: str, original: Any) -> Any:
    """Keep the original's representation: a list of lines (Jupyter's) or one string."""
    if isinstance(original, list):
        return source.splitlines(keepends=True)
    return source


def _validate(changed: Dict[str, Any], original: Dict[str, Any], path: str) -> None:
    """Refuse to write a notebook that our change made invalid (one that came invalid stays as it was).

    The verdict is nbformat's: its own v4 schema file for the notebook's minor version, checked with
    ``fastjsonschema`` as ``nbformat.validate`` does, but without importing ``nbformat`` (about 1.4 s,
    nearly all of it ``jsonschema``'s format checkers). Only when that check fails, or for a version it
    does not cover, does ``nbformat.validate`` itself decide and word the message.
    """
    if _schema_accepts(changed):
        return
    _validate_with_nbformat(changed, original, path)


def _validate_with_nbformat(changed: Dict[str, Any], original: Dict[str, Any], path: str) -> None:
    import copy
    import warnings

    import nbformat

    # nbformat.validate repairs what it validates (missing or duplicate cell ids): it gets copies, so
    # that the notebook we write keeps every cell we did not change as it was.
    changed, original = copy.deepcopy(changed), copy.deepcopy(original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. missing cell ids: the input's own business, kept as it was
        try:
            nbformat.validate(changed, version=4)
        except nbformat.ValidationError as error:
            try:
                nbformat.validate(original, version=4)
            except nbformat.ValidationError:
                return  # the input was already invalid in its own way; only cell sources changed
            raise InputError(
                path, _("refusing to write an invalid notebook: {message}").format(message=error.message)
            ) from None


# nbformat's v4 schema files by minor version (nbformat.v4.nbbase.nbformat_schema).
_SCHEMA_FILES = {minor: f"nbformat.v4.{minor}.schema.json" for minor in range(6)}
_schema_checks: Dict[int, Any] = {}


def _schema_accepts(document: Dict[str, Any]) -> bool:
    """True when nbformat's schema accepts ``document``; False when it does not or cannot be checked here."""
    minor = document.get("nbformat_minor", 0)
    if type(minor) is not int or minor not in _SCHEMA_FILES or document.get("nbformat") != 4:
        return False  # a notebook from the future (nbformat relaxes its schema), or a malformed version
    check = _schema_check(minor)
    if check is None:
        return False
    if minor >= 5:
        # nbformat.validate gives cells without an id one before checking: so does this check, on a copy.
        cells = document.get("cells")
        if isinstance(cells, list) and any(isinstance(cell, dict) and "id" not in cell for cell in cells):
            document = dict(document)
            document["cells"] = [
                dict(cell, id="npu-migrate-nb") if isinstance(cell, dict) and "id" not in cell else cell
                for cell in cells
            ]
    from fastjsonschema import JsonSchemaException

    try:
        check(document)
    except JsonSchemaException:
        return False
    return True


def _schema_check(minor: int) -> Any:
    """The compiled schema check of nbformat v4.``minor`` (compiled once), or None without nbformat."""
    if minor not in _schema_checks:
        import importlib.util

        try:
            import fastjsonschema

            spec = importlib.util.find_spec("nbformat")  # finds the package without running it
            folder = list(spec.submodule_search_locations or [])[0] if spec else None
            with open(os.path.join(folder, "v4", _SCHEMA_FILES[minor]), encoding="utf-8") as stream:
                _schema_checks[minor] = fastjsonschema.compile(json.load(stream))
        except Exception:  # no nbformat or fastjsonschema, or an unexpected layout: nbformat decides
            _schema_checks[minor] = None
    return _schema_checks[minor]


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a mix."""
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else None
    name = os.path.basename(path)
    handle, temp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
