"""The generated pages of the documentation site (run by mkdocs-gen-files at every ``mkdocs build``).

* ``codes/<code>.md`` and ``codes/index.md``: one page per finding code, from the rules themselves
  (their docstrings, their VALID/INVALID examples, and the message the analyzer really produces on
  the first INVALID one), so a page cannot say what the rule does not do;
* ``reference/cli.md``: the help of ``npu-migrate-nb`` and of each subcommand, from its argparse parser;
* ``reference/magics.md``: the help of each magic, from its ``magic_arguments`` parser;
* ``reference/check.schema.json``: the JSON Schema of ``check --format json`` (the package's own file);
* ``tutorials/`` and ``tutorials/zh/``: the tutorial notebooks, executed copies (with their outputs)
  from the folder named by ``NPU_EXECUTED_NOTEBOOKS`` when it exists (CI writes them there while the
  tutorial tests run them), else the committed ones (no outputs).

Everything is generated in English (``i18n.set_language("en")``), whatever the machine's locale; the
code pages show each message in Chinese too.

Runnable on its own for a look at the output: ``python docs/gen_pages.py --print codes/missing-shard.md``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the checkout's package, also when an older one is installed
    sys.path.insert(0, str(ROOT))

from npu_migrate_nb import i18n  # noqa: E402

i18n.set_language("en")
# The documented default address in the help texts, not this machine's (docs_url.py reads it).
os.environ.pop("NPU_MIGRATE_NB_DOCS_URL", None)

STEP_NAMES = {
    "broadcast": "variable broadcast (变量广播)",
    "allreduce": "gradient aggregation (梯度聚合)",
    "shard": "dataset sharding (数据集分片)",
    None: "none (a pitfall of no single step)",
}
SEVERITY_NOTES = {
    "error": "error (`check` exits 1)",
    "warning": "warning (`check` exits 1)",
    "info": "info (informs only: `check` does not fail on it)",
}
# Codes said by the analyzer that are no rule (report.finding_lines names unreadable cells so).
UNREADABLE_CELL = "unreadable-cell"
SCHEMA = ROOT / "npu_migrate_nb" / "schemas" / "check.schema.json"
EXECUTED_ENV = "NPU_EXECUTED_NOTEBOOKS"


# ------------------------------------------------------------------------------------ helpers


def markdown_text(docstring: Optional[str]) -> str:
    """A docstring as Markdown: reStructuredText's ``code`` becomes `code`."""
    if not docstring:
        return ""
    text = inspect.cleandoc(docstring)
    return re.sub(r"``(.+?)``", r"`\1`", text, flags=re.S)


def first_sentence(text: str) -> str:
    paragraph = " ".join(text.split("\n\n")[0].split())
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def fenced(code: str, language: str = "python") -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code.rstrip(chr(10))}\n{fence}\n"


def table_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------------- the codes


def notebook_from(text: str):
    """Cells separated by ``# %%`` lines, as in the rules' examples (tests/conftest.py does the same)."""
    from npu_migrate_nb.notebook import Cell, Notebook
    from npu_migrate_nb.rules.base import CELL_SEPARATOR

    return Notebook("<example>", [Cell(i, "code", part) for i, part in enumerate(text.split(CELL_SEPARATOR))])


def message_of(rule, example) -> Tuple[str, str]:
    """What the analyzer says of ``example`` for ``rule``'s code: (English, Chinese)."""
    from npu_migrate_nb.analysis import analyze

    said = []
    for language in ("en", "zh_CN"):
        with i18n.language(language):
            findings = [f for f in analyze(notebook_from(example.before)).findings if f.code == rule.code]
        if not findings:
            raise SystemExit(f"gen_pages: {rule.code}'s first INVALID example is not flagged")
        said.append(findings[0].message)
    return said[0], said[1]


def fixed_how(rule) -> str:
    fixable = [example.after is not None for example in rule.INVALID]
    if all(fixable):
        return "yes"
    if any(fixable):
        return "partly"
    return "no, by hand"


