"""Probe, not part of the product: where triton_kernels' Hopper MXFP4 layouts put gpt-oss's expert weights
and scales, checked element by element on the CPU against triton_kernels' own swizzle, and whether a lane's
16-byte load of the swizzled values is already mma.sync m16n8k16 A fragments (as vllm/0009's loads of
Marlin's layout are). No GPU: the swizzle is torch on CPU tensors, the kernel's decode is emulated in numpy.

In the serving image, from the repository root:

    docker run --rm -e CUDA_VISIBLE_DEVICES= -v "$PWD":/repo -w /repo --entrypoint python \\
        sparkserve/serve:ci lab/scripts/gpu/hopper_layout_probe/check_layout.py

It prints one JSON line per checked shape and exits non-zero on the first mismatch. It also checks that
hopper_pack.py (numpy alone) writes the same words as triton_kernels' swizzle.

What vLLM stores (vLLM 0.33, sm_90, triton backend). mxfp4_utils._swizzle_mxfp4(w, s, num_warps=8) takes
w [E, N, K/2] uint8 (byte k/2 of row n holds k even in bits 0..3, k + 1 in bits 4..7) and s [E, N, K/32]
E8M0, pads the scale groups to a multiple of 4 (sm_90 only), transposes both (K on dim 1), wraps w as FP4
and converts with tensor_details.layout.make_default_matmul_mxfp4_w_layout(mx_axis=1) ->
HopperMXValueLayout(mx_axis=1, mma_version=3 (its default)) and make_default_matmul_mxfp4_w_scale_layout(
mx_axis=1, num_warps=8) -> HopperMXScaleLayout(mx_axis=1, num_warps=8) (layout_details/hopper_value.py,
hopper_scale.py in vllm/third_party/triton_kernels). With mx_axis = 1 both swizzles work on [N, K]
(_maybe_mT undoes the transpose) and hand back the transpose of a contiguous array, so per expert memory is:

  values: row-major [N/4, K/2] 32-bit words (N padded to 16, K to 64). Word (r, c), with
      r = 4 rb + q                       (rb: block of 16 rows n; q < 4)
      c = 32 kc + 16 s + 4 t + kt        (kc: 64-K chunk; s < 2, t < 4, kt < 4)
    holds the 8 FP4 values of rows n = 16 rb + 2 q + s + {0, 8} and columns
    k = 64 kc + 16 kt + 2 t + {0, 1} + {0, 8}: the pre-twiddle byte j = 2 b1 + b0 (the swizzle's
    permute [0, 3, 6, 10, 4, 9, 7, 1, 8, 2, 5, 11] with mma_version 3's contig (1, 1), scott_trick (2, 1),
    threads (4, 4), warp_tile (2, 2), k_tile (1, 4)) is row 16 rb + 2 q + s + 8 b0, columns
    64 kc + 16 kt + 2 t + 8 b1 + {0 (low nibble), 1 (high)}. _pack_bits then interleaves the word's bits
    (per 16-bit half, the low nibbles in the low half: byte 0 at sign 15 / exponent-mantissa 8..6, byte 1
    at 12 / 5..3, byte 2 at 9 / 2..0, byte 3 at 14 / 11, 10, 13) so that
        reg0 = w & 0x81C081C0, reg1 = (w << 3) & 0x81C081C0, reg2 = (w << 6) & 0x81C081C0,
        reg3 = ((w << 1) & 0x80008000) | ((w >> 3) & 0x01800180) | ((w >> 7) & 0x00400040)
    are bf16x2 pairs of bytes 0..3, each the E2M1 value times 2^-126 (low half: the even k).
  scales: row-major [Np/32, 8 G] 32-bit words (Np: N padded to 256 = 2 * num_warps * 2 * 8; G: the
    groups, padded to 4 by vLLM, to 2 by the layout). For rb = 16 m0 + 8 a + w8 (a < 2, w8 < 8), word
    (8 m0 + w8, 16 kc + 8 a + g) holds, in bytes 0..3, the scales of (row 16 rb + g, group 2 kc),
    (16 rb + g + 8, 2 kc), (16 rb + g, 2 kc + 1), (16 rb + g + 8, 2 kc + 1) (reshape [.., 2, 8, 2, 8, G/2,
    2], permute [0, 2, 5, 1, 4, 6, 3] in HopperMXScaleLayout.swizzle_data).

The mma.sync m16n8k16 bf16 A fragment of lane l (groupID g = l // 4, t = l % 4) is a0a1: (row g, cols 2t,
2t + 1), a2a3: (g + 8, 2t..), a4a5: (g, 2t + 8..), a6a7: (g + 8, 2t + 8..). With l = 8 q + 4 s + t (so
g = 2 q + s) the word (4 rb + q, 32 kc + 16 s + 4 t + kt) decodes to exactly a0a1, a2a3, a4a5, a6a7 (reg0..3)
of the k-tile 4 kc + kt of row block rb: one 32-bit word a lane is one MMA's A operand, and the lane's
16-byte load (kt = 0..3) four consecutive k-tiles, 64 K. A warp's load of one (rb, kc) tile, 16 rows x 64 K,
is 4 rows r = 4 rb + q of 128 contiguous bytes each (lane l at byte 16 (l % 8) of row 4 rb + l // 8):
whole cache lines. The scales the lane's 4 words need (2 rows x 2 groups) are one 32-bit word, the same for
the 4 lanes of a group. No permutation is needed, of bytes or registers: only the bit untwiddle above (the
"14 SASS" decode of _unpack_fp4_to_bf16_triton), which also is the value decode.

What matmul_ogs does with it (matmul_ogs_details/_matmul_ogs.py, SWIZZLE_MX_VALUE == "HOPPER_VALUE"): it
loads a [2 BLOCK_K bytes, BLOCK_N / 4] block of the transposed view, and mxfp4_to_bf16_triton(w.trans(),
scales, 1) decodes each word with that inline PTX (_unpack_fp4_to_bf16_triton: pack 4, outputs (reg0,
reg1), (reg2, reg3), then join / reshape / trans, which put byte j's two values at 8 j' + 2 j + {0, 1} of
word j'), _unshuffle_triton(mma_version=3) reshapes [BLOCK_N / 4, 8 BLOCK_K] -> (BLOCK_N / 16, 4,
BLOCK_K / 64, 2, 4, 8, 2, 2), trans (0, 6, 1, 3, 2, 5, 4, 7) -> [BLOCK_N, BLOCK_K] (index relabelling only,
the same permute as unswizzle_data), multiplies by the unswizzled scales and computes
tl.dot(w, x^T): the weights are the A operand (out^T = W x^T), as in vllm/0009. This script emulates that
sequence on the CPU too and checks it gives the dequantized W.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

import numpy as np
import torch
from vllm.utils.import_utils import import_triton_kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hopper_pack

import_triton_kernels()  # the vendored vllm.third_party.triton_kernels as `triton_kernels`

import triton_kernels.tensor_details.layout as tk_layout  # noqa: E402
from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor  # noqa: E402
from triton_kernels.tensor_details.layout import HopperMXScaleLayout, HopperMXValueLayout  # noqa: E402
from vllm.model_executor.layers.quantization.utils import mxfp4_utils  # noqa: E402

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)
MASK = np.uint32(0x81C081C0)


def fp4_value(code: np.ndarray) -> np.ndarray:
    return np.where(code & 8, -1.0, 1.0) * E2M1[code & 7]


def swizzle_as_vllm_sm90(w: torch.Tensor, s: torch.Tensor):
    """mxfp4_utils._swizzle_mxfp4's sm_90 path on CPU tensors: the layouts triton_kernels' defaults pick on
    capability 9.0 (asked for with cuda_capability_geq answering as sm_90), its scale-group pad, transposes
    and convert_layout calls."""
    real = tk_layout.cuda_capability_geq
    tk_layout.cuda_capability_geq = lambda major, minor=0: (major, minor) <= (9, 0)
    try:
        v_cls, v_opts = tk_layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        nw = inspect.signature(mxfp4_utils._swizzle_mxfp4).parameters["num_warps"].default
        s_cls, s_opts = tk_layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=nw)
    finally:
        tk_layout.cuda_capability_geq = real
    assert v_cls is HopperMXValueLayout and v_opts == {"mx_axis": 1}, (v_cls, v_opts)
    assert s_cls is HopperMXScaleLayout and s_opts == {"mx_axis": 1, "num_warps": 8}, (s_cls, s_opts)
    s = torch.nn.functional.pad(s, (0, -s.shape[-1] % 4))
    qt = convert_layout(wrap_torch_tensor(w.transpose(-2, -1), dtype=FP4), v_cls, **v_opts)
    st = convert_layout(wrap_torch_tensor(s.transpose(-2, -1)), s_cls, **s_opts)
    assert qt.storage.layout.mma_version == 3
    return qt, st


def physical(t: torch.Tensor) -> np.ndarray:
    """The storage of a swizzled tensor (the transpose of a contiguous array) as that array's uint32 words."""
    phys = t.mT
    assert phys.is_contiguous(), (t.shape, t.stride())
    return phys.numpy().view(np.uint32)


