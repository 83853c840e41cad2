"""The tile constants of vllm/0006's router kernel, swept on a GPU: for gpt-oss's router (2880 -> 128, bf16,
with a bias) at 1..4 tokens, the shipped kernel, F.linear and each (experts per CTA, K tile, warps)
variant, timed as CUDA-graph replays over weight copies that hold twice the GPU's L2
(sparkserve_lab.kernels.timing).
Prints and writes JSON (to $SPARKSERVE_PROOF_DIR/router_gemv_sweep.json under `sparkserve-lab proof run`, else
stdout only). Fails only when a kernel disagrees with the fp32 reference beyond one bf16 rounding.

    python3 lab/scripts/gpu/sweep_router_gemv.py [--experts-per-cta 1,2,4,8] [--k-tiles 512,1024,2048,4096]
        [--warps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
from sparkserve_lab.kernels import timing
from vllm.model_executor.layers.fused_moe.router import bias_router_gemv as g

HIDDEN, EXPERTS = 2880, 128
WEIGHT_BYTES = (EXPERTS * HIDDEN + EXPERTS) * 2  # bf16 weight and bias, what one call reads
Fn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def graph_us(fn: Fn, weights: list[torch.Tensor], biases: list[torch.Tensor], x: torch.Tensor) -> float:
    """Median us per call: one call per weight copy in a CUDA graph, replayed (harness.kernels.timing)."""
    calls = [lambda w=w, b=b: fn(x, w, b) for w, b in zip(weights, biases, strict=True)]
    return round(timing.graph_time(calls, WEIGHT_BYTES, timing.l2_bytes()).median_us, 2)


def variant(block_n: int, block_k: int, warps: int) -> Fn:
    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = x.shape
        out = torch.empty((m, w.shape[0]), dtype=x.dtype, device=x.device)
        g._bias_router_gemv_kernel[(triton.cdiv(w.shape[0], block_n),)](
            x, w, b, out, m, w.shape[0], k, x.stride(0), w.stride(0), out.stride(0),
            BLOCK_M=triton.next_power_of_2(m), BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps)
        return out
    return run


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experts-per-cta", type=ints, default=[1, 2, 4, 8])
    ap.add_argument("--k-tiles", type=ints, default=[512, 1024, 2048, 4096])
    ap.add_argument("--warps", type=ints, default=[4])
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    copies = timing.copies_needed(WEIGHT_BYTES, timing.l2_bytes())
    weights = [torch.randn(EXPERTS, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    biases = [torch.randn(EXPERTS, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": triton.__version__, "weight_copies": copies,
                           "l2_bytes": timing.l2_bytes(), "rows": {}}
    bad = []
    for m in range(1, g.MAX_TOKENS + 1):
        x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        ref = torch.nn.functional.linear(x.float(), weights[0].float(), biases[0].float())
        bound = 2.0 ** -7 * ref.abs() + 1e-3
        row: dict[str, Any] = {"linear_us": graph_us(torch.nn.functional.linear, weights, biases, x),
                               "shipped_us": graph_us(g.bias_router_gemv, weights, biases, x), "sweep": {}}
        for bn in args.experts_per_cta:
            for bk in args.k_tiles:
                for nw in args.warps:
                    fn = variant(bn, bk, nw)
                    if not bool(((fn(x, weights[0], biases[0]).float() - ref).abs() <= bound).all()):
                        bad.append((m, bn, bk, nw))
                    row["sweep"][f"n{bn}_k{bk}_w{nw}"] = graph_us(fn, weights, biases, x)
        row["best"] = min(row["sweep"].items(), key=lambda kv: kv[1])
        out["rows"][m] = row
        print(m, {k: v for k, v in row.items() if k != "sweep"}, flush=True)
    out["disagreeing"] = bad
    text = json.dumps(out, indent=1)
    if d := os.environ.get("SPARKSERVE_PROOF_DIR"):
        (Path(d) / "router_gemv_sweep.json").write_text(text + "\n")
    else:
        print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
