"""Precision on Ascend's own model zoo: file by file, or project by project (issue 36).

Ascend/ModelZoo-TensorFlow's built-in models are distributed by the vendor's engineers, each step in
whichever file of the project suits it (the broadcast hook in ``train.py``, the wrapped optimizer in
``model.py``, the shard in ``data.py``). Analyzed one file at a time, a training file whose step is
done in another file of its project is "missing" it; analyzed as a project (``check DIR``: the
entries with the modules they import, from the project's root), it should not be.

For every project of the zoo that uses the adapter's distribution APIs, both ways: the 'missing'
verdicts, and among them those whose step's API is in a file the analyzed file imports (directly or
through other files, as Python imports them with the project's root on its path) that the analysis
did not read: a step done elsewhere, a wrong verdict. (A 'missing' step that only a file it never
imports does, another entry or a kept original, is the file's own: not counted.) Also: analyses that
crash, and whether the verdicts are the same under two hash seeds (two processes).

    python benchmarks/bench_model_zoo.py --zoo ZOO [--only TensorFlow2/] [--limit N] [--json FILE]

ZOO: a checkout of Ascend/ModelZoo-TensorFlow (or its ``.py`` files, as ``git archive HEAD
TensorFlow/built-in TensorFlow2/built-in | tar -x --wildcards '*.py'`` gives them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = ("broadcast", "allreduce", "shard")
# What doing each step looks like in the zoo's code (the adapter's APIs, the ranks' variables).
STEP_API = {
    "broadcast": re.compile(r"NPUBroadcastGlobalVariablesHook|npu_hooks_append|broadcast_global_variables|"
                            r"npu\.distribute\.broadcast|hccl_ops\.broadcast|BroadcastGlobalVariables"),
    "allreduce": re.compile(r"npu_distributed_optimizer_wrapper|NPUDistributedOptimizer|npu_allreduce|"
                            r"distribute\.all_reduce|hccl_ops\.allreduce|is_distributed\s*=\s*True|"
                            r"npu_distributed_keras_optimizer_wrapper"),
    # a shard by the rank (a tf.distribute InputContext's shard does not split the NPU ranks' data: the
    # vendor's guide adds the adapter's next to it), not the rank id read for a log's name
    "shard": re.compile(r"shard_and_rebatch|\.shard\([^)\n]*(?:RANK|rank|get_rank|device_num|hvd\.size)"),
}
DISTRIBUTED = re.compile("|".join(pattern.pattern for pattern in STEP_API.values()))
PROJECT_DEPTH = 5  # TensorFlow/built-in/<domain>/<task>/<Model>_for_TensorFlow


def projects_of(zoo: Path, only: str, limit: int) -> List[Path]:
    found = set()
    for path in zoo.rglob("*.py"):
        parts = path.relative_to(zoo).parts
        if len(parts) > PROJECT_DEPTH and "built-in" in parts[:2] and only in "/".join(parts):
            found.add(zoo.joinpath(*parts[:PROJECT_DEPTH]))
    distributed = [p for p in sorted(found) if any(DISTRIBUTED.search(_text(f)) for f in p.rglob("*.py"))]
    return distributed[:limit] if limit else distributed


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def verdicts(project: Path) -> Dict[str, object]:
    """Both ways, for one project: {"files": {...}, "project": {...}, "crashes": [...]}."""
    from npu_migrate_nb.analysis import Options, analyze
    from npu_migrate_nb.modules import MAX_PROJECT_MODULES
    from npu_migrate_nb.notebook import InputError, load
    from npu_migrate_nb.project import open_project

    apis = {os.path.realpath(f): {step for step in STEPS if STEP_API[step].search(_text(f))}
            for f in project.rglob("*.py")}
    result = {"files": [], "project": [], "crashes": []}

    def judge(path: str, options: Options, into: str) -> None:
        try:
            analysis = analyze(load(path), options)
        except InputError:
            return
        except Exception as error:  # a crash of the analyzer is a finding of this benchmark
            result["crashes"].append(f"{path}: {type(error).__name__}: {error}")
            return
        if analysis.framework == "none":
            return
        read = {os.path.realpath(path)} | {os.path.realpath(os.path.join(os.getcwd(), m.path))
                                          for m in analysis.context.modules.found}
        imported = _imported_closure(path, str(project))
        for step in STEPS:
            if analysis.steps[step] != "missing":
                continue
            elsewhere = sorted(os.path.relpath(f, project) for f in imported - read if step in apis.get(f, ()))
            result[into].append({"file": os.path.relpath(path, project), "step": step, "done_elsewhere": elsewhere})

    for path in sorted(str(f) for f in project.rglob("*.py")):
        judge(path, Options(base=os.path.dirname(path)), "files")
    try:
        entries = open_project(str(project), str(project)).entries
    except InputError:
        entries = []
    for entry in entries:
        judge(entry, Options(base=os.path.dirname(entry), root=str(project), max_modules=MAX_PROJECT_MODULES),
              "project")
    return result


def _imported_closure(path: str, root: str) -> set:
    """The real paths of the project's files ``path`` imports, transitively (from each importer's
    folder, then the root), without the analyzer's limits."""
    from npu_migrate_nb.modules import _module_file
    from npu_migrate_nb.project import _imported_module_names

    seen, pending = set(), [os.path.realpath(path)]
    while pending:
        current = pending.pop()
        folder = os.path.dirname(current)
        for name in _imported_module_names(current):
            found = _module_file(name, folder, (folder, root), root)
            if found is not None and os.path.realpath(found) not in seen:
                seen.add(os.path.realpath(found))
                pending.append(os.path.realpath(found))
    return seen


