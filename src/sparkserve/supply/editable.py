"""Editable installs of the dev trees into the dev container's venv (`sparkserve dev install`).

vLLM: the tree's Python on the compiled ops of the locked wheel. vLLM's setup.py takes them from a wheel
file (VLLM_USE_PRECOMPILED=1, VLLM_PRECOMPILED_WHEEL_LOCATION); the file must be the lock's (its sha256 is
checked), and VLLM_VERSION_OVERRIDE gives the pinned version (the tree's git tag is no version).
FlashInfer: its build backend links the tree's csrc/, include/ and 3rdparty/ (CUTLASS, CCCL, spdlog) into
flashinfer/data, so the JIT compiles the tree's sources. FLASHINFER_BUILD_NO_PIP=1 (the backend would
pip-install tools), BUILD_NVEP=0 (no NCCL-EP/NIXL-EP builds), and version.txt holds the pinned version
(without it the backend writes 0.0.0+unknown into _build_meta.py, which moves the JIT cache).

Offline: uv with --offline --no-index --no-build-isolation --no-deps; the build backends are in the image.
What the builds leave in a tree stays out of its git status, so `patches export` sees only real edits:
generated paths are ignored through .git/info/exclude, tracked files a backend rewrites (vllm/_version.py,
flashinfer/_build_meta.py) are restored from HEAD, and an install that leaves anything else fails.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil, sourcetree
from sparkserve.supply.lock import requirement_block
from sparkserve.supply.pins import Pins
from sparkserve.supply.sources import sha256_file
from sparkserve.supply.uvtool import uv_bin
from sparkserve.supply.wheels import host_lock_platform

ENV_WHEELS = "SPARKSERVE_DEV_WHEELS"
DEFAULT_WHEELS = "/opt/wheels"
EXCLUDE_HEADER = "# sparkserve dev install: what the editable install generates"
# Paths the builds create, ignored in the tree (vLLM's .gitignore, part of its sdist, covers the compiled
# ops and the Python trees it extracts from the wheel; FlashInfer's sdist has no .gitignore).
GENERATED: dict[str, tuple[str, ...]] = {
    "vllm": ("/build/",),
    "flashinfer": ("/version.txt", "/flashinfer/data/", "/build/", "/build_nvep/", "__pycache__/",
                   "*.egg-info/"),
}
# The module each upstream's tree provides.
IMPORT_NAME = {"vllm": "vllm", "flashinfer": "flashinfer"}


@dataclass
class Installed:
    upstream: str
    tree: Path
    seconds: float = 0.0
    skipped: bool = False
    restored: list[str] = field(default_factory=list)


def wheels_dir() -> Path:
    return Path(os.environ.get(ENV_WHEELS, DEFAULT_WHEELS))


def locked_wheel(pins: Pins, where: Path, platform: str | None = None) -> Path:
    """The vLLM wheel file in `where` whose sha256 the lock of this platform lists."""
    up = pins.upstream("vllm")
    found = sorted(where.glob(f"vllm-{up.version}-*.whl"))
    if not found:
        raise SparkserveError(f"no vllm {up.version} wheel in {where}: the dev image holds the locked one "
                              f"(Dockerfile, target dev); set {ENV_WHEELS} if it is elsewhere")
    lp = pins.lock_platforms[platform or host_lock_platform()]
    block = requirement_block((pins.root / lp.file).read_text(), up.distribution)
    hashes = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    for wheel in found:
        if sha256_file(wheel) in hashes:
            return wheel
    raise SparkserveError(f"{', '.join(str(w) for w in found)}: not the locked vllm wheel (no sha256 of "
                          f"{lp.file} matches); rebuild the dev image")


def build_env(pins: Pins, name: str, wheel: Path | None = None) -> dict[str, str]:
    """The variables the upstream's build backend needs for an offline editable install on this stack."""
    up = pins.upstream(name)
    if name == "vllm":
        if wheel is None:
            raise SparkserveError("the vLLM editable install needs the locked wheel")
        return {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": str(wheel),
                "VLLM_VERSION_OVERRIDE": up.version, "VLLM_TARGET_DEVICE": "cuda"}
    return {"FLASHINFER_BUILD_NO_PIP": "1", "BUILD_NVEP": "0"}


def installed_from(distribution: str) -> Path | None:
    """The folder a distribution is installed editable from, None if it is not installed so."""
    try:
        text = md.distribution(distribution).read_text("direct_url.json")
    except md.PackageNotFoundError:
        return None
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return None
    url = str(data.get("url", ""))
    if not data.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    return Path(unquote(urlparse(url).path))


def ensure_excludes(tree: Path, patterns: tuple[str, ...]) -> None:
    exclude = tree / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    missing = [p for p in patterns if p not in lines]
    if missing:
        head = [] if EXCLUDE_HEADER in lines else [EXCLUDE_HEADER]
        exclude.write_text("".join(f"{ln}\n" for ln in [*lines, *head, *missing]))


def match_owner(tree: Path) -> int:
    """Give what this process made in the tree (build outputs, git's index) to the tree's owner; returns
    how many paths changed hands. The dev container runs as root on trees of the host user, who must still
    be able to edit, commit and delete everything in them."""
    if os.geteuid() != 0:
        return 0
    owner = tree.stat()
    if owner.st_uid == 0:
        return 0
    changed = 0
    for top, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            if os.lstat(path).st_uid != owner.st_uid:
                os.lchown(path, owner.st_uid, owner.st_gid)
                changed += 1
    return changed


def run_build(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _changed_path(line: str) -> str:
    return line[3:].strip('"')


def install(pins: Pins, name: str, tree: Path, *, python: str = sys.executable,
            wheels: Path | None = None, force: bool = False) -> Installed:
    """Install one tree editable into python's environment (skipped when it already is, unless force)."""
    up = pins.upstream(name)
    tree = tree.resolve()
    if not force and installed_from(up.distribution) == tree:
        return Installed(name, tree, skipped=True)
    wheel = locked_wheel(pins, wheels or wheels_dir()) if name == "vllm" else None
    sourcetree.configure(tree)
    ensure_excludes(tree, GENERATED[name])
    if name == "flashinfer":
        (tree / "version.txt").write_text(up.version + "\n")
    before = set(gitutil.dirty(tree))
    cmd = [uv_bin(), "pip", "install", "--python", python, "--offline", "--no-index", "--no-deps",
           "--no-build-isolation", "--no-cache", "--no-config", *(["--reinstall"] if force else []),
           "--editable", str(tree)]
    say(f"{name}: editable install from {tree}" + (f" on the compiled ops of {wheel.name}" if wheel else ""))
    t0 = time.monotonic()
    proc = run_build(cmd, {**os.environ, **build_env(pins, name, wheel)}, tree)
    if proc.returncode != 0:
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise SparkserveError(f"the editable install of {tree} failed ({' '.join(cmd)}):\n    {tail}")
    rewritten = sorted(_changed_path(ln) for ln in set(gitutil.dirty(tree)) - before if ln.startswith(" M "))
    if rewritten:
        gitutil.run(["checkout", "-q", "HEAD", "--", *rewritten], tree)
    left = sorted(set(gitutil.dirty(tree)) - before)
    match_owner(tree)
    if left:
        raise SparkserveError(f"the editable install left changes in {tree} that `patches export` would "
                              f"refuse: {', '.join(left)} (a generated path to add to GENERATED in "
                              f"{Path(__file__).name}?)")
    return Installed(name, tree, time.monotonic() - t0, restored=rewritten)
