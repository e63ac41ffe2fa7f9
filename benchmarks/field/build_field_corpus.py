"""Build the field corpus: public training notebooks by authors other than the TensorFlow docs.

    python benchmarks/field/build_field_corpus.py MIRROR_ROOT
    python benchmarks/field/build_field_corpus.py MIRROR_ROOT --from-manifest

MIRROR_ROOT holds bare git snapshots named ``owner+name/repo`` (as ``fetch`` leaves them). The first
form selects notebooks from each repository's newest commit with the rule of ``build_corpus.py`` and
writes ``MANIFEST.json``; ``--from-manifest`` writes exactly the manifest's files from its commits.
The notebooks go to ``notebooks/``, which is not committed: fetched content stays out of the repository.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "corpus"))

from build_corpus import EXCLUDED, code_sources, git, parsed, stripped, trains_a_tensorflow_model  # noqa: E402

NOTEBOOKS = HERE / "notebooks"
MANIFEST = HERE / "MANIFEST.json"


class Source(NamedTuple):
    repo: str
    family: str
    license: str
    pattern: str  # its chapters, lessons and examples; not the blank copies of notebooks it also solves


SOURCES = [
    Source("fchollet/deep-learning-with-python-notebooks", "dlwp", "MIT", r"^(first|second)_edition/.*\.ipynb$"),
    Source("ageron/handson-ml3", "handson-ml3", "Apache-2.0", r"^\d\d_.*\.ipynb$"),
    Source("ageron/handson-ml", "handson-ml", "Apache-2.0", r"^(\d\d|extra)_.*\.ipynb$"),
    # notebooks/ holds the same files as tensorflow_v1/notebooks/
    Source("aymericdamien/TensorFlow-Examples", "tf-examples-damien", "MIT", r"^tensorflow_v[12]/notebooks/.*\.ipynb$"),
    Source("Hvass-Labs/TensorFlow-Tutorials", "hvass", "MIT", r"^\d\d.*\.ipynb$"),
    Source("instillai/TensorFlow-Course", "tf-course-instillai", "MIT", r"^codes/ipython/.*\.ipynb$"),
    Source("rasbt/python-machine-learning-book-3rd-edition", "pyml3", "MIT", r"^ch\d\d/.*\.ipynb$"),
    Source("PacktPublishing/Deep-Learning-with-TensorFlow-2-and-Keras", "packt-dl-tf2", "MIT", r"^Chapter \d+/.*\.ipynb$"),
    Source("jeffheaton/t81_558_deep_learning", "t81-558", "Apache-2.0", r"^t81_558_class_.*\.ipynb$"),
    Source("https-deeplearning-ai/tensorflow-1-public", "dlai-tf", "Apache-2.0", r"^C\d/W\d/.*\.ipynb$"),
    # the AMLD exercises are the solutions with blanks
    Source("tensorflow/workshops", "tf-workshops", "Apache-2.0", r"^extras/(?!amld/notebooks/exercises/).*\.ipynb$"),
    # labs are the solutions with blanks
    Source("GoogleCloudPlatform/training-data-analyst", "gcp-ml-courses", "Apache-2.0",
           r"^courses/machine_learning/(deepdive2/[^/]+/solutions|deepdive/[^/]+)/[^/]+\.ipynb$"),
]
# A phrase of each license's text, to notice a repository that changed its license since it was chosen.
LICENSE_PHRASES = {"MIT": "Permission is hereby granted, free of charge", "Apache-2.0": "Apache License"}


def git_dir(mirror_root: Path, repo: str) -> Path:
    return mirror_root / repo.replace("/", "+") / "repo"


def license_text(repository: Path, commit: str) -> str:
    names = git(repository, "ls-tree", "--name-only", commit).splitlines()
    license_files = [name for name in names if re.match(r"(LICENSE|LICENCE|COPYING)", name, re.IGNORECASE)]
    return "".join(git(repository, "show", f"{commit}:{name}") for name in license_files)


def notebook(repository: Path, commit: str, path: str) -> Optional[dict]:
    try:
        text = git(repository, "show", f"{commit}:{path}")
    except subprocess.CalledProcessError:  # a snapshot may list its largest files without them
        print(f"absent from the snapshot, skipped: {repository.parent.name}/{path}", file=sys.stderr)
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a symbolic link's target, or a notebook committed broken
        print(f"not a notebook, skipped: {repository.parent.name}/{path}", file=sys.stderr)
        return None


def field_name(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", path[: -len(".ipynb")]).strip("-") + ".ipynb"


def write(file: str, document: dict) -> None:
    target = HERE / file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(stripped(document, code_sources(document)), indent=1, ensure_ascii=False) + "\n")


def imported_names(tree: Optional[ast.AST]) -> List[str]:
    """The top-level modules a piece of code imports absolutely (``import mnist``, ``from dataset import x``)."""
    names = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return names


def modules_beside(repository: Path, commit: str, path: str, document: dict) -> List[str]:
    """The repository's modules the notebook imports from its own folder, and the ones those import
    (a book's ``mnist.py`` importing ``download.py``): a kernel started there imports them, so they
    belong with the notebook. Paths in the repository, in the order first imported."""
    folder = posixpath.dirname(path)
    present = set(git(repository, "ls-tree", "--name-only", commit, *([folder + "/"] if folder else [])).splitlines())
    found: List[str] = []
    pending = [name for source in code_sources(document) for name in imported_names(parsed(source))]
    while pending:
        module = posixpath.join(folder, pending.pop(0) + ".py")
        if module in present and module not in found:
            found.append(module)
            text = git(repository, "show", f"{commit}:{module}")
            pending += imported_names(parsed(text))
    return found


def write_modules(repository: Path, commit: str, modules: List[str], family: str) -> None:
    """Each module beside its family's notebooks; two different modules of one name are a conflict the
    flat family folder cannot hold: said, and the first one kept."""
    for module in modules:
        target = NOTEBOOKS / family / posixpath.basename(module)
        text = git(repository, "show", f"{commit}:{module}")
        if target.exists() and target.read_text() != text:
            print(f"two modules named {target.name} in {family}, kept the first: {module} skipped", file=sys.stderr)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def selected(mirror_root: Path, source: Source) -> Iterator[dict]:
    repository = git_dir(mirror_root, source.repo)
    if not repository.is_dir():
        print(f"no snapshot, skipped: {source.repo}", file=sys.stderr)
        return
    commit = git(repository, "rev-parse", "HEAD").strip()
    if LICENSE_PHRASES[source.license] not in license_text(repository, commit):
        print(f"license is no longer {source.license}, skipped: {source.repo}", file=sys.stderr)
        return
    for path in git(repository, "ls-tree", "-r", "--name-only", commit).splitlines():
        if not re.search(source.pattern, path) or EXCLUDED.search(path):
            continue
        document = notebook(repository, commit, path)
        if document is not None and trains_a_tensorflow_model(code_sources(document)):
            entry = {"file": f"notebooks/{source.family}/{field_name(path)}", "family": source.family,
                     "repo": source.repo, "path": path, "commit": commit, "license": source.license}
            modules = modules_beside(repository, commit, path, document)
            if modules:
                entry["modules"] = modules
            yield {**entry, "document": document}


def build(mirror_root: Path) -> List[dict]:
    manifest = []
    seen_code = set()
    for source in SOURCES:
        for entry in selected(mirror_root, source):
            document = entry.pop("document")
            # A notebook copied into a second folder or translated (same code) would count twice.
            code = tuple(code_sources(document))
            if code in seen_code:
                continue
            seen_code.add(code)
            write(entry["file"], document)
            write_modules(git_dir(mirror_root, entry["repo"]), entry["commit"], entry.get("modules", []),
                          entry["family"])
            manifest.append(entry)
    return manifest


def rebuild(mirror_root: Path, manifest: List[dict]) -> int:
    absent = 0
    for entry in manifest:
        repository = git_dir(mirror_root, entry["repo"])
        document = notebook(repository, entry["commit"], entry["path"]) if repository.is_dir() else None
        if document is None:
            absent += 1
        else:
            write(entry["file"], document)
            write_modules(repository, entry["commit"], entry.get("modules", []), entry["family"])
    return absent


def main() -> None:
    mirror_root = Path(sys.argv[1])
    shutil.rmtree(NOTEBOOKS, ignore_errors=True)  # a notebook no longer selected must not linger
    if "--from-manifest" in sys.argv[2:]:
        manifest = json.loads(MANIFEST.read_text())
        absent = rebuild(mirror_root, manifest)
        print(f"{len(manifest) - absent} of {len(manifest)} notebooks")
        sys.exit(1 if absent else 0)
    manifest = build(mirror_root)
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} notebooks")


if __name__ == "__main__":
    main()
