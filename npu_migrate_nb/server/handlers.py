"""The REST handlers under ``<base_url>npu-migrate/``: thin layers over the analyzer, the rewriter and
the simulation jobs. ``analyze`` and ``fix`` never execute code and never take a file path.

Errors are JSON ``{"message": ..., "reason": ...}`` (Jupyter's API error format): 400 unusable input
(one line), 413 a body over 10 MB, 404 an unknown job, 409 a simulation of the same notebook already
running (the body also has its ``id``), 429 too many simulations at once, 503 no simulator installed.

Each request speaks the language of the JupyterLab that sent it: its ``lang`` query argument (the lab's
``translator.languageCode``: ``zh-CN``, ``en``), else the language the lab is set to on the server
(jupyterlab_server's translator), else English. An unknown ``lang`` is a 400. A simulation speaks the
language of the request that started it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib.util
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .. import i18n
from ..analysis import BROADCAST_STYLES, REDUCTIONS, Options, analyze
from ..i18n import N_, _
from ..notebook import InputError, Notebook, loads_notebook
from ..sim import DEFAULT_PROOF_STEPS
from .jobs import JobConflict, JobManager

MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_RANKS = 16
DEFAULT_RANKS = 2
DEFAULT_TIMEOUT = 300.0
MAX_TIMEOUT = 24 * 3600.0
MAX_PROOF_STEPS = 1000  # proof mode's extra steps: "steps" in a simulate request ("full": train as written)
DEFAULT_PATH = "<notebook>"
JOBS_SETTING = "npu_migrate_jobs"
EXECUTOR_SETTING = "npu_migrate_executor"
AUTH_RESOURCE = "npu-migrate"
# A simulation runs the notebook's code: the same permission as running code in a kernel.
SIMULATE_RESOURCE = "kernels"
_SIMULATOR_MODULES = ("psutil", "ipyparallel", "mpi4py", "tensorflow")


def _bad_request(message: str) -> web.HTTPError:
    return web.HTTPError(400, _one_line(message))


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def lab_language() -> Optional[str]:
    """The language JupyterLab is set to on this server (its settings set jupyterlab_server's translator
    whenever the lab loads them), if it is one we have."""
    try:
        from jupyterlab_server.translation_utils import translator
    except Exception:
        return None
    locale = getattr(translator, "_LOCALE", None)
    return i18n.normalize(locale) if isinstance(locale, str) else None


def speaks(method):
    """Run the handler's ``method`` in the language of its request (a 400 for an unknown ``lang``)."""

    @functools.wraps(method)
    async def in_the_request_language(self, *args, **kwargs):
        with i18n.language(self.request_language()):
            return await method(self, *args, **kwargs)

    return in_the_request_language


