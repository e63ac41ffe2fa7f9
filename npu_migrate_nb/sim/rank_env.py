"""Who each simulated rank is: the Ascend environment variables and the rank table they point at.

The real adapter reads ``RANK_SIZE``, ``RANK_ID``, ``ASCEND_DEVICE_ID``/``DEVICE_ID``, ``JOB_ID`` and
``RANK_TABLE_FILE`` (see ascend-api.md); a simulated rank gets the same variables, with
``RANK_ID`` equal to its MPI rank, before any user code runs.
"""

from __future__ import annotations

import json
import os
from typing import Dict

# Chip addresses in the generated table: a private range that no real host uses for its NICs.
_DEVICE_IP = "192.168.100.{}"
_SERVER_ID = "127.0.0.1"


def rank_table(size: int) -> dict:
    """A one-server rank table in the real JSON format (every value a string)."""
    devices = [
        {"device_id": str(rank), "device_ip": _DEVICE_IP.format(rank + 1), "rank_id": str(rank)}
        for rank in range(size)
    ]
    return {
        "server_count": "1",
        "server_list": [{"server_id": _SERVER_ID, "device": devices}],
        "status": "completed",
        "version": "1.0",
    }


def write_rank_table(path: str, size: int) -> str:
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(rank_table(size), stream, indent=2)
    return path


def rank_environment(rank: int, size: int, job_id: str, table_path: str) -> Dict[str, str]:
    """The variables one rank sees. One server, so the local device id is the rank."""
    return {
        "RANK_SIZE": str(size),
        "RANK_ID": str(rank),
        "ASCEND_DEVICE_ID": str(rank),
        "DEVICE_ID": str(rank),
        "JOB_ID": job_id,
        "RANK_TABLE_FILE": table_path,
    }


def apply_rank_environment(rank: int, size: int, job_id: str, table_path: str) -> None:
    # CM_WORKER_SIZE next to RANK_SIZE is an error for the real adapter; a user's leftover must not leak in.
    for name in ("CM_WORKER_SIZE", "CM_CHIEF_IP", "CM_CHIEF_PORT", "CM_CHIEF_DEVICE", "CM_WORKER_IP"):
        os.environ.pop(name, None)
    os.environ.update(rank_environment(rank, size, job_id, table_path))
