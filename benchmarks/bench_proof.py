"""Proof in a minute (issue 35): real jobs proven in proof mode, against one plain process.

For each notebook of ``benchmarks/realistic/`` (ResNet-50 on CIFAR-shaped arrays for 30 epochs, a custom
loop of 20 epochs over 100,000 samples, an Estimator with max_steps=200000, a TF1 session loop of
50,000 fed steps, a train_and_evaluate), ``fix`` makes it distributed, then, as whole processes:

* ``npu-migrate-nb run FIXED -n 2`` and ``-n 8`` (proof mode, the default): the wall time from the
  command to the verdict, cluster start and stop included, and the verdict;
* ``npu-migrate-nb run UNFIXED -n 2``: the single-card notebook as written, whose verdict must come
  as fast and catch it (a check fails);
* the reference: one plain Python process (IPython's shell, no cluster) running the same cells at
  rank size 1 with the same proof (the simulator's probes, each training call stopped after the same
  steps): what the proof costs without the ranks.

Goals: 2 ranks <= 60 s (fixed and unfixed), 8 ranks <= 120 s, 2 ranks <= 2x the reference (on this 2-core machine the two
ranks share the cores: the ratio is what the simulator adds). Trained as written (``--full``), these
jobs take hours: run one with ``--full-too NAME`` to see it go past the per-cell timeout.

    python benchmarks/bench_proof.py [--only SUBSTRING] [--ranks 2 8] [--full-too NAME --timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REALISTIC = ROOT / "benchmarks" / "realistic"
GOALS = {2: 60.0, 8: 120.0}
GOAL_RATIO = 2.0

# The reference: the fixed notebook's cells in one process, at rank size 1, with the probes in proof mode.
PLAIN = """
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from IPython.core.interactiveshell import InteractiveShell
from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.notebook import load
from npu_migrate_nb.sim import DEFAULT_PROOF_STEPS, engine, probes
notebook = load(sys.argv[1])
engine.prepare_rank(0, 1, {"tf1": analyze(notebook).tf1, "seed": 1000})
shell = InteractiveShell.instance()
probes.set_proof(DEFAULT_PROOF_STEPS)
for cell in notebook.code_cells:
    result = shell.run_cell(cell.source)
    if not result.success:
        sys.exit(1)
"""


def timed(command, timeout: float):
    """(wall seconds, exit code, stdout) of a whole process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, None, ""
    return time.perf_counter() - started, done.returncode, done.stdout


def fixed_copy(path: Path, folder: str) -> str:
    target = os.path.join(folder, path.stem + ".fixed.ipynb")
    subprocess.run([sys.executable, "-m", "npu_migrate_nb", "fix", str(path), "-o", target], check=True,
                   capture_output=True, cwd=ROOT)
    return target


def verdict(stdout: str) -> str:
    try:
        result = json.loads(stdout)
    except ValueError:
        return "no verdict"
    checks = result.get("checks", {})
    taken = [f"{r['source']} {r['taken']}/{r['written'] if r['written'] is not None else '?'}"
             for r in (result.get("proof") or {}).get("shortened", [])]
    return " ".join(f"{name[0]}:{status}" for name, status in checks.items()) + "  shortened: " + ", ".join(taken)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="the notebooks whose name contains this")
    parser.add_argument("--skip", help="leave out the notebooks whose name contains this")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--timeout", type=float, default=900.0, help="per command (default 900 s)")
    parser.add_argument("--full-too", metavar="NAME", help="also run this notebook trained as written (--full)")
    args = parser.parse_args()
    paths = [p for p in sorted(REALISTIC.glob("*.ipynb"))
             if (not args.only or args.only in p.name) and not (args.skip and args.skip in p.name)]
    rows, met = [], True
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            fixed = fixed_copy(path, folder)
            plain, plain_code, _ = timed([sys.executable, "-c", PLAIN, fixed], args.timeout)
            row = {"notebook": path.stem, "plain": plain if plain_code == 0 else None}
            for ranks in args.ranks:
                seconds, code, stdout = timed([sys.executable, "-m", "npu_migrate_nb", "run", fixed, "-n", str(ranks),
                                               "--format", "json"], args.timeout)
                row[ranks] = (seconds, code, verdict(stdout))
                met &= code == 0 and seconds <= GOALS.get(ranks, float("inf"))
            seconds, code, stdout = timed([sys.executable, "-m", "npu_migrate_nb", "run", str(path), "-n", "2",
                                           "--format", "json"], args.timeout)
            row["unfixed"] = (seconds, code, verdict(stdout))
            met &= code == 1 and ":fail" in row["unfixed"][2] and seconds <= GOALS[2]
            if row["plain"] is not None and 2 in row:
                met &= row[2][0] <= GOAL_RATIO * row["plain"]
            rows.append(row)
            print(_line(row, args.ranks), flush=True)
        if args.full_too:
            path = next(p for p in paths if args.full_too in p.name)
            seconds, code, stdout = timed([sys.executable, "-m", "npu_migrate_nb", "run", fixed_copy(path, folder),
                                           "-n", "2", "--full", "--format", "json"], args.timeout)
            print(f"{path.stem} trained as written (--full), 2 ranks: "
                  + (f"{seconds:.0f} s, {verdict(stdout)}" if code is not None else
                     f"not done after {seconds:.0f} s (the command's timeout)"))
    print(f"goals: 2 ranks <= {GOALS[2]:.0f} s (fixed, and unfixed caught), 8 ranks <= {GOALS[8]:.0f} s, 2 ranks <= {GOAL_RATIO:.0f}x one plain "
          f"process; {'met' if met else 'NOT met'}")
    return 0


def _line(row: dict, ranks) -> str:
    plain = row["plain"]
    parts = [f"{row['notebook']:<24} plain {plain:6.1f} s" if plain is not None else f"{row['notebook']:<24} plain failed"]
    for n in ranks:
        seconds, code, what = row[n]
        ratio = f" = {seconds / plain:.2f}x" if plain and n == 2 else ""
        state = "ok" if code == 0 else ("TIMEOUT" if code is None else f"exit {code}")
        parts.append(f"{n} ranks {seconds:6.1f} s{ratio} {state}")
    parts.append(row[ranks[0]][2])
    seconds, code, what = row["unfixed"]
    caught = "caught" if code == 1 and ":fail" in what else f"NOT caught (exit {code})"
    return " | ".join(parts) + f"\n{'':<24} unfixed, 2 ranks {seconds:6.1f} s {caught}: {what.split('  shortened')[0]}"


if __name__ == "__main__":
    sys.exit(main())
