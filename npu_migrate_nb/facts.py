"""Cheap facts about each cell (calls, assignments, imports, functions), from Python's ``ast``.

Facts are computed once per cell *content* and cached, so re-analysis after an edit re-parses one
cell. Rules read facts; they never parse. Facts are independent of the cell's position in the
notebook; :class:`NotebookFacts` adds positions and resolves names across cells.
"""

from __future__ import annotations

import ast
import re
import warnings
import weakref
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from typing import Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from . import ipython_syntax
from .i18n import N_, _
from .names import own_nodes, positional_parameters
from .notebook import MAX_CELL_CHARS, Notebook

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(eq=False)
class CallSite:
    node: ast.Call
    dotted: Optional[str]  # "tf.train.AdamOptimizer" when the callee is a dotted name, else None
    method: str  # the callee's last name: "AdamOptimizer", "minimize"; "" for other callees
    stmt: ast.stmt  # innermost statement that contains the call
    function: Optional[str]  # innermost enclosing function, None at module level
    receiver: Optional[ast.expr] = None  # ``x`` in ``x.method(...)``
    chained_by: Optional["CallSite"] = None  # the call made on this call's result: x.a().b()
    argument_of: Optional["CallSite"] = None  # the call that takes this call as an argument

    def keyword(self, name: str) -> Optional[ast.keyword]:
        for keyword in self.node.keywords:
            if keyword.arg == name:
                return keyword
        return None

    def argument(self, position: int, name: str) -> Optional[ast.expr]:
        """The argument given by position or by keyword, or None."""
        keyword = self.keyword(name)
        if keyword is not None:
            return keyword.value
        args = [arg for arg in self.node.args if not isinstance(arg, ast.Starred)]
        return args[position] if position < len(args) else None

    def chain(self) -> List["CallSite"]:
        """This call and the calls chained on its result, innermost first."""
        calls, current = [], self
        while current is not None:
            calls.append(current)
            current = current.chained_by
        return calls


@dataclass(eq=False)
class Assignment:
    target: str  # "ds", or a dotted target such as "self.model"
    value: ast.expr
    stmt: ast.stmt
    function: Optional[str]
    tuple_target: bool = False  # part of ``a, b = ...``


def _place_in_target(assignment: Assignment) -> Optional[int]:
    """The position of ``assignment``'s name in its flat tuple target (``a, b = ...``), else None."""
    targets = assignment.stmt.targets if isinstance(assignment.stmt, ast.Assign) else []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            for place, element in enumerate(target.elts):
                if dotted_name(element) == assignment.target:
                    return place
    return None


@dataclass(eq=False)
class ImportFact:
    local: str  # the bound name ("tf"), or "*" for a star import
    module: str  # what it stands for ("tensorflow.compat.v1")
    stmt: ast.stmt
    function: Optional[str]


T = TypeVar("T")
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
# Lines as Python's tokenizer counts them (str.splitlines also breaks at form feeds and others),
# each with its line break, so that segments keep the source's own line endings.
_LINE_BREAKS = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


