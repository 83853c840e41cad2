"""Where tuned MoE tactics live across restarts: the state volume (`SPARKSERVE_STATE_DIR`, the compose
volume `sparkserve-state` at /var/lib/sparkserve).

    /var/lib/sparkserve/
      flashinfer-autotune/<build-id>/   VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR: FlashInfer's autotune store
                                        (v2/<environment hash>/entries/*.json; multi-node: per-rank JSON)
      moe-tactics.json                  the installed tactic table (MOE_TACTICS=table)

FlashInfer's managed store already separates FlashInfer, CUDA and GPU versions, but not patches to
FlashInfer's sources: a patch that adds tiles (flashinfer 0002) renumbers the tactic indices the store
holds. The build id covers that: it hashes the pins as installed, every applied patch (id and sha256) and
the JIT arch list, so a rebuilt image tunes into a fresh folder and an unchanged one finds its tactics.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
from pathlib import Path

from sparkserve.supply.patches import manifest

DEFAULT_STATE_DIR = "/var/lib/sparkserve"
AUTOTUNE_DIR = "flashinfer-autotune"
TABLE_FILE = "moe-tactics.json"
# Read by vLLM: the autotune cache root (vllm/model_executor/warmup/flashinfer_autotune_cache.py) and,
# with patch vllm 0004, the tactic table of FlashInfer's CUTLASS MoE.
AUTOTUNE_ENV = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"
TABLE_ENV = "VLLM_FLASHINFER_MOE_TACTICS"
DISTRIBUTIONS = ("vllm", "flashinfer-python", "torch", "apache-tvm-ffi")


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def build_id(site: Path | None, arch_list: str) -> str:
    """16 hex digits naming this image's build: installed versions, applied patches, JIT archs."""
    patches: dict[str, list[tuple[str, str]]] = {}
    if site is not None:
        for up, rec in manifest.read(site / manifest.SITE_MANIFEST).items():
            entries = rec.get("patches", []) if isinstance(rec, dict) else []
            patches[up] = [(str(e.get("id")), str(e.get("sha256"))) for e in entries
                           if isinstance(e, dict)] if isinstance(entries, list) else []
    ident = {"versions": {d: _version(d) for d in DISTRIBUTIONS}, "patches": patches,
             "flashinfer_cuda_arch_list": " ".join(arch_list.split())}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def autotune_root(state_dir: Path, build: str) -> Path:
    return state_dir / AUTOTUNE_DIR / build


def flashinfer_patches(site: Path | None) -> tuple[tuple[str, str], ...]:
    """(id, code sha256) of the FlashInfer patches applied to `site`, in series order."""
    if site is None:
        return ()
    rec = manifest.read(site / manifest.SITE_MANIFEST).get("flashinfer", {})
    entries = rec.get("patches", []) if isinstance(rec, dict) else []
    if not isinstance(entries, list):
        return ()
    return tuple((str(e.get("id")), str(e.get("code_sha256") or e.get("sha256") or ""))
                 for e in entries if isinstance(e, dict))
