"""Whether the disk has room for a test run, said before the run writes anything.

A full disk fails the first phase that writes, with a message about anything but the disk (pip's
ensurepip, a tar, a layer commit). scripts/test.sh runs this first, standard library only (no venv yet):

    python3 -m sparkserve_lab.testing.room --phases "setup lint ... ansible" PATH [PATH ...]

NEEDS_GB is what each phase added to the disk on a cold run (the drop of the least free space from one
phase to the next in .work/test/phases.json; docs/CI.md). Exit status: 0, room for a cold run of the
phases that will run; SHORT (3), less than that but enough for the phases without Docker: Docker's data
may already hold the images and build cache a warm run reuses, so the run goes on (scripts/test.sh first
reclaims what earlier runs left there, scripts/ci/reclaim.sh); REFUSE (1), not even the phases without
Docker fit. Short of the need, the message names the free space, the need, what holds the disk and how to
free it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

GB = 1e9
# Growth per phase on a cold run, rounded up: measured (2 cores, a fresh machine and clone) for the phases up
# to image-arm64, the engine's install counted in lint-docker; for the phases after it, a warm run's growth
# (levels-cpu 4.3 GB, its venv's caches and records) or their images' sizes (docs/CI.md), whichever is more.
# patches-site's 3 GB are a throwaway site, removed by the phase.
NEEDS_GB: dict[str, float] = {
    "setup": 0.5,
    "lint": 0.0,
    "unit": 0.0,
    "fetch": 0.5,
    "patches-tree": 1.0,
    "patches-site": 3.0,
    "lock": 0.5,
    "lint-docker": 0.5,
    "image": 31.0,
    "image-arm64": 31.0,
    "jit-units": 2.0,
    "dev": 3.0,
    "serve-cpu": 7.0,
    "levels-cpu": 4.5,
    "ansible": 3.0,
}
# The phases that need Docker (and so may find their images and cache from an earlier run).
DOCKER_PHASES = frozenset({"lint-docker", "image", "image-arm64", "jit-units", "dev", "serve-cpu",
                           "levels-cpu", "ansible"})
DOCKER_ROOT = Path("/var/lib/docker")
OK, REFUSE, SHORT = 0, 1, 3


def free_bytes(paths: Iterable[Path]) -> tuple[int, Path] | None:
    """The least free space among the file systems of `paths` (the nearest existing parent of each)."""
    least: tuple[int, Path] | None = None
    for path in paths:
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
        if least is None or free < least[0]:
            least = (free, path)
    return least


def need_gb(phases: Iterable[str]) -> tuple[float, float]:
    """(all the phases, those without Docker) in GB; a phase the table does not know counts 1 GB."""
    chosen = list(phases)
    total = sum(NEEDS_GB.get(p, 1.0) for p in chosen)
    without_docker = sum(NEEDS_GB.get(p, 1.0) for p in chosen if p not in DOCKER_PHASES)
    return total, without_docker


def holders(docker_root: Path, work: Path) -> list[str]:
    """Lines that say what holds the disk and the command that frees it."""
    lines = []
    if docker_root.is_dir():
        lines.append(f"  Docker's data ({docker_root}): images and build cache of earlier runs; "
                     "SPARKSERVE_CI_CLEAN=1 bash scripts/ci/footprint.sh removes this project's images, "
                     "docker builder prune -f the engine's build cache")
    if work.is_dir():
        lines.append(f"  {work}: venvs, sdists and logs of an earlier run: rm -rf {work}")
    lines.append("  or skip phases by name: SKIP_PHASES=\"image image-arm64 jit-units\" scripts/test.sh "
                 "(docs/CI.md lists them)")
    return lines


def check(phases: list[str], paths: list[Path], docker_root: Path = DOCKER_ROOT,
          work: Path = Path(".work")) -> tuple[int, str]:
    """(exit status, message) of the room check."""
    least = free_bytes(paths)
    if least is None:
        return OK, "room: no path to check"
    free, where = least
    total, floor = need_gb(phases)
    head = (f"room: {free / GB:.1f} GB free at {where}; the {len(phases)} phases to run need about "
            f"{total:.0f} GB on a cold run ({floor:.0f} GB without Docker's)")
    if free >= total * GB:
        return OK, head
    if free < floor * GB:
        return REFUSE, "\n".join([head + ": not enough to start. Free space first:",
                                  *holders(docker_root, work)])
    return SHORT, "\n".join([head + ": a cold run may fill the disk (a warm one reuses Docker's data). "
                         "To make room:", *holders(docker_root, work)])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="room", description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", required=True, help="space-separated names of the phases that will run")
    ap.add_argument("--work", type=Path, default=Path(".work"), help="the run's work folder")
    ap.add_argument("paths", type=Path, nargs="+", help="paths whose file systems the run writes")
    a = ap.parse_args(argv)
    status, message = check(a.phases.split(), a.paths, work=a.work)
    print(message, file=sys.stderr if status == REFUSE else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
