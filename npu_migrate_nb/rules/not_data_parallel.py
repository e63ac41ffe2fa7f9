"""(being written) not-data-parallel."""

from __future__ import annotations

from typing import Iterable

from ..findings import Finding
from .base import Rule


class NotDataParallel(Rule):
    code = "not-data-parallel"
    step = None
    severity = "info"

    VALID = []
    INVALID = []

    def check(self, context) -> Iterable[Finding]:
        return []
