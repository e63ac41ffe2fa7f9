"""Run-time observation inside a rank, with no change to the user's code. The only module that
fingerprints tensors.

Installed in every rank before user code (:func:`install`). What it watches:

* Keras ``Model.fit``: a probe callback appended LAST, so it runs after any broadcast callback,
  with no per-batch hooks (they would cost every step). The first call of ``train_function``
  (right after every callback's first ``on_train_batch_begin``) sees the weights training starts
  from, or its second call for a model that builds its variables on the first batch;
  ``on_train_end`` sees the final ones. The input is the first element of a fresh iteration of
  the dataset ``x`` (twice, to tell a deterministic pipeline from a random one) or the arrays given.
* ``Estimator.train``: a ``SessionRunHook`` appended last. Its first ``before_run`` reads the
  trainable variables after every ``after_create_session`` (where the broadcast hook runs); ``end``
  reads the final values. ``input_fn`` is wrapped so that a separate iterator of its dataset gives
  the first batch.
* Custom loops: optimizer ``apply_gradients`` (Keras, legacy Keras and ``tf.compat.v1.train``);
  eager ``GradientTape.gradient`` of variables that no such optimizer updates and that change while
  the cell reads input (an optimizer written by hand, see :class:`_TapeTracker`).
  Eagerly it reads the variables before the first update; under ``tf.function`` or in a graph the
  Python side runs only while tracing, so a ``tf.numpy_function`` before the update does the
  reading: in a TF2 function only at the first two steps (a ``tf.cond`` on a step-counting
  variable, so training pays nothing after them), in a TF1 graph at every step (its variables
  cannot be read once the session is gone). After each cell that trained (the counter moved, or
  an observed step ran) the variables are read again (the end values). Datasets iterated eagerly
  give the input fingerprint.

Records stay in the rank (no communication: a probe must never add a collective that could be
issued on some ranks only); the runner collects them after each cell with :func:`take_records`.

The same probes tell where training is (:data:`progress`): the Keras callback at train and epoch
boundaries, the step in between read by the engine's progress watcher thread from Keras' own step
counter (``model._train_counter``); the Estimator hook counts its steps in ``after_run``.
"""

from __future__ import annotations

import builtins
import collections.abc
import functools
import hashlib
import inspect
import itertools
import math
import sys
import time
import threading
import weakref
from typing import Any, Dict, List, Optional

import numpy as np

from ..i18n import _

# Largest number of elements of one variable shipped to the runner for tolerance comparisons.
SAMPLE_ELEMENTS = 4096

_records: List[dict] = []
_sequence = itertools.count()
_state = threading.local()
_cell: Optional[int] = None
_installed = False
_rank_seed: Optional[int] = None
_inputs_in_cell = 0  # input records made since the cell started


# ------------------------------------------------------------------------------- runner side API


def begin_cell(cell: int, language: Optional[str] = None) -> None:
    """A cell starts; ``language``: the controller's (what the rank's own messages are said in)."""
    global _cell, _inputs_in_cell
    _cell, _inputs_in_cell = cell, 0
    _constants_tried.clear()
    _loop_tracker.begin_cell()
    _tape_tracker.begin_cell()
    _watch_plain_classes()
    _fits_cut_at.clear()
    if language is not None:
        from .. import i18n

        i18n.set_language(language)


def end_cell() -> List[dict]:
    """Close the cell: read the custom-loop variables once more, write the progress file out (its
    last state, if the watcher has not yet), hand over the records."""
    _loop_tracker.record_end_values()
    _loop_tracker.say_if_not_shortened()
    progress.flush()
    return take_records()


def current_cell() -> Optional[int]:
    return _cell


# ------------------------------------------------------------------------------------ proof mode
# The checks are decided by the weights training starts from and the result of the first update; a
# model that builds its variables on its first batch is broadcast after it, and read after the next.
STEPS_THE_CHECKS_NEED = 2
# In proof mode a shuffle buffer holds at most this many elements: filling 100,000 images to take
# three batches would cost more than the proof.
PROOF_SHUFFLE_BUFFER = 1024


class _Proof:
    """Proof mode: every training call stops after the steps the checks need and ``extra`` more, on
    every rank at the same step (each rank counts its own steps alike); None: train as written."""

    def __init__(self):
        self.extra: Optional[int] = None

    @property
    def on(self) -> bool:
        return self.extra is not None

    @property
    def budget(self) -> int:
        return STEPS_THE_CHECKS_NEED + (self.extra or 0)

    def capped(self, steps: Optional[int]) -> int:
        return self.budget if steps is None or steps < 0 else min(int(steps), self.budget)


_proof = _Proof()


def set_proof(extra: Optional[int]) -> None:
    """Proof mode for the cells to come: ``extra`` steps after those the checks need (``--steps``); None
    trains as written (``--full``). The notebook's ``range`` is the proof's own meanwhile (see
    :class:`ProofRange`)."""
    _proof.extra = None if extra is None else max(0, int(extra))
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    if _proof.on:
        shell.user_ns["range"] = ProofRange
    elif shell.user_ns.get("range") is ProofRange:
        del shell.user_ns["range"]


class ProofRange(collections.abc.Sequence):
    """``range`` for the notebook's own code in proof mode: a ``for`` loop over it ends once a training
    step ran between two of its turns and the loop has the proof's steps (``for step in
    range(50000): train_step(next(iterator))``, the epochs around a loop proof mode cut). Everything
    else is the real range's: indexing, ``len``, ``in``, slicing, reversal, equality."""

    def __init__(self, *args):
        self._range = builtins.range(*args)

    def __iter__(self):
        return _ProofRangeIterator(iter(self._range), len(self._range))

    def __len__(self):
        return len(self._range)

    def __getitem__(self, index):
        return self._range[index]

    def __contains__(self, value):
        return value in self._range

    def __reversed__(self):
        return reversed(self._range)

    def __eq__(self, other):
        return self._range == (other._range if isinstance(other, ProofRange) else other)

    def __hash__(self):
        return hash(self._range)

    def __repr__(self):
        return repr(self._range)

    def __getattr__(self, name):  # start, stop, step, index, count
        return getattr(self._range, name)


class _ProofRangeIterator:
    def __init__(self, numbers, length: int):
        self._numbers, self._length = numbers, length
        self._steps_at_start = self._steps_seen = _loop_tracker.total_steps()

    def __iter__(self):
        return self

    def __next__(self):
        if _proof.on and _called_by_a_for_loop():
            steps = _loop_tracker.total_steps()
            trained, self._steps_seen = steps > self._steps_seen, steps
            if trained and steps - self._steps_at_start >= _proof.budget:
                if not _loop_tracker.shortened_in_cell:
                    record_shortened("custom loop", steps - self._steps_at_start, None, iterations=self._length)
                _loop_tracker.shortened_in_cell = True
                raise StopIteration
        return next(self._numbers)


def record_shortened(what: str, taken: int, written: Optional[int], ran_as_written: str = "",
                     iterations: Optional[int] = None, unit: str = "steps") -> None:
    """A training (or evaluation) call proof mode stopped after ``taken`` of ``written`` steps (None:
    not known), or one it could not shorten (``ran_as_written`` says why). ``iterations``: the length
    of the loop it cut. Both are compared across ranks: ranks cut at the same step would, as written,
    have parted where the shortest ends (see ``checks.uneven_steps``). ``unit``: what was counted,
    "steps" or "trials" (a hyperparameter search)."""
    _record("shortened", what, taken=int(taken), written=written, ran_as_written=ran_as_written,
            iterations=iterations, unit=unit)


def take_records() -> List[dict]:
    taken = list(_records)
    _records.clear()
    return taken


def reset() -> None:
    _records.clear()
    _loop_tracker.forget()
    _tape_tracker.forget()
    _rule_tracker.forget()
    _session_proof.forget()


# ------------------------------------------------------------------------------- fingerprints


def fingerprint(values: Any) -> str:
    """A short hash of the bytes, dtypes and shapes of a nested structure of arrays/tensors."""
    digest = hashlib.sha1()
    for value in _flatten(values):
        array = _as_numpy(value)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array))  # its buffer, not a copy of it
    return digest.hexdigest()[:16]


