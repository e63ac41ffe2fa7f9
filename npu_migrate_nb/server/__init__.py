"""The Jupyter server extension: the analyzer, the rewriter and the simulator over REST.

Enable it with ``jupyter server extension enable npu_migrate_nb`` (or
``{"ServerApp": {"jpserver_extensions": {"npu_migrate_nb": true}}}``). Under ``<base_url>npu-migrate/``,
authenticated like every Jupyter endpoint (token or login cookie; XSRF for browser requests):

* ``POST analyze`` ``{"notebook": {...}, "options": {"ranks", "broadcast_style", "reduction"}, "path"}``
  -> the object ``npu-migrate-nb check --format json`` prints for one notebook;
* ``POST fix`` ``{"notebook", "codes", "options", "path"}`` -> ``{"notebook", "changed_cells",
  "findings", "applied", "failed", "steps"}``;
* ``POST simulate`` ``{"notebook", "ranks", "timeout", "path"}`` -> 202 ``{"id"}``; ``GET
  simulate/<id>`` its progress and result; ``DELETE simulate/<id>`` stops it.

The analyzer's per-cell cache lives as long as the server, so re-analyzing a notebook after an edit
costs only the changed cells. Every simulation stops when the server does.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from jupyter_core.utils import ensure_async
from jupyter_server.utils import url_path_join

from .handlers import (
    EXECUTOR_SETTING,
    JOBS_SETTING,
    AnalyzeHandler,
    FixHandler,
    JobHandler,
    SimulateHandler,
)
from .jobs import JobManager

URL_PREFIX = "npu-migrate"


def _jupyter_server_extension_points():
    return [{"module": "npu_migrate_nb.server"}]


def _load_jupyter_server_extension(server_app) -> None:
    web_app = server_app.web_app
    if JOBS_SETTING in web_app.settings:
        return  # loaded already (``npu_migrate_nb`` and ``npu_migrate_nb.server`` both enabled)
    jobs = JobManager(log=server_app.log)
    web_app.settings[JOBS_SETTING] = jobs
    web_app.settings[EXECUTOR_SETTING] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npu-migrate")
    base = url_path_join(web_app.settings["base_url"], URL_PREFIX)
    web_app.add_handlers(".*$", [
        (url_path_join(base, "analyze"), AnalyzeHandler),
        (url_path_join(base, "fix"), FixHandler),
        (url_path_join(base, "simulate"), SimulateHandler),
        (url_path_join(base, "simulate", "([^/]+)"), JobHandler),
    ])
    _stop_with_the_server(server_app)
    server_app.log.info("npu-migrate-nb: handlers at %s/", base)


def _unload_jupyter_server_extension(server_app) -> None:
    """Stop every simulation of this server (all ranks, no process left) and the worker thread."""
    settings = server_app.web_app.settings
    jobs = settings.get(JOBS_SETTING)
    if jobs is not None:
        running = [job for job in list(jobs.jobs.values()) if job.running]
        if running:
            server_app.log.info("npu-migrate-nb: stopping %d simulation(s) with the server", len(running))
        jobs.stop_all()
    executor = settings.get(EXECUTOR_SETTING)
    if executor is not None:
        executor.shutdown(wait=False)


def _stop_with_the_server(server_app) -> None:
    """Jupyter Server 2 calls shutdown hooks only of ExtensionApp-based extensions
    (``ExtensionApp.stop_extension``, from ``ServerApp.cleanup_extensions``); a module extension
    like this one gets none, and ``_unload_jupyter_server_extension`` is not called. So it is
    chained to this server's ``cleanup_extensions``, which ``ServerApp._cleanup`` awaits on every
    orderly stop (SIGTERM, Ctrl-C confirmed, the shutdown API). The jobs module's atexit hook is
    the backstop, and each job stops itself when the server process is gone (killed)."""
    original = server_app.cleanup_extensions

    async def cleanup_extensions() -> None:
        import asyncio

        try:
            await asyncio.get_running_loop().run_in_executor(None, _unload_jupyter_server_extension, server_app)
        except Exception:
            server_app.log.exception("npu-migrate-nb: stopping the simulations failed")
        await ensure_async(original())

    server_app.cleanup_extensions = cleanup_extensions
