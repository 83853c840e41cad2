"""Was a stored record made with the patch series as it is now?

Every record keeps the patch manifest it ran with (id + sha256 per patch): a benchmark run in
`site.patch_manifest` (read from the serving environment), a proof in `patches`. A proof names the
patches it proves (`proves`, "upstream/id"): it is *current* while those patches are unchanged in the
series. A benchmark run measures the whole stack: it is current while its manifest equals the series.
Anything else is *stale* (with the reason), or *unknown* when the record kept no manifest.

"Unchanged" compares the code (`code_sha256`, the diff without its DEP-3 header) when both sides
recorded it, else the whole patch file (`sha256`): a header edit such as Verified-On then counts too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.supply.patches.series import load_series
from sparkserve_lab.runstore import KIND_MEASUREMENT, KIND_PROOF, Run

Series = dict[str, dict[str, "Hashes"]]  # {upstream: {patch id: hashes}}

CURRENT, STALE, UNKNOWN = "current", "stale", "unknown"
# Records that name the patches they are about (`proves`) and keep their manifest in `patches`.
PROVING_KINDS = (KIND_PROOF, KIND_MEASUREMENT)


@dataclass(frozen=True)
class Hashes:
    file: str
    code: str = ""

    def same_as(self, other: Hashes) -> bool:
        if self.code and other.code:
            return self.code == other.code
        return self.file == other.file


@dataclass(frozen=True)
class Verdict:
    state: str
    why: str


def series_now(root: Path, upstreams: tuple[str, ...] = ("vllm", "flashinfer")) -> Series:
    return {u: {p.id: Hashes(p.sha256, p.code_sha256) for p in load_series(root, u)} for u in upstreams}


def manifest_patches(manifest: Any) -> Series | None:
    """{upstream: {id: sha256}} from a site patch manifest ({"upstreams": {...}}), else None."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("upstreams"), dict):
        return None
    out: Series = {}
    for up, rec in manifest["upstreams"].items():
        entries = rec.get("patches", []) if isinstance(rec, dict) else []
        out[str(up)] = {str(e["id"]): Hashes(str(e["sha256"]), str(e.get("code_sha256") or ""))
                        for e in entries if isinstance(e, dict) and "id" in e}
    return out


def recorded(meta: dict[str, Any]) -> Series | None:
    if meta.get("kind") in PROVING_KINDS:
        return manifest_patches({"upstreams": meta.get("patches")}) if meta.get("patches") else None
    return manifest_patches((meta.get("site") or {}).get("patch_manifest"))


def judge(meta: dict[str, Any], now: Series) -> Verdict:
    had = recorded(meta)
    if had is None:
        return Verdict(UNKNOWN, "no patch manifest recorded")
    if meta.get("kind") in PROVING_KINDS:
        changed = []
        for ref in meta.get("proves") or []:
            up, _, pid = str(ref).partition("/")
            cur, old = now.get(up, {}).get(pid), had.get(up, {}).get(pid)
            if cur is None:
                changed.append(f"{ref} is no longer in the series")
            elif old is None:
                changed.append(f"{ref} was not applied when it ran")
            elif not old.same_as(cur):
                changed.append(f"{ref} changed since (sha256 {old.file[:12]} -> {cur.file[:12]})")
        if changed:
            return Verdict(STALE, "; ".join(changed))
        return Verdict(CURRENT, "the patches it proves are unchanged")
    diffs = []
    for up in sorted(set(now) | set(had)):
        a, b = had.get(up, {}), now.get(up, {})
        for pid in sorted(set(a) | set(b)):
            if pid in a and pid in b and a[pid].same_as(b[pid]):
                continue
            what = "not applied" if pid not in a else "removed since" if pid not in b else "changed since"
            diffs.append(f"{up}/{pid.split('-', 1)[0]} {what}")
    if diffs:
        return Verdict(STALE, "; ".join(diffs))
    return Verdict(CURRENT, "ran with the series as it is")


def judge_run(run: Run, now: Series) -> Verdict:
    return judge(run.metadata(), now)
