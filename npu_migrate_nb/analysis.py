"""Whole-notebook analysis: facts of every cell, the notebook's framework and adapter, then rules.

``analyze`` is the one entry point the doors (CLI, magic, server) call. It never imports
TensorFlow and re-parses only cells whose content changed since the last call.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import knowledge as K
from .facts import CallSite, NotebookFacts, dotted_name, receiver_name
from .findings import STEPS, CellError, Finding, sort_key, unique
from .i18n import N_, _
from .notebook import Notebook
from .modules import MAX_MODULES, ProjectModules, project_modules
from .ranks import has_rank_shard
from .tf_mode import TF2, Mode, tensorflow_mode


BROADCAST_STYLES = ("hooks-append", "hook")
# Findings that mean their step is not done although its API is called: a broadcast of a model that
# has no variables yet syncs nothing.
STEP_UNDONE_BY = frozenset({"broadcast-before-build"})
REDUCTIONS = ("sum", "mean")
# A step's status. ``not-applicable`` and ``unknown`` always come with a reason (``Analysis.reasons``):
# ``unknown`` when what would do the step comes from code that cannot be seen (an installed package, a
# missing file), so that the analyzer neither claims the step nor reports it missing.
STATUSES = ("present", "missing", "not-applicable", "unknown")
# The TensorFlow mode's reason for a notebook in another language (said with ``_`` where it is made).
NOT_PYTHON_MODE_REASON = N_("not a Python notebook")


@dataclass
class Options:
    ranks: int = 8  # rank count literal batch sizes are checked against
    broadcast_style: str = "hooks-append"  # or "hook": NPUBroadcastGlobalVariablesHook appended
    reduction: Optional[str] = None  # "sum" | "mean" for custom-loop all-reduces; None: from the loss
    # In a kernel, the cell being run; the others have run already, so a fix that can go in this
    # cell or an earlier one goes in this one.
    current_cell: Optional[int] = None
    # Where the notebook's own modules are looked up; None: the notebook's folder (or the working
    # directory for a notebook without a file, as in a kernel).
    base: Optional[str] = None
    paths_from: Optional[str] = None  # module paths are shown relative to this (default: working directory)
    # The project's root (project.py): modules are also looked up from it, as Python does with the root
    # on its path; None: the notebook's folder alone.
    root: Optional[str] = None
    max_modules: int = MAX_MODULES  # the command line reads up to modules.MAX_PROJECT_MODULES


@dataclass
class Analysis:
    path: str
    language: str
    framework: str  # "estimator" | "keras" | "custom-loop" | "tf-agents" | "decision-forests" | "learning-rule" | "mixed" | "none"
    adapter: Optional[str]  # "npu_bridge" | "npu_device" | None
    steps: Dict[str, str]  # step -> one of STATUSES
    findings: List[Finding] = field(default_factory=list)
    errors: List[CellError] = field(default_factory=list)
    python: bool = True
    reasons: Dict[str, str] = field(default_factory=dict)  # step -> why it is not-applicable or unknown
    context: Optional["Context"] = field(default=None, repr=False, compare=False)
    # Which TensorFlow the code is written for (tf_mode.py): the adapter follows it, and the simulator
    # runs its ranks in it.
    mode: Mode = field(default=Mode(TF2, NOT_PYTHON_MODE_REASON), compare=False)

    @property
    def tf1(self) -> bool:
        return self.mode.tf1

    @property
    def problems(self) -> List[Finding]:
        """Findings that make ``check`` fail: errors and warnings (infos only inform)."""
        return [finding for finding in self.findings if finding.severity != "info"]

    def to_json(self) -> Dict[str, object]:
        return {
            "path": self.path,
            "language": self.language,
            "framework": self.framework,
            "adapter": self.adapter,
            "mode": self.mode.name,
            "mode_reason": self.mode.reason,
            "steps": dict(self.steps),
            "reasons": dict(self.reasons),
            "findings": [finding.to_json() for finding in self.findings],
            "errors": [error.to_json() for error in self.errors],
        }


class Context:
    """What every rule needs to know about the notebook, computed once per analysis."""

    def __init__(self, facts: NotebookFacts, options: Options, modules: Optional[ProjectModules] = None):
        self.facts = facts
        self.options = options
        self.modules = modules or ProjectModules([], {})
        self.module_at = self.modules.by_index()  # cell index -> the project module read as that cell
        self.frameworks = _frameworks(facts)
        self.framework = _framework_name(self.frameworks)
        self.mode = tensorflow_mode(facts, self.frameworks)
        self.tf1 = self.mode.tf1
        self.adapter = _adapter(facts, self.frameworks, self.mode)
        self.steps = _steps(facts, self)
        self.reasons: Dict[str, str] = {}
        if self.framework == "none":
            reason = _("no training in this notebook")
            self.reasons = {step: reason for step in STEPS}
        self.npu = facts.alias_for("npu_device") or "npu"
        self.tf = facts.alias_for("tensorflow") or facts.alias_for("tensorflow.compat.v1") or "tf"
        self.findings: List[Finding] = []  # filled rule by rule; later rules may read earlier ones
        self.shard_fix_splits_batch = False  # set by missing-shard when its fix splits the global batch

    def uses(self, *qualified: str) -> bool:
        return next(self.facts.calls_to(*qualified), None) is not None

    def mark(self, step: str, status: str, reason: str) -> None:
        """Say that ``step`` is ``not-applicable`` or ``unknown``, and why (a rule's ``prepare``
        does this before any rule checks, so the missing-step rules stay quiet)."""
        assert status in ("not-applicable", "unknown"), status
        if self.steps.get(step) == "missing":
            self.steps[step] = status
            self.reasons[step] = reason


def analyze(notebook: Notebook, options: Optional[Options] = None) -> Analysis:
    from .rules import ALL_RULES

    options = options or Options()
    if not notebook.is_python:
        reason = _("not a Python notebook ({language})").format(language=notebook.language)
        return Analysis(
            notebook.path, notebook.language, "none", None, _not_applicable(), python=False,
            reasons={step: reason for step in STEPS}, mode=Mode(TF2, _(NOT_PYTHON_MODE_REASON)),
        )
    modules = project_modules(notebook, options.base, options.paths_from, options.root, options.max_modules)
    facts = NotebookFacts(notebook, [(module.index, module.source) for module in modules.found])
    context = Context(facts, options, modules)
    for rule in ALL_RULES:
        rule.prepare(context)
    for rule in ALL_RULES:
        context.findings.extend(rule.check(context))
    for finding in context.findings:
        if finding.code == f"missing-{finding.step}" or finding.code in STEP_UNDONE_BY:
            context.steps[finding.step] = "missing"  # e.g. one of two training calls does not broadcast
            context.reasons.pop(finding.step, None)
    for finding in context.findings:
        module = context.module_at.get(finding.cell)
        if module is not None:
            finding.path = module.path
    if notebook.kind == "script":
        _at_file_lines(notebook, context.findings)
    findings = sorted(unique(context.findings), key=sort_key)
    errors = [CellError(index, *cell.error) for index, cell in facts.unreadable]
    return Analysis(
        notebook.path, notebook.language, context.framework, context.adapter, context.steps, findings, errors,
        reasons=context.reasons, context=context, mode=context.mode,
    )


def _at_file_lines(script: Notebook, findings: List[Finding]) -> None:
    """A script's findings name the file and its lines (its ``# %%`` cells are the analyzer's, not
    the person's); their edits keep their cells."""
    first_line, line = {}, 1
    for cell in script.cells:
        first_line[cell.index] = line
        line += cell.source.count("\n")
    for finding in findings:
        if finding.path is None and finding.cell in first_line:
            offset = first_line[finding.cell] - 1
            finding.path, finding.line, finding.end_line = script.path, finding.line + offset, finding.end_line + offset


