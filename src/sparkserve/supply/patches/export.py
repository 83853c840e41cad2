"""Turn the patch commits of a source tree back into patches/<upstream>/ byte for byte.

Safe by construction: the tree must be the told upstream's tree of the pinned sdist and have no
uncommitted changes, and an export only adds or rewrites patches, never deletes one.
"""

from __future__ import annotations

from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.supply import gitutil, sourcetree
from sparkserve.supply.patches import header as hdr
from sparkserve.supply.patches.series import join, patch_name
from sparkserve.supply.pins import Upstream
from sparkserve.supply.sourcetree import UPSTREAM_TAG

SERIES_HEADER = (
    "# Applied in this order by `sparkserve patches apply`; written by `sparkserve patches export`.\n"
)


def verify_tree(tree: Path, up: Upstream) -> None:
    """Refuse a tree that is missing, not `up`'s tree of the pinned sdist, or has uncommitted changes."""
    sourcetree.verify_base(tree, up)
    changes = gitutil.dirty(tree)
    if changes:
        raise SparkserveError(
            f"{tree} has uncommitted changes; export writes commits only, so commit them (the message is "
            "the patch header) or stash them first:\n  " + "\n  ".join(changes)
        )


def render(tree: Path, base: str = UPSTREAM_TAG) -> dict[str, bytes]:
    """{file name: bytes} for the series file and every patch, from the commits after base."""
    revs = gitutil.out(["rev-list", "--reverse", "--first-parent", f"{base}..HEAD"], tree).split()
    files: dict[str, bytes] = {}
    names: list[str] = []
    for i, rev in enumerate(revs, 1):
        message = gitutil.commit_message(tree, rev)
        try:
            header = hdr.parse(message)
        except hdr.HeaderError as exc:
            raise SparkserveError(f"commit {rev[:12]} in {tree}: message is not a patch header: "
                                  f"{exc}") from exc
        diff = gitutil.diff(tree, f"{rev}^", rev)
        if not diff:
            raise SparkserveError(f"commit {rev[:12]} in {tree} changes nothing")
        name = patch_name(i, header.summary)
        names.append(name)
        files[name] = join(message, diff).encode()
    files["series"] = (SERIES_HEADER + "".join(n + "\n" for n in names)).encode()
    return files


def stale(files: dict[str, bytes], out: Path) -> list[str]:
    """Patch files in out that the rendered series does not have (renamed or dropped commits)."""
    return sorted(p.name for p in out.glob("*.patch") if p.name not in files)


def write(files: dict[str, bytes], out: Path) -> dict[str, str]:
    """Write the rendered series into out: {file name: "new" | "changed" | "unchanged"}.

    Never deletes a patch: when out holds one the tree does not produce, nothing is written.
    """
    left = stale(files, out)
    if left:
        raise SparkserveError(
            f"{out} has {', '.join(left)}, which this tree does not produce (a renamed or dropped commit, "
            "or the tree of another upstream); export never deletes a patch, and wrote nothing. If it "
            f"is meant to go, remove it yourself (git rm {out / left[0]}) and export again"
        )
    out.mkdir(parents=True, exist_ok=True)
    status = {}
    for name, data in files.items():
        path = out / name
        old = path.read_bytes() if path.is_file() else None
        status[name] = "new" if old is None else "unchanged" if old == data else "changed"
        if old != data:
            path.write_bytes(data)
    return status


def diff_against(files: dict[str, bytes], d: Path) -> list[str]:
    """Names that differ between rendered files and a patches/<upstream>/ folder."""
    on_disk = {p.name for p in d.glob("*.patch")} | ({"series"} if (d / "series").exists() else set())
    problems = []
    for name in sorted(set(files) | on_disk):
        p = d / name
        if name not in files:
            problems.append(f"{name}: in {d} but not produced by export")
        elif not p.exists():
            problems.append(f"{name}: produced by export but missing from {d}")
        elif p.read_bytes() != files[name]:
            problems.append(f"{name}: differs from what export produces")
    return problems
