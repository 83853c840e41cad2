"""The manifest that `apply` writes into its target: which patches, their sha256, files touched."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkserve import __version__
from sparkserve.errors import SparkserveError
from sparkserve.supply.patches.series import Patch

SITE_MANIFEST = "sparkserve_patch_manifest.json"
TREE_MANIFEST = ".sparkserve-manifest.json"


@dataclass(frozen=True)
class Entry:
    id: str
    sha256: str
    files: list[str]
    summary: str
    gate: str
    code_sha256: str = ""

    @classmethod
    def of(cls, patch: Patch, files: list[str]) -> Entry:
        return cls(patch.id, patch.sha256, files, patch.header.summary,
                   patch.header.fields["Gate"].splitlines()[0], patch.code_sha256)


def read(path: Path) -> dict[str, dict[str, object]]:
    """{upstream: {"version": str, "form": str, "patches": [Entry dicts]}}"""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return dict(data["upstreams"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SparkserveError(f"unreadable patch manifest {path}: {exc}") from exc


def write(path: Path, upstreams: dict[str, dict[str, object]]) -> None:
    data = {"tool": f"sparkserve {__version__}", "upstreams": upstreams}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def record(version: str, form: str, entries: list[Entry]) -> dict[str, object]:
    return {"version": version, "form": form, "patches": [asdict(e) for e in entries]}


def pending(applied: list[dict[str, object]], series: list[Patch], where: str) -> list[Patch]:
    """Patches still to apply: the manifest must list a prefix of the series, unchanged."""
    for i, entry in enumerate(applied):
        if i >= len(series):
            raise SparkserveError(
                f"{where} has patch {entry.get('id')} applied, which the series no longer has; "
                "start again from a fresh install/tree"
            )
        p = series[i]
        if entry.get("id") != p.id or entry.get("sha256") != p.sha256:
            raise SparkserveError(
                f"{where} was patched with {entry.get('id')} (sha256 {entry.get('sha256')}), "
                f"but the series now has {p.id} (sha256 {p.sha256}) in that place; "
                "start again from a fresh install/tree"
            )
    return series[len(applied) :]


def applied_ids(site: Path) -> dict[str, list[str]]:
    """{upstream: [patch id, ...]} applied to an installed site-packages, or to a dev tree (its root)
    when vllm/flashinfer are installed editable from one ({} when unpatched)."""
    path = site / SITE_MANIFEST if (site / SITE_MANIFEST).exists() else site / TREE_MANIFEST
    out: dict[str, list[str]] = {}
    for name, up in read(path).items():
        patches = up.get("patches", [])
        entries = patches if isinstance(patches, list) else []
        out[name] = [str(e.get("id")) for e in entries if isinstance(e, dict)]
    return out


def has_patch(site: Path, upstream: str, slug: str) -> bool:
    """Whether the site carries the patch named `slug` (its id without the number: renumbering the
    series does not change what a patch is)."""
    return any(pid.split("-", 1)[-1].startswith(slug) for pid in applied_ids(site).get(upstream, []))
