"""Turn the patch commits of a source tree back into patches/<upstream>/ byte for byte."""

from __future__ import annotations

from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.supply import gitutil
from sparkserve.supply.patches import header as hdr
from sparkserve.supply.patches.series import join, patch_name
from sparkserve.supply.sourcetree import UPSTREAM_TAG

SERIES_HEADER = (
    "# Applied in this order by `sparkserve patches apply`; written by `sparkserve patches export`.\n"
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


def write(files: dict[str, bytes], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.patch"):
        if stale.name not in files:
            stale.unlink()
    for name, data in files.items():
        (out / name).write_bytes(data)


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
