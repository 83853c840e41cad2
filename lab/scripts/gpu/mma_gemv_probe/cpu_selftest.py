"""Probe, not part of the product: vllm/0009's tensor-core K loop (mxfp4_moe_mma.py in the patched vLLM;
mma_gemv.py beside this file runs it). CPU-only self-test, no GPU: a bit-exact Python emulation of its
_DECODE_ASM and _SCALE0_ASM / _SCALE1_ASM with the fragment mapping the loop assumes, for every nibble code
and a range of scales, and check_numerics.py's packer against vLLM's own preparation of an MXFP4 expert
(prepare_moe_mxfp4_layer_for_marlin, with vLLM's CPU reference of gptq_marlin_repack from
tests/image/marlin_mxfp4_experts.py standing in for the CUDA op). For the routed kernel (moe_kernel.py):
check_moe.py's marlin_unpack against the packer, and moe_kernel.route()'s table against a plain Python
construction, for routings of 1-8 tokens with shared experts and padded slots (-1 and >= E). Prints the
mismatch count and the comparisons; asserts on the scale registers, the unpacker and the routing tables.

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
import check_moe
import check_numerics as cn
import moe_kernel
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


def check_unpack() -> None:
    """check_moe.marlin_unpack inverts check_numerics.marlin_pack (the GPU check's reference rests on it)."""
    gen = torch.Generator().manual_seed(2)
    for n, k in ((64, 32), (192, 256)):
        codes, scales = cn.random_matrix(n, k, gen, 0, 256)
        c2, s2 = check_moe.marlin_unpack(*cn.marlin_pack(codes, scales))
        assert torch.equal(c2, codes) and torch.equal(s2, scales), (n, k)
    print("marlin_unpack ok")


def route_ref(ids: list[list[int]], num_experts: int) -> torch.Tensor:
    """moe_kernel.route()'s table, from its definition: a row for each distinct valid expert, ascending."""
    flat = [e for tok in ids for e in tok]
    table = torch.full((len(flat), moe_kernel.TABLE_WIDTH), -1, dtype=torch.int32)
    table[:, 1] = 0
    for d, e in enumerate(sorted({e for e in flat if 0 <= e < num_experts})):
        slots = [s for s, f in enumerate(flat) if f == e]
        table[d, 0], table[d, 1] = e, len(slots)
        table[d, moe_kernel.SLOT0:moe_kernel.SLOT0 + len(slots)] = torch.tensor(slots, dtype=torch.int32)
    return table


def check_route() -> None:
    num_e = 128
    gen = torch.Generator().manual_seed(3)
    cases = {
        "one token": [[5, 0, 127, 64]],
        "shared, 8 tokens": [[9, 3, 7, 1]] * 8,
        "padded": [[-1, 4, -1, 128], [4, 200, 2, -1], [-1, -1, -1, -1]],
        "all padded": [[-1, -1, 128, 129]],
        "distinct, 8 tokens": torch.randperm(num_e, generator=gen)[:32].view(8, 4).tolist(),
    }
    for m in (1, 2, 3, 4, 5, 8):  # random top 4: repeats across tokens as they fall
        cases[f"random, {m} tokens"] = [torch.randperm(num_e, generator=gen)[:4].tolist() for _ in range(m)]
    bad = [name for name, ids in cases.items()
           if not torch.equal(moe_kernel.route(torch.tensor(ids, dtype=torch.int32), num_e),
                              route_ref(ids, num_e))]
    print(f"route tables: {len(cases) - len(bad)} of {len(cases)} equal", bad or "")
    assert not bad, bad


def main() -> None:
    check_decode()
    check_scales()
    check_unpack()
    check_route()
    check_packer()


if __name__ == "__main__":
    main()
