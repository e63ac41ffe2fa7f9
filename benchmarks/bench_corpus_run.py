"""Real notebooks, fixed, proven on 2 simulated ranks: the run-time figure beside ``fix``'s static one.

For every notebook of ``benchmarks/corpus`` that can run offline on this machine (issue 21):

1. the notebook as it is runs on 2 ranks (it must be caught: a check fails, or a cell that runs on
   one card fails on the ranks);
2. ``fix`` adapts it, ``check`` judges the result statically;
3. the fixed notebook runs on 2 ranks (it must pass: every cell runs, and each of the three checks
   passes, or does not apply by the analysis, with its reason).

When a cell fails on the ranks, the cells up to it are rerun on one card (``one_card.py``): a cell
that fails there too takes the notebook out of the runnable set (not runnable here, not a problem of
the distributed steps), with the error as the reason. Two more ways the notebook as written shows it
cannot run here: a cell out of the harness's time on the ranks that one card does not get through
either, in twice that time (sixty epochs as written: no verdict on the distributed steps); and a fixed
run that gets past the unfixed run's failure and fails on one card at a later cell, where the notebook
as written, trained as written, fails on one card too (a cell reading "..... REST AS BEFORE"; the
failure is the notebook's, not the fix's). So does a fixed run that ran every cell and has
nothing to prove (:attr:`Record.nothing_to_prove`: no step applies, or no trainable variable exists),
in the run's own words: neither a pass nor a failure.

Which notebooks can run offline is decided from their code, by :func:`left_out_because` (a package
that is not installed, a download, a dataset that is not faked); what they would download from
Keras' dataset loaders is served from synthetic files in the loaders' own formats, and the small
public tables they read by URL (``offline_data.TABLES``) in the tables' own layouts
(``offline_data.py``), the notebooks' code untouched. Each notebook runs in a folder of its own,
which is removed afterwards.

Runs are in proof mode, as ``run`` makes them by default (each training call stops once the checks
are decided); a notebook with a cell that needs the whole training (it fails on one card after proof
mode's cut) is run again as written, each cell given the ranks' count times ``--timeout`` (the ranks
share the machine's cores), and so is the fixed run of a notebook where proof mode itself trained a cell
as written (``while not done: model.fit(...)``, a loop until the training converges, whose length is
random), and so is a run with a cell slower than ``--timeout`` where no rank was stuck (every rank still
running the notebook's code, none waiting in a collective: a bootstrap building 100 models); ``--full`` trains as written, and ``--compare-modes`` runs every notebook both ways and
prints the runs whose verdicts differ (goal: none) and the time of each mode. ``--corpus`` takes
another folder of families (``benchmarks/field/notebooks``, the field corpus); every figure is also
given by family.

Goals: fixed, >= 90% of the runnable set passes (issue 34: >= 95% in every family); unfixed, >= 95% are
caught; 0 notebooks where ``check`` says a step is present and the run fails it. Every failure is printed
with its class (:data:`FAILURE_CLASSES`).

    python benchmarks/bench_corpus_run.py [--only SUBSTRING] [--ranks 2] [--timeout S] [--json FILE]
                                          [--fixed-only] [--list] [--corpus DIR] [--full | --compare-modes]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
CORPUS = BENCH / "corpus"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import offline_data  # noqa: E402

from npu_migrate_nb.analysis import analyze  # noqa: E402
from npu_migrate_nb.findings import STEPS  # noqa: E402
from npu_migrate_nb.notebook import Notebook, atomic_write, load, render  # noqa: E402
from npu_migrate_nb.sim import DEFAULT_PROOF_STEPS  # noqa: E402

GOAL_FIXED, GOAL_CAUGHT = 0.90, 0.95
CHECKS = ("broadcast", "allreduce", "shard")

# ------------------------------------------------------------------------------ the runnable set

# Reads from the network or from files no notebook of the corpus makes (besides Keras' dataset
# loaders and the tables of offline_data.TABLES, which offline_data serves): a notebook with one of
# these is left out, with the match.
_REMOTE_FILE = ("reads a remote file", r"['\"](https?|gs)://[^'\"]+\.(csv|txt|zip|gz|tgz|json|npz|npy|h5|jpg|png|wav)['\"]")
_NETWORK = (
    ("downloads a file", r"\bget_file\s*\("),
    ("loads a TensorFlow Hub model", r"\bhub\s*\.\s*(load|KerasLayer|Module)\b|tfhub\.dev"),
    ("downloads with urllib or requests", r"\burlretrieve\s*\(|\burlopen\s*\(|\brequests\s*\.\s*get\s*\("),
    ("downloads with a shell command", r"^\s*!\s*(wget|curl|gsutil|git\s+clone|kaggle)\b"),
    _REMOTE_FILE,
    ("runs on Colab only", r"\bgoogle\.colab\b"),
    ("needs a TPU", r"TPUClusterResolver\s*\(\s*\)|\bTPUStrategy\s*\("),
    ("starts parameter servers or workers of its own", r"\bportpicker\b|\bcreate_local_server\b|TF_CONFIG"),
)
# Modules a notebook may import that are part of Python or come with the project's own install.
_ALWAYS_THERE = {"__future__", "google"}  # google: protobuf's namespace, next to the colab check


@dataclass
class Selection:
    path: str
    runnable: bool
    reason: str = ""  # why it was left out


def corpus_paths(corpus: Path = CORPUS) -> List[Path]:
    return sorted(corpus.glob("*/*.ipynb"))


def code_of(notebook: Notebook) -> str:
    return "\n".join(cell.source for cell in notebook.code_cells)


def modules_beside(notebook: Notebook) -> Dict[str, Path]:
    """The files of the notebook's own modules it imports, and the ones those import (a book's
    ``mnist.py`` importing its ``download.py``), found as the analyzer finds them: name -> file."""
    from npu_migrate_nb.modules import project_modules

    if not notebook.path:
        return {}
    folder = Path(notebook.path).resolve().parent
    return {module.name.split(".")[0]: folder / module.path
            for module in project_modules(notebook, shown_from=str(folder)).found
            if module.cell is None and (folder / module.path).parent == folder}


def code_run(notebook: Notebook, beside: Dict[str, Path]) -> str:
    """The code a run of the notebook executes that can be read: its cells, then ``beside``, the modules
    beside it (:func:`modules_beside`)."""
    return "\n".join([code_of(notebook), *(module.read_text(errors="replace") for module in beside.values())])


def left_out_because(notebook: Notebook) -> Optional[str]:
    """Why this notebook cannot run offline on this machine, or None. Imports are read in the modules
    beside it too, and so are the data files they name by URL; their download calls are not (a helper
    builds its URLs at run time: a download that is not served fails there, and the notebook is left
    out as failing on one card, with the URL)."""
    source = code_of(notebook)
    beside = modules_beside(notebook)
    imported = imported_modules(code_run(notebook, beside))
    missing = sorted(name for name in imported if name not in beside and not _importable(name))
    if missing:
        return f"needs {', '.join(missing)} (not installed)"
    unserved = without_served_tables(source)
    for reason, pattern in _NETWORK:
        found = re.search(pattern, unserved, re.MULTILINE)
        if found:
            return f"{reason} ({found.group(0).strip()[:60]})"
    for module in beside.values():
        for literal in _string_literals(module.read_text(errors="replace")):
            found = re.search(_REMOTE_FILE[1], without_served_tables(repr(literal)))
            if found:
                return f"{_REMOTE_FILE[0]} in {module.name} ({found.group(0).strip()[:60]})"
    return None


def _string_literals(code: str) -> List[str]:
    """The strings a module's code holds, without its docstrings (a helper's docstring gives an example
    URL it never reads)."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


