"""Verbs of the patch series: `patches list|check|apply|export`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, print_json
from sparkserve.cli.supply import UPSTREAMS, upstreams
from sparkserve.errors import SparkserveError
from sparkserve.supply import devtree, pins, sources
from sparkserve.supply.patches import apply, check, export
from sparkserve.supply.patches.series import load_series


def cmd_patches_list(a: argparse.Namespace) -> int:
    p = pins.load()
    if a.json_output:
        print_json({name: [{"id": patch.id, "summary": patch.header.summary,
                            "header": patch.header.lines(indent=""), "files": [f.path for f in patch.files]}
                           for patch in load_series(p.root, name)] for name in upstreams(p, a.upstream)})
        return OK
    for name in upstreams(p, a.upstream):
        series = load_series(p.root, name)
        print(f"{name} {p.upstream(name).version}: {len(series)} patch(es)")
        for patch in series:
            if a.brief:
                print(f"  {patch.id}: {patch.header.summary}")
                continue
            print(f"\n  {patch.id}")
            print("\n".join(patch.header.lines(indent="    ")))
            print(f"    Files: {', '.join(f.path for f in patch.files)}")
        if not a.brief:
            print()
    return OK


def cmd_patches_check(a: argparse.Namespace) -> int:
    p = pins.load()
    names = upstreams(p, a.upstream)
    series = {n: load_series(p.root, n) for n in names}
    sdists = None if a.no_tree else {n: sources.fetch(p, n) for n in names}
    site = Path(a.site) if a.site else None
    if sdists is None and site is None:
        raise SparkserveError("nothing to check: drop --no-tree or give --site")
    problems = check.run(p, series, sdists, site)
    forms = (["source trees"] if sdists else []) + ([f"site {site}"] if site else [])
    if problems:
        for prob in problems:
            print(f"FAIL {prob}")
        return FAILED
    total = sum(len(s) for s in series.values())
    print(f"OK: {total} patch(es) apply cleanly to {' and '.join(forms)}")
    return OK


def cmd_patches_apply(a: argparse.Namespace) -> int:
    p = pins.load()
    if bool(a.site) == bool(a.tree):
        raise SparkserveError("give exactly one of --site DIR or --tree DIR")
    if a.overlay and not a.site:
        raise SparkserveError("--overlay describes a site: use it with --site")
    if a.tree:
        if not a.upstream or len(a.upstream) != 1:
            raise SparkserveError("--tree needs exactly one --upstream (vllm or flashinfer)")
        name = a.upstream[0]
        entries = apply.apply_tree(p, Path(a.tree), name, load_series(p.root, name))
        print(f"{a.tree}: {len(entries)} patch(es) committed"
              + ("" if entries else " (all already applied)"))
        return OK
    series = {n: load_series(p.root, n) for n in upstreams(p, a.upstream)}
    result = apply.apply_site(p, Path(a.site), series, dry_run=a.dry_run,
                              overlay=Path(a.overlay) if a.overlay else None)
    for name, entries in result.items():
        verb = "would apply" if a.dry_run else "applied"
        note = ""
        if not series[name]:
            note = " (the series is empty)"
        elif not entries:
            note = " (all already applied, nothing to do)"
        print(f"{name}: {verb} {len(entries)} patch(es){note}")
    return OK


def cmd_patches_export_upstream(a: argparse.Namespace) -> int:
    from sparkserve.supply.patches import forward

    p = pins.load()
    out = Path(a.to_upstream)
    for name in upstreams(p, [a.upstream] if a.upstream else list(UPSTREAMS)):
        branch = forward.write(p, name, sources.fetch(p, name), load_series(p.root, name), out)
        print(f"{branch.tree}: branch {branch.branch}, {len(branch.commits)} commit(s) on the pinned "
              f"{p.upstream(name).distribution} {p.upstream(name).version}"
              + (f": {', '.join(branch.commits)}" if branch.commits else ""))
        for pid, why in branch.held_back.items():
            print(f"  held back {pid}: not ready: {why}")
    return OK


def cmd_patches_export(a: argparse.Namespace) -> int:
    if a.to_upstream:
        return cmd_patches_export_upstream(a)
    if not a.upstream:
        raise SparkserveError("give --upstream vllm|flashinfer (or --to-upstream DIR for upstream branches)")
    p = pins.load()
    tree = Path(a.tree) if a.tree else devtree.trees_dir(p) / a.upstream
    out = Path(a.out) if a.out else p.root / "patches" / a.upstream
    export.verify_tree(tree, p.upstream(a.upstream))
    files = export.render(tree)
    if a.check:
        problems = export.diff_against(files, out)
        for prob in problems:
            print(f"DIFF {prob}")
        if not problems:
            print(f"{out}: byte-identical to the commits of {tree}")
        return FAILED if problems else OK
    status = export.write(files, out)
    touched = [f"{name} ({how})" for name, how in sorted(status.items()) if how != "unchanged"]
    print(f"{out}: series and {len(files) - 1} patch(es) from {tree}: "
          + (", ".join(touched) if touched else "byte-identical, nothing changed"))
    return OK


def register(sub: Any) -> None:
    pat = sub.add_parser("patches", help="the patch series").add_subparsers(required=True)
    sp = pat.add_parser("list", help="the series, each patch with its whole DEP-3 header (gate, proof)")
    sp.add_argument("--upstream", action="append", choices=UPSTREAMS)
    sp.add_argument("--brief", action="store_true", help="one line per patch: its id and summary")
    sp.set_defaults(func=cmd_patches_list, json_data=True)

    sp = pat.add_parser("check", help="prove the series applies to sdist trees and a site")
    sp.add_argument("--upstream", action="append", choices=UPSTREAMS)
    sp.add_argument("--site", help="site-packages holding the pinned vllm/flashinfer wheels")
    sp.add_argument("--no-tree", action="store_true", help="skip the source-tree form")
    sp.set_defaults(func=cmd_patches_check)

    sp = pat.add_parser("apply", help="apply the series (all-or-nothing) and write a manifest")
    sp.add_argument("--site", help="an installed environment (site-packages)")
    sp.add_argument("--tree", help="a git source tree made by `dev init`")
    sp.add_argument("--upstream", action="append", choices=UPSTREAMS)
    sp.add_argument("--dry-run", action="store_true", help="site only: apply to staged copies")
    sp.add_argument("--overlay", help="site only: also write what changed here (files/<path>, and "
                                      "deleted.txt listing removed files), for an image layer")
    sp.set_defaults(func=cmd_patches_apply)

    sp = pat.add_parser("export", help="write a tree's patch commits back to patches/ (never deletes one)")
    sp.add_argument("--tree", help=f"a tree made by `dev init` (default: {devtree.DEFAULT_DIR}/<upstream>, "
                    f"or ${devtree.ENV_DIR}/<upstream>)")
    sp.add_argument("--upstream", choices=UPSTREAMS,
                    help="which series (required unless --to-upstream; there it limits to one upstream)")
    sp.add_argument("--out", help="default: patches/<upstream>")
    sp.add_argument("--to-upstream", metavar="DIR",
                    help="instead: DIR/<upstream>, a git tree of the pinned sdist with the patches whose "
                         "DEP-3 Forward says ready as commits on branch sparkserve-forward-<version>")
    sp.add_argument("--check", action="store_true", help="compare instead of writing")
    sp.set_defaults(func=cmd_patches_export)
