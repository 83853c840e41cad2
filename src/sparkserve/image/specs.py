"""Turn a module of the list into FlashInfer's JitSpec, the way the serving code asks for it.

Imports torch and flashinfer lazily (they exist only in the image), through importlib, so the
rest of sparkserve stays importable and type-checkable without them.
"""

from __future__ import annotations

import importlib
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.image.modules import Module


def _mod(name: str) -> Any:
    return importlib.import_module(name)


def _dtype(name: object) -> Any:
    return getattr(_mod("torch"), str(name))


def _prefill_sink(p: dict[str, str | int | bool]) -> Any:
    # Mirrors flashinfer.attention._core.BatchAttentionWithAttentionSinkWrapper.__init__: same uri,
    # same positional jit_args and kwargs, handed to gen_customize_batch_prefill_module.
    attn = _mod("flashinfer.jit.attention.modules")
    variants = _mod("flashinfer.jit.attention.variants")
    utils = _mod("flashinfer.jit.utils")
    torch = _mod("torch")
    backend, q, kv = str(p["backend"]), _dtype(p["q_dtype"]), _dtype(p["kv_dtype"])
    swa = bool(p["sliding_window"])
    uri = f"batch_prefill_attention_sink_{utils.filename_safe_dtype_map[q]}_swa_{swa}_{backend}"
    return attn.gen_customize_batch_prefill_module(
        backend, uri, q, kv, q, torch.int32, int(p["head_dim"]), int(p["head_dim"]),
        ["sink"], ["float"], ["sm_scale"], ["double"], "AttentionSink",
        variants.attention_sink_decl[backend],
        use_sliding_window=swa, use_fp16_qk_reduction=False, pos_encoding_mode=0,
        paged_kv_stride_mode="independent" if backend == "fa2" else "runtime", module_surface="full",
    )


def _xqa(p: dict[str, str | int | bool]) -> Any:
    return _mod("flashinfer.jit.xqa").gen_xqa_module(
        _dtype(p["input_dtype"]), _dtype(p["kv_dtype"]), int(p["page_size"]), int(p["head_dim"]),
        int(p["head_group_ratio"]), bool(p["sliding_window"]), _dtype(p["output_dtype"]),
        int(p["q_seq_len"]),
    )


def _decode_sink(p: dict[str, str | int | bool]) -> Any:
    # Mirrors flashinfer.decode.get_batch_decode_module(*args) as BatchDecodeWithPagedKVCacheWrapper.plan()
    # calls it with use_tensor_cores=False and use_sinks=True (flashinfer patch 0001): int32 indptr, no
    # in-kernel position encoding (vLLM applies RoPE itself), no logits soft cap, use_attention_sink=True.
    # The uri ends in "_attention_sink"; the spec is the AttentionSink variant of the CUDA-core decode kernel.
    attn = _mod("flashinfer.jit.attention.modules")
    torch = _mod("torch")
    head_dim = int(p["head_dim"])
    return attn.gen_batch_decode_module(
        _dtype(p["q_dtype"]), _dtype(p["kv_dtype"]), _dtype(p["output_dtype"]), torch.int32,
        head_dim, head_dim, 0, bool(p["sliding_window"]), False, True,
    )


def jit_spec(module: Module) -> Any:
    """The flashinfer JitSpec for one module of the list."""
    if module.kind == "prefill_sink":
        return _prefill_sink(module.params)
    if module.kind == "xqa":
        return _xqa(module.params)
    if module.kind == "decode_sink":
        return _decode_sink(module.params)
    if module.kind == "sampling":
        return _mod("flashinfer.jit.sampling").gen_sampling_module()
    if module.kind == "cutlass_fused_moe_sm120":
        return _mod("flashinfer.jit.fused_moe").gen_cutlass_fused_moe_sm120_module()
    raise SparkserveError(f"module {module.name!r}: no builder for kind {module.kind!r}")
