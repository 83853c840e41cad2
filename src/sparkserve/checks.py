"""One named check with its verdict: the unit of every level result and of a kernel validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MARK = {True: "ok  ", False: "FAIL", None: "skip"}


@dataclass
class Check:
    name: str
    ok: bool | None  # None: skipped, with the reason in detail
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}

    def line(self) -> str:
        """The progress line every level prints: `  [ok  ] name: detail`."""
        return f"  [{_MARK[self.ok]}] {self.name}" + (f": {self.detail}" if self.detail else "")
