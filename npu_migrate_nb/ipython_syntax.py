"""Mask IPython syntax (magics, shell escapes, help) so cells parse as Python; restore it byte for byte.

IPython itself decides what is IPython syntax: we run its input transformer on the cell and mask
exactly the lines it changed. Its module is loaded on its own, without the ``IPython`` package
(whose import would dominate a ``check`` run's start-up).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

# Cell magics whose body is Python that runs in the kernel: their cells are analyzed.
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "prun", "px", "npu_distribute", "memit", "mprun", "debug", "autopx", "pypy"}
)

_MASK_TEMPLATE = "pass  # npu-migrate-nb:ipython:{number}"
_MASK_LINE = re.compile(r"^[ \t]*pass  # npu-migrate-nb:ipython:(\d+)[ \t]*$")
# Line magics whose argument is a Python statement (``%time model.fit(ds)``): the statement is kept,
# behind ``if 1:`` padded to the magic's width so that columns stay true, and analyzed.
_CODE_LINE_MAGICS = {"time": "", "timeit": "nrp", "prun": "sTDlm", "memit": "rt", "capture": ""}
_CODE_MAGIC_MARK = "  # npu-migrate-nb:ipython-code:{number}"
_CODE_MAGIC_LINE = re.compile(r"^([ \t]*)if 1:[ ]*(.*?)  # npu-migrate-nb:ipython-code:(\d+)$")
# A cheap pre-check: only cells with one of these can contain IPython syntax.
_MAYBE_IPYTHON = re.compile(r"^[ \t]*[%!?]|[?][ \t]*$|=[ \t]*[%!]", re.MULTILINE)
_LEADING_SPACE = re.compile(r"^[ \t]*")


@dataclass
class MaskedCell:
    """A cell's source with its IPython lines replaced by ``pass`` placeholders."""

    code: Optional[str]  # Python code to analyze; None when the cell is not Python at all
    originals: Dict[int, str] = field(default_factory=dict)  # placeholder number -> original line
    cell_magic: Optional[str] = None  # e.g. "time" for a ``%%time`` cell
    # placeholder number -> its indentation when masked, where it differs from the original line's
    # (a shell command's continuation lines are masked at the indentation of its first line)
    indents: Dict[int, str] = field(default_factory=dict)

    @property
    def is_python(self) -> bool:
        return self.code is not None


def may_have_ipython(source: str) -> bool:
    """A cheap filter: no line that IPython could rewrite, so ``mask`` returns the source as it is."""
    return bool(_MAYBE_IPYTHON.search(source))


def mask(source: str) -> MaskedCell:
    if not _MAYBE_IPYTHON.search(source):
        return MaskedCell(source)
    lines = source.splitlines(keepends=True)
    originals: Dict[int, str] = {}
    cell_magic = None
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].startswith("%%"):
        words = lines[first][2:].split()
        cell_magic = words[0] if words else ""
        if cell_magic not in PYTHON_CELL_MAGICS:
            return MaskedCell(None, cell_magic=cell_magic)
        _mask_line(lines, first, originals)
    indents: Dict[int, str] = {}
    for number in _ipython_line_numbers(lines):
        if not _keep_magic_code(lines, number, originals):
            _mask_line(lines, number, originals)
            _mask_continuation(lines, number, originals, indents)
    return MaskedCell("".join(lines), originals, cell_magic, indents)


def _mask_continuation(lines: list, number: int, originals: Dict[int, str], indents: Dict[int, str]) -> None:
    """``!saved_model_cli run --dir d \\`` goes on on the next lines, as IPython reads it: they are
    masked too, at the first line's indentation (their own would not parse)."""
    indent = _LEADING_SPACE.match(originals[number]).group(0)
    while originals[number].rstrip("\r\n").endswith("\\") and number + 1 < len(lines) and number + 1 not in originals:
        number += 1
        _mask_line(lines, number, originals, indent)
        indents[number] = indent


