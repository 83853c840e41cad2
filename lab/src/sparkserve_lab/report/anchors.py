"""External reference numbers (not measured here): lab/configs/external-anchors.toml.

Each `[[anchor]]` names a stack, its source, and the pp2048 / tg32 tok/s it published as a
`[low, high]` pair (one figure: low == high; `approx = true` for a "~" figure; absent: not published).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkserve import config
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


# The file's schema (sparkserve.config).
@dataclass(frozen=True)
class _AnchorEntry:
    stack: str
    source: str
    pp2048: tuple[float, float] | None = None
    tg32: tuple[float, float] | None = None
    approx: bool = False
    nodes: int = 1


@dataclass(frozen=True)
class _AnchorsFile:
    schema: Literal[1]
    anchor: tuple[_AnchorEntry, ...] = ()


def _pair(where: str, value: tuple[float, float] | None) -> tuple[float, float] | None:
    if value is not None and (value[0] <= 0 or value[0] > value[1]):
        raise SparkserveError(f"{where}: expected [low, high] tok/s, got {list(value)!r}")
    return value


def _text(v: tuple[float, float] | None, approx: bool) -> str:
    if v is None:
        return "-"

    def num(x: float) -> str:
        return f"{x:,.0f}" if x >= 1000 else f"{x:g}"

    text = num(v[0]) if v[0] == v[1] else f"{num(v[0])}-{num(v[1])}"
    return f"~{text}" if approx else text


def parse(text: str, source: str = "anchors") -> list[Anchor]:
    out = []
    for i, a in enumerate(config.parse_toml(_AnchorsFile, text, source).anchor):
        where = f"{source}: anchor {i + 1}"
        if not a.stack or not a.source:
            raise SparkserveError(f"{where}: needs `stack` and `source`")
        pp, tg = _pair(f"{where} pp2048", a.pp2048), _pair(f"{where} tg32", a.tg32)
        out.append(Anchor(a.stack, pp, tg, a.source, _text(pp, a.approx), _text(tg, a.approx), a.nodes))
    return out


def load(path: Path) -> list[Anchor]:
    try:
        return parse(path.read_text(), str(path))
    except OSError as exc:
        raise SparkserveError(f"cannot read the anchors {path}: {exc.strerror}") from None
