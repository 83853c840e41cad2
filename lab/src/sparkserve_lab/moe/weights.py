"""Random gpt-oss-shaped MXFP4 experts, inputs and routing (seeded, any device).

Sizes are the padded ones FlashInfer's CUTLASS MoE runs (2880 -> 2944); the padding is zero, as vLLM
pads it: zero weights and biases beyond the model's hidden and intermediate sizes, zero input columns.
Scales are chosen so that fc1 outputs spread over a few units and some cross the SwiGLU limit (7), and
fc2 outputs are of order one.
"""

from __future__ import annotations

import math

import torch

from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe.reference import MX_BLOCK, UE8M0_BIAS, Experts

# Targets: fc1 outputs with this standard deviation (with unit inputs), fc2 outputs of order one.
FC1_STD = 3.2
FC2_STD = 1.0
E2M1_RMS = math.sqrt(sum(v * v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)) / 8)  # of uniform codes
SWIGLU_RMS = 9.0  # rough size of the SwiGLU output for fc1 outputs of FC1_STD


def scale_exponents(k: int, out_std: float, in_rms: float) -> tuple[int, int]:
    """log2 range of the UE8M0 block scales that gives outputs of about `out_std` over K = k."""
    c = math.log2(out_std / (in_rms * E2M1_RMS * math.sqrt(k)))
    return math.floor(c) - (1 if c == math.floor(c) else 0), math.ceil(c)


def _mxfp4(e: int, rows: int, cols: int, real_rows: list[range], real_cols: int, exp: tuple[int, int],
           g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    packed = torch.randint(0, 256, (e, rows, cols // 2), dtype=torch.uint8, generator=g)
    scales = torch.randint(UE8M0_BIAS + exp[0], UE8M0_BIAS + exp[1] + 1, (e, rows, cols // MX_BLOCK),
                           dtype=torch.uint8, generator=g)
    keep_rows = torch.zeros(rows, dtype=torch.bool)
    for r in real_rows:
        keep_rows[r.start:r.stop] = True
    packed[:, ~keep_rows, :] = 0
    packed[:, :, real_cols // 2:] = 0
    return packed, scales


def random_experts(shape: MoeShape, seed: int = 0, experts: int | None = None) -> Experts:
    """CPU tensors; `experts` overrides the count (small tests)."""
    g = torch.Generator().manual_seed(seed)
    e = experts or shape.experts
    hp, ip = shape.padded_hidden, shape.padded_intermediate
    h, i = shape.hidden, shape.intermediate
    fc1_exp = scale_exponents(h, FC1_STD, 1.0)
    w13, w13_s = _mxfp4(e, 2 * ip, hp, [range(0, i), range(ip, ip + i)], h, fc1_exp, g)
    w2, w2_s = _mxfp4(e, hp, ip, [range(0, h)], i, scale_exponents(i, FC2_STD, SWIGLU_RMS), g)
    b13 = torch.randn(e, 2 * ip, generator=g) * 0.5
    b13[:, i:ip] = 0
    b13[:, ip + i:] = 0
    b2 = torch.randn(e, hp, generator=g) * 0.1
    b2[:, h:] = 0
    return Experts(w13, w13_s, b13.to(torch.bfloat16), w2, w2_s, b2.to(torch.bfloat16))


def random_input(tokens: int, shape: MoeShape, seed: int = 1) -> torch.Tensor:
    """(tokens, padded hidden) bf16, zero in the padding."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, shape.padded_hidden, generator=g)
    x[:, shape.hidden:] = 0
    return x.to(torch.bfloat16)


def random_routing(tokens: int, experts: int, top_k: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int32 (tokens, top_k), distinct per token; weights fp32, a softmax over the top-k logits as
    gpt-oss's router does)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    top, ids = torch.topk(logits, top_k, dim=-1)
    return ids.to(torch.int32), torch.softmax(top, dim=-1)
