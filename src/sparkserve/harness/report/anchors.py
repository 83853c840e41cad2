"""External reference numbers (not measured here) from ../shared/ANCHORS.md.

The table under "## Engines and distributions" has the columns `stack | pp2048 tok/s | tg32 tok/s |
source`; cells are numbers with thousands separators, ranges ("4,573-4,910"), "~52" or "-".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Anchor:
    stack: str
    pp2048: tuple[float, float] | None
    tg32: tuple[float, float] | None
    source: str
    pp_text: str
    tg_text: str


def _value(cell: str) -> tuple[float, float] | None:
    nums = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", cell)]
    if not nums:
        return None
    return (min(nums), max(nums))


def mid(v: tuple[float, float]) -> float:
    return (v[0] + v[1]) / 2


def parse(text: str) -> list[Anchor]:
    out: list[Anchor] = []
    in_section = False
    for line in text.splitlines():
        if line.startswith("## "):
            in_section = line.strip().lower().startswith("## engines and distributions")
            continue
        if not in_section or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] == "stack" or set(cells[0]) <= {"-", " "}:
            continue
        out.append(Anchor(cells[0], _value(cells[1]), _value(cells[2]), cells[3], cells[1], cells[2]))
    return out


def load(path: Path | None) -> list[Anchor]:
    if path is None or not path.exists():
        return []
    return parse(path.read_text())
