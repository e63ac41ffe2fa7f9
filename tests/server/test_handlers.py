"""The REST handlers of the server extension, on an in-process Jupyter server: analyze and fix give
what the CLI gives, bad input gets a one-line JSON error, and nothing answers without a token."""

import dataclasses
import json
import subprocess
import sys

import pytest
from tornado.httpclient import AsyncHTTPClient

from npu_migrate_nb.analysis import Options, analyze
from npu_migrate_nb.docs_url import code_url, docs_url
from npu_migrate_nb.notebook import load, loads_notebook
from npu_migrate_nb.server.handlers import MAX_BODY_BYTES

from .conftest import EXAMPLE_NAMES, EXAMPLES, ROOT, example, reply

STEPS_MISSING = {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
STEPS_PRESENT = {"broadcast": "present", "allreduce": "present", "shard": "present"}
ENDPOINTS = ("analyze", "fix", "simulate")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npu_migrate_nb", *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)


def r_notebook() -> dict:
    return {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                       "source": ["library(ggplot2)\n", "x <- 1"]}],
            "metadata": {"kernelspec": {"name": "ir", "language": "R", "display_name": "R"},
                         "language_info": {"name": "R"}},
            "nbformat": 4, "nbformat_minor": 5}


# ------------------------------------------------------------------------------------------ analyze


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
async def test_analyze_a_single_card_example_finds_the_three_steps_missing(post, name):
    path = f"examples/{name}"
    response = await post("analyze", {"notebook": example(name), "path": path})
    assert response.code == 200
    got = reply(response)
    assert got["steps"] == STEPS_MISSING
    assert {"missing-broadcast", "missing-allreduce", "missing-shard"} <= {f["code"] for f in got["findings"]}
    expected = analyze(loads_notebook((ROOT / path).read_text(encoding="utf-8"), path)).to_json()
    assert got == json.loads(json.dumps(expected))
    assert float(response.headers["X-NPU-Analysis-Ms"]) >= 0
    assert "analyze;dur=" in response.headers["Server-Timing"]


async def test_analyze_answers_exactly_what_check_prints(post):
    path = "examples/custom_loop_single_card.ipynb"
    printed = cli("check", path, "--format", "json", "--ranks", "4", "--reduction", "mean")
    assert printed.returncode == 1, printed.stderr
    response = await post("analyze", {"notebook": example("custom_loop_single_card.ipynb"), "path": path,
                                      "options": {"ranks": 4, "reduction": "mean"}})
    assert reply(response) == json.loads(printed.stdout)


async def test_analyze_options_reach_the_analyzer(post):
    document = example("custom_loop_single_card.ipynb")
    answers = {}
    for reduction in ("sum", "mean"):
        response = await post("analyze", {"notebook": document, "options": {"reduction": reduction}})
        answers[reduction] = reply(response)
        expected = analyze(loads_notebook(json.dumps(document)), Options(reduction=reduction)).to_json()
        assert answers[reduction] == json.loads(json.dumps(expected))
    assert answers["sum"]["findings"] != answers["mean"]["findings"]


async def test_analyze_a_non_python_notebook_answers_like_check_without_findings(post):
    response = await post("analyze", {"notebook": r_notebook(), "path": "plot.ipynb"})
    assert response.code == 200
    got = reply(response)
    assert got["language"] == "R" and got["framework"] == "none" and got["findings"] == []
    assert set(got["steps"].values()) == {"not-applicable"}


def test_a_finding_in_json_is_every_field_but_its_edits_and_the_page_of_its_code():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_analysis import make_notebook
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    notebooks = [load(str(EXAMPLES / name)) for name in EXAMPLE_NAMES]
    notebooks.append(loads_notebook(json.dumps(make_notebook(120)), "large.ipynb"))
    for notebook in notebooks:
        analysis = analyze(notebook)
        assert analysis.findings
        for finding in analysis.findings:
            expected = dataclasses.asdict(finding)
            expected.pop("edits")
            assert expected.pop("path") is None  # said only for a finding in one of the notebook's modules
            expected["url"] = code_url(finding.code)
            assert finding.to_json() == expected


