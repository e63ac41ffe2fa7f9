"""A keras-tuner tuner on every rank: every rank runs the search, each trial's training all-reduces,
so the ranks' tuners must pick the same hyperparameters, trial after trial.

* Without ``seed``, keras-tuner's oracle draws its own (``random.randint(1, 10000)``), different on
  each rank: the ranks build models of different shapes for the same trial, and the all-reduce of their
  gradients fails (found by the simulator on TensorFlow's keras-tuner tutorial and on Deep Learning
  with Python's chapter 13: InvalidArgumentError in the search). The fix gives it one seed.
* Its ``directory`` holds the trials' checkpoints and the oracle's state, and ``overwrite=True``
  deletes it when the tuner is made: on one server the ranks would write, read back and delete each
  other's files. The fix gives every rank a folder of its own in it, rank 0 included (as
  shared-model-dir does for an Estimator's ``model_dir``).

The trials' scores must also agree: the search's callback that broadcasts each trial's weights averages
its logs (missing-broadcast).
"""

from __future__ import annotations

from typing import Iterable, Iterator

from .. import knowledge as K
from ..facts import KERAS_TUNER_PACKAGES, CallSite, mentions
from ..findings import NEEDS_OS, Finding
from ..i18n import _
from .base import Example, Rule, add_argument, replace_with
from .shared_model_dir import PER_RANK_MODEL_DIR

_RANK_WORDS = ("RANK_ID", "rank_id", "get_rank_id", "local_rank", "hvd.rank")
# Where a tuner's own folder goes when the notebook gives none (keras-tuner's default is the working folder).
_BUILD_MODEL = (
    "def build_model(hp):\n"
    "    model = tf.keras.Sequential([tf.keras.layers.Dense(hp.Int('units', 8, 32)), tf.keras.layers.Dense(1)])\n"
    "    model.compile(optimizer='adam', loss='mse')\n"
    "    return model\n"
)
_PER_RANK_DEFAULT_DIRECTORY = "os.path.join('.', 'rank_' + os.getenv('RANK_ID', '0'))"