def sample(array: np.ndarray) -> np.ndarray:
    """Evenly strided elements of ``array``, at most SAMPLE_ELEMENTS, for tolerance comparisons."""
    flat = np.asarray(array).reshape(-1)
    step = max(1, -(-flat.size // SAMPLE_ELEMENTS))
    return np.array(flat[::step], dtype=np.float64, copy=True)


def _flatten(values: Any) -> list:
    try:
        import tensorflow as tf

        return tf.nest.flatten(values, expand_composites=True)
    except Exception:
        return list(values) if isinstance(values, (list, tuple)) else [values]


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value)


# ------------------------------------------------------------------------------------ records


def _record(kind: str, source: str, **fields) -> None:
    global _inputs_in_cell
    fields.update(kind=kind, source=source, cell=_cell, seq=next(_sequence))
    _records.append(fields)
    _inputs_in_cell += kind == "input"


def record_weights(moment: str, source: str, names: List[str], arrays: List[np.ndarray], **extra) -> None:
    """``moment`` is "start" (training starts from these), "end" (training left these) or "step1"
    (after the first update, when observed).

    ``extra``: ``after_first_step=True`` when the start could only be read after the first update
    (a Keras model that builds its variables on its first batch).

    Only a start has a fingerprint: it is what the broadcast check compares across ranks, bit for
    bit; later moments are judged on their samples, within tolerances. Hashing a model's weights
    costs more than reading them (43 MB: 26 ms against 10), and a fit records three moments.
    """
    arrays = [np.asarray(a) for a in arrays]
    _record(
        "weights",
        source,
        moment=moment,
        names=list(names),
        fingerprint=fingerprint(arrays) if moment == "start" else None,
        samples=[sample(a) for a in arrays],
        count=len(arrays),
        **extra,
    )


def record_held_fixed(what: str, **fields) -> None:
    """Something the single-card comparison held fixed in this run (see
    :func:`.engine.hold_randomness_fixed`): "shuffle" (``site``: [cell, function, line]), "fit
    shuffle", "random layer" (``layer``: its class)."""
    _record("held", "comparison", what=what, **fields)


# Batches larger than this are not split into per-row digests.
MAX_ROWS = 65536


def row_digests(batch: Any) -> Optional[List[str]]:
    """One short digest per row (first dimension) of a batch, across all its components, sorted:
    the rows as a multiset, so that the ranks' first batches can be compared with one card's.
    None when the components do not share a first dimension."""
    try:
        arrays = [_as_numpy(value) for value in _flatten(batch)]
    except Exception:
        return None
    if not arrays or any(a.ndim == 0 for a in arrays):
        return None
    rows = arrays[0].shape[0]
    if rows > MAX_ROWS or any(a.shape[0] != rows for a in arrays):
        return None
    digests = []
    for index in range(rows):
        digest = hashlib.sha1()
        for array in arrays:
            row = array[index]
            if array.dtype == object:
                digest.update(repr(np.asarray(row).tolist()).encode())
            else:
                digest.update(np.ascontiguousarray(row).tobytes())
        digests.append(digest.hexdigest()[:16])
    return sorted(digests)


def record_input(source: str, first: Any, again: Any = None, sharded: Optional[bool] = None,
                 rows: Any = "first", sample: Optional[List[str]] = None) -> None:
    """The first batch a rank reads; ``again`` is the first batch of a second fresh iteration.

    ``rows``: the batch whose rows are digested for the single-card comparison ("first": ``first``;
    None: not known, e.g. arrays that fit shuffles). ``sample``: digests of the rows this rank reads
    first (a few batches' worth): ranks that share rows read the same samples, whatever the order."""
    first_print = fingerprint(first)
    deterministic = None if again is None else fingerprint(again) == first_print
    digests = row_digests(first if isinstance(rows, str) and rows == "first" else rows) if rows is not None else None
    _record("input", source, fingerprint=first_print, deterministic=deterministic, sharded=sharded, rows=digests,
            sample=sample)


# How much each rank reads ahead to see which samples it gets (bounded: pipelines can be costly).
SAMPLE_ROWS, SAMPLE_BATCHES, SAMPLE_SECONDS = 2048, 32, 2.0


def sample_digests(batches) -> Optional[List[str]]:
    """Row digests of the first batches from ``batches`` (an iterator), within the bounds above and
    within one epoch (a row seen twice means ``repeat()`` started over). None when the first batch
    repeats its own rows (constant test data): which samples a rank reads cannot be told then."""
    digests: List[str] = []
    seen = set()
    deadline = time.monotonic() + SAMPLE_SECONDS
    for count, batch in enumerate(batches):
        rows = row_digests(batch)
        if rows is None:
            return None
        if count == 0 and len(set(rows)) < 0.9 * len(rows):
            return None
        for row in rows:
            if row in seen:
                return digests
            seen.add(row)
            digests.append(row)
        if len(digests) >= SAMPLE_ROWS or count + 1 >= SAMPLE_BATCHES or time.monotonic() > deadline:
            break
    return digests[:SAMPLE_ROWS] or None


def _busy() -> bool:
    """True inside a framework-level probe (fit, Estimator.train) or while a probe reads data."""
    return getattr(_state, "depth", 0) > 0


class _Busy:
    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc):
        _state.depth -= 1


# ------------------------------------------------------------------------------------ progress


class _Progress:
    """Where the training call of this rank is (Keras ``fit``, ``Estimator.train``).

    Written by the probes in the rank's main thread at train and epoch boundaries only; read by the
    engine's progress watcher thread (:func:`snapshot`), which also reads the step: the state and
    the step reader are replaced together as one tuple, never mutated, so a reader needs no lock.
    The engine sets ``wake`` (the watcher writes the file now, in its own thread: training never
    waits for a file) and ``publisher`` (writes it in the calling thread: :func:`end_cell`, so that
    the runner finds a cell's last state in the file when the cell is over)."""

    def __init__(self):
        self._current: Optional[tuple] = None  # (public fields, step reader or None)
        self._calls = 0
        self.wake = None
        self.publisher = None

    def begin(self, kind: str, **fields) -> int:
        """A training call starts; returns its number (1-based, counted in this rank)."""
        self._calls += 1
        state = {"running": True, "kind": kind, "cell": _cell, "call": self._calls,
                 "epoch": None, "epochs": None, "step": 0, "steps": None, "metrics": {}}
        state.update(fields)
        self._current = (state, None)
        return self._calls

    def update(self, call: int, read_step=None, **fields) -> None:
        """New fields for training call ``call`` (ignored once another one started); ``read_step``:
        a function giving the step now (None: ``fields`` hold it)."""
        current = self._current
        if current is None or current[0]["call"] != call:
            return
        self._current = ({**current[0], **fields}, read_step)

    def finish(self, call: int, **fields) -> None:
        current = self._current
        if current is None or current[0]["call"] != call or not current[0]["running"]:
            return
        step = self._read(current[1])
        if step is not None:
            fields.setdefault("step", step)
        self.update(call, None, running=False, **fields)
        self._call_hook(self.wake)

    def flush(self) -> None:
        self._call_hook(self.publisher)

    @staticmethod
    def _call_hook(hook) -> None:
        if hook is not None:
            try:
                hook()
            except Exception:  # progress is for show: it must never break training
                pass

    @staticmethod
    def _read(read_step) -> Optional[int]:
        if read_step is None:
            return None
        try:
            return int(read_step())
        except Exception:
            return None

    def snapshot(self) -> Optional[dict]:
        """The public state (JSON-ready), the step read now; None before any training call."""
        current = self._current
        if current is None:
            return None
        state, read_step = current
        step = self._read(read_step)
        if step is None:
            return dict(state)
        steps = state.get("steps")
        # A read a moment after the epoch ended, before the next one's reader was set: clamp.
        step = max(0, step if not steps else min(step, steps))
        return {**state, "step": step}


progress = _Progress()


def _read_counter(counter) -> Optional[int]:
    try:
        return int(counter.numpy())
    except Exception:
        return None


def _scalar_logs(logs) -> dict:
    """An epoch's scalar logs as numbers, null for NaN and infinities (the file is strict JSON)."""
    metrics = {}
    for name, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        metrics[str(name)] = number if math.isfinite(number) else None
    return metrics


# ------------------------------------------------------------------------------- input batches


def _dataset_is_sharded(dataset) -> Optional[bool]:
    """Whether a shard is anywhere in the pipeline (also inside map/interleave functions).

    Walks the dataset objects: serializing the graph instead costs as much as the data that
    ``from_tensor_slices`` embeds in it (tens of milliseconds per fit call for a 25 MB array)."""
    try:
        return _walk_for_shard(dataset, set())
    except Exception:
        pass
    try:
        return b"ShardDataset" in dataset._as_serialized_graph().numpy()
    except Exception:
        return None


def _walk_for_shard(dataset, seen: set) -> bool:
    if id(dataset) in seen:
        return False
    seen.add(id(dataset))
    inner = getattr(dataset, "_dataset", None)  # DatasetV1Adapter
    if inner is not None and _walk_for_shard(inner, seen):
        return True
    if "Shard" in type(dataset).__name__:
        return True
    for attribute in ("_map_func", "_predicate", "_key_func", "_reduce_func"):
        wrapper = getattr(dataset, attribute, None)
        graph = getattr(getattr(wrapper, "function", None), "graph", None)
        if graph is not None and any(op.type == "ShardDataset" for op in graph.get_operations()):
            return True
    return any(_walk_for_shard(child, seen) for child in dataset._inputs())


# dataset -> what record_dataset_input saw: a dataset is immutable, and fit or a training loop
# iterates the same one every epoch.
_dataset_observations: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def record_dataset_input(source: str, dataset) -> None:
    """First element of two fresh iterations of an eager ``tf.data.Dataset``."""
    try:
        seen = _dataset_observations.get(dataset)
    except TypeError:
        seen = None
    if seen is not None:
        _record("input", source, **seen)
        return
    with _Busy():
        try:
            iterator = iter(dataset)
            first = next(iterator)
            again = next(iter(dataset))
            sample = sample_digests(itertools.chain([first], iterator))
        except Exception:  # empty, infinite-error or not iterable eagerly: nothing observed
            return
    record_input(source, first, again, sharded=_dataset_is_sharded(dataset), sample=sample)
    observed = {key: _records[-1][key] for key in ("fingerprint", "deterministic", "sharded", "rows", "sample")}
    try:
        _dataset_observations[dataset] = observed
    except TypeError:
        pass


ESTIMATOR_ARRAYS = "estimator numpy arrays"  # numpy_input_fn's arrays, recorded as fit's are


def _record_fit_input(x, y, batch_size, shuffle=True) -> None:
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        if tf.executing_eagerly():
            record_dataset_input("keras fit dataset", x)
        return
    if x is None or inspect.isgenerator(x) or isinstance(x, tf.keras.utils.Sequence):
        return
    # fit shuffles arrays on every rank differently: the rank's whole data is the honest fingerprint.
    # Without shuffling, the first batch is the first batch_size rows (Keras' default 32).
    _record_arrays("keras fit arrays", [x, y] if y is not None else [x], batch_size or 32, shuffle)


def _record_arrays(source: str, data: list, batch_size: int, shuffle) -> None:
    """A rank's whole arrays as its input: without shuffling, the first batch is its first rows."""
    import tensorflow as tf

    try:
        rows = None if shuffle else tf.nest.map_structure(lambda a: a[:batch_size], data)
        head = tf.nest.map_structure(lambda a: a[:SAMPLE_ROWS], data)
        record_input(source, data, data, rows=rows, sample=row_digests(head))
    except Exception:
        return


# ---------------------------------------------------------------------------------- Keras fit


