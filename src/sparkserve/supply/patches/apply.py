"""Apply the series to a source tree (one commit per patch) or to an installed environment.

Both forms are all-or-nothing per target: a failing patch leaves the target as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil
from sparkserve.supply.patches import manifest, pathmap
from sparkserve.supply.patches.series import Patch
from sparkserve.supply.pins import Pins, Upstream

_FAILED_AT = re.compile(r"patch failed: (.+):(\d+)")
_NOT_APPLY = re.compile(r"error: (.+): (does not exist in index|No such file or directory|"
                        r"already exists in (?:index|working directory)|patch does not apply)")


class PatchFailed(SparkserveError):
    pass


def _explain(patch: Patch, stderr: str, site_path: dict[str, str] | None = None) -> str:
    """Turn git apply's complaint into: which patch, which file, which hunk."""
    where = ""
    m = _FAILED_AT.search(stderr)
    if m:
        path, line = m.group(1), int(m.group(2))
        fc = patch.file(path)
        where = f"file {path}"
        if site_path and path in site_path:
            where += f" (installed as {site_path[path]})"
        if fc:
            idx = next((i for i, h in enumerate(fc.hunks) if h.source_start == line), None)
            if idx is not None:
                where += f", hunk {idx + 1} of {len(fc.hunks)} ({fc.hunks[idx].text_header})"
            else:
                where += f", hunk at line {line}"
    else:
        m2 = _NOT_APPLY.search(stderr)
        if m2:
            where = f"file {m2.group(1)}: {m2.group(2)}"
    detail = stderr.strip().replace("\n", "\n    ")
    return (
        f"patch {patch.upstream}/{patch.path.name} does not apply"
        + (f": {where}" if where else "")
        + f"\n    git apply said: {detail}"
    )


def _git_apply(patch: Patch, cwd: Path, extra: list[str], site_path: dict[str, str] | None) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as f:
        f.write(patch.diff)
        diff_file = f.name
    try:
        proc = gitutil.run(
            ["apply", "--whitespace=nowarn", *extra, diff_file],
            cwd,
            check=False,
            # keep git from discovering a repository around a staging directory
            extra_env={"GIT_CEILING_DIRECTORIES": str(cwd.parent)},
        )
    finally:
        Path(diff_file).unlink()
    if proc.returncode != 0:
        raise PatchFailed(_explain(patch, proc.stderr.decode(errors="replace"), site_path))


# ---------------------------------------------------------------- installed environment (wheels)


def installed_version(site: Path, up: Upstream) -> str | None:
    dist = up.distribution.replace("-", "_")
    for info in sorted(site.glob(f"{dist}-*.dist-info")):
        meta = info / "METADATA"
        if meta.is_file():
            for line in meta.read_text(errors="replace").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return None


@dataclass
class _Staged:
    upstream: str
    pending: list[Patch]
    stage: Path
    # source path -> installed path, for every staged (shipped) file
    site_path: dict[str, str]
    removed: set[str]
    entries: list[manifest.Entry]


def _stage_site(pins: Pins, site: Path, name: str, series: list[Patch], stage_root: Path,
                applied: list[dict[str, object]]) -> _Staged:
    up = pins.upstream(name)
    version = installed_version(site, up)
    if version is None:
        raise SparkserveError(f"{up.distribution} is not installed in {site}")
    if version != up.version:
        raise SparkserveError(
            f"{site} has {up.distribution} {version}; the series is for the pinned {up.version}"
        )
    todo = manifest.pending(applied, series, f"{site} ({name})")
    stage = stage_root / name
    stage.mkdir(parents=True)
    staged = _Staged(name, todo, stage, {}, set(), [])
    for patch in todo:
        excluded: list[str] = []
        touched: list[str] = []
        for fc in patch.files:
            sp = pathmap.to_site(name, fc.path)
            if sp is None:
                excluded.append(fc.path)
                continue
            touched.append(sp)
            staged.site_path[fc.path] = sp
            dst = stage / fc.path
            if dst.exists() or fc.added:
                continue
            src = site / sp
            if not src.is_file():
                raise PatchFailed(
                    f"patch {name}/{patch.path.name}: file {fc.path} (installed as {sp}) "
                    f"is missing from {site}"
                )
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        extra = [f"--exclude={p}" for p in excluded]
        _git_apply(patch, stage, extra, staged.site_path)
        for fc in patch.files:
            if fc.removed:
                staged.removed.add(fc.path)
            elif fc.path in staged.removed:
                staged.removed.discard(fc.path)
        staged.entries.append(manifest.Entry.of(patch, touched))
        say(f"  {name}/{patch.path.name}: ok ({len(touched)} file(s)"
            + (f", {len(excluded)} not shipped in the wheel" if excluded else "") + ")")
    return staged


