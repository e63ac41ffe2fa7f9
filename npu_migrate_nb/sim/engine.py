"""The program each simulated rank runs: set the rank up, then become an ipyparallel engine.

``mpiexec -n N python -m npu_migrate_nb.sim.engine --mpi <ipengine args>``. Everything a rank needs
before user code happens here, in the engine process itself and before it registers with the
controller: the Ascend environment for its MPI rank, the simulated adapter, per-rank seeds,
TensorFlow (imported while the controller is still starting, which is what makes startup fast),
TF1 compatibility mode, the run-time probes, a watcher that tells the runner which collective
this rank is waiting in, and one that tells it where training is (``rank-{rank}.progress``).
"""

from __future__ import annotations

import faulthandler
import functools
import inspect
import importlib
import json
import os
import random
import signal
import sys
import threading
import time
from typing import Optional

from .rank_env import machine_cores

# The runner passes its settings in this variable (JSON): job_id, rank_table, devices_per_server, state_dir,
# tf1, seed, language (the controller's: what the rank's own messages are said in).
SETTINGS_VARIABLE = "NPU_SIM_ENGINE"


def main() -> None:
    settings = json.loads(os.environ.get(SETTINGS_VARIABLE, "{}"))
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    prepare_rank(rank, size, settings)
    from ipyparallel.engine.app import main as engine_main

    engine_main()


def prepare_rank(rank: int, size: int, settings: dict) -> None:
    from .rank_env import apply_rank_environment

    if settings.get("language"):
        from .. import i18n

        try:
            i18n.set_language(settings["language"])
        except ValueError:  # a language this version does not know: the environment's
            pass
    apply_rank_environment(rank, size, settings.get("job_id", "10086"), settings.get("rank_table", ""),
                           settings.get("devices_per_server"))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    state_dir = settings.get("state_dir")
    if state_dir:
        _dump_stacks_on_sigusr1(os.path.join(state_dir, f"rank-{rank}.stack"))
    _enable_simulated_adapter()
    # Different seeds per rank: a notebook that forgets the broadcast really starts from different
    # weights, as on real cards; the same seeds on every run make a run reproducible.
    seed = int(settings.get("seed", 1000)) + rank
    random.seed(seed)
    _seed_numpy(seed)
    _import_tensorflow(seed, tf1=bool(settings.get("tf1")))
    if state_dir:
        start_collective_watcher(os.path.join(state_dir, f"rank-{rank}.collective"))
        start_progress_watcher(progress_path(state_dir, rank))


def enter_program(paths: list, argv: list) -> None:
    """A script or notebook of a project, as ``PYTHONPATH=ROOT python SCRIPT ARGS`` runs it: its
    folder and the project's root first on the path, its arguments in ``sys.argv``."""
    for path in reversed(paths):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    sys.argv[:] = list(argv)


def reseed_rank(base_seed: int) -> int:
    """Seed Python, numpy and TensorFlow as at rank start (base seed + RANK_ID); returns the seed.

    Called before each notebook run, so that a notebook run twice in one cluster, or once more on a
    fresh single-card cluster, draws the same initial weights on rank 0."""
    seed = int(base_seed) + int(os.environ.get("RANK_ID", "0"))
    random.seed(seed)
    _seed_numpy(seed)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        _RANK_SEEDS.add(seed)
        try:
            tf.random.set_seed(seed)
        except AttributeError:  # TF1 mode: tensorflow is tf.compat.v1
            tf.set_random_seed(seed)
    return seed


def _enable_simulated_adapter() -> None:
    try:
        from .adapter import enable
    except ImportError:  # the adapter is optional for plain TensorFlow/MPI notebooks
        return
    enable()


def _seed_numpy(seed: int) -> None:
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def _import_tensorflow(seed: int, tf1: bool) -> None:
    try:
        import tensorflow as tf
    except ImportError:
        return
    _RANK_SEEDS.add(seed)
    tf.random.set_seed(seed)
    _share_cores(tf, int(os.environ.get("RANK_SIZE", "1")))
    leave_data_autotuning_off_by_default()
    seed_data_ops_as_on_a_card()
    if tf1:
        enter_tf1_mode()
    from . import probes

    probes.install(seed)