async def test_analyze_and_fix_give_each_finding_the_page_of_its_code(post, monkeypatch):
    monkeypatch.setenv("NPU_MIGRATE_NB_DOCS_URL", "https://docs.example.org/npu/")  # read per finding, here too
    analyzed = reply(await post("analyze", {"notebook": example("keras_single_card.ipynb")}))
    fixed = reply(await post("fix", {"notebook": example("keras_single_card.ipynb"), "codes": ["missing-shard"]}))
    for got in (analyzed, fixed):
        assert got["findings"]
        for finding in got["findings"]:
            assert finding["url"] == f"https://docs.example.org/npu/codes/{finding['code']}/"
    monkeypatch.delenv("NPU_MIGRATE_NB_DOCS_URL")
    again = reply(await post("analyze", {"notebook": example("keras_single_card.ipynb")}))
    assert {f["url"] for f in again["findings"]} == {f"{docs_url()}codes/{f['code']}/" for f in again["findings"]}


# ---------------------------------------------------------------------------------------------- fix


def without(mapping: dict, key: str) -> dict:
    return {k: v for k, v in mapping.items() if k != key}


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
async def test_fix_changes_cells_and_the_fixed_notebook_reanalyzes_clean(post, name):
    original = example(name)
    response = await post("fix", {"notebook": original, "path": f"examples/{name}"})
    assert response.code == 200
    got = reply(response)
    assert got["changed_cells"] and got["failed"] == []
    assert {"missing-broadcast", "missing-allreduce", "missing-shard"} <= set(got["applied"])
    assert got["steps"] == STEPS_PRESENT
    assert not [f for f in got["findings"] if f["code"].startswith("missing-")]
    fixed = got["notebook"]
    for index, (before, after) in enumerate(zip(original["cells"], fixed["cells"])):
        if index in got["changed_cells"]:
            assert before["source"] != after["source"]
            assert without(before, "source") == without(after, "source")
        else:
            assert before == after
    assert without(original, "cells") == without(fixed, "cells")
    again = reply(await post("analyze", {"notebook": fixed, "path": f"examples/{name}"}))
    assert again["steps"] == STEPS_PRESENT
    assert again["findings"] == got["findings"]


async def test_fix_gives_the_notebook_the_cli_writes(post, tmp_path):
    out = tmp_path / "fixed.ipynb"
    done = cli("fix", "examples/estimator_single_card.ipynb", "-o", str(out))
    assert done.returncode == 0, done.stderr
    got = reply(await post("fix", {"notebook": example("estimator_single_card.ipynb")}))
    assert got["notebook"] == json.loads(out.read_text(encoding="utf-8"))


async def test_fix_applies_only_the_codes_asked_for(post):
    got = reply(await post("fix", {"notebook": example("keras_single_card.ipynb"), "codes": ["missing-shard"]}))
    assert got["applied"] == ["missing-shard"]
    assert got["steps"] == {"broadcast": "missing", "allreduce": "missing", "shard": "present"}
    assert {"missing-broadcast", "missing-allreduce"} <= {f["code"] for f in got["findings"]}


async def test_fixing_a_fixed_notebook_changes_nothing(post):
    fixed = reply(await post("fix", {"notebook": example("keras_single_card.ipynb")}))["notebook"]
    got = reply(await post("fix", {"notebook": fixed}))
    assert got["changed_cells"] == [] and got["applied"] == []
    assert got["notebook"] == fixed


async def test_fix_refuses_a_non_python_notebook(post):
    response = await post("fix", {"notebook": r_notebook()})
    assert response.code == 400
    assert "not a Python notebook" in reply(response)["message"]


# ------------------------------------------------------------------------------------- bad requests


def assert_error(response, code: int, *fragments: str) -> dict:
    assert response.code == code, (response.code, response.body[:500])
    got = reply(response)
    assert got["message"] and "\n" not in got["message"], got
    for fragment in fragments:
        assert fragment in got["message"], got
    return got


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_invalid_json_gets_400(post, endpoint):
    assert_error(await post(endpoint, b'{"notebook": {'), 400, "invalid JSON")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_a_body_that_is_not_an_object_gets_400(post, endpoint):
    assert_error(await post(endpoint, [1, 2]), 400, "must be a JSON object", "array")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("document, fragment", [
    ({"metadata": {}, "nbformat": 4}, "not a Jupyter notebook"),
    ({"cells": "none", "nbformat": 4, "metadata": {}}, "'cells' is not a list"),
    ({"cells": [{"source": "x = 1"}], "nbformat": 4, "metadata": {}}, "malformed cell"),
    ("print(1)", "'notebook' must be a notebook JSON object"),
    (None, "missing 'notebook'"),
])
async def test_a_document_that_is_not_a_notebook_gets_400(post, jp_serverapp, endpoint, document, fragment):
    body = {"path": "x.ipynb"} if document is None else {"notebook": document, "path": "x.ipynb"}
    assert_error(await post(endpoint, body), 400, fragment)
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_a_body_over_10_mb_gets_413_and_the_server_stays_up(post, endpoint):
    padding = "x" * (MAX_BODY_BYTES + 1)
    body = json.dumps({"notebook": example("keras_single_card.ipynb"), "padding": padding})
    assert_error(await post(endpoint, body), 413, "10 MB")
    ok = await post("analyze", {"notebook": example("keras_single_card.ipynb")})
    assert ok.code == 200


