"""Rebuild the corpus: public notebooks that train a TensorFlow model, stripped to their code cells.

    python benchmarks/corpus/build_corpus.py MIRROR_ROOT

MIRROR_ROOT holds bare git snapshots named ``owner+name/repo`` (as ``fetch`` leaves them). A notebook
is kept when one of its code cells calls a training method (``TRAINING_CALLS``) and it imports
TensorFlow or Keras with the TensorFlow backend; markdown cells, outputs and cell metadata are dropped.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from npu_migrate_nb.ipython_syntax import mask  # noqa: E402

# (repository, folder in the corpus, path patterns of its notebooks that are tutorials or examples)
SOURCES = [
    ("tensorflow/docs", "tensorflow-docs", r"^site/en/(tutorials|guide)/.*\.ipynb$"),
    ("tensorflow/examples", "tensorflow-examples", r"^(courses|lite)/.*\.ipynb$"),
    ("tensorflow/text", "tensorflow-text", r"^docs/.*\.ipynb$"),
    ("tensorflow/addons", "tensorflow-addons", r"^docs/tutorials/.*\.ipynb$"),
    ("tensorflow/recommenders", "tensorflow-recommenders", r"^docs/examples/.*\.ipynb$"),
    ("tensorflow/model-optimization", "tensorflow-model-optimization", r"^tensorflow_model_optimization/g3doc/.*\.ipynb$"),
    ("ageron/handson-ml2", "handson-ml2", r"^\d\d_.*\.ipynb$"),
    ("tensorflow/agents", "tensorflow-agents", r"^docs/tutorials/.*\.ipynb$"),
    ("tensorflow/privacy", "tensorflow-privacy", r"^(g3doc/tutorials|tensorflow_privacy/.*/codelabs)/.*\.ipynb$"),
    ("tensorflow/io", "tensorflow-io", r"^docs/tutorials/.*\.ipynb$"),
    ("tensorflow/decision-forests", "tensorflow-decision-forests", r"^documentation/tutorials/.*\.ipynb$"),
    ("tensorflow/quantum", "tensorflow-quantum", r"^docs/tutorials/.*\.ipynb$"),
]
LICENSE = "Apache-2.0"
# Calls that train: Keras fit, Estimator train, optimizer steps of custom loops and TF1 graphs.
TRAINING_CALLS = frozenset(
    {"fit", "fit_generator", "train_on_batch", "train", "train_and_evaluate", "apply_gradients", "minimize"}
)
# Editor checkpoints, and exercises whose solution notebook is also there (the same code twice).
EXCLUDED = re.compile(r"checkpoint|_exercise_(?!.*solution)")
TF_MODULES = ("tensorflow", "keras", "tf_keras")
OTHER_KERAS_BACKEND = re.compile(r"KERAS_BACKEND['\"]\]\s*=\s*['\"](jax|torch|numpy)")


def code_sources(document: dict) -> List[str]:
    sources = []
    for cell in document.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else source)
    return sources


def parsed(source: str) -> Optional[ast.AST]:
    code = mask(source).code
    if code is None:
        return None
    try:
        with warnings.catch_warnings():  # invalid escapes in tutorial strings are not our concern
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return ast.parse(code)
    except SyntaxError:
        return None


def imports_tensorflow(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(name.split(".")[0] in TF_MODULES for name in names):
            return True
    return False


def calls_training(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in TRAINING_CALLS:
                return True
    return False


def trains_a_tensorflow_model(sources: List[str]) -> bool:
    if any(OTHER_KERAS_BACKEND.search(source) for source in sources):
        return False
    trees = [tree for tree in map(parsed, sources) if tree is not None]
    return any(map(imports_tensorflow, trees)) and any(map(calls_training, trees))


def stripped(document: dict, sources: List[str]) -> dict:
    metadata = document.get("metadata", {})
    kernelspec = metadata.get("kernelspec") or {"name": "python3", "display_name": "Python 3", "language": "python"}
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
            for source in sources
        ],
        "metadata": {"kernelspec": kernelspec, "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 4,
    }


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def candidates(mirror_root: Path) -> Iterator[Tuple[str, str, str, str, dict]]:
    for repo, folder, pattern in SOURCES:
        git_dir = mirror_root / repo.replace("/", "+") / "repo"
        commit = git(git_dir, "rev-parse", "HEAD").strip()
        for path in git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines():
            if re.search(pattern, path) and not EXCLUDED.search(path):
                try:
                    text = git(git_dir, "show", f"{commit}:{path}")
                except subprocess.CalledProcessError:  # a snapshot may list its largest files without them
                    print(f"absent from the snapshot, skipped: {repo}/{path}", file=sys.stderr)
                    continue
                yield repo, folder, commit, path, json.loads(text)


def corpus_name(repo_pattern_path: str) -> str:
    stem = re.sub(r"^(site/en/|docs/(examples/|tutorials/)?|documentation/tutorials/|g3doc/tutorials/"
                  r"|tensorflow_model_optimization/g3doc/|tensorflow_privacy/privacy/privacy_tests/)", "", repo_pattern_path)
    return re.sub(r"[^A-Za-z0-9_]+", "-", stem[: -len(".ipynb")]).strip("-")


def build(mirror_root: Path) -> List[dict]:
    for _, folder, _ in SOURCES:  # a notebook the rule no longer keeps must not linger
        for stale in (HERE / folder).glob("*.ipynb"):
            stale.unlink()
    manifest = []
    for repo, folder, commit, path, document in candidates(mirror_root):
        sources = code_sources(document)
        if not trains_a_tensorflow_model(sources):
            continue
        target = HERE / folder / f"{corpus_name(path)}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(stripped(document, sources), indent=1, ensure_ascii=False) + "\n")
        manifest.append({"file": str(target.relative_to(HERE)), "repo": repo, "path": path, "commit": commit,
                         "license": LICENSE})
    return manifest


def main() -> None:
    manifest = build(Path(sys.argv[1]))
    (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} notebooks")


if __name__ == "__main__":
    main()
