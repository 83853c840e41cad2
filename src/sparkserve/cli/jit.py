"""Verbs the image build runs: `jit prewarm|verify|sass-check` (FlashInfer JIT cache, no GPU needed), and
`jit aot-build|aot-check|aot-install` (a prebuilt FlashInfer module FlashInfer loads without compiling)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK

MODULES = "docker/jit-modules.toml"
SASS_RULES = "docker/jit-sass.toml"
UNBOUND = "docker/jit-unbound.toml"


def cmd_jit_prewarm(a: argparse.Namespace) -> int:
    from sparkserve.image.prewarm import prewarm

    record = dict(item.split("=", 1) for item in a.record or [] if "=" in item)
    prewarm(Path(a.modules), a.set, Path(a.build_info) if a.build_info else None, a.dry_run, record,
            names=a.module, target_arch=a.target_arch,
            cross_link_dir=Path(a.cross_link_dir) if a.cross_link_dir else None)
    return OK


def cmd_jit_verify(a: argparse.Namespace) -> int:
    from sparkserve.image.verify import verify

    problems = verify(Path(a.modules), Path(a.build_info), a.arch, a.cuobjdump)
    for prob in problems:
        print(f"FAIL {prob}")
    return FAILED if problems else OK


def cmd_jit_unit_check(a: argparse.Namespace) -> int:
    from sparkserve.image import unitcheck

    results = unitcheck.run(Path(a.checks), a.cuobjdump, only=a.unit,
                            build_file=Path(a.build_file) if a.build_file else None, timeout_s=a.timeout,
                            jobs=a.jobs, target_arch=a.target_arch,
                            cross_link_dir=Path(a.cross_link_dir) if a.cross_link_dir else None)
    print(unitcheck.table(results))
    if a.report:
        Path(a.report).write_text(unitcheck.report_json(results))
    problems = [p for r in results for p in r.problems]
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        print(f"OK: {len(results)} unit(s) compiled and match {a.checks}")
    return FAILED if problems else OK


def cmd_jit_sass_check(a: argparse.Namespace) -> int:
    from sparkserve.image import sass

    problems, reports = sass.check(Path(a.cache), Path(a.rules), a.cuobjdump, base=a.image_base)
    rules = sass.load_sass_rules(Path(a.rules))
    for r in sorted(reports, key=lambda r: r.module):
        print(f"{r.module}: {sass.describe(r)}")
    print(sass.table(reports, sass.families_shown(reports, rules)))
    if a.report:
        Path(a.report).write_text(sass.report_json(reports, problems))
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        print(f"OK: {len(reports)} module(s) match {a.rules}")
    return FAILED if problems else OK


def cmd_jit_load_check(a: argparse.Namespace) -> int:
    from sparkserve.image import loadcheck

    results, general = loadcheck.check(Path(a.modules), Path(a.build_info), Path(a.unbound))
    problems = list(general)
    for r in results:
        if r.problems:
            problems += [f"{r.name}: {p}" for p in r.problems]
        else:
            why = "".join(f", {n} symbol(s) explained by {rule}" for rule, n in sorted(r.explained.items()))
            print(f"OK {r.name}: {r.arch} library, FlashInfer's AOT artifact, all symbols bound{why}, "
                  f"{r.functions} function(s) loaded")
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        print(f"OK: {len(results)} prewarmed module(s) load as serving loads them")
    return FAILED if problems else OK


def cmd_jit_cubin_compare(a: argparse.Namespace) -> int:
    from sparkserve.image import cubins

    results = cubins.compare(Path(a.a), Path(a.b), a.cuobjdump, base=a.image_base)
    only_a, only_b = cubins.only_in_one(Path(a.a), Path(a.b), base=a.image_base)
    print(cubins.table(results))
    for name in only_a:
        print(f"note: {name} is built in {a.a} only")
    for name in only_b:
        print(f"note: {name} is built in {a.b} only")
    if a.report:
        Path(a.report).write_text(cubins.report_json(results))
    problems = [p for r in results for p in r.problems]
    if not results:
        problems.append(f"no module is built in both {a.a} and {a.b}")
    for prob in problems:
        print(f"FAIL {prob}")
    if not problems:
        elfs = sum(len(r.pairs) for r in results)
        print(f"OK: {len(results)} module(s), {elfs} CUDA ELF(s): the device code of both builds is the same")
    return FAILED if problems else OK


def _providers(so: Path) -> list[Path]:
    """The libraries that resolve `so`'s symbols where it runs: what ldd finds, plus libtvm_ffi and what it
    needs (libstdc++: tvm_ffi loads them globally before any module, which itself does not link them)."""
    import importlib.util
    import subprocess

    def ldd(lib: Path) -> list[Path]:
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=False).stdout
        return [Path(line.split("=>")[1].split("(")[0].strip()) for line in out.splitlines()
                if "=>" in line and "/" in line.split("=>")[1]]

    libs = ldd(so)
    spec = importlib.util.find_spec("tvm_ffi")
    if spec and spec.origin:
        for tvm in sorted((Path(spec.origin).parent / "lib").glob("libtvm_ffi.so*")):
            libs += [tvm, *ldd(tvm)]
    return list(dict.fromkeys(p for p in libs if p.is_file()))


def cmd_jit_aot_check(a: argparse.Namespace) -> int:
    from sparkserve.image import aot

    so = Path(a.so)
    providers = _providers(so) + [Path(p) for p in a.provider or []]
    rep = aot.check_symbols(so, providers)
    print(f"{so}: {len(rep.undefined)} symbol(s) no provider exports ({len(providers)} providers)")
    for name in aot.demangle(rep.eager):
        print(f"  EAGER (dlopen fails): {name[:200]}")
    print(f"  lazily bound (calling them aborts): {len(rep.lazy)}")
    for name in aot.demangle(rep.lazy)[: a.show]:
        print(f"    {name[:200]}")
    print("OK: loads with RTLD_LAZY" if rep.loads else "FAIL: symbols bound at load are missing")
    return OK if rep.loads else FAILED


def cmd_jit_aot_build(a: argparse.Namespace) -> int:
    import os
    import time

    from sparkserve.image import aot
    from sparkserve.image.prewarm import check_environment
    from sparkserve.progress import say

    check_environment()
    if a.jobs:
        os.environ["MAX_JOBS"] = str(a.jobs)
    spec, counts = aot.spec_for(a.units)
    say(f"{spec.name}: {len(spec.sources)} unit(s) of set {a.units}: "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if a.dry_run:
        spec.write_ninja()
        print(spec.ninja_path)
        return OK
    t0 = time.monotonic()
    spec.build(verbose=a.verbose)
    so = Path(spec.jit_library_path)
    say(f"built {so} in {time.monotonic() - t0:.0f} s ({so.stat().st_size / 2**20:.0f} MiB)")
    if a.install_site:
        print(aot.install(so, Path(a.install_site)))
    else:
        print(so)
    return OK


def cmd_jit_aot_install(a: argparse.Namespace) -> int:
    from sparkserve.image import aot

    print(aot.install(Path(a.so), Path(a.site)))
    return OK


def cmd_jit_aot_link(a: argparse.Namespace) -> int:
    from sparkserve.image import aotlinks

    links = aotlinks.link(Path(a.build_info), Path(a.site))
    print(f"{len(links)} prewarmed module(s) linked into {aotlinks.aot_dir(Path(a.site))}")
    return OK


def register(sub: Any) -> None:
    jit = sub.add_parser("jit", help="FlashInfer JIT prewarm (image build)").add_subparsers(required=True)
    sp = jit.add_parser("prewarm", help=f"build the modules of {MODULES}, no GPU needed")
    sp.add_argument("--modules", default=MODULES, help="the module list")
    sp.add_argument("--set", default="full", choices=["full", "ci"], help="ci: only modules with ci = true")
    sp.add_argument("--module", action="append", metavar="NAME",
                    help="build only this module of the list (repeatable; instead of --set)")
    sp.add_argument("--build-info", help="write what was built (JSON) here")
    sp.add_argument("--record", action="append", metavar="KEY=VALUE",
                    help="a build argument to keep in the build info (the image's provenance)")
    sp.add_argument("--dry-run", action="store_true", help="resolve every module's JIT spec, build none")
    sp.add_argument("--target-arch", choices=["amd64", "arm64"],
                    help="the CPU arch the modules are for (default: this machine's); another arch's host "
                         "code is compiled by its cross compiler")
    sp.add_argument("--cross-link-dir",
                    help="for another arch: the folder with its libcudart.so and a libcuda.so stub")
    sp.set_defaults(func=cmd_jit_prewarm)
    sp = jit.add_parser("verify", help="check a prewarmed cache: present, up to date, cubins")
    sp.add_argument("--modules", default=MODULES, help="the module list")
    sp.add_argument("--build-info", required=True, help="the JSON `jit prewarm` wrote")
    sp.add_argument("--arch", help="a cubin arch every module must carry, e.g. sm_121a (needs --cuobjdump)")
    sp.add_argument("--cuobjdump", help="path of cuobjdump")
    sp.set_defaults(func=cmd_jit_verify)
    sp = jit.add_parser("load-check", help="in the image: every prewarmed module loads as serving loads it "
                                           "(arch, AOT artifact, all symbols bound), no GPU needed")
    sp.add_argument("--modules", default=MODULES, help="the module list")
    sp.add_argument("--build-info", required=True, help="the JSON `jit prewarm` wrote")
    sp.add_argument("--unbound", default=UNBOUND, help="the symbols a module may leave unbound, and why")
    sp.set_defaults(func=cmd_jit_load_check)
    sp = jit.add_parser("cubin-compare", help="compare the CUDA ELFs of two copied JIT caches, module by "
                                              "module (e.g. the amd64 and arm64 images')")
    sp.add_argument("a", help="a copy of one image's JIT base folder (holding sparkserve-build-info.json)")
    sp.add_argument("b", help="the other one")
    sp.add_argument("--image-base", default="/opt/jit-cache", help="that folder's path inside the images")
    sp.add_argument("--cuobjdump", required=True, help="path of cuobjdump (nvdisasm beside it)")
    sp.add_argument("--report", help="write every ELF's verdict and hashes (JSON) here")
    sp.set_defaults(func=cmd_jit_cubin_compare)
    sp = jit.add_parser("sass-check", help="opcode rules on the SASS of a copied JIT cache (host)")
    sp.add_argument("--cache", required=True,
                    help="a copy of the image's JIT base folder (holding sparkserve-build-info.json)")
    sp.add_argument("--image-base", default="/opt/jit-cache", help="that folder's path inside the image")
    sp.add_argument("--rules", default=SASS_RULES, help="the SASS rules")
    sp.add_argument("--cuobjdump", required=True, help="path of cuobjdump")
    sp.add_argument("--report", help="write the per-module, per-arch opcode counts (JSON) here")
    sp.set_defaults(func=cmd_jit_sass_check)
    sp = jit.add_parser("unit-check",
                        help="compile chosen units of a JIT module, check their SASS")
    sp.add_argument("--checks", default="docker/jit-unit-checks.toml", help="the units and their SASS rules")
    sp.add_argument("--cuobjdump", required=True, help="path of cuobjdump (nvdisasm beside it)")
    sp.add_argument("--unit", action="append", help="only this unit (repeatable); default: all")
    sp.add_argument("--build-file", help="an existing build.ninja of the module (default: generate it)")
    sp.add_argument("--timeout", type=float, default=1200, help="seconds per unit compile")
    sp.add_argument("--jobs", type=int, default=1, help="units compiled at once (each ~5 GB of memory)")
    sp.add_argument("--report", help="write commands, times, peak RSS and per-kernel opcodes (JSON) here")
    sp.add_argument("--target-arch", choices=["amd64", "arm64"],
                    help="the CPU arch of the objects' host code (default: this machine's)")
    sp.add_argument("--cross-link-dir", help="for another arch: its libcudart.so and a libcuda.so stub")
    sp.set_defaults(func=cmd_jit_unit_check)
    sp = jit.add_parser("aot-build", help="prebuild FlashInfer's SM90 fused-MoE module (fused_moe_90) "
                                          "without a GPU, all of it or a unit set")
    sp.add_argument("--units", default="bf16-mxfp4", choices=["full", "moe", "bf16-mxfp4"],
                    help="full: as FlashInfer builds it (248 units); moe: without the unreferenced "
                         "fpA_intB units (200); bf16-mxfp4: the fixed sources, the BF16 x MXFP4 kernels and "
                         "one unit of throwing stubs for every other kernel (52)")
    sp.add_argument("--jobs", type=int, help="parallel compiles (MAX_JOBS; CUTLASS units take 2-8 GB each)")
    sp.add_argument("--install-site", help="install the result into this site-packages as fused_moe_90.so")
    sp.add_argument("--dry-run", action="store_true",
                    help="write the build file and count units, compile none")
    sp.add_argument("--verbose", action="store_true")
    sp.set_defaults(func=cmd_jit_aot_build)
    sp = jit.add_parser("aot-check", help="will a built module load (RTLD_LAZY): its undefined symbols")
    sp.add_argument("so")
    sp.add_argument("--provider", action="append", help="another library that exports symbols at run time")
    sp.add_argument("--show", type=int, default=10, help="lazily bound symbols to list")
    sp.set_defaults(func=cmd_jit_aot_check)
    sp = jit.add_parser("aot-install", help="put a built module where FlashInfer loads it without compiling")
    sp.add_argument("so")
    sp.add_argument("--site", required=True, help="the site-packages holding flashinfer")
    sp.set_defaults(func=cmd_jit_aot_install)
    sp = jit.add_parser("aot-link", help="let FlashInfer load every prewarmed module as an AOT module "
                                         "(no build file, no ninja), so its JIT workspace can live elsewhere")
    sp.add_argument("--build-info", required=True, help="the JSON `jit prewarm` wrote")
    sp.add_argument("--site", required=True, help="the site-packages holding flashinfer")
    sp.set_defaults(func=cmd_jit_aot_link)
