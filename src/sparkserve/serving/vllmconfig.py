"""Profile values in vLLM's terms: its names for the backends a profile picks, and the JSON of its
--quantization-config. Plain values in, so the settings table (serving/settings.py) can use them to
declare each setting's flags."""

from __future__ import annotations

import json
from collections.abc import Collection

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's command line (`vllm serve`): its --headless, for a cluster's node rank > 0, runs the GPU workers
# without an API server (the API server module has no headless mode).
CLI_MODULE = "vllm.entrypoints.cli.main"
HEADLESS = "--headless"
ATTENTION_BACKEND_NAMES = {"flashinfer": "FLASHINFER", "triton": "TRITON_ATTN", "flash_attn": "FLASH_ATTN"}
MOE_BACKEND_NAMES = {"cutlass-mxfp8": "flashinfer_cutlass", "cutlass-bf16": "flashinfer_cutlass",
                     "marlin": "marlin", "marlin-gemv": "marlin", "triton": "triton"}
# Engine variables a profile value turns on: vLLM reads them from its environment (the patch series'
# switches), so the launch plan sets them rather than the command line.
MOE_BACKEND_ENV = {"marlin-gemv": {"VLLM_MXFP4_MOE_GEMV": "1"}}
# Layer names of vLLM's gpt-oss model; `ignore` takes fnmatch patterns and a pattern that matches a
# fused layer's own name (qkv_proj) takes it whole.
_IGNORE = {"qkv": "*.qkv_proj", "o": "*.o_proj"}


def quantization_config(layers: Collection[str], moe_backend: str) -> dict[str, object] | None:
    """vLLM's --quantization-config for the MXFP4 layers and MoE backend, or None when the checkpoint's
    own config is enough.

    qkv and o are the two LinearBase layers of gpt-oss attention (its router gets no quant config), so
    `linear` covers exactly them and `ignore` drops one; lm_head is its own field (patch vllm/0002).
    """
    cfg: dict[str, object] = {}
    linear = [t for t in ("qkv", "o") if t in layers]
    if linear:
        cfg["linear"] = "mxfp4"
        ignore = [_IGNORE[t] for t in ("qkv", "o") if t not in layers]
        if ignore:
            cfg["ignore"] = ignore
    if "lm_head" in layers:
        cfg["lm_head"] = "mxfp4"
    if "moe" in layers and moe_backend == "cutlass-mxfp8":
        cfg["moe"] = {"activation": "mxfp8"}
    return cfg or None


def engine_environment(moe_backend: str) -> dict[str, str]:
    """The engine variables a profile's values set for vLLM (MOE_BACKEND=marlin-gemv: vllm/0007's switch)."""
    return dict(MOE_BACKEND_ENV.get(moe_backend, {}))


def dump_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
