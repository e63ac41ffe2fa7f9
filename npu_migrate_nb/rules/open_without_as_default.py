"""``npu.open()`` without ``.as_default()``: every distribute API is then a silent no-op."""

from __future__ import annotations

from typing import Iterable, Iterator

from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, insert_after, replace, single_target


class OpenWithoutAsDefault(Rule):
    """Under the TF2 adapter, ``npu.open()`` opens the NPU device without making it the default
    one. The distribute APIs act on the default device, so ``broadcast``, ``all_reduce`` and
    ``shard_and_rebatch_dataset`` silently do nothing: on N cards each rank trains alone (its own
    weights, its own gradients, the same data), with no error. The fix adds ``.as_default()`` to the
    call, or ``name.as_default()`` after ``name = npu.open()``."""

    code = "open-without-as-default"
    step = None
    severity = "error"

    VALID = [
        "import npu_device as npu\nnpu.open().as_default()\n",
        "import npu_device\ndevice = npu_device.open()\ndevice.as_default()\n",
    ]
    INVALID = [
        Example(
            "import npu_device as npu\nnpu.open()\n",
            "import npu_device as npu\nnpu.open().as_default()\n",
        ),
        Example(
            "import npu_device\ndevice = npu_device.open(device_id=0)\n",
            "import npu_device\ndevice = npu_device.open(device_id=0)\ndevice.as_default()\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to("npu_device.open"):
            if site.chained_by is not None and site.chained_by.method == "as_default":
                continue
            target = single_target(site.stmt)
            if target is not None and site.stmt.value is site.node:
                if any(call.dotted == f"{target}.as_default" for _unused, _unused, call in context.facts.calls("as_default")):
                    continue
                edit = insert_after(cell, facts, site.stmt, f"{target}.as_default()")
            else:
                edit = replace(cell, facts, site.node, facts.segment(site.node) + ".as_default()")
            yield self.finding(
                cell, facts, site.node,
                _("npu.open() without .as_default(): the NPU device is not the default, so "
                  "broadcast, all_reduce and shard_and_rebatch_dataset silently do nothing"),
                [edit],
            )
