"""The report never drops a section silently: what a previous docs file had (headings, figures) that its
regenerated text would lack. `sparkserve report` refuses to write such a text unless told to."""

from __future__ import annotations

import re

_FIGURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def landmarks(text: str) -> list[str]:
    """Headings (`## x`) and figures (`figure img/x.png`) of a markdown text, in order."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            out.append(line.strip())
        out += [f"figure {m}" for m in _FIGURE.findall(line)]
    return out


def dropped(old: str, new: str) -> list[str]:
    have = set(landmarks(new))
    return list(dict.fromkeys(x for x in landmarks(old) if x not in have))
