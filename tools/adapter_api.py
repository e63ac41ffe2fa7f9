"""Write the table of the real Ascend adapter's public API that the simulator's stand-ins are held to.

    python tools/adapter_api.py ADAPTER_MIRROR [--model-zoo ZOO_MIRROR] [--hccl HCOMM_MIRROR] [-o PATH]

ADAPTER_MIRROR is a bare clone of Ascend/tensorflow (branch ``master``), ZOO_MIRROR of
Ascend/ModelZoo-TensorFlow (``master``), HCOMM_MIRROR of CANN's hcomm (its ``python/hccl`` package:
``hccl`` is not in the adapter's repository, only a one-function test stub is). Git objects are read
with ``git ls-tree``/``git show``/``git cat-file`` and parsed with :mod:`ast`: nothing is imported
or executed. The output (default ``npu_migrate_nb/sim/adapter/real_api.json``) is deterministic: the
same commits give the same bytes.

What the table holds, and how it is found:

* ``modules``: every module of ``npu_bridge`` (``tf_adapter/python``), ``npu_device``
  (``tf_adapter_2.x/python``) and ``hccl``, by its import path, with the names bound at its top level
  (also inside top-level ``if``/``try``): functions and classes (parameters with their kind and
  their default as source text; a class's bases as source text, its ``__init__``, inherited from an
  adapter base when it has none, and its methods), module-level values (source text), and imports
  (``alias`` of an adapter name, ``module``, or ``external`` for anything outside the adapter).
  ``npu_device.compat.v1.*`` is not in the repository: the build copies ``npu_bridge`` there and
  rewrites it with the rules of ``tf_adapter_2.x/compat_v1/upgrade_tf1_compat_tf2.py``; the table
  applies the same rules (files removed and replaced, lines removed, text replaced).
* ``public``: per package, the dotted paths a user reaches: ``module:name`` for every public name
  of every module that is importable by that path, after following aliases to their definition.
  Attribute paths differ from import paths where a package binds a name over a subpackage:
  ``npu_device/__init__.py`` binds ``distribute`` to ``npu_device._api.distribute``, so
  ``npu.distribute.all_reduce`` is ``npu_device._api.distribute:all_reduce`` while
  ``npu_device.distribute`` imported by path is the namespace package of ``hccl.py``,
  ``npu_callbacks.py``...; ``attributes`` lists those bindings.
* ``vendor_tool``: what the migration tool inserts into a user's script: every entry of its two
  mapping files (``convert_tf2npu/mappings/ast.json``, ``v2/mappings/ast_v2.json``) whose
  replacement names an adapter API, and the names its code builds (``ast.Name``/``ast.Attribute``/
  ``ast.ImportFrom`` nodes and ``get_npu_func_node`` arguments in ``ast_impl.py``/``ast_impl_v2.py``,
  the wrappers of ``config.py``/``config_v2.py``), each resolved in the namespace the tool's code
  runs in (``from npu_bridge.npu_init import *``, or ``import npu_device as npu`` for ``npu.``).
  Names that resolve nowhere are listed with where they come from.
* ``model_zoo``: how many ModelZoo files call each adapter API (files, not calls). Per file: the
  imports of adapter modules anywhere in it (``import npu_device as npu``, ``from M import X as Y``,
  ``from M import *`` through the table's namespace of M), then every call whose function is a name
  or attribute chain starting at such a binding. A call is counted under the path the user wrote
  (``npu_device:train.optimizer.NpuLossScaleOptimizer``, ``npu_bridge.npu_init:npu_ops.dropout``),
  and under the definition it resolves to. Files that Python 3 cannot parse (Python 2 prints) fall
  back to regular expressions: the same imports, and ``NAME(`` / ``ALIAS.attr(`` for the names they
  bind. Imports between the zoo's own modules are not followed.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(ROOT, "npu_migrate_nb", "sim", "adapter", "real_api.json")

ADAPTER_BRANCH = "master"
PACKAGE_ROOTS = {"npu_bridge": "tf_adapter/python/", "npu_device": "tf_adapter_2.x/python/"}
HCCL_ROOT = "python/"
COMPAT_RULES = "tf_adapter_2.x/compat_v1/upgrade_tf1_compat_tf2.py"
COMPAT_REPLACEMENTS = "tf_adapter_2.x/compat_v1/replacement/"
COMPAT_PACKAGE = "npu_device.compat.v1"
MAPPING_FILES = ("convert_tf2npu/mappings/ast.json", "convert_tf2npu/v2/mappings/ast_v2.json")
TOOL_CODE = ("convert_tf2npu/ast_impl.py", "convert_tf2npu/v2/ast_impl_v2.py",
             "convert_tf2npu/config.py", "convert_tf2npu/v2/config_v2.py")
ADAPTER_PACKAGES = ("npu_bridge", "npu_device", "hccl")
KEPT_DUNDERS = ("__init__", "__call__", "__enter__", "__exit__", "__new__", "__getattr__")
VALUE_TEXT_LIMIT = 160


# ------------------------------------------------------------------------------------------ git


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def head_of(repo: str, branch: Optional[str]) -> str:
    return git(repo, "rev-parse", branch or "HEAD").strip()


def python_files(repo: str, commit: str, prefix: str = "") -> Dict[str, str]:
    """path -> blob id of every ``.py`` under ``prefix`` at ``commit``."""
    listing = git(repo, "ls-tree", "-r", commit, "--", prefix) if prefix else git(repo, "ls-tree", "-r", commit)
    files = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        mode, kind, blob = meta.split()
        if kind == "blob" and path.endswith(".py"):
            files[path] = blob
    return files


def read_blobs(repo: str, blobs: Iterable[str]) -> Dict[str, str]:
    """blob id -> text, through one ``git cat-file --batch`` (blobs git cannot read are left out)."""
    blobs = list(dict.fromkeys(blobs))
    done = subprocess.run(["git", "-C", repo, "cat-file", "--batch"], input=("\n".join(blobs) + "\n").encode(),
                          capture_output=True, check=True, text=False)
    out, texts, at = done.stdout, {}, 0
    for blob in blobs:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) < 3 or header[1] != b"blob":
            continue
        size = int(header[2])
        texts[blob] = out[at:at + size].decode("utf-8", errors="replace")
        at += size + 1
    return texts


# ------------------------------------------------------------------------------- one module


def _segment(source: str, node: ast.AST) -> str:
    return ast.get_source_segment(source, node) or ast.unparse(node)


def parameters(source: str, args: ast.arguments) -> List[dict]:
    """Each parameter: name, kind (as :class:`inspect.Parameter` names it), default as source text."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = []
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if index < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        params.append(_param(source, arg.arg, kind, default))
    if args.vararg:
        params.append(_param(source, args.vararg.arg, "VAR_POSITIONAL", None))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append(_param(source, arg.arg, "KEYWORD_ONLY", default))
    if args.kwarg:
        params.append(_param(source, args.kwarg.arg, "VAR_KEYWORD", None))
    return params


