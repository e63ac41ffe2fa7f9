"""Imports and device setup the adapter's APIs need, added once, where they belong, only when missing."""

from __future__ import annotations

import ast
from typing import AbstractSet, Iterable, List, Optional, Set, Tuple  # noqa: F401

from .. import knowledge as K
from ..facts import NPU_BRIDGE_NAMES
from ..findings import NEEDS_DENSE_GRADIENTS, NEEDS_NPU_BRIDGE, NEEDS_NPU_DEVICE, NEEDS_OS, Edit, Finding
from ..i18n import _
from .base import Example, Rule, insert_after, insert_before


class MissingSetup(Rule):
    """The adapter's APIs work only after its setup: the TF1 names come from
    ``from npu_bridge.npu_init import *``; ``npu_device`` must be imported and its device opened
    (``npu.open().as_default()``) before the distribute calls act; reading ``RANK_ID``/``RANK_SIZE``
    needs ``import os``. Without it the code fails with NameError, or the distribute calls silently do
    nothing. The fix adds each missing piece once, where it belongs (the other rules' fixes bring the
    setup they need with them)."""

    code = "missing-setup"
    step = None
    severity = "error"

    VALID = [
        "import os\nfrom npu_bridge.npu_init import *\nopt = npu_distributed_optimizer_wrapper(opt)\n",
        "import npu_device as npu\nnpu.open().as_default()\nnpu.distribute.broadcast(v)\n",
    ]
    INVALID = [
        # Adapter names used without their import.
        Example(
            "import tensorflow as tf\nopt = npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer())\n",
            "from npu_bridge.npu_init import *\nimport tensorflow as tf\n"
            "opt = npu_distributed_optimizer_wrapper(tf.train.AdamOptimizer())\n",
        ),
        # No import to follow: the setup goes before the first statement, after a cell magic's line.
        Example(
            "%%time\nopt = npu_distributed_optimizer_wrapper(opt)\n",
            "%%time\nfrom npu_bridge.npu_init import *\nopt = npu_distributed_optimizer_wrapper(opt)\n",
        ),
        # npu_device imported but never opened: the distribute APIs would not be live.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.distribute.broadcast(model.trainable_variables)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "npu.distribute.broadcast(model.trainable_variables)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        needs = needs_of_existing_code(context)
        planned = setup_plan(context, needs)
        if planned is None:
            return []
        cell, facts, node, edits = planned
        added = " / ".join(line for edit in edits for line in edit.code.splitlines())
        message = _("the adapter's APIs are used without their setup: add {setup}").format(setup=added)
        return [self.finding(cell, facts, node, message, edits)]


def needs_of_existing_code(context) -> Set[str]:
    """What the notebook's own cells need (its modules get their setup with their edits; the device a
    module's npu_device calls need is opened by the notebook)."""
    needs = set()
    for _unused, facts in context.facts.notebook_cells:
        for name in NPU_BRIDGE_NAMES & facts.names:
            bare_calls = [site for site in facts.calls_by_method.get(name, ()) if site.dotted == name]
            if bare_calls and name not in context.facts.aliases:
                needs.add(NEEDS_NPU_BRIDGE)
    if context.uses(*_NPU_DEVICE_APIS):
        needs.add(NEEDS_NPU_DEVICE)
    if context.facts.uses_name("getenv") and any(
        site.dotted == "os.getenv" for cell, _unused, site in context.facts.calls("getenv") if cell not in context.module_at
    ):
        needs.add(NEEDS_OS)
    return needs


_NPU_DEVICE_APIS = (
    "npu_device.distribute.broadcast",
    "npu_device.distribute.all_reduce",
    "npu_device.distribute.shard_and_rebatch_dataset",
    "npu_device.distribute.npu_distributed_keras_optimizer_wrapper",
)


def setup_lines(context, needs: AbstractSet[str], cells=None) -> List[str]:
    """The setup statements still missing for ``needs`` in ``cells`` (default: the notebook's own),
    in the order they must run. Only the notebook opens the device."""
    cells = context.facts.notebook_cells if cells is None else cells
    imports = [fact for _unused, facts in cells for fact in facts.imports]
    lines = []
    if NEEDS_OS in needs and not any(fact.local == "os" and fact.module == "os" for fact in imports):
        lines.append("import os")
    if NEEDS_NPU_BRIDGE in needs and not any(
        fact.local == "*" and fact.module.startswith(BRIDGE_STAR_MODULES) for fact in imports
    ):
        lines.append(bridge_star_import(context))
    if NEEDS_DENSE_GRADIENTS in needs and not any(K.DENSE_GRADIENTS in facts.functions for _unused, facts in cells):
        lines.append(dense_gradients_helper(context))
    if NEEDS_NPU_DEVICE in needs:
        if not any(fact.module == "npu_device" for fact in imports):
            lines.append(f"import npu_device as {context.npu}")
        if cells is context.facts.notebook_cells and not context.uses("npu_device.open"):
            lines.append(f"{context.npu}.open().as_default()")
    return lines


def dense_gradients_helper(context) -> str:
    """The definition of the helper that makes an optimizer's sparse gradients dense (see
    K.SPARSE_GRADIENT_LOOKUPS), written once after TensorFlow's import."""
    tf = context.tf
    return (
        f"def {K.DENSE_GRADIENTS}(optimizer):\n"
        "    compute_gradients = optimizer.compute_gradients\n"
        "    def dense(*args, **kwargs):\n"
        f"        return [({tf}.convert_to_tensor(grad) if isinstance(grad, {tf}.IndexedSlices) else grad, var)\n"
        "                for grad, var in compute_gradients(*args, **kwargs)]\n"
        "    optimizer.compute_gradients = dense\n"
        "    return optimizer"
    )


BRIDGE_STAR_IMPORT = "from npu_bridge.npu_init import *"
# On TensorFlow 2 the TF1 adapter's API is the TF2 adapter's copy of it (the build copies npu_bridge
# there; npu_bridge itself exists only on TensorFlow 1.15): a TF1 part of TF2 code uses that one.
TF2_BRIDGE_STAR_IMPORT = "from npu_device.compat.v1.npu_init import *"
BRIDGE_STAR_IMPORTS = (BRIDGE_STAR_IMPORT, TF2_BRIDGE_STAR_IMPORT)
BRIDGE_STAR_MODULES = ("npu_bridge", "npu_device.compat.v1")


def bridge_star_import(context) -> str:
    return BRIDGE_STAR_IMPORT if context.tf1 else TF2_BRIDGE_STAR_IMPORT


def setup_plan(context, needs: AbstractSet[str], module: Optional[int] = None) -> Optional[Tuple[int, object, ast.AST, List[Edit]]]:
    """The setup edits: the npu_bridge star import goes before the notebook's TensorFlow import (it
    exports a ``tf`` of its own, which must not replace the notebook's ``tf``, e.g. compat.v1), the
    rest after it. ``module``: the cell index of one of the notebook's own modules, set up alike."""
    cells = context.facts.notebook_cells if module is None else [
        entry for entry in context.facts.cells if entry[0] == module
    ]
    lines = setup_lines(context, needs, cells)
    if not lines:
        return None
    opens = f"{context.npu}.open().as_default()" in lines
    only_open = lines == [f"{context.npu}.open().as_default()"]
    # open() reads the adapter's name: after the notebook's own npu_device import where it has one, even
    # when that comes after TensorFlow's (found by hypothesis: open() above the import).
    anchor = (_import_of(cells, "npu_device") if opens else None) or \
        _anchor(cells, ("npu_device",) if only_open else ("tensorflow", "npu_device"))
    if anchor is None:
        return None
    cell, facts, stmt, where = anchor
    before = [line for line in lines if line in BRIDGE_STAR_IMPORTS and where == "after"]
    after = [line for line in lines if line not in before]
    edits = []
    if before:
        edits.append(insert_before(cell, facts, stmt, "\n".join(before)))
    if after:
        edits.append((insert_after if where == "after" else insert_before)(cell, facts, stmt, "\n".join(after)))
    return cell, facts, stmt, edits


def _import_of(cells, module: str):
    """After the first module-level import of ``module`` in ``cells``, or None."""
    for cell, facts in cells:
        for fact in facts.imports:
            if fact.function is None and fact.stmt in facts.tree.body and fact.module.split(".")[0] == module:
                return cell, facts, fact.stmt, "after"
    return None


def _anchor(cells, modules: Tuple[str, ...]):
    """After the first import of one of ``modules`` in ``cells``; else after the first import when it is
    in the first cell that runs code, among the imports it starts with; else at the top of that cell (a later cell's ``import shutil`` is
    too late for the adapter's names the first cell reads: found by hypothesis)."""
    first_import = None
    first_code_cell = _first_code_cell(cells)
    for cell, facts in cells:
        for fact in facts.imports:
            if fact.function is not None or fact.stmt not in facts.tree.body:
                continue
            if fact.module.split(".")[0] in modules:
                return cell, facts, fact.stmt, "after"
            if first_import is None:
                first_import = (cell, facts, fact.stmt, "after")
    if first_import is not None and first_import[0] == first_code_cell and _leads_its_cell(first_import):
        return first_import
    for cell, facts in cells:
        body = _code_of(facts)
        if body:
            return cell, facts, body[0], "before"
    return None


def _leads_its_cell(anchor) -> bool:
    """Is the import among the imports a cell starts with? One after other code (``import shutil`` in
    the middle of an export) may sit in a block a fix wraps in ``if rank_id == 0:`` (found by hypothesis)."""
    _cell, facts, stmt, _where = anchor
    for code in _code_of(facts):
        if code is stmt:
            return True
        if not isinstance(code, (ast.Import, ast.ImportFrom)):
            return False
    return False


def _code_of(facts) -> list:
    return [stmt for stmt in facts.tree.body if not is_docstring_or_future(stmt) and not facts.is_ipython_line(stmt)]


def _first_code_cell(cells) -> Optional[int]:
    return next((cell for cell, facts in cells if _code_of(facts)), None)


def is_docstring_or_future(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return True
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