class TunerPerRank(Rule):
    code = "tuner-per-rank"
    step = None
    severity = "error"

    VALID = [
        "import os\nimport tensorflow as tf\nimport keras_tuner as kt\n" + _BUILD_MODEL
        + "tuner = kt.RandomSearch(build_model, objective='val_loss', max_trials=3, seed=7,\n"
        "                        directory=os.path.join('tuning', 'rank_' + os.getenv('RANK_ID', '0')))\n"
        "tuner.search(x, y, epochs=2)\n",
        # scikit-learn's tuner: its trials fit scikit-learn models, with no collective.
        "import tensorflow as tf\nimport keras_tuner as kt\n" + _BUILD_MODEL
        + "tuner = kt.SklearnTuner(oracle=oracle, hypermodel=build_model)\ntuner.search(x, y)\n",
    ]
    INVALID = [
        # TensorFlow's keras-tuner tutorial.
        Example(
            "import tensorflow as tf\nimport keras_tuner as kt\n" + _BUILD_MODEL
            + "tuner = kt.Hyperband(build_model, objective='val_accuracy', max_epochs=10, factor=3,\n"
            "                     directory='my_dir', project_name='intro_to_kt')\n"
            "tuner.search(x, y, epochs=50, validation_split=0.2)\n",
            'import tensorflow as tf\n'
            'import os\n'
            'import keras_tuner as kt\n' + _BUILD_MODEL
            + "tuner = kt.Hyperband(build_model, objective='val_accuracy', max_epochs=10, factor=3,\n"
            "                     directory=os.path.join('my_dir', 'rank_' + os.getenv('RANK_ID', '0')), "
            "project_name='intro_to_kt', seed=1234)\n"
            'tuner.search(x, y, epochs=50, validation_split=0.2)\n',
        ),
        # Deep Learning with Python, chapter 13: the package's old name, no folder given.
        Example(
            "import tensorflow as tf\nimport kerastuner as kt\n" + _BUILD_MODEL
            + "tuner = kt.BayesianOptimization(build_model, objective='val_accuracy', max_trials=100, overwrite=True)\n"
            "tuner.search(x, y, epochs=100, validation_data=(x_val, y_val))\n",
            'import tensorflow as tf\n'
            'import os\n'
            'import kerastuner as kt\n' + _BUILD_MODEL
            + "tuner = kt.BayesianOptimization(build_model, objective='val_accuracy', max_trials=100, overwrite=True, "
            "seed=1234, directory=os.path.join('.', 'rank_' + os.getenv('RANK_ID', '0')))\n"
            'tuner.search(x, y, epochs=100, validation_data=(x_val, y_val))\n',
        ),
        # The notebook's own tuner, a subclass of one of keras-tuner's.
        Example(
            "import tensorflow as tf\nimport keras_tuner as kt\n" + _BUILD_MODEL
            + "class MyTuner(kt.RandomSearch):\n    pass\n"
            "tuner = MyTuner(build_model, objective='loss', max_trials=2, seed=3)\n"
            "tuner.search(x, y)\n",
            'import tensorflow as tf\n'
            'import os\n'
            'import keras_tuner as kt\n' + _BUILD_MODEL
            + 'class MyTuner(kt.RandomSearch):\n'
            '    pass\n'
            "tuner = MyTuner(build_model, objective='loss', max_trials=2, seed=3, "
            "directory=os.path.join('.', 'rank_' + os.getenv('RANK_ID', '0')))\n"
            'tuner.search(x, y)\n',
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        if context.framework == "none":
            return []
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in _tuners(context):
            if site.keyword("seed") is None and not _given_by_position_or_unpacked(site):
                yield self.finding(cell, facts, site.node, _(
                    "this tuner draws its trials' hyperparameters with a seed of its own on each rank: the ranks "
                    "build different models for the same trial, and the all-reduce of their gradients fails (or "
                    "waits forever); give it seed={seed}, the same on every rank").format(seed=K.SHARED_SEED),
                    [add_argument(cell, facts, site.node, f"seed={K.SHARED_SEED}")])
            directory = site.keyword("directory")
            if directory is not None and mentions(directory.value, _RANK_WORDS):
                continue
            if directory is None and _given_by_position_or_unpacked(site):
                continue
            edit = (add_argument(cell, facts, site.node, f"directory={_PER_RANK_DEFAULT_DIRECTORY}", [NEEDS_OS])
                    if directory is None else
                    replace_with(cell, facts, directory.value, PER_RANK_MODEL_DIR, [NEEDS_OS], model_dir=directory.value))
            yield self.finding(cell, facts, directory.value if directory is not None else _apart_from_the_call(site), _(
                "every rank's tuner keeps its trials' checkpoints and its state in the same folder (and "
                "overwrite=True deletes it under the other ranks): give every rank a folder of its own in it"), [edit])


def _tuners(context) -> Iterator:
    """The calls that make a keras-tuner tuner training Keras models (the notebook's subclasses too)."""
    if not any(module.partition(".")[0] in KERAS_TUNER_PACKAGES for module in context.facts.aliases.values()):
        return
    for cell, facts in context.facts.cells:
        for site in facts.calls:
            if site.dotted and context.facts.tuner_class(site.dotted):
                yield cell, facts, site


def _given_by_position_or_unpacked(site: CallSite) -> bool:
    """Arguments the call passes by position beyond the hypermodel and objective, or ``**kwargs``: a seed or
    a folder may be among them."""
    return len(site.node.args) > 2 or any(keyword.arg is None for keyword in site.node.keywords)


def _apart_from_the_call(site: CallSite):
    """Where a second finding on the call goes (findings are one per rule and place): its first argument."""
    arguments = [*site.node.args, *(keyword.value for keyword in site.node.keywords)]
    return min(arguments, key=lambda node: (node.lineno, node.col_offset), default=site.node)
