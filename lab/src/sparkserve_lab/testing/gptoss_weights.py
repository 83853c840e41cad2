"""Random weights for a gpt-oss checkpoint, as real safetensors files in the published layout.

`--load-format dummy` never reads a file, so it cannot compare weight loaders. This writes the tensors a
gpt-oss checkpoint holds (names, shapes and dtypes of openai/gpt-oss-*: BF16 attention, router, norms,
embeddings and lm_head; experts as MXFP4 blocks of 32 FP4 values packed two per byte with one UE8M0
scale byte per block) filled from a seeded generator, sharded like the published checkpoints, with
`model.safetensors.index.json`. Values are kept small (BF16 ~ N(0, 0.02); expert scales 2^-7..2^-5), so
a forward pass stays finite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MXFP4_BLOCK = 32  # FP4 values per scale
SCALE_EXPONENTS = (120, 123)  # UE8M0 bias 127: scales 2^-7 .. 2^-5


def tensor_specs(cfg: dict[str, Any]) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of every tensor of a gpt-oss checkpoint with MXFP4 experts; dtype is
    "bf16" or "u8"."""
    if (cfg.get("quantization_config") or {}).get("quant_method") != "mxfp4":
        raise ValueError("only the MXFP4 gpt-oss layout (quantization_config.quant_method = mxfp4)")
    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads, kv, hd = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"]), int(cfg["head_dim"])
    experts, vocab = int(cfg["num_local_experts"]), int(cfg["vocab_size"])
    if h % MXFP4_BLOCK or inter % MXFP4_BLOCK:
        raise ValueError(f"hidden and intermediate sizes must be multiples of {MXFP4_BLOCK}")
    yield "model.embed_tokens.weight", (vocab, h), "bf16"
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"model.layers.{i}"
        yield f"{p}.input_layernorm.weight", (h,), "bf16"
        yield f"{p}.post_attention_layernorm.weight", (h,), "bf16"
        for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            yield f"{p}.self_attn.{proj}.weight", (rows, h), "bf16"
            yield f"{p}.self_attn.{proj}.bias", (rows,), "bf16"
        yield f"{p}.self_attn.o_proj.weight", (h, heads * hd), "bf16"
        yield f"{p}.self_attn.o_proj.bias", (h,), "bf16"
        yield f"{p}.self_attn.sinks", (heads,), "bf16"
        yield f"{p}.mlp.router.weight", (experts, h), "bf16"
        yield f"{p}.mlp.router.bias", (experts,), "bf16"
        # fc1: gate and up fused (2 * intermediate rows) over hidden; fc2: hidden rows over intermediate
        for proj, rows, cols in (("gate_up_proj", 2 * inter, h), ("down_proj", h, inter)):
            blocks = (experts, rows, cols // MXFP4_BLOCK, MXFP4_BLOCK // 2)
            yield f"{p}.mlp.experts.{proj}_blocks", blocks, "u8"
            yield f"{p}.mlp.experts.{proj}_scales", (experts, rows, cols // MXFP4_BLOCK), "u8"
            yield f"{p}.mlp.experts.{proj}_bias", (experts, rows), "bf16"
    yield "model.norm.weight", (h,), "bf16"
    yield "lm_head.weight", (vocab, h), "bf16"


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * (2 if dtype == "bf16" else 1)


def _fill(name: str, shape: tuple[int, ...], dtype: str, gen: Any, device: str) -> Any:
    import torch

    if dtype == "u8":
        lo, hi = (SCALE_EXPONENTS[0], SCALE_EXPONENTS[1] + 1) if name.endswith("_scales") else (0, 256)
        return torch.randint(lo, hi, shape, generator=gen, dtype=torch.uint8, device=device)
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return torch.ones(shape, dtype=torch.bfloat16, device=device)
    t = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    return (t * 0.02).to(torch.bfloat16)


def write(out: Path, cfg: dict[str, Any], seed: int = 0, shard_bytes: int = 4 << 30,
          device: str = "cpu", progress: Any = None) -> dict[str, Any]:
    """Write the shards and the index into `out`; returns the index. `device` "cuda" fills faster."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    specs = list(tensor_specs(cfg))
    shards: list[list[tuple[str, tuple[int, ...], str]]] = [[]]
    size = 0
    for spec in specs:
        b = nbytes(spec[1], spec[2])
        if shards[-1] and size + b > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += b
    weight_map: dict[str, str] = {}
    total = 0
    for k, shard in enumerate(shards):
        fname = f"model-{k:05d}-of-{len(shards) - 1:05d}.safetensors"
        tensors = {name: _fill(name, shape, dt, gen, device).cpu() for name, shape, dt in shard}
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        for name in tensors:
            weight_map[name] = fname
        total += sum(nbytes(s, d) for _, s, d in shard)
        if progress:
            progress(f"{fname}: {len(shard)} tensors, {total / 1e9:.1f} GB written")
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index
