"""A real IPython kernel driven through jupyter_client, playing the frontend's part: it sends cell
ids as JupyterLab does, collects what the kernel displays, answers comms (our extension's, the
widgets') and can press the stop button."""

from __future__ import annotations

import queue
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from jupyter_client.manager import start_new_kernel


@dataclass
class Execution:
    reply: dict
    messages: List[dict] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.reply["content"]["status"]

    @property
    def payload(self) -> List[dict]:
        return self.reply["content"].get("payload") or []

    def stream(self, name: Optional[str] = None) -> str:
        return "".join(m["content"]["text"] for m in self.messages
                       if m["msg_type"] == "stream" and (name is None or m["content"]["name"] == name))

    @property
    def displays(self) -> List[dict]:
        return [m["content"]["data"] for m in self.messages if m["msg_type"] in ("display_data", "execute_result")]

    @property
    def error(self) -> Optional[dict]:
        found = [m["content"] for m in self.messages if m["msg_type"] == "error"]
        return found[0] if found else None

    def text(self) -> str:
        """Everything a person would read: streams, plain-text displays, error lines."""
        parts = [self.stream()] + [d.get("text/plain", "") for d in self.displays]
        if self.error:
            parts += self.error["traceback"]
        return "\n".join(parts)


class Kernel:
    def __init__(self, extra_env: Optional[dict] = None, unset: tuple = ()):
        """``unset``: environment variables the kernel does not inherit (``LANGUAGE``, ``LC_ALL``...)."""
        import os

        env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1", **(extra_env or {}))
        for name in unset:
            env.pop(name, None)
        self.manager, self.client = start_new_kernel(kernel_name="python3", env=env)
        self.seen: List[dict] = []  # every IOPub message so far
        self.comm_opens: List[dict] = []  # comm_open messages from the kernel
        self.comm_msgs: List[dict] = []
        self.comm_closes: List[dict] = []
        self.on_comm_open: Optional[Callable[[dict], None]] = None
        self.on_comm_msg: Optional[Callable[[dict], None]] = None

    def execute(self, code: str, cell_id: Optional[str] = None, timeout: float = 120.0,
                on_message: Optional[Callable[[dict], None]] = None) -> Execution:
        metadata = {"cellId": cell_id} if cell_id else {}
        message = self.client.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}, metadata=metadata)
        self.client.shell_channel.send(message)
        msg_id = message["header"]["msg_id"]
        reply = self._reply_to(msg_id, timeout, on_message)
        execution = Execution(reply)
        self._collect(msg_id, execution, timeout, on_message)
        return execution

    def _reply_to(self, msg_id: str, timeout: float, on_message) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            self.pump(on_message)
            try:
                reply = self.client.get_shell_msg(timeout=0.05)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no reply in {timeout} s")
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def _collect(self, msg_id: str, execution: Execution, timeout: float, on_message) -> None:
        """IOPub messages of this request until the kernel is idle again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(on_message)
            mine = [m for m in self.seen if m["parent_header"].get("msg_id") == msg_id]
            if any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in mine):
                execution.messages = mine
                return
            time.sleep(0.01)
        raise TimeoutError("the kernel did not become idle")

    def pump(self, on_message=None) -> List[dict]:
        """Read what IOPub has now; comms are noted (and answered by the handlers set)."""
        seen = []
        while True:
            try:
                message = self.client.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                return seen
            seen.append(message)
            self.seen.append(message)
            kind = message["msg_type"]
            if kind == "comm_open":
                self.comm_opens.append(message)
                if self.on_comm_open:
                    self.on_comm_open(message)
            elif kind == "comm_msg":
                self.comm_msgs.append(message)
                if self.on_comm_msg:
                    self.on_comm_msg(message)
            elif kind == "comm_close":
                self.comm_closes.append(message)
            if on_message:
                on_message(message)

    def send_comm(self, comm_id: str, data: dict, kind: str = "comm_msg") -> None:
        message = self.client.session.msg(kind, {"comm_id": comm_id, "data": data})
        self.client.shell_channel.send(message)

    def settle(self, seconds: float = 1.0) -> None:
        """Let the kernel handle what was sent (comm messages have no reply of their own)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.pump()
            time.sleep(0.02)

    def interrupt(self) -> None:
        self.manager.interrupt_kernel()

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def new_cell_id() -> str:
    return uuid.uuid4().hex[:12]


def widget_states(kernel):
    """comm id -> the widget's state, as a frontend would hold it (opens, then updates)."""
    states = {}
    for message in kernel.comm_opens:
        content = message["content"]
        if content.get("target_name") == "jupyter.widget":
            states[content["comm_id"]] = dict(content["data"]["state"])
    for message in kernel.comm_msgs:
        content = message["content"]
        if content["comm_id"] in states and content["data"].get("method") == "update":
            states[content["comm_id"]].update(content["data"]["state"])
    return states


def ok(kernel, code, cell_id=None):
    """Run ``code`` as a cell (a fresh cell id unless given) and insist it succeeded."""
    execution = kernel.execute(code, cell_id=cell_id or new_cell_id())
    assert execution.status == "ok", execution.text()
    return execution