_URL_LITERAL = re.compile(r"""(['"])((?:https?|gs)://[^'"\s]+)\1""")


def without_served_tables(source: str) -> str:
    """The code without the reads of tables offline_data serves: their URLs, a ``get_file`` whose origin
    is one (as a literal or a name bound to one), a ``!wget`` of them. Any other download stays."""
    served = {url for url in re.findall(r"""(?:https?|gs)://[^'"\s]+""", source) if offline_data.is_served(url)}
    bound: Dict[str, set] = {}  # name -> the values assigned to it
    for found in re.finditer(r"^\s*(\w+)\s*=(?!=)\s*(.*?)\s*$", source, re.MULTILINE):
        bound.setdefault(found.group(1), set()).add(found.group(2))
    literals = {value: _URL_LITERAL.fullmatch(value) for values in bound.values() for value in values}
    names = {name for name, values in bound.items()
             if all(literals[value] and literals[value].group(2) in served for value in values)}
    for call in reversed(list(re.finditer(r"\bget_file\s*\(", source))):
        depth, end = 1, call.end()
        while depth and end < len(source):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        arguments = source[call.end():end]
        if any(url in arguments for url in served) or any(re.search(rf"\b{name}\b", arguments) for name in names):
            source = source[:call.start()] + "None" + source[end:]

    def fetched(line):
        urls = re.findall(r"(?:https?|gs)://\S+", line.group(0))
        return "" if urls and all(url in served for url in urls) else line.group(0)

    source = re.sub(r"^\s*!\s*wget\b.*$", fetched, source, flags=re.MULTILINE)
    return _URL_LITERAL.sub(lambda found: found.group(0) if found.group(2) not in served else "''", source)


