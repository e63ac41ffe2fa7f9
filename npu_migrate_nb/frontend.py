"""The kernel's line to our JupyterLab extension: replace a cell's text from a widget's Apply button.

A widget callback cannot use ``set_next_input`` (payloads only travel with an execute reply), so the
kernel opens a comm to the target ``npu_migrate_nb`` that the lab extension registers. Protocol
(every message's data is a JSON object with an ``action``):

* kernel -> frontend, on open: ``{"action": "hello", "version": V}``; the extension answers
  ``{"action": "hello", "version": V}``. A frontend without the extension closes the comm instead
  (JupyterLab does so for an unknown target): then no frontend can edit cells, and the widgets show
  the code to paste.
* kernel -> frontend: ``{"action": "replace-cell", "request": R, "cell_id": ID, "expected": OLD,
  "source": NEW}``: the extension replaces the text of the cell ``ID`` of the notebook of this
  kernel by ``NEW`` through the notebook's shared model (one undoable change), only if the cell
  still reads ``OLD``.
* frontend -> kernel: ``{"action": "replaced", "request": R, "ok": true}`` or ``{..., "ok": false,
  "reason": "the cell changed since it was analyzed"}``.

A reply to a widget also says ``"no_extension": true`` when no extension is connected (its reason is
in the kernel's language, so the widget does not read it).
"""

from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Optional

from . import __version__
from .i18n import N_, _

COMM_TARGET = "npu_migrate_nb"
Reply = Callable[[dict], None]
NO_EXTENSION = N_("no JupyterLab extension is connected to this kernel")


class Frontend:
    def __init__(self):
        self.present: Optional[bool] = None  # None: not known yet
        self._comm = None
        self._pending: Dict[str, Reply] = {}
        self._requests = itertools.count(1)
        self._listeners: List[Callable[[Optional[bool]], None]] = []

    def connect(self) -> None:
        """Open the comm (in a kernel); the answer arrives once the current cell has finished."""
        if self._comm is not None or self.present is False:
            return
        from comm import create_comm

        self._comm = create_comm(target_name=COMM_TARGET, data={"action": "hello", "version": __version__})
        self._comm.on_msg(self._on_msg)
        self._comm.on_close(self._on_close)

    def on_presence(self, listener: Callable[[Optional[bool]], None]) -> None:
        self._listeners.append(listener)

    def replace_cell(self, cell_id: str, expected: str, source: str, reply: Reply) -> None:
        if self.present is False:
            reply({"ok": False, "reason": _(NO_EXTENSION), "no_extension": True})
            return
        self.connect()
        request = str(next(self._requests))
        self._pending[request] = reply
        self._comm.send({"action": "replace-cell", "request": request, "cell_id": cell_id,
                         "expected": expected, "source": source})

    def close(self) -> None:
        comm, self._comm = self._comm, None
        if comm is not None:
            try:
                comm.close()
            except Exception:
                pass

    # -------------------------------------------------------------------------------- inbound

    def _on_msg(self, message: dict) -> None:
        data = (message.get("content") or {}).get("data") or {}
        if data.get("action") == "hello":
            self._set_presence(True)
        elif data.get("action") == "replaced":
            reply = self._pending.pop(str(data.get("request")), None)
            if reply is not None:
                reply({"ok": bool(data.get("ok")), "reason": str(data.get("reason") or "")})

    def _on_close(self, message: dict) -> None:
        self._comm = None
        if not self.present:
            self._set_presence(False)
        pending, self._pending = self._pending, {}
        for reply in pending.values():
            reply({"ok": False, "reason": _(NO_EXTENSION), "no_extension": True})

    def _set_presence(self, present: bool) -> None:
        self.present = present
        for listener in list(self._listeners):
            try:
                listener(present)
            except Exception:
                pass
