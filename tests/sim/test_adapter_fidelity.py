"""The stand-ins held against the real adapter's table (``sim/adapter/real_api.json``, written by
``tools/adapter_api.py`` from the adapter's source): every public name of a stand-in exists at the
same dotted path on the real adapter, is the same kind of thing, re-exports the same definition and
has the same signature (names, kinds, order, defaults); and everything the vendor's tool inserts and
every adapter API five or more ModelZoo files call exists in the stand-ins. No cluster needed."""

import ast
import importlib
import inspect
import json
import os
import pkgutil
import textwrap

import pytest

from npu_migrate_nb.sim import adapter

pytestmark = pytest.mark.sim

with open(os.path.join(adapter.ADAPTER_DIR, "real_api.json"), encoding="utf-8") as stream:
    TABLE = json.load(stream)
MODULES, PUBLIC = TABLE["modules"], TABLE["public"]
ZOO_MINIMUM_FILES = 5

# Stand-ins whose signature deliberately differs from the real one, and why.
DELIBERATE_SIGNATURES = {
    "npu_bridge.estimator.npu.npu_strategy.NPUExtended._experimental_distribute_dataset":
        "private; TensorFlow 2.15 passes options",
}

# What the vendor's tool writes that resolves nowhere in the adapter, and why the stand-ins lack it too.
NOT_IN_THE_ADAPTER = {
    "npu_session_config_init": "the mapping files' Session() entry names it, but the adapter removed it in 2021 "
                               "(7be0a27b) and the tool's code writes npu_config_proto for sessions",
    "npu.train.optimizer.NpuExperimentalLossScaleOptimizer": "the v2 mapping's text; npu.train.optimizer exports "
                                                             "only NpuLossScaleOptimizer, and the tool's code imports "
                                                             "this one from its module",
}

# The build copies npu_bridge to npu_device.compat.v1; the stand-ins re-export npu_bridge's there.
COMPAT_COPY = ("npu_device.compat.v1.", "npu_bridge.")


@pytest.fixture(scope="module")
def stand_ins():
    was_enabled = adapter.is_enabled()
    assert adapter.enable(), "a real Ascend adapter is installed: the stand-ins stay off"
    modules = {}
    for package in adapter.STAND_IN_PACKAGES:
        root = importlib.import_module(package)
        modules[package] = root
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            modules[info.name] = importlib.import_module(info.name)
    yield modules
    if not was_enabled:
        adapter.disable()


def _public_names(module):
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if inspect.ismodule(value) and value.__name__ == f"{module.__name__}.{name}":
            continue  # a submodule bound by importing it
        yield name, value


def _definition(path):
    module, _, name = path.rpartition(".")
    return MODULES[module]["names"][name]


def _canonical(path):
    return COMPAT_COPY[1] + path[len(COMPAT_COPY[0]):] if path.startswith(COMPAT_COPY[0]) else path


def _class_methods(path):
    """The real class's methods, its adapter bases' included (what it inherits from TensorFlow is
    not in the table)."""
    definition, module = _definition(path), path.rpartition(".")[0]
    methods = dict(definition["methods"])
    for base in definition["bases"]:
        resolved = PUBLIC.get(f"{module}:{base}") or _resolve_in(module, base)
        if resolved and resolved["kind"] == "class":
            methods = {**_class_methods(resolved["path"]), **methods}
    return methods


def _resolve_in(module, dotted):
    head, _, rest = dotted.partition(".")
    bound = PUBLIC.get(f"{module}:{head}")
    if bound is None or not rest:
        return bound
    if bound["kind"] == "module":
        return _resolve_in(bound["path"], rest)
    return None


def _source_defaults(function):
    """parameter name -> its default's source text, from the stand-in's own source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return {}
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    args = node.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return {a.arg: ast.unparse(d) for a, d in pairs}


def _same_default(real_text, stand_in_value, stand_in_text):
    try:
        value = ast.literal_eval(real_text)
    except ValueError:
        return stand_in_text is not None and _normalised(stand_in_text) == _normalised(real_text)
    return type(value) is type(stand_in_value) and value == stand_in_value


def _normalised(text):
    """``tf.train.Optimizer.GATE_OP`` is ``tf.compat.v1.train.Optimizer.GATE_OP`` under TensorFlow 2."""
    return ast.unparse(ast.parse(text)).replace("tf.compat.v1.", "tf.")


def signature_differences(real_params, function):
    stand_in = list(inspect.signature(function).parameters.values())
    real = [(p["name"], p["kind"]) for p in real_params]
    if [(p.name, p.kind.name) for p in stand_in] != real:
        return [f"parameters {[(p.name, p.kind.name) for p in stand_in]} != {real}"]
    texts = _source_defaults(function)
    differences = []
    for real_param, param in zip(real_params, stand_in):
        has_default = param.default is not inspect.Parameter.empty
        if ("default" in real_param) != has_default:
            differences.append(f"{param.name}: default {param.default!r} against {real_param.get('default')}")
        elif has_default and not _same_default(real_param["default"], param.default, texts.get(param.name)):
            differences.append(f"{param.name}={param.default!r} against {real_param['default']}")
    return differences


def check_name(module_name, name, value):
    """The differences of one public stand-in name from the real adapter's (empty: faithful)."""
    real = PUBLIC.get(f"{module_name}:{name}")
    if real is None:
        return [f"{module_name}:{name} does not exist on the real adapter"]
    kind = real["kind"]
    if kind == "module":
        return [] if inspect.ismodule(value) else [f"is a module on the adapter, not {type(value).__name__}"]
    if kind == "external":
        return []
    if kind in ("function", "class"):
        expected = _canonical(real["path"])
        actual = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
        if actual != expected:
            return [f"is {actual}, the adapter's is {expected}"]
    if kind == "function":
        return signature_differences(_definition(real["path"])["params"], value)
    if kind == "class":
        return class_differences(real["path"], value)
    return []


