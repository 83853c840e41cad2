# SPDX-License-Identifier: Apache-2.0
"""Kernel time of the gpt-oss lm_head (201088 x 2880): patched online MXFP4
(the kernel vLLM selects for the patched vllm/0002 path) vs bf16 F.linear.

Each measurement captures a CUDA graph of --calls back-to-back calls, replays it
--replays times (timed individually with CUDA events) and reports the median
per-call time, so launch overhead is amortized. Achieved GB/s = bytes of
weights (+ scales) read / time. The device copy bandwidth of the same GPU is
measured with a large device-to-device copy ((read + write) bytes / time).

    python3 scripts/gpu/bench_lm_head_kernel.py --out bench.json
"""

import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F

from sparkserve.harness.kernels.lm_head import HIDDEN, VOCAB, build_lm_head


def graph_time_ms(fn, calls: int, replays: int) -> dict:
    """Median/min/max per-call ms of `fn` from replays of a graph of `calls` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return dict(median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times))


def copy_bandwidth_gbs(nbytes: int, calls: int, replays: int) -> dict:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = graph_time_ms(lambda: dst.copy_(src), calls, replays)
    return dict(bytes=nbytes, **t, gbs=2 * nbytes / (t["median_ms"] * 1e-3) / 1e9)


def main():
    ap = argparse.ArgumentParser()
    # In a proof (`sparkserve proof run`) the numbers go into the proof record.
    proof_dir = os.environ.get("SPARKSERVE_PROOF_DIR", ".")
    ap.add_argument("--out", default=os.path.join(proof_dir, "lm_head_kernel.json"))
    ap.add_argument("--m", default="1,2,4,8,16,64")
    ap.add_argument("--calls", type=int, default=20, help="calls per captured graph")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--copy-gib", type=float, default=2.0)
    a = ap.parse_args()
    torch.manual_seed(0)
    w = (torch.randn(VOCAB, HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    head, _, _ = build_lm_head(w)
    kernel = type(head.quant_method.kernel).__name__
    q_bytes = sum(t.numel() * t.element_size() for t in (head.weight, head.weight_scale))
    bf16_bytes = w.numel() * w.element_size()
    res = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
               mxfp4_kernel=kernel, mxfp4_weight_plus_scale_bytes=q_bytes,
               bf16_weight_bytes=bf16_bytes, calls_per_graph=a.calls,
               replays=a.replays, rows=[])
    res["device_copy"] = copy_bandwidth_gbs(int(a.copy_gib * 2**30), 5, a.replays)
    for m in [int(v) for v in a.m.split(",")]:
        x = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        tq = graph_time_ms(lambda x=x: head.quant_method.apply(head, x, None), a.calls, a.replays)
        tb = graph_time_ms(lambda x=x: F.linear(x, w), a.calls, a.replays)
        row = dict(m=m,
                   mxfp4=dict(**tq, gbs=q_bytes / (tq["median_ms"] * 1e-3) / 1e9),
                   bf16=dict(**tb, gbs=bf16_bytes / (tb["median_ms"] * 1e-3) / 1e9),
                   logits_bytes_written=m * VOCAB * 2)
        row["speedup_bf16_over_mxfp4"] = tb["median_ms"] / tq["median_ms"]
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(res, indent=1))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
