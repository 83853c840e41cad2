"""`sparkserve dev init`: pinned source trees with the series applied, for the dev container."""

from __future__ import annotations

from pathlib import Path

from sparkserve.progress import say
from sparkserve.supply import sourcetree
from sparkserve.supply.patches import apply
from sparkserve.supply.patches.series import load_series
from sparkserve.supply.pins import Pins
from sparkserve.supply.sources import fetch

DEFAULT_DIR = "dev-src"


def init(pins: Pins, base: Path) -> dict[str, Path]:
    trees = {}
    for name in pins.upstreams:
        dest = base / name
        series = load_series(pins.root, name)
        if (dest / ".git").exists():
            say(f"{dest}: exists, applying any patches not yet committed")
        else:
            sourcetree.make(fetch(pins, name), dest, pins.upstream(name))
        apply.apply_tree(pins, dest, name, series)
        trees[name] = dest
        say(f"{dest}: {pins.upstream(name).distribution} {pins.upstream(name).version} "
            f"+ {len(series)} patch commit(s) on tag '{sourcetree.UPSTREAM_TAG}'")
    return trees