class _Base(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def jobs(self) -> JobManager:
        return self.settings[JOBS_SETTING]

    def request_language(self) -> str:
        """``lang`` of the query (``zh-CN``, ``zh_CN``, ``en``), else the lab's language, else English."""
        fallback = lab_language() or i18n.SOURCE_LANGUAGE
        given = self.get_query_argument("lang", None)
        if given is None or not given.strip():
            return fallback
        with i18n.language(fallback):
            try:
                return i18n.choose(given.strip())
            except ValueError as error:
                raise _bad_request(_("unsupported 'lang' query argument: {error}").format(error=error)) from None

    def json_body(self) -> Dict[str, Any]:
        body = self.request.body or b""
        if len(body) > MAX_BODY_BYTES:
            raise web.HTTPError(413, _("the request body is {size} bytes, over the limit of {limit} bytes (10 MB)")
                                .format(size=f"{len(body):,}", limit=f"{MAX_BODY_BYTES:,}"))
        try:
            data = json.loads(body)
        except UnicodeDecodeError:
            raise _bad_request(_("the request body is not UTF-8 text")) from None
        except json.JSONDecodeError as error:
            raise _bad_request(_("invalid JSON at line {line} column {column}: {error}").format(
                line=error.lineno, column=error.colno, error=error.msg)) from None
        if not isinstance(data, dict):
            raise _bad_request(_("the request body must be a JSON object, not {type}").format(type=_json_type(data)))
        return data

    def display_path(self, body: Dict[str, Any]) -> str:
        path = body.get("path")
        if path is None:
            return DEFAULT_PATH
        if not isinstance(path, str) or not path.strip():
            raise _bad_request(_("'path' must be a non-empty string"))
        return path

    def notebook(self, body: Dict[str, Any], path: str) -> Tuple[Notebook, str]:
        """The posted notebook, read exactly as ``check`` reads a file, and its JSON text."""
        document = body.get("notebook")
        if document is None:
            raise _bad_request(_("missing 'notebook': the notebook's nbformat v4 JSON object"))
        if not isinstance(document, dict):
            raise _bad_request(_("'notebook' must be a notebook JSON object, not {type}").format(
                type=_json_type(document)))
        text = json.dumps(document, ensure_ascii=False)
        try:
            return loads_notebook(text, path), text
        except InputError as error:
            raise _bad_request(str(error)) from None

    def analysis_options(self, body: Dict[str, Any], path: Optional[str] = None) -> Options:
        """The analysis options posted; the notebook's own modules are read from its folder, then from
        its project's root when that is inside the server's root (never above it)."""
        options = self._given_options(body)
        options.base = self._directory_of(path)
        options.paths_from = self._root()  # as the contents API names files
        options.root = project_root_within(options.base, self._root())
        return options

    def _root(self) -> Optional[str]:  # the server's
        root = getattr(self.settings.get("serverapp"), "root_dir", None) or self.settings.get("server_root_dir")
        return os.path.realpath(os.path.expanduser(root)) if root else None

    def _directory_of(self, key: Optional[str]) -> Optional[str]:
        return notebook_directory(self._root(), key)

    def _given_options(self, body: Dict[str, Any]) -> Options:
        given = body.get("options")
        if given is None:
            return Options()
        if not isinstance(given, dict):
            raise _bad_request(_("'options' must be a JSON object, not {type}").format(type=_json_type(given)))
        unknown = sorted(set(given) - {"ranks", "broadcast_style", "reduction"})
        if unknown:
            raise _bad_request(_("unknown option {name} (options: ranks, broadcast_style, reduction)").format(
                name=repr(unknown[0])))
        options = Options()
        if "ranks" in given:
            options.ranks = _integer(given["ranks"], "options.ranks", 1, None)
        if "broadcast_style" in given:
            if given["broadcast_style"] not in BROADCAST_STYLES:
                raise _bad_request(_("options.broadcast_style must be one of {choices}").format(
                    choices=", ".join(BROADCAST_STYLES)))
            options.broadcast_style = given["broadcast_style"]
        if "reduction" in given:
            if given["reduction"] is not None and given["reduction"] not in REDUCTIONS:
                raise _bad_request(_("options.reduction must be null, \"sum\" or \"mean\""))
            options.reduction = given["reduction"]
        return options

    async def in_worker(self, function, *args):
        """Analysis and rewriting off the event loop, one at a time (one worker thread per server):
        a cold 600-cell notebook takes a second, the server keeps serving meanwhile."""
        executor: ThreadPoolExecutor = self.settings[EXECUTOR_SETTING]
        # The thread does not see this request's context (its language): the call takes a copy along.
        in_context = functools.partial(contextvars.copy_context().run, function, *args)
        return await asyncio.get_running_loop().run_in_executor(executor, in_context)

    def finish_json(self, text: str, timings: List[Tuple[str, float]], started: float) -> None:
        total_ms = (time.perf_counter() - started) * 1000
        self.set_header("X-NPU-Analysis-Ms", f"{total_ms:.2f}")
        parts = timings + [("total", total_ms)]
        self.set_header("Server-Timing", ", ".join(f"{name};dur={ms:.2f}" for name, ms in parts))
        self.finish(text)


class AnalyzeHandler(_Base):
    """``POST analyze``: the object ``npu-migrate-nb check --format json`` prints for one notebook."""

    @web.authenticated
    @authorized(action="read")  # changes nothing on the server, whatever the HTTP method
    @speaks
    async def post(self) -> None:
        started = time.perf_counter()
        body = self.json_body()
        path = self.display_path(body)
        options = self.analysis_options(body, path)
        notebook, _text = self.notebook(body, path)
        parsed = time.perf_counter()
        text, analyzed, serialized = await self.in_worker(_analyze_to_json, notebook, options)
        self.finish_json(text, [("parse", (parsed - started) * 1000), ("analyze", analyzed * 1000),
                                ("serialize", serialized * 1000)], started)


def _analyze_to_json(notebook: Notebook, options: Options) -> Tuple[str, float, float]:
    started = time.perf_counter()
    analysis = analyze(notebook, options)
    analyzed = time.perf_counter()
    text = json.dumps(analysis.to_json(), ensure_ascii=False)
    return text, analyzed - started, time.perf_counter() - analyzed


class FixHandler(_Base):
    """``POST fix``: the notebook with the fixes applied (every other byte of it as it came), the
    cells changed, the codes applied and what remains. Writes nothing: the client applies it."""

    @web.authenticated
    @authorized(action="read")
    @speaks
    async def post(self) -> None:
        started = time.perf_counter()
        body = self.json_body()
        path = self.display_path(body)
        options = self.analysis_options(body, path)
        codes = _codes(body.get("codes"))
        notebook, _text = self.notebook(body, path)
        if not notebook.is_python:
            raise _bad_request(_("{path}: not a Python notebook ({language}): nothing to fix").format(
                path=path, language=notebook.language))
        try:
            text = await self.in_worker(_fix_to_json, notebook, options, codes)
        except InputError as error:
            raise _bad_request(str(error)) from None
        self.finish_json(text, [], started)


def _codes(codes: Any) -> Optional[set]:
    if codes is None:
        return None
    if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
        raise _bad_request(_("'codes' must be a list of finding codes, e.g. [\"missing-shard\"]"))
    from ..rules import RULES_BY_CODE

    unknown = sorted(set(codes) - set(RULES_BY_CODE))
    if unknown:
        raise _bad_request(_("unknown finding code {code} (codes: {codes})").format(
            code=repr(unknown[0]), codes=", ".join(sorted(RULES_BY_CODE))))
    return set(codes)


def _fix_to_json(notebook: Notebook, options: Options, codes: Optional[set]) -> str:
    from ..notebook import render
    from ..rewrite import fix_notebook

    analysis = analyze(notebook, options)
    result = fix_notebook(notebook, analysis, codes)
    text = render(notebook, result.sources)  # raises InputError rather than produce an invalid notebook
    remaining = analyze(loads_notebook(text, notebook.path), options)  # exactly the notebook returned
    rest = {
        "changed_cells": sorted(result.sources),
        "findings": [finding.to_json() for finding in remaining.findings],
        "applied": [finding.code for finding in result.applied],
        "failed": [{"cell": cell, "message": message} for cell, message in result.failed],
        "steps": dict(remaining.steps),
    }
    # The notebook as render wrote it, spliced in: no second parse and serialization of it.
    return '{"notebook": ' + text.rstrip("\n") + ", " + json.dumps(rest, ensure_ascii=False)[1:]


class SimulateHandler(_Base):
    """``POST simulate``: start a simulated run of the notebook in a process of its own (202)."""

    @web.authenticated
    @authorized(action="execute", resource=SIMULATE_RESOURCE)
    @speaks
    async def post(self) -> None:
        body = self.json_body()
        key = None if body.get("path") is None else self.display_path(body)
        notebook, text = self.notebook(body, key or DEFAULT_PATH)
        if not notebook.is_python:
            raise _bad_request(_("{path}: not a Python notebook ({language}): nothing to simulate").format(
                path=key or _("the notebook"), language=notebook.language))
        ranks = _integer(body.get("ranks", DEFAULT_RANKS), "ranks", 1, MAX_RANKS)
        timeout = _seconds(body.get("timeout", DEFAULT_TIMEOUT), "timeout")
        proof_steps = None if _boolean(body.get("full", False), "full") else \
            _integer(body.get("steps", DEFAULT_PROOF_STEPS), "steps", 0, MAX_PROOF_STEPS)
        missing = _missing_simulator()
        if missing:
            raise web.HTTPError(503, _("the simulator is not installed (no {module}): "
                                       "pip install 'npu-migrate-nb[sim]'").format(module=missing))
        try:
            job = self.jobs.start(text, ranks, timeout, key=key, cwd=self._directory_of(key),
                                  cells_total=len(notebook.code_cells), language=i18n.current(), proof_steps=proof_steps)
        except JobConflict as conflict:
            self.set_status(conflict.status)
            reply = {"message": conflict.message, "reason": None}
            if conflict.job_id:
                reply["id"] = conflict.job_id
            self.finish(json.dumps(reply))
            return
        self.set_status(202)
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job.id)
        self.finish(json.dumps({"id": job.id}))



