"""Ranks that run different numbers of steps: every step all-reduces, so the rank that stops first
leaves the others waiting in a collective forever (on the cards too). What causes it:

* a ``model_dir`` that depends on the rank (``'ckpt' if rank_id == 0 else None``): rank 0 resumes
  from the checkpoint an earlier run left there, the others start over (the simulator saw rank 0
  run 4 steps and rank 1 ten); the fix gives every rank a folder of its own in it;
* a step or epoch count computed from the rank (``epochs=3 if rank_id == 0 else 5``);
* training that only some ranks run (``if rank_id == 0: model.fit(...)``).
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Optional

from ..facts import mentions
from ..findings import NEEDS_OS, Finding
from ..i18n import _
from .base import TRAINING_CALLS, Example, Rule, rank_test_around, replace_with
from .shared_model_dir import MODEL_DIR_OWNERS, PER_RANK_MODEL_DIR

_RANK_WORDS = ("RANK_ID", "rank_id", "get_rank_id", "worker_id", "local_rank", "hvd.rank")
_STEP_KEYWORDS = ("steps", "max_steps", "epochs", "steps_per_epoch", "num_steps", "initial_epoch")
_TRAINING = tuple(call for call in TRAINING_CALLS if call not in ("gradient",)) + ("train_on_batch",)


class RankDependentSteps(Rule):
    code = "rank-dependent-steps"
    step = None
    severity = "error"

    VALID = [
        "import os\nimport tensorflow as tf\n"
        "config = tf.estimator.RunConfig(model_dir=os.path.join('ckpt', 'rank_' + os.getenv('RANK_ID', '0')))\n"
        "est = tf.estimator.Estimator(model_fn, config=config)\nest.train(input_fn, max_steps=10)\n",
        # Only logging on rank 0: no training step.
        "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\nmodel.fit(x, y, epochs=5)\n"
        "if int(os.getenv('RANK_ID', '0')) == 0:\n    print(model.evaluate(x_test, y_test))\n",
    ]
    INVALID = [
        Example(
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir='ckpt' if int(os.getenv('RANK_ID', '0')) == 0 else None)\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\nest.train(input_fn, max_steps=10)\n",
            "import os\nimport tensorflow as tf\n"
            "config = tf.estimator.RunConfig(model_dir=os.path.join('ckpt', 'rank_' + os.getenv('RANK_ID', '0')))\n"
            "est = tf.estimator.Estimator(model_fn, config=config)\nest.train(input_fn, max_steps=10)\n",
        ),
        Example(
            "import os\nimport tensorflow as tf\nrank_id = int(os.getenv('RANK_ID', '0'))\nmodel.compile('sgd', 'mse')\n"
            "model.fit(x, y, epochs=3 if rank_id == 0 else 5)\n",
        ),
        Example(
            "import os\nimport tensorflow as tf\nmodel.compile('sgd', 'mse')\n"
            "if int(os.getenv('RANK_ID', '0')) == 0:\n    model.fit(x, y, epochs=5)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        return [*self._model_dirs(context), *self._step_counts(context), *self._training_on_some_ranks(context)]

    def _model_dirs(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*MODEL_DIR_OWNERS):
            keyword = site.keyword("model_dir")
            value = keyword.value if keyword is not None else None
            if not (isinstance(value, ast.IfExp) and mentions(value.test, _RANK_WORDS)):
                continue
            kept = _the_path(value)
            edits = [replace_with(cell, facts, value, PER_RANK_MODEL_DIR, [NEEDS_OS], model_dir=kept)] if kept else []
            yield self.finding(
                cell, facts, value,
                _("model_dir depends on the rank: a rank whose model_dir holds a checkpoint of an earlier run resumes "
                  "from it while the others start over, the ranks run different numbers of steps and the first to "
                  "finish leaves the others waiting in an all-reduce; give every rank a folder of its own in model_dir"),
                edits,
            )

    def _step_counts(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls(*_TRAINING):
            for keyword in site.node.keywords:
                if keyword.arg in _STEP_KEYWORDS and mentions(keyword.value, _RANK_WORDS):
                    yield self.finding(
                        cell, facts, keyword.value,
                        _("{keyword} depends on the rank: the ranks run different numbers of steps and the first "
                          "to finish leaves the others waiting in an all-reduce; every rank must run the same "
                          "steps").format(keyword=keyword.arg),
                    )

    def _training_on_some_ranks(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls(*_TRAINING):
            test = rank_test_around(facts, site.stmt, _RANK_WORDS)
            if test is not None:
                yield self.finding(
                    cell, facts, site.node,
                    _("only some ranks run this {method} (under `if {test}`): the others never join "
                      "its all-reduces and it waits forever; train on every rank (save or print on rank 0 "
                      "only)").format(method=site.method, test=ast.unparse(test)),
                )


def _the_path(value: ast.IfExp) -> Optional[ast.expr]:
    """The folder of ``'ckpt' if rank == 0 else None``: the branch that is not None."""
    for branch in (value.body, value.orelse):
        if not (isinstance(branch, ast.Constant) and branch.value is None):
            return branch
    return None
