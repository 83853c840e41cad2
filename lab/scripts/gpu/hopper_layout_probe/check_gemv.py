"""Probe, not part of the product: hopper_gemv.py's kernel (a decode GEMV over triton_kernels' Hopper MXFP4
layouts, the copy of the experts vLLM's triton backend keeps on sm_90) on a CUDA GPU: its numbers, then its
L2-cold time against the bytes' time and against triton_kernels' own matmul_ogs on the same swizzled weights
(stock vLLM's decode GEMM at these sizes).

Numerics: gpt-oss-120b's two matrices of one expert (gate_up N 5760 by K 2880, down N 2880 by K 2880) from
random E2M1 codes and E8M0 scales in vLLM's sm_90 layouts (hopper_pack.py; where vLLM is installed its own
swizzle, check_layout.swizzle_as_vllm_sm90, must give the same words), at
M = 1, 2, 3, 4, 8 token rows, RB = 1, 2, 4 and K splits 1, 2, 4, against a float32 reference of the same
weights: within 2^-12 of the largest output (fp32 sums of exact products in another order, as vllm/0009's
probe); then the ends of the scale range the decode is exact for (3-11 and 126-136).
Speed: --experts E (default 4, one token's experts) times each matrix's rows, so one launch reads what one
token's MoE reads; enough swizzled copies that a copy has left L2 before it is read again
(sparkserve_lab.kernels.timing), a CUDA graph of one launch a copy, the median per launch at M = 1, 2, 4, 8
for each RB and K split, with the bytes (values and scales) at the device's measured copy bandwidth.
matmul_ogs runs the same weights with its defaults; a failure to call it is recorded, not fatal.

On the GPU host, from the repository root, with the serving stack importable (or torch and Triton 3.8
alone: then without the vLLM cross-check and matmul_ogs; PYTHONPATH=lab/src for sparkserve_lab):

    python3 lab/scripts/gpu/hopper_layout_probe/check_gemv.py [--experts E]

Prints one JSON line, then asserts the numerics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
from sparkserve_lab import proofs
from sparkserve_lab.kernels import timing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hopper_gemv
import hopper_pack

try:  # vLLM's swizzle and triton_kernels' matmul_ogs, where vLLM is installed
    import check_layout
except ImportError:
    check_layout = None

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
SHAPES = {"gate_up": (5760, 2880), "down": (2880, 2880)}
SPLITS = (1, 2, 4)  # K splits: 45 chunks of 64 K in 1, 2 (23 + 22) or 4 (12 + 12 + 12 + 9) runs


class Swizzled:
    """One matrix of E2M1 codes [N, K] and E8M0 scales [N, K / 32] in vLLM's sm_90 layouts, on the GPU:
    the words hopper_pack.py writes, and where vLLM is installed also its own swizzle (`qt`, `st`, for
    matmul_ogs), which must hold the same words."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor) -> None:
        self.n, self.k = codes.shape
        self.w = torch.from_numpy(hopper_pack.pack_values(codes.numpy()).view("int32")).cuda()
        self.s = torch.from_numpy(hopper_pack.pack_scales(scales.numpy()).view("int32")).cuda()
        self.nbytes = self.w.numel() * 4 + self.s.numel() * 4
        self.qt = self.st = None
        if check_layout is not None:
            packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).unsqueeze(0).cuda()
            self.qt, self.st = check_layout.swizzle_as_vllm_sm90(packed, scales.unsqueeze(0).cuda())
            # the storage: the transpose of a contiguous array
            assert torch.equal(self.qt.storage.data[0].mT.view(torch.int32), self.w)
            assert torch.equal(self.st.storage.data[0].mT.view(torch.int32), self.s)