def summarize(results: Dict[str, dict]) -> Dict[str, object]:
    summary = {"projects": len(results), "crashes": sum(len(r["crashes"]) for r in results.values())}
    for way in ("files", "project"):
        missing = [v for r in results.values() for v in r[way]]
        summary[way] = {"missing": len(missing), "done_elsewhere": sum(bool(v["done_elsewhere"]) for v in missing)}
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", required=True, type=Path)
    parser.add_argument("--only", default="", help="projects whose path contains it")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--seed-check", action="store_true", help="(internal) print the verdicts as JSON only")
    args = parser.parse_args(argv)
    started = time.monotonic()
    projects = projects_of(args.zoo, args.only, args.limit)
    results = {str(p.relative_to(args.zoo)): verdicts(p) for p in projects}
    if args.seed_check:
        print(json.dumps(results, sort_keys=True))
        return 0
    summary = summarize(results)
    same = _same_under_another_hash_seed(args, results)
    print(f"model zoo: {summary['projects']} distributed projects ({time.monotonic() - started:.0f} s)")
    for way, label in (("files", "file by file"), ("project", "as projects ")):
        counts = summary[way]
        print(f"  {label}: {counts['missing']:4d} 'missing' verdicts, {counts['done_elsewhere']:4d} of them on a step "
              f"done in a file the analysis did not read   (goal for projects: 0)")
    print(f"  analyses that crashed: {summary['crashes']}   (goal 0)")
    print(f"  verdicts identical under two hash seeds: {same}")
    for name, result in results.items():
        for verdict in result["project"]:
            if verdict["done_elsewhere"]:
                print(f"    {name}/{verdict['file']}: {verdict['step']} done in {', '.join(verdict['done_elsewhere'][:3])}")
        for crash in result["crashes"]:
            print(f"    crash: {crash[:200]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "same_under_two_seeds": same,
                                               "results": results}, indent=1))
    return 0


def _same_under_another_hash_seed(args, results) -> bool:
    command = [sys.executable, __file__, "--zoo", str(args.zoo), "--only", args.only, "--limit", str(args.limit),
               "--seed-check"]
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED="12345"))
    try:
        return json.loads(done.stdout) == json.loads(json.dumps(results, sort_keys=True))
    except json.JSONDecodeError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