def _not_applicable() -> Dict[str, str]:
    return {step: "not-applicable" for step in STEPS}


# ------------------------------------------------------------------------------ framework, adapter


def _frameworks(facts: NotebookFacts) -> List[str]:
    from .learning_rules import LEARNING_RULE, rule_updates
    from .rules.not_data_parallel import trained_agents, trains_only_decision_forests

    found = []
    forests_only = trains_only_decision_forests(facts)
    if any(facts.calls_to(*K.ESTIMATORS)) or any(facts.calls_to(K.TRAIN_AND_EVALUATE)):
        found.append("estimator")
    if _has_keras_fit(facts) and not forests_only:
        found.append("keras")
    if any(facts.calls_to(K.GRADIENT_TAPE)) or _has_session_training(facts):
        found.append("custom-loop")
    if forests_only:
        found.append("decision-forests")  # Keras models whose fit grows trees: no gradient step
    if trained_agents(facts):
        found.append("tf-agents")  # agent.train(experience) takes the gradient step inside TF-Agents
    if rule_updates(facts):
        found.append(LEARNING_RULE)  # parameters updated by a rule the notebook writes (an RBM's)
    return found


def _has_keras_fit(facts: NotebookFacts) -> bool:
    """A fit (or fit_generator) on a compiled model: compiled under its own name, returned by a
    function that compiles it (``model = create_model()``, also from a module), or a loop variable
    over models compiled and collected in a list."""
    compiles = [site for _cell, _facts, site in facts.calls("compile")]
    compiled = {receiver_name(site) for site in compiles} - {None}
    if not compiled:
        return False
    factories = {site.function for site in compiles} - {None}
    for _cell, cell_facts, site in facts.keras_fits(*K.KERAS_FIT_METHODS):
        receiver = receiver_name(site)
        if receiver is None or receiver in compiled or _made_by(facts, receiver, factories) or site.method == "search":
            return True
        if _loop_variable(cell_facts, site, receiver) and _collected(facts, compiled):
            return True
    return False


