"""PyTorch reference of gpt-oss's MoE as FlashInfer's CUTLASS fused MoE computes it with MXFP4 weights.

Formats (OCP Microscaling): 32 consecutive values along K share one UE8M0 scale, an 8-bit biased power of
two, 2**(s - 127). MXFP4 stores E2M1 values two per byte, the first in the low nibble; MXFP8 stores E4M3.
Quantizing to MXFP8 takes per block the smallest power of two that keeps the block's amax inside E4M3's
finite range, 2**ceil(log2(amax / 448)) (vLLM's and TRT-LLM's rule: the E8M0 conversion rounds up), and
rounds each value to the nearest E4M3 (ties to even).

Per token t, for each of its top-k experts e with routing weight w (fc1 rows are [up | gate], as FlashInfer
takes them: vLLM de-interleaves gpt-oss's gate/up rows and puts up first):
    x1  = MXFP8(x_t)                    BF16 path (sm_90): x_t as bf16
    h   = bf16(x1 @ W13_e^T) + b13_e    the GEMM writes bf16; the activation kernel adds the bias in fp32
    a   = min(g, L) * sigmoid(alpha * min(g, L)) * (clamp(u, -L, L) + beta),   h = [u | g]
    a2  = MXFP8(a)                      BF16 path: bf16(a)
    y_t += w * (a2 @ W2_e^T + b2_e)
The result is fp32; the kernel writes bf16. `moe` computes it grouped by expert (what the kernel does);
tests/unit/test_moe_reference.py checks it against a plain per-token float64 loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MX_BLOCK = 32
E4M3_MAX = 448.0
UE8M0_BIAS = 127
# E2M1 code -> value (bit 3 sign, bits 2-1 exponent, bit 0 mantissa)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
ACTIVATIONS = ("mxfp8", "bf16")


def ue8m0_to_float(s: torch.Tensor) -> torch.Tensor:
    """UE8M0 scale bytes -> fp32 powers of two (255, the NaN code, gives NaN)."""
    v = torch.exp2(s.to(torch.float32) - UE8M0_BIAS)
    return torch.where(s == 255, torch.full_like(v, float("nan")), v)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """(..., K/2) uint8 -> (..., K) fp32 E2M1 values, low nibble first."""
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=packed.device)
    lo = lut[(packed & 0x0F).long()]
    hi = lut[(packed >> 4).long()]
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def dequant_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(..., K/2) uint8 values and (..., K/32) uint8 UE8M0 scales -> (..., K) fp32."""
    v = unpack_e2m1(packed)
    k = v.shape[-1]
    if scales.shape[-1] * MX_BLOCK != k:
        raise ValueError(f"MXFP4: {k} values need {k // MX_BLOCK} scales per row, got {scales.shape[-1]}")
    blocks = v.reshape(*v.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    out: torch.Tensor = (blocks * ue8m0_to_float(scales).unsqueeze(-1)).flatten(-2)
    return out


def quantize_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., K) -> (E4M3 values (..., K), UE8M0 scale bytes (..., K/32))."""
    k = x.shape[-1]
    if k % MX_BLOCK:
        raise ValueError(f"MXFP8: K={k} is not a multiple of {MX_BLOCK}")
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1).clamp(min=torch.finfo(torch.float32).tiny)
    exp = (torch.ceil(torch.log2(amax / E4M3_MAX)) + UE8M0_BIAS).clamp(0, 254)
    # Multiply by the reciprocal power of two: exact, and never 1/subnormal.
    q = (blocks * torch.exp2(UE8M0_BIAS - exp).unsqueeze(-1)).to(torch.float8_e4m3fn)
    return q.flatten(-2), exp.to(torch.uint8)


def dequant_mxfp8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    k = q.shape[-1]
    blocks = q.to(torch.float32).reshape(*q.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    out: torch.Tensor = (blocks * ue8m0_to_float(scales).unsqueeze(-1)).flatten(-2)
    return out


def fake_quant_mxfp8(x: torch.Tensor) -> torch.Tensor:
    """x rounded through MXFP8, as fp32."""
    return dequant_mxfp8(*quantize_mxfp8(x))


def swiglu_oai(h: torch.Tensor, alpha: float, beta: float, limit: float) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU on h = [up | gate] (FlashInfer's SwigluBias: Swiglu with alpha/beta/limit)."""
    n = h.shape[-1] // 2
    up, gate = h[..., :n], h[..., n:]
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


@dataclass
class Experts:
    """MXFP4 expert weights in FlashInfer's logical layout (before any kernel-specific interleaving):
    w13 (E, 2I, H/2) with rows [up | gate], w13_scale (E, 2I, H/32), b13 (E, 2I), w2 (E, H, I/2),
    w2_scale (E, H, I/32), b2 (E, H). Sizes are the padded ones the kernel runs."""

    w13: torch.Tensor
    w13_scale: torch.Tensor
    b13: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    b2: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.w13.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.w2.shape[1])

    @property
    def intermediate(self) -> int:
        return int(self.w2.shape[2]) * 2

    def to(self, device: torch.device | str) -> Experts:
        return Experts(*(t.to(device) for t in (self.w13, self.w13_scale, self.b13, self.w2, self.w2_scale,
                                                self.b2)))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.w13, self.w13_scale, self.b13, self.w2,
                                                          self.w2_scale, self.b2))


def _round_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "mxfp8":
        return fake_quant_mxfp8(x)
    if activation == "bf16":
        return x.to(torch.bfloat16).to(torch.float32)
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")


def moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, experts: Experts,
        activation: str = "mxfp8", alpha: float = 1.702, beta: float = 1.0, limit: float = 7.0,
        bf16_gemm1_output: bool = True) -> torch.Tensor:
    """The fused MoE on x (T, H): fp32 (T, H). Computed per expert on the device of x, in fp32."""
    t, k = topk_ids.shape
    x_in = _round_activation(x.to(torch.float32), activation)
    flat_ids = topk_ids.reshape(-1).long()
    flat_tok = torch.arange(t, device=x.device).repeat_interleave(k)
    flat_w = topk_weights.reshape(-1).to(torch.float32)
    out = torch.zeros(t, experts.hidden, dtype=torch.float32, device=x.device)
    for e in torch.unique(flat_ids).tolist():
        sel = (flat_ids == e).nonzero().squeeze(1)
        tok = flat_tok[sel]
        w13 = dequant_mxfp4(experts.w13[e], experts.w13_scale[e])
        h = x_in[tok] @ w13.T
        if bf16_gemm1_output:
            h = h.to(torch.bfloat16).to(torch.float32)
        a = swiglu_oai(h + experts.b13[e].to(torch.float32), alpha, beta, limit)
        w2 = dequant_mxfp4(experts.w2[e], experts.w2_scale[e])
        y = _round_activation(a, activation) @ w2.T + experts.b2[e].to(torch.float32)
        out.index_add_(0, tok, y * flat_w[sel].unsqueeze(1))
    return out
