"""``npu_hooks_append``/``npu_callbacks_append`` given a tuple or None drop the caller's hooks."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, replace

APPENDERS = ("npu_bridge.npu_hooks_append", "npu_bridge.npu_callbacks_append")


class HooksTuple(Rule):
    """``npu_hooks_append(hooks_list)`` and ``npu_callbacks_append(callbacks_list)`` add the
    adapter's broadcast hook (callback) to a list. Given a tuple or None they start from an empty list:
    the hooks or callbacks passed are silently dropped (logging, checkpoints, profiling stop while
    training goes on). The fix passes a list: the tuple's elements in brackets, ``list(name)`` for a
    name bound to a tuple, ``[]`` for None."""

    code = "hooks-tuple"
    step = "broadcast"
    severity = "error"

    VALID = [
        "from npu_bridge.npu_init import *\nhooks = [logging_hook]\nest.train(fn, hooks=npu_hooks_append(hooks))\n",
        "from npu_bridge.npu_init import *\nest.train(fn, hooks=npu_hooks_append())\n",
    ]
    INVALID = [
        Example(
            "from npu_bridge.npu_init import *\n"
            "est.train(fn, hooks=npu_hooks_append((logging_hook, profiler_hook)))\n",
            "from npu_bridge.npu_init import *\n"
            "est.train(fn, hooks=npu_hooks_append([logging_hook, profiler_hook]))\n",
        ),
        Example(
            "from npu_bridge.npu_init import *\n"
            "callbacks = (tensorboard,)\n"
            "model.fit(x, y, callbacks=npu_callbacks_append(callbacks))\n",
            "from npu_bridge.npu_init import *\n"
            "callbacks = (tensorboard,)\n"
            "model.fit(x, y, callbacks=npu_callbacks_append(list(callbacks)))\n",
        ),
        Example(
            "from npu_bridge.npu_init import *\nest.train(fn, hooks=npu_hooks_append(None))\n",
            "from npu_bridge.npu_init import *\nest.train(fn, hooks=npu_hooks_append([]))\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*APPENDERS):
            argument = site.argument(0, "hooks_list" if site.method == "npu_hooks_append" else "callbacks_list")
            if argument is None:
                continue
            fixed = _as_list(context, facts, site, argument)
            if fixed is None:
                continue
            yield self.finding(
                cell, facts, argument,
                _("{function} only extends a list: given a tuple or None it starts from an empty list "
                  "and the hooks passed here are silently dropped; pass a list").format(function=site.method),
                [replace(cell, facts, argument, fixed)],
            )


def _as_list(context, facts, site, argument: ast.expr):
    if isinstance(argument, ast.Constant) and argument.value is None:
        return "[]"
    if isinstance(argument, ast.Tuple):
        return "[" + ", ".join(facts.segment(element) for element in argument.elts) + "]"
    if isinstance(argument, ast.Name) and _bound_to_tuple(context, argument.id, site):
        return f"list({argument.id})"
    return None


def _bound_to_tuple(context, name: str, site) -> bool:
    values = [a.value for _unused, _unused, a in context.facts.assignments(name) if not a.tuple_target]
    return bool(values) and isinstance(values[-1], ast.Tuple) or (
        bool(values) and isinstance(values[-1], ast.Constant) and values[-1].value is None
    )
