"""The `sparkserve` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkserve import __version__, devtree, lock, pins, sources, wheels
from sparkserve.errors import SparkserveError
from sparkserve.harness_cli import register as register_harness
from sparkserve.patches import apply, check, export
from sparkserve.patches.series import load_series
from sparkserve.progress import say


def _upstreams(p: pins.Pins, chosen: list[str] | None) -> list[str]:
    names = chosen or list(p.upstreams)
    for n in names:
        p.upstream(n)
    return names


def cmd_sources_fetch(a: argparse.Namespace) -> int:
    p = pins.load()
    dest = Path(a.dest) if a.dest else None
    for name in _upstreams(p, a.upstream):
        print(sources.fetch(p, name, dest))
    return 0


def cmd_patches_list(a: argparse.Namespace) -> int:
    p = pins.load()
    for name in _upstreams(p, a.upstream):
        series = load_series(p.root, name)
        print(f"{name} {p.upstream(name).version}: {len(series)} patch(es)")
        for patch in series:
            h = patch.header
            print(f"  {patch.id}")
            print(f"      {h.summary}")
            print(f"      gate: {h.fields['Gate'].splitlines()[0]}")
            print(f"      verified on: {', '.join(h.verified_on)}; upstream: "
                  f"{h.fields['Forwarded'].splitlines()[0]}")
            print(f"      files: {', '.join(f.path for f in patch.files)}")
    return 0


def cmd_patches_check(a: argparse.Namespace) -> int:
    p = pins.load()
    names = _upstreams(p, a.upstream)
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
        return 1
    total = sum(len(s) for s in series.values())
    print(f"OK: {total} patch(es) apply cleanly to {' and '.join(forms)}")
    return 0


def cmd_patches_apply(a: argparse.Namespace) -> int:
    p = pins.load()
    if bool(a.site) == bool(a.tree):
        raise SparkserveError("give exactly one of --site DIR or --tree DIR")
    if a.tree:
        if not a.upstream or len(a.upstream) != 1:
            raise SparkserveError("--tree needs exactly one --upstream (vllm or flashinfer)")
        name = a.upstream[0]
        entries = apply.apply_tree(p, Path(a.tree), name, load_series(p.root, name))
        print(f"{a.tree}: {len(entries)} patch(es) committed"
              + ("" if entries else " (all already applied)"))
        return 0
    series = {n: load_series(p.root, n) for n in _upstreams(p, a.upstream)}
    result = apply.apply_site(p, Path(a.site), series, dry_run=a.dry_run)
    for name, entries in result.items():
        verb = "would apply" if a.dry_run else "applied"
        note = ""
        if not series[name]:
            note = " (the series is empty)"
        elif not entries:
            note = " (all already applied, nothing to do)"
        print(f"{name}: {verb} {len(entries)} patch(es){note}")
    return 0


def cmd_patches_export(a: argparse.Namespace) -> int:
    p = pins.load()
    out = Path(a.out) if a.out else p.root / "patches" / a.upstream
    files = export.render(Path(a.tree))
    if a.check:
        problems = export.diff_against(files, out)
        for prob in problems:
            print(f"DIFF {prob}")
        return 1 if problems else 0
    export.write(files, out)
    print(f"{out}: wrote series and {len(files) - 1} patch(es)")
    return 0


def cmd_dev_init(a: argparse.Namespace) -> int:
    p = pins.load()
    for name, path in devtree.init(p, Path(a.dir) if a.dir else p.root / devtree.DEFAULT_DIR).items():
        print(f"{name}: {path}")
    return 0


def cmd_lock(a: argparse.Namespace) -> int:
    p = pins.load()
    if a.check:
        problems = lock.check_locks(p)
        for prob in problems:
            print(f"FAIL {prob}")
        if not problems:
            print(f"OK: {len(p.lock_platforms)} lock(s) match pins.toml and re-resolve identically")
        return 1 if problems else 0
    for path in lock.write_locks(p):
        print(path)
    return 0


def cmd_wheels_install(a: argparse.Namespace) -> int:
    print(wheels.install(pins.load(), Path(a.target), a.platform))
    return 0


def cmd_pins(a: argparse.Namespace) -> int:
    p = pins.load()
    for u in p.upstreams.values():
        print(f"{u.distribution}=={u.version}  commit {u.commit}  sdist sha256 {u.sdist_sha256}")
    print(f"torch=={p.torch_version}")
    print(f"FLASHINFER_CUDA_ARCH_LIST={p.flashinfer_arch_list}")
    print(f"TORCH_CUDA_ARCH_LIST={p.torch_arch_list}")
    print(f"base image {p.base_image} (Python {p.python})")
    for lp in p.lock_platforms.values():
        print(f"lock {lp.name}: {lp.file}")
    return 0


def cmd_jit_prewarm(a: argparse.Namespace) -> int:
    from sparkserve.jit.prewarm import prewarm

    prewarm(Path(a.modules), a.set, Path(a.build_info) if a.build_info else None, a.dry_run)
    return 0


def cmd_jit_verify(a: argparse.Namespace) -> int:
    from sparkserve.jit.verify import verify

    problems = verify(Path(a.modules), Path(a.build_info), a.arch, a.cuobjdump)
    for prob in problems:
        print(f"FAIL {prob}")
    return 1 if problems else 0


def cmd_jit_unit_check(a: argparse.Namespace) -> int:
    from sparkserve.jit import unitcheck

    results = unitcheck.run(Path(a.checks), a.cuobjdump, only=a.unit,
                            build_file=Path(a.build_file) if a.build_file else None, timeout_s=a.timeout)
    print(unitcheck.table(results))
    if a.report:
        Path(a.report).write_text(unitcheck.report_json(results))
    problems = [p for r in results for p in r.problems]
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        print(f"OK: {len(results)} unit(s) compiled and match {a.checks}")
    return 1 if problems else 0


def cmd_jit_sass_check(a: argparse.Namespace) -> int:
    from sparkserve.jit import sass

    problems, reports = sass.check(Path(a.cache), Path(a.expectations), a.cuobjdump, base=a.image_base)
    exps = sass.load_expectations(Path(a.expectations))
    for r in sorted(reports, key=lambda r: r.module):
        print(f"{r.module}: {sass.describe(r)}")
    print(sass.table(reports, sass.families_shown(reports, exps)))
    if a.report:
        Path(a.report).write_text(sass.report_json(reports, problems))
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        print(f"OK: {len(reports)} module(s) match {a.expectations}")
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sparkserve", description=__doc__)
    ap.add_argument("--version", action="version", version=f"sparkserve {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("pins", help="print the pinned stack")
    sp.set_defaults(func=cmd_pins)

    src = sub.add_parser("sources", help="pinned upstream sdists").add_subparsers(required=True)
    sp = src.add_parser("fetch", help="download, verify and cache the pinned sdists")
    sp.add_argument("--upstream", action="append", choices=["vllm", "flashinfer"])
    sp.add_argument("--dest", help="cache directory (default: $SPARKSERVE_CACHE/sources)")
    sp.set_defaults(func=cmd_sources_fetch)

    pat = sub.add_parser("patches", help="the patch series").add_subparsers(required=True)
    sp = pat.add_parser("list", help="the series with each patch's gate and status")
    sp.add_argument("--upstream", action="append", choices=["vllm", "flashinfer"])
    sp.set_defaults(func=cmd_patches_list)

    sp = pat.add_parser("check", help="prove the series applies to sdist trees and a site")
    sp.add_argument("--upstream", action="append", choices=["vllm", "flashinfer"])
    sp.add_argument("--site", help="site-packages holding the pinned vllm/flashinfer wheels")
    sp.add_argument("--no-tree", action="store_true", help="skip the source-tree form")
    sp.set_defaults(func=cmd_patches_check)

    sp = pat.add_parser("apply", help="apply the series (all-or-nothing) and write a manifest")
    sp.add_argument("--site", help="an installed environment (site-packages)")
    sp.add_argument("--tree", help="a git source tree made by `dev init`")
    sp.add_argument("--upstream", action="append", choices=["vllm", "flashinfer"])
    sp.add_argument("--dry-run", action="store_true", help="site only: apply to staged copies")
    sp.set_defaults(func=cmd_patches_apply)

    sp = pat.add_parser("export", help="write a tree's patch commits back to patches/")
    sp.add_argument("--tree", required=True)
    sp.add_argument("--upstream", required=True, choices=["vllm", "flashinfer"])
    sp.add_argument("--out", help="default: patches/<upstream>")
    sp.add_argument("--check", action="store_true", help="compare instead of writing")
    sp.set_defaults(func=cmd_patches_export)

    dev = sub.add_parser("dev", help="developer source trees").add_subparsers(required=True)
    sp = dev.add_parser("init", help="git trees of the pinned sdists with the series committed")
    sp.add_argument("--dir", help=f"default: <repo>/{devtree.DEFAULT_DIR}")
    sp.set_defaults(func=cmd_dev_init)

    sp = sub.add_parser("lock", help="generate (or --check) the hash-locked requirements")
    sp.add_argument("--check", action="store_true")
    sp.set_defaults(func=cmd_lock)

    whl = sub.add_parser("wheels", help="the pinned wheels").add_subparsers(required=True)
    sp = whl.add_parser("install", help="install vllm+flashinfer wheels --no-deps into a folder")
    sp.add_argument("--target", required=True)
    sp.add_argument("--platform", choices=["linux-amd64", "linux-arm64"])
    sp.set_defaults(func=cmd_wheels_install)
    register_harness(sub)
    jit = sub.add_parser("jit", help="FlashInfer JIT prewarm (image build)").add_subparsers(required=True)
    sp = jit.add_parser("prewarm", help="build the modules of docker/jit-modules.toml, no GPU needed")
    sp.add_argument("--modules", default="docker/jit-modules.toml", help="the module list")
    sp.add_argument("--set", default="full", choices=["full", "ci"], help="ci: only modules with ci = true")
    sp.add_argument("--build-info", help="write what was built (JSON) here")
    sp.add_argument("--dry-run", action="store_true", help="resolve every module's JIT spec, build none")
    sp.set_defaults(func=cmd_jit_prewarm)
    sp = jit.add_parser("verify", help="check a prewarmed cache: present, up to date, cubins")
    sp.add_argument("--modules", default="docker/jit-modules.toml", help="the module list")
    sp.add_argument("--build-info", required=True, help="the JSON `jit prewarm` wrote")
    sp.add_argument("--arch", help="a cubin arch every module must carry, e.g. sm_121a (needs --cuobjdump)")
    sp.add_argument("--cuobjdump", help="path of cuobjdump")
    sp.set_defaults(func=cmd_jit_verify)
    sp = jit.add_parser("sass-check", help="opcode expectations on the SASS of a copied JIT cache (host)")
    sp.add_argument("--cache", required=True,
                    help="a copy of the image's JIT base folder (holding sparkserve-build-info.json)")
    sp.add_argument("--image-base", default="/opt/jit-cache", help="that folder's path inside the image")
    sp.add_argument("--expectations", default="docker/sass-expectations.toml")
    sp.add_argument("--cuobjdump", required=True, help="path of cuobjdump")
    sp.add_argument("--report", help="write the per-module, per-arch opcode counts (JSON) here")
    sp.set_defaults(func=cmd_jit_sass_check)
    sp = jit.add_parser("unit-check",
                        help="compile chosen units of a JIT module one at a time, check their SASS")
    sp.add_argument("--checks", default="docker/jit-unit-checks.toml", help="the units and their SASS rules")
    sp.add_argument("--cuobjdump", required=True, help="path of cuobjdump (nvdisasm beside it)")
    sp.add_argument("--unit", action="append", help="only this unit (repeatable); default: all")
    sp.add_argument("--build-file", help="an existing build.ninja of the module (default: generate it)")
    sp.add_argument("--timeout", type=float, default=1200, help="seconds per unit compile")
    sp.add_argument("--report", help="write commands, times, peak RSS and per-kernel opcodes (JSON) here")
    sp.set_defaults(func=cmd_jit_unit_check)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SparkserveError as exc:
        say(f"sparkserve: error: {exc}")
        return 2
    except KeyboardInterrupt:
        say("sparkserve: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