def notebook_directory(root: Optional[str], path: Optional[str]) -> Optional[str]:
    """Where the ranks work: the notebook's directory, as for its kernel, when ``path`` (a contents
    API path, relative to the server's root) names a directory under ``root``; otherwise None (the
    job's own temporary directory)."""
    if not path or not root:
        return None
    parts = path.replace("\\", "/").strip("/").split("/")[:-1]
    if any(part in ("", ".", "..") for part in parts):
        return None
    root = os.path.realpath(os.path.expanduser(root))
    directory = os.path.realpath(os.path.join(root, *parts))
    if directory != root and not directory.startswith(root + os.sep):
        return None  # a link out of the root
    return directory if os.path.isdir(directory) else None


class JobHandler(_Base):
    """``GET simulate/<id>``: progress and, once known, the result; ``DELETE``: stop it."""

    def job(self, job_id: str):
        job = self.jobs.get(job_id)
        if job is None:
            raise web.HTTPError(404, _("no simulation {id} (unknown, or forgotten after it ended)").format(
                id=repr(job_id)))
        return job

    @web.authenticated
    @authorized(action="read", resource=SIMULATE_RESOURCE)
    @speaks
    async def get(self, job_id: str) -> None:
        self.finish(json.dumps(self.job(job_id).status(), ensure_ascii=False))

    @web.authenticated
    @authorized(action="execute", resource=SIMULATE_RESOURCE)
    @speaks
    async def delete(self, job_id: str) -> None:
        job = self.job(job_id)
        await asyncio.get_running_loop().run_in_executor(None, job.stop)
        self.finish(json.dumps(job.status(), ensure_ascii=False))


