"""Probe, not part of the product: vllm/0009's tensor-core K loop on one matrix (the kernel: mma_gemv.py
beside this file). On a CUDA GPU (written for an H200): mma_gemv_kernel's numerics against a
float32 reference (1-8 tokens, K splits 1 and 4, gpt-oss-120b's gate_up and down matrices, the ends of the
E8M0 scale range the decode is exact for) and its L2-cold time against the device's copy bandwidth. Prints
one JSON line, then asserts that every numerics case is within its bound.

From the repository root, with the serving stack (torch, Triton, vLLM) importable:

    python3 lab/scripts/gpu/mma_gemv_probe/check_numerics.py [--experts N] [--quick]

--experts N gives the gate_up and down matrices N times the columns (N*5888 and N*3072), one launch
standing in for the N experts one token reads (the bytes of N experts, laid out as one wider matrix);
the JSON line records N as "experts". --quick times on 8 copies of each matrix instead of enough to be
L2-cold.

Layout: the weights are packed here into Marlin's repacked MXFP4 layout from the layout's definition (word
tc*16 + r*4 + wp of a 16x64 tile, nibble i = element k = 2r + (i>>2) + 8(i&1), n = 16wp + tc + 8((i>>1)&1);
scale byte of column (tc, wp, n8) at 8tc + 4(wp>>1) + 2n8 + (wp&1) of the tile column's 64), and, where
vLLM's own preparation runs (its gptq_marlin_repack CUDA op), cross-checked against it and run on it too.
"""

import argparse
import json
import os
import sys
from types import SimpleNamespace

