"""How fast is ``check`` on a large notebook, against a process that only parses its cells with libcst?

Whole processes, as a user runs them: the wall time they wait for and the CPU time they use, each
the median of alternating runs against the reference; and the time ``check`` spends importing
modules (``-X importtime``), so that a start-up regression shows.

Goals: ``check`` at most 0.5x the reference in wall time (issue 37; 1.0x in CPU time, issue 2);
re-analysis after a one-cell edit at most 50 ms. Also measured, when TensorFlow is installed: its own
upgrade tool, ``tf_upgrade_v2``, on the same code.

    python benchmarks/bench_analysis.py [--cells 600] [--repeat 5]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CELL_TEMPLATES = [
    "import numpy as np\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()\n",
    "%matplotlib inline\nBATCH_{i} = 64\nrng_{i} = np.random.RandomState({i})\nx_{i} = rng_{i}.rand(1024, 8).astype('float32')\n"
    "y_{i} = (x_{i} @ rng_{i}.rand(8, 1)).astype('float32')\n",
    "ds_{i} = tf.data.Dataset.from_tensor_slices((x_{i}, y_{i})).shuffle(1024, seed={i}).batch(BATCH_{i}, drop_remainder=True)\n"
    "for features, target in ds_{i}.take(1):\n    print(features.shape, target.shape)\n",
    "def make_model_{i}(units={i}):\n    \"\"\"A small regression model.\"\"\"\n    model = tf.keras.Sequential([\n"
    "        tf.keras.layers.Dense(units, activation='relu', input_shape=(8,)),\n        tf.keras.layers.Dropout(0.1),\n"
    "        tf.keras.layers.Dense(1),\n    ])\n    return model\n\nmodel_{i} = make_model_{i}()\nmodel_{i}.summary()\n",
    "model_{i}.compile(optimizer='adam', loss='mse', metrics=['mae'])\nhistory_{i} = model_{i}.fit(ds_{i}, epochs=2, verbose=0)\n"
    "print(history_{i}.history['loss'][-1])\n",
    "loss_object_{i} = tf.keras.losses.MeanSquaredError()\noptimizer_{i} = tf.keras.optimizers.SGD(0.01)\n\n@tf.function\n"
    "def train_step_{i}(inputs, labels):\n    with tf.GradientTape() as tape:\n        predictions = model_{i}(inputs, training=True)\n"
    "        loss = loss_object_{i}(labels, predictions)\n    grads = tape.gradient(loss, model_{i}.trainable_variables)\n"
    "    optimizer_{i}.apply_gradients(zip(grads, model_{i}.trainable_variables))\n    return loss\n",
    "results_{i} = []\nfor epoch in range(3):\n    for step, (a, b) in enumerate(ds_{i}):\n        loss = train_step_{i}(a, b)\n"
    "        if step % 10 == 0:\n            results_{i}.append(float(loss))\n    print(f'epoch {{epoch}}: {{results_{i}[-1]:.4f}}')\n",
    "import pandas as pd\nframe_{i} = pd.DataFrame({{'loss': results_{i}}})\nframe_{i}.describe()\n",
]


def make_notebook(cells: int) -> dict:
    sources = []
    for i in range(cells):
        if i % 10 == 9:
            sources.append(("markdown", f"## Section {i}\nSome explanation of step {i}."))
        else:
            sources.append(("code", CELL_TEMPLATES[i % len(CELL_TEMPLATES)].format(i=i)))
    return {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": source, **({"outputs": [], "execution_count": None} if kind == "code" else {})}
            for kind, source in sources
        ],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


REFERENCE = """
import json, sys, libcst
from npu_migrate_nb.ipython_syntax import mask
nb = json.load(open(sys.argv[1]))
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        code = mask(cell["source"]).code
        if code is not None:
            libcst.parse_module(code)
