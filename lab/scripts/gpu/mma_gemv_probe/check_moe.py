"""Probe, not part of the product: the routed MoE form of the tensor-core GEMV (moe_kernel.py beside this
file) on a CUDA GPU (written for an H200). gpt-oss-120b's two expert matrices as Marlin holds them, E = 128
experts each, random words and scales: gate_up N = 5888 by K = 2880 as read (k_tiles 180 of the layout's
3072-padded 192) and down N = 3072 by K = 2944. Routing of M = 1, 2, 4, 8 tokens, top 4, in four cases:
    distinct   every slot on its own expert (4 M distinct experts)
    shared     every token on the same 4 experts (4 distinct experts, M slots each)
    padded     distinct experts, but every slot s with s % 3 == 2 is -1 and the last slot is E (no expert)
    random     each token's 4 experts drawn on their own (repeats across tokens as they fall)
Numerics: every case, K splits 1 and 4, against a float32 reference of the same weights dequantized
(marlin_unpack below, the inverse of check_numerics.marlin_pack), within check_numerics.py's bound (2^-12
of the largest output); the rows of padded slots must stay zero; route() on the GPU must equal route() on
the CPU. Speed, L2-cold: the E = 128 tensors are allocated once (about 1.2 GB gate_up, 0.6 GB down), and a
CUDA graph replays one launch per routing table, each table routing to fresh experts (the distinct, shared
and padded cases walk through random permutations of all E, so consecutive launches share none; random
draws on its own), so the weights come from DRAM; medians per launch, with the bytes of the distinct
experts read and their time at the device's measured copy bandwidth. Prints one JSON line, then asserts
the numerics.

From the repository root, with the serving stack (torch, Triton 3.8) importable:

    python3 lab/scripts/gpu/mma_gemv_probe/check_moe.py [--experts E] [--quick]

--experts E: fewer experts (default 128; at least 32, the distinct case at M = 8). --quick: timing for
M = 1 and 8, the distinct and shared cases and no K split only, 8 launches a graph.
"""

import argparse
import json
import os
import statistics
import sys

import torch
from sparkserve_lab import proofs
from sparkserve_lab.kernels import timing

# the siblings (check_numerics imports mma_gemv: both import Triton, neither needs a GPU to import)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_numerics as cn
import moe_kernel

TOPK = 4
CASES = ("distinct", "shared", "padded", "random")
# name: (N, K as read = 16 k_tiles, K as stored)
MATS = {"gate_up": (5888, 2880, 3072), "down": (3072, 2944, 2944)}


def marlin_unpack(words, scale_words):
    """The inverse of check_numerics.marlin_pack: words int32 [K/16, 2N] and scale words int32 [K/32, N/4]
    -> E2M1 codes uint8 [N, K] and E8M0 scales uint8 [K/32, N], on the words' device."""
    kt, n2 = words.shape
    nt = n2 // 128
    dev = words.device
    tc = torch.arange(8, device=dev).view(8, 1, 1, 1)
    r = torch.arange(4, device=dev).view(1, 4, 1, 1)
    wp = torch.arange(4, device=dev).view(1, 1, 4, 1)
    i = torch.arange(8, device=dev).view(1, 1, 1, 8)
    k, n = torch.broadcast_tensors(2 * r + (i >> 2) + 8 * (i & 1), 16 * wp + tc + 8 * ((i >> 1) & 1))
    w = words.to(torch.int64).view(kt, nt, 8, 4, 4, 1)
    nib = (w >> (4 * torch.arange(8, device=dev))) & 15  # [kt, nt, tc, r, wp, i]
    c = torch.empty(kt, nt, 16, 64, dtype=torch.uint8, device=dev)
    c[:, :, k, n] = nib.to(torch.uint8)
    codes = c.permute(0, 2, 1, 3).reshape(kt * 16, nt * 64).T.contiguous()
    # scale byte 8 tc + 4 (wp >> 1) + 2 n8 + (wp & 1) of a tile column's 64 holds column 16 wp + tc + 8 n8
    src = torch.empty(64, dtype=torch.int64)
    for tc_ in range(8):
        for wp_ in range(4):
            for n8 in range(2):
                src[16 * wp_ + tc_ + 8 * n8] = 8 * tc_ + 4 * (wp_ >> 1) + 2 * n8 + (wp_ & 1)
    g = scale_words.shape[0]
    sb = scale_words.contiguous().view(torch.uint8).view(g, nt, 64)
    return codes, sb[:, :, src.to(dev)].reshape(g, nt * 64).contiguous()