def _integer(value: Any, name: str, low: int, high: Optional[int]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_request(_("{name} must be an integer, not {value}").format(name=name, value=json.dumps(value)[:40]))
    if value < low or (high is not None and value > high):
        if high is not None:
            raise _bad_request(_("{name} must be from {low} to {high}, not {value}").format(
                name=name, low=low, high=high, value=value))
        raise _bad_request(_("{name} must be at least {low}, not {value}").format(name=name, low=low, value=value))
    return value


def _boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _bad_request(_("{name} must be true or false, not {value}").format(name=name, value=json.dumps(value)[:40]))
    return value


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad_request(_("{name} must be a number of seconds, not {value}").format(
            name=name, value=json.dumps(value)[:40]))
    if not 0 < value <= MAX_TIMEOUT:
        raise _bad_request(_("{name} must be more than 0 and at most {limit} seconds, not {value}").format(
            name=name, limit=f"{MAX_TIMEOUT:.0f}", value=value))
    return float(value)


_JSON_TYPES = {list: N_("an array"), str: N_("a string"), int: N_("a number"), float: N_("a number"),
               bool: N_("a boolean"), type(None): N_("null"), dict: N_("an object")}


def _json_type(value: Any) -> str:
    said = _JSON_TYPES.get(type(value))
    return _(said) if said is not None else type(value).__name__


_missing_cache: Dict[str, Optional[str]] = {}


def _missing_simulator() -> Optional[str]:
    """The first of the simulator's packages that is not installed (looked up once, not imported)."""
    if "missing" not in _missing_cache:
        _missing_cache["missing"] = next(
            (name for name in _SIMULATOR_MODULES if importlib.util.find_spec(name) is None), None)
    return _missing_cache["missing"]


def project_root_within(folder: Optional[str], server_root: Optional[str]) -> Optional[str]:
    """The project root above ``folder`` (project.py), if the server's root contains it; else None."""
    if folder is None or server_root is None:
        return None
    from ..project import find_root

    root = os.path.realpath(find_root(folder))
    return root if (root + os.sep).startswith(os.path.realpath(server_root) + os.sep) else None
