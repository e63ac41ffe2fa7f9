"""Pin every dependency pyproject.toml declares to its lowest allowed version: a pip constraints file
for CI's minimum-versions step (``pip install -c min.txt -e ".[sim,lab,test]"``).

Each requirement of ``[project] dependencies`` and of the extras named on the command line (the
extras that name our own package, as ``all`` does, are followed) becomes ``name==lowest``: the
version of its ``>=``, ``==`` or ``~=`` clause (``==2.15.*`` gives 2.15.0). A requirement with no
lower bound (``numpy<2``) is left to pip, which then takes the newest release it allows. Two
requirements of one package keep the higher floor.

    python tools/min_constraints.py sim lab test > min-constraints.txt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
FLOOR_OPERATORS = (">=", "==", "~=", "===")


def lowest_version(requirement: Requirement) -> Optional[Version]:
    """The lowest version ``requirement`` allows, or None when it sets no lower bound."""
    floors = []
    for clause in requirement.specifier:
        if clause.operator in FLOOR_OPERATORS:
            floors.append(Version(clause.version.replace(".*", ".0") if clause.version.endswith(".*")
                                  else clause.version))
    return max(floors) if floors else None


def requirements(project: dict, extras: Iterable[str]) -> List[Requirement]:
    """The base dependencies and those of ``extras``, following extras that name the project itself."""
    name = canonicalize_name(project["name"])
    optional = project.get("optional-dependencies", {})
    found = [Requirement(text) for text in project.get("dependencies", [])]
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"min_constraints: pyproject.toml has no extra {extra!r}")
        seen.add(extra)
        for text in optional[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == name:
                pending.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def constraints(project: dict, extras: Iterable[str]) -> Dict[str, Version]:
    pinned: Dict[str, Version] = {}
    for requirement in requirements(project, extras):
        floor = lowest_version(requirement)
        if floor is not None:
            key = canonicalize_name(requirement.name)
            pinned[key] = max(floor, pinned.get(key, floor))
    return pinned


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="the extras to include (default: none, the base dependencies)")
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    args = parser.parse_args(argv)
    project = tomllib.loads(args.pyproject.read_text(encoding="utf-8"))["project"]
    print(f"# The lowest versions {args.pyproject.name} allows (extras: {', '.join(args.extras) or 'none'}); "
          "made by tools/min_constraints.py")
    for name, version in sorted(constraints(project, args.extras).items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
