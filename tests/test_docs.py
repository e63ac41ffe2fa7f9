"""The documentation site and the JSON Schema of ``check --format json``.

The schema (npu_migrate_nb/schemas/check.schema.json, shown in docs/reference/json.md) is checked
against what ``check --format json`` really prints, so the two cannot drift apart; the site is built
with ``mkdocs build --strict`` (a broken link, anchor or nav entry fails), and every finding code has
its page in it."""

import json
import os
import subprocess
import sys

import pytest

from npu_migrate_nb.rules import ALL_RULES

from .conftest import EXAMPLES, ROOT

SCHEMA_PATH = ROOT / "npu_migrate_nb" / "schemas" / "check.schema.json"
EXAMPLE_NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
# A code the analyzer reports that is no rule: report.finding_lines names unreadable cells so.
OTHER_CODES = ["unreadable-cell"]


def checkout_env(**more):
    """The environment of a child that runs this checkout's package (not another installed one)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.update(more)
    return env


def check_json(*paths, cwd=ROOT):
    completed = subprocess.run(
        [sys.executable, "-m", "npu_migrate_nb", "check", "--format", "json", *map(str, paths)],
        capture_output=True, text=True, cwd=cwd, env=checkout_env(), timeout=120,
    )
    assert completed.returncode in (0, 1), completed.stderr
    return json.loads(completed.stdout)


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def assert_valid(validator, document):
    errors = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def test_the_schema_ships_in_the_package():
    assert SCHEMA_PATH.is_file()
    assert SCHEMA_PATH.parent.parent.name == "npu_migrate_nb"  # under the wheel's package: shipped with it


def test_the_schema_names_every_code_and_only_those():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$defs"]["finding"]["properties"]["code"]["enum"] == [rule.code for rule in ALL_RULES]


@pytest.mark.parametrize("path", EXAMPLE_NOTEBOOKS, ids=[path.stem for path in EXAMPLE_NOTEBOOKS])
def test_check_json_of_an_example_fits_the_schema(validator, path):
    document = check_json(path.relative_to(ROOT))
    assert isinstance(document, dict) and document["findings"]
    assert_valid(validator, document)


def test_check_json_of_several_paths_is_an_array_that_fits_the_schema(validator):
    document = check_json(*(path.relative_to(ROOT) for path in EXAMPLE_NOTEBOOKS))
    assert isinstance(document, list) and len(document) == len(EXAMPLE_NOTEBOOKS)
    assert_valid(validator, document)


def test_check_json_of_a_non_python_notebook_fits_the_schema(validator, write_notebook):
    path = write_notebook([("code", "x <- c(1, 2)\nprint(x)\n")], name="r.ipynb", language="R")
    document = check_json(path)
    assert document["language"] == "R" and not document["findings"]
    assert_valid(validator, document)


def test_check_json_with_an_unreadable_cell_and_no_training_fits_the_schema(validator, write_notebook):
    path = write_notebook([("markdown", "# notes"), ("code", "import tensorflow as tf\nx = (\n")])
    document = check_json(path)
    assert document["errors"] and document["framework"] == "none"
    assert_valid(validator, document)


def test_the_schema_rejects_what_check_never_prints(validator):
    document = check_json(EXAMPLE_NOTEBOOKS[0].relative_to(ROOT))
    document["findings"][0]["severity"] = "fatal"
    assert list(validator.iter_errors(document))


# ------------------------------------------------------------------------------------ the site


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    for module in ("mkdocs", "material", "mkdocs_gen_files", "mkdocs_jupyter"):
        pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")
    site_dir = tmp_path_factory.mktemp("site")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env=checkout_env(NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true"),
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    return site_dir


def test_the_site_builds_strict_and_every_code_has_its_page(site):
    codes = [rule.code for rule in ALL_RULES] + OTHER_CODES
    missing = [code for code in codes if not (site / "codes" / code / "index.html").is_file()]
    assert not missing, missing
    index = (site / "codes" / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{code}/"' in index for code in codes)


def test_a_code_page_says_what_the_analyzer_says(site):
    rule = next(rule for rule in ALL_RULES if rule.code == "missing-shard")
    from npu_migrate_nb.analysis import analyze
    from npu_migrate_nb.i18n import language

    from .conftest import notebook_from

    with language("en"):
        message = next(f.message for f in analyze(notebook_from(rule.INVALID[0].before)).findings
                       if f.code == rule.code)
    page = (site / "codes" / "missing-shard" / "index.html").read_text(encoding="utf-8")
    import html

    assert html.escape(message, quote=False) in page


def test_the_site_has_the_references_and_the_tutorials(site):
    for page in ("reference/cli", "reference/magics", "reference/rest", "reference/json"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "reference" / "check.schema.json").read_bytes() == SCHEMA_PATH.read_bytes()
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "npu-migrate-nb check" in cli and "--format" in cli
    tutorials = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert tutorials
    for notebook in tutorials:
        for folder in ("tutorials", "tutorials/zh"):
            assert (site / folder / notebook.stem / "index.html").is_file(), f"{folder}/{notebook.stem}"
