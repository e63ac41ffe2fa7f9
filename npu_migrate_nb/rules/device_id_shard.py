"""(being written) device-id-shard."""

from __future__ import annotations

from typing import Iterable

from ..findings import Finding
from .base import Rule


class DeviceIdShard(Rule):
    code = "device-id-shard"
    step = "shard"
    severity = "warning"

    VALID = []
    INVALID = []

    def check(self, context) -> Iterable[Finding]:
        return []