def imported_modules(source: str) -> set:
    """Top-level modules of the import statements (also inside functions and ``try``)."""
    modules = set()
    for line in source.splitlines():
        found = re.match(r"\s*(?:from\s+([A-Za-z_]\w*)[\w.]*\s+import\b|import\s+(.+))", line)
        if not found:
            continue
        if found.group(1):
            modules.add(found.group(1))
            continue
        for part in found.group(2).split(","):
            name = re.match(r"\s*([A-Za-z_]\w*)", part)
            if name:
                modules.add(name.group(1))
    return modules - _ALWAYS_THERE


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def select(path: Path, corpus: Path = CORPUS) -> Selection:
    notebook = load(str(path))
    reason = left_out_because(notebook)
    return Selection(str(path.relative_to(corpus)), reason is None, reason or "")


# ----------------------------------------------------------------------------------- one run


@dataclass
class Run:
    """One notebook on the ranks: what the runner said, reduced to what the benchmark judges."""
    cells_ok: bool
    failed_cell: Optional[int] = None
    error: str = ""  # the failed cell's error (last line) or fault message
    checks: Dict[str, str] = field(default_factory=dict)  # check -> status
    details: Dict[str, str] = field(default_factory=dict)  # check -> detail
    one_card: Optional[dict] = None  # OneCard.to_json() when a cell failed
    elapsed_s: float = 0.0
    timed_out: bool = False  # the failed cell ran out of time on the ranks
    # ... with every rank still running the notebook's code (none waiting in a collective, none done):
    # slower than the limit, not stuck (CellOutcome.slow)
    slow: bool = False
    one_card_out_of_time: bool = False  # ... and the one-card rerun did not get through to it either
    # The notebook as written on one card up to the cell where its fixed run failed on one card, when
    # that is after the cell where this (unfixed) run failed: OneCard.to_json().
    one_card_later: Optional[dict] = None
    # The cells where proof mode trained as written ("while not done: model.fit(...)" repeats, see
    # probes.CUT_REPEATS), as rank 0 reported them.
    cells_as_written: List[int] = field(default_factory=list)

    @property
    def checks_pass(self) -> bool:
        return all(self.checks.get(name) in ("pass", "not-applicable") for name in CHECKS)

    @property
    def passed(self) -> bool:
        return self.cells_ok and self.checks_pass

    @property
    def check_failed(self) -> bool:
        return any(self.checks.get(name) == "fail" for name in CHECKS)

    @property
    def fails_on_one_card(self) -> bool:
        return bool(self.one_card) and self.one_card["status"] == "fails"

    @property
    def fails_later_on_one_card(self) -> bool:
        return bool(self.one_card_later) and self.one_card_later["status"] == "fails"

    @property
    def too_long_on_one_card(self) -> bool:
        """A cell ran out of the harness's time on the ranks, and one card did not get through to it
        within twice that time either: the notebook's own length (sixty epochs as written), which no
        verdict on the distributed steps can be drawn from."""
        return self.timed_out and self.one_card_out_of_time


def offline_setup(home: str) -> Callable:
    """The cluster's setup: every rank (and every single card started from it) reads ``home``'s fakes."""

    def setup(cluster) -> None:
        # Code, not a function of this module: the ranks cannot import this module before it runs.
        cluster.view.execute(f"import sys\nif {str(BENCH)!r} not in sys.path: sys.path.insert(0, {str(BENCH)!r})",
                             block=True)
        cluster.apply(offline_data.install, home)

    return setup


def run_on_ranks(path: str, ranks: int, timeout: float, home: str, proof_steps: Optional[int] = DEFAULT_PROOF_STEPS) -> Run:
    """``path`` on ``ranks`` simulated ranks (and, after a failure, on one card) in its own folder;
    ``proof_steps``: proof mode, as ``run`` by default (None: trained as written)."""
    import io

    from npu_migrate_nb.sim.cluster import Cluster, ClusterError
    from npu_migrate_nb.sim.one_card import bound_for, rerun_on_one_card
    from npu_migrate_nb.sim.runner import Runner, detect_tf1

    notebook = load(path)
    cluster = Cluster(n=ranks, tf1=detect_tf1(notebook), setup=offline_setup(home))
    started = time.monotonic()
    output = io.StringIO()
    try:
        try:
            cluster.start()
        except ClusterError as error:
            return Run(False, error=f"the cluster could not start: {error}")
        result = Runner(cluster, timeout=timeout, echo=output, errors=output, proof_steps=proof_steps).run_notebook(notebook)
        failed = result.failed_cell
        one_card = None
        if failed is not None:
            cluster.stop()
            one_card = rerun_on_one_card(notebook, failed.cell, cluster, bound_for(time.monotonic() - started),
                                         proof_steps=proof_steps)
    finally:
        cluster.stop()
    return Run(
        cells_ok=failed is None,
        failed_cell=failed.cell if failed is not None else None,
        error=_failure_text(failed) if failed is not None else "",
        checks={name: check.status for name, check in result.checks.items()},
        details={name: check.detail for name, check in result.checks.items()},
        one_card=one_card.to_json() if one_card is not None else None,
        elapsed_s=round(time.monotonic() - started, 1),
        timed_out=failed is not None and failed.status == "timeout",
        slow=failed is not None and failed.slow,
        one_card_out_of_time=one_card is not None and one_card.out_of_time,
        cells_as_written=sorted({r["cell"] for r in result.shortened if r.get("ran_as_written") and r.get("cell") is not None}),
    )