def dequant_expert(words, scale_words, k_tiles):
    """W [N, 16 k_tiles] in float32, exactly, of one expert's Marlin words, on their device."""
    codes, scales = marlin_unpack(words[:k_tiles], scale_words[:k_tiles // 2])
    s = torch.pow(2.0, scales.to(torch.float32) - 127.0)
    return cn.E2M1.to(words.device)[codes.long()] * s.T.repeat_interleave(32, dim=1)


def routing(case, m, num_experts, draw):
    """topk_ids int32 [m, TOPK] (CPU) of one case; draw(n) gives n distinct fresh experts."""
    if case == "distinct":
        return draw(m * TOPK).view(m, TOPK)
    if case == "shared":
        return draw(TOPK).repeat(m, 1)
    if case == "padded":
        ids = draw(m * TOPK)
        ids[torch.arange(m * TOPK) % 3 == 2] = -1
        ids[-1] = num_experts
        return ids.view(m, TOPK)
    assert case == "random"
    return torch.stack([draw.independent(TOPK) for _ in range(m)])


class Draw:
    """Experts through consecutive random permutations of all E: n at a time, none repeated until the
    permutation is used up (so consecutive launches read different experts); independent(n) draws n
    distinct experts on their own."""

    def __init__(self, num_experts, gen):
        self.e, self.gen, self.left = num_experts, gen, torch.empty(0, dtype=torch.int32)

    def __call__(self, n):
        if len(self.left) < n:
            self.left = torch.randperm(self.e, generator=self.gen).to(torch.int32)
        out, self.left = self.left[:n].clone(), self.left[n:]
        return out

    def independent(self, n):
        return torch.randperm(self.e, generator=self.gen)[:n].to(torch.int32)


def launch(x, w, s, table, out, k_tiles, split_k):
    """out[slot, :N] for the slots of table (moe_kernel.route) of x [M, >= 16 k_tiles]; w [E, rows, 2N],
    s [E, rows / 2, N / 4] int32."""
    n = w.shape[2] // 2
    assert w.dtype == torch.int32 and s.dtype == torch.int32 and x.dtype == torch.bfloat16
    assert w.shape[1] >= k_tiles and s.shape[1] * 2 >= k_tiles and x.shape[1] >= 16 * k_tiles
    assert table.shape == (x.shape[0] * TOPK, moe_kernel.TABLE_WIDTH) and table.dtype == torch.int32
    assert out.dtype == torch.float32 and out.shape == (table.shape[0], n) and x.stride(1) == 1
    moe_kernel.mma_moe_gemv_kernel[(n // 64, table.shape[0], split_k)](
        x, w, s, table, out, k_tiles, w.shape[2], s.shape[2], w.stride(0), s.stride(0), x.stride(0),
        out.stride(0), TOPK=TOPK, SPLIT_K=split_k, num_warps=moe_kernel.NUM_WARPS)


def reference(x, w, s, topk_ids, k_tiles, n):
    """float32 out [M TOPK, N] of the dequantized experts; rows of padded slots zero."""
    ref = torch.zeros(topk_ids.numel(), n, dtype=torch.float32, device=x.device)
    ids = topk_ids.flatten().tolist()
    for e in sorted({i for i in ids if 0 <= i < w.shape[0]}):
        we = dequant_expert(w[e], s[e], k_tiles)
        slots = [j for j, i in enumerate(ids) if i == e]
        ref[slots] = x[[j // TOPK for j in slots], :16 * k_tiles].float() @ we.T
    return ref


def expert_bytes(topk_ids, num_experts, k_tiles, n):
    """Bytes one launch reads from its distinct experts: k_tiles rows of 2N words, k_tiles / 2 of N scale
    bytes."""
    d = len({i for i in topk_ids.flatten().tolist() if 0 <= i < num_experts})
    return d * (k_tiles * 2 * n * 4 + (k_tiles // 2) * n)


def time_graph(x, w, s, tables, out, k_tiles, split_k, nbytes):
    """Median seconds per launch of a CUDA graph of one launch per table (sparkserve_lab.kernels.timing).
    With a K split, out is not zeroed between launches: the sums are not looked at, and the time is the
    kernel's alone."""
    calls = [lambda t=t: launch(x, w, s, t, out, k_tiles, split_k) for t in tables]
    return timing.graph_time(calls, nbytes, timing.l2_bytes()).median_us / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=128, metavar="E", help="experts a matrix (default 128)")
    ap.add_argument("--quick", action="store_true",
                    help="timing: M 1 and 8, distinct and shared, no K split, 8 launches a graph")
    args = ap.parse_args()
    num_e = args.experts
    assert num_e >= 8 * TOPK, "the distinct case at M = 8 needs 32 experts"
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference in float32 proper
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    dgen = torch.Generator(device=dev).manual_seed(0)
    result = {"device": torch.cuda.get_device_name(), "experts": num_e, "topk": TOPK,
              "weights": "E experts a matrix allocated once; each launch of a timed graph routes to fresh "
                         "experts (distinct/shared/padded: through random permutations of all E, none "
                         "shared with the launch before; random: independent draws), so weights come "
                         "from DRAM",
              "route_ok": True, "cases": [], "timing": []}
    ok = True

    # random words: every nibble a uniform E2M1 code, as check_numerics' random codes; E8M0 in [115, 127]
    weights = {}
    for name, (n, _k, k_stored) in MATS.items():
        w = torch.randint(-2**31, 2**31, (num_e, k_stored // 16, 2 * n), dtype=torch.int32, device=dev,
                          generator=dgen)
        s = torch.randint(115, 128, (num_e, k_stored // 32, n), dtype=torch.uint8, device=dev, generator=dgen)
        weights[name] = (w, s.view(torch.int32))
    result["GB_per_matrix"] = {k: round(sum(t.numel() * 4 for t in v) / 1e9, 3) for k, v in weights.items()}

    # numerics
    for name, (n, k, _k_stored) in MATS.items():
        w, s = weights[name]
        k_tiles = k // 16
        for m in (1, 2, 4, 8):
            x = (torch.randn(m, k, generator=gen) * 2.0).to(torch.bfloat16).to(dev)
            for case in CASES:
                ids = routing(case, m, num_e, Draw(num_e, gen))
                table = moe_kernel.route(ids.to(dev), num_e)
                same = torch.equal(table.cpu(), moe_kernel.route(ids, num_e))
                result["route_ok"] &= same
                ok &= same
                ref = reference(x, w, s, ids, k_tiles, n)
                pad = torch.tensor([not 0 <= i < num_e for i in ids.flatten().tolist()], device=dev)
                for split_k in (1, 4):
                    out = torch.zeros(m * TOPK, n, dtype=torch.float32, device=dev)
                    launch(x, w, s, table, out, k_tiles, split_k)
                    torch.cuda.synchronize()
                    e = cn.errors(out, ref)
                    pad_zero = bool((out[pad] == 0).all())
                    # fp32 sums of exact products in another order: check_numerics.py's bound
                    e_ok = e["err"] <= 2.0 ** -12 * e["ref_max"] and pad_zero
                    ok &= e_ok
                    result["cases"].append({"mat": name, "M": m, "case": case, "split_k": split_k,
                                            "distinct": len({i for i in ids.flatten().tolist()
                                                             if 0 <= i < num_e}),
                                            **{k2: float(f"{v2:.4g}") for k2, v2 in e.items()},
                                            "pad_rows_zero": pad_zero, "ok": e_ok})

    # speed
    bw = timing.copy_bandwidth()
    result["copy_bw_GBps"] = round(bw / 1e9, 1)
    launches = 8 if args.quick else 32
    ms = (1, 8) if args.quick else (1, 2, 4, 8)
    cases = ("distinct", "shared") if args.quick else CASES
    splits = (1,) if args.quick else (1, 2, 4)
    for name, (n, k, _k_stored) in MATS.items():
        w, s = weights[name]
        k_tiles = k // 16
        for m in ms:
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(dev)
            out = torch.zeros(m * TOPK, n, dtype=torch.float32, device=dev)
            for case in cases:
                draw = Draw(num_e, gen)
                ids = [routing(case, m, num_e, draw) for _ in range(launches)]
                tables = [moe_kernel.route(i.to(dev), num_e) for i in ids]
                nbytes = statistics.mean(expert_bytes(i, num_e, k_tiles, n) for i in ids)
                for split_k in splits:
                    t = time_graph(x, w, s, tables, out, k_tiles, split_k, int(nbytes))
                    result["timing"].append({"mat": name, "M": m, "case": case, "split_k": split_k,
                                             "launches": launches, "us": round(t * 1e6, 2),
                                             "MB": round(nbytes / 1e6, 2),
                                             "bytes_us_at_copy_bw": round(nbytes / bw * 1e6, 2),
                                             "GBps": round(nbytes / t / 1e9, 1),
                                             "of_copy_bw": round(nbytes / t / bw, 3)})
    result["ok"] = bool(ok)
    print(json.dumps(result))
    proofs.write_artifact(None, "mma_moe_probe.json", result)
    assert ok, "numerics or routing off: see the JSON line"


if __name__ == "__main__":
    main()
