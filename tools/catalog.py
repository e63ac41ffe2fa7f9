"""The message catalog, with Babel: extract, update, compile, check.

    python tools/catalog.py update [--add TRANSLATIONS.json ...]   # source -> .pot -> zh_CN .po
    python tools/catalog.py compile                               # .po -> .mo (Python) and .json (JupyterLab)
    python tools/catalog.py check                                 # every message translated, placeholders kept

Messages come from ``_``/``N_``/``ngettext`` in the Python package and from ``trans.__``/``trans._n``
in the lab extension's TypeScript, one domain for both. ``update --add`` fills translations from a
``{msgid: msgstr}`` JSON file (how a batch of new translations is brought in).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_file
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "npu_migrate_nb"
LAB_SOURCES = ROOT / "labextension" / "src"
DOMAIN = "npu_migrate_nb"
LOCALE_DIR = PACKAGE / "locale"
LANGUAGES = ("zh_CN",)
PYTHON_KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
TYPESCRIPT_KEYWORDS = {"__": None, "_n": (1, 2)}
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?:![rsa])?(?::[^{}]*)?\}|%\([A-Za-z_]+\)[sdr]|%[sd]|%[0-9]+")


def po_path(language: str) -> Path:
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def source_files() -> Iterable[tuple]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "labextension" not in path.parts:
            yield "python", path, PYTHON_KEYWORDS
    for path in sorted(LAB_SOURCES.glob("*.ts")):
        if not path.name.endswith(".spec.ts"):
            yield "javascript", path, TYPESCRIPT_KEYWORDS


def extract() -> Catalog:
    template = Catalog(domain=DOMAIN, project="npu-migrate-nb", charset="utf-8", fuzzy=False)
    for method, path, keywords in source_files():
        options = {"jsx": "false"} if method == "javascript" else {}
        for line, message, comments, _context in extract_from_file(
            method, str(path), keywords=keywords, options=options, strip_comment_tags=True
        ):
            if not message or (isinstance(message, tuple) and not message[0]):
                continue
            flags = ("python-brace-format",) if PLACEHOLDER.search(str(message)) else ()
            template.add(message, None, [(str(path.relative_to(ROOT)), line)], auto_comments=comments, flags=flags)
    return template


def read(language: str) -> Catalog:
    path = po_path(language)
    if not path.exists():
        return Catalog(locale=language, domain=DOMAIN, project="npu-migrate-nb", fuzzy=False)
    with path.open("rb") as handle:
        return read_po(handle, locale=language, domain=DOMAIN)


def write(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=100, omit_header=False, sort_output=False, include_previous=False)
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(buffer.getvalue())
    temporary.replace(path)


def update(additions: List[Path]) -> None:
    template = extract()
    added: Dict[str, str] = {}
    for addition in additions:
        added.update(json.loads(addition.read_text(encoding="utf-8")))
    for language in LANGUAGES:
        catalog = read(language)
        catalog.update(template, update_header_comment=False, no_fuzzy_matching=True)
        for message in catalog:
            key = message.id if isinstance(message.id, str) else message.id[0]
            if key and key in added:
                text = added[key]
                message.string = tuple(text) if isinstance(message.id, tuple) and isinstance(text, list) else (
                    (text, text) if isinstance(message.id, tuple) else text
                )
                if "fuzzy" in message.flags:
                    message.flags.discard("fuzzy")
        catalog.obsolete.clear()
        write(catalog, po_path(language))
        print(f"{po_path(language).relative_to(ROOT)}: {len(catalog)} messages, {len(problems(catalog, template))} to do")


def problems(catalog: Catalog, template: Catalog) -> List[str]:
    """What keeps ``catalog`` from being complete: untranslated, fuzzy, placeholders changed, stale."""
    found = []
    wanted = {message.id for message in template if message.id}
    have = {message.id for message in catalog if message.id}
    for missing in sorted(map(str, wanted - have)):
        found.append(f"not in the catalog: {missing!r}")
    for message in catalog:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if not all(strings) or "fuzzy" in message.flags:
            found.append(f"untranslated: {ids[0]!r}")
            continue
        for string in strings:
            if sorted(PLACEHOLDER.findall(ids[0])) != sorted(PLACEHOLDER.findall(string)):
                found.append(f"placeholders differ: {ids[0]!r} -> {string!r}")
        if message.id not in wanted:
            found.append(f"no longer in the source: {ids[0]!r}")
    return found


def compile_all() -> None:
    for language in LANGUAGES:
        catalog = read(language)
        folder = po_path(language).parent
        buffer = io.BytesIO()
        write_mo(buffer, catalog, use_fuzzy=False)
        (folder / f"{DOMAIN}.mo").write_bytes(buffer.getvalue())
        (folder / f"{DOMAIN}.json").write_text(json.dumps(lab_json(catalog, language), ensure_ascii=False), encoding="utf-8")


def lab_json(catalog: Catalog, language: str) -> dict:
    """The shape JupyterLab's translator reads (as its language packs ship it)."""
    # JupyterLab names the language as its packs do (``zh-CN``): its translator looks the messages up under that name.
    document: Dict[str, object] = {
        "": {"domain": DOMAIN, "language": language.replace("_", "-"), "plural_forms": catalog.plural_forms,
             "version": "0.1.0"}
    }
    for message in catalog:
        if not message.id or "fuzzy" in message.flags or not message.string:
            continue
        if isinstance(message.id, tuple):
            # JupyterLab takes a plural entry of one form for a singular one: pad it as its packs do.
            document[message.id[0]] = list(message.string) + [""] * (2 - len(message.string))
        else:
            document[message.id] = [message.string]
    return document


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    update_parser = commands.add_parser("update")
    update_parser.add_argument("--add", type=Path, action="append", default=[])
    commands.add_parser("compile")
    commands.add_parser("check")
    msgids_parser = commands.add_parser("msgids", help="the messages these files say, as a JSON list")
    msgids_parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "msgids":
        wanted = {path.resolve() for path in args.files}
        found = []
        for method, path, keywords in source_files():
            if path.resolve() in wanted:
                for _line, message, _comments, _context in extract_from_file(method, str(path), keywords=keywords):
                    key = message[0] if isinstance(message, tuple) else message
                    if key and key not in found:
                        found.append(key)
        print(json.dumps(found, ensure_ascii=False, indent=1))
    elif args.command == "update":
        update(args.add)
    elif args.command == "compile":
        compile_all()
    else:
        template = extract()
        issues = [issue for language in LANGUAGES for issue in problems(read(language), template)]
        for issue in issues:
            print(issue)
        print(f"{len(issues)} problems")
        return 1 if issues else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
