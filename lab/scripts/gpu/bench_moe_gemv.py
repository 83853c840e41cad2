"""L2-cold time of one gpt-oss-120b MoE layer at decode batch sizes: vllm/0007's two Triton kernels over
Marlin's weights against Marlin's fused MoE (vLLM's current backend on the H100/H200 profile), and the
kernels' time as a fraction of the bytes' time at the GPU's measured copy bandwidth.

    python lab/scripts/gpu/bench_moe_gemv.py [--out FILE] [--m 1,2,4,8] [--replays 30] [--sweep]

One layer of 128 random MXFP4 experts (sparkserve_lab.kernels.mxfp4_experts) holds 1.7 GB, over 30 times
an H200's L2. Each timed call routes its tokens to other experts than the calls around it (a CUDA graph
cycles through routings that cover all 128 experts before one comes back), so no call finds its experts
in L2, as in the model, where 36 layers stream between two uses of one layer. Bytes per call: the
unpadded fp4 bytes, scales and biases of the distinct experts routed (what the kernels read). Bandwidth:
a device-to-device copy of 4 GB, read plus write, over its time.

--sweep also times the kernels' K splits and tiles per step. The target at M = 1: at least 60% of the
copy bandwidth. Exits 1 when the kernels disagree with Marlin beyond the GPU proof's bound
(tests/gpu/test_mxfp4_moe_gemv.py). In a proof the table goes to moe_gemv_bench.json in the record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch
from sparkserve_lab.kernels import mxfp4_experts as mx
from sparkserve_lab.kernels import timing


def copy_bandwidth(nbytes: int = 4 << 30, reps: int = 10) -> float:
    """Bytes per second of a device-to-device copy, counting the read and the write."""
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    end.synchronize()
    return 2 * nbytes * reps / (start.elapsed_time(end) / 1000)


def routings(m: int, calls: int, gen: Any) -> list[tuple[Any, Any]]:
    """`calls` routings of m tokens whose experts walk through all 128 before any repeats: call c starts at
    expert (4 m c) mod 128, each token takes 4 consecutive experts, a random weight each."""
    out = []
    for c in range(calls):
        base = (mx.TOPK * m * c) % mx.EXPERTS
        ids = (base + torch.arange(m * mx.TOPK, device="cuda")) % mx.EXPERTS
        w = torch.rand(m, mx.TOPK, generator=gen, device="cuda")
        ids = ids.view(m, mx.TOPK).to(torch.int32).contiguous()
        out.append((ids, (w / w.sum(-1, keepdim=True)).contiguous()))
    return out


def bench(ex: mx.Experts, m: int, replays: int, bandwidth: float,
          kernel_kw: dict[str, int]) -> dict[str, Any]:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts import marlin_moe
    from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemv as gemv
    from vllm.scalar_type import scalar_types

    gen = torch.Generator(device="cuda").manual_seed(m)
    w13, w2, s13, s2, b13, b2 = ex.marlin
    ws = gemv.get_workspace(torch.device("cuda"), mx.HIDDEN_PAD, mx.INTER_PAD, mx.TOPK)
    x = torch.zeros(m, mx.HIDDEN_PAD, device="cuda", dtype=torch.bfloat16)
    x[:, :mx.HIDDEN] = torch.randn(m, mx.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(x)
    # Enough calls that their distinct experts cover the layer before one comes back, and 2x the L2.
    per_call = mx.TOPK * m * mx.expert_bytes()
    calls = max(mx.EXPERTS // (mx.TOPK * m), timing.copies_needed(per_call, timing.l2_bytes()))
    routes = routings(m, calls, gen)

    def ours(ids: Any, w: Any) -> None:
        gemv.mxfp4_moe_gemv(x, ids, w, w13, s13, b13, w2, s2, b2, out, mx.HIDDEN, mx.INTER, ws, **kernel_kw)

    def marlin(ids: Any, w: Any) -> None:
        marlin_moe.fused_marlin_moe(x, w13, w2, b13, b2, s13, s2, w, ids,
                                    quant_type_id=scalar_types.float4_e2m1f.id,
                                    activation=MoEActivation.SWIGLUOAI)

    l2 = timing.l2_bytes()
    t_ours = timing.graph_time([lambda r=r: ours(*r) for r in routes], per_call, l2, replays)
    t_marlin = timing.graph_time([lambda r=r: marlin(*r) for r in routes], per_call, l2, replays)
    byte_us = per_call / bandwidth * 1e6
    ids, w = routes[0]
    ours(ids, w)
    got = out[:, :mx.HIDDEN].float()
    ref = mx.reference(x, ids, w, ex)[:, :mx.HIDDEN]
    theirs = marlin_moe.fused_marlin_moe(x, w13, w2, b13, b2, s13, s2, w, ids,
                                         quant_type_id=scalar_types.float4_e2m1f.id,
                                         activation=MoEActivation.SWIGLUOAI)[:, :mx.HIDDEN].float()
    marlin_err = (theirs - ref).abs().max().item()
    vs_marlin = (got - theirs).abs().max().item()
    return {"m": m, "kernel_kw": kernel_kw, "bytes_per_call": per_call, "byte_time_us": byte_us,
            "gemv": t_ours.to_dict(), "marlin": t_marlin.to_dict(),
            "gemv_fraction_of_bandwidth": byte_us / t_ours.median_us,
            "marlin_fraction_of_bandwidth": byte_us / t_marlin.median_us,
            "vs_marlin": vs_marlin, "marlin_err": marlin_err, "ref_max": ref.abs().max().item(),
            "agrees": vs_marlin <= 2 * marlin_err + 2.0 ** -7 * ref.abs().max().item()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--m", default="1,2,4,8")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    bandwidth = copy_bandwidth()
    ex = mx.make_experts(mx.EXPERTS, torch.device("cuda"))
    variants: list[dict[str, int]] = [{}]
    if args.sweep:
        variants += [{"split_k_gate_up": g, "split_k_down": d, "tiles_per_step": t}
                     for g in (1, 2, 4) for d in (2, 4, 8) for t in (2, 4, 8, 16)]
    rows = []
    for m in (int(v) for v in args.m.split(",")):
        for kw in variants:
            row = bench(ex, m, args.replays, bandwidth, kw)
            rows.append(row)
            keys = ("m", "kernel_kw", "byte_time_us", "gemv_fraction_of_bandwidth",
                    "marlin_fraction_of_bandwidth", "agrees")
            times = {"gemv_us": row["gemv"]["median_us"], "marlin_us": row["marlin"]["median_us"]}
            print(json.dumps({k: row[k] for k in keys} | times), flush=True)
    result = {"device": torch.cuda.get_device_name(), "copy_bandwidth_gb_s": bandwidth / 1e9,
              "l2_bytes": timing.l2_bytes(), "rows": rows}
    out = args.out or (os.path.join(os.environ["SPARKSERVE_PROOF_DIR"], "moe_gemv_bench.json")
                       if os.environ.get("SPARKSERVE_PROOF_DIR") else None)
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
