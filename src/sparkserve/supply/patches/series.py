"""Load patches/<upstream>/series and the patch files it names."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from sparkserve.errors import SparkserveError
from sparkserve.supply.patches import header as hdr

SEPARATOR = "---\n"


@dataclass(frozen=True)
class Hunk:
    source_start: int
    source_length: int
    text_header: str


@dataclass(frozen=True)
class FileChange:
    """One file a patch touches, in the upstream's source (sdist) layout."""

    path: str
    hunks: tuple[Hunk, ...]
    added: bool
    removed: bool


@dataclass(frozen=True)
class Patch:
    upstream: str
    id: str  # file name without .patch
    path: Path
    raw: bytes
    header_text: str  # == commit message in a source tree
    diff: str
    header: hdr.Header
    files: tuple[FileChange, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def code_sha256(self) -> str:
        """The diff alone, less the upstream test files it updates: editing the DEP-3 header (Verified-On,
        Proof) or a test of upstream's tests/ (installed nowhere) does not change the code a record ran."""
        sections = re.split(r"(?m)^(?=diff --git )", self.diff)
        code = [s for s in sections if not s.startswith("diff --git a/tests/")]
        return hashlib.sha256("".join(code).encode()).hexdigest()

    def file(self, path: str) -> FileChange | None:
        return next((f for f in self.files if f.path == path), None)


def split(text: str) -> tuple[str, str]:
    """Split a patch into (header, diff) at the first '---' line followed by 'diff --git'."""
    m = re.search(r"^---\n(?=diff --git )", text, flags=re.M)
    if not m:
        raise SparkserveError("no '---' line followed by 'diff --git' separates header and diff")
    return text[: m.start()], text[m.end() :]


def join(header_text: str, diff: str) -> str:
    return header_text + SEPARATOR + diff


def _strip_prefix(name: str) -> str:
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse_files(diff: str) -> tuple[FileChange, ...]:
    try:
        ps = PatchSet(diff)
    except UnidiffParseError as exc:
        raise SparkserveError(f"diff does not parse: {exc}") from exc
    files = []
    for pf in ps:
        name = pf.target_file if pf.is_added_file else pf.source_file
        files.append(
            FileChange(
                path=_strip_prefix(name),
                hunks=tuple(
                    Hunk(h.source_start, h.source_length, f"@@ -{h.source_start},"
                         f"{h.source_length} +{h.target_start},{h.target_length} @@")
                    for h in pf
                ),
                added=pf.is_added_file,
                removed=pf.is_removed_file,
            )
        )
    if not files:
        raise SparkserveError("diff touches no file")
    return tuple(files)


def load_patch(upstream: str, path: Path) -> Patch:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
        header_text, diff = split(text)
        header = hdr.parse(header_text)
        files = parse_files(diff)
    except (UnicodeDecodeError, hdr.HeaderError, SparkserveError) as exc:
        raise SparkserveError(f"patch {upstream}/{path.name}: {exc}") from exc
    return Patch(
        upstream=upstream,
        id=path.name.removesuffix(".patch"),
        path=path,
        raw=raw,
        header_text=header_text,
        diff=diff,
        header=header,
        files=files,
    )


def series_dir(root: Path, upstream: str) -> Path:
    return root / "patches" / upstream


def read_series_names(series_file: Path) -> list[str]:
    if not series_file.is_file():
        raise SparkserveError(f"missing series file {series_file}")
    names = []
    for line in series_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def load_series(root: Path, upstream: str) -> list[Patch]:
    """The ordered patches of one upstream; every file named must exist and parse."""
    d = series_dir(root, upstream)
    names = read_series_names(d / "series")
    if len(set(names)) != len(names):
        raise SparkserveError(f"{d / 'series'} names a patch twice")
    patches = []
    for name in names:
        p = d / name
        if not p.is_file():
            raise SparkserveError(f"{d / 'series'} names {name}, which does not exist")
        patches.append(load_patch(upstream, p))
    stray = sorted({p.name for p in d.glob("*.patch")} - set(names))
    if stray:
        raise SparkserveError(f"{d}: patch file(s) not in the series: {', '.join(stray)}")
    return patches


def slug(summary: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", summary.lower()).strip("-")
    if len(s) > 64:
        s = s[:65].rsplit("-", 1)[0]
    return s or "patch"


def patch_name(index: int, summary: str) -> str:
    """Canonical file name: what export writes, so names round-trip too."""
    return f"{index:04d}-{slug(summary)}.patch"