def _share_cores(tf, ranks: int) -> None:
    """Give each rank its share of the machine's cores: N ranks each sizing TensorFlow's thread
    pools for the whole machine oversubscribe it, and a rank waiting in a collective then loses
    its core to another rank's idle spinning threads."""
    share = max(1, machine_cores() // max(1, ranks))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(share)
        tf.config.threading.set_inter_op_parallelism_threads(share)
    except RuntimeError:  # TensorFlow's runtime already started (a user's sitecustomize?): leave it
        pass


_RANK_SEEDS: set = set()  # the global seeds this module gave TensorFlow (not the user's)


def seed_data_ops_as_on_a_card() -> None:
    """A tf.data op given a seed of its own (``shuffle(n, seed=7)``, ``image_dataset_from_directory(
    seed=7)``) draws the same sequence on every rank, as on real cards.

    A real rank never sets a global seed, so TensorFlow pairs the op's seed with its default global
    seed: the same everywhere. Here each rank has a global seed of its own (so that a notebook that
    forgets the broadcast really starts from different weights), which would make those ops differ
    across ranks and make a correct shuffle-before-shard fail the shard check. So while the global
    seed is the one this module set, a data op with a seed of its own gets the default global seed.
    Ops without a seed still differ per rank, as on real cards; a global seed the user sets is kept.
    """
    from tensorflow.python.data.util import random_seed as data_seed
    from tensorflow.python.eager import context
    from tensorflow.python.framework import dtypes, ops
    from tensorflow.python.framework import random_seed as framework_seed

    original = data_seed.get_seed
    if getattr(original, "_npu_as_on_a_card", False):
        return

    def get_seed(seed):
        if seed is None:
            return original(seed)
        global_seed = context.global_seed() if context.executing_eagerly() else ops.get_default_graph().seed
        if global_seed not in _RANK_SEEDS:
            return original(seed)
        return (ops.convert_to_tensor(framework_seed.DEFAULT_GRAPH_SEED, dtype=dtypes.int64, name="seed"),
                ops.convert_to_tensor(seed, dtype=dtypes.int64, name="seed2"))

    get_seed._npu_as_on_a_card = True
    data_seed.get_seed = get_seed


def leave_data_autotuning_off_by_default() -> None:
    """Turn tf.data autotuning off in every pipeline that leaves ``autotune.enabled`` unset.

    In TensorFlow 2.15 an iterator's teardown (the end of every Keras epoch, of every ``for`` loop
    over a dataset) waits for the autotuner's thread to finish its current sleep, a period that
    doubles from 10 ms up to 60 s: in a rank an epoch often lasted until the next 10 * (2**k - 1) ms
    mark, up to twice its length. A rank has one or two cores, so the autotuner has little to tune,
    and autotuning changes only parallelism and buffer sizes, never which elements come in which
    order. An explicit ``options.autotune.enabled = True`` is respected.
    """
    from tensorflow.python.data.ops import dataset_ops

    dataset_class = dataset_ops.DatasetV2
    original = dataset_class._apply_debug_options
    if getattr(original, "_npu_sim", False):
        return
    untuned = dataset_ops.options_lib.Options()
    untuned.autotune.enabled = False

    # Every way to iterate a dataset (eager iterators, one-shot and initializable iterators of TF1
    # graphs, multi-device iterators, reduce) builds its iterator from this method's result.
    def _apply_debug_options(self):
        dataset = original(self)
        options = getattr(dataset, "_options_attr", None)
        if options is None or options.autotune.enabled is not None:
            return dataset
        return dataset_ops._OptionsDataset(dataset, untuned)

    _apply_debug_options._npu_sim = True
    dataset_class._apply_debug_options = _apply_debug_options


# ------------------------------------------------------------ randomness held fixed (comparison)

# While the single-card comparison runs (never during the main run, whose checks see the notebook
# as it is): None, or the shuffle sites to pass through (None in it: "every shuffle after a shard").
_comparison: Optional[dict] = None


def hold_randomness_fixed(on: bool, shuffle_sites: Optional[list] = None) -> None:
    """Make training reproducible across the N-rank run and the single-card run of the comparison.

    * A shuffle that comes after a shard reorders only the rank's own samples: it is passed through
      (the dataset is returned unshuffled), so that rank r reads rows r, r+N, ... and the ranks'
      batches together are one card's batches. Shuffles before the shard decide which samples a rank
      owns: they are never touched. On one card (``shuffle_sites`` given) the shard may be gone
      (``shard_and_rebatch_dataset`` does not shard one worker): the shuffles passed through are
      those at the sites the ranks passed through (cell, function, line).
    * Keras ``fit(arrays, shuffle=True)`` reads the arrays in order.
    * Training-mode randomness (Keras Dropout, noise, recurrent dropout, random augmentation layers,
      ``tf.nn.dropout``) behaves as at inference: a dropout mask drawn for B rows on one card cannot
      be split into the masks N ranks draw for B/N rows each, whatever the seeds.
    Each thing held fixed is recorded by the probes ("held" records), once per site or layer class.
    """
    global _comparison
    if not on:
        _comparison = None
        return
    _install_holds()
    _comparison = {"shuffle_sites": None if shuffle_sites is None else {tuple(site) for site in shuffle_sites},
                   "reported": set()}


def _report_held(key, what: str, **fields) -> None:
    if key in _comparison["reported"]:
        return
    _comparison["reported"].add(key)
    from . import probes

    probes.record_held_fixed(what, **fields)


def _install_holds() -> None:
    import tensorflow as tf

    from tensorflow.python.data.ops import dataset_ops

    _patch_once(dataset_ops.DatasetV2, "shuffle", _hold_shuffle)
    _patch_once(tf.keras.Model, "fit", _hold_fit_shuffle)
    for nn in _nn_modules(tf):
        _patch_once(nn, "dropout", _hold_dropout_function)
    try:
        from keras.src.engine.base_layer import BaseRandomLayer
    except ImportError:  # another Keras: its random layers keep their training behaviour
        return
    if "__call__" not in BaseRandomLayer.__dict__:
        BaseRandomLayer.__call__ = _held_random_layer_call(BaseRandomLayer)


def _nn_modules(tf) -> list:
    """tf.nn as the notebook may reach it (TF1 mode: ``tensorflow`` is tf.compat.v1)."""
    modules = []
    for path in ("nn", "compat.v1.nn", "compat.v2.nn"):
        try:
            modules.append(functools.reduce(getattr, path.split("."), tf))
        except AttributeError:
            continue
    return modules


def _patch_once(owner, name: str, wrap) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_npu_held", False):
        return
    wrapper = wrap(original)
    wrapper._npu_held = True
    setattr(owner, name, wrapper)


def _user_site() -> tuple:
    """(cell, function, line) of the innermost frame of the notebook's own code."""
    from . import probes

    frame = sys._getframe(2)
    while frame is not None and _is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return (probes.current_cell(), "?", 0)
    return (probes.current_cell(), frame.f_code.co_name, frame.f_lineno)


_LIBRARY_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep,
                 os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)


