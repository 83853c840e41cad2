"""Read pins.toml: the single file that holds every pin of the stack."""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError

PINS_FILE = "pins.toml"


@dataclass(frozen=True)
class Upstream:
    """One pinned upstream project (vllm or flashinfer)."""

    name: str
    distribution: str
    version: str
    commit: str
    sdist: str
    sdist_sha256: str
    sdist_root: str


@dataclass(frozen=True)
class LockPlatform:
    name: str
    uv_platform: str
    file: str
    # The dev container's additions (Dockerfile, target dev), resolved with `file` as constraints.
    dev_file: str | None = None


@dataclass(frozen=True)
class Pins:
    root: Path
    upstreams: dict[str, Upstream]
    torch_version: str
    flashinfer_arch_list: str
    torch_arch_list: str
    python: str
    base_image: str
    debian_release: str
    index_url: str
    lock_requirements: tuple[str, ...]
    lock_overrides: tuple[str, ...]
    lock_exclude_newer: str
    lock_platforms: dict[str, LockPlatform]
    lock_dev_requirements: tuple[str, ...] = ()

    def record(self) -> dict[str, object]:
        """What a run or proof records of the pins (with the file's sha256 to tell edits apart)."""
        return {
            "sha256": hashlib.sha256((self.root / PINS_FILE).read_bytes()).hexdigest(),
            "upstreams": {n: asdict(u) for n, u in self.upstreams.items()},
            "torch": self.torch_version,
            "flashinfer_arch_list": self.flashinfer_arch_list,
            "torch_arch_list": self.torch_arch_list,
            "base_image": self.base_image,
            "python": self.python,
        }

    def upstream(self, name: str) -> Upstream:
        try:
            return self.upstreams[name]
        except KeyError:
            known = ", ".join(sorted(self.upstreams))
            raise SparkserveError(f"unknown upstream {name!r} (pinned: {known})") from None


def find_root(start: Path | None = None) -> Path:
    """The repository root: $SPARKSERVE_ROOT, or the nearest parent holding pins.toml."""
    env = os.environ.get("SPARKSERVE_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / PINS_FILE).is_file():
            return d
    raise SparkserveError(
        f"no {PINS_FILE} found in {here} or its parents; run from the sparkserve checkout "
        "or set SPARKSERVE_ROOT"
    )


def _req(table: dict[str, object], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise SparkserveError(f"{PINS_FILE}: [{where}] needs a non-empty string {key!r}")
    return value


def load(root: Path | None = None) -> Pins:
    root = root or find_root()
    path = root / PINS_FILE
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SparkserveError(f"cannot read {path}: {exc}") from exc

    upstreams: dict[str, Upstream] = {}
    for name in ("vllm", "flashinfer"):
        t = data.get("upstream", {}).get(name)
        if not isinstance(t, dict):
            raise SparkserveError(f"{PINS_FILE}: missing [upstream.{name}]")
        where = f"upstream.{name}"
        upstreams[name] = Upstream(
            name=name,
            distribution=str(t.get("distribution", name)),
            version=_req(t, "version", where),
            commit=_req(t, "commit", where),
            sdist=_req(t, "sdist", where),
            sdist_sha256=_req(t, "sdist_sha256", where),
            sdist_root=_req(t, "sdist_root", where),
        )

    lock = data.get("lock", {})
    platforms = {
        name: LockPlatform(
            name=name,
            uv_platform=_req(t, "uv_platform", f"lock.platforms.{name}"),
            file=_req(t, "file", f"lock.platforms.{name}"),
            dev_file=str(t["dev_file"]) if t.get("dev_file") else None,
        )
        for name, t in lock.get("platforms", {}).items()
    }
    if not platforms:
        raise SparkserveError(f"{PINS_FILE}: [lock.platforms.*] is empty")

    return Pins(
        root=root,
        upstreams=upstreams,
        torch_version=_req(data.get("upstream", {}).get("torch", {}), "version", "upstream.torch"),
        flashinfer_arch_list=_req(data.get("cuda", {}), "flashinfer_arch_list", "cuda"),
        torch_arch_list=_req(data.get("cuda", {}), "torch_arch_list", "cuda"),
        python=_req(data.get("base_image", {}), "python", "base_image"),
        base_image=_req(data.get("base_image", {}), "production", "base_image"),
        debian_release=_req(data.get("base_image", {}), "debian_release", "base_image"),
        index_url=os.environ.get("SPARKSERVE_INDEX_URL")
        or _req(data.get("index", {}), "url", "index"),
        lock_requirements=tuple(lock.get("requirements", ())),
        lock_overrides=tuple(lock.get("overrides", ())),
        lock_exclude_newer=_req(lock, "exclude_newer", "lock"),
        lock_platforms=platforms,
        lock_dev_requirements=tuple(lock.get("dev", {}).get("requirements", ())),
    )