def code_page(rule) -> str:
    module = sys.modules[type(rule).__module__]
    english, chinese = message_of(rule, rule.INVALID[0])
    why = [part for part in (markdown_text(module.__doc__), markdown_text(type(rule).__doc__)) if part]
    lines = [
        f"# {rule.code}",
        "",
        f"- **Step:** {STEP_NAMES[rule.step]}",
        f"- **Severity:** {SEVERITY_NOTES[rule.severity]}",
        f"- **Fixed automatically:** {fixed_how(rule)}",
        f"- **Rule:** `{type(rule).__name__}` in `{module.__name__}`",
        "",
        "## What it says",
        "",
        "On the first example below, the analyzer says:",
        "",
        fenced(english, "text"),
        "中文 (`--lang zh_CN`):",
        "",
        fenced(chinese, "text"),
        "## Why it matters on N cards",
        "",
        "\n\n".join(why),
        "",
        "## The fix",
        "",
    ]
    if fixed_how(rule) == "yes":
        lines += ["`npu-migrate-nb fix`, `%%npu_distribute --apply` and the panel's Apply make the change shown "
                  "after each example.", ""]
    elif fixed_how(rule) == "no, by hand":
        lines += ["Nothing is changed automatically: the message says what to change, by hand.", ""]
    else:
        lines += ["Where an example shows an *after*, `npu-migrate-nb fix`, `%%npu_distribute --apply` and the "
                  "panel's Apply make that change; the others are changed by hand, as the message says.", ""]
    lines += ["In the examples a `# %%` line separates two cells.", ""]
    for number, example in enumerate(rule.INVALID, 1):
        lines += [f"### Example {number}", "", "Flagged:", "", fenced(example.before)]
        if example.after is not None:
            lines += ["After the fix:", "", fenced(example.after)]
        else:
            lines += ["Not fixed automatically: change it by hand.", ""]
    lines += ["## Not flagged", ""]
    for valid in rule.VALID:
        lines += [fenced(valid)]
    lines += ["[All codes](index.md)", ""]
    return "\n".join(lines)


def unreadable_cell_page() -> str:
    from npu_migrate_nb.analysis import analyze

    example = "import tensorflow as tf\nmodel = tf.keras.Sequential([\n"
    with i18n.language("en"):
        english = analyze(notebook_from(example)).errors[0].message
    with i18n.language("zh_CN"):
        chinese = analyze(notebook_from(example)).errors[0].message
    return "\n".join([
        f"# {UNREADABLE_CELL}",
        "",
        "- **Step:** none",
        "- **Severity:** error (`check` exits 1)",
        "- **Fixed automatically:** no, by hand",
        "- **Not a rule:** the analyzer reports a cell it could not read; the text report names it "
        f"`[{UNREADABLE_CELL}]`, `check --format json` lists it under `errors` (not `findings`), the magic "
        "says *the cell was not analyzed*.",
        "",
        "## What it says",
        "",
        "On the cell below, the analyzer says:",
        "",
        fenced(english, "text"),
        "中文 (`--lang zh_CN`):",
        "",
        fenced(chinese, "text"),
        "A cell over 1,000,000 characters is reported the same way (*cell too large to analyze*).",
        "",
        "## Why it matters on N cards",
        "",
        "A cell that does not parse as Python (IPython's `%magics` and `!commands` are understood) is left "
        "out of the analysis: what it would do for the three steps is not seen, so a step it does may be "
        "reported missing, and a pitfall in it is not found. The rest of the notebook is still analyzed, and "
        "`fix` changes nothing in that cell.",
        "",
        "## The fix",
        "",
        "By hand: correct the syntax error (the line and column point at it), then check again.",
        "",
        fenced(example),
        "[All codes](index.md)",
        "",
    ])


