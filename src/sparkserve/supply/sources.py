"""Download the pinned sdists from the package index, verify sha256, cache them."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from pathlib import Path
from urllib.error import URLError
from urllib.parse import urljoin

from sparkserve.errors import SparkserveError
from sparkserve.progress import ByteProgress, say
from sparkserve.supply.pins import Pins, Upstream

_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def cache_dir() -> Path:
    base = os.environ.get("SPARKSERVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sparkserve"
    )
    return Path(base) / "sources"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sdist_url(index_url: str, up: Upstream) -> str:
    """Find the sdist's download URL through the PEP 691 JSON simple API."""
    project = up.distribution.lower().replace("_", "-").replace(".", "-")
    page = urljoin(index_url.rstrip("/") + "/", f"{project}/")
    req = urllib.request.Request(page, headers={"Accept": _SIMPLE_JSON})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            listing = json.load(resp)
    except (URLError, OSError, ValueError) as exc:
        raise SparkserveError(f"cannot read the index page {page}: {exc}") from exc
    for f in listing.get("files", []):
        if f.get("filename") == up.sdist:
            return urljoin(page, str(f["url"]))
    raise SparkserveError(f"{up.sdist} is not listed on {page} (pin upstream.{up.name}.sdist)")


def _download(url: str, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, tmp.open("wb") as out:
            total = int(resp.headers.get("Content-Length") or 0) or None
            bar = ByteProgress(dest.name, total)
            while block := resp.read(1 << 20):
                out.write(block)
                bar.update(len(block))
            bar.finish()
        tmp.replace(dest)
    except (URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise SparkserveError(f"download of {url} failed: {exc}") from exc


class PinMismatch(SparkserveError):
    """A file's sha256 differs from its pin; the file is kept until the user decides which is wrong."""


def _mismatch(up: Upstream, path: Path, got: str, how: str) -> PinMismatch:
    return PinMismatch(
        f"{path} ({how}) has sha256 {got}, but the pin upstream.{up.name}.sdist_sha256 in pins.toml says "
        f"{up.sdist_sha256}. The file is kept. If the pin is wrong, correct it in pins.toml; if the file "
        f"is wrong, delete it or run `sparkserve sources fetch --upstream {up.name} --refetch` to "
        "download it again"
    )


def fetch(pins: Pins, name: str, dest_dir: Path | None = None, refetch: bool = False) -> Path:
    """Return the cached, verified sdist of one upstream, downloading it only if needed. A file whose
    sha256 differs from the pin is never deleted (PinMismatch), unless `refetch` asks to download again."""
    up = pins.upstream(name)
    dest_dir = dest_dir or cache_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / up.sdist
    if dest.exists() and refetch:
        say(f"{up.sdist}: --refetch: removing the cached copy")
        dest.unlink()
    if dest.is_file():
        got = sha256_file(dest)
        if got != up.sdist_sha256:
            raise _mismatch(up, dest, got, "the cached copy")
        say(f"{up.sdist}: cached, sha256 ok")
        return dest
    say(f"{up.sdist}: downloading from {pins.index_url}")
    _download(_sdist_url(pins.index_url, up), dest)
    got = sha256_file(dest)
    if got != up.sdist_sha256:
        raise _mismatch(up, dest, got, f"just downloaded from {pins.index_url}")
    say(f"{up.sdist}: sha256 ok")
    return dest


def fetch_all(pins: Pins, dest_dir: Path | None = None) -> dict[str, Path]:
    return {name: fetch(pins, name, dest_dir) for name in pins.upstreams}
