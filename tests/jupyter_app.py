"""``jupyter lab`` or ``jupyter server`` in a process of its own, on a free loopback port with a token:
what the browser tests, the server tests, ``benchmarks/bench_server.py`` and
``docs/make_screenshots.py`` run against."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JupyterApp:
    """``app`` is "lab" or "server". ``enable_extension`` enables ours through a config directory of
    its own (independent of what is installed), with this checkout first on the path."""

    def __init__(self, root: Path, app: str = "lab", enable_extension: bool = False, log_level: str = "INFO",
                 startup_timeout: float = 120.0):
        self.root = Path(root)
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.root / f"{app}.log"
        self._log = open(self.log_path, "wb")
        self._connection: Optional[http.client.HTTPConnection] = None
        # Settings (the language among them) and workspaces of its own: a test that switches the lab to
        # Chinese changes no other lab's settings, nor the user's.
        env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1", JUPYTERLAB_SETTINGS_DIR=str(self.root / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(self.root / "workspaces"))
        if enable_extension:
            config = self.root / "config"
            config.mkdir(exist_ok=True)
            (config / "jupyter_server_config.json").write_text(
                json.dumps({"ServerApp": {"jpserver_extensions": {"npu_migrate_nb": True}}}))
            env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_RUNTIME_DIR=str(self.root / "runtime"),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        module = "jupyterlab" if app == "lab" else "jupyter_server"
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}", "--ServerApp.port_retries=0", "--allow-root",
             f"--ServerApp.root_dir={self.root}", f"--ServerApp.log_level={log_level}"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # a test's Ctrl-C is not the server's
        )
        self._wait_until_up(startup_timeout)

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.request("GET", "/api/status")[0] == 200:
                    return
            except OSError:
                self._connection = None
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"jupyter did not start:\n{self.log_text()}")
            time.sleep(0.2)

    def request(self, method: str, path: str, body: Optional[bytes] = None):
        """(status, headers, body bytes), with the token, on a kept-alive connection."""
        if self._connection is None:
            self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        headers = {"Authorization": f"token {self.token}", "Content-Type": "application/json"}
        try:
            self._connection.request(method, "/" + path.lstrip("/"), body=body, headers=headers)
            response = self._connection.getresponse()
            return response.status, response.msg, response.read()
        except (OSError, http.client.HTTPException):
            self._connection = None
            raise

    def request_json(self, method: str, path: str, body=None):
        status, _, data = self.request(method, path, None if body is None else json.dumps(body).encode())
        return status, json.loads(data)

    def log_text(self, tail: int = 5000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def descendants(self) -> List[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout: float = 30.0) -> List[psutil.Process]:
        """SIGTERM (the server shuts its kernels and jobs down), then SIGKILL to whatever is left of its
        process group; returns the processes it had started that were still alive 10 s later."""
        descendants = self.descendants()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        _, alive = psutil.wait_procs(descendants, timeout=10)
        leftover = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for process in leftover:
            process.kill()
        self._log.close()
        return leftover
