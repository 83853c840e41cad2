"""`sparkserve dev init`: pinned source trees with the series applied, for the dev container.

The trees live in dev-src/ of the checkout, or where $SPARKSERVE_DEV_SRC says (the dev container
mounts them at /dev-src). Every verb that uses a tree first checks that it is there and that its base
is the sdist pins.toml pins now.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkserve.progress import say
from sparkserve.supply import gitutil, sourcetree
from sparkserve.supply.patches import apply
from sparkserve.supply.patches.series import load_series
from sparkserve.supply.pins import Pins
from sparkserve.supply.sources import fetch

DEFAULT_DIR = "dev-src"
ENV_DIR = "SPARKSERVE_DEV_SRC"


def trees_dir(pins: Pins, base: Path | None = None) -> Path:
    """Where the trees are: base, else $SPARKSERVE_DEV_SRC, else <checkout>/dev-src."""
    if base is not None:
        return base
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else pins.root / DEFAULT_DIR


def require(pins: Pins, name: str, base: Path | None = None) -> Path:
    """The tree of one upstream, checked: present (else: run `dev init`) and made from the pins."""
    tree = trees_dir(pins, base) / name
    sourcetree.verify_base(tree, pins.upstream(name))
    return tree


def describe(tree: Path) -> str:
    """'<base> + N commit(s), HEAD <sha>' of a tree that verify_base accepted."""
    n = len(gitutil.out(["rev-list", f"{sourcetree.UPSTREAM_TAG}..HEAD"], tree).split())
    head = gitutil.out(["rev-parse", "--short=12", "HEAD"], tree).strip()
    return f"{sourcetree.recorded_base(tree)} + {n} commit(s), HEAD {head}"


def init(pins: Pins, base: Path | None = None) -> dict[str, Path]:
    trees = {}
    for name in pins.upstreams:
        dest = trees_dir(pins, base) / name
        series = load_series(pins.root, name)
        if dest.exists():
            sourcetree.verify_base(dest, pins.upstream(name))
            say(f"{dest}: exists, applying any patches not yet committed")
        else:
            sourcetree.make(fetch(pins, name), dest, pins.upstream(name))
        apply.apply_tree(pins, dest, name, series)
        trees[name] = dest
        say(f"{dest}: {pins.upstream(name).distribution} {pins.upstream(name).version} "
            f"+ {len(series)} patch commit(s) on tag '{sourcetree.UPSTREAM_TAG}'")
    return trees