"""


def run_once(command, allowed_exit_codes=(0, 1)):
    """(wall seconds, CPU seconds: user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=_ENV, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in allowed_exit_codes:
        raise SystemExit(f"benchmark command failed ({done.returncode}): {command}\n{done.stderr.decode()[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def timed(command, repeat: int) -> float:
    return statistics.median(run_once(command)[1] for _ in range(repeat))


def timed_pair(first, second, repeat: int):
    """((wall, CPU) medians of ``first``, (wall, CPU) medians of ``second``), the two run alternately so
    that background load hits both alike."""
    runs = ([], [])
    for _ in range(repeat):
        runs[0].append(run_once(first, allowed_exit_codes=(0,)))
        runs[1].append(run_once(second))
    return tuple((statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for rs in runs)


def import_time(command) -> tuple:
    """(seconds spent importing, the slowest top-level imports) of one run, from ``-X importtime``."""
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, cwd=ROOT, env=_ENV, text=True, check=False)
    total, top = 0, []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or not parts[0].split(":")[1].strip().isdigit():
            continue
        total += int(parts[0].split(":")[1])
        name = parts[2].rstrip()
        if not name.startswith("  "):  # imported by the command itself, not by another module
            top.append((int(parts[1]), name.strip()))
    return total / 1e6, sorted(top, reverse=True)[:3]


def tf_upgrade_time(sources, repeat: int):
    try:
        import importlib.util

        if importlib.util.find_spec("tensorflow") is None:
            return None
    except Exception:
        return None
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "notebook.py")
        # tf_upgrade_v2 reads plain Python: IPython lines become comments, as a user would have to do.
        script.write_text("\n".join(
            "\n".join(("# " + line) if line.lstrip().startswith("%") else line for line in source.splitlines())
            for source in sources
        ))
        command = [sys.executable, "-m", "tensorflow.tools.compatibility.tf_upgrade_v2",
                   "--infile", str(script), "--outfile", str(Path(folder, "out.py")), "--reportfile", str(Path(folder, "r.txt"))]
        return timed(command, max(1, repeat // 2))


def reanalysis_after_edit(path: Path, repeat: int) -> float:
    from npu_migrate_nb.analysis import analyze
    from npu_migrate_nb.notebook import load

    notebook = load(str(path))
    analyze(notebook)  # warm the per-cell cache, as the side panel's kernel would be
    target = next(cell for cell in notebook.cells if cell.cell_type == "code" and "compile" in cell.source)
    times = []
    for n in range(repeat):
        target.source = target.source + f"\n# edit {n}\n"
        start = time.process_time()  # CPU time of this process: steadier than wall time under load
        analyze(notebook)
        times.append(time.process_time() - start)
    return statistics.median(times)


def compile_bytecode() -> None:
    """The package's bytecode, as pip writes it when it installs a wheel and Python caches it at the
    first run: without it (PYTHONDONTWRITEBYTECODE, an editable install) every run compiles every
    module again, a cost no user pays twice."""
    compileall.compile_dir(str(ROOT / "npu_migrate_nb"), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    notebook = make_notebook(args.cells)
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "large.ipynb")
        path.write_text(json.dumps(notebook, indent=1))
        reference_file = Path(folder, "reference.py")
        reference_file.write_text(REFERENCE)
        check_command = [sys.executable, "-c", "from npu_migrate_nb.cli import main; raise SystemExit(main())",
                         "check", str(path), "--format", "json"]  # what the ``npu-migrate-nb`` console script runs
        reference, check = timed_pair([sys.executable, str(reference_file), str(path)], check_command, args.repeat)
        imports, slowest = import_time(check_command)
        edit = reanalysis_after_edit(path, args.repeat * 4)
        upgrade = tf_upgrade_time([c["source"] for c in notebook["cells"] if c["cell_type"] == "code"], args.repeat)
    code_cells = sum(1 for c in notebook["cells"] if c["cell_type"] == "code")
    print(f"notebook: {args.cells} cells ({code_cells} code); whole processes, medians of {args.repeat} alternating runs "
          "(bytecode compiled, as installed)")
    print(f"{'':48}{'wall':>8}{'':7}{'CPU':>8}")
    print(f"  reference: libcst.parse_module on every cell  {reference[0]:7.3f} s  1.00x  {reference[1]:7.3f} s  1.00x")
    print(f"  npu-migrate-nb check --format json            {check[0]:7.3f} s  {check[0] / reference[0]:.2f}x  "
          f"{check[1]:7.3f} s  {check[1] / reference[1]:.2f}x   (goal <= 0.5x wall)")
    print(f"  of which imports (-X importtime)              {imports * 1000:7.1f} ms; slowest: "
          + ", ".join(f"{name} {micro / 1000:.1f} ms" for micro, name in slowest))
    if upgrade is not None:
        print(f"  tf_upgrade_v2 on the same code (peer, CPU)                       {upgrade:7.3f} s  "
              f"{upgrade / reference[1]:.2f}x")
    print(f"  re-analysis after a one-cell edit (cached)    {edit * 1000:7.1f} ms CPU      (goal <= 50 ms)")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