def random_codes(n: int, k: int, gen: torch.Generator, s_lo: int = 115, s_hi: int = 128):
    codes = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.uint8)
    scales = torch.randint(s_lo, s_hi, (n, k // 32), generator=gen, dtype=torch.uint8)
    return codes, scales


def dequant(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W [N, K] in float32, exactly."""
    return E2M1[codes.long()] * torch.pow(2.0, scales.float() - 127.0).repeat_interleave(32, dim=1)


def launch(x: torch.Tensor, m: Swizzled, out: torch.Tensor, rb: int, split_k: int = 1) -> None:
    """With split_k > 1 the programs add into out (zero it first for the sums; timing does not look)."""
    assert x.dtype == torch.bfloat16 and x.shape[0] <= 8 and x.shape[1] == m.k and m.k % 64 == 0
    assert m.n % (16 * rb) == 0 and out.shape == (x.shape[0], m.n)
    hopper_gemv.hopper_gemv_kernel[(m.n // (16 * rb), split_k)](
        x, m.w, m.s, out, x.shape[0], m.k // 64, m.w.shape[1], m.s.shape[1], x.stride(0), out.stride(0),
        RB=rb, SPLIT_K=split_k, num_warps=hopper_gemv.NUM_WARPS)


def numerics(gen: torch.Generator, quick: bool = False) -> tuple[list[dict], bool]:
    cases, ok = [], True

    def check(label: dict, codes: torch.Tensor, scales: torch.Tensor, ms: tuple[int, ...],
              rbs: tuple[int, ...], splits: tuple[int, ...] = (1,)) -> None:
        nonlocal ok
        m = Swizzled(codes, scales)
        w = dequant(codes, scales)
        for mm in ms:
            x = (torch.randn(mm, m.k, generator=gen) * 2.0).to(torch.bfloat16)
            ref = x.float() @ w.T
            for rb in rbs:
                for split_k in splits:
                    out = torch.zeros(mm, m.n, dtype=torch.float32, device="cuda")
                    launch(x.cuda(), m, out, rb, split_k)
                    err = (out.cpu() - ref).abs().max().item()
                    top = ref.abs().max().item()
                    good = err <= 2.0 ** -12 * top
                    ok &= good
                    cases.append({**label, "M": mm, "RB": rb, "split_k": split_k, "err": float(f"{err:.4g}"),
                                  "ref_max": float(f"{top:.4g}"), "ok": good})

    for name, (n, k) in SHAPES.items():
        if quick:
            check({"mat": name}, *random_codes(n, k, gen), (1, 3, 8), (4,), (1, 2))
        else:
            check({"mat": name}, *random_codes(n, k, gen), (1, 2, 3, 4, 8), (1, 2, 4), SPLITS)
    for lo, hi in ((3, 12), (126, 137)):
        check({"scale_range": [lo, hi - 1]}, *random_codes(256, 256, gen, lo, hi), (8,), (4,))
    return cases, ok


def matmul_ogs_call(x: torch.Tensor, m: Swizzled):
    """A call of triton_kernels' matmul_ogs on the same weights, as one dense expert."""
    from triton_kernels.matmul_ogs import PrecisionConfig, matmul_ogs

    cfg = PrecisionConfig(weight_scale=m.st)
    return lambda: matmul_ogs(x, m.qt, None, precision_config=cfg)


def speed(experts: int, gen: torch.Generator, quick: bool = False) -> dict:
    bandwidth = timing.copy_bandwidth()
    l2 = timing.l2_bytes()
    result: dict = {"copy_bandwidth_gbs": round(bandwidth / 1e9), "l2_bytes": l2, "experts": experts,
                    "rows": []}
    for name, (n, k) in SHAPES.items():
        first = Swizzled(*random_codes(n * experts, k, gen))
        copies = [first] + [Swizzled(*random_codes(n * experts, k, gen))
                            for _ in range(timing.copies_needed(first.nbytes, l2) - 1)]
        for mm in (1, 8) if quick else (1, 2, 4, 8):
            x = torch.randn(mm, k, generator=gen).to(torch.bfloat16).cuda()
            out = torch.zeros(mm, n * experts, dtype=torch.float32, device="cuda")
            row = {"mat": name, "M": mm, "MB": round(first.nbytes / 1e6, 2),
                   "bytes_us": round(first.nbytes / bandwidth * 1e6, 2)}
            times = {}
            for rb in (2, 4) if quick else (1, 2, 4):
                for split_k in SPLITS:
                    calls = [lambda c=c, rb=rb, sk=split_k, x=x, out=out: launch(x, c, out, rb, sk)
                             for c in copies]
                    t = timing.graph_time(calls, first.nbytes, l2)
                    times[f"rb{rb}_split{split_k}"] = round(t.median_us, 2)
                    result["l2_note"] = t.l2_note
            row["us"] = times
            row["fastest"] = min(times, key=times.__getitem__)
            row["fraction_of_bandwidth"] = round(row["bytes_us"] / times[row["fastest"]], 3)
            if check_layout is None:
                row["matmul_ogs_error"] = "vLLM is not installed"
                result["rows"].append(row)
                continue
            try:
                t = timing.graph_time([matmul_ogs_call(x, c) for c in copies], first.nbytes, l2)
                row["matmul_ogs_us"] = round(t.median_us, 2)
            except Exception as e:  # the baseline is a comparison, not the probe
                row["matmul_ogs_error"] = repr(e)[:300]
            result["rows"].append(row)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=4, metavar="E",
                    help="E times each matrix's rows in the timing, the experts one token reads (default 4)")
    ap.add_argument("--quick", action="store_true",
                    help="numerics at RB 4, K splits 1 and 2, M = 1, 3, 8; timing at M = 1 and 8, RB 2 and 4")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    gen = torch.Generator().manual_seed(0)
    cases, ok = numerics(gen, args.quick)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "vllm_swizzle": check_layout is not None,
              "quick": args.quick, "numerics": cases, "numerics_ok": ok}
    if ok:
        result["speed"] = speed(args.experts, gen, args.quick)
    print(json.dumps(result), flush=True)
    proofs.write_artifact(None, "hopper_layout_gemv.json", result)  # the record's copy under `proof run`
    assert ok, [c for c in cases if not c["ok"]]


if __name__ == "__main__":
    sys.exit(main())
