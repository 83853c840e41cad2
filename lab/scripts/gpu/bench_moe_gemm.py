"""Time of one gpt-oss-120b MoE layer at prefill batch sizes: vllm/0008's two Triton grouped GEMMs over
Marlin's weights against Marlin's fused MoE (vLLM's current backend on the H100/H200 profile), in TFLOP/s of
the unpadded experts' arithmetic, and their numbers against Marlin and float32.

    python lab/scripts/gpu/bench_moe_gemm.py [--out FILE] [--m 64,256,1024,2048,4096,8192] [--sweep]

One layer of 128 random MXFP4 experts (sparkserve_lab.kernels.mxfp4_experts; 1.7 GB, over 30 times an
H200's L2), top-4 of random router logits. At these sizes every call reads every expert, and the calls of
a CUDA graph cycle through several routings; the GEMMs are bound by arithmetic, not by the bytes, from a
few hundred tokens on. Arithmetic per call: 2 x 4 M x (2 x 2880 x 2880 + 2880 x 2880).

Numbers: the whole output against Marlin's, the first 32 tokens against float32 on the same dequantized
weights (mx.reference), and a call whose last tokens are padding (expert -1) must leave their rows zero.
Exits 1 when the kernels disagree with float32 beyond twice Marlin's own distance plus 2^-7 of the largest
output, or a padded row is not zero. --sweep also times other tile shapes (block_m, block_n, block_k,
warps, stages) at each M. In a proof the table goes to moe_gemm_bench.json in the record.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
from sparkserve_lab import proofs
from sparkserve_lab.kernels import mxfp4_experts as mx
from sparkserve_lab.kernels import timing

CHECKED_ROWS = 32
SWEEP = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 128, 8, 3), (128, 256, 64, 8, 3),
         (64, 128, 64, 4, 3), (64, 128, 128, 4, 3), (128, 128, 64, 4, 3), (128, 64, 64, 4, 3)]


def default_config() -> tuple[int, ...]:
    """The tile shape vLLM's launcher uses (block_m, block_n, block_k, warps, stages)."""
    from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemm as g

    return g.BLOCK_M, g.BLOCK_N, g.BLOCK_K, g.NUM_WARPS, g.NUM_STAGES


def flops(m: int) -> float:
    return 2.0 * m * mx.TOPK * 3 * mx.HIDDEN * mx.INTER


class Batch:
    """One M's inputs: activations, a few routings, Marlin's time and outputs on the first routing."""

    def __init__(self, ex: mx.Experts, m: int, replays: int) -> None:
        self.ex, self.m, self.replays = ex, m, replays
        gen = torch.Generator(device="cuda").manual_seed(m)
        self.x = torch.zeros(m, mx.HIDDEN_PAD, device="cuda", dtype=torch.bfloat16)
        self.x[:, :mx.HIDDEN] = torch.randn(m, mx.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        self.out = torch.empty_like(self.x)
        self.routes = [mx.route(m, mx.EXPERTS, torch.device("cuda"), gen) for _ in range(4)]
        self.t_marlin = self.time(self.marlin)
        ids, w = self.routes[0]
        n = min(m, CHECKED_ROWS)
        self.ref = mx.reference(self.x[:n], ids[:n], w[:n], ex)[:, :mx.HIDDEN]
        self.theirs = self.marlin(ids, w)[:, :mx.HIDDEN].float()
        self.marlin_err = (self.theirs[:n] - self.ref).abs().max().item()

    def time(self, fn: Any) -> timing.Timing:
        calls = [lambda r=r: fn(*r) for r in self.routes]
        per_call = mx.EXPERTS * mx.expert_bytes()
        return timing.graph_time(calls, per_call, timing.l2_bytes(), self.replays, min_calls=8)

    def marlin(self, ids: Any, w: Any) -> Any:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.experts import marlin_moe
        from vllm.scalar_type import scalar_types

        w13, w2, s13, s2, b13, b2 = self.ex.marlin
        return marlin_moe.fused_marlin_moe(self.x, w13, w2, b13, b2, s13, s2, w, ids,
                                           quant_type_id=scalar_types.float4_e2m1f.id,
                                           activation=MoEActivation.SWIGLUOAI)

    def ours(self, ids: Any, w: Any, cfg: tuple[int, ...] | None = None) -> Any:
        from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemm as gemm
        from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size

        cfg = cfg or default_config()
        sorted_ids, expert_ids, n_post = moe_align_block_size(ids, cfg[0], mx.EXPERTS, None,
                                                              ignore_invalid_experts=True)
        w13, w2, s13, s2, b13, b2 = self.ex.marlin
        return gemm.mxfp4_moe_gemm(self.x, ids, w, w13, s13, b13, w2, s2, b2, self.out, mx.HIDDEN,
                                   mx.INTER, sorted_ids, expert_ids, n_post, *cfg)

    def bench(self, cfg: tuple[int, ...] | None) -> dict[str, Any]:
        used = cfg or default_config()
        t = self.time(lambda ids, w: self.ours(ids, w, used))
        ids, w = self.routes[0]
        got = self.ours(ids, w, used)[:, :mx.HIDDEN].float()
        n = self.ref.shape[0]
        err = (got[:n] - self.ref).abs().max().item()
        ref_max = self.ref.abs().max().item()
        pad_ids = ids.clone()
        pad = min(5, self.m // 2)
        pad_ids[self.m - pad:] = -1
        padded_zero = bool((self.ours(pad_ids, w, used)[self.m - pad:] == 0).all())
        f = flops(self.m)
        return {"m": self.m, "config": dict(zip(("block_m", "block_n", "block_k", "num_warps", "num_stages"),
                                                 used, strict=True)),
                "default": cfg is None, "gemm": t.to_dict(), "marlin": self.t_marlin.to_dict(),
                "gemm_tflops": f / t.median_us / 1e6, "marlin_tflops": f / self.t_marlin.median_us / 1e6,
                "speedup": self.t_marlin.median_us / t.median_us,
                "err": err, "marlin_err": self.marlin_err, "ref_max": ref_max,
                "vs_marlin": (got - self.theirs).abs().max().item(), "padded_rows_zero": padded_zero,
                "agrees": err <= 2 * self.marlin_err + 2.0 ** -7 * ref_max and padded_zero}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--m", default="64,256,1024,2048,4096,8192")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    ex = mx.make_experts(mx.EXPERTS, torch.device("cuda"))
    rows = []
    for m in (int(v) for v in args.m.split(",")):
        batch = Batch(ex, m, args.replays)
        for cfg in [None, *(SWEEP if args.sweep else [])]:
            try:
                row = batch.bench(cfg)
            except Exception as exc:  # a tile shape the GPU cannot hold (shared memory): recorded, not fatal
                if cfg is None:
                    raise
                row = {"m": m, "config": cfg, "error": f"{type(exc).__name__}: {exc}"[:300], "agrees": True}
            rows.append(row)
            keys = ("m", "config", "default", "gemm_tflops", "marlin_tflops", "speedup", "err", "marlin_err",
                    "padded_rows_zero", "agrees", "error")
            print(json.dumps({k: row[k] for k in keys if k in row}), flush=True)
    result = {"device": torch.cuda.get_device_name(), "l2_bytes": timing.l2_bytes(), "rows": rows}
    proofs.write_artifact(args.out, "moe_gemm_bench.json", result)
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