def _keep_magic_code(lines: list, number: int, originals: Dict[int, str]) -> bool:
    """``%time stmt`` becomes ``if 1: stmt`` (same columns) when ``stmt`` is one line of Python."""
    line = lines[number]
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    indent = _LEADING_SPACE.match(body).group(0)
    prefix, code = _split_code_magic(body[len(indent):])
    if code is None or len(prefix) < len("if 1:") or "#" in code:
        return False
    try:
        compile(code, "<magic>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    originals[number] = line
    lines[number] = indent + "if 1:" + " " * (len(prefix) - len("if 1:")) + code + _CODE_MAGIC_MARK.format(number=number) + ending
    return True


def _split_code_magic(text: str):
    """("%timeit -n 3 ", "f()") for ``%timeit -n 3 f()``; (None, None) for other lines."""
    match = re.match(r"%(\w+)[ \t]+", text)
    if not match or match.group(1) not in _CODE_LINE_MAGICS:
        return None, None
    takes_value = _CODE_LINE_MAGICS[match.group(1)]
    position = match.end()
    while text.startswith("-", position):
        option = re.match(r"-(\w)\S*[ \t]+", text[position:])
        if option is None:
            return None, None
        position += option.end()
        if option.group(1) in takes_value and len(option.group(0).strip()) == 2:
            value = re.match(r"\S+[ \t]+", text[position:])
            if value is None:
                return None, None
            position += value.end()
    code = text[position:]
    return (text[:position], code) if code.strip() else (None, None)


def unmask(code: str, masked: MaskedCell) -> str:
    """Put the original IPython lines back in place of their placeholders."""
    if not masked.originals:
        return code
    lines = code.splitlines(keepends=True)
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        kept = _CODE_MAGIC_LINE.match(body)
        if kept and int(kept.group(3)) in masked.originals:
            original = masked.originals[int(kept.group(3))]
            original_body = original.rstrip("\r\n")
            indent = _LEADING_SPACE.match(original_body).group(0)
            prefix, _ = _split_code_magic(original_body[len(indent):])
            lines[i] = kept.group(1) + prefix + kept.group(2) + line[len(body):]
            continue
        found = _MASK_LINE.match(line)
        if found and int(found.group(1)) in masked.originals:
            number = int(found.group(1))
            original = _indented_as(masked.originals[number], line, masked.indents.get(number))
            ending = line[len(line.rstrip("\r\n")):]
            lines[i] = original if original.endswith(("\n", "\r")) or not ending else original + ending
    return "".join(lines)


def _indented_as(original: str, placeholder: str, masked_at: Optional[str] = None) -> str:
    """The original line at the placeholder's indentation: a fix that puts it in a block (``if`` a
    rank test) indents the placeholder, and the line moves in as far; otherwise the line comes back
    byte for byte."""
    indent = _LEADING_SPACE.match(placeholder).group(0)
    own = _LEADING_SPACE.match(original).group(0)
    masked_at = own if masked_at is None else masked_at
    if indent == masked_at:
        return original
    if indent.startswith(masked_at):
        return indent[len(masked_at):] + original
    return indent + original.lstrip(" \t")


def _mask_line(lines: list, number: int, originals: Dict[int, str], indent: Optional[str] = None) -> None:
    line = lines[number]
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    indent = _LEADING_SPACE.match(body).group(0) if indent is None else indent
    originals[number] = line
    lines[number] = indent + _MASK_TEMPLATE.format(number=number) + ending


def _ipython_line_numbers(lines: list) -> list:
    """Indices of the lines that IPython's transformer rewrites (already-masked lines excepted)."""
    code = "".join(lines)
    leading_blank = 0
    for line in lines:
        if line.strip():
            break
        leading_blank += 1
    try:
        transformed = _transformer_manager().transform_cell(code)
    except Exception:  # IPython gives up on some broken input; fall back to the line pattern
        transformed = None
    if transformed is not None:
        new_lines = [""] * leading_blank + transformed.splitlines(keepends=True)
        if len(new_lines) == len(lines):
            return [
                i
                for i, (old, new) in enumerate(zip(lines, new_lines))
                if old.rstrip("\r\n") != new.rstrip("\r\n") and not _MASK_LINE.match(old)
            ]
    return [i for i, line in enumerate(lines) if _looks_like_ipython(line)]


_LINE_PATTERN = re.compile(r"^[ \t]*([%!?]|[\w.]+[ \t]*\?{1,2}[ \t]*$|[\w.,\s]+=[ \t]*[%!])")


def _looks_like_ipython(line: str) -> bool:
    return bool(_LINE_PATTERN.match(line)) and not _MASK_LINE.match(line)


_manager = None


def _transformer_manager():
    global _manager
    if _manager is None:
        _manager = _load_inputtransformer2().TransformerManager()
    return _manager


# IPython 9's transformer imports one module of IPython's own, tokenutil (standard library imports
# only); the ``from IPython...`` line would run IPython's __init__, which imports all of IPython.
_TOKENUTIL_IMPORT = "from IPython.utils import tokenutil\n"


def _load_inputtransformer2():
    name = "IPython.core.inputtransformer2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("IPython")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("IPython is required to read IPython syntax")
    location = Path(list(spec.submodule_search_locations)[0])
    path = location / "core" / "inputtransformer2.py"
    source = path.read_text(encoding="utf-8")
    module = types.ModuleType("npu_migrate_nb._inputtransformer2")
    module.__file__ = str(path)
    if _TOKENUTIL_IMPORT in source:
        module.tokenutil = _module_from_file("npu_migrate_nb._tokenutil", location / "utils" / "tokenutil.py")
        source = source.replace(_TOKENUTIL_IMPORT, "\n", 1)  # the same line numbers in tracebacks
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def _module_from_file(name: str, path: Path):
    module_spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