def _made_by(facts: NotebookFacts, name: str, factories) -> bool:
    """Is ``name`` assigned the result of a call to one of ``factories`` (``module.f()`` too)?"""
    return any(
        isinstance(assignment.value, ast.Call)
        and (dotted_name(assignment.value.func) or "").rsplit(".", 1)[-1] in factories
        for _cell, _facts, assignment in facts.assignments(name)
    )


def _loop_variable(cell_facts, site: CallSite, name: str) -> bool:
    """Is ``name`` the target of a ``for`` loop around this call?"""
    return any(
        isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == name
        and node.lineno <= site.node.lineno <= node.end_lineno
        for node in ast.walk(cell_facts.tree)
    )


def _collected(facts: NotebookFacts, compiled) -> bool:
    """Is a compiled model appended to a list (``models.append(model)``)?"""
    return any(
        len(site.node.args) == 1 and isinstance(site.node.args[0], ast.Name) and site.node.args[0].id in compiled
        for _cell, _facts, site in facts.calls("append")
    )


def _has_session_training(facts: NotebookFacts) -> bool:
    sessions = ("tensorflow.Session", "tensorflow.train.MonitoredTrainingSession", "tensorflow.InteractiveSession")
    return any(facts.calls_to(*sessions)) and any(facts.calls("minimize", "apply_gradients"))


def _framework_name(frameworks: List[str]) -> str:
    if not frameworks:
        return "none"
    return frameworks[0] if len(frameworks) == 1 else "mixed"


def _adapter(facts: NotebookFacts, frameworks: List[str], mode: Mode) -> Optional[str]:
    """The adapter the notebook imports, else the one of its TensorFlow: TF1 code runs on TensorFlow 1.15
    with ``npu_bridge``, TF2 code with ``npu_device``."""
    if facts.imports_module("npu_device"):
        return "npu_device"
    if facts.imports_module("npu_bridge") or facts.imports_module("hccl"):
        return "npu_bridge"
    if mode.tf1:
        return "npu_bridge"
    return "npu_device" if frameworks or facts.imports_module("tensorflow") else None


# ------------------------------------------------------------------------------------------ steps


def _steps(facts: NotebookFacts, context: Context) -> Dict[str, str]:
    if context.framework == "none":
        return _not_applicable()
    broadcast_forms = set(K.BROADCAST_FORMS)
    if context.tf1:
        broadcast_forms |= K.TF1_KERAS_BROADCAST_FORMS
    present = {
        "broadcast": context.uses(*broadcast_forms),
        "allreduce": context.uses(*K.ALLREDUCE_FORMS) or any(
            sets_is_distributed(facts, site) for site in distributed_flag_optimizers(facts)
        ),
        "shard": has_rank_shard(facts),
    }
    if present["allreduce"]:
        from .rules.allreduce import some_canned_estimator_unwrapped, some_compile_unwrapped, symbolic_gradients_applied

        present["allreduce"] = not some_compile_unwrapped(context) and not symbolic_gradients_applied(context) \
            and not some_canned_estimator_unwrapped(context)
    return {step: "present" if present[step] else "missing" for step in STEPS}


def distributed_flag_optimizers(facts: NotebookFacts) -> List[CallSite]:
    """``NPUOptimizer(...)`` calls, in notebook order."""
    return [site for _cell, _facts, site in facts.calls_to(*K.DISTRIBUTED_FLAG_OPTIMIZERS)]


def is_distributed_argument(facts: NotebookFacts, site: CallSite) -> Optional[ast.expr]:
    """The ``is_distributed`` argument of an NPUOptimizer/NPULossScaleOptimizer call, or None."""
    resolved = facts.resolve(site.dotted)
    position = K.DISTRIBUTED_FLAG_OPTIMIZERS.get(resolved, K.LOSS_SCALE_OPTIMIZERS.get(resolved))
    return None if position is None else site.argument(position, "is_distributed")


def sets_is_distributed(facts: NotebookFacts, site: CallSite) -> bool:
    """Is ``is_distributed`` given and not a false constant (an expression such as ``rank_size > 1`` is
    taken as meant for distribution)?"""
    value = is_distributed_argument(facts, site)
    if value is None:
        return False
    return not (isinstance(value, ast.Constant) and not value.value)