def _replace_file(src: Path, dst: Path) -> None:
    """Put src's bytes at dst as a new file (temp file + rename), never by writing into dst.

    Installers hard-link site-packages files to their caches (uv's default link mode): writing in place
    would patch the cache, and every later install from it, too.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


OVERLAY_FILES = "files"  # <overlay>/files/<absolute path>: every file this apply wrote
OVERLAY_DELETED = "deleted.txt"  # one absolute path per line: every file this apply removed


def write_overlay(overlay: Path, written: list[Path], removed: list[Path]) -> None:
    """What an apply changed, as a tree to lay over the unpatched environment (an image layer) plus the
    files to delete there, which a copied tree alone cannot express."""
    files = overlay / OVERLAY_FILES
    files.mkdir(parents=True, exist_ok=True)
    for path in written:
        target = files / path.relative_to(path.anchor)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    (overlay / OVERLAY_DELETED).write_text("".join(f"{p}\n" for p in sorted(removed)))


def apply_site(pins: Pins, site: Path, series: dict[str, list[Patch]],
               dry_run: bool = False, overlay: Path | None = None) -> dict[str, list[manifest.Entry]]:
    """Patch an installed environment. Every patch of every upstream is applied to staged copies
    first; the environment changes only if all of them apply. With `overlay`, what changed is also
    written there (write_overlay)."""
    site = site.resolve()
    mpath = site / manifest.SITE_MANIFEST
    recorded = manifest.read(mpath)
    with tempfile.TemporaryDirectory(prefix="sparkserve-stage-") as tmp:
        staged = []
        for name, patches in series.items():
            applied = list(recorded.get(name, {}).get("patches", []))  # type: ignore[call-overload]
            staged.append(_stage_site(pins, site, name, patches, Path(tmp), applied))
        result = {s.upstream: s.entries for s in staged}
        if dry_run:
            return result
        written: list[Path] = []
        removed: list[Path] = []
        for s in staged:
            for src_path, sp in s.site_path.items():
                dst = site / sp
                if src_path in s.removed:
                    dst.unlink(missing_ok=True)
                    removed.append(dst)
                else:
                    _replace_file(s.stage / src_path, dst)
                    written.append(dst)
            prev = list(recorded.get(s.upstream, {}).get("patches", []))  # type: ignore[call-overload]
            recorded[s.upstream] = {
                "version": pins.upstream(s.upstream).version,
                "form": "site",
                "patches": prev + [asdict(e) for e in s.entries],
            }
        manifest.write(mpath, recorded)
        if overlay is not None:
            write_overlay(overlay, [*written, mpath], removed)
    return result


# ---------------------------------------------------------------- source tree (git repo)


def tree_version(tree: Path) -> str | None:
    pkg = tree / "PKG-INFO"
    if pkg.is_file():
        for line in pkg.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _commit_date(patch: Patch) -> str:
    return patch.header.fields["Last-Update"].strip() + "T00:00:00+00:00"


def apply_tree(pins: Pins, tree: Path, name: str, series: list[Patch]) -> list[manifest.Entry]:
    """Commit each pending patch onto a git tree made from the pinned sdist."""
    tree = tree.resolve()
    up = pins.upstream(name)
    if not (tree / ".git").exists():
        raise SparkserveError(f"{tree} is not a git repository (make one with `sparkserve dev init`)")
    version = tree_version(tree)
    if version != up.version:
        raise SparkserveError(f"{tree} is {up.distribution} {version}; the series is for {up.version}")
    if gitutil.out(["status", "--porcelain", "--untracked-files=no"], tree).strip():
        raise SparkserveError(f"{tree} has uncommitted changes; commit or stash them first")
    mpath = tree / manifest.TREE_MANIFEST
    recorded = manifest.read(mpath)
    applied = list(recorded.get(name, {}).get("patches", []))  # type: ignore[call-overload]
    todo = manifest.pending(applied, series, str(tree))
    start = gitutil.out(["rev-parse", "HEAD"], tree).strip()
    entries: list[manifest.Entry] = []
    try:
        for patch in todo:
            _git_apply(patch, tree, ["--index"], None)
            with tempfile.NamedTemporaryFile("w", suffix=".msg", delete=False) as f:
                f.write(patch.header_text)
            try:
                gitutil.run(["commit", "-q", "--no-verify", "--cleanup=verbatim", "-F", f.name],
                            tree, date=_commit_date(patch))
            finally:
                Path(f.name).unlink()
            entries.append(manifest.Entry.of(patch, [fc.path for fc in patch.files]))
            say(f"  {name}/{patch.path.name}: committed")
    except SparkserveError:
        gitutil.run(["reset", "-q", "--hard", start], tree)
        raise
    if entries or not mpath.exists():
        recorded[name] = {"version": up.version, "form": "tree",
                          "patches": applied + [asdict(e) for e in entries]}
        manifest.write(mpath, recorded)
    return entries
