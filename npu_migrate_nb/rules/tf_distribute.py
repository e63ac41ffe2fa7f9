"""(being written) tf-distribute-leftover."""

from __future__ import annotations

from typing import Iterable

from ..findings import Finding
from .base import Rule


class TfDistributeLeftover(Rule):
    code = "tf-distribute-leftover"
    step = None
    severity = "error"

    VALID = []
    INVALID = []

    def check(self, context) -> Iterable[Finding]:
        return []
