"""External reference numbers (not measured here): lab/configs/external-anchors.toml.

Each `[[anchor]]` names a stack, its source, and the pp2048 / tg32 tok/s it published as a
`[low, high]` pair (one figure: low == high; `approx = true` for a "~" figure; absent: not published).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError

DEFAULT_FILE = Path("lab") / "configs" / "external-anchors.toml"


@dataclass(frozen=True)
class Anchor:
    stack: str
    pp2048: tuple[float, float] | None
    tg32: tuple[float, float] | None
    source: str
    pp_text: str
    tg_text: str
    nodes: int = 1


def mid(v: tuple[float, float]) -> float:
    return (v[0] + v[1]) / 2


def _pair(where: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(x, int | float) and x > 0 for x in value) or value[0] > value[1]):
        raise SparkserveError(f"{where}: expected [low, high] tok/s, got {value!r}")
    return (float(value[0]), float(value[1]))


def _text(v: tuple[float, float] | None, approx: bool) -> str:
    if v is None:
        return "-"

    def num(x: float) -> str:
        return f"{x:,.0f}" if x >= 1000 else f"{x:g}"

    text = num(v[0]) if v[0] == v[1] else f"{num(v[0])}-{num(v[1])}"
    return f"~{text}" if approx else text


def parse(text: str, source: str = "anchors") -> list[Anchor]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SparkserveError(f"{source}: {exc}") from None
    if data.get("schema") != 1:
        raise SparkserveError(f"{source}: expected schema = 1")
    out = []
    for i, a in enumerate(data.get("anchor", [])):
        where = f"{source}: anchor {i + 1}"
        if not a.get("stack") or not a.get("source"):
            raise SparkserveError(f"{where}: needs `stack` and `source`")
        pp, tg = _pair(f"{where} pp2048", a.get("pp2048")), _pair(f"{where} tg32", a.get("tg32"))
        approx = bool(a.get("approx", False))
        out.append(Anchor(str(a["stack"]), pp, tg, str(a["source"]), _text(pp, approx), _text(tg, approx),
                          int(a.get("nodes", 1))))
    return out


def load(path: Path) -> list[Anchor]:
    try:
        return parse(path.read_text(), str(path))
    except OSError as exc:
        raise SparkserveError(f"cannot read the anchors {path}: {exc.strerror}") from None