def codes_index(rules) -> str:
    lines = [
        "# Finding codes",
        "",
        "Every finding of `npu-migrate-nb check`, of the panel and of `%%npu_distribute` has a code; each "
        "has a page here, generated from the rule itself (its examples, the message it really produces).",
        "Severity *error* and *warning* make `check` exit 1; *info* only informs.",
        "",
        "| Code | Step | Severity | Fixed | What it means |",
        "| --- | --- | --- | --- | --- |",
    ]
    order = {"broadcast": 0, "allreduce": 1, "shard": 2, None: 3}
    for rule in sorted(rules, key=lambda rule: (order[rule.step], rule.code)):
        module = sys.modules[type(rule).__module__]
        summary = first_sentence(markdown_text(module.__doc__) or markdown_text(type(rule).__doc__))
        step = rule.step or "—"
        lines.append(f"| [`{rule.code}`]({rule.code}.md) | {step} | {rule.severity} | {fixed_how(rule)} "
                     f"| {table_cell(summary)} |")
    lines.append(f"| [`{UNREADABLE_CELL}`]({UNREADABLE_CELL}.md) | — | error | no, by hand "
                 "| A cell that could not be analyzed (a syntax error, a cell too large). |")
    lines += ["", "Steps: broadcast = variable broadcast (变量广播), allreduce = gradient aggregation (梯度聚合), "
              "shard = dataset sharding (数据集分片); — = a pitfall of no single step.", ""]
    return "\n".join(lines)


def code_pages() -> Dict[str, str]:
    from npu_migrate_nb.rules import ALL_RULES

    pages = {f"codes/{rule.code}.md": code_page(rule) for rule in ALL_RULES}
    pages[f"codes/{UNREADABLE_CELL}.md"] = unreadable_cell_page()
    pages["codes/index.md"] = codes_index(ALL_RULES)
    return pages


def all_codes() -> List[str]:
    """Every code the analyzer can report, each with its page (tests/test_docs.py checks the site)."""
    from npu_migrate_nb.rules import ALL_RULES

    return [rule.code for rule in ALL_RULES] + [UNREADABLE_CELL]


# ------------------------------------------------------------------------------- the CLI