@pytest.mark.parametrize("options, fragment", [
    ({"ranks": 0}, "options.ranks"),
    ({"ranks": "8"}, "options.ranks"),
    ({"broadcast_style": "hooks"}, "broadcast_style"),
    ({"reduction": "max"}, "reduction"),
    ({"rank": 8}, "unknown option 'rank'"),
    ([8], "'options' must be a JSON object"),
])
@pytest.mark.parametrize("endpoint", ("analyze", "fix"))
async def test_bad_options_get_400(post, endpoint, options, fragment):
    assert_error(await post(endpoint, {"notebook": example("keras_single_card.ipynb"), "options": options}),
                 400, fragment)


@pytest.mark.parametrize("codes, fragment", [("missing-shard", "list of finding codes"),
                                             (["missing-shards"], "unknown finding code 'missing-shards'")])
async def test_bad_codes_get_400(post, codes, fragment):
    assert_error(await post("fix", {"notebook": example("keras_single_card.ipynb"), "codes": codes}), 400, fragment)


@pytest.mark.parametrize("fields, fragment", [
    ({"ranks": 0}, "ranks must be from 1 to 16"),
    ({"ranks": 17}, "ranks must be from 1 to 16"),
    ({"ranks": 2.5}, "ranks must be an integer"),
    ({"ranks": True}, "ranks must be an integer"),
    ({"timeout": -1}, "timeout must be more than 0"),
    ({"timeout": "300"}, "timeout must be a number"),
    ({"path": ""}, "'path' must be a non-empty string"),
    ({"steps": -1}, "steps must be from 0 to 1000"),
    ({"steps": 1001}, "steps must be from 0 to 1000"),
    ({"steps": "3"}, "steps must be an integer"),
    ({"full": "yes"}, "full must be true or false"),
    ({"full": 1}, "full must be true or false"),
])
async def test_bad_simulation_parameters_get_400_and_start_nothing(post, jp_serverapp, fields, fragment):
    body = {"notebook": example("keras_single_card.ipynb"), **fields}
    assert_error(await post("simulate", body), 400, fragment)
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs


async def test_simulating_a_non_python_notebook_gets_400(post, jp_serverapp):
    assert_error(await post("simulate", {"notebook": r_notebook()}), 400, "not a Python notebook")
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_an_unknown_job_gets_404(job_request, method):
    code, body = await job_request("0123456789abcdef", method)
    assert code == 404
    assert "no simulation '0123456789abcdef'" in body["message"]


# ----------------------------------------------------------------------------------- authentication


@pytest.mark.parametrize("method, endpoint", [("POST", "analyze"), ("POST", "fix"), ("POST", "simulate"),
                                              ("GET", "simulate/0123"), ("DELETE", "simulate/0123")])
async def test_nothing_answers_without_a_token(jp_serverapp, http_server_client, jp_base_url, method, endpoint):
    url = http_server_client.get_url(f"{jp_base_url}npu-migrate/{endpoint}")
    body = json.dumps({"notebook": example("keras_single_card.ipynb")}) if method == "POST" else None
    response = await AsyncHTTPClient().fetch(url, method=method, body=body, raise_error=False,
                                             allow_nonstandard_methods=True)
    assert response.code in (401, 403), response.code
    assert b"missing-shard" not in response.body
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs


async def test_a_wrong_token_is_refused(post):
    response = await post("analyze", {"notebook": example("keras_single_card.ipynb")},
                          headers={"Authorization": "token not-the-token"})
    assert response.code in (401, 403)


async def test_the_token_in_the_header_is_enough_without_xsrf(post):
    response = await post("analyze", {"notebook": example("keras_single_card.ipynb")})
    assert response.code == 200


async def test_a_cors_preflight_is_answered(jp_fetch):
    response = await jp_fetch("npu-migrate", "analyze", method="OPTIONS", raise_error=False)
    assert response.code == 200, response.code  # Jupyter's APIHandler.options, not ours
    assert "POST" in response.headers["Access-Control-Allow-Methods"]



