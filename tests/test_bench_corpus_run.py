"""How the field benchmark counts a notebook: what makes it runnable, caught, a pass."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bench_corpus_run import Record, Run, Selection, _fixed_fails_beyond_the_unfixed  # noqa: E402
from npu_migrate_nb.sim.one_card import FAILS, RUNS, UNKNOWN, OneCard, _out_of_time  # noqa: E402

_CHECKS_PASS = {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}


def _timed_out_at(cell: int, one_card: OneCard) -> Run:
    return Run(False, failed_cell=cell, error=f"cell {cell} timed out after 300 s", timed_out=True,
               one_card=one_card.to_json(), one_card_out_of_time=one_card.out_of_time)


def _record(unfixed: Run, fixed: Run) -> Record:
    return Record("family/notebook.ipynb", Selection("family/notebook.ipynb", True), unfixed=unfixed, fixed=fixed)


def test_a_cell_too_long_for_one_card_too_leaves_the_notebook_out():
    too_long = _timed_out_at(19, _out_of_time(19, 600.0))
    record = _record(too_long, too_long)
    assert not record.runnable
    assert "too long for the harness" in record.left_out_reason


def test_a_timeout_one_card_gets_through_is_caught_and_counts():
    """The ranks hang (a collective one rank skipped) while one card runs: a failure of the distribution."""
    hangs = _timed_out_at(7, OneCard(7, RUNS, "runs on one card"))
    record = _record(hangs, Run(True, checks=_CHECKS_PASS))
    assert record.runnable and record.caught and record.fixed.passed


def test_an_unknown_one_card_verdict_that_is_not_a_timeout_keeps_the_notebook():
    """A one-card rerun that could not start says nothing of the notebook's length."""
    error = Run(False, failed_cell=3, error="ValueError: x", one_card=OneCard(3, UNKNOWN, "could not start").to_json())
    record = _record(error, Run(False, failed_cell=3, error="ValueError: x"))
    assert record.runnable and not record.fixed.passed


def test_a_later_cell_that_fails_as_written_on_one_card_leaves_the_notebook_out():
    """The unfixed run stops at cell 10 (ranks writing one file); the fixed run gets to cell 11, which
    is not Python. As written, one card fails at cell 11 too: the notebook's failure, not the fix's."""
    unfixed = Run(False, failed_cell=10, error="AlreadyExistsError", one_card=OneCard(10, RUNS, "runs").to_json())
    fixed = Run(False, failed_cell=11, error="SyntaxError: invalid syntax",
                one_card=OneCard(11, FAILS, "fails on one card too").to_json())
    record = _record(unfixed, fixed)
    assert record.runnable and _fixed_fails_beyond_the_unfixed(record)
    unfixed.one_card_later = OneCard(11, FAILS, "fails on one card too (cell 11: SyntaxError)").to_json()
    assert not record.runnable
    assert "as written, on one card too" in record.left_out_reason


def test_a_later_cell_one_card_runs_as_written_is_a_failure_of_the_fix():
    unfixed = Run(False, failed_cell=10, error="AlreadyExistsError", one_card=OneCard(10, RUNS, "runs").to_json())
    fixed = Run(False, failed_cell=11, error="NameError: name 'rank_size' is not defined",
                one_card=OneCard(11, FAILS, "fails on one card too").to_json())
    unfixed.one_card_later = OneCard(11, RUNS, "runs on one card").to_json()
    record = _record(unfixed, fixed)
    assert record.runnable and record.caught and not record.fixed.passed


def _notebook_in_a_family(tmp_path: Path) -> Path:
    import nbformat

    family = tmp_path / "corpus" / "family"
    family.mkdir(parents=True)
    path = family / "notebook.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
        "model.compile(optimizer='sgd', loss='mse')\nmodel.fit(x, y, batch_size=32)")]
    nbformat.write(notebook, str(path))
    return path


def test_a_notebook_that_fails_on_one_card_as_written_is_not_run_fixed(tmp_path, monkeypatch):
    """Left out whatever the fix does: the fixed run would be thrown away. Its static figures stay."""
    import bench_corpus_run

    runs = []

    def run_on_ranks(path, *args, **kwargs):
        runs.append(Path(path).name)
        return Run(False, failed_cell=0, error="NameError: name 'x' is not defined",
                   one_card=OneCard(0, FAILS, "fails on one card too").to_json())

    monkeypatch.setattr(bench_corpus_run, "run_on_ranks", run_on_ranks)
    path = _notebook_in_a_family(tmp_path)
    record = bench_corpus_run.measure(path, 2, 300.0, str(tmp_path), str(tmp_path / "data"), corpus=tmp_path / "corpus")
    assert runs == ["notebook.ipynb"] and record.fixed is None
    assert not record.runnable and "fails on one card too" in record.left_out_reason
    assert record.static_after  # the fix was still made and checked