import torch
from sparkserve_lab import proofs
from sparkserve_lab.kernels import timing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mma_gemv

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def random_matrix(N, K, gen, s_lo=115, s_hi=128):
    """E2M1 codes [N, K] (uint8 0..15) and E8M0 scales [K/32, N] (uint8)."""
    codes = torch.randint(0, 16, (N, K), generator=gen, dtype=torch.uint8)
    scales = torch.randint(s_lo, s_hi, (K // 32, N), generator=gen, dtype=torch.uint8)
    return codes, scales


def dequant(codes, scales):
    """W[n, k] in float32, exactly."""
    s = torch.pow(2.0, scales.to(torch.float32) - 127.0)  # [K/32, N]
    return E2M1[codes.long()] * s.T.repeat_interleave(32, dim=1)


def marlin_pack(codes, scales):
    """(words int32 [K/16, 2N], scale words int32 [K/32, N/4]) in Marlin's layout, from its definition."""
    N, K = codes.shape
    assert N % 64 == 0 and K % 32 == 0
    kt, nt = K // 16, N // 64
    c = codes.to(torch.int64).T.reshape(kt, 16, nt, 64).permute(0, 2, 1, 3)  # [kt, pid_n, k16, n64]
    tc = torch.arange(8).view(8, 1, 1, 1)
    r = torch.arange(4).view(1, 4, 1, 1)
    wp = torch.arange(4).view(1, 1, 4, 1)
    i = torch.arange(8).view(1, 1, 1, 8)
    k = 2 * r + (i >> 2) + 8 * (i & 1)  # [8, 4, 1, 8] -> broadcast
    n = 16 * wp + tc + 8 * ((i >> 1) & 1)
    k, n = torch.broadcast_tensors(k, n)  # [8, 4, 4, 8]
    nib = c[:, :, k, n]  # [kt, nt, tc, r, wp, i]
    word = (nib << (4 * torch.arange(8))).sum(-1)  # [kt, nt, 8, 4, 4] (< 2^32)
    word = word.reshape(kt, nt * 128)
    word = torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)
    # scales: byte 8 tc + 4 (wp >> 1) + 2 n8 + (wp & 1) of tile column pid_n's 64 holds column
    # 16 wp + tc + 8 n8
    G = K // 32
    sb = torch.empty(G, nt, 64, dtype=torch.uint8)
    s = scales.view(G, nt, 64)
    for tc_ in range(8):
        for wp_ in range(4):
            for n8 in range(2):
                sb[:, :, 8 * tc_ + 4 * (wp_ >> 1) + 2 * n8 + (wp_ & 1)] = s[:, :, 16 * wp_ + tc_ + 8 * n8]
    return word.contiguous(), sb.reshape(G, N).contiguous().view(torch.int32)


def vllm_pack(codes13, scales13, codes2, scales2):
    """vLLM's own preparation (one expert, w13 = the first matrix, w2 the second): its Marlin words and
    scales for both, or None where it does not run."""
    try:
        from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4 as mf4
    except Exception as e:
        return None, f"import: {e!r}"

    def fp4_bytes(codes):  # [N, K] codes -> [1, N, K/2] bytes, low nibble first (break_fp4_bytes' order)
        return (codes[:, 0::2] | (codes[:, 1::2] << 4)).unsqueeze(0).cuda()

    N13 = codes13.shape[0]
    N2 = codes2.shape[0]
    try:
        layer = SimpleNamespace(params_dtype=torch.bfloat16)
        out = mf4.prepare_moe_mxfp4_layer_for_marlin(
            layer, fp4_bytes(codes13), fp4_bytes(codes2), scales13.T.contiguous().unsqueeze(0).cuda(),
            scales2.T.contiguous().unsqueeze(0).cuda(), torch.zeros(1, N13, dtype=torch.bfloat16).cuda(),
            torch.zeros(1, N2, dtype=torch.bfloat16).cuda())
        w13, w2, s13, s2 = out[0], out[1], out[2], out[3]
        return (w13[0].contiguous(), s13[0].contiguous().view(torch.int32),
                w2[0].contiguous(), s2[0].contiguous().view(torch.int32)), None
    except Exception as e:
        return None, f"prepare: {e!r}"


def launch(x, w, s, out, k_tiles, split_k):
    N = w.shape[1] // 2
    assert w.dtype == torch.int32 and s.dtype == torch.int32 and x.dtype == torch.bfloat16
    assert w.shape[0] >= k_tiles and s.shape[0] * 2 >= k_tiles and x.shape[1] >= 16 * k_tiles
    assert out.dtype == torch.float32 and out.shape[1] >= N and x.shape[0] == out.shape[0] <= 8
    mma_gemv.mma_gemv_kernel[(N // 64, split_k)](
        x, w, s, out, x.shape[0], k_tiles, w.shape[1], s.shape[1], x.stride(0), out.stride(0),
        SPLIT_K=split_k, num_warps=mma_gemv.NUM_WARPS)


def run(x, w, s, N, k_tiles, split_k):
    out = torch.zeros(x.shape[0], N, dtype=torch.float32, device=x.device)
    launch(x, w, s, out, k_tiles, split_k)
    torch.cuda.synchronize()
    return out


def errors(out, ref):
    err = (out - ref).abs().max().item()
    ref_max = ref.abs().max().item()
    return {"err": err, "ref_max": ref_max, "rel": err / max(ref_max, 1e-30)}


def time_cold(x, ws, ss, N, k_tiles, split_k):
    """Median seconds per launch of a CUDA graph that cycles through the len(ws) weight copies (L2-cold:
    sparkserve_lab.kernels.timing). With a K split, out is not zeroed between launches: the sums are not
    looked at, and the time is the kernel's alone."""
    out = torch.zeros(x.shape[0], N, dtype=torch.float32, device=x.device)
    calls = [lambda w=w, s=s: launch(x, w, s, out, k_tiles, split_k) for w, s in zip(ws, ss, strict=True)]
    nbytes = ws[0].numel() * 4 + ss[0].numel() * 4
    return timing.graph_time(calls, nbytes, timing.l2_bytes(), replays=20).median_us / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=1, metavar="N",
                    help="N times the columns of each matrix, for the N experts one token reads (default 1)")
    ap.add_argument("--quick", action="store_true", help="time on 8 copies of each matrix (not L2-cold)")
    args = ap.parse_args()
    quick = args.quick
    assert args.experts >= 1
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    gen = torch.Generator().manual_seed(0)
    dev = torch.device("cuda")
    result = {"device": torch.cuda.get_device_name(), "experts": args.experts, "cases": [], "timing": [],
              "checks": []}
    ok = True

    # gpt-oss-120b as Marlin holds it: gate_up N = 2 * 2944 = 5888 by K = 3072 (hidden 2880 padded), down
    # N = 3072 by K = 2944; N times the columns for N experts.
    ne = args.experts
    shapes = {"gate_up": (5888 * ne, 3072), "down": (3072 * ne, 2944)}
    mats = {name: random_matrix(N, K, gen) for name, (N, K) in shapes.items()}
    packed = {name: marlin_pack(*m) for name, m in mats.items()}
    W = {name: dequant(*m) for name, m in mats.items()}

    # vLLM's layout, where its preparation runs: the same words and scales?
    v, why = vllm_pack(*mats["gate_up"], *mats["down"])
    if v is None:
        result["vllm_layout"] = {"ran": False, "why": why}
    else:
        vw13, vs13, vw2, vs2 = v
        same = {"gate_up_words": torch.equal(vw13.cpu(), packed["gate_up"][0]),
                "gate_up_scales": torch.equal(vs13.cpu(), packed["gate_up"][1]),
                "down_words": torch.equal(vw2.cpu(), packed["down"][0]),
                "down_scales": torch.equal(vs2.cpu(), packed["down"][1])}
        result["vllm_layout"] = {"ran": True, "shapes": [list(vw13.shape), list(vs13.shape)], **same}

    # numerics: M = 1, 2, 4, 8 (and 3), split 1 and 4, both matrices; K = the full stored K, and for
    # gate_up also k_tiles = 180 (hidden 2880 unpadded: only its tiles read)
    for name, (N, K) in shapes.items():
        w, s = (t.to(dev) for t in packed[name])
        for k_tiles in ([K // 16, 180] if name == "gate_up" else [K // 16]):
            Wk = W[name][:, :16 * k_tiles]
            for M in (1, 2, 3, 4, 8):
                x = (torch.randn(M, K, generator=gen) * 2.0).to(torch.bfloat16)
                ref = x.float()[:, :16 * k_tiles] @ Wk.T  # float32 reference, exact inputs
                for split_k in (1, 4):
                    out = run(x.to(dev), w, s, N, k_tiles, split_k).cpu()
                    e = errors(out, ref)
                    # fp32 sums of exact products in a different order (tensor-core accumulation): 2^-12
                    # of the largest output
                    e_ok = e["err"] <= 2.0 ** -12 * e["ref_max"]
                    ok &= e_ok
                    result["cases"].append({"mat": name, "M": M, "k_tiles": k_tiles, "split_k": split_k,
                                            **{k2: float(f"{v2:.4g}") for k2, v2 in e.items()}, "ok": e_ok})
        if v is not None:  # the kernel on vLLM's own words and scales
            vw, vs = (vw13, vs13) if name == "gate_up" else (vw2, vs2)
            x = torch.randn(8, K, generator=gen).to(torch.bfloat16)
            out = run(x.to(dev), vw, vs, N, K // 16, 1).cpu()
            e = errors(out, x.float() @ W[name].T)
            e_ok = e["err"] <= 2.0 ** -12 * e["ref_max"]
            ok &= e_ok
            result["checks"].append({"on_vllm_layout": name, **e, "ok": e_ok})

    # scale range: the decode is exact for E8M0 s in [3, 136]; check the ends
    N, K = 128, 256
    for lo, hi in ((3, 12), (126, 137)):
        codes, scales = random_matrix(N, K, gen, lo, hi)
        w, s = (t.to(dev) for t in marlin_pack(codes, scales))
        x = torch.randn(8, K, generator=gen).to(torch.bfloat16)
        ref = x.float() @ dequant(codes, scales).T
        out = run(x.to(dev), w, s, N, K // 16, 1).cpu()
        e = errors(out, ref)
        e_ok = e["err"] <= 2.0 ** -12 * e["ref_max"]
        ok &= e_ok
        result["checks"].append({"scale_range": [lo, hi - 1], **e, "ok": e_ok})

    # speed, L2-cold: 32+ copies of each matrix, a graph of one launch per copy, median per launch
    bw = timing.copy_bandwidth()
    result["copy_bw_GBps"] = round(bw / 1e9, 1)
    l2 = timing.l2_bytes()
    for name, (N, K) in shapes.items():
        w, s = packed[name]
        copies = 8 if quick else max(32, -(-4 * l2 // (w.numel() * 4)))
        ws = [w.to(dev) for _ in range(copies)]
        ss = [s.to(dev) for _ in range(copies)]
        assert quick or sum(t.numel() * 4 for t in ws) >= 4 * l2
        for k_tiles in ([K // 16, 180] if name == "gate_up" else [K // 16]):
            nbytes = k_tiles * w.shape[1] * 4 + (k_tiles // 2) * s.shape[1] * 4
            for M in (1, 4, 8):
                x = torch.randn(M, K, generator=gen).to(torch.bfloat16).to(dev)
                for split_k in (1, 2, 4, 8):
                    t = time_cold(x, ws, ss, N, k_tiles, split_k)
                    result["timing"].append({"mat": name, "copies": copies, "N": N, "k_tiles": k_tiles,
                                             "M": M, "split_k": split_k, "us": round(t * 1e6, 2),
                                             "GBps": round(nbytes / t / 1e9, 1),
                                             "of_copy_bw": round(nbytes / t / bw, 3)})
        del ws, ss
    result["ok"] = bool(ok)
    print(json.dumps(result))
    proofs.write_artifact(None, "mma_gemv_probe.json", result)
    assert ok, "numerics off: see the JSON line"


if __name__ == "__main__":
    main()
