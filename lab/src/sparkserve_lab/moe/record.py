"""Where `moe sweep` and `validate moe` write: a record of their own kind in the run store
(results/<hardware>/<UTC time>-<name>-<hex>/, kind "moe-sweep" or "moe-validate", the same metadata
schema as a proof: command, GPU, commit, pins, the patch manifest of the Python that ran it, verdict), or,
under `sparkserve proof run`, the proof's folder ($SPARKSERVE_PROOF_DIR), whose metadata the proof run
writes."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve_lab import metadata
from sparkserve_lab.proofs import PROOF_DIR_ENV
from sparkserve_lab.provenance import manifest_patches
from sparkserve_lab.runstore import METADATA, Run, Store, read_json, write_json

KIND_SWEEP = "moe-sweep"
KIND_VALIDATE = "moe-validate"
SCHEMA = 1


def flashinfer_site() -> Path | None:
    """The site-packages folder holding the importable flashinfer (where `patches apply --site` wrote the
    patch manifest), found without importing it."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent.parent


@dataclass
class Record:
    path: Path
    own: bool  # False: a proof's folder, whose metadata `proof run` keeps
    t0: float

    def file(self, name: str) -> Path:
        return self.path / name


def open_record(store: Store, root: Path, kind: str, name: str, hardware: str | None,
                command: list[str]) -> Record:
    proof_dir = os.environ.get(PROOF_DIR_ENV)
    if proof_dir:
        return Record(Path(proof_dir), False, time.monotonic())
    gpus = metadata.gpus()
    hw = hardware or metadata.hardware_label(gpus)
    run = store.new_record(hw, name)
    site = metadata.site_info(sys.executable)
    write_json(run.file(METADATA), {
        "schema": SCHEMA, "kind": kind, "name": name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": hw, "gpu": gpus, "command": command, "repo": metadata.repo_info(root),
        "site": {k: v for k, v in site.items() if k != "patch_manifest"},
        "patches": manifest_patches(site.get("patch_manifest")), "verdict": None,
    })
    return Record(run.path, True, time.monotonic())


def close_record(rec: Record, ok: bool, extra: dict[str, Any] | None = None) -> None:
    if not rec.own:
        return
    meta = dict(read_json(rec.file(METADATA)))
    meta.update(extra or {})
    meta["verdict"] = "pass" if ok else "fail"
    meta["wall_s"] = round(time.monotonic() - rec.t0, 1)
    meta["files"] = sorted(p.name for p in rec.path.iterdir() if p.name != METADATA)
    write_json(rec.file(METADATA), meta)


def find_table(store: Store, ref: str) -> Path:
    """A table file, or the moe-tactics.json of a store record (path, <hardware>/<id> or id prefix)."""
    p = Path(ref)
    if p.is_file():
        return p
    run: Run = store.get(ref)
    return run.file("moe-tactics.json")