def decode(words: np.ndarray) -> list[np.ndarray]:
    """_unpack_fp4_to_bf16_triton's PTX (without its bias multiply) on uint32 words: reg0..reg3."""
    w = words.astype(np.uint32)
    r0 = w & MASK
    r1 = (w << np.uint32(3)) & MASK
    r2 = (w << np.uint32(6)) & MASK
    r3 = (((w << np.uint32(1)) & np.uint32(0x80008000)) | ((w >> np.uint32(3)) & np.uint32(0x01800180))
          | ((w >> np.uint32(7)) & np.uint32(0x00400040)))
    return [r0, r1, r2, r3]


def bf16_halves(reg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A bf16x2 register's (low, high) halves as float64 (exact)."""
    lo = ((reg & np.uint32(0xFFFF)) << np.uint32(16)).view(np.float32).astype(np.float64)
    hi = (reg & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)
    return lo, hi


def check_fragments(codes: np.ndarray, scales: np.ndarray, vw: np.ndarray, sw: np.ndarray) -> int:
    """The claim, as a decode kernel would use it: lane l of the warp that takes 64-K chunk kc of row
    block rb loads words (4 rb + l // 8, 32 kc + 16 ((l // 4) % 2) + 4 (l % 4) + kt), kt < 4, and scale
    word (8 (rb // 16) + rb % 8, 16 kc + 8 ((rb // 8) % 2) + l // 4); each word's reg i must be the A
    fragment's a(2i), a(2i + 1) of k-tile 4 kc + kt times 2^-126, and scale byte 2 (kt // 2) + (i % 2)
    that row's scale. codes: [N, K] E2M1 codes; scales: [N, K / 32]. Returns the elements checked."""
    n_rows, k_cols = codes.shape
    rb, kc, lane, kt = np.meshgrid(np.arange(n_rows // 16), np.arange(k_cols // 64), np.arange(32),
                                   np.arange(4), indexing="ij")
    q, s, t, g = lane // 8, (lane // 4) % 2, lane % 4, lane // 4
    words = vw[4 * rb + q, 32 * kc + 16 * s + 4 * t + kt]
    # the 16-byte run: lane l's 4 words are contiguous, 16-byte aligned, at byte 16 (l % 8) of a 128-byte
    # line of row 4 rb + l // 8
    byte = (32 * kc + 16 * s + 4 * t) * 4
    assert np.all(byte % 128 == 16 * (lane % 8)) and np.all(byte // 128 == kc)
    sword = sw[8 * (rb // 16) + rb % 8, 16 * kc + 8 * ((rb // 8) % 2) + g]
    seen = np.zeros(codes.shape, dtype=np.int32)
    checked = 0
    for i, reg in enumerate(decode(words)):
        n = 16 * rb + g + 8 * (i % 2)
        sbyte = (sword >> np.uint32(8 * (2 * (kt // 2) + i % 2))) & np.uint32(0xFF)
        assert np.array_equal(sbyte, scales[n, 2 * kc + kt // 2]), f"scale of reg{i}"
        for h, half in enumerate(bf16_halves(reg)):
            k = 64 * kc + 16 * kt + 2 * t + 8 * (i // 2) + h
            want = fp4_value(codes[n, k]) * 2.0 ** -126
            bad = half != want
            assert not bad.any(), f"reg{i} half {h}: {np.argwhere(bad)[:4].tolist()}"
            np.add.at(seen, (n, k), 1)
            checked += half.size
    assert np.all(seen == 1), "the fragments do not cover W exactly once"
    return checked


def check_matmul_ogs_untwiddle(codes: np.ndarray, vw: np.ndarray) -> None:
    """matmul_ogs' in-register path on a whole expert as one block (BLOCK_N = N, BLOCK_K = K): decode each
    word (pack 4: outputs (reg0, reg1), (reg2, reg3)), join / reshape / trans as
    _unpack_fp4_to_bf16_triton, then _unshuffle_triton(mma_version=3): must give W [N, K] times 2^-126."""
    regs = decode(vw)  # [N/4, K/2] each
    halves = [bf16_halves(r) for r in regs]
    r0 = np.stack([halves[0][0], halves[0][1], halves[1][0], halves[1][1]], -1).reshape(vw.shape[0], -1)
    r1 = np.stack([halves[2][0], halves[2][1], halves[3][0], halves[3][1]], -1).reshape(vw.shape[0], -1)
    x = torch.from_numpy(np.stack([r0, r1], -1))  # tl.join(r0, r1)
    x = x.reshape(x.shape[0], x.shape[1] // 4, 4, x.shape[2]).permute(0, 1, 3, 2)
    x = x.reshape(x.shape[0], -1)  # [N/4, 4 K] (bf16 values)
    m, kk = x.shape
    x = x.reshape(m // 4, 4, kk // 256, 2, 4, 8, 2, 2).permute(0, 6, 1, 3, 2, 5, 4, 7).reshape(m * 4, kk // 4)
    assert np.array_equal(x.numpy(), fp4_value(codes) * 2.0 ** -126), "matmul_ogs untwiddle"


def run(n_experts: int, n: int, k: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n_experts, n, k), generator=gen, dtype=torch.uint8)
    scales = torch.randint(100, 140, (n_experts, n, k // 32), generator=gen, dtype=torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)  # [E, N, K/2], k even in the low nibble
    qt, st = swizzle_as_vllm_sm90(packed, scales)
    vdata, sdata = qt.storage.data, st.storage.data
    out = {"E": n_experts, "N": n, "K": k, "value_view": list(vdata.shape),
           "value_stride": list(vdata.stride()), "scale_view": list(sdata.shape),
           "scale_stride": list(sdata.stride())}
    # the round trip through triton_kernels' own unswizzle
    assert torch.equal(qt.storage.layout.unswizzle_data(vdata).mT, packed)
    checked = 0
    for e in range(n_experts):
        vw, sw = physical(vdata[e]), physical(sdata[e])
        # hopper_pack.py, which GPU checks use where triton_kernels is not installed, writes the same words
        assert np.array_equal(hopper_pack.pack_values(codes[e].numpy()), vw), "hopper_pack values"
        assert np.array_equal(hopper_pack.pack_scales(scales[e].numpy()), sw), "hopper_pack scales"
        assert vw.shape == (n // 4, k // 2), vw.shape
        assert sw.shape[0] == -(-n // 256) * 8 and sw.shape[1] == 8 * (-(-(k // 32) // 4) * 4), sw.shape
        c, s = codes[e].numpy(), scales[e].numpy()
        checked += check_fragments(c, s, vw, sw)
        check_matmul_ogs_untwiddle(c, vw)
    out |= {"value_words_per_row": k // 2, "scale_words_per_row": int(sdata.shape[-2]) // 4,
            "elements_checked": checked, "ok": True}
    return out


def main() -> None:
    # small shapes (N not a multiple of 256, groups not of 4: the pads), then gpt-oss-120b's two GEMMs of one
    # expert (gate_up: N 5760, K 2880; down: N 2880, K 2880)
    for e, n, k in ((2, 320, 320), (1, 64, 64), (1, 5760, 2880), (1, 2880, 2880)):
        print(json.dumps(run(e, n, k, seed=n + k)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
