"""Prove the whole series applies to both forms of both upstreams, and that export round-trips."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import sourcetree
from sparkserve.supply.patches import apply, export
from sparkserve.supply.patches.series import Patch, series_dir
from sparkserve.supply.pins import Pins


def check_tree(pins: Pins, name: str, sdist: Path, patches: list[Patch]) -> list[str]:
    up = pins.upstream(name)
    say(f"[{name}] source tree from {sdist.name}")
    with tempfile.TemporaryDirectory(prefix=f"sparkserve-check-{name}-") as tmp:
        tree = sourcetree.make(sdist, Path(tmp) / name, up)
        try:
            apply.apply_tree(pins, tree, name, patches)
        except SparkserveError as exc:
            return [str(exc)]
        problems = export.diff_against(export.render(tree), series_dir(pins.root, name))
        say(f"[{name}] export round trip: "
            + ("byte-identical to patches/" + name if not problems else "DIFFERS"))
        return [f"{name} export: {p}" for p in problems]


def check_site(pins: Pins, site: Path, series: dict[str, list[Patch]]) -> list[str]:
    problems = []
    for name in series:
        up = pins.upstream(name)
        try:
            sourcetree.verify_commit(site, up)
        except SparkserveError as exc:
            problems.append(str(exc))
    say(f"[site] {site} (staged copies; the environment is not modified)")
    try:
        apply.apply_site(pins, site, series, dry_run=True)
    except SparkserveError as exc:
        problems.append(str(exc))
    return problems


def run(pins: Pins, series: dict[str, list[Patch]], sdists: dict[str, Path] | None,
        site: Path | None) -> list[str]:
    problems: list[str] = []
    for name, patches in series.items():
        up = pins.upstream(name)
        say(f"{name} {up.version}: {len(patches)} patch(es)")
        if sdists is not None:
            problems += check_tree(pins, name, sdists[name], patches)
    if site is not None:
        problems += check_site(pins, site, series)
    return problems
