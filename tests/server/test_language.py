"""Each request speaks the language of the JupyterLab that sent it: its ``lang`` query argument, else
the lab's language on the server (jupyterlab_server's translator), else English; an unknown ``lang``
is a 400. The work done in the worker thread and the simulations speak it too."""

import json
import logging
import re
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

from npu_migrate_nb import i18n
from npu_migrate_nb.server import jobs
from npu_migrate_nb.server.handlers import EXECUTOR_SETTING, _Base, lab_language

from .conftest import example, reply

HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def lab_speaks(monkeypatch):
    """Set the language the lab is set to (as its settings set jupyterlab_server's translator)."""
    from jupyterlab_server.translation_utils import translator

    def set_to(locale):
        monkeypatch.setattr(translator, "_LOCALE", locale)

    set_to("en")
    return set_to


async def test_lang_zh_cn_answers_in_chinese(post, lab_speaks):
    response = await post("analyze", [1, 2], params={"lang": "zh-CN"})
    assert response.code == 400
    assert reply(response)["message"] == "请求体必须是 JSON 对象，而不是数组"
    response = await post("analyze", {"notebook": example("keras_single_card.ipynb")}, params={"lang": "zh-CN"})
    assert response.code == 200
    got = reply(response)
    assert got["steps"] == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
    assert got["findings"] and all(HAN.search(finding["message"]) for finding in got["findings"]), got["findings"]


async def test_without_lang_the_answer_is_english(post, lab_speaks):
    response = await post("analyze", [1, 2])
    assert reply(response)["message"] == "the request body must be a JSON object, not an array"
    got = reply(await post("analyze", {"notebook": example("keras_single_card.ipynb")}))
    assert not any(HAN.search(finding["message"]) for finding in got["findings"])
    english = reply(await post("analyze", {"notebook": example("keras_single_card.ipynb")}, params={"lang": "en"}))
    assert english == got


async def test_without_lang_the_labs_own_language_is_spoken(post, lab_speaks):
    lab_speaks("zh_CN")
    assert lab_language() == "zh_CN"
    response = await post("fix", {"notebook": example("keras_single_card.ipynb"), "codes": "missing-shard"})
    assert response.code == 400 and reply(response)["message"].startswith("'codes' 必须是问题代码的列表")
    english = await post("fix", {"notebook": example("keras_single_card.ipynb"), "codes": "missing-shard"},
                         params={"lang": "en"})
    assert reply(english)["message"].startswith("'codes' must be a list of finding codes")
    lab_speaks("fr_FR")  # a language we have no catalog for: English
    assert lab_language() is None
    response = await post("analyze", [1, 2])
    assert reply(response)["message"] == "the request body must be a JSON object, not an array"


@pytest.mark.parametrize("endpoint", ("analyze", "fix", "simulate"))
async def test_an_unknown_lang_gets_400_with_a_message(post, lab_speaks, jp_serverapp, endpoint):
    response = await post(endpoint, {"notebook": example("keras_single_card.ipynb")}, params={"lang": "xx"})
    assert response.code == 400
    message = reply(response)["message"]
    assert "'xx'" in message and "en, zh_CN" in message and "lang" in message and "\n" not in message, message
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs


async def test_job_errors_speak_the_request_language(jp_fetch, lab_speaks):
    response = await jp_fetch("npu-migrate", "simulate", "0123456789abcdef", method="GET", raise_error=False,
                              params={"lang": "zh_CN"})
    assert response.code == 404
    assert json.loads(response.body)["message"] == "没有模拟 '0123456789abcdef'（未知，或结束后已被清除）"


async def test_the_worker_thread_speaks_the_language_of_the_request():
    with ThreadPoolExecutor(max_workers=1) as executor:
        handler = types.SimpleNamespace(settings={EXECUTOR_SETTING: executor})
        for language in ("zh_CN", "en"):
            with i18n.language(language):
                assert await _Base.in_worker(handler, i18n.current) == language


def test_a_job_process_speaks_the_language_it_was_started_in(monkeypatch):
    seen = {}

    def popen(command, **kwargs):
        seen.update(kwargs)
        raise OSError("not started in this test")

    monkeypatch.setattr(jobs.subprocess, "Popen", popen)
    job = jobs.Job("0" * 32, None, 2, 10.0, logging.getLogger("test"), language="zh-CN")
    with pytest.raises(OSError):
        job.start("{}", None)
    assert seen["env"]["LANGUAGE"] == "zh_CN"
    job.on_event({"event": "stopped"})  # a message of its own, said in its language wherever it is read
    assert job.messages == ["已停止"]


def test_job_conflicts_speak_the_language_of_the_request():
    manager = jobs.JobManager()
    manager.closed = True
    with pytest.raises(jobs.JobConflict) as conflict:
        manager.start("{}", 2, 10.0, language="zh_CN")
    assert conflict.value.status == 503 and conflict.value.message == "服务器正在停止"
    with i18n.language("en"), pytest.raises(jobs.JobConflict) as conflict:
        manager.start("{}", 2, 10.0)
    assert conflict.value.message == "the server is stopping"
