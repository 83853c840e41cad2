"""Hash-locked requirements per platform, generated from pins.toml with `uv pip compile`."""

from __future__ import annotations

import difflib
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply.pins import LockPlatform, Pins
from sparkserve.supply.uvtool import uv_bin

COMPILE_COMMAND = "sparkserve lock"
_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)
# uv's words for a pinned release without a wheel for the platform it installs for.
_NO_WHEEL = re.compile(r"Because (\S+?)==(\S+) has no wheels with a matching platform tag")
_WHEELS_FOR = re.compile(r"hint: Wheels are available for `([^`]+)`[^:]*: (.*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compile_lock(pins: Pins, platform: LockPlatform, out: Path, dev: bool = False) -> None:
    """Resolve pins.toml's [lock] for one platform into out (with hashes).

    dev: resolve [lock.dev] instead, with the platform's lock as constraints, so the dev container adds
    packages to the production stack without changing any of its versions.
    """
    with tempfile.TemporaryDirectory() as tmp:
        req, ovr = Path(tmp) / "requirements.in", Path(tmp) / "overrides.txt"
        req.write_text("\n".join(pins.lock_dev_requirements if dev else pins.lock_requirements) + "\n")
        ovr.write_text("\n".join(pins.lock_overrides) + "\n")
        extra: list[str] = []
        if dev:
            # under its own name: it ends up in the lock's "# via -c ..." comments
            base = Path(tmp) / Path(platform.file).name
            base.write_bytes((pins.root / platform.file).read_bytes())
            extra = ["--constraint", base.name]
        # relative input names: they end up in the lock's "# via" comments
        what = f"[lock.dev], {platform.name}" if dev else platform.name
        cmd = [
            uv_bin(), "pip", "compile", req.name, *extra,
            "--override", ovr.name,
            "--python-version", pins.python,
            "--python-platform", platform.uv_platform,
            "--generate-hashes",
            "--exclude-newer", pins.lock_exclude_newer,
            "--index-url", pins.index_url,
            "--no-config",
            # The header names the wheel platform: the image's stack stage installs the lock for it.
            "--custom-compile-command",
            f"{COMPILE_COMMAND}  # from pins.toml, {what} (--python-platform {platform.uv_platform})",
            "--quiet",
            "-o", str(out.resolve()),
        ]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SparkserveError(f"uv pip compile for {what} failed:\n{proc.stderr}")


def lock_files(pins: Pins) -> list[tuple[LockPlatform, str, bool]]:
    """(platform, lock file, dev?) for every lock pins.toml names: each platform's, then its dev lock."""
    out: list[tuple[LockPlatform, str, bool]] = []
    for platform in pins.lock_platforms.values():
        out.append((platform, platform.file, False))
        if platform.dev_file and pins.lock_dev_requirements:
            out.append((platform, platform.dev_file, True))
    return out


def pinned_versions(lock_text: str) -> dict[str, str]:
    return {_norm(m.group(1)): m.group(2) for m in _PINNED.finditer(lock_text)}


def check_pins_in_lock(pins: Pins, lock_text: str, where: str) -> list[str]:
    """The lock must hold exactly the pinned vllm/flashinfer/torch, each with hashes."""
    versions = pinned_versions(lock_text)
    want = {_norm(u.distribution): u.version for u in pins.upstreams.values()}
    want["torch"] = pins.torch_version
    problems = []
    for name, version in want.items():
        if versions.get(name) != version:
            problems.append(f"{where}: {name} is {versions.get(name)}, pins.toml says {version}")
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        m = _PINNED.match(block)
        if m and "--hash=sha256:" not in block:
            problems.append(f"{where}: {m.group(1)} has no hash")
    return problems


def write_locks(pins: Pins) -> list[Path]:
    written = []
    for platform, file, dev in lock_files(pins):
        out = pins.root / file
        out.parent.mkdir(parents=True, exist_ok=True)
        say(f"resolving {file} ({platform.uv_platform}, Python {pins.python})")
        compile_lock(pins, platform, out, dev)
        problems = [] if dev else check_pins_in_lock(pins, out.read_text(), file)
        if problems:
            raise SparkserveError("\n".join(problems))
        written.append(out)
    return written


def wheel_problems(lock_file: Path, uv_platform: str, python: str, index_url: str) -> list[str]:
    """The image installs a lock with --only-binary: every pinned release needs a wheel for the lock's
    platform. uv's dry run picks them from the index without installing anything; a release that has
    none (an sdist only, or wheels for other platforms) is named with the platforms it does have."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [uv_bin(), "pip", "install", "--dry-run", "--no-config", "--quiet",
               "--python-platform", uv_platform, "--python-version", python,
               "--only-binary", ":all:", "--no-deps", "--require-hashes",
               "--index-url", index_url, "--target", tmp, "-r", str(lock_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return []
    missing = _NO_WHEEL.findall(proc.stderr)
    if missing:
        hints = dict(_WHEELS_FOR.findall(proc.stderr))
        return [f"{lock_file}: {name}=={version} has no wheel for {uv_platform}"
                + (f" (its wheels: {hints[name]})" if name in hints else " (no wheels at all)")
                for name, version in missing]
    return [f"{lock_file}: not installable as wheels for {uv_platform}: {proc.stderr.strip()[-600:]}"]


def check_lock(pins: Pins, platform: LockPlatform, file: str, dev: bool) -> list[str]:
    """One committed lock: its pins, a wheel for every release, and the same text when re-resolved."""
    committed = pins.root / file
    if not committed.is_file():
        return [f"{file}: missing (run `sparkserve lock`)"]
    text = committed.read_text()
    problems = [] if dev else check_pins_in_lock(pins, text, file)
    say(f"checking that every release in {file} has a wheel for {platform.uv_platform}")
    problems += wheel_problems(committed, platform.uv_platform, pins.python, pins.index_url)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "lock.txt"
        # The committed lock seeds the resolution as uv's preferences (as `sparkserve lock` does
        # when it rewrites a lock), so a release the index added after the freeze, whose upload
        # time the index does not report to --exclude-newer, does not count as drift; any change
        # to pins.toml that the committed versions cannot satisfy still does.
        fresh.write_text(text)
        say(f"re-resolving {file} to compare with the committed one")
        compile_lock(pins, platform, fresh, dev)
        fresh_text = fresh.read_text()
    if fresh_text != text:
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True), fresh_text.splitlines(keepends=True),
                fromfile=file, tofile="re-resolved", n=1,
            )
        )
        head = "\n".join(diff.splitlines()[:60])
        problems.append(f"{file}: out of date with pins.toml (run `sparkserve lock`):\n{head}")
    return problems


def check_locks(pins: Pins) -> list[str]:
    """Re-resolve every platform and compare with the committed lock; check the pins in it. The locks are
    checked side by side (each waits on the index more than on the CPU); problems come in the locks' order."""
    locks = lock_files(pins)
    uv_bin()  # before the threads (see uv_bin)
    with ThreadPoolExecutor(max_workers=max(1, len(locks))) as pool:
        results = list(pool.map(lambda lock: check_lock(pins, *lock), locks))
    return [problem for problems in results for problem in problems]


def requirement_block(lock_text: str, distribution: str) -> str:
    """One package's 'name==version \\ --hash=...' block from a lock file."""
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        m = _PINNED.match(block)
        if m and _norm(m.group(1)) == _norm(distribution):
            lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("#")]
            return "\n".join(lines).rstrip(" \\") + "\n"
    raise SparkserveError(f"{distribution} is not in the lock")