def _make_fit_callback(model):
    """The probe of one ``fit`` call. No batch hooks: a callback that has them makes Keras call
    every callback and convert the logs at every step. The weights training starts from are read
    by a one-off wrapper of ``model.train_function`` instead: its first call comes right after every
    callback's first ``on_train_batch_begin`` (where a broadcast callback acts). A model that builds
    its variables on its first batch has none then: its start is read at the second call, i.e.
    after every callback's first ``on_train_batch_end`` (where the fix broadcasts such models)."""
    import tensorflow as tf

    class ProbeCallback(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # never makes Keras convert logs for us
            self._started = False
            self._original = None
            self._wrapper = None
            self._call: Optional[int] = None  # this fit's number in `progress`
            self._counter = None  # Keras' step counter, when it can be read from another thread
            self._steps: Optional[int] = None
            self._base: Optional[int] = None  # the counter at the start of the epoch, when known

        # Progress: epoch hooks only, one read of the step counter per epoch (at its end, and at the
        # first one's begin); the step in between is read by the engine's watcher thread (batch
        # hooks would cost every step).
        def _begin_progress(self):
            params = self.params or {}
            self._steps = params.get("steps")
            if _proof.on:  # the progress counts toward the proof
                self._steps = _proof.capped(self._steps)
                params = dict(params, epochs=1)
            counter = getattr(model, "_train_counter", None)
            self._counter = counter if counter is not None and tf.executing_eagerly() else None
            self._base = None  # read at the first epoch's begin; later ones begin where the last ended
            self._call = progress.begin("keras", epoch=0, epochs=params.get("epochs"), steps=self._steps)

        def on_epoch_begin(self, epoch, logs=None):
            if self._call is None:
                return
            counter = self._counter
            read_step = None
            if counter is not None:
                if self._base is None:
                    self._base = _read_counter(counter)
                base = self._base
                if base is not None:
                    read_step = lambda: int(counter.numpy()) - base  # noqa: E731
            progress.update(self._call, read_step, epoch=epoch + 1, step=0, steps=self._steps)

        def on_epoch_end(self, epoch, logs=None):
            if self._call is None:
                return
            fields = {"epoch": epoch + 1, "metrics": _scalar_logs(logs)}
            count = _read_counter(self._counter) if self._counter is not None else None
            if count is not None and self._base is not None:
                fields["step"] = count - self._base
                if self._steps is None:  # an unknown-length dataset: the next epochs are as long
                    self._steps = count - self._base
                fields["steps"] = self._steps
            elif self._steps is not None:
                fields["step"] = self._steps
            self._base = count  # the next epoch starts here (validation does not count)
            progress.update(self._call, None, **fields)

        def finish_progress(self):
            if self._call is not None:
                progress.finish(self._call)
                self._counter = None  # no reference to the model's variables after the fit

        def on_train_begin(self, logs=None):
            self._begin_progress()
            original = getattr(model, "train_function", None)
            if original is None or self._started:
                return
            calls = [0]

            def train_function(*args, **kwargs):
                calls[0] += 1
                if calls[0] == 1:
                    if _model_has_variables(model):
                        self._start(after_first_step=False)
                elif self._started:  # the first update's result: how large one update was
                    _record_model_weights("step1", model)
                    self.detach()
                else:
                    self._start(after_first_step=True)
                    self.detach()
                return original(*args, **kwargs)

            self._original, self._wrapper = original, train_function
            model.train_function = train_function

        def _start(self, after_first_step):
            self._started = True
            _record_model_weights("start", model, after_first_step=after_first_step)

        def detach(self):
            """Give the model its own train_function back (fit looks it up at every step)."""
            if self._wrapper is not None and model.__dict__.get("train_function") is self._wrapper:
                model.train_function = self._original
            self._original = self._wrapper = None

        def on_train_end(self, logs=None):
            self.detach()
            self.finish_progress()
            if self._started:
                _record_model_weights("end", model, steps=_read_counter(getattr(model, "_train_counter", None)))
            stopped_at = getattr(self, "_proof_stopped_at", None)
            if stopped_at is not None:
                params = self.params or {}
                written = params["epochs"] * params["steps"] if params.get("epochs") and params.get("steps") else None
                record_shortened("keras fit", stopped_at, written)

    def with_proof(base):
        """The callback with a batch hook, in proof mode only (it makes Keras call back at every step,
        which the few steps of a proof afford): it stops the fit once the checks have their steps."""

        class ProofCallback(base):
            def on_train_batch_end(self, batch, logs=None):
                self._proof_batches = getattr(self, "_proof_batches", 0) + 1
                if self._proof_batches >= _proof.budget and not model.stop_training:
                    model.stop_training = True
                    self._proof_stopped_at = self._proof_batches

        return ProofCallback

    if tf.compat.v1.executing_eagerly_outside_functions():
        return with_proof(ProbeCallback)() if _proof.on else ProbeCallback()

    class GraphProbeCallback(ProbeCallback):
        """TF1 Keras (graph mode: ``training_v1``'s loops) builds its train function before any
        callback runs and calls it from a local: the wrapper above never sees it. These loops call
        every callback at every batch anyway, so batch hooks cost nothing more: the start is read at
        the first batch's begin (after every broadcast callback's, as this callback comes last), the
        first update's result at the second's."""

        def on_train_batch_begin(self, batch, logs=None):
            if not self._started:
                if _model_has_variables(model):
                    self._start(after_first_step=False)
            elif not getattr(self, "_step1_read", False):
                self._step1_read = True
                _record_model_weights("step1", model)

    return with_proof(GraphProbeCallback)() if _proof.on else GraphProbeCallback()


def _model_has_variables(model) -> bool:
    try:
        return bool(model.trainable_variables)
    except Exception:
        return False


def _read_without_copying(variables) -> list:
    """The variables' values as numpy arrays. Eagerly, each is a read that shares the variable's
    buffer (an update after it copies the buffer first, so the array keeps what was read) seen
    through numpy: reading a model's 43 MB this way costs nothing, where ``.numpy()`` copies it
    twice (28 ms, at every one of a fit's three moments)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        try:
            return [v.value()._numpy() for v in variables]
        except Exception:  # not plain resource variables: as Keras reads them
            pass
    return tf.keras.backend.batch_get_value(variables)


def _record_model_weights(moment: str, model, **extra) -> None:
    variables = list(model.trainable_variables)
    values = _read_without_copying(variables)
    if moment == "start" and extra.get("after_first_step") is False:
        extra = {}
    record_weights(moment, "keras fit", [v.name for v in variables], values, **extra)


# Proof mode, per cell: how many fits it cut at each line of the notebook's code. A cell that trains
# again and again at one line inside a ``while`` loop may loop until the training converges (``while
# not done: model.fit(...)``, a course's XOR): cut every time, it would never end. After CUT_REPEATS
# cuts, such a line trains as written. A ``for`` loop over folds or rates ends by itself: its fits
# stay cut (a 5-fold cross-validation of 500 epochs each took 16 minutes as written).
CUT_REPEATS = 3
_fits_cut_at: Dict[tuple, int] = {}


def _caller_line() -> tuple:
    frame = sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def _may_loop_until_it_converges() -> bool:
    """Is a frame of the notebook's code, from the fit's caller outwards, inside a ``while`` loop of
    its cell (or its cell's code unknown)?"""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _is_a_cell(filename) and _inside_a_while_loop(filename, frame.f_lineno) is not False:
            return True
        frame = frame.f_back
    return False


def _is_a_cell(filename: str) -> bool:
    """A notebook cell's code, as IPython compiles it (``.../ipykernel_123/456.py``, ``<ipython-input-...>``)."""
    return "ipykernel_" in filename or filename.startswith("<ipython-input-")


@functools.lru_cache(maxsize=256)
def _while_loops_of(filename: str, size: int) -> Optional[tuple]:
    """(first line, last line) of each ``while`` loop of a cell's code (IPython keeps it in linecache);
    None when it cannot be read."""
    import ast
    import linecache

    lines = linecache.getlines(filename)
    try:
        tree = ast.parse("".join(lines)) if lines else None
    except (SyntaxError, ValueError):
        return None
    if tree is None:
        return None
    return tuple((node.lineno, node.end_lineno) for node in ast.walk(tree) if isinstance(node, ast.While))


def _inside_a_while_loop(filename: str, line: int) -> Optional[bool]:
    import linecache

    loops = _while_loops_of(filename, len(linecache.getlines(filename)))
    if loops is None:
        return None
    return any(first <= line <= last for first, last in loops)


def _wrap_fit(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        if _busy():
            return original(self, *args, **kwargs)
        if _proof.on:
            line = _caller_line()
            _fits_cut_at[line] = _fits_cut_at.get(line, 0) + 1
            if _fits_cut_at[line] > CUT_REPEATS and _may_loop_until_it_converges():
                return _as_written(self, lambda: fit(self, *args, **kwargs), _fits_cut_at[line])
        bound = signature.bind(self, *args, **kwargs)
        arguments = bound.arguments
        _record_fit_input(arguments.get("x"), arguments.get("y"), arguments.get("batch_size"),
                          arguments.get("shuffle", True))
        callbacks = arguments.get("callbacks")
        probe = _make_fit_callback(self)
        arguments["callbacks"] = list(callbacks or []) + [probe]
        if _proof.on:
            _cap_validation(arguments, signature)
        try:
            with _Busy():
                history = original(*bound.args, **bound.kwargs)
        finally:
            probe.detach()  # fit raised before on_train_end: never leave the wrapper in the model
            probe.finish_progress()
        if getattr(probe, "_proof_stopped_at", None) is not None:
            _pad_history(history, arguments.get("epochs", 1), arguments.get("initial_epoch", 0))
        return history

    fit._npu_probe = True
    return fit


def _as_written(model, train, times: int):
    """A training call proof mode leaves as written (see CUT_REPEATS), said once per line."""
    extra, _proof.extra = _proof.extra, None
    before = _optimizer_steps(model)
    try:
        return train()
    finally:
        _proof.extra = extra
        if times == CUT_REPEATS + 1:
            steps = _optimizer_steps(model) - before
            record_shortened("keras fit", steps, steps, ran_as_written=_(
                "the cell trained {times} times at the same line (a loop until the training converges?): "
                "proof mode runs the repeats as written").format(times=times))


def _optimizer_steps(model) -> int:
    try:
        return int(model.optimizer.iterations.numpy())
    except Exception:
        return 0


def _pad_history(history, epochs, initial_epoch) -> None:
    """A fit proof mode stopped returns a History as long as the fit was written, its epochs that did
    not run NaN: a notebook that plots the losses of a learning-rate sweep against its 100 rates, or
    zips them with its epochs, runs on (issue 34: four course notebooks failed on one card there); the
    report says the training was cut short."""
    if not isinstance(epochs, int) or not isinstance(initial_epoch, int) or getattr(history, "history", None) is None:
        return
    written = range(initial_epoch, epochs)
    for values in history.history.values():
        if isinstance(values, list):
            values.extend([float("nan")] * (len(written) - len(values)))
    if isinstance(getattr(history, "epoch", None), list):
        history.epoch[:] = list(written)


def _cap_validation(arguments: dict, signature) -> None:
    """A fit's validation in proof mode: the first batches of arrays (Keras' ``validation_steps`` on
    arrays costs as much as the whole validation), as many steps of anything else."""
    data = arguments.get("validation_data")
    if data is not None:
        rows = _proof.budget * (arguments.get("validation_batch_size") or arguments.get("batch_size") or 32)
        first = _first_rows(data, rows)
        if first is not None:
            arguments["validation_data"] = first
            return
    if (data is not None or arguments.get("validation_split")) and "validation_steps" in signature.parameters:
        arguments["validation_steps"] = _proof.capped(arguments.get("validation_steps"))


def _first_rows(data, rows: int):
    """``data`` (an array, or a tuple, list or dict of arrays) cut to its first ``rows`` rows; None for
    anything else (a dataset, a generator, a Sequence)."""
    if isinstance(data, np.ndarray):
        return data[:rows]
    if isinstance(data, (tuple, list)) and data:
        parts = [_first_rows(part, rows) if part is not None else None for part in data]
        if all(cut is not None or part is None for cut, part in zip(parts, data)):
            return type(data)(parts) if isinstance(data, list) else tuple(parts)
        return None
    if isinstance(data, dict) and data:
        parts = {key: _first_rows(value, rows) for key, value in data.items()}
        return parts if all(value is not None for value in parts.values()) else None
    return None


def _wrap_evaluate(original, what: str):
    """Keras ``evaluate`` and Estimator ``evaluate`` in proof mode: as many steps as a proof trains
    (the first batches of arrays given to Keras: its ``steps`` on arrays costs as much as them all)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def evaluate(self, *args, **kwargs):
        if not _proof.on or "steps" not in signature.parameters:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        written = bound.arguments.get("steps")
        rows = _proof.budget * (bound.arguments.get("batch_size") or 32)
        first = [_first_rows(bound.arguments.get(name), rows) for name in ("x", "y")]
        if first[0] is not None and written is None:
            bound.arguments["x"] = first[0]
            if first[1] is not None:
                bound.arguments["y"] = first[1]
            if bound.arguments.get("sample_weight") is not None:
                bound.arguments["sample_weight"] = _first_rows(bound.arguments["sample_weight"], rows)
        else:
            bound.arguments["steps"] = _proof.capped(written)
            if written is not None and 0 <= written <= _proof.budget:
                return original(*bound.args, **bound.kwargs)  # as written: nothing to shorten, or say
        if not _busy():  # a fit's validation, train_and_evaluate's evaluations: capped, said with the training
            record_shortened(what, _proof.budget, written)
        return original(*bound.args, **bound.kwargs)

    evaluate._npu_probe = True
    return evaluate


# --------------------------------------------------------------------------- keras-tuner search

# Proof mode ends a hyperparameter search after this many trials. The checks are decided by the
# first trial's fits (every one of them is cut like any fit); the second shows that the ranks' oracles
# still agree once the first trial is scored (a seed per rank, or a score seen by one rank, parts them
# there). A search written for 100 trials of two executions each took more than 15 minutes cut only
# per fit (Deep Learning with Python, chapter 13).
TRIALS_THE_CHECKS_NEED = 2


def _wrap_search(original):
    """keras-tuner's ``BaseTuner.search`` in proof mode: its oracle hands out TRIALS_THE_CHECKS_NEED
    trials, then the STOPPED trial with which an oracle ends a search (as at its ``max_trials``), on
    every rank at the same trial. The best models and hyperparameters are those of the trials run."""
    trial_module = sys.modules[original.__module__].trial_module  # keras-tuner's, imported by now

    @functools.wraps(original)
    def search(self, *args, **kwargs):
        oracle = getattr(self, "oracle", None)
        if not _proof.on or _busy() or oracle is None or "create_trial" in vars(oracle):
            return original(self, *args, **kwargs)
        handed_out, cut = [0], [False]
        create_trial = oracle.create_trial

        def create_trial_in_proof(tuner_id):
            if handed_out[0] >= TRIALS_THE_CHECKS_NEED:
                cut[0] = True
                oracle.tuner_ids.discard(tuner_id)  # as the oracle does when it stops a tuner
                return trial_module.Trial(oracle.get_space(), status=trial_module.TrialStatus.STOPPED)
            trial = create_trial(tuner_id)
            if trial.status == trial_module.TrialStatus.RUNNING:
                handed_out[0] += 1
            return trial

        oracle.create_trial = create_trial_in_proof
        try:
            return original(self, *args, **kwargs)
        finally:
            del oracle.create_trial
            if cut[0]:
                record_shortened("tuner search", handed_out[0], getattr(oracle, "max_trials", None), unit="trials")

    search._npu_probe = True
    return search


def _watch_keras_tuner(keras_tuner) -> None:
    """Called once keras-tuner is imported (importing it with every rank would cost 1.4 s)."""
    for tuner_class in keras_tuner.Tuner.__mro__:
        if "search" in vars(tuner_class):
            _patch(tuner_class, "search", _wrap_search)


# ---------------------------------------------------------------------------------- Estimator


def _make_estimator_hook(input_fn_box: dict, steps: Optional[int] = None, max_steps: Optional[int] = None):
    """``steps``/``max_steps``: those of ``train``, for the progress (how many steps this call runs)."""
    import tensorflow as tf

    v1 = tf.compat.v1

    class ProbeHook(v1.train.SessionRunHook):
        """Appended last; reads in the first before_run, i.e. after every after_create_session.
        Counts the steps in after_run (MonitoredSession calls every hook's after_run anyway)."""

        def __init__(self):
            super().__init__()
            self.steps_done = 0
            self.call: Optional[int] = None  # this train call's number in `progress`
            self.planned: Optional[int] = None  # the steps the call was given (steps, or max_steps left)
            self.stopped = False  # by proof mode

        def begin(self):
            self._variables = v1.trainable_variables()
            self._started = False
            self._first_batches = []
            self._global_step = v1.train.get_global_step() if max_steps and not steps else None
            dataset = input_fn_box.get("dataset")
            if dataset is not None and getattr(dataset, "_graph", None) is v1.get_default_graph():
                self._first_batches = [self._first_batch_of(dataset) for _copy in range(2)]

        @staticmethod
        def _first_batch_of(dataset):
            iterator = v1.data.make_initializable_iterator(dataset)
            return iterator.initializer, iterator.get_next()

        def after_create_session(self, session, coord):
            self._begin_progress(session)
            if input_fn_box.get("arrays") is not None:
                data, shuffle, batch_size = input_fn_box["arrays"]
                _record_arrays(ESTIMATOR_ARRAYS, data, batch_size, shuffle)
            if not self._first_batches:
                returned = _rows_returned(session, input_fn_box.get("returned"))
                if returned is not None:
                    record_input("estimator input_fn", returned, returned, sample=sample_digests(iter([returned])))
                return
            batches = []
            for initializer, next_element in self._first_batches:
                session.run(initializer)
                batches.append(session.run(next_element))
            sample = sample_digests(itertools.chain([batches[1]], _next_batches(session, next_element)))
            record_input("estimator input_fn", batches[0], batches[1], sharded=input_fn_box.get("sharded"),
                         sample=sample)

        def before_run(self, run_context):
            if not self._started:
                self._started = True
                self._record("start", run_context.session)
            return None

        def after_run(self, run_context, run_values):
            self.steps_done += 1
            if _proof.on and self.steps_done >= _proof.budget and not self.stopped:
                self.stopped = True
                run_context.request_stop()

        def _begin_progress(self, session):
            planned = steps
            if planned is None and self._global_step is not None:
                try:
                    planned = max(0, int(max_steps) - int(session.run(self._global_step)))
                except Exception:
                    planned = None
            self.steps_done = 0
            self.planned = planned
            self.call = progress.begin("estimator", steps=_proof.capped(planned) if _proof.on else planned)
            progress.update(self.call, lambda: self.steps_done)

        def finish_progress(self):
            if self.call is not None:
                progress.finish(self.call)

        def end(self, session):
            self.finish_progress()
            if self._started:
                self._record("end", session, steps=self.steps_done)
            if self.stopped:
                record_shortened("estimator train", self.steps_done, self.planned)

        def _record(self, moment, session, **extra):
            values = session.run(self._variables)
            record_weights(moment, "estimator", [v.name for v in self._variables], values, **extra)

    return ProbeHook()


def _rows_returned(session, returned) -> Any:
    """What an input_fn returned instead of a dataset (``features, labels``: tensors of the graph, or
    lists and arrays the Estimator turns into constants), as arrays; None when it cannot be read."""
    if returned is None:
        return None
    import tensorflow as tf

    try:
        leaves = tf.nest.flatten(returned)
        tensors = [leaf for leaf in leaves if isinstance(leaf, tf.Tensor) and leaf.graph is session.graph]
        if not _reads_no_input_stream(tensors):
            return None  # running them would take a batch from the training's own iterator or queue
        values = iter(session.run(tensors)) if tensors else iter(())
        arrays = [next(values) if isinstance(leaf, tf.Tensor) and leaf.graph is session.graph else np.asarray(leaf)
                  for leaf in leaves]
        return tf.nest.pack_sequence_as(returned, arrays)
    except Exception:
        return None


def _reads_no_input_stream(tensors, limit: int = 10000) -> bool:
    seen, stack = set(), [tensor.op for tensor in tensors]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if len(seen) > limit or "Iterator" in op.type or "Queue" in op.type or op.type.startswith("Reader"):
            return False
        stack.extend(tensor.op for tensor in op.inputs)
    return True


def _next_batches(session, next_element):
    """Further batches of an initialized graph-mode iterator, until it ends."""
    import tensorflow as tf

    while True:
        try:
            yield session.run(next_element)
        except tf.errors.OutOfRangeError:
            return


def _wrap_numpy_input_fn(original):
    """``numpy_input_fn(x, y, ...)`` feeds the arrays through queues, not a dataset: the input_fn it
    returns keeps them (with its shuffle and batch size) for the Estimator probe to record, as a fit's."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def numpy_input_fn(*args, **kwargs):
        input_fn = original(*args, **kwargs)
        try:
            arguments = signature.bind(*args, **kwargs).arguments
            x, y = arguments.get("x"), arguments.get("y")
            if original.__name__ == "pandas_input_fn":  # a DataFrame and a Series: their rows as arrays
                x, y = np.asarray(x), (np.asarray(y) if y is not None else None)
            input_fn._npu_arrays = ([x, y] if y is not None else [x], arguments.get("shuffle"),
                                    arguments.get("batch_size", 128))
        except (TypeError, AttributeError):
            pass
        return input_fn

    numpy_input_fn._npu_probe = True
    return numpy_input_fn


def _wrap_input_fn(input_fn, box: dict):
    """Same parameters as ``input_fn`` (the Estimator passes params/mode/config by name)."""
    box["arrays"] = getattr(input_fn, "_npu_arrays", None)

    def wrapped(*args, **kwargs):
        result = input_fn(*args, **kwargs)
        try:
            import tensorflow as tf

            if isinstance(result, tf.compat.v1.data.Dataset) or isinstance(result, tf.data.Dataset):
                box["dataset"] = result
                box["sharded"] = _graph_has_shard(result)
            else:  # (features, labels) themselves: the same rows every step
                box["returned"] = result
        except Exception:
            pass
        return result

    try:
        wrapped.__signature__ = inspect.signature(input_fn)
    except (TypeError, ValueError):
        return input_fn
    return wrapped


def _graph_has_shard(dataset) -> Optional[bool]:
    try:
        graph = dataset._graph
        return any(op.type == "ShardDataset" for op in graph.get_operations())
    except Exception:
        return None


def _wrap_estimator_train(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def train(self, *args, **kwargs):
        if _busy():
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        arguments = bound.arguments
        box: dict = {}
        arguments["input_fn"] = _wrap_input_fn(arguments["input_fn"], box)
        hooks = arguments.get("hooks")
        probe = _make_estimator_hook(box, arguments.get("steps"), arguments.get("max_steps"))
        arguments["hooks"] = list(hooks or []) + [probe]
        # An Estimator builds its graph with config.tf_random_seed: unset, its initial weights come
        # from the clock. Give it the rank's seed (still different per rank, as on real cards, but
        # reproducible, so a single-card run starts where rank 0 did).
        config = getattr(self, "_config", None)
        seeded = _rank_seed is not None and config is not None and getattr(config, "tf_random_seed", 0) is None
        if seeded:
            self._config = config.replace(tf_random_seed=_rank_seed)
        try:
            with _Busy():
                return original(*bound.args, **bound.kwargs)
        finally:
            probe.finish_progress()  # train raised before the hook's end
            if seeded:
                self._config = config

    train._npu_probe = True
    return train


# ------------------------------------------------------------------------------- custom loops


# Steps whose variables the probe reads: the start of training, and the first update's result.
OBSERVED_STEPS = 2


class _Trained:
    """One set of variables an optimizer updates outside fit/Estimator (a GAN trains two such sets,
    each with its optimizer: each has its own start, first update and end)."""

    def __init__(self):
        self.steps = 0
        self.variables: list = []
        self.arrays: Optional[List[np.ndarray]] = None  # graph-mode values, read before the last update
        self.dirty = False
        self.observed = None  # TF2 functions: a variable counting this set's observed updates
        self.source = "optimizer step"


class _LoopTracker:
    """Optimizer steps outside fit/Estimator: the values before the first one, and the end values."""

    def __init__(self):
        self._trained: Dict[tuple, _Trained] = {}  # variable names -> what was seen of them
        self._step_counter = None  # TF2 functions: a variable counting every optimizer step
        self._steps_at_last_end = 0
        self._uncounted_steps = 0  # steps seen by on_step that the counter does not count
        self._steps_recorded = 0  # steps up to the last end record
        self._feed_recorded = False  # a TF1 loop's first fed batch: the first loop may read constants
        self._steps_at_cell_start = 0
        self.shortened_in_cell = False  # proof mode ended a loop in this cell

    def forget(self):
        counter = self._step_counter
        observed = [trained.observed for trained in self._trained.values() if trained.observed is not None]
        self.__init__()
        if counter is not None:  # functions traced earlier keep these variables: restart their counts
            counter.assign(0)
            self._step_counter = counter
        for variable in observed:  # kept by the traced functions; the next observed_counter makes its own
            variable.assign(0)

    def step_counter(self):
        """The step-counting variable of TF2 functions, made eagerly on first use (while tracing)."""
        if self._step_counter is None:
            self._step_counter = _counting_variable("npu_sim_optimizer_steps")
        return self._step_counter

    def observed_counter(self, variables):
        """The variable counting the observed updates of this set in TF2 functions (made while tracing)."""
        trained = self._trained.setdefault(_names(variables), _Trained())
        if trained.observed is None:
            trained.observed = _counting_variable("npu_sim_observed_steps")
        return trained.observed

    def begin_cell(self) -> None:
        self._steps_at_cell_start = self.total_steps()
        self.shortened_in_cell = False

    def say_if_not_shortened(self) -> None:
        """In proof mode, a cell whose custom loop took more steps than a proof and was not cut: say
        that it ran as written, and why."""
        steps = self.total_steps() - getattr(self, "_steps_at_cell_start", 0)
        if _proof.on and steps > _proof.budget and not self.shortened_in_cell:
            record_shortened("custom loop", steps, steps, ran_as_written=_(
                "its batches do not come from a for loop over a tf.data dataset (next(iterator), arrays sliced "
                "by hand): proof mode cannot end it from outside"))

    @property
    def observed_steps(self) -> int:
        """Updates the probes read, every trained set together (a TF2 function's first two per set)."""
        return sum(trained.steps for trained in self._trained.values())

    def total_steps(self) -> int:
        """Optimizer steps taken since the notebook started: eager and TF1 ones as seen, those of TF2
        functions from their counter (one read of a variable)."""
        counted = int(self._step_counter.numpy()) if self._step_counter is not None else 0
        return self._uncounted_steps + counted

    def _counted_steps_since_last_end(self) -> bool:
        if self._step_counter is None:
            return False
        steps = int(self._step_counter.numpy())
        moved, self._steps_at_last_end = steps != self._steps_at_last_end, steps
        return moved

    def trains_any_of(self, names: tuple) -> bool:
        """Does an optimizer (a set it updates) hold any of these variables?"""
        wanted = set(names)
        return any(trained.source == "optimizer step" and wanted.intersection(key)
                   for key, trained in self._trained.items())

    def on_step(self, variables, arrays, counted: bool = False, source: str = "optimizer step") -> None:
        """Called before every update of a set of variables; its first call is the start of training,
        its second one sees the first update's result ("step1": how large one update was). ``counted``:
        the step is also counted by the TF2 functions' step counter. ``arrays``: the values (a graph's,
        kept for its end), or eagerly a function that reads them, called only for a record (a read every
        step would copy the model every step)."""
        trained = self._trained.setdefault(_names(variables), _Trained())
        trained.dirty = True
        trained.steps += 1
        trained.source = source
        self._uncounted_steps += 0 if counted else 1
        kept = None if callable(arrays) else arrays
        read = arrays if kept is None else lambda: kept
        if not self._feed_recorded:
            self._feed_recorded = _record_session_feed()
        if trained.steps == 1 and not _inputs_in_cell and _run_observations is None:
            _record_arrays_the_step_reads()  # in a session run the graph's constants are (after it)
        if trained.steps == 1:
            record_weights("start", source, [v.name for v in variables], read())
        elif trained.steps == OBSERVED_STEPS:  # the last step a TF2 function lets the probe see
            record_weights("step1", source, [v.name for v in variables], read())
        trained.variables, trained.arrays = list(variables), kept

    def record_end_values(self) -> None:
        # TF2 functions call on_step only for the first steps: the counter tells a later cell trained
        counted = self._counted_steps_since_last_end()
        ended = [t for t in self._trained.values() if t.variables and (t.dirty or counted)]
        if not ended:
            return
        import tensorflow as tf

        total = self._uncounted_steps + self._steps_at_last_end  # the counter, as just read
        for trained in ended:
            trained.dirty = False
            arrays = trained.arrays  # graph-mode variables: the values read before the last update
            if tf.executing_eagerly():
                try:
                    arrays = _read_without_copying(trained.variables)
                except Exception:  # variables of a graph, in an eager program
                    pass
            record_weights("end", trained.source, [v.name for v in trained.variables], arrays,
                           steps=total - self._steps_recorded)
        self._steps_recorded = total


FULL_BATCH = "arrays the step reads"
GRAPH_CONSTANTS = "graph constants the step reads"


def _record_arrays_the_step_reads() -> None:
    """A step that read no dataset, feed nor fit's arrays reads arrays the notebook made (full-batch
    gradient descent on ``X``, ``Y``): the arrays the notebook's code on the stack names are its input.
    The globals a cell's code and the notebook functions it names read: a per-rank slice a cell's loop
    makes (``xb = x[i::n]``) is one too. Not the functions' locals: what they compute from the weights
    (``pred = W * X + b``) differs wherever the weights do, whatever the data."""
    import tensorflow as tf

    found = {}
    frame = sys._getframe(2)
    while frame is not None:
        if _is_a_cell(frame.f_code.co_filename):
            spaces = (frame.f_globals,)
            codes = [frame.f_code] + [value.__code__ for value in (_looked_up(spaces, name) for name in frame.f_code.co_names)
                                      if inspect.isfunction(value) and _is_a_cell(value.__code__.co_filename)]
            for code in codes:
                for name in code.co_names:
                    value = _looked_up(spaces, name)
                    if name not in found and _samples_array(tf, value):
                        found[name] = value
        frame = frame.f_back
    if found:
        arrays = [np.asarray(found[name]) for name in sorted(found)]
        record_input(FULL_BATCH, arrays, arrays, rows=None, sample=_array_row_digests(arrays))


def _looked_up(spaces, name: str):
    for space in spaces:
        if name in space:
            return space[name]
    return None


def _samples_array(tf, value) -> bool:
    """An array of at least two rows, not a variable (numpy's, or an eager tensor)."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and value.shape[0] >= 2 and value.dtype != object
    return (isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable) and hasattr(value, "numpy")
            and value.shape.rank is not None and value.shape.rank >= 1 and (value.shape[0] or 0) >= 2)


def _array_row_digests(arrays: list) -> Optional[List[str]]:
    """Row digests of the arrays that share the most common row count (the samples and their labels)."""
    counts = collections.Counter(a.shape[0] for a in arrays)
    rows = counts.most_common(1)[0][0]
    return row_digests([a for a in arrays if a.shape[0] == rows])


def _names(variables) -> tuple:
    return tuple(v.name for v in variables)


def _counting_variable(name: str):
    import tensorflow as tf

    with tf.init_scope():
        return tf.Variable(0, trainable=False, dtype=tf.int64, name=name)


_loop_tracker = _LoopTracker()


def _wrap_apply_gradients(original):
    @functools.wraps(original)
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if _busy():
            return original(self, grads_and_vars, *args, **kwargs)
        import tensorflow as tf

        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]
        if not variables:  # updates nothing (a model built by this very step's call): not a training step
            return original(self, grads_and_vars, *args, **kwargs)
        if tf.executing_eagerly():
            _loop_tracker.on_step(variables, lambda: _read_without_copying(variables))
            return original(self, grads_and_vars, *args, **kwargs)

        eager_outside = tf.compat.v1.executing_eagerly_outside_functions()

        def observe(*arrays):
            run = _run_observations
            if run is not None and not eager_outside:  # a TF1 session run: one step, seen when it ends
                run.update((v.name, (v, a)) for v, a in zip(variables, arrays))
            else:
                _loop_tracker.on_step(variables, list(arrays), counted=eager_outside)
            return np.int32(0)

        def read_and_observe():
            reads = [tf.identity(v) for v in variables]
            return tf.numpy_function(observe, reads, tf.int32, stateful=True, name="npu_sim_probe")

        if not eager_outside:
            # TF1 graph: the variables cannot be read after the session, so every step is observed
            probe = read_and_observe()
        else:
            # TF2 function: only the first steps, so that training pays nothing after them
            counter = _loop_tracker.step_counter()
            seen = _loop_tracker.observed_counter(variables)  # per set: a GAN's two updates are each seen twice
            observed = tf.cond(seen < OBSERVED_STEPS, read_and_observe, lambda: tf.constant(0, tf.int32))
            with tf.control_dependencies([observed]):
                probe = tf.group(counter.assign_add(1), seen.assign_add(1))
        with tf.control_dependencies([probe]):
            update = original(self, grads_and_vars, *args, **kwargs)
        if not eager_outside and getattr(update, "name", None):
            _train_ops.setdefault(tf.compat.v1.get_default_graph(), set()).add(update.name)
        return update

    apply_gradients._npu_probe = True
    return apply_gradients


TAPE_GRADIENT = "tape gradient"


class _TapeTracker:
    """Variables trained by hand from a tape's gradients, with no optimizer the probes know (an
    optimizer class written in the notebook, ``w.assign_sub(lr * dw)``): the core API's own guides.

    A gradient of variables is not yet training: a tour of the tape takes gradients and updates
    nothing, and a toy minimizes a function of a scalar with no data. So a set of variables counts
    as trained at its second gradient in a cell (eagerly, outside fit and the optimizers' probes)
    when, since its first one, the variables changed, no optimizer updated any of them, and the cell
    read input (a dataset iterated, a batch fed). Its start is then the values read at the first gradient, its
    "step1" the values now, and each later gradient is a step of the loop tracker (proof mode ends
    the loop by those steps, the end values are read after the cell)."""

    # Gradients of a set that is still not trained after this many: no longer compared (each comparison
    # reads the variables; a loop that only looks at gradients would pay it every step).
    WATCHED_GRADIENTS = 4

    def __init__(self):
        self._first: Dict[tuple, list] = {}  # names -> the values at the set's first gradient
        self._seen: Dict[tuple, int] = {}  # names -> gradients taken while not found trained
        self._trained: set = set()  # names of the sets found trained by hand

    def forget(self) -> None:
        self.__init__()

    def begin_cell(self) -> None:
        """Each cell watches afresh: a set is found trained within one cell, which reads its input."""
        self._first.clear()
        self._seen.clear()

    def on_gradient(self, variables: list) -> None:
        names = _names(variables)
        if names in self._trained:
            _loop_tracker.on_step(variables, lambda: _read_without_copying(variables), source=TAPE_GRADIENT)
            return
        if _loop_tracker.trains_any_of(names):
            return  # an optimizer applies them: its own probe sees the steps
        self._seen[names] = seen = self._seen.get(names, 0) + 1
        if seen > self.WATCHED_GRADIENTS:
            self._first.pop(names, None)
            return
        first = self._first.get(names)
        if first is None:
            self._first[names] = _read_without_copying(variables)  # shares buffers: an update copies first
            return
        now = _read_without_copying(variables)
        if not _inputs_in_cell or not _changed(first, now):
            return
        self._trained.add(names)
        del self._first[names]
        _loop_tracker.on_step(variables, lambda: first, source=TAPE_GRADIENT)
        _loop_tracker.on_step(variables, lambda: now, source=TAPE_GRADIENT)


def _changed(before: list, after: list) -> bool:
    return any(np.shape(a) != np.shape(b) or not np.array_equal(a, b) for a, b in zip(before, after))


_tape_tracker = _TapeTracker()


LEARNING_RULE = "learning rule"
RULE_WINDOW = "window a learning rule reads"


class _RuleParameter:
    """One tensor attribute of an object a learning rule updates, seen as the loop tracker sees a
    variable: a name alike on every rank, and its current value."""

    def __init__(self, owner, attribute: str, name: str):
        self._owner = weakref.ref(owner)
        self.attribute, self.name = attribute, name

    def value(self):
        import tensorflow as tf

        return tf.convert_to_tensor(getattr(self._owner(), self.attribute))


class _RuleSet:
    def __init__(self, owner, attributes: List[str], label: str):
        self.owner = weakref.ref(owner)
        self.first = None  # the attribute whose update starts a step: the first one rebound
        self.parameters = [_RuleParameter(owner, attribute, f"{label}.{attribute}") for attribute in attributes]


class _RuleTracker:
    """Parameters a notebook's own class updates by a rule it writes: ``self.w = self.w + lr * (pos -
    neg) / rows`` in a loop over windows of the data (an RBM's contrastive divergence), with no variable,
    tape or optimizer to watch. The plain classes the notebook defines get a ``__setattr__`` that sees
    an attribute holding a float tensor rebound to another of the same shape: the first such attribute
    of an object starts each step (its set: every float tensor the object holds). A step is one of the
    loop tracker's (start, first update, end values, proof mode's cut); at the first one the window the
    rule reads is the input: the array in the updating function's locals whose rows are rows of a
    larger one there (``batch = X[start:end]``). Classes are watched from the cell after the one that
    defines them."""

    def __init__(self):
        self._sets: Dict[int, _RuleSet] = {}

    def forget(self) -> None:
        self._sets.clear()

    def on_rebind(self, owner, attribute: str, old, new, frame) -> None:
        if not (_is_float_tensor(old) and _is_float_tensor(new) and tuple(old.shape) == tuple(new.shape)):
            return
        entry = self._sets.get(id(owner))
        if entry is None or entry.owner() is not owner:
            attributes = sorted(name for name, value in vars(owner).items() if _is_float_tensor(value))
            entry = self._sets[id(owner)] = _RuleSet(owner, attributes, _label_of(owner))
        if entry.first is None:
            entry.first = attribute
        if attribute != entry.first or attribute not in [p.attribute for p in entry.parameters]:
            return
        if not _inputs_in_cell:
            _record_rule_window(frame)

        def values_before_this_step():
            return [np.asarray(old if p.attribute == attribute else getattr(owner, p.attribute)) for p in entry.parameters]

        _loop_tracker.on_step(entry.parameters, values_before_this_step, source=LEARNING_RULE)


_rule_tracker = _RuleTracker()


def _is_float_tensor(value) -> bool:
    """A float numpy array or eager tensor of at least one dimension, not a variable."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and value.dtype.kind == "f"
    tf = sys.modules.get("tensorflow")
    return (tf is not None and isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable)
            and hasattr(value, "numpy") and value.dtype.is_floating and value.shape.rank not in (None, 0))


def _label_of(owner) -> str:
    """How the notebook reaches ``owner``: ``rbm_list[1]`` (a container's place, alike on every rank)
    before ``rbm`` (a loop variable moves on), else its class and order of first update."""
    try:
        from IPython import get_ipython

        namespace = get_ipython().user_ns
    except Exception:
        namespace = {}
    direct = None
    for name, value in list(namespace.items()):
        if name.startswith("_"):
            continue
        if value is owner:
            direct = direct or name
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if item is owner:
                    return f"{name}[{index}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is owner:
                    return f"{name}[{key!r}]"
    return direct or f"{type(owner).__name__}#{len(_rule_tracker._sets)}"


def _record_rule_window(frame) -> None:
    """The window the updating function reads: an array among its locals whose first and last rows
    are rows of a larger array there with the same row shape. Each array is read once (a tensor's
    read copies it: the whole data, for the larger one)."""
    arrays = {name: value for name, value in frame.f_locals.items() if _is_rows(value)}
    read: Dict[str, np.ndarray] = {}

    def rows_of(name: str) -> np.ndarray:
        if name not in read:
            read[name] = np.asarray(arrays[name])
        return read[name]

    for name, window in sorted(arrays.items(), key=lambda item: item[1].shape[0]):
        for other_name, whole in arrays.items():
            if other_name == name or tuple(whole.shape[1:]) != tuple(window.shape[1:]) or whole.shape[0] <= window.shape[0]:
                continue
            rows, whole_rows = rows_of(name), rows_of(other_name).reshape(whole.shape[0], -1)
            first, last = rows[0].reshape(-1), rows[-1].reshape(-1)
            if (whole_rows == first).all(axis=1).any() and (whole_rows == last).all(axis=1).any():
                record_input(RULE_WINDOW, rows, sample=row_digests(rows))
                return


def _is_rows(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and value.shape[0] >= 2 and value.dtype != object
    tf = sys.modules.get("tensorflow")
    return (tf is not None and isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable)
            and hasattr(value, "numpy") and value.shape.rank not in (None, 0) and (value.shape[0] or 0) >= 2)


_MISSING = object()


def _rule_setattr(self, name, value):
    old = self.__dict__.get(name, _MISSING) if hasattr(self, "__dict__") else _MISSING
    object.__setattr__(self, name, value)
    if old is not _MISSING and not _busy():
        try:
            _rule_tracker.on_rebind(self, name, old, value, sys._getframe(1))
        except Exception:  # a probe never breaks the notebook's code
            pass


def _watch_plain_classes() -> None:
    """Give the plain classes the notebook defined so far :func:`_rule_setattr` (before a cell runs:
    a class is complete then, its decorators applied; a frozen dataclass has a ``__setattr__`` of its
    own and is left alone)."""
    try:
        from IPython import get_ipython

        namespace = get_ipython().user_ns
    except Exception:
        return
    for value in list(namespace.values()):
        if isinstance(value, type) and "__setattr__" not in vars(value) and _defined_in_a_cell(value) and _plain(value):
            value.__setattr__ = _rule_setattr


def _defined_in_a_cell(cls: type) -> bool:
    return any(_is_a_cell(getattr(getattr(member, "__code__", None), "co_filename", "")) for member in vars(cls).values())


def _plain(cls: type) -> bool:
    """No base but ``object`` and the notebook's own classes, none with a ``__setattr__`` but ours."""
    return all(base is object or (_defined_in_a_cell(base) and vars(base).get("__setattr__", _rule_setattr) is _rule_setattr)
               for base in cls.__mro__)


def _wrap_tape_gradient(original):
    @functools.wraps(original)
    def gradient(self, target, sources, *args, **kwargs):
        result = original(self, target, sources, *args, **kwargs)
        if _busy():
            return result
        import tensorflow as tf

        if not tf.executing_eagerly():
            return result
        try:
            variables = tf.nest.flatten(sources)
        except Exception:
            return result
        if variables and all(isinstance(v, tf.Variable) and v.trainable for v in variables):
            _tape_tracker.on_gradient(variables)
        return result

    gradient._npu_probe = True
    return gradient


# TF1 graph -> the names of the ops that apply an optimizer's update: a session run that fetches one trains.
_train_ops: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _SessionProof:
    """Proof mode in TF1 session loops. A Python loop (``for step in range(50000)``) cannot be cut from
    outside: once a session has trained the proof's steps, each further run that trains returns what
    the same run returned last, without running (the global step, if the graph has one, still moves
    on, so that loops counting it end); MonitoredSession's ``should_stop`` says True."""

    def __init__(self):
        self.steps: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # session -> training runs
        self.last: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # session -> {fetched: result}
        self.said: "weakref.WeakSet" = weakref.WeakSet()  # sessions whose shortening was recorded
        self._increments: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # graph -> op, or None
        self._trains: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # graph -> {op name: trains}

    def trains(self, session, fetches) -> Optional[tuple]:
        """The names of what a run fetches, when one of them runs an optimizer's update (directly or
        through a ``tf.group``); None otherwise."""
        graph = session.graph
        if not _train_ops.get(graph):
            return None
        import tensorflow as tf

        fetched, ops = [], []
        for leaf in _fetch_leaves(fetches):
            try:
                element = graph.as_graph_element(leaf)
            except Exception:
                continue  # not a graph element (a hook's feed_dict or RunOptions): it runs nothing
            ops.append(element if isinstance(element, tf.Operation) else element.op)
            fetched.append(getattr(leaf, "name", leaf) if isinstance(getattr(leaf, "name", leaf), str) else repr(leaf))
        fetched = tuple(fetched)
        known = self._trains.setdefault(graph, {})
        return fetched if any(self._runs_an_update(op, known) for op in ops) else None

    @staticmethod
    def _runs_an_update(op, known: dict, depth: int = 6) -> bool:
        if op.name in known:
            return known[op.name]
        updates = _train_ops.get(op.graph, ())
        found = op.name in updates or (depth > 0 and any(
            _SessionProof._runs_an_update(parent, known, depth - 1)
            for parent in list(op.control_inputs) + [tensor.op for tensor in op.inputs]))
        known[op.name] = found
        return found

    def exhausted(self, session) -> bool:
        return self.steps.get(session, 0) >= _proof.budget

    def replay(self, session, fetched: tuple, run_original):
        """The last result of this run once the session has its steps; ``_NOT_REPLAYED`` otherwise."""
        last = self.last.get(session, {})
        if not self.exhausted(session) or fetched not in last:
            return _NOT_REPLAYED
        self._advance_global_step(session, run_original)
        _loop_tracker.shortened_in_cell = True
        if session not in self.said:
            self.said.add(session)
            record_shortened("session loop", self.steps[session], None)
        return last[fetched]

    def ran(self, session, fetched: tuple, result) -> None:
        self.steps[session] = self.steps.get(session, 0) + 1
        if self.exhausted(session):
            self.last.setdefault(session, {})[fetched] = result

    def _advance_global_step(self, session, run_original) -> None:
        graph = session.graph
        if graph not in self._increments:
            import tensorflow as tf

            step = tf.compat.v1.train.get_global_step(graph)
            if step is None or graph.finalized:
                self._increments[graph] = None
            else:
                with graph.as_default():
                    self._increments[graph] = tf.compat.v1.assign_add(step, 1, name="npu_sim_proof_step")
        increment = self._increments.get(graph)
        if increment is not None:
            with _Busy():
                run_original(session, increment)

    def forget(self) -> None:
        self.__init__()


def _fetch_leaves(fetches) -> list:
    """The leaves of a session run's fetches. A MonitoredSession fetches a dict keyed by its hooks
    (``{hook: SessionRunArgs(...)}``), which ``tf.nest`` cannot flatten: its keys do not sort."""
    if fetches is None:
        return []
    if isinstance(fetches, dict):
        return [leaf for value in fetches.values() for leaf in _fetch_leaves(value)]
    if isinstance(fetches, (list, tuple)):  # a namedtuple too (SessionRunArgs)
        return [leaf for value in fetches for leaf in _fetch_leaves(value)]
    return [fetches]


_NOT_REPLAYED = object()
_session_proof = _SessionProof()


def _wrap_should_stop(original):
    @functools.wraps(original)
    def should_stop(self):
        if _proof.on:
            try:
                session = self._tf_sess()  # noqa: SLF001 (the raw session the runs go to)
                if _session_proof.exhausted(session):
                    if session not in _session_proof.said:
                        _session_proof.said.add(session)
                        record_shortened("monitored session", _session_proof.steps[session], None)
                    return True
            except Exception:
                pass
        return original(self)

    should_stop._npu_probe = True
    return should_stop


# The arrays the session call running now was fed (a TF1 loop's batches, ``feed_dict``): set by the
# main thread around ``Session.run``, read by the step probe, which runs in an executor thread.
_session_feed: Optional[dict] = None
# The variables the update probes of the TF1 session run under way read, by name. A run that updates
# two models (a GAN's generator and discriminator, each with its optimizer) runs their probes in an
# order of TensorFlow's choosing: seen as one step with every variable in name order, the start and
# end of training are the same on every rank whatever order each rank ran them in.
_run_observations: Optional[dict] = None


def _start_run_observations() -> Optional[dict]:
    global _run_observations
    outer, _run_observations = _run_observations, ({} if _run_observations is None else _run_observations)
    return outer


def _end_run_observations(outer: Optional[dict]) -> None:
    """The session run ended: its updates are one optimizer step (the outermost run only)."""
    if outer is None and _run_observations:
        seen = [_run_observations[name] for name in sorted(_run_observations)]
        _run_observations.clear()
        _loop_tracker.on_step([v for v, _a in seen], [a for _v, a in seen])


def _stop_run_observations(outer: Optional[dict]) -> None:
    global _run_observations
    if outer is None:
        _run_observations = None


# TF1 graph -> the datasets iterated in it (made into an iterator) and not yet observed: a session
# loop reads them through iterators no probe sees, so the first session call after one is made reads
# its first batches through iterators of its own (as the Estimator probe does with input_fn's).
_graph_datasets: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _wrap_apply_debug_options(original):
    @functools.wraps(original)
    def _apply_debug_options(self):
        import tensorflow as tf

        from tensorflow.python import tf2

        # TF1 behaviour only (inside a one-shot iterator's Defun, "eagerly outside functions" says True)
        if not _busy() and not tf2.enabled() and not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
            while graph is not None and getattr(graph, "building_function", False):  # the iterator's function
                graph = getattr(graph, "outer_graph", None) or getattr(graph, "_outer_graph", None)
            if graph is not None:
                _graph_datasets.setdefault(graph, []).append(self)
        return original(self)

    _apply_debug_options._npu_probe = True
    return _apply_debug_options


def _observe_graph_datasets(session) -> None:
    """The first batches of the datasets a TF1 session's graph iterates, read before its next call."""
    pending = _graph_datasets.pop(session.graph, None)
    if not pending or session.graph.finalized:
        return
    import tensorflow as tf

    v1 = tf.compat.v1
    with _Busy():
        for dataset in pending:
            try:
                with session.graph.as_default():
                    iterators = [v1.data.make_initializable_iterator(dataset) for _copy in range(2)]
                batches = []
                for iterator in iterators:
                    session.run(iterator.initializer)
                    batches.append(session.run(iterator.get_next()))
                sample = sample_digests(itertools.chain([batches[1]], _next_batches(session, iterators[1].get_next())))
            except Exception:  # fed by a placeholder, or not iterable this way: nothing observed
                continue
            record_input("session dataset", batches[0], batches[1], sharded=_graph_has_shard(dataset), sample=sample)


def _wrap_session_run(original):
    @functools.wraps(original)
    def run(self, fetches, feed_dict=None, *args, **kwargs):
        global _session_feed
        if _graph_datasets and not _busy():
            _observe_graph_datasets(self)
        fetched = _session_proof.trains(self, fetches) if _proof.on and not _busy() else None
        if fetched is not None:
            replayed = _session_proof.replay(self, fetched, original)
            if replayed is not _NOT_REPLAYED:
                return replayed
        _session_feed = feed_dict or None
        outer = _start_run_observations()
        try:
            result = original(self, fetches, feed_dict, *args, **kwargs)
            _end_run_observations(outer)
        finally:
            _session_feed = None
            _stop_run_observations(outer)
        if fetched is not None:
            _session_proof.ran(self, fetched, result)
        if not _inputs_in_cell and not _busy() and _train_ops.get(self.graph) and _cell not in _constants_tried and (
                fetched is not None or _session_proof.trains(self, fetches) is not None):
            _constants_tried.add(_cell)
            _record_graph_constants(self, fetches, original)
        return result

    run._npu_probe = True
    return run


_constants_tried: set = set()  # the cell, once its training run was searched for the constants it reads
_GRAPH_SEARCH_OPS = 20000
_SLICING_OPS = {"StridedSlice", "Slice", "GatherV2", "Gather"}


def _record_graph_constants(session, fetches, run_original) -> None:
    """A TF1 training run that read no dataset nor feed computes on constants of its graph (a
    regression on ``tf.constant([1., ..., 10.])``): their values, each taken after the slice that
    reads it (``X[rank_id::rank_size]``), are its input. Float constants of two rows or more only:
    shapes and indices are integers, alike on every rank."""
    import tensorflow as tf

    try:
        ops = [op if isinstance(op, tf.Operation) else op.op for op in
               (session.graph.as_graph_element(f) for f in tf.nest.flatten(fetches))]
    except Exception:
        return
    seen, stack = set(), list(ops)
    while stack and len(seen) < _GRAPH_SEARCH_OPS:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack += [tensor.op for tensor in op.inputs] + list(op.control_inputs)
    graph = session.graph
    tensors = []
    for name in sorted(seen):
        op = graph.get_operation_by_name(name)
        if op.type != "Const" or not _float_rows(op.outputs[0]):
            continue
        sliced = [consumer.outputs[0] for consumer in op.outputs[0].consumers()
                  if consumer.type in _SLICING_OPS and consumer.name in seen and consumer.inputs[0] is op.outputs[0]]
        tensors += sliced or [op.outputs[0]]
    if not tensors:
        return
    with _Busy():
        try:
            arrays = [np.asarray(value) for value in run_original(session, tensors)]
        except Exception:
            return
    record_input(GRAPH_CONSTANTS, arrays, arrays, rows=None, sample=_array_row_digests(arrays))


def _float_rows(tensor) -> bool:
    shape = tensor.shape
    return (tensor.dtype.is_floating and shape.rank is not None and shape.rank >= 1
            and shape[0] is not None and shape[0] >= 2)


def _record_session_feed() -> bool:
    """The fed arrays of the step running now, as its input (in the order of the placeholders' names);
    whether there were any."""
    feed = _session_feed
    if not feed:
        return False
    try:
        arrays = [np.asarray(value) for _tensor, value in sorted(feed.items(), key=lambda item: getattr(item[0], "name", ""))]
    except Exception:
        return False
    arrays = [a for a in arrays if a.ndim > 0 and a.dtype != object]
    if arrays:
        record_input("session feed_dict", arrays)
    return bool(arrays)


def _wrap_dataset_iter(original):
    @functools.wraps(original)
    def __iter__(self):
        import tensorflow as tf

        if not _busy() and tf.executing_eagerly():
            record_dataset_input("dataset iteration", self)
            iterator = original(self)
            return _proof_iterator(iterator, self) if _proof.on else iterator
        return original(self)

    __iter__._npu_probe = True
    return __iter__


# Datasets a custom loop trained on and proof mode already cut: a new pass over one stops at once.
_proved_datasets: "weakref.WeakSet" = weakref.WeakSet()
_proof_iterator_classes: dict = {}


def _proof_iterator(iterator, dataset):
    """``iterator`` (a tf.data iterator, still one: a ``tf.function`` may take it) made to end a
    ``for`` loop over it once a training step ran between two of its batches and the loop has the
    proof's steps. ``next(iterator)`` is never cut (it would raise in the notebook's code), nor a loop
    that trains nothing (an evaluation loop)."""
    base = type(iterator)
    cls = _proof_iterator_classes.get(base)
    if cls is None:
        class ProofIterator(base):
            def __next__(self):
                if _proof.on and _called_by_a_for_loop():
                    _stop_a_proved_loop(self)
                return super().__next__()

        cls = _proof_iterator_classes[base] = ProofIterator
    try:
        iterator.__class__ = cls
        iterator._npu_dataset = weakref.ref(dataset)
        iterator._npu_steps_at_start = iterator._npu_steps_seen = _loop_tracker.total_steps()
    except (TypeError, AttributeError):
        pass
    return iterator


def _called_by_a_for_loop() -> bool:
    import dis
    import sys

    frame = sys._getframe(2)  # over this function and __next__: the frame iterating
    try:
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] == "FOR_ITER"
    except (IndexError, AttributeError):
        return False


def _stop_a_proved_loop(iterator) -> None:
    steps = _loop_tracker.total_steps()
    dataset = iterator._npu_dataset()
    trained = steps > iterator._npu_steps_seen
    iterator._npu_steps_seen = steps
    if trained and steps - iterator._npu_steps_at_start >= _proof.budget:
        if dataset is not None:
            _proved_datasets.add(dataset)
        record_shortened("custom loop", steps - iterator._npu_steps_at_start, None)
        _loop_tracker.shortened_in_cell = True
        raise StopIteration
    if dataset is not None and dataset in _proved_datasets and steps == iterator._npu_steps_at_start:
        raise StopIteration  # the next epoch of a loop already proved


def _wrap_shuffle(original):
    @functools.wraps(original)
    def shuffle(self, buffer_size, *args, **kwargs):
        if _proof.on and not _busy() and isinstance(buffer_size, int) and buffer_size > PROOF_SHUFFLE_BUFFER:
            buffer_size = PROOF_SHUFFLE_BUFFER
        return original(self, buffer_size, *args, **kwargs)

    shuffle._npu_probe = True
    return shuffle


# ---------------------------------------------------------------------------------- install


def _patch(owner, name: str, wrapper) -> None:
    original = owner.__dict__.get(name)
    if original is None or getattr(original, "_npu_probe", False):
        return
    setattr(owner, name, wrapper(original))


def install(seed: Optional[int] = None) -> None:
    """Patch the observation points; idempotent. Needs TensorFlow importable. ``seed``: the rank's
    seed, given to Estimators that have none."""
    global _installed, _rank_seed
    if seed is not None:
        _rank_seed = seed
    if _installed:
        return
    import tensorflow as tf

    _installed = True
    _patch(tf.keras.Model, "fit", _wrap_fit)
    try:  # TF1 mode's Keras models are training_v1's, whose fit is its own
        from keras.src.engine import training_v1

        _patch(training_v1.Model, "fit", _wrap_fit)
    except ImportError:
        pass
    for optimizer_class in _optimizer_classes(tf):
        _patch(optimizer_class, "apply_gradients", _wrap_apply_gradients)
    _patch(tf.GradientTape, "gradient", _wrap_tape_gradient)
    _patch(tf.keras.Model, "evaluate", lambda original: _wrap_evaluate(original, "keras evaluate"))
    _patch(tf.data.Dataset, "__iter__", _wrap_dataset_iter)
    _patch(tf.data.Dataset, "shuffle", _wrap_shuffle)
    _watch_file_writers(tf)
    from tensorflow.python.client import session as session_module
    from tensorflow.python.training import monitored_session

    _patch(session_module.BaseSession, "run", _wrap_session_run)
    _patch(monitored_session._MonitoredSession, "should_stop", _wrap_should_stop)
    from tensorflow.python.data.ops import dataset_ops

    _patch(dataset_ops.DatasetV2, "_apply_debug_options", _wrap_apply_debug_options)
    import wrapt

    wrapt.register_post_import_hook(_watch_keras_tuner, "keras_tuner")
    try:
        import tensorflow_estimator.python.estimator.estimator as estimator_module

        _patch(estimator_module.Estimator, "train", _wrap_estimator_train)
        from tensorflow_estimator.python.estimator.inputs import numpy_io, pandas_io

        # The functions are bound by name in the public API's modules too: each gets the wrapped one.
        for module, name in ((numpy_io, "numpy_input_fn"), (pandas_io, "pandas_input_fn")):
            original = getattr(module, name)
            wrapped = original if getattr(original, "_npu_probe", False) else _wrap_numpy_input_fn(original)
            for owner in (module, tf.compat.v1.estimator.inputs, getattr(tf.estimator, "inputs", None)):
                if owner is not None and getattr(owner, name, None) is not None:
                    setattr(owner, name, wrapped)
        _patch(estimator_module.Estimator, "evaluate", lambda original: _wrap_evaluate(original, "estimator evaluate"))
    except ImportError:
        pass


def _optimizer_classes(tf) -> list:
    classes = [tf.compat.v1.train.Optimizer]
    for path in ("keras.optimizers.Optimizer", "keras.optimizers.legacy.Optimizer"):
        try:
            classes.append(functools.reduce(getattr, path.split("."), tf))
        except AttributeError:
            continue
    return classes


def record_skipped_update(step: int, source: str) -> None:
    """A loss-scale optimizer skipped this rank's update at ``step`` (its float status said the
    step overflowed); ``source`` names the optimizer. The allreduce check names the ranks that
    skipped a step the others applied."""
    _record("skipped update", source, step=step)


# ------------------------------------------------------------------------------- file writers

# What writes a file a rank's notebook names, and the parameter that names it. On one server the
# ranks share a disk: two ranks writing the same checkpoint race on its temporary files, two writing
# one HDF5 file on its lock. The runner compares the ranks' writes after each cell.
_FILE_WRITERS = (
    ("keras.Model", "save", "filepath"),
    ("keras.Model", "save_weights", "filepath"),
    ("train.Checkpoint", "save", "file_prefix"),
    ("train.Checkpoint", "write", "file_prefix"),
    ("compat.v1.train.Saver", "save", "save_path"),
)


def record_write(path, api: str) -> None:
    """This rank writes ``path`` (made absolute: the ranks share a working directory) with ``api``."""
    import os

    try:
        _record("write", api, path=os.path.abspath(os.fspath(path)))
    except TypeError:  # not a path (a file object, a tensor): nothing to compare
        pass


def _wrap_writer(original, api: str, parameter: str):
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return original

    @functools.wraps(original)
    def writer(*args, **kwargs):
        try:
            path = signature.bind(*args, **kwargs).arguments.get(parameter)
        except TypeError:
            path = None
        if path is not None:
            record_write(path, api)
        return original(*args, **kwargs)

    writer._npu_probe = True
    return writer


def _watch_file_writers(tf) -> None:
    for owner_path, method, parameter in _FILE_WRITERS:
        try:
            owner = functools.reduce(getattr, owner_path.split("."), tf)
        except AttributeError:
            continue
        api = f"{owner_path.rsplit('.', 1)[-1]}.{method}"
        _patch(owner, method, lambda original, api=api, parameter=parameter: _wrap_writer(original, api, parameter))
    saved_model = tf.saved_model
    if not getattr(saved_model.save, "_npu_probe", False):
        saved_model.save = _wrap_writer(saved_model.save, "tf.saved_model.save", "export_dir")
    v1_saved_model = tf.compat.v1.saved_model
    if not getattr(v1_saved_model.simple_save, "_npu_probe", False):
        v1_saved_model.simple_save = _wrap_writer(v1_saved_model.simple_save, "saved_model.simple_save", "export_dir")
    manager = getattr(tf.train, "CheckpointManager", None)
    if manager is not None and not getattr(manager.save, "_npu_probe", False):
        original = manager.save

        @functools.wraps(original)
        def save(self, *args, **kwargs):
            record_write(self.directory, "CheckpointManager.save")
            return original(self, *args, **kwargs)

        save._npu_probe = True
        manager.save = save
