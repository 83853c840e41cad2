"""gpt-oss-120b's MXFP4 experts for the GPU proof and benchmark of vllm/0007 (the decode MoE kernels):
random checkpoint bytes of one layer in the checkpoint's layout, put into Marlin's layout by vLLM's own
preparation, their float32 dequantization, and the two references the kernels are judged against.

Imported only on a GPU host with the patched vLLM (tests/gpu/test_mxfp4_moe_gemv.py,
lab/scripts/gpu/bench_moe_gemv.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

# gpt-oss-120b: hidden 2880 and intermediate 2880, padded by Marlin's MXFP4 MoE to 3072 and 2944; 128
# experts, top-4; MXFP4 blocks of 32 with E8M0 scales; the clamped SwiGLU's alpha and limit.
HIDDEN, INTER, HIDDEN_PAD, INTER_PAD, EXPERTS, TOPK = 2880, 2880, 3072, 2944, 128, 4
ALPHA, LIMIT = 1.702, 7.0


def expert_bytes(hidden: int = HIDDEN, inter: int = INTER) -> int:
    """What the kernels read of one expert: the unpadded fp4 bytes, E8M0 scales and bf16 biases of w13
    (2 * inter rows of hidden) and w2 (hidden rows of inter)."""
    w13 = 2 * inter * (hidden // 2 + hidden // 32 + 2)
    w2 = hidden * (inter // 2 + inter // 32 + 2)
    return w13 + w2


@dataclass
class Experts:
    """One layer's experts: the checkpoint's tensors and Marlin's."""

    ckpt: dict[str, Any]
    marlin: tuple[Any, ...]  # w13, w2, w13_scale, w2_scale, w13_bias, w2_bias


def make_experts(experts: int, device: Any, seed: int = 0, hidden: int = HIDDEN, inter: int = INTER,
                 hidden_pad: int = HIDDEN_PAD, inter_pad: int = INTER_PAD) -> Experts:
    """Random fp4 bytes, E8M0 scales 2^-8..2^-4 (the range of trained blocks) and biases, zero-padded as
    vLLM's loader leaves the padded parameters, then Marlin's layout from vLLM's preparation."""
    import torch
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4 as mf4

    gen = torch.Generator(device=device).manual_seed(seed)

    def filled(shape: tuple[int, ...], real: tuple[int, ...], fill: Any) -> Any:
        t = torch.zeros(shape, dtype=torch.uint8 if fill != "bias" else torch.bfloat16, device=device)
        idx = tuple(slice(0, n) for n in real)
        if fill == "bias":
            t[idx] = torch.randn(real, generator=gen, device=device).to(torch.bfloat16)
        else:
            lo, hi = fill
            t[idx] = torch.randint(lo, hi, real, generator=gen, device=device, dtype=torch.uint8)
        return t

    e = experts
    ckpt = {
        "w13": filled((e, 2 * inter_pad, hidden_pad // 2), (e, 2 * inter, hidden // 2), (0, 256)),
        "s13": filled((e, 2 * inter_pad, hidden_pad // 32), (e, 2 * inter, hidden // 32), (119, 124)),
        "b13": filled((e, 2 * inter_pad), (e, 2 * inter), "bias"),
        "w2": filled((e, hidden_pad, inter_pad // 2), (e, hidden, inter // 2), (0, 256)),
        "s2": filled((e, hidden_pad, inter_pad // 32), (e, hidden, inter // 32), (119, 124)),
        "b2": filled((e, hidden_pad), (e, hidden), "bias") * 0.1,
    }
    marlin = mf4.prepare_moe_mxfp4_layer_for_marlin(
        SimpleNamespace(params_dtype=torch.bfloat16), ckpt["w13"], ckpt["w2"], ckpt["s13"], ckpt["s2"],
        ckpt["b13"], ckpt["b2"])
    return Experts(ckpt, tuple(marlin))


def dequant(w: Any, s: Any, expert: int) -> Any:
    """One expert's weights in float32 (vLLM's fp4 decoding, low nibble first, times 2^(scale - 127))."""
    import torch
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import break_fp4_bytes

    vals = break_fp4_bytes(w[expert], torch.float32)
    return vals * s[expert].view(torch.float8_e8m0fnu).to(torch.float32).repeat_interleave(32, dim=-1)


def reference(x: Any, ids: Any, weights: Any, ex: Experts, marlin_rounding: bool = False,
              bf16_activations: bool = False) -> Any:
    """gpt-oss's experts in float32 on the same dequantized weights; with marlin_rounding, Marlin's data
    flow (bf16 after GEMM1 + bias, after the SwiGLU and after GEMM2 + bias times the routing weight); with
    bf16_activations, bf16 after the SwiGLU alone (the tensor-core kernels' flow)."""
    import torch

    c = ex.ckpt
    def rnd(t: Any) -> Any:
        return t.to(torch.bfloat16).float() if marlin_rounding else t

    def rnd_act(t: Any) -> Any:
        return t.to(torch.bfloat16).float() if marlin_rounding or bf16_activations else t

    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    cache: dict[int, tuple[Any, Any]] = {}
    for m in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[m, j])
            if e not in cache:
                cache[e] = (dequant(c["w13"], c["s13"], e), dequant(c["w2"], c["s2"], e))
            w13, w2 = cache[e]
            h = rnd(w13 @ x[m].float() + c["b13"][e].float())
            gate, up = h[::2].clamp(max=LIMIT), h[1::2].clamp(-LIMIT, LIMIT)
            a = rnd_act((up + 1) * (gate * torch.sigmoid(gate * ALPHA)))
            out[m] += rnd((w2 @ a + c["b2"][e].float()) * weights[m, j].float())
    return out


def route(m: int, experts: int, device: Any, gen: Any) -> tuple[Any, Any]:
    """Top-4 of random router logits, renormalised as gpt-oss's router does (int32 ids, fp32 weights)."""
    import torch

    w, ids = torch.topk(torch.softmax(torch.randn(m, experts, generator=gen, device=device), -1), TOPK, -1)
    return ids.to(torch.int32).contiguous(), (w / w.sum(-1, keepdim=True)).contiguous()
