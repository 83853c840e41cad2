"""The PyTorch reference of the MXFP8 x MXFP4 (and BF16 x MXFP4) grouped MoE, on a CPU: its formats against
independent scalar decodings, the grouped computation against a plain per-token float64 loop, and the
tolerance of `compare` against what a kernel may and may not differ by. Needs torch (the CPU venv of
scripts/ci/40-levels-cpu.sh); skipped where torch is absent."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from sparkserve_lab.moe import compare, reference, weights  # noqa: E402

from sparkserve.serving.moe.shape import MoeShape  # noqa: E402

# Small, and padded like gpt-oss (hidden 96 and intermediate 80 run as 128).
SHAPE = MoeShape("test", hidden=96, intermediate=80, experts=8, top_k=2)


def e2m1_scalar(code: int) -> float:
    """E2M1 from its bits: sign, 2-bit exponent (bias 1), 1-bit mantissa; exponent 0 is subnormal."""
    sign = -1.0 if code & 0b1000 else 1.0
    exp, man = (code >> 1) & 0b11, code & 1
    return sign * (man * 0.5 if exp == 0 else (1 + man / 2) * 2.0 ** (exp - 1))


def test_e2m1_and_ue8m0_decoding() -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(1, 256)
    vals = reference.unpack_e2m1(packed)[0]
    for byte in range(256):
        assert vals[2 * byte].item() == e2m1_scalar(byte & 0xF)  # low nibble first
        assert vals[2 * byte + 1].item() == e2m1_scalar(byte >> 4)
    s = torch.tensor([0, 120, 127, 130, 254, 255], dtype=torch.uint8)
    got = reference.ue8m0_to_float(s)
    assert got[:5].tolist() == [2.0 ** -127, 2.0 ** -7, 1.0, 8.0, 2.0 ** 127] and math.isnan(got[5].item())


def test_mxfp4_dequant_applies_one_scale_per_32() -> None:
    packed = torch.full((2, 32), 0x22, dtype=torch.uint8)  # every value 1.0
    scales = torch.tensor([[127, 128], [125, 131]], dtype=torch.uint8)
    out = reference.dequant_mxfp4(packed, scales)
    assert out.shape == (2, 64)
    assert out[0, :32].unique().tolist() == [1.0] and out[0, 32:].unique().tolist() == [2.0]
    assert out[1, :32].unique().tolist() == [0.25] and out[1, 32:].unique().tolist() == [16.0]
    with pytest.raises(ValueError, match="scales per row"):
        reference.dequant_mxfp4(packed, scales[:, :1])


def mxfp8_scalar(block: list[float]) -> tuple[int, list[float]]:
    amax = max(abs(v) for v in block) or 2.0 ** -126
    e = min(254, max(0, math.ceil(math.log2(amax / 448.0)) + 127))
    scale = 2.0 ** (e - 127)
    return e, [float(torch.tensor(v / scale).to(torch.float8_e4m3fn).float()) * scale for v in block]


def test_mxfp8_quantization_matches_the_scalar_rule() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 64, generator=g) * torch.tensor([1e-3, 1.0, 300.0, 5e4]).unsqueeze(1)
    x[0, :32] = 0.0  # an all-zero block
    x[1, 5] = 448.0 * 4  # amax exactly 448 x a power of two: no rounding up of the scale
    q, s = reference.quantize_mxfp8(x)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.uint8 and s.shape == (4, 2)
    back = reference.dequant_mxfp8(q, s)
    for r in range(4):
        for b in range(2):
            e, vals = mxfp8_scalar(x[r, 32 * b:32 * (b + 1)].tolist())
            assert s[r, b].item() == e
            assert back[r, 32 * b:32 * (b + 1)].tolist() == vals
    assert s[1, 0].item() == 127 + 2
    assert torch.isfinite(back).all()
    # MXFP8 keeps ~3 mantissa bits: relative error per element at most 2**-4 (outside subnormals)
    big = x.abs() > x.abs().amax(dim=1, keepdim=True) / 64
    assert ((back - x).abs()[big] <= x.abs()[big] * 2 ** -4 + 1e-12).all()


def test_swiglu_clamps_gate_above_and_up_both_ways() -> None:
    h = torch.tensor([[10.0, -10.0, 0.0, 10.0]])  # up = [10, -10], gate = [0, 10]
    out = reference.swiglu_oai(h, alpha=1.702, beta=1.0, limit=7.0)
    assert out[0, 0].item() == 0.0
    assert out[0, 1].item() == pytest.approx(7.0 * (1 / (1 + math.exp(-1.702 * 7.0))) * (-7.0 + 1.0))


def plain_moe(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, ex: reference.Experts, activation: str,
              s: MoeShape) -> torch.Tensor:
    """Per token, per chosen expert, in float64, straight from the formulas (no grouping, no index_add)."""
    out = torch.zeros(x.shape[0], ex.hidden, dtype=torch.float64)
    for t in range(x.shape[0]):
        xt = x[t].double()
        if activation == "mxfp8":
            xt = reference.fake_quant_mxfp8(xt.float()).double()
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            w13 = reference.dequant_mxfp4(ex.w13[e], ex.w13_scale[e]).double()
            h = (w13 @ xt).float().to(torch.bfloat16).double() + ex.b13[e].double()
            n = h.shape[0] // 2
            up, gate = h[:n].clamp(-s.swiglu_limit, s.swiglu_limit), h[n:].clamp(max=s.swiglu_limit)
            a = gate * torch.sigmoid(s.swiglu_alpha * gate) * (up + s.swiglu_beta)
            a = (reference.fake_quant_mxfp8(a.float()) if activation == "mxfp8"
                 else a.float().to(torch.bfloat16)).double()
            w2 = reference.dequant_mxfp4(ex.w2[e], ex.w2_scale[e]).double()
            out[t] += float(w[t, j]) * (w2 @ a + ex.b2[e].double())
    return out


@pytest.mark.parametrize("activation", ["mxfp8", "bf16"])
def test_grouped_reference_equals_the_plain_computation(activation: str) -> None:
    ex = weights.random_experts(SHAPE, seed=5)
    x = weights.random_input(12, SHAPE, seed=6)
    ids, w = weights.random_routing(12, SHAPE.experts, SHAPE.top_k, seed=7)
    got = reference.moe(x, ids, w, ex, activation, SHAPE.swiglu_alpha, SHAPE.swiglu_beta, SHAPE.swiglu_limit)
    want = plain_moe(x, ids, w, ex, activation, SHAPE)
    assert got.shape == (12, SHAPE.padded_hidden)
    assert compare.agree(got, want).rel_l2 < 1e-5
    assert got[:, SHAPE.hidden:].abs().max().item() == 0.0  # padding stays zero


def test_random_weights_are_padded_with_zeros_and_exercise_the_clamp() -> None:
    s = SHAPE
    ex = weights.random_experts(s, seed=1)
    assert ex.w13.shape == (8, 2 * 128, 64) and ex.w2.shape == (8, 128, 64)
    assert ex.w13[:, s.intermediate:128].eq(0).all() and ex.w13[:, :, s.hidden // 2:].eq(0).all()
    assert ex.w2[:, s.hidden:].eq(0).all() and ex.b2[:, s.hidden:].eq(0).all()
    ids, w = weights.random_routing(64, 8, 2, seed=2)
    assert all(len(set(r)) == 2 for r in ids.tolist()) and torch.allclose(w.sum(1), torch.ones(64))
    big = replace(s, hidden=2880, intermediate=2880, experts=2)
    ex = weights.random_experts(big, seed=0)
    x = weights.random_input(64, big)
    w13 = reference.dequant_mxfp4(ex.w13[0], ex.w13_scale[0])
    h = reference.fake_quant_mxfp8(x.float()) @ w13.T
    assert 0.005 < (h.abs() > 7.0).float().mean().item() < 0.2  # some fc1 values cross the SwiGLU limit


@pytest.mark.parametrize("activation", ["mxfp8", "bf16"])
def test_tolerance_separates_rounding_from_mistakes(activation: str) -> None:
    s = SHAPE
    ex = weights.random_experts(s, seed=11)
    x = weights.random_input(32, s, seed=12)
    ids, w = weights.random_routing(32, s.experts, s.top_k, seed=13)

    def run(e: reference.Experts = ex, **kw: object) -> torch.Tensor:
        args = {"activation": activation, "alpha": s.swiglu_alpha, "beta": s.swiglu_beta,
                "limit": s.swiglu_limit}
        args.update(kw)
        return reference.moe(x, kw.pop("ids", ids), w, e, **args)  # type: ignore[arg-type]

    ref = run()
    tol = compare.TOLERANCE[activation]
    # what a correct kernel may differ by: its bf16 output, GEMM1 output kept in fp32
    assert compare.agree(ref.to(torch.bfloat16), ref).ok(tol)
    assert compare.agree(run(bf16_gemm1_output=False), ref).ok(tol)
    # mistakes: no clamp, up/gate swapped, a scale off by 2, another activation format, NaN
    ip = s.padded_intermediate
    swapped = reference.Experts(torch.cat([ex.w13[:, ip:], ex.w13[:, :ip]], 1),
                                torch.cat([ex.w13_scale[:, ip:], ex.w13_scale[:, :ip]], 1),
                                torch.cat([ex.b13[:, ip:], ex.b13[:, :ip]], 1), ex.w2, ex.w2_scale, ex.b2)
    doubled = reference.Experts(ex.w13, ex.w13_scale, ex.b13, ex.w2, ex.w2_scale + 1, ex.b2)
    other = "bf16" if activation == "mxfp8" else "mxfp8"
    for wrong in (run(limit=1e9), run(swapped), run(doubled), run(activation=other)):
        assert not compare.agree(wrong, ref).ok(tol)
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert compare.agree(nan, ref).nonfinite == 1 and not compare.agree(nan, ref).ok(tol)


def test_input_scale_swizzle_is_flashinfers_128x4_layout() -> None:
    from sparkserve_lab.moe.kernel import quantize_input_mxfp8, swizzle_128x4

    m, cols = 130, 92  # rows padded to 256, scale columns to 92 (already a multiple of 4)
    sf = torch.arange(m * cols, dtype=torch.int32).reshape(m, cols)
    out = swizzle_128x4(sf)
    assert out.numel() == 256 * 92
    kt = 92 // 4
    for r, c in ((0, 0), (1, 0), (31, 5), (32, 0), (127, 91), (128, 3), (129, 90)):
        mt, a, b = r // 128, (r % 128) // 32, r % 32
        ktile, d = c // 4, c % 4
        assert out[(((mt * kt + ktile) * 32 + b) * 4 + a) * 4 + d].item() == sf[r, c].item()
    x = torch.randn(3, 2944, dtype=torch.bfloat16)
    q, s = quantize_input_mxfp8(x)  # no FlashInfer here: the reference's rule, same swizzle
    assert q.dtype == torch.float8_e4m3fn and s.numel() == 128 * 92
