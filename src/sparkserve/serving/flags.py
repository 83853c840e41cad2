"""The vLLM OpenAI-server command line of a validated Profile: each setting's part (serving/settings.py
declares which flags each variable owns and how its value becomes them), in the table's order; and the
translations of profile values into vLLM's names."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from sparkserve.serving import speculative

if TYPE_CHECKING:
    from sparkserve.serving.profile import Profile

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
ATTENTION_BACKEND_NAMES = {"flashinfer": "FLASHINFER", "triton": "TRITON_ATTN", "flash_attn": "FLASH_ATTN"}
MOE_BACKEND_NAMES = {"cutlass-mxfp8": "flashinfer_cutlass", "cutlass-bf16": "flashinfer_cutlass",
                     "marlin": "marlin", "triton": "triton"}
# Layer names of vLLM's gpt-oss model; `ignore` takes fnmatch patterns and a pattern that matches a
# fused layer's own name (qkv_proj) takes it whole.
_IGNORE = {"qkv": "*.qkv_proj", "o": "*.o_proj"}


def quantization_config(p: Profile) -> dict[str, object] | None:
    """vLLM's --quantization-config for the profile, or None when the checkpoint's own config is enough.

    qkv and o are the two LinearBase layers of gpt-oss attention (its router gets no quant config), so
    `linear` covers exactly them and `ignore` drops one; lm_head is its own field (patch vllm/0002).
    """
    cfg: dict[str, object] = {}
    linear = [t for t in ("qkv", "o") if t in p.mxfp4_layers]
    if linear:
        cfg["linear"] = "mxfp4"
        ignore = [_IGNORE[t] for t in ("qkv", "o") if t not in p.mxfp4_layers]
        if ignore:
            cfg["ignore"] = ignore
    if "lm_head" in p.mxfp4_layers:
        cfg["lm_head"] = "mxfp4"
    if "moe" in p.mxfp4_layers and p.moe_backend == "cutlass-mxfp8":
        cfg["moe"] = {"activation": "mxfp8"}
    return cfg or None


def speculative_config(p: Profile) -> dict[str, Any] | None:
    """vLLM's --speculative-config for the profile, or None when SPECULATIVE=off."""
    return speculative.vllm_config(p.speculative, p.speculative_tokens, p.speculative_draft,
                                   p.speculative_synthetic_acceptance)


def dump_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def profile_args(p: Profile) -> list[str]:
    """The arguments the profile's settings give vLLM, without VLLM_EXTRA_ARGS."""
    # The table's emitters use this module's translations, so the table is imported when asked for.
    from sparkserve.serving.settings import SETTINGS

    return [arg for s in SETTINGS for arg in s.argv.make(getattr(p, s.field), p)]


def vllm_argv(p: Profile, python: str = sys.executable, host: str | None = None) -> list[str]:
    """The command line: the server module, the profile's arguments, then VLLM_EXTRA_ARGS. `host`
    replaces the listen address (the harness binds its own)."""
    args = profile_args(p)
    if host is not None:
        args[args.index("--host") + 1] = host
    return [python, "-m", SERVER_MODULE, *args, *p.extra_args]
