"""MOE_TACTICS at start: before vLLM starts, decide where FlashInfer's CUTLASS MoE gets its tactics, say
so in the banner (one line per bucket for a table), and name the environment vLLM needs.

- autotune: vLLM autotunes in its kernel warm-up; VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR points into the
  state volume under this image's build id, so the next start of the same image finds every tactic and
  profiles nothing.
- table: the installed table is checked against this image's FlashInfer (version, applied patches), the
  GPU's compute capability, the profile's kernel path and the model's MoE shape. A table that fits is
  handed to vLLM (VLLM_FLASHINFER_MOE_TACTICS) and autotuning is off; one that does not refuses the start
  (exit 2, naming every mismatch), or falls back to autotune when MOE_TACTICS_FALLBACK=autotune.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import gpu as gpumod
from sparkserve.serving.moe import shape as shapes
from sparkserve.serving.moe import state, tactics
from sparkserve.serving.moe import table as tables
from sparkserve.serving.profile import Profile, ProfileError
from sparkserve.serving.settings import TACTIC_MOE_BACKENDS

# The FlashInfer CUTLASS MoE path each profile MoE backend runs.
_PATH = {"cutlass-mxfp8": tactics.SM120_MXFP8_MXFP4, "cutlass-bf16": tactics.SM90_BF16_MXFP4}


@dataclass
class Setup:
    profile: Profile  # the profile to start (MOE_TACTICS=autotune after a fallback)
    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def table_path(p: Profile) -> Path:
    return Path(p.moe_tactics_table) if p.moe_tactics_table else Path(p.state_dir) / state.TABLE_FILE


def _flashinfer_version() -> str:
    try:
        return md.version("flashinfer-python")
    except md.PackageNotFoundError:
        return "not installed"


def _compute_capability() -> str | None:
    try:
        g = gpumod.visible_gpus()[0]
    except gpumod.NoGpu:
        return None
    return g.cc


def environment(p: Profile, site: Path | None, cc: str | None) -> tables.Environment:
    try:
        shape = shapes.for_model(p.model)
    except SparkserveError as exc:
        why = f"a tactic table needs the model's MoE shape: {exc}"
        raise ProfileError("MOE_TACTICS", p.moe_tactics, why) from None
    return tables.Environment(_flashinfer_version(), state.flashinfer_patches(site), cc, _PATH[p.moe_backend],
                              shape)


def _use_table(p: Profile, site: Path | None, cc: str | None, out: Setup) -> bool:
    path = table_path(p)
    try:
        table = tables.load(path)
        problems = tables.check(table, environment(p, site, cc))
    except tables.TableError as exc:
        problems = [str(exc)]
    if not problems:
        out.env[state.TABLE_ENV] = str(path)
        checked = "" if cc is not None else " (arch not checked: no GPU asked)"
        out.lines.append(f"  MoE tactics: table {path}, made {table.created} on {table.gpu or '?'} "
                         f"({table.build.path}){checked}; FlashInfer autotune off")
        out.lines += [f"    {line}" for line in table.describe()]
        return True
    why = "; ".join(problems)
    if p.moe_tactics_fallback != "autotune":
        raise ProfileError("MOE_TACTICS", "table", f"the tactic table {path} does not fit: {why}. Run "
                                                   "`sparkserve moe sweep --install` on this machine, or set "
                                                   "MOE_TACTICS_FALLBACK=autotune to autotune instead")
    out.warnings.append(f"the tactic table {path} does not fit ({why}); MOE_TACTICS_FALLBACK=autotune: "
                        "autotuning instead")
    return False


def _autotune(p: Profile, site: Path | None, arch_list: str, out: Setup) -> None:
    given = os.environ.get(state.AUTOTUNE_ENV)
    root = Path(given) if given else state.autotune_root(Path(p.state_dir), state.build_id(site, arch_list))
    out.env[state.AUTOTUNE_ENV] = str(root)
    stored = sum(1 for _ in root.rglob("*.json")) if root.is_dir() else 0
    kept = (f"{stored} stored file(s) found: tuned buckets are not profiled again" if stored else
            "nothing stored yet for this build: vLLM autotunes in its warm-up and stores the result")
    out.lines.append(f"  MoE tactics: FlashInfer autotune, kept in {root}"
                     f"{' (set by ' + state.AUTOTUNE_ENV + ')' if given else ''}; {kept}")


def prepare(p: Profile, site: Path | None, arch_list: str, probe_gpu: bool = True) -> Setup:
    """The Setup for profile `p`; raises ProfileError when MOE_TACTICS=table cannot be honoured."""
    out = Setup(p)
    if "moe" not in p.mxfp4_layers or p.moe_backend not in TACTIC_MOE_BACKENDS:
        out.lines.append(f"  MoE tactics: MOE_BACKEND={p.moe_backend} (not FlashInfer's CUTLASS MoE): "
                         "MOE_TACTICS does not apply")
        return out
    if p.moe_tactics == "table":
        cc = _compute_capability() if probe_gpu else None
        if _use_table(p, site, cc, out):
            return out
        out.profile = dataclasses.replace(p, moe_tactics="autotune")
    _autotune(out.profile, site, arch_list, out)
    return out