def _param(source: str, name: str, kind: str, default: Optional[ast.AST]) -> dict:
    entry = {"name": name, "kind": kind}
    if default is not None:
        entry["default"] = _segment(source, default)
    return entry


def _decorators(source: str, node) -> List[str]:
    return [_segment(source, d) for d in node.decorator_list]


def function_entry(source: str, node) -> dict:
    entry = {"kind": "function", "params": parameters(source, node.args)}
    decorators = _decorators(source, node)
    if decorators:
        entry["decorators"] = decorators
    return entry


def _method_kind(decorators: List[str]) -> str:
    for decorator in decorators:
        if decorator in ("property", "staticmethod", "classmethod"):
            return decorator
        if decorator.endswith(".setter"):
            return "setter"
    return "method"


def class_entry(source: str, node: ast.ClassDef) -> dict:
    methods = {}
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if item.name.startswith("_") and item.name not in KEPT_DUNDERS:
            continue
        decorators = _decorators(source, item)
        kind = _method_kind(decorators)
        if kind == "setter":
            continue
        methods[item.name] = {"kind": kind, "params": parameters(source, item.args)}
    entry = {"kind": "class", "bases": [_segment(source, b) for b in node.bases], "methods": methods}
    if node.keywords:
        entry["keywords"] = [_segment(source, k) for k in node.keywords]
    return entry