@dataclass(eq=False)
class CellFacts:
    """Facts of one cell. The full scan (calls, assignments, definitions) runs on first use only:
    queries first filter cells by ``names``, a cheap superset of the identifiers in the cell."""

    masked: ipython_syntax.MaskedCell
    tree: Optional[ast.Module] = None
    # Why the cell cannot be read: (line, column, message, its values), the message in English (facts
    # are cached by content, for every language); ``error`` says it in the current language.
    unreadable_because: Optional[Tuple[int, int, str, Dict[str, object]]] = field(default=None, repr=False)
    lines: List[str] = field(default_factory=list)
    names: FrozenSet[str] = frozenset()  # every word that could be an identifier or attribute
    imports: List[ImportFact] = field(default_factory=list)
    _scanned: bool = field(default=False, repr=False)
    _calls: List[CallSite] = field(default_factory=list, repr=False)
    _calls_by_method: Dict[str, List[CallSite]] = field(default_factory=dict, repr=False)
    _assignments: Dict[str, List[Assignment]] = field(default_factory=dict, repr=False)
    _functions: Dict[str, ast.AST] = field(default_factory=dict, repr=False)
    _classes: Dict[str, ast.ClassDef] = field(default_factory=dict, repr=False)
    _nodes: Optional[Dict[type, List[ast.AST]]] = field(default=None, repr=False)
    _loads: Optional[Dict[str, List[Tuple[ast.Name, Tuple[ast.AST, ...]]]]] = field(default=None, repr=False)
    def nodes(self, *types: type) -> List[ast.AST]:
        """Every node of these types in the cell (one walk per cell: a rule that asks per call site would
        walk a 5,000-line script once per site); of one type in source order, an enclosing node before
        what it encloses."""
        if self._nodes is None:
            self._nodes = {}
            for node in _every_node(self.tree) if self.tree is not None else ():
                self._nodes.setdefault(type(node), []).append(node)
        if len(types) == 1:
            return self._nodes.get(types[0], [])
        return [node for kind in types for node in self._nodes.get(kind, [])]  # grouped by type

    def loads(self, name: str) -> List[Tuple[ast.Name, Tuple[ast.AST, ...]]]:
        """Each read of ``name`` in the cell with its ancestors, outermost first (one traversal per cell)."""
        if self._loads is None:
            self._loads = {}
            if self.tree is not None:
                _index_loads(self.tree, (), self._loads)
        return self._loads.get(name, [])

    @property
    def error(self) -> Optional[Tuple[int, int, str]]:
        """(line, column, message) when the cell cannot be read."""
        if self.unreadable_because is None:
            return None
        line, column, message, values = self.unreadable_because
        return line, column, _(message).format(**values)

    @property
    def is_python(self) -> bool:
        return self.masked.is_python

    @property
    def calls(self) -> List[CallSite]:
        self._scan()
        return self._calls

    @property
    def calls_by_method(self) -> Dict[str, List[CallSite]]:
        self._scan()
        return self._calls_by_method

    @property
    def assignments(self) -> Dict[str, List[Assignment]]:
        self._scan()
        return self._assignments

    @property
    def functions(self) -> Dict[str, ast.AST]:
        self._scan()
        return self._functions

    @property
    def classes(self) -> Dict[str, ast.ClassDef]:
        self._scan()
        return self._classes

    def _scan(self) -> None:
        if not self._scanned and self.tree is not None:
            self._scanned = True
            _Scanner(self).scan(self.tree.body, None)
            in_source_order = lambda site: (site.node.lineno, site.node.col_offset)  # noqa: E731
            self._calls.sort(key=in_source_order)
            for sites in self._calls_by_method.values():
                sites.sort(key=in_source_order)
            _link_calls(self)

    def segment(self, node: ast.AST) -> str:
        """The exact source text of ``node`` (as masked)."""
        first, last = node.lineno - 1, node.end_lineno - 1
        start, end = node.col_offset, node.end_col_offset
        if first == last:
            return self.lines[first].encode()[start:end].decode()
        parts = [self.lines[first].encode()[start:].decode()]
        parts += self.lines[first + 1:last]
        parts.append(self.lines[last].encode()[:end].decode())
        return "".join(parts)

    def char_column(self, line: int, byte_column: int) -> int:
        """``ast`` counts columns in UTF-8 bytes; people and libcst count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():  # the common case: bytes are characters
            return byte_column
        return len(text.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore"))

    def is_ipython_line(self, stmt: ast.stmt) -> bool:
        """Is ``stmt`` the placeholder of a masked IPython line (``%%time``, ``!ls``)?"""
        return isinstance(stmt, ast.Pass) and (stmt.lineno - 1) in self.masked.originals

    def start(self, node: ast.AST) -> Tuple[int, int]:
        return node.lineno, self.char_column(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> Tuple[int, int]:
        return node.end_lineno, self.char_column(node.end_lineno, node.end_col_offset)


def _every_node(root: ast.AST) -> Iterator[ast.AST]:
    """Every node, each before its children, in source order (``ast.walk`` is breadth first, and pays
    a generator per node)."""
    stack = [root]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        yield node
        extend(reversed(_children(node)))


def _children(node: ast.AST) -> List[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, without a generator per node."""
    children = []
    for name in node._fields:
        value = getattr(node, name, None)
        if type(value) is list:
            children.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            children.append(value)
    return children


def _index_loads(node: ast.AST, parents: Tuple[ast.AST, ...], index: Dict[str, list]) -> None:
    stack = [(node, parents)]
    while stack:
        current, above = stack.pop()
        if isinstance(current, ast.Name):
            if isinstance(current.ctx, ast.Load):
                index.setdefault(current.id, []).append((current, above))
            continue
        below = above + (current,)
        stack.extend((child, below) for child in reversed(_children(current)))


def once_per_object(function: Callable[[object], T]) -> Callable[[object], T]:
    """``function(x)``, computed once per ``x``: a cell's facts or a node of its tree, for what a pass
    reads from that cell, loop or function alone. Both are kept as long as the cell's facts (cached by
    content), so a re-analysis after an edit computes it for the edited cell only. ``function`` must
    read nothing else (not the notebook's other cells, nor the options)."""
    cache: "weakref.WeakKeyDictionary[object, T]" = weakref.WeakKeyDictionary()

    @wraps(function)
    def once(key: object) -> T:
        found = cache.get(key)
        if found is None:
            found = cache[key] = function(key)
        return found
    return once


@once_per_object
def _own_loops(scope: ast.AST) -> List[ast.AST]:
    """The ``for`` loops of a cell's tree or of a function, not of the functions in it."""
    return [node for node in own_nodes(scope) if isinstance(node, (ast.For, ast.AsyncFor))]


