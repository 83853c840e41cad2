"""Turn a validated Profile into the vLLM OpenAI-server command line."""

from __future__ import annotations

import json
import sys

from sparkserve.serving.profile import Profile

_ATTENTION = {"flashinfer": "FLASHINFER", "triton": "TRITON_ATTN", "flash_attn": "FLASH_ATTN"}
_MOE = {"cutlass-mxfp8": "flashinfer_cutlass", "cutlass-bf16": "flashinfer_cutlass", "marlin": "marlin",
        "triton": "triton"}
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


def vllm_argv(p: Profile, python: str = sys.executable, host: str | None = None) -> list[str]:
    argv = [python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", p.model, "--host", host or p.listen, "--port", str(p.port)]
    if p.served_model_name:
        argv += ["--served-model-name", p.served_model_name]
    qcfg = quantization_config(p)
    if qcfg is not None:
        argv += ["--quantization-config", json.dumps(qcfg, separators=(",", ":"), sort_keys=True)]
        # Marlin W4A16 on SM12x. On sm_90 vLLM's own order puts Humming ahead of Marlin, and it measured
        # faster there (lm_head at M=1: 152 us vs 411 us BF16, proof lm-head-kernel-bench in docs/PROOFS.md).
        if {"qkv", "o", "lm_head"} & p.mxfp4_layers and p.target != "hopper":
            argv += ["--linear-backend", "marlin"]
    if p.moe_backend != "auto":
        argv += ["--moe-backend", _MOE[p.moe_backend]]
    if p.moe_tactics == "table":
        # The installed table picks the MoE tactics (VLLM_FLASHINFER_MOE_TACTICS, patch vllm 0004): no
        # warm-up autotuning. Other FlashInfer autotuned ops fall back to their heuristics; the profiles
        # run none besides the MoE.
        argv.append("--no-enable-flashinfer-autotune")
    if p.attention_backend != "auto":
        argv += ["--attention-backend", _ATTENTION[p.attention_backend]]
    if p.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", p.kv_cache_dtype]
    if not p.cuda_graphs:
        argv.append("--enforce-eager")
    argv.append("--enable-prefix-caching" if p.prefix_caching else "--no-enable-prefix-caching")
    if p.load_format != "auto":
        argv += ["--load-format", p.load_format]
    if p.target != "cpu":
        argv += ["--gpu-memory-utilization", f"{p.gpu_memory_utilization:g}"]
    if p.max_model_len is not None:
        argv += ["--max-model-len", str(p.max_model_len)]
    if p.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(p.max_num_batched_tokens)]
    if p.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(p.max_num_seqs)]
    argv += ["--block-size", str(p.block_size)]
    if p.parsers == "gpt-oss":
        argv += ["--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai",
                 "--enable-auto-tool-choice"]
    return argv + list(p.extra_args)
