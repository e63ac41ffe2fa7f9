"""Every rule's own examples (Fixit style): VALID code is not flagged, INVALID code is, and its fix
produces exactly the code the rule documents, which is then stable."""

import pytest

from npu_migrate_nb.analysis import analyze
from npu_migrate_nb.rewrite import fix_notebook
from npu_migrate_nb.rules import ALL_RULES

from .conftest import joined, notebook_from

VALID = [(rule.code, index, code) for rule in ALL_RULES for index, code in enumerate(rule.VALID)]
INVALID = [(rule.code, index, example) for rule in ALL_RULES for index, example in enumerate(rule.INVALID)]
FIXABLE = [(code, index, example) for code, index, example in INVALID if example.after is not None]


def codes_of(text):
    return [finding.code for finding in analyze(notebook_from(text)).findings]


def test_every_rule_has_examples():
    for rule in ALL_RULES:
        assert rule.VALID and rule.INVALID, rule.code


@pytest.mark.parametrize("code,index,source", VALID, ids=[f"{c}-valid-{i}" for c, i, _ in VALID])
def test_valid_example_is_not_flagged(code, index, source):
    assert code not in codes_of(source)


@pytest.mark.parametrize("code,index,example", INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID])
def test_invalid_example_is_flagged(code, index, example):
    analysis = analyze(notebook_from(example.before))
    assert code in [finding.code for finding in analysis.findings]
    if example.adapter is not None:
        assert analysis.adapter == example.adapter
    for finding in analysis.findings:
        assert finding.message and finding.line >= 1 and finding.column >= 1


@pytest.mark.parametrize("code,index,example", FIXABLE, ids=[f"{c}-fix-{i}" for c, i, _ in FIXABLE])
def test_fix_produces_the_documented_code(code, index, example):
    notebook = notebook_from(example.before)
    result = fix_notebook(notebook, analyze(notebook), {code, "missing-setup"})
    assert not result.failed
    assert joined(notebook, result.sources) == example.after


@pytest.mark.parametrize("code,index,example", FIXABLE, ids=[f"{c}-stable-{i}" for c, i, _ in FIXABLE])
def test_fixed_code_is_not_flagged_again(code, index, example):
    fixed = notebook_from(example.after)
    analysis = analyze(fixed)
    assert code not in [finding.code for finding in analysis.findings]
    assert fix_notebook(fixed, analysis, {code, "missing-setup"}).sources == {}


UNFIXABLE = [(code, index, example) for code, index, example in INVALID if example.after is None]


@pytest.mark.parametrize("code,index,example", UNFIXABLE, ids=[f"{c}-by-hand-{i}" for c, i, _ in UNFIXABLE])
def test_an_example_without_a_documented_fix_gets_none(code, index, example):
    """The rule says to change it by hand: ``fix`` writes nothing for that finding."""
    notebook = notebook_from(example.before)
    analysis = analyze(notebook)
    assert all(not finding.edits for finding in analysis.findings if finding.code == code)