@lru_cache(maxsize=8192)
def facts_for(source: str) -> CellFacts:
    """Facts for one code cell's source (cached by content)."""
    if len(source) > MAX_CELL_CHARS:
        facts = CellFacts(ipython_syntax.MaskedCell(None))
        facts.unreadable_because = (1, 1, N_("cell too large to analyze ({count:,} characters)"), {"count": len(source)})
        return facts
    tree = _python_or_none(source) if ipython_syntax.may_have_ipython(source) else None
    # Valid Python holds no IPython syntax (a magic, ``!cmd``, ``x?`` is a syntax error at a statement's
    # start), however many lines start with ``%`` (a formatting continuation): no tokenizing to mask it.
    masked = ipython_syntax.MaskedCell(source) if tree is not None else ipython_syntax.mask(source)
    facts = CellFacts(masked)
    if not masked.is_python:
        return facts
    try:
        with warnings.catch_warnings():  # the user's invalid escapes ('\d') are theirs to hear about, not ours
            warnings.simplefilter("ignore")
            facts.tree = tree if tree is not None else ast.parse(masked.code)
    except SyntaxError as error:
        facts.unreadable_because = (error.lineno or 1, error.offset or 1, N_("syntax error: {message}"),
                                    {"message": error.msg})
        return facts
    except (ValueError, RecursionError, MemoryError) as error:
        facts.unreadable_because = (1, 1, N_("cannot parse: {error}"), {"error": str(error)})
        return facts
    facts.lines = _LINE_BREAKS.split(masked.code)
    facts.names = frozenset(_IDENTIFIER.findall(masked.code))
    facts.imports = _imports_of(facts.tree.body)
    return facts


def _python_or_none(source: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _imports_of(body: Sequence[ast.stmt]) -> List[ImportFact]:
    """Module-level imports, including those under ``if``/``try``/``with`` (cheap: no expressions)."""
    found: List[ImportFact] = []
    pending = list(body)
    while pending:
        stmt = pending.pop(0)
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                module = alias.name if alias.asname else local
                found.append(ImportFact(local, module, stmt, None))
        elif isinstance(stmt, ast.ImportFrom):
            module = ("." * stmt.level) + (stmt.module or "")
            for alias in stmt.names:
                local = "*" if alias.name == "*" else (alias.asname or alias.name)
                found.append(ImportFact(local, module if local == "*" else f"{module}.{alias.name}", stmt, None))
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            nested = list(stmt.body) + list(getattr(stmt, "orelse", [])) + list(getattr(stmt, "finalbody", []))
            for handler in getattr(stmt, "handlers", []):
                nested += handler.body
            pending[:0] = nested
    return found


class _Scanner:
    def __init__(self, facts: CellFacts):
        self.facts = facts

    def scan(self, body: Sequence[ast.stmt], function: Optional[str]) -> None:
        for stmt in body:
            self.statement(stmt, function)

    def statement(self, stmt: ast.stmt, function: Optional[str]) -> None:
        facts = self.facts
        if isinstance(stmt, _FUNCTION_NODES):
            facts._functions[stmt.name] = stmt
            for expr in stmt.decorator_list + _default_values(stmt.args):
                self.expression(expr, stmt, function)
            for inner in stmt.body:
                self.statement(inner, stmt.name)
            return
        if isinstance(stmt, ast.ClassDef):
            facts._classes[stmt.name] = stmt
            for expr in stmt.bases + stmt.keywords:
                self.expression(expr, stmt, function)
            for inner in stmt.body:
                self.statement(inner, function)
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assignment(stmt, function)
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                for item in value:
                    self.child(item, stmt, function)
            else:
                self.child(value, stmt, function)

    def child(self, node, stmt: ast.stmt, function: Optional[str]) -> None:
        if isinstance(node, ast.stmt):
            self.statement(node, function)
        elif isinstance(node, ast.excepthandler):
            if node.type is not None:
                self.expression(node.type, stmt, function)
            for inner in node.body:
                self.statement(inner, function)
        elif isinstance(node, (ast.expr, ast.withitem, ast.keyword, ast.comprehension)):
            self.expression(node, stmt, function)
        elif hasattr(ast, "match_case") and isinstance(node, ast.match_case):
            for inner in node.body:
                self.statement(inner, function)

    def expression(self, root: ast.AST, stmt: ast.stmt, function: Optional[str]) -> None:
        calls = self.facts._calls
        by_method = self.facts._calls_by_method
        for node in _walk(root):
            if type(node) is ast.Call:
                func = node.func
                receiver = func.value if type(func) is ast.Attribute else None
                method = func.attr if receiver is not None else (func.id if type(func) is ast.Name else "")
                site = CallSite(node, dotted_name(func), method, stmt, function, receiver)
                calls.append(site)
                by_method.setdefault(method, []).append(site)

    def assignment(self, stmt: ast.stmt, function: Optional[str]) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if stmt.value is None:
            return
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                for element in _unpacked(target):
                    self.bind(element, stmt.value, stmt, function, tuple_target=True)
            else:
                self.bind(target, stmt.value, stmt, function)

    def bind(self, target, value, stmt, function, tuple_target=False) -> None:
        name = dotted_name(target)
        if name is not None:
            self.facts._assignments.setdefault(name, []).append(
                Assignment(name, value, stmt, function, tuple_target)
            )


def _unpacked(target: ast.expr) -> Iterator[ast.expr]:
    """The names a tuple target binds, nested ones included: ``(x_train, y_train), _ = load_data()``."""
    for element in target.elts:
        if isinstance(element, (ast.Tuple, ast.List)):
            yield from _unpacked(element)
        else:
            yield element


_LEAF_TYPES = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop, ast.Constant, ast.Name)


