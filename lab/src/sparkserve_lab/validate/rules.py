"""The rules of level 1.5 as data: what a configuration's engine must (and must not) select, per category
of the engine log, and the reading of a `category = [patterns]` table. Both the rules file's
configurations (validate/kernels.py) and the rules derived from a profile (validate/profile_rules.py)
are made of these."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkserve.errors import SparkserveError
from sparkserve_lab.validate.logparse import CATEGORIES

_EXTRA_CATEGORIES = ("log", "trace")


@dataclass
class KernelRules:
    name: str
    description: str = ""
    must: dict[str, list[str]] = field(default_factory=dict)
    must_not: dict[str, list[str]] = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)


def pattern_table(where: str, table: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """A `category = [patterns]` table (its types read by validate/rulesfile.py): known categories, patterns
    that compile."""
    out: dict[str, list[str]] = {}
    for cat, pats in table.items():
        if cat not in CATEGORIES + _EXTRA_CATEGORIES:
            raise SparkserveError(
                f"{where}: unknown category {cat!r} (known: {', '.join(CATEGORIES + _EXTRA_CATEGORIES)})"
            )
        for p in pats:
            try:
                re.compile(p)
            except re.error as exc:
                raise SparkserveError(f"{where}.{cat}: bad regex {p!r}: {exc}") from exc
        out[cat] = list(pats)
    return out
