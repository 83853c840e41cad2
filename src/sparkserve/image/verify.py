"""Check a prewarmed JIT cache in place: every built module is there, up to date for this environment
(ninja has nothing to do, so serving will not recompile it) and carries cubins for the wanted arch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.image import modules as mlist
from sparkserve.image.prewarm import check_environment, library
from sparkserve.image.specs import jit_spec

_SM = re.compile(r"sm_\d+[af]?")


def cubin_archs(so: Path, cuobjdump: str) -> set[str]:
    proc = subprocess.run([cuobjdump, "--list-elf", str(so)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SparkserveError(f"cuobjdump --list-elf {so} failed: {proc.stderr.strip()}")
    return set(_SM.findall(proc.stdout))


def verify(list_path: Path, build_info: Path, want_arch: str | None, cuobjdump: str | None) -> list[str]:
    """Problems found (empty: all good). Prints one line per module."""
    check_environment()
    info = json.loads(build_info.read_text())
    built = {b["name"]: b for b in info["built"]}
    names = info.get("modules")
    chosen, _ = mlist.select(mlist.load(list_path), str(info["jit_set"]),
                             [str(n) for n in names] if isinstance(names, list) else None)
    ninja = shutil.which("ninja")
    if ninja is None:
        raise SparkserveError("ninja is not on PATH")
    problems: list[str] = []
    for m in chosen:
        if m.name not in built:
            problems.append(f"{m.name}: listed for set {info['jit_set']} but not in {build_info}")
            continue
        spec = jit_spec(m)
        so = library(spec)
        if not so.is_file():
            problems.append(f"{m.name}: {so} is missing")
            continue
        # The exact build file serving would write; ninja -n tells whether it would rebuild anything.
        spec.write_ninja()
        dry = subprocess.run([ninja, "-n", "-C", str(spec.build_dir), "-f", str(spec.ninja_path)],
                             capture_output=True, text=True, check=False)
        if dry.returncode != 0 or "no work to do" not in dry.stdout:
            problems.append(f"{m.name}: serving would recompile it: {dry.stdout.strip()[-400:]}")
            continue
        archs: set[str] = set()
        if cuobjdump:
            archs = cubin_archs(so, cuobjdump)
            if want_arch and want_arch not in archs:
                problems.append(f"{m.name}: no {want_arch} cubin in {so} (has: {sorted(archs)})")
                continue
        print(f"OK {m.name}: {spec.name} up to date" + (f", cubins {sorted(archs)}" if archs else ""))
    return problems