def _is_library_file(filename: str) -> bool:
    return any(part in filename for part in _LIBRARY_DIRS) or filename.startswith("<frozen")


def _hold_shuffle(original):
    def shuffle(self, *args, **kwargs):
        if _comparison is not None:
            site = _user_site()
            sites = _comparison["shuffle_sites"]
            if site in sites if sites is not None else _after_a_shard(self):
                _report_held(("shuffle",) + site, "shuffle", site=list(site))
                return self
        return original(self, *args, **kwargs)

    return functools.wraps(original)(shuffle)


def _after_a_shard(dataset) -> bool:
    from . import probes

    return bool(probes._dataset_is_sharded(dataset))


def _hold_fit_shuffle(original):
    signature = inspect.signature(original)

    def fit(self, *args, **kwargs):
        if _comparison is None:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        x = bound.arguments.get("x")
        if bound.arguments.get("shuffle", True) and _is_array_input(x):
            bound.arguments["shuffle"] = False
            _report_held(("fit shuffle",), "fit shuffle")
        return original(*bound.args, **bound.kwargs)

    return functools.wraps(original)(fit)


def _is_array_input(x) -> bool:
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops

    return not (x is None or inspect.isgenerator(x) or isinstance(x, (dataset_ops.DatasetV2, tf.keras.utils.Sequence)))


def _hold_dropout_function(original):
    def dropout(x, *args, **kwargs):
        if _comparison is None:
            return original(x, *args, **kwargs)
        _report_held(("tf.nn.dropout",), "random layer", layer="tf.nn.dropout")
        return x

    return functools.wraps(original)(dropout)


def _held_random_layer_call(base):
    def __call__(self, *args, **kwargs):
        spec = getattr(self, "_call_spec", None)
        if _comparison is not None and spec is not None and spec.expects_training_arg and args:
            args, kwargs = spec.set_arg_value("training", False, args, kwargs, inputs_in_args=True)
            name = type(self).__name__
            _report_held(("layer", name), "random layer", layer=name)
        return super(base, self).__call__(*args, **kwargs)

    __call__._npu_held = True
    return __call__


