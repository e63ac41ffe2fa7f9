"""No fix writes a name the real adapter lacks where the fix uses it (issue 22): every adapter name in
the code ``fix`` writes, in the rules' own examples and in the whole corpus, resolves in the table
made from the adapter's source (``sim/adapter/real_api.json``), attribute by attribute as Python
would: ``npu.distribute.broadcast`` through ``npu_device``'s ``distribute``, a bare
``npu_distributed_optimizer_wrapper`` through ``from npu_bridge.npu_init import *``."""

import ast
import json
import os
from pathlib import Path

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.notebook import load
from npu_migrate_nb.rewrite import fix_notebook
from npu_migrate_nb.rules import ALL_RULES
from tests.conftest import joined, notebook_from

ROOT = Path(__file__).resolve().parent.parent
TABLE = json.loads((ROOT / "npu_migrate_nb" / "sim" / "adapter" / "real_api.json").read_text(encoding="utf-8"))
ADAPTER_PACKAGES = ("npu_bridge", "npu_device", "hccl")


def resolves(path: str) -> bool:
    """Does ``a.b.c`` (a module, then attributes) exist in the real adapter?"""
    parts = path.split(".")
    module = None
    for index in range(len(parts), 0, -1):  # the longest prefix that is a module
        candidate = ".".join(parts[:index])
        if candidate in TABLE["modules"]:
            module, rest = candidate, parts[index:]
            break
    if module is None:
        return False
    for name in rest:
        module = TABLE["attributes"].get(module, module)
        entry = TABLE["public"].get(f"{module}:{name}")
        if entry is None:
            submodule = f"{module}.{name}"
            if submodule in TABLE["modules"]:
                module = submodule
                continue
            return False
        if entry["kind"] != "module":
            return rest[-1] == name  # a function or class: nothing looked up on it here
        module = entry["path"]
    return True


def adapter_references(code: str) -> set:
    """The adapter names ``code`` uses: imports, attribute chains on an adapter alias, and bare
    names a star import of an adapter module brings."""
    tree = ast.parse(code)
    aliases, stars, found = {}, [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ADAPTER_PACKAGES:
                    found.add(alias.name)
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ADAPTER_PACKAGES:
            for alias in node.names:
                if alias.name == "*":
                    stars.append(node.module)
                else:
                    found.add(f"{node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    star_names = {key.split(":", 1)[1] for star in stars for key in TABLE["public"] if key.startswith(star + ":")}
    for star in stars:  # modules a star import brings (hccl_ops): their attributes are looked up too
        for name in star_names:
            if TABLE["public"].get(f"{star}:{name}", {}).get("kind") == "module":
                aliases.setdefault(name, f"{star}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # every prefix of a chain too: each must resolve
            chain = _chain(node)
            if chain and chain[0] in aliases:
                found.add(".".join([aliases[chain[0]], *chain[1:]]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and stars:
            name = node.func.id
            if name in star_names or _looks_like_the_adapters(name):
                found.add(f"{stars[0]}.{name}")
    return found


def _looks_like_the_adapters(name: str) -> bool:
    return name.startswith(("npu_", "NPU", "Npu", "hccl"))


def _chain(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _references(code: str) -> set:
    from npu_migrate_nb.ipython_syntax import mask

    return adapter_references(mask(code).code or "")


EXAMPLES = [(rule.code, index, example) for rule in ALL_RULES for index, example in enumerate(rule.INVALID)
            if example.after is not None]


def test_the_resolver_tells_real_names_from_simulator_only_ones():
    assert resolves("npu_device.distribute.broadcast")
    assert resolves("npu_bridge.npu_init.npu_distributed_optimizer_wrapper")
    assert resolves("npu_bridge.npu_init.hccl_ops.broadcast")
    assert not resolves("npu_device.distribute.npu_callbacks_append")  # only in the old stand-ins
    assert not resolves("npu_device.close")
    assert not resolves("npu_bridge.npu_init.npu_session_config_init")


@pytest.mark.parametrize("code,index,example", EXAMPLES, ids=[f"{c}-{i}" for c, i, _ in EXAMPLES])
def test_every_name_a_rule_s_fix_writes_exists_on_the_real_adapter(code, index, example):
    notebook = notebook_from(example.before)
    fixed = joined(notebook, fix_notebook(notebook, analyze(notebook)).sources)
    missing = sorted(name for name in _references(fixed) - _references(example.before) if not resolves(name))
    assert missing == []


def test_every_name_fix_writes_in_the_corpus_exists_on_the_real_adapter():
    wrong = {}
    for path in sorted((ROOT / "benchmarks" / "corpus").glob("*/*.ipynb")):
        notebook = load(str(path))
        result = fix_notebook(notebook, analyze(notebook))
        for index, source in result.sources.items():
            before = next(cell.source for cell in notebook.cells if cell.index == index)
            try:
                new = _references(source) - _references(before)
            except SyntaxError:
                continue
            missing = sorted(name for name in new if not resolves(name))
            if missing:
                wrong[f"{path.relative_to(ROOT)}:cell {index}"] = missing
    assert wrong == {}