def _defined_in(cls, member):
    """A method the stand-in's class body defines (not an Enum's or a base's machinery)."""
    function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    return inspect.isfunction(function) and function.__qualname__.startswith(cls.__qualname__ + ".")


def class_differences(path, cls):
    definition = _definition(path)
    real_methods = _class_methods(path)
    differences = []
    init = definition["methods"].get("__init__") or definition["methods"].get("__new__")
    if init is None and definition.get("init_from"):
        init = _definition(definition["init_from"])["methods"]["__init__"]
    own = {name: member for name, member in vars(cls).items() if _defined_in(cls, member)
           and (not name.startswith("_") or name in ("__init__", "__new__", "__call__", "__enter__", "__exit__",
                                                     "__getattr__"))}
    for name, member in own.items():
        qualified = f"{path}.{name}"
        if qualified in DELIBERATE_SIGNATURES or name in ("__doc__", "__module__", "__qualname__"):
            continue
        if name not in real_methods and not (name in ("__init__", "__new__") and init):
            if callable(member) or isinstance(member, property):
                differences.append(f"{name} is not a method of the adapter's class")
            continue
        function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if not callable(function):
            continue
        real_params = (init if name in ("__init__", "__new__") and init else real_methods[name])["params"]
        differences += [f"{name}: {d}" for d in signature_differences(real_params, function)]
    return differences


def test_the_table_is_of_the_adapter_commit_the_stand_ins_follow():
    assert TABLE["adapter"]["commit"] == "085a7b2e7feac20dae2e3371fe08ea34296ea9fc"
    assert TABLE["model_zoo"]["commit"] == "a2c3332a6cea24b56ab936a746b994c89c8fc7f8"
    assert len(PUBLIC) > 1000 and "npu_device._api.distribute:all_reduce" in PUBLIC


def test_every_public_stand_in_name_is_the_real_adapters_with_its_signature(stand_ins):
    differences = {}
    for module_name, module in stand_ins.items():
        for name, value in _public_names(module):
            found = check_name(module_name, name, value)
            if found:
                differences[f"{module_name}:{name}"] = found
    assert not differences, json.dumps(differences, indent=1)


def _reach(path):
    """What ``module:attr.chain`` is in the stand-ins (import the module, then the attributes)."""
    module_name, _, chain = path.partition(":")
    value = importlib.import_module(module_name)
    for part in filter(None, chain.split(".")):
        value = getattr(value, part)
    return value


def _missing(paths):
    missing = []
    for path in paths:
        try:
            _reach(path)
        except (ImportError, AttributeError) as error:
            missing.append(f"{path}: {type(error).__name__}: {error}")
    return missing


def test_everything_the_vendors_tool_inserts_exists(stand_ins):
    tool = TABLE["vendor_tool"]
    assert "npu_device.distribute.npu_callbacks:npu_broadcast_scope_wrapper" in tool["inserts"]
    assert not _missing(list(tool["inserts"]) + [f"{m}:" for m, e in tool["imports"].items() if e["exists"]])
    assert set(tool["unresolved"]) == set(NOT_IN_THE_ADAPTER), tool["unresolved"]
    for name in NOT_IN_THE_ADAPTER:
        assert _missing([f"npu_bridge.npu_init:{name}", f"npu_device:{name.partition('npu.')[2]}"]), name


def test_every_adapter_api_five_model_zoo_files_call_exists(stand_ins):
    calls = TABLE["model_zoo"]["calls"]
    wanted = sorted(path for path, row in calls.items() if row["files"] >= ZOO_MINIMUM_FILES and "resolves_to" in row)
    assert len(wanted) > 80
    assert calls["npu_bridge.npu_init:NPULossScaleOptimizer"]["files"] >= 100
    assert not _missing(wanted)


def test_the_simulator_only_names_are_gone_from_the_adapters_paths(stand_ins):
    gone = ["npu_device:distribute.npu_callbacks_append", "npu_device:distribute.NPUBroadcastGlobalVariablesCallback",
            "npu_device:distribute.broadcast_keras_model", "npu_device:close", "npu_device:global_npu_ctx",
            "npu_device:Config", "npu_device:never_nested_function",
            "npu_bridge.estimator.npu.npu_optimizer:average_gradients", "npu_bridge.npu_init:npu_session_config_init"]
    assert len(_missing(gone)) == len(gone)
    assert not _missing(["npu_device.distribute.hccl:npu_callbacks_append",
                         "npu_device.distribute.npu_callbacks:broadcast_keras_model",
                         "npu_device.npu_device:global_npu_ctx", "npu_device.npu_device:close"])
