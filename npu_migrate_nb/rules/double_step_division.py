"""Steps divided by the rank size: with the batch split across ranks, each rank runs every step."""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ..findings import Finding
from .base import Example, Rule, rank_size_mention, replace

STEP_KEYWORDS = ("max_steps", "steps", "steps_per_epoch")


class DoubleStepDivision(Rule):
    code = "double-step-division"
    step = None
    severity = "warning"

    VALID = [
        "estimator.train(train_data_fn, max_steps=num_steps, hooks=hooks)\n",
        "model.fit(ds, steps_per_epoch=total // batch)\n",
    ]
    INVALID = [
        # The seed: max_steps=num_steps // rank_size becomes max_steps=num_steps.
        Example(
            "estimator.train(train_data_fn, max_steps=num_steps // rank_size, hooks=training_hooks)\n",
            "estimator.train(train_data_fn, max_steps=num_steps, hooks=training_hooks)\n",
        ),
        Example(
            "import os\nmodel.fit(ds, steps_per_epoch=1000 // int(os.getenv('RANK_SIZE', '1')))\n",
            "import os\nmodel.fit(ds, steps_per_epoch=1000)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls("train", "fit", "TrainSpec"):
            for keyword in site.node.keywords:
                value = keyword.value
                if keyword.arg not in STEP_KEYWORDS or not isinstance(value, ast.BinOp):
                    continue
                if not isinstance(value.op, (ast.FloorDiv, ast.Div)) or not rank_size_mention(value.right, context):
                    continue
                yield self.finding(
                    cell, facts, value,
                    f"{keyword.arg} is divided by the rank size: the global batch is already split across "
                    f"ranks, so each rank must run all {facts.segment(value.left)} steps",
                    [replace(cell, facts, value, facts.segment(value.left))],
                )
