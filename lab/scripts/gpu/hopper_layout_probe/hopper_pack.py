"""Probe, not part of the product: triton_kernels' Hopper MXFP4 layouts (HopperMXValueLayout mma_version 3,
HopperMXScaleLayout num_warps 8, as vLLM's sm_90 swizzle keeps gpt-oss's experts) written from their
definition in check_layout.py's docstring, with numpy alone: the words a GPU check can build where vLLM and
triton_kernels are not installed. check_layout.py asserts that they equal triton_kernels' own swizzle.
"""

from __future__ import annotations

import numpy as np

# where each byte's E2M1 code goes in a 16-bit half (the low half holds column k, the high half k + 1):
# (sign bit, magnitude bits e1, e0, m), so that _unpack_fp4_to_bf16_triton's PTX gives each as bf16 * 2^-126
_PLACES = ((15, 8, 7, 6), (12, 5, 4, 3), (9, 2, 1, 0), (14, 11, 10, 13))


def pack_values(codes: np.ndarray) -> np.ndarray:
    """E2M1 codes [N, K] (0..15, bit 3 the sign) -> the value words, uint32 [N / 4, K / 2] (row-major: the
    storage's physical array). N a multiple of 16, K of 64."""
    n, k = codes.shape
    assert n % 16 == 0 and k % 64 == 0, (n, k)
    # word (4 rb + q, 32 kc + 16 s + 4 t + kt); byte j = 2 b1 + b0 holds row 16 rb + 2 q + s + 8 b0 and
    # columns 64 kc + 16 kt + 2 t + 8 b1 + {0, 1}
    rb, q, kc, s, t, kt = np.meshgrid(np.arange(n // 16), np.arange(4), np.arange(k // 64), np.arange(2),
                                      np.arange(4), np.arange(4), indexing="ij")
    words = np.zeros(rb.shape, dtype=np.uint32)
    for j, places in enumerate(_PLACES):
        row = 16 * rb + 2 * q + s + 8 * (j % 2)
        for half in range(2):
            c = codes[row, 64 * kc + 16 * kt + 2 * t + 8 * (j // 2) + half].astype(np.uint32)
            bits = ((c >> 3) & 1, (c >> 2) & 1, (c >> 1) & 1, c & 1)
            for bit, place in zip(bits, places, strict=True):
                words |= bit << np.uint32(place + 16 * half)
    out = np.zeros((n // 4, k // 2), dtype=np.uint32)
    out[4 * rb + q, 32 * kc + 16 * s + 4 * t + kt] = words
    return out


def pack_scales(scales: np.ndarray, groups_multiple: int = 4) -> np.ndarray:
    """E8M0 scales [N, K / 32] -> the scale words, uint32 [N_pad / 32, 8 G_pad] (N padded to 256, the groups
    to `groups_multiple`: vLLM pads them to 4 on sm_90); padding bytes are 0."""
    n, g = scales.shape
    n_pad, g_pad = -(-n // 256) * 256, -(-g // groups_multiple) * groups_multiple
    padded = np.zeros((n_pad, g_pad), dtype=np.uint32)
    padded[:n, :g] = scales
    # word (8 m0 + w8, 16 kc + 8 a + gi) for row block rb = 16 m0 + 8 a + w8: bytes (row 16 rb + gi, group
    # 2 kc), (16 rb + gi + 8, 2 kc), (16 rb + gi, 2 kc + 1), (16 rb + gi + 8, 2 kc + 1)
    rb, kc, gi = np.meshgrid(np.arange(n_pad // 16), np.arange(g_pad // 2), np.arange(8), indexing="ij")
    row = 16 * rb + gi
    word = (padded[row, 2 * kc] | padded[row + 8, 2 * kc] << np.uint32(8)
            | padded[row, 2 * kc + 1] << np.uint32(16) | padded[row + 8, 2 * kc + 1] << np.uint32(24))
    out = np.zeros((n_pad // 32, 8 * g_pad), dtype=np.uint32)
    out[8 * (rb // 16) + rb % 8, 16 * kc + 8 * ((rb // 8) % 2) + gi] = word
    return out
