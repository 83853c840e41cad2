"""L2-cold time of one gpt-oss-120b MoE layer at decode batch sizes: vllm/0007's two Triton kernels over
Marlin's weights (or, with --kernels mma, vllm/0009's tensor-core K loop of them) against Marlin's fused MoE
(vLLM's current backend on the H100/H200 profile), and the kernels' time as a fraction of the bytes' time at
the GPU's measured copy bandwidth.

    python lab/scripts/gpu/bench_moe_gemv.py [--out FILE] [--m 1,2,4,8] [--replays 30] [--sweep] [--shared]
                                             [--kernels gemv|mma]

One layer of 128 random MXFP4 experts (sparkserve_lab.kernels.mxfp4_experts) holds 1.7 GB, over 30 times
an H200's L2. Each timed call routes its tokens to other experts than the calls around it (a CUDA graph
cycles through routings that cover all 128 experts before one comes back), so no call finds its experts
in L2, as in the model, where 36 layers stream between two uses of one layer. Bytes per call: the
unpadded fp4 bytes, scales and biases of the distinct experts routed (what the kernels read). Bandwidth:
a device-to-device copy of 4 GB, read plus write, over its time.

Routing: by default the tokens of a call take distinct experts (4 m of them), the kernels' best case and
Marlin's worst, since Marlin groups an expert's tokens and reads its weights once. --shared routes every
token of a call to the same 4 experts (a served batch's tokens share experts, up to this extreme): the
kernels read an expert once per token routed to it, Marlin once.

--sweep also times the kernels' K splits and tiles per step (the tensor-core kernels: their K splits;
Marlin once per M). The target at M = 1:
at least 60% of the copy bandwidth. Exits 1 when the kernels disagree with Marlin beyond the GPU proof's bound
(tests/gpu/test_mxfp4_moe_gemv.py). In a proof the table goes to moe_gemv_bench.json in the record, its
"kernels" naming the set.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

import torch
from sparkserve_lab import proofs
from sparkserve_lab.kernels import mxfp4_experts as mx
from sparkserve_lab.kernels import timing

# --kernels: the module of each set, whose call has its name
KERNELS = {"gemv": "mxfp4_moe_gemv", "mma": "mxfp4_moe_mma"}


def distinct_experts(m: int, shared: bool) -> int:
    """Experts one call reads: 4 per token, or 4 for all its tokens when they share them."""
    return mx.TOPK * (1 if shared else m)


def routings(m: int, calls: int, gen: Any, shared: bool = False) -> list[tuple[Any, Any]]:
    """`calls` routings of m tokens whose experts walk through all 128 before any repeats: call c starts at
    expert (n c) mod 128 for its n distinct experts, each token takes 4 consecutive experts (with `shared`
    the same 4 for every token), a random weight each."""
    out = []
    n = distinct_experts(m, shared)
    for c in range(calls):
        base = (n * c) % mx.EXPERTS
        ids = (base + torch.arange(n, device="cuda")) % mx.EXPERTS
        ids = ids.repeat(m) if shared else ids
        w = torch.rand(m, mx.TOPK, generator=gen, device="cuda")
        ids = ids.view(m, mx.TOPK).to(torch.int32).contiguous()
        out.append((ids, (w / w.sum(-1, keepdim=True)).contiguous()))
    return out


class Layer:
    """One M's shared inputs: the activations, the routings, Marlin's L2-cold time and the float32
    reference and Marlin's output for the first routing, so each kernel variant is timed and checked
    against the same ones."""

    def __init__(self, ex: mx.Experts, m: int, replays: int, bandwidth: float, shared: bool = False) -> None:
        from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemv as gemv

        self.ex, self.m, self.replays, self.shared = ex, m, replays, shared
        gen = torch.Generator(device="cuda").manual_seed(m)
        self.ws = gemv.get_workspace(torch.device("cuda"), mx.HIDDEN_PAD, mx.INTER_PAD, mx.TOPK)
        self.x = torch.zeros(m, mx.HIDDEN_PAD, device="cuda", dtype=torch.bfloat16)
        self.x[:, :mx.HIDDEN] = torch.randn(m, mx.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        self.out = torch.empty_like(self.x)
        # Enough calls that their distinct experts cover the layer before one comes back, and 2x the L2.
        n = distinct_experts(m, shared)
        self.per_call = n * mx.expert_bytes()
        self.l2 = timing.l2_bytes()
        calls = max(mx.EXPERTS // n, timing.copies_needed(self.per_call, self.l2))
        self.routes = routings(m, calls, gen, shared)
        self.byte_us = self.per_call / bandwidth * 1e6
        self.t_marlin = timing.graph_time([lambda r=r: self.marlin(*r) for r in self.routes], self.per_call,
                                          self.l2, replays)
        ids, w = self.routes[0]
        self.ref = mx.reference(self.x, ids, w, ex)[:, :mx.HIDDEN]
        self.theirs = self.marlin(ids, w)[:, :mx.HIDDEN].float()
        self.marlin_err = (self.theirs - self.ref).abs().max().item()

    def marlin(self, ids: Any, w: Any) -> Any:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.experts import marlin_moe
        from vllm.scalar_type import scalar_types

        w13, w2, s13, s2, b13, b2 = self.ex.marlin
        return marlin_moe.fused_marlin_moe(self.x, w13, w2, b13, b2, s13, s2, w, ids,
                                           quant_type_id=scalar_types.float4_e2m1f.id,
                                           activation=MoEActivation.SWIGLUOAI)

    def bench(self, call: Any, kernel_kw: dict[str, int]) -> dict[str, Any]:
        w13, w2, s13, s2, b13, b2 = self.ex.marlin

        def ours(ids: Any, w: Any) -> None:
            call(self.x, ids, w, w13, s13, b13, w2, s2, b2, self.out, mx.HIDDEN, mx.INTER, self.ws,
                 **kernel_kw)

        t_ours = timing.graph_time([lambda r=r: ours(*r) for r in self.routes], self.per_call, self.l2,
                                   self.replays)
        ours(*self.routes[0])
        got = self.out[:, :mx.HIDDEN].float()
        vs_marlin = (got - self.theirs).abs().max().item()
        ref_max = self.ref.abs().max().item()
        return {"m": self.m, "routing": "shared" if self.shared else "distinct", "kernel_kw": kernel_kw,
                "bytes_per_call": self.per_call,
                "byte_time_us": self.byte_us, "gemv": t_ours.to_dict(), "marlin": self.t_marlin.to_dict(),
                "gemv_fraction_of_bandwidth": self.byte_us / t_ours.median_us,
                "marlin_fraction_of_bandwidth": self.byte_us / self.t_marlin.median_us,
                "vs_marlin": vs_marlin, "marlin_err": self.marlin_err, "ref_max": ref_max,
                "agrees": vs_marlin <= 2 * self.marlin_err + 2.0 ** -7 * ref_max}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--m", default="1,2,4,8")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--shared", action="store_true", help="the tokens of a call share their 4 experts")
    ap.add_argument("--kernels", choices=sorted(KERNELS), default="gemv",
                    help="vllm/0007's kernels (gemv) or their tensor-core K loop (mma, vllm/0009)")
    args = ap.parse_args()
    torch.manual_seed(0)
    module = importlib.import_module(f"vllm.model_executor.layers.fused_moe.experts.{KERNELS[args.kernels]}")
    call = getattr(module, KERNELS[args.kernels])
    bandwidth = timing.copy_bandwidth()
    ex = mx.make_experts(mx.EXPERTS, torch.device("cuda"))
    variants: list[dict[str, int]] = [{}]
    if args.sweep:
        tiles = (4, 8, 16) if args.kernels == "gemv" else (None,)
        variants += [{"split_k_gate_up": g, "split_k_down": d}
                     | ({"tiles_per_step": t} if t is not None else {})
                     for g in (1, 2, 4) for d in (1, 2, 4, 8) for t in tiles]
    rows = []
    for m in (int(v) for v in args.m.split(",")):
        layer = Layer(ex, m, args.replays, bandwidth, args.shared)
        for kw in variants:
            row = layer.bench(call, kw)
            rows.append(row)
            keys = ("m", "routing", "kernel_kw", "byte_time_us", "gemv_fraction_of_bandwidth",
                    "marlin_fraction_of_bandwidth", "agrees")
            times = {"gemv_us": row["gemv"]["median_us"], "marlin_us": row["marlin"]["median_us"]}
            print(json.dumps({k: row[k] for k in keys} | times), flush=True)
    result = {"device": torch.cuda.get_device_name(), "kernels": args.kernels,
              "copy_bandwidth_gb_s": bandwidth / 1e9,
              "l2_bytes": timing.l2_bytes(), "rows": rows}
    proofs.write_artifact(args.out, "moe_gemv_bench.json", result)
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
