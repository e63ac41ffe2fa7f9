"""Who each simulated rank is: the Ascend environment variables and the rank table they point at.

The real adapter reads ``RANK_SIZE``, ``RANK_ID``, ``ASCEND_DEVICE_ID``/``DEVICE_ID``, ``JOB_ID`` and
``RANK_TABLE_FILE`` (see ascend-api.md); a simulated rank gets the same variables, with
``RANK_ID`` equal to its MPI rank, before any user code runs.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

from ..i18n import _

# Chip addresses in the generated table: a private range that no real host uses for its NICs.
_DEVICE_IP = "192.168.100.{}"
# Server addresses: loopback ones, one per simulated server (all the ranks run on this machine).
_SERVER_ID = "127.0.0.{}"

# Lay the ranks out as several servers of this many devices each (unset: one server holds them all).
# With several servers DEVICE_ID starts again at 0 on each, as on a real cluster of 8-chip servers.
DEVICES_PER_SERVER_VARIABLE = "NPU_SIM_DEVICES_PER_SERVER"


def machine_cores() -> int:
    """The cores this process may run on (what every simulated rank shares)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def devices_per_server(size: int, environ=os.environ) -> int:
    """The devices of one simulated server: from the variable, else all ``size`` ranks on one server."""
    text = environ.get(DEVICES_PER_SERVER_VARIABLE, "").strip()
    if not text:
        return max(size, 1)
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(_("{variable} must be a positive whole number, not {text}").format(
            variable=DEVICES_PER_SERVER_VARIABLE, text=repr(text)))
    return count


def rank_table(size: int, per_server: Optional[int] = None) -> dict:
    """A rank table in the real JSON format (every value a string): rank r on server r // per_server,
    device r % per_server; one server unless ``per_server`` is smaller than ``size``."""
    per_server = per_server or max(size, 1)
    servers = []
    for rank in range(size):
        server, device = divmod(rank, per_server)
        if server == len(servers):
            servers.append({"server_id": _SERVER_ID.format(server + 1), "device": []})
        servers[server]["device"].append(
            {"device_id": str(device), "device_ip": _DEVICE_IP.format(rank + 1), "rank_id": str(rank)}
        )
    return {
        "server_count": str(len(servers)),
        "server_list": servers,
        "status": "completed",
        "version": "1.0",
    }


def write_rank_table(path: str, size: int, per_server: Optional[int] = None) -> str:
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(rank_table(size, per_server), stream, indent=2)
    return path


def rank_environment(
    rank: int, size: int, job_id: str, table_path: str, per_server: Optional[int] = None
) -> Dict[str, str]:
    """The variables one rank sees: its device id is its place on its server (the rank, on one server)."""
    device = str(rank % (per_server or max(size, 1)))
    return {
        "RANK_SIZE": str(size),
        "RANK_ID": str(rank),
        "ASCEND_DEVICE_ID": device,
        "DEVICE_ID": device,
        "JOB_ID": job_id,
        "RANK_TABLE_FILE": table_path,
    }


def apply_rank_environment(
    rank: int, size: int, job_id: str, table_path: str, per_server: Optional[int] = None
) -> None:
    # CM_WORKER_SIZE next to RANK_SIZE is an error for the real adapter; a user's leftover must not leak in.
    for name in ("CM_WORKER_SIZE", "CM_CHIEF_IP", "CM_CHIEF_PORT", "CM_CHIEF_DEVICE", "CM_WORKER_IP"):
        os.environ.pop(name, None)
    os.environ.update(rank_environment(rank, size, job_id, table_path, per_server))