def cli_page() -> str:
    from npu_migrate_nb import cli

    os.environ["COLUMNS"] = "100"  # argparse wraps the help to the terminal: the same on every machine
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # argparse keeps them there
    lines = [
        "# Command line: `npu-migrate-nb`",
        "",
        "Generated from the command's argparse parser (`npu_migrate_nb.cli.build_parser`); "
        "`npu-migrate-nb --lang zh_CN COMMAND -h` shows the same in Chinese.",
        "",
        markdown_text(cli.__doc__).split("\n", 1)[1].strip(),
        "",
        "## Exit codes",
        "",
        f"| Code | Meaning |",
        "| --- | --- |",
        f"| {cli.EXIT_OK} | nothing to report (also: a non-Python notebook, skipped with one line on stderr) |",
        f"| {cli.EXIT_FINDINGS} | findings (errors or warnings), a missing step, an unreadable cell, or a failed run |",
        f"| {cli.EXIT_INPUT} | unusable input: a file that cannot be read, a wrong option |",
        "",
        "## npu-migrate-nb",
        "",
        fenced(parser.format_help(), "text"),
    ]
    for name, subparser in subcommands.items():
        lines += [f"## npu-migrate-nb {name}", "", fenced(subparser.format_help(), "text")]
    lines += ["The JSON that `check --format json` prints is described in [JSON output](json.md); "
              "every finding code has its page under [Finding codes](../codes/index.md).", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the magics


def magics_page() -> str:
    from npu_migrate_nb import magics

    os.environ["COLUMNS"] = "100"
    lines = [
        "# Magics",
        "",
        "Load them with `%load_ext npu_migrate_nb`. Generated from each magic's argument parser "
        "(`%%npu_distribute --help` in a notebook shows the same, in the kernel's language; "
        "`%npu_lang zh_CN` switches it to Chinese).",
        "",
    ]
    for name in ("npu_distribute", "npu_cluster", "npu_sim", "npu_panel", "npu_lang"):
        method = getattr(magics.NpuMagics, name)
        kind = "%%" if name == "npu_distribute" else "%"
        lines += [f"## `{kind}{name}`", ""]
        if hasattr(method, "parser"):
            lines += [fenced(magic_help(magics._help(method), kind, name), "text")]
        else:
            lines += [f"`{kind}{name}` takes no arguments. " + markdown_text(method.__doc__), ""]
    return "\n".join(lines)


def magic_help(text: str, kind: str, name: str) -> str:
    """IPython's help of a magic without its reStructuredText ``::`` and indent, named as it is typed."""
    usage, _blank, rest = text.partition("\n\n")
    if usage.strip() == "::":  # "::\n\n  %name [options]\n      continued\n\ndescription..."
        usage, _blank, rest = rest.partition("\n\n")
        first, *more = usage.strip().split("\n")
        shift = " " * len(f"usage: {kind}{name} ")  # continuation lines under the first option
        usage = "\n".join([first] + [shift + line.strip() for line in more])
    usage = usage.replace(f"%{name}", f"{kind}{name}", 1)
    return f"usage: {usage}\n\n{rest}"


# ------------------------------------------------------------------------------ the JSON


def json_page_tail() -> str:
    """Appended to the hand-written reference/json.md: a real output and the schema, as they are."""
    from npu_migrate_nb.analysis import analyze
    from npu_migrate_nb.notebook import load
    from npu_migrate_nb.report import json_report

    example = "examples/keras_single_card.ipynb"
    cwd = os.getcwd()
    os.chdir(ROOT)  # the path as a user in the checkout types it
    try:
        output = json_report([analyze(load(example))])
    finally:
        os.chdir(cwd)
    return "\n".join([
        "",
        "## Example",
        "",
        f"`npu-migrate-nb check --format json {example}` (the three steps missing):",
        "",
        fenced(output, "json"),
        "## The schema",
        "",
        "[Download check.schema.json](check.schema.json)",
        "",
        fenced(SCHEMA.read_text(encoding="utf-8"), "json"),
    ])


# ---------------------------------------------------------------------------- the tutorials


def tutorials() -> Iterator[Tuple[str, bytes, str]]:
    """(path in the site, the notebook's bytes, where it came from)."""
    notebooks = ROOT / "notebooks"
    executed = os.environ.get(EXECUTED_ENV)
    executed_dir = Path(executed) if executed and Path(executed).is_dir() else None
    for source in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")) + sorted((notebooks / "zh").glob("[0-9][0-9]_*.ipynb")):
        relative = source.relative_to(notebooks)
        chosen = source
        if executed_dir is not None and (executed_dir / relative).is_file():
            chosen = executed_dir / relative
        yield f"tutorials/{relative.as_posix()}", chosen.read_bytes(), str(chosen)


# ---------------------------------------------------------------------------------- all


def text_pages() -> Dict[str, str]:
    pages = code_pages()
    pages["reference/cli.md"] = cli_page()
    pages["reference/magics.md"] = magics_page()
    pages["reference/check.schema.json"] = SCHEMA.read_text(encoding="utf-8")
    return pages


def generate() -> None:
    import mkdocs_gen_files

    for path, text in text_pages().items():
        with mkdocs_gen_files.open(path, "w", encoding="utf-8") as out:
            out.write(text)
    with mkdocs_gen_files.open("reference/json.md", "a", encoding="utf-8") as out:  # the written page, extended
        out.write(json_page_tail())
    for path, data, _source in tutorials():
        with mkdocs_gen_files.open(path, "wb") as out:
            out.write(data)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Print the generated pages (without mkdocs).")
    parser.add_argument("--print", metavar="PAGE", help="print this page (e.g. codes/missing-shard.md)")
    args = parser.parse_args(argv)
    pages = text_pages()
    pages["reference/json.md"] = json_page_tail()  # what is appended to the written page
    if args.print:
        print(pages[args.print])
    else:
        print("\n".join(sorted(pages)))
        print("\n".join(f"{path} <- {source}" for path, _data, source in tutorials()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
else:  # run by mkdocs-gen-files (runpy: __name__ is "<run_path>")
    generate()
