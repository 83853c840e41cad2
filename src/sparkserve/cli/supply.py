"""Verbs of the supply chain: `pins`, `sources fetch`, `lock`, `wheels install`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, print_json
from sparkserve.errors import SparkserveError
from sparkserve.supply import lock, pins, sources, wheels

UPSTREAMS = ["vllm", "flashinfer"]


def upstreams(p: pins.Pins, chosen: list[str] | None) -> list[str]:
    names = chosen or list(p.upstreams)
    for n in names:
        p.upstream(n)
    return names


def cmd_pins(a: argparse.Namespace) -> int:
    p = pins.load()
    if a.json_output:
        print_json({
            "upstreams": {name: {"distribution": u.distribution, "version": u.version, "commit": u.commit,
                                 "sdist_sha256": u.sdist_sha256} for name, u in p.upstreams.items()},
            "torch": p.torch_version, "flashinfer_cuda_arch_list": p.flashinfer_arch_list,
            "torch_cuda_arch_list": p.torch_arch_list, "base_image": p.base_image, "python": p.python,
            "locks": {lp.name: {"file": str(lp.file), "dev_file": str(lp.dev_file) if lp.dev_file else None}
                      for lp in p.lock_platforms.values()}})
        return OK
    for u in p.upstreams.values():
        print(f"{u.distribution}=={u.version}  commit {u.commit}  sdist sha256 {u.sdist_sha256}")
    print(f"torch=={p.torch_version}")
    print(f"FLASHINFER_CUDA_ARCH_LIST={p.flashinfer_arch_list}")
    print(f"TORCH_CUDA_ARCH_LIST={p.torch_arch_list}")
    print(f"base image {p.base_image} (Python {p.python})")
    for lp in p.lock_platforms.values():
        print(f"lock {lp.name}: {lp.file}" + (f" (dev container: {lp.dev_file})" if lp.dev_file else ""))
    return OK


def cmd_sources_fetch(a: argparse.Namespace) -> int:
    p = pins.load()
    dest = Path(a.dest) if a.dest else None
    for name in upstreams(p, a.upstream):
        print(sources.fetch(p, name, dest, refetch=a.refetch))
    return OK


def cmd_lock(a: argparse.Namespace) -> int:
    p = pins.load()
    if a.check_wheels:
        if a.platform not in p.lock_platforms:
            raise SparkserveError(f"--platform {a.platform!r}: pins.toml has {', '.join(p.lock_platforms)}")
        problems = lock.wheel_problems(Path(a.check_wheels), p.lock_platforms[a.platform].uv_platform,
                                       p.python, p.index_url)
        for prob in problems:
            print(f"FAIL {prob}")
        if not problems:
            print(f"OK: every release in {a.check_wheels} has a wheel for {a.platform}")
        return FAILED if problems else OK
    if a.check:
        problems = lock.check_locks(p)
        for prob in problems:
            print(f"FAIL {prob}")
        if not problems:
            print(f"OK: {len(lock.lock_files(p))} lock(s) match pins.toml and re-resolve identically")
        return FAILED if problems else OK
    for path in lock.write_locks(p):
        print(path)
    return OK


def cmd_wheels_install(a: argparse.Namespace) -> int:
    print(wheels.install(pins.load(), Path(a.target), a.platform))
    return OK


def register(sub: Any) -> None:
    sp = sub.add_parser("pins", help="print the pinned stack")
    sp.set_defaults(json_data=True)
    sp.set_defaults(func=cmd_pins)

    src = sub.add_parser("sources", help="pinned upstream sdists").add_subparsers(required=True)
    sp = src.add_parser("fetch", help="download, verify and cache the pinned sdists")
    sp.add_argument("--upstream", action="append", choices=UPSTREAMS)
    sp.add_argument("--dest", help="cache directory (default: $SPARKSERVE_CACHE/sources)")
    sp.add_argument("--refetch", action="store_true",
                    help="delete the cached copy and download again (e.g. after a sha256 mismatch)")
    sp.set_defaults(func=cmd_sources_fetch)

    sp = sub.add_parser("lock", help="generate (or --check) the hash-locked requirements")
    sp.add_argument("--check", action="store_true",
                    help="re-resolve every lock and compare; check each release has a wheel for its platform")
    sp.add_argument("--check-wheels", metavar="LOCK",
                    help="only check that every release of this lock file has a wheel for --platform")
    sp.add_argument("--platform", default="linux-arm64", help="a [lock.platforms] name of pins.toml")
    sp.set_defaults(func=cmd_lock)

    whl = sub.add_parser("wheels", help="the pinned wheels").add_subparsers(required=True)
    sp = whl.add_parser("install", help="install vllm+flashinfer wheels --no-deps into a folder")
    sp.add_argument("--target", required=True)
    sp.add_argument("--platform", choices=["linux-amd64", "linux-arm64"])
    sp.set_defaults(func=cmd_wheels_install)
