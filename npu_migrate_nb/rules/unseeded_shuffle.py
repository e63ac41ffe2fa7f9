"""A shuffle without a shared seed before the shard: each rank shuffles differently, then takes its
shard of ITS permutation, so ranks read overlapping samples and miss others.

The same for the Keras utilities that shuffle by themselves (``image_dataset_from_directory`` & co.):
each rank draws its own seed unless one is given; and for scikit-learn's ``train_test_split``, whose split
differs from rank to rank (a rank trains on rows another holds out). The fix gives the shuffle one seed, the same on every
rank (a shuffle after the shard needs none).
"""

from __future__ import annotations

import ast
import itertools
from typing import Iterable, Iterator, Optional, Tuple

from .. import knowledge as K
from ..facts import CellFacts, dotted_name
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, add_argument, insert_before, single_target
from .shard import needs_shared_seed, seed_keyword

MAX_HOPS = 3  # variables followed back from the shard to the shuffle


class UnseededShuffle(Rule):
    code = "unseeded-shuffle"
    step = "shard"
    severity = "error"

    VALID = [
        # Shuffled in place after the notebook seeded numpy's random state: the same order on every rank.
        "import numpy as np\nnp.random.seed(0)\nnp.random.shuffle(data)\nmodel.compile('adam', 'mse')\n"
        "model.fit(data[:, :4], data[:, 4])\n",
        # Split with one seed, or not shuffled: the same split on every rank.
        "import tensorflow as tf\nfrom sklearn.model_selection import train_test_split\n"
        "a, b = train_test_split(x, test_size=0.2, random_state=42)\nmodel.compile('adam', 'mse')\nmodel.fit(a, a)\n",
        "import tensorflow as tf\nfrom sklearn.model_selection import train_test_split\n"
        "a, b = train_test_split(x, shuffle=False)\nmodel.compile('adam', 'mse')\nmodel.fit(a, a)\n",
        # The notebook seeds numpy itself: every rank draws the same split.
        "import numpy as np\nimport tensorflow as tf\nnp.random.seed(42)\nmsk = np.random.rand(len(df)) < 0.8\n"
        "model.compile('adam', 'mse')\nmodel.fit(df[msk].values, df[msk].values)\n",
        "import os\nds = ds.shuffle(64, seed=7).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
        # Shuffled after the shard: each rank shuffles its own samples, no seed needed.
        "import os\nds = ds.shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).shuffle(64)\n",
        "import tensorflow as tf\nimport npu_device as npu\n"
        "ds = tf.data.Dataset.from_tensor_slices(x)\n"
        "ds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n"
        "ds = ds.shuffle(1000).batch(bs)\n",
    ]
    INVALID = [
        Example(
            "import os\nds = ds.shuffle(64).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
            "import os\nds = ds.shuffle(64, seed=1234).shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0')))\n",
        ),
        # Shuffled in one statement, sharded and rebatched in the next.
        Example(
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "ds = tf.data.Dataset.from_tensor_slices(x).shuffle(1000)\n"
            "ds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n",
            "import tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n"
            "ds = tf.data.Dataset.from_tensor_slices(x).shuffle(1000, seed=1234)\n"
            "ds, bs = npu.distribute.shard_and_rebatch_dataset(ds, 64)\n",
        ),
        # scikit-learn's split shuffles with each process's own seed: the ranks hold out different rows.
        Example(
            "import tensorflow as tf\nfrom sklearn.model_selection import train_test_split\n"
            "x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(x_train, y_train, epochs=2)\n",
            "import tensorflow as tf\nfrom sklearn.model_selection import train_test_split\n"
            "x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=1234)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(x_train, y_train, epochs=2)\n",
        ),
        # pandas draws a frame's sample (here its shuffled copy) from each process's own seed.
        Example(
            "import tensorflow as tf\n"
            "df = df.sample(frac=1)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(df.values, df.values, epochs=2)\n",
            "import tensorflow as tf\n"
            "df = df.sample(frac=1, random_state=1234)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(df.values, df.values, epochs=2)\n",
        ),
        # A split drawn from numpy's global random state (Google's courses): seeded once, the same on every rank.
        Example(
            "import numpy as np\nimport tensorflow as tf\n"
            "msk = np.random.rand(len(df)) < 0.8\n"
            "traindf, evaldf = df[msk], df[~msk]\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(traindf.values, traindf.values, epochs=2)\n",
            "import numpy as np\nimport tensorflow as tf\n"
            "np.random.seed(1234)\n"
            "msk = np.random.rand(len(df)) < 0.8\n"
            "traindf, evaldf = df[msk], df[~msk]\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(traindf.values, traindf.values, epochs=2)\n",
        ),
        # A list shuffled in place from Python's random state, then made the dataset that is sharded.
        Example(
            "import random\nimport tensorflow as tf\n"
            "random.shuffle(paths)\n"
            "ds = tf.data.Dataset.from_tensor_slices(paths)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(ds, epochs=2)\n",
            "import random\nimport tensorflow as tf\n"
            "random.seed(1234)\n"
            "random.shuffle(paths)\n"
            "ds = tf.data.Dataset.from_tensor_slices(paths)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(ds, epochs=2)\n",
        ),
        Example(
            "import numpy as np\nimport tensorflow as tf\n"
            "np.random.shuffle(data)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(data[:, :4], data[:, 4], epochs=2)\n",
            "import numpy as np\nimport tensorflow as tf\n"
            "np.random.seed(1234)\n"
            "np.random.shuffle(data)\n"
            "model.compile(optimizer='adam', loss='mse')\nmodel.fit(data[:, :4], data[:, 4], epochs=2)\n",
        ),
        # A Keras utility shuffles by itself, with a seed of its own on each rank.
        Example(
            "import os\nimport tensorflow as tf\n"
            "ds = tf.keras.utils.image_dataset_from_directory('photos', batch_size=64)\n"
            "ds = ds.unbatch().shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(32)\n",
            "import os\nimport tensorflow as tf\n"
            "ds = tf.keras.utils.image_dataset_from_directory('photos', batch_size=64, seed=1234)\n"
            "ds = ds.unbatch().shard(int(os.getenv('RANK_SIZE', '1')), int(os.getenv('RANK_ID', '0'))).batch(32)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        found = {}
        for cell, facts, pipeline, function, line in _sharded_pipelines(context):
            shuffle = _unseeded_shuffle_in(context, facts, pipeline, function, line, MAX_HOPS)
            # Cells of the same text share their facts (and so their nodes): a shuffle is known by its cell too.
            if shuffle is not None and (cell, id(shuffle)) not in found:
                found[(cell, id(shuffle))] = self.finding(
                    cell, facts, shuffle,
                    _("this shuffle comes before the shard with a seed of its own on each rank, so each rank takes "
                      "its shard of a different permutation: ranks read overlapping samples and miss others; give "
                      "it seed={seed}, the same on every rank (or shuffle after the shard)").format(seed=K.SHARED_SEED),
                    [add_argument(cell, facts, shuffle, f"{_seed_keyword_of(shuffle)}={K.SHARED_SEED}")],
                )
        return list(found.values()) + list(self._unseeded_splits(context)) + list(self._masks_drawn_per_rank(context)) \
            + list(self._shuffled_in_place_per_rank(context))

    def _shuffled_in_place_per_rank(self, context) -> Iterator[Finding]:
        """``np.random.shuffle(data)`` or ``random.shuffle(paths)`` at the top level, the list or array read
        after: each rank's global random state is its own, so each shards a different order of it."""
        if not context.frameworks:
            return
        for cell, facts, site in context.facts.calls_to(*_IN_PLACE_SHUFFLES):
            shuffled = site.argument(0, "x")
            module = dotted_name(site.node.func.value) if isinstance(site.node.func, ast.Attribute) else None
            if site.function is not None or not isinstance(site.stmt, ast.Expr) or module is None \
                    or not isinstance(shuffled, ast.Name) or not _read_after(context, shuffled.id, cell, site.stmt):
                continue
            seeds = _IN_PLACE_SHUFFLES[context.facts.resolve(site.dotted)]
            if any(context.facts.calls_to(seeds)):
                continue  # the notebook seeds that random state itself
            call = f"{module}.seed({K.SHARED_SEED})"
            yield self.finding(cell, facts, site.node, _(
                "{name} is shuffled in place from a random state seeded differently on each rank: each rank takes its "
                "shard of a different order (ranks read overlapping samples and miss others); seed it once before, "
                "the same on every rank ({call})").format(name=shuffled.id, call=call),
                [insert_before(cell, facts, site.stmt, call)])

    def _masks_drawn_per_rank(self, context) -> Iterator[Finding]:
        """``msk = np.random.rand(len(df)) < 0.8`` then ``df[msk]``, ``df[~msk]``: a split drawn from numpy's
        global random state, which each rank seeds on its own (Google's courses)."""
        if not context.frameworks or any(context.facts.calls_to(*_GLOBAL_SEEDS)):
            return
        for cell, facts, site in context.facts.calls_to(*_GLOBAL_DRAWS):
            if site.function is not None or not isinstance(site.stmt, ast.Assign):
                continue
            target = single_target(site.stmt)
            if target is None or not _indexes_data(context, target):
                continue
            numpy = dotted_name(site.node.func).split(".")[0]
            yield self.finding(cell, facts, site.node, _(
                "this split is drawn from numpy's random state, seeded differently on each rank: the ranks split the "
                "data differently (one rank trains on rows another holds out, and their shards overlap); seed it "
                "once before, the same on every rank ({call})").format(call=f"{numpy}.random.seed({K.SHARED_SEED})"),
                [insert_before(cell, facts, site.stmt, f"{numpy}.random.seed({K.SHARED_SEED})")])

    def _unseeded_splits(self, context) -> Iterator[Finding]:
        """scikit-learn's ``train_test_split`` shuffles with a seed of its own in each process, and so does
        pandas' ``frame.sample(frac=...)`` (a shuffle, or a split with ``drop``)."""
        if not context.frameworks:
            return
        samples = ((cell, facts, site) for cell, facts, site in context.facts.calls("sample")
                   if site.receiver is not None and site.keyword("frac") is not None)
        for cell, facts, site in itertools.chain(context.facts.calls_to(*_RANDOM_SPLITS), samples):
            shuffle = site.keyword("shuffle")
            if site.keyword("random_state") is not None or (
                    shuffle is not None and isinstance(shuffle.value, ast.Constant) and shuffle.value.value is False):
                continue
            yield self.finding(cell, facts, site.node, _(
                "{function} shuffles with a seed of its own on each rank: the ranks split the data differently (one "
                "rank trains on rows another holds out, and their shards overlap); give it random_state={seed}, the "
                "same on every rank").format(function=site.method, seed=K.SHARED_SEED),
                [add_argument(cell, facts, site.node, f"random_state={K.SHARED_SEED}")])


def _seed_keyword_of(call: ast.Call) -> str:
    return seed_keyword(call.func.attr if isinstance(call.func, ast.Attribute) else dotted_name(call.func) or "")


_GLOBAL_DRAWS = tuple(f"numpy.random.{name}" for name in ("rand", "random", "random_sample", "permutation", "choice",
                                                            "randint", "uniform"))
_GLOBAL_SEEDS = ("numpy.random.seed",)


def _indexes_data(context, name: str) -> bool:
    """Is ``name`` used to pick rows: ``df[name]``, ``df[~name]``, ``x[name]``, ``df.iloc[name]``?"""
    for _cell, facts in context.facts.cells_mentioning(name):
        for load, ancestors in facts.loads(name):
            parent = ancestors[-1] if ancestors else None
            if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, (ast.Invert, ast.Not)) and len(ancestors) > 1:
                load, parent = parent, ancestors[-2]
            if isinstance(parent, ast.Subscript) and parent.slice is load:
                return True
    return False


_RANDOM_SPLITS = ("sklearn.model_selection.train_test_split", "sklearn.cross_validation.train_test_split")
# In-place shuffles drawing from a process's global random state -> the call that seeds that state.
_IN_PLACE_SHUFFLES = {"numpy.random.shuffle": "numpy.random.seed", "random.shuffle": "random.seed"}


# Calls that take the data a training reads.
_DATA_TAKERS = frozenset({"fit", "train_on_batch", "from_tensor_slices", "flow", "numpy_input_fn", "pandas_input_fn",
                          "shard_and_rebatch_dataset"})


def _read_after(context, name: str, cell: int, stmt: ast.stmt) -> bool:
    """Is ``name`` read as data after ``stmt`` (in its cell, or a later one): indexed or sliced, used as
    an index (``x[order]``), or given to what takes training data (a random baseline computed from a
    shuffled copy of the labels is not)?"""
    for other, facts in context.facts.cells_mentioning(name):
        if other < cell:
            continue
        for load, ancestors in facts.loads(name):
            if other == cell and load.lineno <= (stmt.end_lineno or stmt.lineno):
                continue
            parent = ancestors[-1] if ancestors else None
            if isinstance(parent, ast.Subscript) or (
                    isinstance(parent, ast.Call) and load in parent.args
                    and (dotted_name(parent.func) or "").rsplit(".", 1)[-1] in _DATA_TAKERS):
                return True
    return False


def _sharded_pipelines(context) -> Iterator[Tuple[int, CellFacts, ast.expr, Optional[str], int]]:
    """(cell, facts, the dataset expression that gets sharded, its function, its line)."""
    for cell, facts, site in context.facts.calls("shard"):
        if site.receiver is not None:
            yield cell, facts, site.receiver, site.function, site.node.lineno
    for cell, facts, site in context.facts.calls_to(K.SHARD_AND_REBATCH):
        dataset = site.argument(0, "dataset")
        if dataset is not None:
            yield cell, facts, dataset, site.function, site.node.lineno


def _unseeded_shuffle_in(context, facts: CellFacts, node: ast.expr, function, line: int, hops: int) -> Optional[ast.Call]:
    """The first shuffle without a seed in the method chain ``node`` (following its root variable back)."""
    while isinstance(node, ast.Call):
        method = node.func.attr if isinstance(node.func, ast.Attribute) else dotted_name(node.func)
        if method == "shuffle" and _no_seed(node):
            return node
        if context.facts.resolve(dotted_name(node.func)) in K.BATCHED_SOURCES:
            site = next((s for s in facts.calls if s.node is node), None)
            return node if site is not None and needs_shared_seed(site) else None
        node = node.func.value if isinstance(node.func, ast.Attribute) else None
    if isinstance(node, ast.Name) and hops > 0:
        for assignment in reversed(facts.assignments.get(node.id, [])):
            if assignment.function == function and assignment.stmt.lineno < line:
                return _unseeded_shuffle_in(context, facts, assignment.value, function, assignment.stmt.lineno, hops - 1)
    return None


def _no_seed(call: ast.Call) -> bool:
    """``shuffle(buffer_size, seed=None, reshuffle_each_iteration=None)`` with no seed given."""
    if any(keyword.arg == "seed" for keyword in call.keywords):
        return False
    return len(call.args) < 2
