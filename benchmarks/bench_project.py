"""How fast is ``check`` on a directory of 500 scripts, against a process that only parses them with libcst?

The project is made of real code: the code cells of the corpus notebooks (ours and the field's), one
script each (IPython lines masked as ``check`` masks them), in packages of 50 files, with a main
script importing a module of every package from the project's root (so the module lookup from the
root is exercised). Whole processes, as a user runs them: CPU and wall time, each the median of
alternating runs against the reference. Goal (issue 36): ``check DIR`` at most 1.0x the reference.

    python benchmarks/bench_project.py [--files 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPORA = (ROOT / "benchmarks" / "corpus", ROOT / "benchmarks" / "field" / "notebooks")
PACKAGE_SIZE = 50
GOAL = 1.0


def scripts_of_the_corpus(limit: int):
    """Up to ``limit`` scripts (name, code) made of the corpus notebooks' code cells, each one libcst parses."""
    import libcst

    from npu_migrate_nb.ipython_syntax import mask
    from npu_migrate_nb.notebook import InputError, load

    found = []
    for corpus in CORPORA:
        for path in sorted(corpus.rglob("*.ipynb")):
            try:
                cells = load(str(path)).code_cells
            except InputError:
                continue
            masked = [mask(cell.source) for cell in cells]
            code = "\n\n".join(m.code for m in masked if m.is_python)
            try:
                libcst.parse_module(code)
            except Exception:
                continue
            found.append(("nb_" + re.sub(r"\W", "_", path.stem), code))  # a module name: never a digit first
            if len(found) == limit:
                return found
    return found


def write_project(folder: Path, scripts) -> None:
    (folder / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    imports = []
    for number, (name, code) in enumerate(scripts):
        package = folder / "src" / f"part{number // PACKAGE_SIZE}"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
        (package / f"{name}_{number}.py").write_text(code)
        if number % PACKAGE_SIZE == 0:
            imports.append(f"from src.part{number // PACKAGE_SIZE} import {name}_{number}")
    (folder / "main.py").write_text("\n".join(imports) + "\n\nif __name__ == '__main__':\n    pass\n")


def timed(command) -> tuple:
    """(CPU seconds, wall seconds) of a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):  # check's 1: findings; anything else is a broken measurement
        raise SystemExit(f"{command[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    scripts = scripts_of_the_corpus(args.files)
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder) / "project"
        project.mkdir()
        write_project(project, scripts)
        files = sorted(str(p) for p in project.rglob("*.py"))
        listing = Path(folder) / "files.json"
        listing.write_text(json.dumps(files))
        reference = [sys.executable, "-c",
                     "import json, sys, libcst\n"
                     "for p in json.load(open(sys.argv[1])):\n    libcst.parse_module(open(p).read())\n",
                     str(listing)]
        check = [sys.executable, "-m", "npu_migrate_nb", "check", str(project)]
        runs = {"reference": [], "check": []}
        for _round in range(args.repeat):
            runs["reference"].append(timed(reference))
            runs["check"].append(timed(check))
    median = {name: (statistics.median(c for c, _w in values), statistics.median(w for _c, w in values))
              for name, values in runs.items()}
    ratio_cpu = median["check"][0] / median["reference"][0]
    ratio_wall = median["check"][1] / median["reference"][1]
    print(f"project of {len(files)} scripts ({len(scripts)} from the corpus notebooks, in packages of {PACKAGE_SIZE})")
    print(f"  libcst.parse_module on every file: CPU {median['reference'][0]:.2f} s, wall {median['reference'][1]:.2f} s")
    print(f"  check DIR:                         CPU {median['check'][0]:.2f} s, wall {median['check'][1]:.2f} s")
    print(f"  ratio: CPU {ratio_cpu:.2f}x, wall {ratio_wall:.2f}x   (goal <= {GOAL:.1f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"files": len(files), "reference": median["reference"],
                                               "check": median["check"], "ratio_cpu": ratio_cpu,
                                               "ratio_wall": ratio_wall}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
