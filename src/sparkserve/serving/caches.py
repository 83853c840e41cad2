"""The caches a start fills, kept across restarts in the cache volume (`SPARKSERVE_CACHE_DIR`, the compose
volume `sparkserve-cache` at /var/cache/sparkserve), one folder per image build:

    /var/cache/sparkserve/<build-id>/
      vllm/       VLLM_CACHE_ROOT: torch.compile's AOT-compiled model (a restart loads it instead of
                  compiling: 38.9 s -> 0.23 s on an H100, docs/GPU.md section 5)
      triton/     TRITON_CACHE_DIR: Triton kernels compiled at start
      inductor/   TORCHINDUCTOR_CACHE_DIR
      xdg/        XDG_CACHE_HOME: whatever else defaults to ~/.cache
      flashinfer/ FLASHINFER_WORKSPACE_BASE: a FlashInfer module the image did not prewarm, compiled at
                  start (the prewarmed ones load from /opt/jit-cache as AOT modules, image/aotlinks.py)

The build id (serving/moe/state.py: installed versions, applied patches, JIT arch list) keeps a cache made
by another image build from being used: a rebuilt image starts a fresh folder, and folders of other builds
are reported (not deleted: a rollback to the previous image finds its cache again) with how to remove them.
A variable the environment already sets wins over the folder here.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

FOLDERS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "XDG_CACHE_HOME": "xdg",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}


class CacheError(Exception):
    """A volume cannot be used (not writable): the message says how to fix it."""


@dataclass
class CachePlan:
    folder: Path
    state: str  # "reused" | "fresh"
    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            return True
    except OSError:
        return False


def _size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def chown_command(path: Path | str) -> str:
    """The one-off command that gives a volume's folder to this (the serving) user."""
    # serve mounts every volume read-write; compose drops all capabilities, so chown needs CHOWN back.
    return (f"docker compose run --rm --no-deps --user 0 --cap-add CHOWN --entrypoint chown serve "
            f"-R {os.getuid()}:{os.getgid()} {path}")


def fix_hint(root: Path, volume: str = "sparkserve-cache", removable: bool = True) -> str:
    hint = (f"{root} is not writable by uid {os.getuid()}: a volume made by an older image (owned by root) "
            f"or a read-only mount. Give it to this user once: `{chown_command(root)}`")
    if removable:
        hint += (f", or remove the volume (`docker volume rm sparkserve_{volume}`: the next start compiles "
                 "again)")
    return hint


def permits_write(mode: int, owner: int, group: int, uid: int, gids: set[int]) -> bool:
    """Whether the permission bits let `uid` (in groups `gids`) write, whatever the mount says: the
    preflight sees the volumes read-only and must still tell whether serve will be able to write them."""
    if uid == 0:
        return True
    if owner == uid:
        return bool(mode & 0o200)
    if group in gids:
        return bool(mode & 0o020)
    return bool(mode & 0o002)


def check_owner(path: Path, volume: str, removable: bool = True) -> None:
    """For the preflight: raise CacheError when an existing volume is not this user's to write."""
    if not path.is_dir():
        return  # made by the first start
    st = path.stat()
    if not permits_write(st.st_mode, st.st_uid, st.st_gid, os.getuid(), {os.getgid(), *os.getgroups()}):
        raise CacheError(fix_hint(path, volume, removable))


def require_writable(path: Path, volume: str, removable: bool = True) -> None:
    """Raise CacheError naming the fix when the serving user cannot write `path` (a volume's mount)."""
    if not _writable(path):
        raise CacheError(fix_hint(path, volume, removable))


def prebuilt_line(site: Path | None) -> str | None:
    """What FlashInfer loads without compiling; None outside an image (no AOT folder)."""
    from sparkserve.image import aotlinks

    if site is None or not aotlinks.aot_dir(site).is_dir():
        return None
    good, dangling = aotlinks.linked(site)
    line = f"  flashinfer: {good} prewarmed module(s) load without compiling ({aotlinks.aot_dir(site)})"
    if dangling:
        names = ", ".join(p.parent.name for p in dangling[:3])
        line += (f"; {len(dangling)} link(s) lead nowhere ({names}): those compile into the cache volume; "
                 "rebuild the image")
    return line


def prepare(root: Path, build: str, env: Mapping[str, str]) -> CachePlan:
    """The cache folder of this build under `root`, the variables that point into it, and what to say."""
    require_writable(root, "sparkserve-cache")
    folder = root / build
    # reused: something was compiled into it; its empty folders alone (a --plan made them) are fresh
    state = "reused" if folder.is_dir() and any(p.is_file() for p in folder.rglob("*")) else "fresh"
    require_writable(folder, "sparkserve-cache")
    plan = CachePlan(folder, state)
    for var, sub in FOLDERS.items():
        if env.get(var):
            plan.lines.append(f"  cache: {var}={env[var]} (set in the environment, kept)")
            continue
        (folder / sub).mkdir(exist_ok=True)
        plan.env[var] = str(folder / sub)
    size = _size(folder) if state == "reused" else 0
    what = (f"reused ({size / 1e6:.0f} MB from an earlier start of this build)" if state == "reused" else
            "fresh (first start of this build: compiles are stored for the next one)")
    plan.lines.insert(0, f"  caches: {folder}: {what}")
    others = sorted(p for p in root.iterdir()
                    if p.is_dir() and p.name != build and not p.name.startswith("."))
    if others:
        mb = sum(_size(p) for p in others) / 1e6
        names = ", ".join(p.name for p in others[:3])
        plan.lines.append(f"  caches of {len(others)} other image build(s) in {root} ({mb:.0f} MB, {names}) "
                          f"are not used; remove one with `rm -rf {root}/<build-id>`")
    return plan

