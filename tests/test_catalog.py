"""The message catalog (gettext, Babel): zh_CN complete with its placeholders kept, the compiled
catalogs the same as the source, the language chosen as gettext chooses it, and every finding of
every rule's own examples said in Chinese when Chinese is chosen."""

import gettext
import json
import re
import runpy
import threading

import pytest

from npu_migrate_nb import i18n
from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rules import ALL_RULES

from .conftest import ROOT, notebook_from

CATALOG = runpy.run_path(str(ROOT / "tools" / "catalog.py"))
CJK = re.compile(r"[\u4e00-\u9fff]")
INVALID = [(rule.code, index, example) for rule in ALL_RULES for index, example in enumerate(rule.INVALID)]


@pytest.fixture(scope="module")
def source_messages():
    return CATALOG["extract"]()


def test_zh_cn_translates_every_message_of_the_source_with_its_placeholders(source_messages):
    problems = CATALOG["problems"](CATALOG["read"]("zh_CN"), source_messages)
    assert problems == [], "\n".join(problems[:40]) + f"\n... {len(problems)} in all (python tools/catalog.py check)"


def test_the_source_says_something_through_the_catalog(source_messages):
    # Both sides extract: the package's Python and the lab extension's TypeScript.
    places = {path for message in source_messages for path, _line in message.locations}
    assert any(path.startswith("npu_migrate_nb/rules/") for path in places)
    assert any(path.startswith("labextension/src/") for path in places)
    assert len(source_messages) > 300


def test_the_compiled_catalogs_say_what_the_po_says():
    catalog = CATALOG["read"]("zh_CN")
    folder = CATALOG["po_path"]("zh_CN").parent
    with (folder / "npu_migrate_nb.mo").open("rb") as stream:
        compiled = gettext.GNUTranslations(stream)
    lab = json.loads((folder / "npu_migrate_nb.json").read_text(encoding="utf-8"))
    assert lab[""]["domain"] == "npu_migrate_nb" and lab[""]["language"] == "zh-CN"  # as JupyterLab names it
    for message in catalog:
        if not message.id:
            continue
        if isinstance(message.id, tuple):
            assert compiled.ngettext(message.id[0], message.id[1], 1) == message.string[0]
            assert lab[message.id[0]][: len(message.string)] == list(message.string) and len(lab[message.id[0]]) > 1
        else:
            assert compiled.gettext(message.id) == message.string, "rebuild: python tools/catalog.py compile"
            assert lab[message.id] == [message.string]


@pytest.mark.parametrize("code,index,example", INVALID, ids=[f"{c}-{i}" for c, i, _ in INVALID])
def test_every_finding_of_a_rule_example_is_said_in_chinese(code, index, example):
    notebook = notebook_from(example.before)
    english = analyze(notebook)
    with i18n.language("zh_CN"):
        chinese = analyze(notebook)
    assert [f.code for f in chinese.findings] == [f.code for f in english.findings]  # codes stay English
    for said, source in zip(chinese.findings, english.findings):
        assert CJK.search(said.message) and said.message != source.message, said.message
    for step, reason in chinese.reasons.items():
        assert CJK.search(reason), (step, reason)


@pytest.mark.parametrize(
    "environment,expected",
    [
        ({"LANG": "zh_CN.UTF-8"}, "zh_CN"),
        ({"LANG": "en_US.UTF-8"}, "en"),
        ({"LANG": "C.UTF-8"}, "en"),
        ({"LANG": "fr_FR.UTF-8"}, "en"),  # a language without a catalog reads English
        ({}, "en"),
        ({"LANGUAGE": "zh_CN:en", "LANG": "C.UTF-8"}, "zh_CN"),
        ({"LANGUAGE": "fr:zh_TW:zh_CN", "LANG": "C.UTF-8"}, "zh_CN"),
        ({"LC_ALL": "C.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),  # LC_ALL before LANG, as gettext reads them
        ({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh_CN"),
        ({"LANG": "zh_SG.UTF-8"}, "zh_CN"),
    ],
)
def test_the_language_comes_from_the_environment_as_gettext_reads_it(environment, expected):
    assert i18n.from_environment(environment) == expected


@pytest.mark.parametrize("name,expected", [("zh_CN", "zh_CN"), ("zh-CN", "zh_CN"), ("zh", "zh_CN"), ("en", "en"),
                                           ("en-US", "en")])
def test_a_language_is_chosen_by_any_of_its_usual_names(name, expected):
    assert i18n.choose(name) == expected


def test_an_unknown_language_is_refused_naming_the_ones_there_are():
    with pytest.raises(ValueError, match="en, zh_CN"):
        i18n.choose("fr")


def test_a_call_s_language_holds_in_its_own_thread_only():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait(10)
        seen["other"] = i18n.current()
        release.set()

    thread = threading.Thread(target=other)
    thread.start()
    with i18n.language("zh_CN"):
        inside.set()
        release.wait(10)
        seen["mine"] = i18n.current()
    thread.join(10)
    assert seen == {"mine": "zh_CN", "other": "en"}
    assert i18n.current() == "en"


def test_the_process_language_is_set_and_given_back():
    try:
        assert i18n.set_language("zh-CN") == "zh_CN"
        assert i18n._("not applicable") == "不适用"
        assert i18n.current() == "zh_CN"
        with i18n.language("en"):
            assert i18n.current() == "en"
    finally:
        i18n.set_language(None)
    assert i18n.current() == "en"


def _modules_that_translate():
    import ast

    for path in sorted((ROOT / "npu_migrate_nb").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports_it = any(
            isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("i18n")
            and any(alias.name == "_" and alias.asname is None for alias in node.names)
            for node in ast.walk(tree)
        )
        if imports_it:
            yield path, tree


def test_no_module_that_translates_uses_the_underscore_as_a_throwaway_name():
    # ``for _, x in ...`` anywhere in a function makes ``_`` local there: its ``_("...")`` would call a tuple.
    import ast

    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _modules_that_translate()
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "_" and isinstance(node.ctx, (ast.Store, ast.Del)))
        or (isinstance(node, ast.arg) and node.arg == "_")
        or (isinstance(node, ast.ExceptHandler) and node.name == "_")
    ]
    assert found == []


def test_columns_line_up_in_a_terminal_with_chinese_words():
    # A Chinese character takes two columns: the checks table pads by what a terminal shows.
    assert i18n.width("变量广播") == 8 and i18n.width("broadcast") == 9
    assert i18n.ljust("通过", 13) == "通过" + " " * 9 and i18n.ljust("pass", 13) == "pass".ljust(13)
    assert i18n.rjust("缺失", 7) == "   缺失" and i18n.rjust("MISSING", 7) == "MISSING"


def test_every_call_that_translates_is_where_the_extraction_sees_it():
    # Babel reads neither inside a Python f-string nor inside a TypeScript template literal: a message
    # asked for there would never reach the catalog (and never be translated).
    import ast

    hidden = []
    for path in sorted((ROOT / "npu_migrate_nb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                hidden += [f"{path.relative_to(ROOT)}:{call.lineno}" for call in ast.walk(node)
                           if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                           and call.func.id in ("_", "ngettext") and call.args
                           and isinstance(call.args[0], ast.Constant)]  # _(CONSTANT): its N_ is seen
    for path in sorted((ROOT / "labextension" / "src").glob("*.ts")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\$\{[^}]*trans\.(__|_n)\(\s*'", line):
                hidden.append(f"{path.relative_to(ROOT)}:{number}")
    assert hidden == []