def _failure_text(cell) -> str:
    texts = [rank.error for rank in cell.ranks if rank.error] or [cell.message or cell.status]
    lines = [line.strip() for line in texts[0].splitlines() if line.strip()]
    # TensorFlow ends a graph error with the op's creation stack ("File ... in from_node_def"): the
    # error is the last line that names one.
    errors = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
    tail = errors[-1] if errors else (lines[-1] if lines else cell.status)
    return (cell.message or tail) if cell.status == "timeout" else tail


# ------------------------------------------------------------------------------- failure classes

# (class, what it means, predicate on the run). The first that matches names a failure.
FAILURE_CLASSES: List[Tuple[str, str, Callable[[Run], bool]]] = [
    ("tf-mode", "TF1 mode chosen for TF2 code (or the reverse)",
     lambda run: bool(re.search(r"Invalid keyword argument\(s\) in compile|symbolic (tf\.)?Tensor as a Python bool"
                                r"|only (available|supported) (in|with|when) eager|numpy\(\) is only available"
                                r"|eager execution is (disabled|not enabled)|has no attribute '(Session|placeholder)'",
                                run.error))),
    ("graph-state", "graph state shared across models in TF1 mode",
     lambda run: "You must feed a value for placeholder tensor" in run.error),
    ("broadcast-before-build", "the broadcast runs before the model has variables",
     lambda run: "have not yet been created" in run.error
     or (run.cells_ok and "no trainable variables" in run.details.get("broadcast", ""))),
    ("step-count", "ranks run different numbers of steps (one waits in a collective)",
     lambda run: "timed out" in run.error and "waits in" in run.error),
    ("file-clash", "every rank writes the same file",
     lambda run: bool(re.search(r"unable to lock file|Unable to (synchronously )?create file|File exists"
                                r"|same file|AlreadyExistsError|already exists", run.error, re.IGNORECASE))),
    ("stand-in", "the adapter's stand-ins lack an API or differ from it",
     lambda run: bool(re.search(r"(NameError|AttributeError|ImportError|TypeError).*(npu|hccl|NPU)", run.error))),
    ("fix-breaks-one-card", "the fixed notebook fails on one card too", Run.fails_on_one_card.fget),
    ("cell-error", "a cell fails on the ranks and runs on one card", lambda run: not run.cells_ok),
    ("check-fail", "a check fails", Run.check_failed.fget),
    ("not-observed", "a check saw nothing to judge", lambda run: not run.checks_pass),
]


def failure_class(run: Run) -> str:
    for name, _, matches in FAILURE_CLASSES:
        if matches(run):
            return name
    return "none"


# ----------------------------------------------------------------------------------- notebooks


@dataclass
class Record:
    name: str
    selection: Selection
    static_after: Dict[str, str] = field(default_factory=dict)  # step -> status after fix
    unfixed: Optional[Run] = None
    fixed: Optional[Run] = None
    # The same two runs trained as written (--compare-modes): their verdicts must be the proof's.
    unfixed_full: Optional[Run] = None
    fixed_full: Optional[Run] = None
    fix_error: str = ""
    offline: Dict[str, float] = field(default_factory=dict)  # dataset or table -> share of its real size
    # Trained as written although proof mode was asked: on one card, a cell after a training proof
    # mode cut short failed (a plot of 100 epochs' losses against 100 learning rates), as a user
    # reading the report would, the notebook was run again with --full.
    as_written: bool = False
    # A cell was slower than --timeout on the ranks, none stuck (Run.slow): its runs got the as-written
    # cell time from then on.
    slow: bool = False

    @property
    def runnable(self) -> bool:
        """Selected, and the notebook as it is does not fail on one card (a fixed notebook that fails
        there is a failure of the fix: it stays in the set)."""
        if not self.selection.runnable or self.nothing_to_prove:
            return False
        unfixed = self.unfixed
        return not (unfixed is not None and (unfixed.fails_on_one_card or unfixed.too_long_on_one_card
                                             or unfixed.fails_later_on_one_card))

    @property
    def nothing_to_prove(self) -> str:
        """Why the fixed run, which ran every cell, has no step to prove: none applies (no data read
        to split, no gradient step), and no trainable variable exists to broadcast. The run says so
        itself; such a notebook (a guide saving a constant model, one showing an optimizer's update
        by hand) is neither a pass nor a failure."""
        run = self.fixed
        if run is None or not run.cells_ok:
            return ""
        if any(run.checks.get(name) != "not-applicable" for name in ("allreduce", "shard")):
            return ""
        broadcast = run.checks.get("broadcast")
        if broadcast == "not-applicable":
            return f"nothing to prove: every step is not applicable, fixed and run ({_short(run)})"
        if broadcast == "not-observed" and "no trainable variables" in run.details.get("broadcast", ""):
            return ("nothing to prove: no data to split, no gradients to aggregate, and the run found no "
                    f"trainable variables to broadcast ({_short(run)}: {run.details['broadcast'][:100]})")
        return ""

    @property
    def left_out_reason(self) -> str:
        if not self.selection.runnable:
            return self.selection.reason
        if self.nothing_to_prove:
            return self.nothing_to_prove
        if self.unfixed is not None and self.unfixed.fails_on_one_card:
            return f"{self.unfixed.one_card['detail']} (cell {self.unfixed.failed_cell})"
        if self.unfixed is not None and self.unfixed.fails_later_on_one_card:
            return f"as written, on one card too: {self.unfixed.one_card_later['detail']}"
        if self.unfixed is not None and self.unfixed.too_long_on_one_card:
            return f"too long for the harness, on one card too: {self.unfixed.one_card['detail']}"
        return ""

    @property
    def caught(self) -> bool:
        run = self.unfixed
        return run is not None and (run.check_failed or not run.checks_pass or
                                    (not run.cells_ok and not run.fails_on_one_card))

    @property
    def disproved(self) -> List[str]:
        """Steps ``check`` calls present after fix that the fixed run fails."""
        run = self.fixed
        if run is None:
            return []
        return [step for step in STEPS if self.static_after.get(step) == "present" and run.checks.get(step) == "fail"]