def _top_level(body: List[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements at module level, including both sides of a top-level if/try and with bodies."""
    for statement in body:
        if isinstance(statement, ast.If):
            yield from _top_level(statement.body)
            yield from _top_level(statement.orelse)
        elif isinstance(statement, (ast.With, ast.AsyncWith)):
            yield from _top_level(statement.body)
        elif isinstance(statement, ast.Try):
            yield from _top_level(statement.body)
            for handler in statement.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(statement.orelse)
            yield from _top_level(statement.finalbody)
        else:
            yield statement


def _absolute(module: Optional[str], level: int, package: str) -> str:
    if not level:
        return module or ""
    base = package.split(".")
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def module_entry(name: str, source: str, is_package: bool) -> dict:
    """The names bound at the top level of one module, in binding order (the last binding wins)."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    names: Dict[str, dict] = {}
    stars: List[str] = []
    for statement in _top_level(tree.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[statement.name] = function_entry(source, statement)
        elif isinstance(statement, ast.ClassDef):
            names[statement.name] = class_entry(source, statement)
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    names[alias.asname] = {"kind": "import", "module": alias.name}
                else:
                    top = alias.name.split(".")[0]
                    names[top] = {"kind": "import", "module": top}
        elif isinstance(statement, ast.ImportFrom):
            source_module = _absolute(statement.module, statement.level, package)
            for alias in statement.names:
                if alias.name == "*":
                    stars.append(source_module)
                    continue
                names[alias.asname or alias.name] = {"kind": "from", "module": source_module, "name": alias.name}
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value = statement.value
            for target in targets:
                if isinstance(target, ast.Name) and value is not None:
                    text = _segment(source, value)
                    names[target.id] = {"kind": "value", "value": text[:VALUE_TEXT_LIMIT]}
    entry = {"names": names}
    if stars:
        entry["star_imports"] = stars
    all_names = _dunder_all(tree)
    if all_names is not None:
        entry["all"] = all_names
    return entry


def _dunder_all(tree: ast.Module) -> Optional[List[str]]:
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                     for t in statement.targets):
            try:
                return list(ast.literal_eval(statement.value))
            except ValueError:
                return None  # computed (npu_bridge/__init__: every name dir() sees)
    return None


# --------------------------------------------------------------------------- the build's copy


def _rules(source: str) -> dict:
    """The module-level constants and appended lines of upgrade_tf1_compat_tf2.py."""
    rules = {"REPLACE_RULES": {}, "REGEXP_RULES": {}, "REMOVED_LINES": [], "FILE_REMOVED": (), "FILE_REPLACED": ()}
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign):
            target = statement.targets[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                rules[target.value.id][ast.literal_eval(target.slice)] = ast.literal_eval(statement.value)
            elif isinstance(target, ast.Name) and target.id in ("FILE_REMOVED", "FILE_REPLACED"):
                rules[target.id] = tuple(ast.literal_eval(statement.value))
        elif (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
              and ast.unparse(statement.value.func) == "REMOVED_LINES.append"):
            rules["REMOVED_LINES"].append(ast.literal_eval(statement.value.args[0]))
    return rules


def compat_source(text: str, rules: dict) -> str:
    """``text`` rewritten line by line as ``make_compat`` does."""
    lines = []
    for line in text.splitlines(keepends=True):
        if line.strip() in rules["REMOVED_LINES"]:
            continue
        for old, new in rules["REPLACE_RULES"].items():
            line = line.replace(old, new, 1)
        for pattern, new in rules["REGEXP_RULES"].items():
            line = re.sub(pattern, new, line)
        lines.append(line)
    return "".join(lines)


# ------------------------------------------------------------------------------ the adapter


def module_name(path: str, root: str) -> Tuple[str, bool]:
    dotted = path[len(root):-len(".py")].replace("/", ".")
    if dotted.endswith(".__init__"):
        return dotted[:-len(".__init__")], True
    return dotted, False


def collect_sources(adapter: str, commit: str, hcomm: Optional[str]) -> Dict[str, dict]:
    """module name -> {source file, text, is_package}, the compat copy and hccl included."""
    sources: Dict[str, dict] = {}
    for package, root in PACKAGE_ROOTS.items():
        files = python_files(adapter, commit, root + package)
        texts = read_blobs(adapter, files.values())
        for path, blob in sorted(files.items()):
            name, is_package = module_name(path, root)
            sources[name] = {"file": path, "text": texts[blob], "package": is_package}
    rules = _rules(git(adapter, "show", f"{commit}:{COMPAT_RULES}"))
    bridge_root = PACKAGE_ROOTS["npu_bridge"] + "npu_bridge/"
    for name, entry in list(sources.items()):
        if not (name == "npu_bridge" or name.startswith("npu_bridge.")):
            continue
        relative = entry["file"][len(bridge_root):]
        if relative in rules["FILE_REMOVED"]:
            continue
        text = entry["text"]
        origin = entry["file"]
        if relative in rules["FILE_REPLACED"]:
            origin = COMPAT_REPLACEMENTS + relative
            text = git(adapter, "show", f"{commit}:{origin}")
        compat_name = COMPAT_PACKAGE + name[len("npu_bridge"):]
        sources[compat_name] = {"file": origin, "text": compat_source(text, rules), "package": entry["package"],
                                "generated": f"copied from {origin} by {COMPAT_RULES}"}
    if hcomm:
        files = python_files(hcomm, head_of(hcomm, None), HCCL_ROOT + "hccl")
        texts = read_blobs(hcomm, files.values())
        for path, blob in sorted(files.items()):
            name, is_package = module_name(path, HCCL_ROOT)
            sources[name] = {"file": "hcomm:" + path, "text": texts[blob], "package": is_package}
    return sources


def parse_modules(sources: Dict[str, dict]) -> Dict[str, dict]:
    modules = {}
    for name, entry in sorted(sources.items()):
        parsed = module_entry(name, entry["text"], entry["package"])
        parsed["file"] = entry["file"]
        if "generated" in entry:
            parsed["generated"] = entry["generated"]
        modules[name] = parsed
    _add_namespace_packages(modules)
    _expand_star_imports(modules)
    return modules


def _add_namespace_packages(modules: Dict[str, dict]) -> None:
    """Folders without ``__init__.py`` (``npu_device.distribute``, ``npu_device.train``...) are
    namespace packages: importable by path, binding nothing but their submodules."""
    for name in list(modules):
        parts = name.split(".")
        for cut in range(1, len(parts)):
            package = ".".join(parts[:cut])
            if package not in modules:
                modules[package] = {"names": {}, "namespace": True}


def _expand_star_imports(modules: Dict[str, dict]) -> None:
    """``from M import *`` binds M's public names (its ``__all__`` when literal); fixed point, as
    stars chain (npu_device.compat.v1.npu_init gets ``npu_bridge``'s)."""
    changed = True
    while changed:
        changed = False
        for entry in modules.values():
            for source in entry.get("star_imports", ()):
                if source not in modules:
                    continue
                for name in _star_names(modules[source]):
                    if name not in entry["names"]:
                        entry["names"][name] = {"kind": "from", "module": source, "name": name, "star": True}
                        changed = True


def _star_names(entry: dict) -> List[str]:
    if "all" in entry:
        return entry["all"]
    return [n for n in entry["names"] if not n.startswith("_")]


def is_adapter(module: str) -> bool:
    return module.split(".")[0] in ADAPTER_PACKAGES


class Resolver:
    """Follows imports through the parsed modules to what a dotted access finally is."""

    def __init__(self, modules: Dict[str, dict]):
        self.modules = modules

    def binding(self, module: str, name: str) -> Optional[dict]:
        """What ``module.name`` is as an attribute: its own binding, else a submodule."""
        entry = self.modules.get(module)
        if entry is not None and name in entry["names"]:
            return entry["names"][name]
        if f"{module}.{name}" in self.modules:
            return {"kind": "import", "module": f"{module}.{name}"}
        return None

    def _is_submodule(self, source: str, name: str) -> bool:
        """``from source import name`` gives the submodule unless ``source`` binds ``name`` to
        something else (``from . import v1`` inside ``source`` is the submodule itself)."""
        bound = self.modules[source]["names"].get(name) if source in self.modules else None
        return (bound is None or bound == {"kind": "import", "module": f"{source}.{name}"}
                or (bound["kind"] == "from" and bound["module"] == source and bound["name"] == name))

    def resolve(self, module: str, chain: List[str], depth: int = 0) -> Optional[dict]:
        """``{"path", "kind"}`` of ``module`` then ``.chain``: kind is module, function, class,
        value, external, or attribute (an attribute of a value or class, e.g. an op of a generated
        op library); None when the adapter has no such name."""
        if depth > 40:
            return None
        if not chain:
            return {"path": module, "kind": "module" if module in self.modules else "external"}
        if not is_adapter(module):
            return {"path": ".".join([module] + chain), "kind": "external"}
        if module not in self.modules:
            return None
        head, rest = chain[0], chain[1:]
        bound = self.binding(module, head)
        if bound is None:
            return None
        kind = bound["kind"]
        if kind == "import":
            return self.resolve(bound["module"], rest, depth + 1)
        if kind == "from":
            source, name = bound["module"], bound["name"]
            if f"{source}.{name}" in self.modules and self._is_submodule(source, name):
                return self.resolve(f"{source}.{name}", rest, depth + 1)
            return self.resolve(source, [name] + rest, depth + 1)
        path = f"{module}.{head}"
        if rest:
            return {"path": ".".join([path] + rest), "kind": "attribute", "owner": kind}
        return {"path": path, "kind": kind}

    def resolve_dotted(self, dotted: str) -> Optional[dict]:
        """``a.b.c.name``: the longest module prefix, then attributes."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if module in self.modules:
                return self.resolve(module, parts[cut:])
        return None

    def definition(self, path: str) -> Optional[dict]:
        module, _, name = path.rpartition(".")
        entry = self.modules.get(module)
        return entry["names"].get(name) if entry else None


def public_paths(modules: Dict[str, dict], resolver: Resolver) -> Dict[str, dict]:
    """``module:name`` -> what it resolves to, for every public name of every adapter module."""
    public = {}
    for module, entry in sorted(modules.items()):
        if any(part.startswith("_") and part != "_api" for part in module.split(".")):
            continue
        for name in sorted(entry["names"]):
            if name.startswith("_"):
                continue
            resolved = resolver.resolve(module, [name])
            if resolved is None:  # a compiled extension the package imports (``tf_adapter``)
                public[f"{module}:{name}"] = {"kind": "not_in_source"}
                continue
            public[f"{module}:{name}"] = resolved
    return public


def attribute_bindings(modules: Dict[str, dict], resolver: Resolver) -> Dict[str, str]:
    """Where ``package.name`` as an attribute is not the module imported as ``package.name``."""
    bindings = {}
    for module in sorted(modules):
        package, _, name = module.rpartition(".")
        if not package or package not in modules:
            continue
        bound = modules[package]["names"].get(name)
        if bound is None:
            continue
        resolved = resolver.resolve(package, [name])
        if resolved and resolved["path"] != module:
            bindings[module] = resolved["path"]
    return bindings


def inherit_inits(modules: Dict[str, dict], resolver: Resolver) -> None:
    """A class without ``__init__`` gets its adapter base's (``init_from`` names it)."""
    for module, entry in modules.items():
        for name, bound in entry["names"].items():
            if bound["kind"] != "class" or "__init__" in bound["methods"]:
                continue
            for base in bound["bases"]:
                found = _adapter_class(resolver, module, base)
                if found and "__init__" in found[1]["methods"]:
                    bound["init_from"] = found[0]
                    break


def _adapter_class(resolver: Resolver, module: str, base_text: str, depth: int = 0):
    if depth > 10 or not re.fullmatch(r"[A-Za-z_][\w.]*", base_text):
        return None
    resolved = resolver.resolve(module, base_text.split("."))
    if not resolved or resolved["kind"] != "class":
        return None
    definition = resolver.definition(resolved["path"])
    if "__init__" in definition["methods"]:
        return resolved["path"], definition
    owner = resolved["path"].rpartition(".")[0]
    for base in definition["bases"]:
        found = _adapter_class(resolver, owner, base, depth + 1)
        if found:
            return found
    return None


# ------------------------------------------------------------------------- the vendor's tool


DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
TF1_NAMESPACE = "npu_bridge.npu_init"
NPU_ALIAS = "npu"


def tool_names(adapter: str, commit: str) -> List[dict]:
    """Each name the tool writes into a script: {name, where, for (the API it replaces, if any)}."""
    found = []
    for path in MAPPING_FILES:
        mapping = json.loads(git(adapter, "show", f"{commit}:{path}"))
        for key, value in mapping.items():
            if not _is_replacement(value):
                continue
            for name in _mapping_names(value[0], value[2]):
                found.append({"name": name, "where": f"{path} [{key!r}]", "for": value[1]})
    for path in TOOL_CODE:
        tree = ast.parse(git(adapter, "show", f"{commit}:{path}"))
        for name, line in _built_names(tree):
            found.append({"name": name, "where": f"{path}:{line}"})
    return found


def _is_replacement(value) -> bool:
    """A mapping entry ``[module or name, the original API, its replacement]`` (the other entries
    list API names or report files)."""
    return (isinstance(value, list) and len(value) == 3 and all(isinstance(v, str) for v in value)
            and (not value[1] or "." in value[1] or "(" in value[1]))


def _mapping_names(module_column: str, replacement: str) -> List[str]:
    """The adapter names of a replacement: ``["npu_strategy", ..., "NPUStrategy"]`` is
    ``npu_strategy.NPUStrategy`` (the tool writes the first column's module before a bare class)."""
    quoted = re.fullmatch(r"'from ([\w.]+) import \*'", replacement)
    if quoted:
        return [f"from {quoted.group(1)}"]
    if replacement.startswith(("from ", "import ")):
        return []  # TensorFlow's own modules
    names = []
    for match in DOTTED.finditer(replacement):
        text, start = match.group(0), match.start()
        if start and replacement[start - 1] in ".*":
            continue  # an attribute of the user's object: ``*.ConfigProto()``
        if text.isupper():
            continue  # prose: "add NPU config"
        if (module_column.islower() and module_column.isidentifier() and "." not in text
                and text[:1].isupper()):
            text = f"{module_column}.{text}"
        names.append(text)
    return names


def _built_names(tree: ast.Module) -> Iterable[Tuple[str, int]]:
    """Names the tool's code puts into a script's AST (``ast.Name``, chains of ``ast.Attribute``
    on one, ``get_npu_func_node`` arguments, the wrappers of ``npu_func_map``), less the variables
    it assigns there (``npu_sess``), and ``from M import N`` as ``M:N``."""
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            yield from _imports_built(function)
    stored, loaded = set(), []
    variables = {t.id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func == "ast.Name" and _keyword_text(node, "id"):
            (stored.add if _stored(node) else lambda n: loaded.append((n, node.lineno)))(_keyword_text(node, "id"))
        elif func == "ast.Attribute":
            dotted = _built_dotted(node, variables)
            if dotted:
                loaded.append((dotted, node.lineno))
        elif func == "get_npu_func_node" and node.args and _text(node.args[0]):
            loaded.append((_text(node.args[0]), node.lineno))
    for name, line in loaded:
        if name.split(".")[0] not in stored:
            yield name, line
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "npu_func_map"
                                                for t in node.targets):
            for wrapper, _argument in ast.literal_eval(node.value).values():
                yield wrapper, node.lineno


def _built_dotted(node: ast.AST, variables: Dict[str, ast.AST]) -> Optional[str]:
    """``ast.Attribute(value=ast.Attribute(value=ast.Name(id='npu'), attr='compat'), attr='enable_v1')``
    -> npu.compat.enable_v1, also through a variable holding the inner node (None when the chain
    starts at a call: ``npu.open().as_default``)."""
    if isinstance(node, ast.Name) and node.id in variables:
        node = variables[node.id]
    if not isinstance(node, ast.Call):
        return None
    func = ast.unparse(node.func)
    if func == "ast.Name":
        return _keyword_text(node, "id")
    if func == "ast.Attribute" and _keyword_text(node, "attr"):
        base = _built_dotted({k.arg: k.value for k in node.keywords}.get("value"), variables)
        return f"{base}.{_keyword_text(node, 'attr')}" if base else None
    return None


def _keyword_text(call: ast.Call, name: str) -> Optional[str]:
    return _text({k.arg: k.value for k in call.keywords}.get(name))


def _imports_built(function: ast.FunctionDef) -> Iterable[Tuple[str, int]]:
    aliases, modules = [], []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            keywords = {k.arg: k.value for k in node.keywords}
            func = ast.unparse(node.func)
            if func == "ast.alias" and _text(keywords.get("name")):
                aliases.append(_text(keywords["name"]))
            elif func == "ast.ImportFrom" and _text(keywords.get("module")):
                modules.append((_text(keywords["module"]), node.lineno))
    for module, line in modules:
        yield f"from {module}", line
        for alias in aliases:
            if alias != "*":
                yield f"{module}:{alias}", line


def _stored(call: ast.Call) -> bool:
    ctx = {k.arg: k.value for k in call.keywords}.get("ctx")
    return ctx is not None and "Store" in ast.unparse(ctx)


def _text(node) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def resolve_tool_name(resolver: Resolver, name: str, imported: Dict[str, str]) -> Optional[dict]:
    """In the namespace the tool's code gives a script: ``npu.`` is ``npu_device``, names it
    imports come from their module, the rest from ``from npu_bridge.npu_init import *``."""
    parts = name.split(".")
    if ":" in name:
        module, attribute = name.split(":")
        resolved, user = resolver.resolve(module, attribute.split(".")), name
    elif parts[0] == NPU_ALIAS:
        resolved, user = resolver.resolve("npu_device", parts[1:]), f"npu_device:{'.'.join(parts[1:])}"
    elif parts[0] in imported:
        module = imported[parts[0]]
        resolved, user = resolver.resolve(module, parts), f"{module}:{name}"
    else:
        resolved, user = resolver.resolve(TF1_NAMESPACE, parts), f"{TF1_NAMESPACE}:{name}"
    if resolved is None:
        return None
    return dict(resolved, user_path=user)


def vendor_tool(adapter: str, commit: str, resolver: Resolver) -> dict:
    items = tool_names(adapter, commit)
    imported = {i["name"].split(":")[1]: i["name"].split(":")[0] for i in items if ":" in i["name"]}
    inserts: Dict[str, dict] = {}
    unresolved: Dict[str, List[str]] = defaultdict(list)
    modules = {}
    for item in items:
        name = item["name"]
        if name.startswith("from "):
            module = name[len("from "):]
            if is_adapter(module):
                modules[module] = {"where": item["where"], "exists": module in resolver.modules}
            continue
        resolved = resolve_tool_name(resolver, name, imported)
        if resolved is None:
            if _looks_like_adapter(name):
                unresolved[name].append(item["where"])
            continue
        if resolved["kind"] == "external":
            continue  # TensorFlow's, reached through the star import (RewriterConfig)
        entry = inserts.setdefault(resolved["user_path"], {"resolves_to": resolved["path"],
                                                           "kind": resolved["kind"], "where": []})
        where = item["where"] + (f" for {item['for']}" if item.get("for") else "")
        if where not in entry["where"]:
            entry["where"].append(where)
    return {"inserts": dict(sorted(inserts.items())), "imports": dict(sorted(modules.items())),
            "unresolved": {k: sorted(set(v)) for k, v in sorted(unresolved.items())}}


def _looks_like_adapter(name: str) -> bool:
    head = name.split(".")[0]
    return head.lower().startswith("npu") or head.startswith("get_npu")


# ------------------------------------------------------------------------------- the model zoo


IMPORT_RE = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+([^\n#]+)|import[ \t]+([^\n#]+))",
                       re.MULTILINE)


class ZooFile:
    """The adapter bindings of one file and the dotted calls it makes."""

    def __init__(self, resolver: Resolver):
        self.resolver = resolver
        self.bindings: Dict[str, Tuple[str, List[str]]] = {}  # local name -> (imported module, chain)

    def bind_import(self, module: str, asname: Optional[str]) -> None:
        if not is_adapter(module):
            self.bindings.pop(asname or module.split(".")[0], None)  # the file's own module shadows
            return
        if asname:
            self.bindings[asname] = (module, [])
        else:
            top = module.split(".")[0]
            self.bindings[top] = (top, [])

    def bind_from(self, module: str, names: List[Tuple[str, Optional[str]]]) -> None:
        if not is_adapter(module):
            for name, asname in names:
                self.bindings.pop(asname or name, None)
            return
        for name, asname in names:
            if name == "*":
                entry = self.resolver.modules.get(module)
                for public in _star_names(entry) if entry else ():
                    self.bindings[public] = (module, [public])
                continue
            if f"{module}.{name}" in self.resolver.modules:
                self.bindings[asname or name] = (f"{module}.{name}", [])
            else:
                self.bindings[asname or name] = (module, [name])

    def call_path(self, dotted: str) -> Optional[Tuple[str, dict]]:
        parts = dotted.split(".")
        if parts[0] not in self.bindings:
            return None
        module, chain = self.bindings[parts[0]]
        chain = chain + parts[1:]
        resolved = self.resolver.resolve(module, chain)
        if resolved is not None and resolved["kind"] in ("external", "module"):
            return None
        return f"{module}:{'.'.join(chain)}", resolved


def _dotted(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def calls_in_parsed(tree: ast.Module, zoo_file: ZooFile) -> Dict[str, Optional[dict]]:
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in sorted(imports, key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                zoo_file.bind_import(alias.name, alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            zoo_file.bind_from(node.module, [(a.name, a.asname) for a in node.names])
    calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            found = zoo_file.call_path(dotted) if dotted else None
            if found:
                calls[found[0]] = found[1]
    return calls


def calls_in_text(text: str, zoo_file: ZooFile) -> Dict[str, Optional[dict]]:
    for match in IMPORT_RE.finditer(text):
        source, imported, plain = match.groups()
        if plain:
            for part in plain.split(","):
                words = part.split()
                if words:
                    zoo_file.bind_import(words[0], words[2] if len(words) == 3 and words[1] == "as" else None)
        else:
            names = []
            for part in imported.strip("() \\").split(","):
                words = part.split()
                if words:
                    names.append((words[0], words[2] if len(words) == 3 and words[1] == "as" else None))
            zoo_file.bind_from(source, names)
    calls = {}
    if not zoo_file.bindings:
        return calls
    pattern = re.compile(r"(?<![\w.])((?:%s)(?:\.[A-Za-z_]\w*)*)\s*\(" %
                         "|".join(re.escape(name) for name in sorted(zoo_file.bindings, key=len, reverse=True)))
    for match in pattern.finditer(text):
        found = zoo_file.call_path(match.group(1))
        if found:
            calls[found[0]] = found[1]
    return calls


MENTIONS = re.compile(r"npu_bridge|npu_device|\bhccl\b")


def model_zoo(repo: str, commit: str, resolver: Resolver) -> dict:
    files = python_files(repo, commit)
    texts = read_blobs(repo, files.values())
    by_path: Dict[str, set] = defaultdict(set)
    resolved_to: Dict[str, Optional[dict]] = {}
    scanned = fallback = unreadable = 0
    for path, blob in sorted(files.items()):
        text = texts.get(blob)
        if text is None:
            unreadable += 1
            continue
        if not MENTIONS.search(text):
            continue
        scanned += 1
        zoo_file = ZooFile(resolver)
        try:
            calls = calls_in_parsed(ast.parse(text), zoo_file)
        except (SyntaxError, ValueError):
            fallback += 1
            calls = calls_in_text(text, zoo_file)
        for call_path, resolved in calls.items():
            by_path[call_path].add(path)
            resolved_to[call_path] = resolved
    calls_table = {}
    definitions: Dict[str, set] = defaultdict(set)
    for call_path in sorted(by_path):
        resolved = resolved_to[call_path]
        row = {"files": len(by_path[call_path])}
        if resolved is None:
            row["missing"] = True
        else:
            row["resolves_to"] = resolved["path"]
            definitions[resolved["path"]].update(by_path[call_path])
        calls_table[call_path] = row
    return {"python_files": len(files), "files_mentioning_the_adapter": scanned,
            "parsed_by_regex": fallback, "unreadable": unreadable,
            "calls": calls_table,
            "by_definition": {d: len(f) for d, f in sorted(definitions.items())}}


# ------------------------------------------------------------------------------------ main


def build(adapter: str, model_zoo_repo: Optional[str], hcomm: Optional[str]) -> dict:
    commit = head_of(adapter, ADAPTER_BRANCH)
    modules = parse_modules(collect_sources(adapter, commit, hcomm))
    resolver = Resolver(modules)
    inherit_inits(modules, resolver)
    table = {
        "about": "The real Ascend adapter's public API, written by tools/adapter_api.py from git objects "
                 "(ast only, nothing imported); see its docstring for the method.",
        "adapter": {"repository": "Ascend/tensorflow", "branch": ADAPTER_BRANCH, "commit": commit,
                    "date": git(adapter, "show", "-s", "--format=%cI", commit).strip()},
        "modules": modules,
        "attributes": attribute_bindings(modules, resolver),
        "public": public_paths(modules, resolver),
        "vendor_tool": vendor_tool(adapter, commit, resolver),
    }
    if hcomm:
        hcomm_commit = head_of(hcomm, None)
        table["hccl"] = {"repository": "CANN hcomm (a GitHub mirror)", "commit": hcomm_commit,
                         "date": git(hcomm, "show", "-s", "--format=%cI", hcomm_commit).strip()}
    if model_zoo_repo:
        zoo_commit = head_of(model_zoo_repo, "master")
        table["model_zoo"] = dict({"repository": "Ascend/ModelZoo-TensorFlow", "branch": "master",
                                   "commit": zoo_commit}, **model_zoo(model_zoo_repo, zoo_commit, resolver))
    return table


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("adapter", help="bare mirror of Ascend/tensorflow")
    parser.add_argument("--model-zoo", help="bare mirror of Ascend/ModelZoo-TensorFlow")
    parser.add_argument("--hccl", help="mirror of CANN's hcomm (python/hccl)")
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    table = build(args.adapter, args.model_zoo, args.hccl)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(table, handle, indent=1, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    public = table["public"]
    print(f"{args.output}: {len(table['modules'])} modules, {len(public)} public names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
