"""Probe, not part of the product: a candidate decode for vllm/0007's MoE GEMV on tensor cores (the kernel:
mma_gemv.py beside this file). CPU-only self-test, no GPU: a bit-exact Python emulation of the kernel's
DECODE_ASM and SCALE0_ASM / SCALE1_ASM with the fragment mapping the kernel assumes, for every nibble code
and a range of scales, and check_numerics.py's packer against vLLM's own preparation of an MXFP4 expert
(prepare_moe_mxfp4_layer_for_marlin, with vLLM's CPU reference of gptq_marlin_repack from
tests/image/marlin_mxfp4_experts.py standing in for the CUDA op). Prints the mismatch count and the
comparisons; asserts on the scale registers.

In the serving image, from the repository root:

    docker run --rm -e CUDA_VISIBLE_DEVICES= -v "$PWD":/repo -w /repo --entrypoint python \\
        sparkserve/serve:ci lab/scripts/gpu/mma_gemv_probe/cpu_selftest.py
"""

from __future__ import annotations

import os
import struct
import sys
from types import SimpleNamespace

import numpy as np
import torch

# the sibling check_numerics (and mma_gemv), and tests/image of this repository (four levels up)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "tests", "image"))
import check_numerics as cn
from marlin_mxfp4_experts import install_cpu_repack

M32 = 0xFFFFFFFF


def bf16(bits: int) -> float:
    """A 16-bit pattern read as bf16."""
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


def decode(q: int) -> list[int]:
    """DECODE_ASM's PTX before the scale multiply: the four A fragment registers of word q."""
    qa, qb, cm = q & 0x80808080, q & 0x08080808, 0x01C001C0

    def lop(a: int, b: int) -> int:  # lop3 0xE4: a where cm is set, b elsewhere
        return ((a & cm) | (b & ~cm)) & M32

    return [lop((q << 6) & M32, (qb << 12) & M32), lop(q >> 2, (qb << 4) & M32),
            lop((q << 2) & M32, (qa << 8) & M32), lop(q >> 6, qa)]


def check_decode() -> None:
    # fragment j: (n8, k8) = (j & 1, j >> 1); its low half (k1 = 0) holds nibble i = 2 n8 + k8, the high half
    # nibble i + 4
    rng = np.random.default_rng(0)
    bad = 0
    for q in [int(v) for v in rng.integers(0, 2**32, 20000, dtype=np.uint64)] + [0x76543210, 0xFEDCBA98]:
        out = decode(q)
        for j in range(4):
            n8, k8 = j & 1, j >> 1
            for k1, half in ((0, out[j] & 0xFFFF), (1, out[j] >> 16)):
                i = 2 * n8 + k8 + 4 * k1
                code = (q >> (4 * i)) & 15
                want = float(cn.E2M1[code]) * 2.0 ** -126
                got = bf16(half)
                bad += (got != want) or (np.signbit(got) != np.signbit(want))
    print("decode mismatches:", bad)


def check_scales() -> None:
    # the scale registers: (byte + 118) << 7 in each half reads as 2^(s-1-8) in bf16, so the product is exact
    sc_bias = (126 - 8) * 128 * 65537
    for sw in [0x7F7E7D7C, 0x03880A77]:
        sc0 = ((sw & 0x00FF00FF) * 128 + sc_bias) & M32
        t = ((sw >> 8) & 0xFF) | (((sw >> 24) & 0xFF) << 16)
        sc1 = (t * 128 + sc_bias) & M32
        for reg, bytes_ in ((sc0, (0, 2)), (sc1, (1, 3))):
            for half, b in ((reg & 0xFFFF, bytes_[0]), (reg >> 16, bytes_[1])):
                s = (sw >> (8 * b)) & 255
                assert bf16(half) == 2.0 ** (s - 9), (hex(sw), b, s, bf16(half))
    print("scale registers ok")


def check_packer() -> None:
    """check_numerics.marlin_pack against vLLM's preparation, on vLLM's CPU reference of the repack."""
    install_cpu_repack()
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4 as mf4

    gen = torch.Generator().manual_seed(1)
    n13, hidden, n2, inter = 256, 128, 128, 128
    c13, s13 = cn.random_matrix(n13, hidden, gen)
    c2, s2 = cn.random_matrix(n2, inter, gen)

    def fp4_bytes(c: torch.Tensor) -> torch.Tensor:
        return (c[:, 0::2] | (c[:, 1::2] << 4)).unsqueeze(0)

    out = mf4.prepare_moe_mxfp4_layer_for_marlin(
        SimpleNamespace(params_dtype=torch.bfloat16), fp4_bytes(c13), fp4_bytes(c2),
        s13.T.contiguous().unsqueeze(0), s2.T.contiguous().unsqueeze(0),
        torch.zeros(1, n13, dtype=torch.bfloat16), torch.zeros(1, n2, dtype=torch.bfloat16))
    print([tuple(t.shape) for t in out], [t.dtype for t in out])
    for name, c, s, words, scales in (("w13", c13, s13, out[0], out[2]), ("w2", c2, s2, out[1], out[3])):
        w, sw = cn.marlin_pack(c, s)
        print(f"{name} words equal:", torch.equal(words[0], w),
              "scales equal:", torch.equal(scales[0].contiguous().view(torch.int32), sw))


def main() -> None:
    check_decode()
    check_scales()
    check_packer()


if __name__ == "__main__":
    main()