def _walk(root: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` without its generator-per-node overhead, skipping nodes that hold no calls."""
    stack = [root]
    pop, push, extend = stack.pop, stack.append, stack.extend
    AST, leaves = ast.AST, _LEAF_TYPES
    while stack:
        node = pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                extend([item for item in value if isinstance(item, AST) and not isinstance(item, leaves)])
            elif isinstance(value, AST) and not isinstance(value, leaves):
                push(value)


def _default_values(arguments: ast.arguments) -> List[ast.expr]:
    return list(arguments.defaults) + [value for value in arguments.kw_defaults if value is not None]


def _link_calls(facts: CellFacts) -> None:
    by_node = {id(site.node): site for site in facts.calls}
    for site in facts.calls:
        receiver = site.receiver
        if type(receiver) is ast.Call:
            inner = by_node.get(id(receiver))
            if inner is not None:
                inner.chained_by = site
        for arg in list(site.node.args) + [keyword.value for keyword in site.node.keywords]:
            if type(arg) is ast.Call:
                inner = by_node.get(id(arg))
                if inner is not None:
                    inner.argument_of = site


def _source_position(site: CallSite) -> Tuple[int, int, int, int]:
    """Where a call starts; of calls starting at one place (``x.a().b()``), the outer one first."""
    node = site.node
    return node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset


def receiver_name(site: CallSite) -> Optional[str]:
    """``model`` for ``model.fit(...)``, ``self.model`` for ``self.model.fit(...)``."""
    if site.dotted and "." in site.dotted:
        return site.dotted.rsplit(".", 1)[0]
    return None


def chain_root_name(node: Optional[ast.AST]) -> Optional[str]:
    """``ds`` for ``ds.shuffle(8).batch(4)``: the name a chain of calls and attributes starts from."""
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def dotted_name(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a chain of attributes on a name; None for anything else."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def mentions(node: ast.AST, words: Iterable[str]) -> bool:
    """Does any name, attribute or string under ``node`` contain one of ``words``?"""
    words = tuple(words)
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            text = child.id
        elif isinstance(child, ast.Attribute):
            text = child.attr
        elif isinstance(child, ast.Constant) and isinstance(child.value, str):
            text = child.value
        else:
            continue
        if any(word in text for word in words):
            return True
    return False


# --------------------------------------------------------------------------------- across cells

_CANONICAL_PREFIXES = (
    ("tensorflow.compat.v1.", "tensorflow."),
    ("tensorflow.compat.v2.", "tensorflow."),
    ("tensorflow.python.keras.", "tensorflow.keras."),
    ("tensorflow.optimizers.", "tensorflow.keras.optimizers."),  # tf.optimizers is Keras' (TF 2)
    ("tensorflow.keras.optimizers.legacy.", "tensorflow.keras.optimizers."),
    ("tensorflow.keras.optimizers.experimental.", "tensorflow.keras.optimizers."),
    ("tf_keras.", "tensorflow.keras."),
    ("keras.", "tensorflow.keras."),
    ("horovod.tensorflow.keras.", "horovod."),
    ("horovod.tensorflow.", "horovod."),
    ("horovod.keras.", "horovod."),
    ("npu_device.compat.v1.npu_init.", "npu_bridge."),  # the TF2 adapter's copy of npu_bridge
    ("npu_device.compat.v1.", "npu_bridge."),
    ("npu_bridge.npu_init.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_config.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_estimator.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_hook.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_optimizer.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_loss_scale_optimizer.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_loss_scale_manager.", "npu_bridge."),
    ("npu_bridge.estimator.npu.npu_callback.", "npu_bridge."),
    ("npu_bridge.hccl.", "npu_bridge."),
    ("hccl.manage.api.", "npu_bridge."),
)

# The TF2 adapter's documented alias: ``import npu_device as npu``.
NPU_DEVICE_ALIAS = "npu"
# TensorFlow's own alias, read as TensorFlow where the notebook never imports it (a fix imports it
# under this name): else a second analysis, after the fix's import, would see calls the first did not.
TENSORFLOW_ALIAS = "tf"

# Adapter names that user code often calls bare, after ``from npu_bridge.npu_init import *``.
NPU_BRIDGE_NAMES = frozenset(
    {
        "npu_distributed_optimizer_wrapper",
        "npu_allreduce",
        "NPUDistributedOptimizer",
        "NPUOptimizer",
        "NPULossScaleOptimizer",
        "FixedLossScaleManager",
        "ExponentialUpdateLossScaleManager",
        "NPUBroadcastGlobalVariablesHook",
        "NPUBroadcastGlobalVariablesCallback",
        "npu_hooks_append",
        "npu_callbacks_append",
        "npu_run_config_init",
        "npu_config_proto",
        "NPURunConfig",
        "NPUEstimator",
        "NPUEstimatorSpec",
        "hccl_ops",
        "get_rank_size",
        "get_rank_id",
        "get_local_rank_id",
        "init_resource",
    }
)


KERAS_TUNER_PACKAGES = ("keras_tuner", "kerastuner")  # the second, the package's name before 1.1
# keras-tuner's tuners whose search builds and fits a Keras model per trial (its SklearnTuner fits scikit-learn's).
KERAS_TUNERS = frozenset({"RandomSearch", "BayesianOptimization", "Hyperband", "GridSearch", "Tuner"})
# Libraries whose models have a ``fit`` of their own that trains no Keras model (a notebook that compares a
# scikit-learn baseline with its Keras network): their fit is not a training call of the three steps.
OTHER_FIT_LIBRARIES = frozenset({"sklearn", "xgboost", "lightgbm", "catboost", "statsmodels", "prophet", "fbprophet",
                                 "pmdarima", "sktime", "gensim", "umap", "hdbscan", "surprise", "imblearn", "torch",
                                 "scipy", "pandas", "mlxtend", "category_encoders", "optuna"})


def canonical(name: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if name.startswith(prefix):
            return replacement + name[len(prefix):]
    if name in ("tf_keras", "keras"):  # not keras_tuner, keras_cv: packages of their own
        return "tensorflow.keras"
    return name


class NotebookFacts:
    """The facts of every analyzable cell, with names resolved across the whole notebook."""

    def __init__(self, notebook: Notebook, modules: Sequence[Tuple[int, str]] = ()):
        """``modules``: (cell index, source) of the notebook's own modules, read as more cells."""
        self.notebook = notebook
        self.cells: List[Tuple[int, CellFacts]] = []
        self.unreadable: List[Tuple[int, CellFacts]] = []
        self.aliases: Dict[str, str] = {}
        self.star_modules: List[str] = []
        for cell in notebook.code_cells:
            facts = facts_for(cell.source)
            if facts.error is not None:
                self.unreadable.append((cell.index, facts))
            elif facts.is_python:
                self.cells.append((cell.index, facts))
        self.notebook_cells = list(self.cells)
        self.cells += [(index, facts_for(source)) for index, source in modules]
        for _index, facts in self.cells:
            for fact in facts.imports:
                if fact.local == "*":
                    self.star_modules.append(fact.module)
                else:
                    self.aliases[fact.local] = fact.module
        self._resolved: Dict[str, str] = {}
        self._models_looped_over: Dict[int, List[ast.expr]] = {}  # id of a call -> what its loop gives it
        self._cells_with: Dict[str, List[Tuple[int, CellFacts]]] = {}
        self._function_of: Dict[str, Optional[Tuple[int, CellFacts, ast.AST]]] = {}  # name -> its last definition
        for entry in self.cells:
            for name in entry[1].names:
                self._cells_with.setdefault(name, []).append(entry)

    def cells_mentioning(self, name: str) -> List[Tuple[int, CellFacts]]:
        """The cells (in order) whose source contains the word ``name``."""
        return self._cells_with.get(name, [])

    # names
    def resolve(self, dotted: Optional[str]) -> str:
        """The canonical qualified name of a dotted name as written in the notebook."""
        if not dotted:
            return ""
        cached = self._resolved.get(dotted)
        if cached is not None:
            return cached
        head, _dot, rest = dotted.partition(".")
        module = self.aliases.get(head)
        if module is not None:
            qualified = module + ("." + rest if rest else "")
        elif head in NPU_BRIDGE_NAMES:
            qualified = "npu_bridge." + dotted
        elif head == NPU_DEVICE_ALIAS and rest:
            # The adapter's own alias (``import npu_device as npu``), imported where the analysis
            # cannot see it: still the adapter, or a fix would wrap its wrapper a second time.
            qualified = "npu_device." + rest
        elif head == TENSORFLOW_ALIAS and rest:
            qualified = "tensorflow." + rest
        else:
            qualified = dotted
        resolved = canonical(qualified)
        self._resolved[dotted] = resolved
        return resolved

    def alias_for(self, module: str) -> Optional[str]:
        """The local name bound to ``module`` (e.g. "tf" for tensorflow), if any."""
        for local, target in self.aliases.items():
            if target == module:
                return local
        return None

    def imports_module(self, prefix: str) -> bool:
        if any(target == prefix or target.startswith(prefix + ".") for target in self.aliases.values()):
            return True
        return any(module == prefix or module.startswith(prefix + ".") for module in self.star_modules)

    def made_by_another_library(self, name: Optional[str], function: Optional[str] = None) -> bool:
        """Is ``name`` last bound (in ``function``, where the call is, else at a cell's top level) to an
        object made by an imported library that is not TensorFlow or Keras (``Perceptron()`` from
        scikit-learn, an XGBoost model)? Its ``fit`` trains no Keras model: nothing of the three steps
        applies to it."""
        if not name or "." in name:
            return False
        bound = [a for _cell, _facts, a in self.assignments(name) if not a.tuple_target]
        values = [a.value for a in bound if a.function == function] or [a.value for a in bound if a.function is None]
        return bool(values) and self._another_librarys_object(values[-1])

    def _another_librarys_object(self, value: ast.expr) -> bool:
        if not isinstance(value, ast.Call):
            return False
        written = dotted_name(value.func)
        if not written or written.partition(".")[0] not in self.aliases:
            return False  # the notebook's own class or function, or a name it did not import
        return self.resolve(written).partition(".")[0] in OTHER_FIT_LIBRARIES

    def models_looped_over(self, facts: "CellFacts", site: CallSite) -> List[ast.expr]:
        """The models a ``for`` loop around ``site`` gives its receiver, when the loop walks models
        written out: ``for model in [a, b]``, ``for j, model in enumerate(models)`` with ``models = [...]``,
        ``for name, model in {...}.items()``. Empty when the receiver is no such loop's target."""
        found = self._models_looped_over.get(id(site.node))
        if found is None:
            found = self._models_looped_over[id(site.node)] = self._find_models_looped_over(facts, site)
        return found

    def _find_models_looped_over(self, facts: "CellFacts", site: CallSite) -> List[ast.expr]:
        receiver = receiver_name(site)
        if not receiver or "." in receiver or facts.tree is None:
            return []
        scope = facts.tree if site.function is None else facts.functions.get(site.function)
        loops = [node for node in _own_loops(scope)
                 if node.lineno <= site.node.lineno <= node.end_lineno] if scope is not None else []
        for loop in sorted(loops, key=lambda node: node.lineno, reverse=True):  # the innermost first
            values = self._loop_values(loop, receiver, site.function)
            if values is not None:
                return values
        return []

    def _loop_values(self, loop: ast.For, name: str, function: Optional[str]) -> Optional[List[ast.expr]]:
        """What ``loop`` binds ``name`` to, one expression per round, if written out (None: ``name`` is
        not its target; [] when the rounds cannot be read)."""
        target, walked = loop.target, loop.iter
        if isinstance(walked, ast.Call) and dotted_name(walked.func) == "enumerate" and walked.args:
            if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                return None
            target, walked = target.elts[1], walked.args[0]
        items = isinstance(walked, ast.Call) and isinstance(walked.func, ast.Attribute) and walked.func.attr in ("items", "values")
        if items and walked.func.attr == "items":
            if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                return None
            target = target.elts[1]
        if not (isinstance(target, ast.Name) and target.id == name):
            return None
        walked = walked.func.value if items else walked
        added: List[ast.expr] = []
        if isinstance(walked, ast.Name):
            bound = [a.value for _cell, _facts, a in self.assignments(walked.id) if not a.tuple_target
                     and a.function in (function, None)]
            added = self._appended_to(walked.id, function) if bound and isinstance(bound[-1], ast.List) else []
            walked = bound[-1] if bound else walked
        if items and isinstance(walked, ast.Dict):
            return list(walked.values)
        if not items and isinstance(walked, (ast.List, ast.Tuple)):
            return list(walked.elts) + added
        return []

    def _appended_to(self, name: str, function: Optional[str]) -> List[ast.expr]:
        """What ``name.append(x)`` and ``name.extend([x, ...])`` add to a list, in the same scope."""
        added: List[ast.expr] = []
        for _cell, _facts, site in self.calls("append", "extend"):
            if receiver_name(site) != name or site.function not in (function, None) or not site.node.args:
                continue
            given = site.node.args[0]
            if site.method == "append":
                added.append(given)
            elif isinstance(given, (ast.List, ast.Tuple)):
                added += given.elts
        return added

    def another_librarys_model(self, model: ast.expr, function: Optional[str]) -> bool:
        """Is ``model`` (a loop's round) made by another library, in place or under a name?"""
        if isinstance(model, ast.Name):
            return self.made_by_another_library(model.id, function)
        return self._another_librarys_object(model)

    def keras_fits(self, *methods: str) -> Iterator[Tuple[int, CellFacts, CallSite]]:
        """``calls(*methods)`` but those on a model another library made (scikit-learn's ``fit``). When
        ``fit`` is asked, a keras-tuner tuner's ``search`` comes too: it passes its arguments to the
        ``fit`` of every trial's model (rules that name the model check ``site.method``)."""
        searches = ("search",) if "fit" in methods and "search" not in methods else ()
        for found in self.calls(*methods, *searches):
            receiver = receiver_name(found[2])
            if found[2].method == "search" and searches:
                if self.is_a_tuner(receiver):
                    yield found
            elif searches and self.in_a_tuner_class(found[1], found[2]):
                continue  # a trial's fit: the search that reaches it gives its data and callbacks
            elif not self.made_by_another_library(receiver, found[2].function) and not self.fits_other_libraries(found):
                yield found

    def fits_other_libraries(self, found: Tuple[int, "CellFacts", CallSite]) -> bool:
        """Is this fit in a loop over models one of which another library made (scikit-learn's
        beside a Keras wrapper)? Its arguments go to every one of them: a Keras-only fix breaks the others."""
        _cell, facts, site = found
        return any(self.another_librarys_model(model, site.function) for model in self.models_looped_over(facts, site))

    def in_a_tuner_class(self, facts: "CellFacts", site: CallSite) -> bool:
        """Is the call in a method of the notebook's subclass of a keras-tuner class (a HyperModel's
        ``fit``, a Tuner's ``run_trial``), which the search calls with its own arguments?"""
        if site.function is None:
            return False
        return any(
            definition.lineno <= site.node.lineno <= definition.end_lineno
            and any(self.resolve(dotted_name(base)).partition(".")[0] in KERAS_TUNER_PACKAGES for base in definition.bases)
            for definition in facts.classes.values()
        )

    def is_a_tuner(self, name: Optional[str]) -> bool:
        """Is ``name`` last bound (at a cell's top level) to a keras-tuner tuner that trains Keras models
        (``kt.Hyperband(...)``, or the notebook's subclass of one), not to scikit-learn's tuner?"""
        if not name or "." in name:
            return False
        values = [a.value for _cell, _facts, a in self.assignments(name) if a.function is None and not a.tuple_target]
        return bool(values) and isinstance(values[-1], ast.Call) and self.tuner_class(dotted_name(values[-1].func))

    def tuner_class(self, written: Optional[str], depth: int = 3) -> bool:
        """Is the class written ``written`` one of keras-tuner's Keras tuners, or a subclass of one the
        notebook defines?"""
        if not written or depth == 0:
            return False
        package, _dot, rest = self.resolve(written).partition(".")
        if package in KERAS_TUNER_PACKAGES:
            return rest.rsplit(".", 1)[-1] in KERAS_TUNERS
        for _cell, facts in self.cells_mentioning(written):
            definition = facts.classes.get(written)
            if definition is not None:
                return any(self.tuner_class(dotted_name(base), depth - 1) for base in definition.bases)
        return False

    # queries
    def calls(self, *methods: str) -> Iterator[Tuple[int, CellFacts, CallSite]]:
        """Calls of these methods or functions, in notebook order: by cell, then by position in the
        cell, whatever the order of ``methods`` (callers pass sets, whose order of strings changes
        with PYTHONHASHSEED; rules take the first or the last call they meet, so the order of the
        calls must be the source's own)."""
        methods = tuple(dict.fromkeys(methods))
        if len(methods) == 1:
            cells = self.cells_mentioning(methods[0])
        else:
            seen = {index: facts for method in methods for index, facts in self.cells_mentioning(method)}
            cells = sorted(seen.items(), key=lambda entry: entry[0])
        for index, facts in cells:
            by_method = facts.calls_by_method
            if len(methods) == 1:
                sites = by_method.get(methods[0], ())
            else:
                sites = sorted(
                    (site for method in methods for site in by_method.get(method, ())), key=_source_position
                )
            for site in sites:
                yield index, facts, site

    def calls_to(self, *qualified: str) -> Iterator[Tuple[int, CellFacts, CallSite]]:
        """Calls whose callee resolves to one of ``qualified`` (canonical names), in notebook order."""
        wanted = frozenset(qualified)
        methods = sorted({name.rsplit(".", 1)[-1] for name in wanted})
        for index, facts, site in self.calls(*methods):
            if self.resolve(site.dotted) in wanted:
                yield index, facts, site

    def assignments(self, name: str) -> Iterator[Tuple[int, CellFacts, Assignment]]:
        for index, facts in self.cells_mentioning(name.rsplit(".", 1)[-1]):
            for assignment in facts.assignments.get(name, ()):
                yield index, facts, assignment

    def bound_before(self, name: str, cell: int, line: int, function: Optional[str]) -> Optional[ast.expr]:
        """The value ``name`` was last bound to at or before (cell, line), in ``function``'s scope
        (None: a cell's top level); a tuple target's part is not known."""
        bound = [(index, a.stmt.lineno, a.value) for index, _facts, a in self.assignments(name)
                 if a.function == function and not a.tuple_target and (index, a.stmt.lineno) <= (cell, line)]
        return max(bound, key=lambda item: item[:2])[2] if bound else None

    def held_value(self, assignment: Assignment, depth: int = 2) -> ast.expr:
        """What ``assignment`` binds its target to, seen through a call of the notebook's own
        function: ``..., saver = build(X, y)`` holds the part of ``build``'s last ``return`` at the
        target's place (``return ..., saver``), followed to the function's own binding of it
        (``saver = tf.train.Saver()``). The assignment's value when that is not known."""
        call = assignment.value
        returns = self.returned_values(call) if depth > 0 else None
        if not returns:
            return call
        returned = returns[-1]
        if assignment.tuple_target:
            place = _place_in_target(assignment)
            if place is None or not isinstance(returned, ast.Tuple) or place >= len(returned.elts):
                return call
            returned = returned.elts[place]
        bound = self.local_binding(call, returned)
        if bound is not None:
            return self.held_value(bound, depth - 1)
        return call if isinstance(returned, ast.Name) else returned

    def returned_values(self, call: ast.expr) -> Optional[List[ast.expr]]:
        """The value of each ``return`` of the notebook function ``call`` calls, in order (None: not
        a call of a function the notebook defines)."""
        helper = self._called_function(call)
        if helper is None:
            return None
        return [node.value for node in ast.walk(helper[1]) if isinstance(node, ast.Return) and node.value is not None]

    def local_binding(self, call: ast.expr, value: ast.expr) -> Optional[Assignment]:
        """The last binding, inside the function ``call`` calls, of the name ``value`` it returns."""
        helper = self._called_function(call)
        if helper is None or not isinstance(value, ast.Name):
            return None
        helper_facts, function = helper
        bound = [a for a in helper_facts.assignments.get(value.id, ()) if a.function == function.name]
        return bound[-1] if bound else None

    def returned_through_bindings(self, call: ast.expr, value: ast.expr) -> ast.expr:
        """``value`` returned by the function ``call`` calls, a name it binds read as what it binds."""
        bound = self.local_binding(call, value)
        return value if bound is None else bound.value

    def _called_function(self, call: ast.expr) -> Optional[Tuple[CellFacts, ast.AST]]:
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            return self.instance_method(call.func.value.id, call.func.attr)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return None
        found = self.function(call.func.id)
        if found is None or not isinstance(found[2], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        return found[1], found[2]

    def called_function(self, call: ast.expr) -> Optional[Tuple[CellFacts, ast.AST, List[str]]]:
        """The notebook's (or a module's) function ``call`` calls, with the parameters the call's
        positional arguments fill: ``f(x)`` of ``def f(x)``, or ``data.batch(32)`` of a method of the
        class ``data`` is an instance of (``self`` is not given by the call)."""
        found = self._called_function(call)
        if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        parameters = positional_parameters(found[1])
        return found[0], found[1], parameters[1:] if isinstance(call.func, ast.Attribute) else parameters

    def instance_method(self, name: str, method: str) -> Optional[Tuple[CellFacts, ast.AST]]:
        """The method ``method`` of the class the top-level name ``name`` is always an instance of
        (``data = MNIST(...)`` of ``class MNIST`` in the notebook or a module beside it), defined in the
        class's own body."""
        classes = [self._class_called(a.value) for _i, _f, a in self.assignments(name)
                   if a.function is None and not a.tuple_target]
        if not classes or None in classes or len({id(cls) for _facts, cls in classes}) != 1:
            return None
        facts, cls = classes[0]
        found = next((node for node in cls.body
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == method), None)
        if found is None or any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                                for d in found.decorator_list):
            return None
        return facts, found

    def _class_called(self, value: ast.expr):
        """(facts, class) of ``Name(...)`` when ``Name`` is a class the notebook or a module defines."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
            return None
        found = None
        for _index, facts in self.cells_mentioning(value.func.id):
            cls = facts.classes.get(value.func.id)
            if cls is not None:
                found = (facts, cls)
        return found

    def function(self, name: str) -> Optional[Tuple[int, CellFacts, ast.AST]]:
        if name in self._function_of:
            return self._function_of[name]
        found = None
        for index, facts in self.cells_mentioning(name):
            if name in facts.functions:
                found = (index, facts, facts.functions[name])
        self._function_of[name] = found
        return found

    def given_to_parameter(self, function: ast.AST, name: str, parameter: str
                           ) -> Iterator[Tuple[int, CellFacts, CallSite, ast.expr]]:
        """What each call of the notebook's function ``name`` (defined as ``function``) gives its
        ``parameter`` (by position or keyword), in notebook order; calls that leave it out are not told."""
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        positional = positional_parameters(function)
        if parameter not in positional and parameter not in [a.arg for a in function.args.kwonlyargs]:
            return
        for index, facts, call in self.calls(name):
            if not isinstance(call.node.func, ast.Name) or call.node.func.id != name:
                continue
            if parameter in positional:
                given = call.argument(positional.index(parameter), parameter)
            else:
                keyword = call.keyword(parameter)
                given = keyword.value if keyword is not None else None
            if given is not None:
                yield index, facts, call, given

    def uses_name(self, name: str) -> bool:
        return name in self._cells_with

    def all_calls(self, mentioning: Optional[str] = None) -> Iterable[Tuple[int, CellFacts, CallSite]]:
        for index, facts in self.cells if mentioning is None else self.cells_mentioning(mentioning):
            for site in facts.calls:
                yield index, facts, site