async def test_a_browser_session_needs_the_xsrf_token(jp_serverapp, http_server_client, jp_base_url):
    """Logged in by cookie, as JupyterLab is: a POST without the XSRF header is refused."""
    client = AsyncHTTPClient()

    def url(path):
        return http_server_client.get_url(f"{jp_base_url}{path}")

    def cookies_of(response, jar):
        for header in response.headers.get_list("Set-Cookie"):
            name, _, rest = header.partition("=")
            jar[name] = rest.split(";", 1)[0]
        return jar

    login_page = await client.fetch(url("login"), raise_error=False)
    jar = cookies_of(login_page, {})
    xsrf = jar["_xsrf"]
    token = jp_serverapp.identity_provider.token
    logged_in = await client.fetch(
        url("login"), method="POST", body=f"password={token}&_xsrf={xsrf}", follow_redirects=False, raise_error=False,
        headers={"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())})
    assert logged_in.code == 302, logged_in.code
    cookie = "; ".join(f"{k}={v}" for k, v in cookies_of(logged_in, jar).items())
    body = json.dumps({"notebook": example("keras_single_card.ipynb")})

    without = await client.fetch(url("npu-migrate/analyze"), method="POST", body=body, raise_error=False,
                                 headers={"Cookie": cookie})
    assert without.code == 403, without.code
    with_xsrf = await client.fetch(url("npu-migrate/analyze"), method="POST", body=body, raise_error=False,
                                   headers={"Cookie": cookie, "X-XSRFToken": xsrf})
    assert with_xsrf.code == 200, with_xsrf.body[:300]
    assert reply(with_xsrf)["steps"] == STEPS_MISSING


async def test_analyze_reads_the_notebooks_own_modules_from_its_folder_and_names_them_as_the_contents_api_does(
    post, jp_root_dir
):
    project = jp_root_dir / "project"
    project.mkdir()
    (project / "model.py").write_text(
        "import tensorflow.compat.v1 as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.AdamOptimizer(1e-3)\n"
        "    train_op = optimizer.minimize(tf.reduce_mean(features))\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=tf.reduce_mean(features), train_op=train_op)\n"
    )
    source = "import tensorflow.compat.v1 as tf\nfrom model import model_fn\nest = tf.estimator.Estimator(model_fn=model_fn)\n"
    document = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}],
                "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    got = reply(await post("analyze", {"notebook": document, "path": "project/train.ipynb"}))
    [finding] = [f for f in got["findings"] if f["code"] == "missing-allreduce"]
    assert (finding["path"], finding["cell"], finding["line"]) == ("project/model.py", None, 3)
    elsewhere = reply(await post("analyze", {"notebook": document, "path": "train.ipynb"}))  # no model.py there
    assert elsewhere["steps"]["allreduce"] == "unknown"
    assert "there is no model.py next to the notebook" in elsewhere["reasons"]["allreduce"]


async def test_analyze_follows_a_notebooks_package_imports_from_its_project_root_inside_the_server_root(
    post, jp_root_dir
):
    """``from official.model import model_fn`` in ``official/notebooks/train.ipynb``: the project's root
    (its pyproject.toml) is inside the server's root, so the module is read from there."""
    (jp_root_dir / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    package = jp_root_dir / "official"
    (package / "notebooks").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(
        "import tensorflow.compat.v1 as tf\n"
        "def model_fn(features, labels, mode):\n"
        "    optimizer = tf.train.AdamOptimizer(1e-3)\n"
        "    train_op = optimizer.minimize(tf.reduce_mean(features))\n"
        "    return tf.estimator.EstimatorSpec(mode=mode, loss=tf.reduce_mean(features), train_op=train_op)\n"
    )
    source = ("import tensorflow.compat.v1 as tf\nfrom official.model import model_fn\n"
              "est = tf.estimator.Estimator(model_fn=model_fn)\n")
    document = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}],
                "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    got = reply(await post("analyze", {"notebook": document, "path": "official/notebooks/train.ipynb"}))
    [finding] = [f for f in got["findings"] if f["code"] == "missing-allreduce"]
    assert (finding["path"], finding["line"]) == ("official/model.py", 3)
    (jp_root_dir / "pyproject.toml").unlink()  # no marker: the root is above the top package, still inside
    got = reply(await post("analyze", {"notebook": document, "path": "official/notebooks/train.ipynb"}))
    assert got["steps"]["allreduce"] == "unknown"  # official/notebooks has no __init__.py: no package above it