def measure(path: Path, ranks: int, timeout: float, work_root: str, data_root: str,
            fixed_only: bool = False, corpus: Path = CORPUS, modes=(DEFAULT_PROOF_STEPS,)) -> Record:
    """``modes``: the proof modes to run each notebook in, the first one judged (None: --full); a
    second one gives the ``*_full`` runs, compared with the first."""
    selection = select(path, corpus)
    record = Record(selection.path, selection)
    if not selection.runnable:
        return record
    notebook = load(str(path))
    beside = modules_beside(notebook)
    source = code_run(notebook, beside)
    record.offline = offline_data.sizes_for(source)
    home = offline_data.home_for(data_root, record.offline)
    folder = tempfile.mkdtemp(prefix="nb-", dir=work_root)

    def cell_timeout() -> float:
        # Trained as written, a cell takes its whole training, and the ranks share this machine's cores:
        # each gets a rank's share of them, so a cell gets the ranks' count times the proof's limit. So
        # does a notebook with a cell proof mode itself trained as written in the unfixed run (a loop
        # training until it converges: its length is the notebook's, and random).
        trains_as_written = record.as_written or record.slow or (
            record.unfixed is not None and record.unfixed.cells_as_written)
        return timeout * ranks if trains_as_written else timeout

    def run_or_slow(path: str, proof: Optional[int]) -> Run:
        # A cell slower than the limit on the ranks, none of them stuck (a 100-split bootstrap that
        # builds a model per split): the ranks share the machine's cores, so, as a notebook trained as
        # written, the run is made again with the ranks' count times the limit.
        run = run_on_ranks(path, ranks, cell_timeout(), home, proof)
        if run.slow and cell_timeout() == timeout:  # not yet given the as-written time
            record.slow = True
            _clean_outputs(folder, keep | {os.path.basename(fixed_path or "")})
            run = run_on_ranks(path, ranks, cell_timeout(), home, proof)
        return run

    try:
        offline_data.write_notebook_files(folder, source)
        unfixed_path = os.path.join(folder, path.name)
        shutil.copy(path, unfixed_path)
        for module in beside.values():
            shutil.copy(module, os.path.join(folder, module.name))
        keep = {path.name, *offline_data._NOTEBOOK_FILES, *(module.name for module in beside.values())}
        fixed_path = None
        if not fixed_only:
            record.unfixed = run_or_slow(unfixed_path, modes[0])
            _clean_outputs(folder, keep)
            if modes == (DEFAULT_PROOF_STEPS,) and _failed_after_the_cut(record.unfixed):
                record.as_written, modes = True, (None,)
                record.unfixed = run_on_ranks(unfixed_path, ranks, cell_timeout(), home, None)
                _clean_outputs(folder, keep)
            if len(modes) > 1:
                record.unfixed_full = run_on_ranks(unfixed_path, ranks, timeout, home, modes[1])
                _clean_outputs(folder, keep)
        fixed_path, record.static_after, record.fix_error = _fix(unfixed_path)
        if fixed_path is not None and not left_out_as_written(record.unfixed):
            record.fixed = run_or_slow(fixed_path, modes[0])
            if fixed_only and modes == (DEFAULT_PROOF_STEPS,) and _failed_after_the_cut(record.fixed):
                # No unfixed run to learn it from: the fixed one tells that a cell needs the whole training.
                _clean_outputs(folder, keep | {os.path.basename(fixed_path)})
                record.as_written, modes = True, (None,)
                record.fixed = run_on_ranks(fixed_path, ranks, cell_timeout(), home, None)
            if len(modes) > 1:
                _clean_outputs(folder, keep | {os.path.basename(fixed_path)})
                record.fixed_full = run_on_ranks(fixed_path, ranks, timeout, home, modes[1])
            if _fixed_fails_beyond_the_unfixed(record):
                # The fixed run got further than the unfixed one and fails on one card there: the notebook
                # as written may fail there too (a cell that never ran: "..... REST AS BEFORE").
                _clean_outputs(folder, keep | {os.path.basename(fixed_path)})
                record.unfixed.one_card_later = one_card_as_written(
                    unfixed_path, record.fixed.failed_cell, home, record.fixed.elapsed_s,
                    fixed_error=record.fixed.error, proof_steps=modes[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return record


def left_out_as_written(unfixed: Optional[Run]) -> bool:
    """The notebook as written fails on one card, or is too long for the harness there: it is left out
    whatever the fix does, so its fixed run is not made (most of the field's left-outs: 15 s each)."""
    return unfixed is not None and (unfixed.fails_on_one_card or unfixed.too_long_on_one_card)


def _fixed_fails_beyond_the_unfixed(record: Record) -> bool:
    unfixed, fixed = record.unfixed, record.fixed
    if unfixed is None or fixed is None or not fixed.fails_on_one_card or unfixed.fails_on_one_card:
        return False
    return unfixed.failed_cell is not None and unfixed.failed_cell < fixed.failed_cell


def one_card_as_written(path: str, cell: int, home: str, seconds_on_ranks: float, fixed_error: str = "",
                        proof_steps: Optional[int] = None) -> dict:
    """The notebook at ``path`` as written, on one card up to ``cell``: OneCard's JSON. First in the fixed
    run's proof mode, when it had one: the fixed run's error at that cell there too says the fix is not its
    cause, in a minute (handson-ml2 chapter 11's ``SGD(decay=...)``, which Keras 2.15 refuses, comes after
    70 cells that take longer than the bound to train as written). Else trained as written."""
    if proof_steps is not None and fixed_error:
        in_proof_mode = _one_card_run(path, cell, home, seconds_on_ranks, proof_steps)
        error_line = fixed_error.strip().splitlines()[-1] if fixed_error.strip() else fixed_error
        if in_proof_mode["status"] == "fails" and error_line in in_proof_mode["detail"]:
            return in_proof_mode
    return _one_card_run(path, cell, home, seconds_on_ranks, None)


def _one_card_run(path: str, cell: int, home: str, seconds_on_ranks: float, proof_steps: Optional[int]) -> dict:
    from npu_migrate_nb.sim.cluster import Cluster
    from npu_migrate_nb.sim.one_card import bound_for, rerun_on_one_card
    from npu_migrate_nb.sim.runner import detect_tf1

    notebook = load(path)
    single = Cluster(n=1, tf1=detect_tf1(notebook), setup=offline_setup(home))
    return rerun_on_one_card(notebook, cell, single, bound_for(seconds_on_ranks), single=single,
                             proof_steps=proof_steps).to_json()


def _failed_after_the_cut(run: Run) -> bool:
    return run.fails_on_one_card and bool(run.one_card.get("after_cut"))


def _fix(path: str) -> Tuple[Optional[str], Dict[str, str], str]:
    """The notebook fixed beside it (as ``fix -o`` writes it), the modules beside it fixed in place, and
    ``check``'s steps on the result."""
    from npu_migrate_nb.invariants import with_sources
    from npu_migrate_nb.rewrite import fix_notebook

    notebook = load(path)
    try:
        result = fix_notebook(notebook, analyze(notebook))
    except Exception as error:  # a crash of fix is a finding of this benchmark, not a stop
        return None, {}, f"fix raised {type(error).__name__}: {error}"
    fixed_path = path.replace(".ipynb", ".fixed.ipynb")
    atomic_write(fixed_path, render(notebook, result.sources))
    folder = os.path.dirname(os.path.abspath(path))
    for module, (_old, new) in result.modules.items():  # the copies beside it, fixed as ``fix --in-place`` does
        if os.path.dirname(os.path.abspath(module)) == folder:
            atomic_write(module, new)
    after = analyze(with_sources(notebook, result.sources))
    return fixed_path, dict(after.steps), ""


def _clean_outputs(folder: str, keep: set) -> None:
    """What the unfixed run wrote (checkpoints, logs) must not be there when the fixed one starts."""
    for name in os.listdir(folder):
        if name not in keep:
            target = os.path.join(folder, name)
            shutil.rmtree(target, ignore_errors=True) if os.path.isdir(target) else os.remove(target)


# -------------------------------------------------------------------------------------- report


def report(records: List[Record], elapsed: float) -> Tuple[str, dict]:
    runnable = [r for r in records if r.runnable]
    fixed_pass = [r for r in runnable if r.fixed is not None and r.fixed.passed]
    unfixed = [r for r in runnable if r.unfixed is not None]
    caught = [r for r in unfixed if r.caught]
    disproved = [r for r in runnable if r.disproved]
    lines = [f"run-time corpus: {len(records)} notebooks, {len(runnable)} runnable offline "
             f"({elapsed / 60:.1f} min)", ""]
    lines.append(f"{'notebook':<86} {'unfixed':<22} {'fixed':<22} class")
    for record in runnable:
        lines.append(f"{record.name:<86} {_short(record.unfixed):<22} {_short(record.fixed):<22} "
                     f"{failure_class(record.fixed) if record.fixed is not None else record.fix_error[:40]}"
                     + ("  (as written)" if record.as_written else "") + ("  (slow)" if record.slow else ""))
    lines.append("")
    as_written = [r for r in runnable if r.as_written]
    if as_written:
        lines.append(f"trained as written (a cell after proof mode's cut failed on one card): {len(as_written)}")
    slow = [r for r in runnable if r.slow]
    if slow:
        lines.append(f"run again with the as-written cell time (a cell slower than --timeout, no rank stuck): {len(slow)}")

    share = lambda part, whole: (len(part) / len(whole)) if whole else 0.0  # noqa: E731
    lines.append(f"fixed, all three checks pass:   {len(fixed_pass)}/{len(runnable)} = {share(fixed_pass, runnable):.0%}"
                 f"   (goal >= {GOAL_FIXED:.0%})")
    lines.append(f"unfixed, caught:                {len(caught)}/{len(unfixed)} = {share(caught, unfixed):.0%}"
                 f"   (goal >= {GOAL_CAUGHT:.0%})")
    lines.append(f"check says present, run fails:  {len(disproved)}   (goal 0)"
                 + "".join(f"\n  {r.name}: {', '.join(r.disproved)}" for r in disproved))
    compared = [(r, which, proof, full) for r in runnable for which, proof, full in
                (("unfixed", r.unfixed, r.unfixed_full), ("fixed", r.fixed, r.fixed_full)) if full is not None]
    if compared:
        differ = [(r, which, proof, full) for r, which, proof, full in compared if _verdict(proof) != _verdict(full)]
        seconds = lambda runs: sum(run.elapsed_s for run in runs)  # noqa: E731
        lines.append(f"proof mode vs trained as written: {len(compared) - len(differ)}/{len(compared)} runs give the "
                     f"same verdicts (goal: all); time {seconds(c[2] for c in compared) / 60:.1f} min in proof mode, "
                     f"{seconds(c[3] for c in compared) / 60:.1f} min as written")
        for record, which, proof, full in differ:
            lines.append(f"  {record.name} ({which}): proof {_verdict(proof)}, as written {_verdict(full)}")
    lines.append("")
    lines.append("by family (fixed pass / runnable, unfixed caught / run, runnable / notebooks):")
    for family, (family_passed, family_runnable, family_caught, family_ran, family_total) in by_family(records).items():
        share = family_passed / family_runnable if family_runnable else 0
        lines.append(f"  {family:<32} fixed {family_passed}/{family_runnable} = {share:.0%}   "
                     f"caught {family_caught}/{family_ran}   runnable {family_runnable}/{family_total}")
    lines.append("")
    lines.append("failures after fix, by class:")
    for record in runnable:
        if record.fixed is None or not record.fixed.passed:
            run = record.fixed
            what = record.fix_error if run is None else (run.error or _check_summary(run))
            lines.append(f"  [{failure_class(run) if run else 'fix'}] {record.name}: {what[:240]}")
            if run is not None and run.one_card:
                lines.append(f"      one card: {run.one_card['detail']}")
    lines.append("")
    lines.append("not caught unfixed:")
    for record in unfixed:
        if not record.caught:
            lines.append(f"  {record.name}: {_check_summary(record.unfixed)}")
    lines.append("")
    lines.append("left out:")
    for record in records:
        if not record.runnable:
            lines.append(f"  {record.name}: {record.left_out_reason}")
    summary = {
        "runnable": len(runnable), "fixed_pass": len(fixed_pass), "unfixed": len(unfixed), "caught": len(caught),
        "by_family": {family: dict(zip(("fixed_pass", "runnable", "caught", "unfixed", "notebooks"), counts))
                      for family, counts in by_family(records).items()},
        "disproved": [r.name for r in disproved], "elapsed_s": round(elapsed, 1),
        "records": [_record_json(r) for r in records],
    }
    return "\n".join(lines), summary


def by_family(records: List[Record]) -> Dict[str, Tuple[int, int, int, int, int]]:
    """family (the corpus folder) -> (fixed pass, runnable, unfixed caught, unfixed run, notebooks)."""
    families: Dict[str, List[int]] = {}
    for record in records:
        counts = families.setdefault(record.name.split("/", 1)[0], [0, 0, 0, 0, 0])
        counts[4] += 1
        if not record.runnable:
            continue
        counts[1] += 1
        counts[0] += bool(record.fixed is not None and record.fixed.passed)
        if record.unfixed is not None:
            counts[3] += 1
            counts[2] += record.caught
    return {family: tuple(counts) for family, counts in sorted(families.items())}


def _modes_line(record: Record) -> str:
    """With --compare-modes: the runs trained as written, their time beside the proof's, and any difference."""
    pairs = [(record.unfixed, record.unfixed_full), (record.fixed, record.fixed_full)]
    if all(full is None for _proof, full in pairs):
        return ""
    differ = [_verdict(proof) != _verdict(full) for proof, full in pairs if full is not None]
    seconds = lambda index: sum(pair[index].elapsed_s for pair in pairs if pair[1] is not None and pair[0] is not None)  # noqa: E731
    return (f"\n    as written: unfixed {_short(record.unfixed_full)}, fixed {_short(record.fixed_full)}; "
            f"proof {seconds(0):.0f} s, as written {seconds(1):.0f} s" + ("  VERDICTS DIFFER" if any(differ) else ""))


def _verdict(run: Optional[Run]) -> str:
    """What a run concluded: the cells ran (or which failed, and whether on one card too), and each
    check's status either way (a check decided before the failing cell must be decided alike)."""
    if run is None or run.cells_ok:
        return _short(run)
    checks = " ".join(f"{name[0]}:{_STATUS.get(run.checks.get(name), '?')}" for name in CHECKS)
    return f"{_short(run)}, {checks}"


def _short(run: Optional[Run]) -> str:
    if run is None:
        return "-"
    if not run.cells_ok:
        return f"cell {run.failed_cell} " + ("fails 1 card" if run.fails_on_one_card else "error")
    return " ".join(f"{name[0]}:{_STATUS.get(run.checks.get(name), '?')}" for name in CHECKS)


_STATUS = {"pass": "ok", "fail": "FAIL", "not-observed": "n/o", "not-applicable": "n/a"}


def _check_summary(run: Run) -> str:
    return "; ".join(f"{name} {run.checks.get(name)}: {run.details.get(name, '')[:120]}"
                     for name in CHECKS if run.checks.get(name) not in ("pass", "not-applicable"))


def _record_json(record: Record) -> dict:
    data = asdict(record)
    data.update(runnable=record.runnable, left_out_reason=record.left_out_reason, caught=record.caught,
                disproved=record.disproved,
                fixed_class=failure_class(record.fixed) if record.fixed is not None else None)
    return data


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="SUBSTRING", help="notebooks whose path contains it")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per-cell timeout (default 300)")
    parser.add_argument("--json", metavar="FILE", help="also write every record as JSON")
    parser.add_argument("--fixed-only", action="store_true", help="run only the fixed notebooks")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="train as written (default: proof mode, as run)")
    mode.add_argument("--compare-modes", action="store_true",
                      help="run each notebook in proof mode and as written, and print where their verdicts differ")
    parser.add_argument("--list", action="store_true", help="only list the selection and why notebooks are left out")
    parser.add_argument("--corpus", type=Path, default=CORPUS,
                        help="a folder of notebook families, one folder each (default benchmarks/corpus; "
                             "benchmarks/field/notebooks is the field corpus)")
    args = parser.parse_args(argv)
    paths = [p for p in corpus_paths(args.corpus) if not args.only or any(part in str(p) for part in args.only)]
    if args.list:
        for path in paths:
            selection = select(path, args.corpus)
            print(f"{'run ' if selection.runnable else 'skip'} {selection.path}  {selection.reason}")
        return 0
    started = time.monotonic()
    work_root = tempfile.mkdtemp(prefix="npu-corpus-run-")
    data_root = os.path.join(tempfile.gettempdir(), "npu-corpus-offline-data")
    records = []
    try:
        for number, path in enumerate(paths, 1):
            modes = (None,) if args.full else ((DEFAULT_PROOF_STEPS, None) if args.compare_modes else (DEFAULT_PROOF_STEPS,))
            record = measure(path, args.ranks, args.timeout, work_root, data_root, args.fixed_only, args.corpus, modes)
            records.append(record)
            if record.selection.runnable:
                failed = record.fixed is not None and not record.fixed.passed
                why = f"\n    {(record.fixed.error or _check_summary(record.fixed))[:300]}" if failed else ""
                print(f"[{number}/{len(paths)}] {record.name}: unfixed {_short(record.unfixed)}, "
                      f"fixed {_short(record.fixed)} ({time.monotonic() - started:.0f} s){why}{_modes_line(record)}",
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # the report of the notebooks done so far
        print(f"interrupted: {len(records)} of {len(paths)} notebooks measured", file=sys.stderr)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    text, summary = report(records, time.monotonic() - started)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(summary, stream, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
