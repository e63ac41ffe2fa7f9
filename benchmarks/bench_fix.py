"""How fast is ``fix`` as a process on a tutorial-sized notebook, against processes in the same run?

Goal: ``npu-migrate-nb fix NOTEBOOK -o OUT`` at most 0.5 s (it took 1.9 s, 1.4 s of which importing
``nbformat`` for its schema validation). References, run alternately with it: ``check`` on the same
notebook, and a process that only imports libcst (which ``fix`` needs to rewrite cells); for comparison,
a process that only imports ``nbformat`` (what validating the result used to cost).

    python benchmarks/bench_fix.py [--notebook examples/keras_single_card.ipynb] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
# what the ``npu-migrate-nb`` console script runs
CLI = [sys.executable, "-c", "from npu_migrate_nb.cli import main; raise SystemExit(main())"]


def run_once(command):
    """(CPU seconds, user + system, and wall seconds) of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=_ENV, check=False)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"benchmark command failed ({done.returncode}): {command}\n{done.stderr.decode()[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def timed_alternately(commands, repeat: int):
    """Median CPU and wall times of each command, the commands run in turn so that load hits all alike."""
    cpu = {name: [] for name in commands}
    wall = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            seconds, elapsed = run_once(command)
            cpu[name].append(seconds)
            wall[name].append(elapsed)
    return ({name: statistics.median(times) for name, times in cpu.items()},
            {name: statistics.median(times) for name, times in wall.items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notebook", default=str(ROOT / "examples" / "keras_single_card.ipynb"))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    notebook = str(Path(args.notebook).resolve())
    with tempfile.TemporaryDirectory() as folder:
        commands = {
            "import libcst": [sys.executable, "-c", "import libcst"],
            "check": CLI + ["check", notebook],
            "fix": CLI + ["fix", notebook, "-o", str(Path(folder, "fixed.ipynb"))],
            "import nbformat": [sys.executable, "-c", "import nbformat"],
        }
        run_once(commands["fix"])  # writes the .pyc files a first run would, outside the measurement
        cpu, wall = timed_alternately(commands, args.repeat)
    reference = cpu["import libcst"]
    print(f"notebook: {os.path.relpath(notebook, ROOT)}; whole processes, median of {args.repeat} alternating runs")
    print(f"  {'':44} {'CPU':>8}   {'ratio':>6}   {'wall':>8}")
    rows = [
        ("reference: python -c 'import libcst'", "import libcst", ""),
        ("npu-migrate-nb check", "check", ""),
        ("npu-migrate-nb fix -o OUT", "fix", "   (goal <= 0.5 s)"),
        ("python -c 'import nbformat' (what fix paid)", "import nbformat", ""),
    ]
    for label, name, note in rows:
        print(f"  {label:44} {cpu[name]:7.3f} s   {cpu[name] / reference:5.2f}x   {wall[name]:7.3f} s{note}")
    print(f"  fix / check: {cpu['fix'] / cpu['check']:.2f}x CPU")


if __name__ == "__main__":
    main()