def enter_tf1_mode() -> None:
    """TF1-style notebooks (``tf.Session``, ``tf.layers``, ``tf.train.*Optimizer``) on TensorFlow 2.

    Graph mode everywhere, and ``import tensorflow as tf`` gives ``tf.compat.v1``.
    """
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    real = sys.modules["tensorflow"]
    # Resolve lazily-loaded parts now, while the real module is still the one in sys.modules.
    _ = (real.keras, real.estimator, tf.compat.v1.layers, tf.compat.v1.estimator)
    # model_to_estimator's module reads TF2's names (tf.keras.optimizers.experimental) when it runs:
    # imported now, it keeps the real module, as TensorFlow 1.15's own did.
    importlib.import_module("tensorflow_estimator.python.estimator.keras_lib")
    sys.modules["tensorflow"] = tf.compat.v1


def _dump_stacks_on_sigusr1(path: str) -> None:
    # faulthandler writes from its C signal handler, so it answers even while the rank is blocked
    # inside an MPI call that never returns to Python.
    stream = open(path, "w", encoding="utf-8")  # kept open for the life of the rank
    faulthandler.register(signal.SIGUSR1, file=stream, all_threads=False, chain=False)


def start_collective_watcher(path: str, period: float = 0.1) -> threading.Thread:
    """Keep ``path`` holding the collective this rank is inside (empty when none).

    The engine's main thread is busy (or blocked in MPI) while a cell runs, so the runner cannot ask
    it; a thread can, because mpi4py releases the GIL while it waits.
    """

    def watch() -> None:
        written, previous = None, None
        while True:
            name = _current_collective()
            # Training passes through a new collective every step: write only one that is still
            # the same a period later (a rank that waits), and the return to none.
            if name != written and (name is None or name == previous):
                _write_atomically(path, json.dumps({"collective": name, "since": time.time() - (period if name else 0)}))
                written = name
            previous = name
            time.sleep(period)

    thread = threading.Thread(target=watch, name="npu-sim-collective-watcher", daemon=True)
    thread.start()
    return thread


def progress_path(state_dir: str, rank: int) -> str:
    return os.path.join(state_dir, f"rank-{rank}.progress")


def start_progress_watcher(path: str, period: float = 0.2) -> Optional[threading.Thread]:
    """Keep ``path`` holding where the rank's training call is (Keras ``fit``, ``Estimator.train``).

    The file is one JSON object, :func:`probes._Progress.snapshot`: ``running`` (bool), ``kind``
    ("keras" | "estimator"), ``cell``, ``call`` (the training call's number in this rank),
    ``epoch`` (1-based; 0 before the first epoch begins; None for an Estimator), ``epochs``,
    ``step`` (steps done in the epoch), ``steps`` (steps per epoch, or of the Estimator call; None
    while unknown) and ``metrics`` (the last finished epoch's logs: numbers, null for NaN and
    infinities). It does not exist before the rank's first training call; after one, it keeps its
    last state with ``running`` false.

    Written atomically and only when it changed, by this thread: every ``period`` s (reading the
    step while the main thread trains) and at once when a training call ends. The probes' end of a
    cell writes it too, in the main thread, before the cell's records (and reply) leave. No probes
    (TensorFlow not importable): no thread.
    """
    probes = sys.modules.get("npu_migrate_nb.sim.probes")
    if probes is None:
        return None
    lock = threading.Lock()
    wake = threading.Event()
    written = [None]

    def publish() -> None:
        # The snapshot is taken under the lock: a write of an older snapshot never follows a newer one.
        with lock:
            state = probes.progress.snapshot()
            if state is None:
                return
            text = json.dumps(state, sort_keys=True, allow_nan=False)
            if text != written[0]:
                _write_atomically(path, text)
                written[0] = text

    def watch() -> None:
        while True:
            wake.wait(period)
            wake.clear()
            try:
                publish()
            except Exception:  # the state directory went away with the cluster, or a bad read
                pass

    probes.progress.publisher = publish
    probes.progress.wake = wake.set
    thread = threading.Thread(target=watch, name="npu-sim-progress-watcher", daemon=True)
    thread.start()
    return thread


def read_progress(path: str) -> Optional[dict]:
    """The progress a rank last wrote to ``path`` (see :func:`start_progress_watcher`), or None."""
    try:
        with open(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _current_collective():
    comm = sys.modules.get("npu_migrate_nb.sim.comm")
    if comm is None or not hasattr(comm, "current_collective"):
        return None
    try:
        return comm.current_collective()
    except Exception:
        return None


def _write_atomically(path: str, text: str) -> None:
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.replace(temp, path)


if __name__ == "__main__":
    main()
