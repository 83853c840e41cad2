"""Read pins.toml: the single file that holds every pin of the stack."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from sparkserve import config
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


# The schema of pins.toml (sparkserve.config reads it by these types; keys not declared here are refused).


@dataclass(frozen=True)
class _UpstreamTable:
    version: str
    commit: str
    sdist: str
    sdist_sha256: str
    sdist_root: str
    distribution: str = ""  # the distribution's name when it is not the table's (flashinfer-python)
    tag: str = ""  # the release tag the commit is, for a person comparing with upstream
    cutlass: str = ""  # the CUTLASS release FlashInfer vendors at that commit, for a person likewise


@dataclass(frozen=True)
class _Version:
    version: str


@dataclass(frozen=True)
class _Upstreams:
    vllm: _UpstreamTable
    flashinfer: _UpstreamTable
    torch: _Version


@dataclass(frozen=True)
class _Cuda:
    flashinfer_arch_list: str
    torch_arch_list: str


@dataclass(frozen=True)
class _BaseImage:
    python: str
    production: str
    debian_release: str


@dataclass(frozen=True)
class _Index:
    url: str = ""  # may be left out when $SPARKSERVE_INDEX_URL names the index


@dataclass(frozen=True)
class _Platform:
    uv_platform: str
    file: str
    dev_file: str = ""


@dataclass(frozen=True)
class _LockDev:
    requirements: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Lock:
    exclude_newer: str
    platforms: dict[str, _Platform] = field(default_factory=dict)
    requirements: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    dev: _LockDev = _LockDev()


@dataclass(frozen=True)
class _PinsFile:
    upstream: _Upstreams
    cuda: _Cuda
    base_image: _BaseImage
    lock: _Lock
    index: _Index = _Index()
    schema: Literal[1] = 1


def _nonempty(where: str, table: object, *keys: str) -> None:
    """Every key of the table holds text (an empty pin pins nothing)."""
    for key in keys:
        if not getattr(table, key):
            raise SparkserveError(f"{PINS_FILE}: [{where}] needs a non-empty string {key!r}")


def load(root: Path | None = None) -> Pins:
    root = root or find_root()
    data = config.load_toml(_PinsFile, root / PINS_FILE)

    upstreams: dict[str, Upstream] = {}
    for name in ("vllm", "flashinfer"):
        t: _UpstreamTable = getattr(data.upstream, name)
        _nonempty(f"upstream.{name}", t, "version", "commit", "sdist", "sdist_sha256", "sdist_root")
        upstreams[name] = Upstream(name=name, distribution=t.distribution or name, version=t.version,
                                   commit=t.commit, sdist=t.sdist, sdist_sha256=t.sdist_sha256,
                                   sdist_root=t.sdist_root)
    _nonempty("upstream.torch", data.upstream.torch, "version")
    _nonempty("cuda", data.cuda, "flashinfer_arch_list", "torch_arch_list")
    _nonempty("base_image", data.base_image, "python", "production", "debian_release")
    _nonempty("lock", data.lock, "exclude_newer")
    index_url = os.environ.get("SPARKSERVE_INDEX_URL") or data.index.url
    if not index_url:
        raise SparkserveError(f"{PINS_FILE}: [index] needs a non-empty string 'url'")

    platforms = {}
    for name, plat in data.lock.platforms.items():
        _nonempty(f"lock.platforms.{name}", plat, "uv_platform", "file")
        platforms[name] = LockPlatform(name=name, uv_platform=plat.uv_platform, file=plat.file,
                                       dev_file=plat.dev_file or None)
    if not platforms:
        raise SparkserveError(f"{PINS_FILE}: [lock.platforms.*] is empty")

    return Pins(
        root=root,
        upstreams=upstreams,
        torch_version=data.upstream.torch.version,
        flashinfer_arch_list=data.cuda.flashinfer_arch_list,
        torch_arch_list=data.cuda.torch_arch_list,
        python=data.base_image.python,
        base_image=data.base_image.production,
        debian_release=data.base_image.debian_release,
        index_url=index_url,
        lock_requirements=data.lock.requirements,
        lock_overrides=data.lock.overrides,
        lock_exclude_newer=data.lock.exclude_newer,
        lock_platforms=platforms,
        lock_dev_requirements=data.lock.dev.requirements,
    )