def test_a_notebook_the_ranks_break_is_run_fixed(tmp_path, monkeypatch):
    import bench_corpus_run

    runs = []

    def run_on_ranks(path, *args, **kwargs):
        runs.append(Path(path).name)
        return Run(False, failed_cell=0, error="InvalidArgumentError", one_card=OneCard(0, RUNS, "runs").to_json())

    monkeypatch.setattr(bench_corpus_run, "run_on_ranks", run_on_ranks)
    record = bench_corpus_run.measure(_notebook_in_a_family(tmp_path), 2, 300.0, str(tmp_path), str(tmp_path / "data"),
                                      corpus=tmp_path / "corpus")
    assert runs == ["notebook.ipynb", "notebook.fixed.ipynb"] and record.runnable


def test_a_cell_proof_mode_trained_as_written_gives_the_fixed_run_the_as_written_time(tmp_path, monkeypatch):
    """A loop training until it converges (``while not done: model.fit(...)``) is trained as written by
    proof mode itself: its fixed run gets what a notebook trained as written gets, the ranks' count
    times the cell timeout; a notebook without one keeps the proof's timeout."""
    import bench_corpus_run

    def measured(cells_as_written):
        timeouts = []

        def run_on_ranks(path, ranks, timeout, *args, **kwargs):
            timeouts.append((Path(path).name, timeout))
            return Run(True, checks=dict(_CHECKS_PASS) if "fixed" in path else {"broadcast": "fail"},
                       cells_as_written=cells_as_written)

        monkeypatch.setattr(bench_corpus_run, "run_on_ranks", run_on_ranks)
        folder = tmp_path / str(len(cells_as_written))
        folder.mkdir()
        bench_corpus_run.measure(_notebook_in_a_family(folder), 2, 300.0, str(folder), str(folder / "data"),
                                 corpus=folder / "corpus")
        return timeouts

    assert measured([1]) == [("notebook.ipynb", 300.0), ("notebook.fixed.ipynb", 600.0)]
    assert measured([]) == [("notebook.ipynb", 300.0), ("notebook.fixed.ipynb", 300.0)]


def test_a_cell_slower_than_the_limit_with_no_rank_stuck_is_run_again_with_the_as_written_time(tmp_path, monkeypatch):
    """A timeout where every rank was still running the notebook's code (a bootstrap building 100 models)
    is run again with the ranks' count times the limit, then judged; one where a rank waited in a
    collective (stuck) is judged as it is."""
    import bench_corpus_run

    def measured(slow):
        timeouts = []

        def run_on_ranks(path, ranks, timeout, *args, **kwargs):
            timeouts.append((Path(path).name, timeout))
            if timeout == 300.0:
                return Run(False, failed_cell=7, error="cell 7 timed out after 300 s", timed_out=True, slow=slow,
                           one_card=OneCard(7, RUNS, "runs on one card").to_json())
            return Run(True, checks=dict(_CHECKS_PASS) if "fixed" in path else {"broadcast": "fail"})

        monkeypatch.setattr(bench_corpus_run, "run_on_ranks", run_on_ranks)
        folder = tmp_path / str(slow)
        folder.mkdir()
        record = bench_corpus_run.measure(_notebook_in_a_family(folder), 2, 300.0, str(folder), str(folder / "data"),
                                          corpus=folder / "corpus")
        return timeouts, record

    timeouts, record = measured(True)
    assert timeouts == [("notebook.ipynb", 300.0), ("notebook.ipynb", 600.0), ("notebook.fixed.ipynb", 600.0)]
    assert record.slow and record.caught and record.fixed.passed
    timeouts, record = measured(False)
    assert timeouts == [("notebook.ipynb", 300.0), ("notebook.fixed.ipynb", 300.0)]
    assert not record.slow and not record.fixed.passed


def test_a_later_cell_failing_alike_in_proof_mode_on_one_card_needs_no_rerun_as_written(monkeypatch):
    """The fixed run's error at that cell, met by the notebook as written on one card in the same proof
    mode: the fix is not its cause, and no rerun trained as written (hours for a book's chapter) is made."""
    import bench_corpus_run

    def one_card_run(path, cell, home, seconds, proof_steps):
        runs.append(proof_steps)
        error = errors[proof_steps]
        status = "fails" if error else "runs"
        return OneCard(cell, status, f"fails on one card too (cell {cell}: {error})" if error else "runs").to_json()

    monkeypatch.setattr(bench_corpus_run, "_one_card_run", one_card_run)
    decay = "Traceback (most recent call last):\nValueError: decay is deprecated in the new Keras optimizer"
    runs, errors = [], {1: "ValueError: decay is deprecated in the new Keras optimizer", None: ""}
    found = bench_corpus_run.one_card_as_written("nb.ipynb", 73, "home", 150.0, fixed_error=decay, proof_steps=1)
    assert runs == [1] and found["status"] == "fails"

    runs, errors = [], {1: "AssertionError: accuracy 0.1 < 0.9", None: ""}  # another error: trained as written
    found = bench_corpus_run.one_card_as_written("nb.ipynb", 73, "home", 150.0, fixed_error=decay, proof_steps=1)
    assert runs == [1, None] and found["status"] == "runs"

    runs = []  # the fixed run trained as written: one rerun, as written
    bench_corpus_run.one_card_as_written("nb.ipynb", 73, "home", 150.0, fixed_error=decay, proof_steps=None)
    assert runs == [None]
