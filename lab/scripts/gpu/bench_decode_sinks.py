"""Decode kernel time, batch 1, 4096-token context, gpt-oss shapes: fa2+sinks vs XQA vs FA3.

All three run in one process on the same Q/K/V/sinks, each timed as CUDA-graph replays of 10 calls.
The timings are a measurement (lab/scripts/gpu/proofs.sh records them as one); what the script asserts is
that they mean something: every kernel ran, and each output is within TOLERANCE of a float32 reference
of attention with sinks and of the fa2 tensor-core output. Exits 1 otherwise.
"""

import argparse
import json
import math
import os
import sys
from collections.abc import Callable

import flashinfer
import torch

HQ, HKV, D, PS, L = 64, 8, 64, 16, 4096
# Largest |difference| accepted between bf16 outputs (the stored H100/H200 runs differ by at most 6.1e-4).
TOLERANCE = 4e-3
KERNELS = ("fa2_tc_sinks", "fa2_cuda_core_sinks", "xqa_sinks", "fa3_sinks")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, scale: float,
              window_left: int) -> torch.Tensor:
    """Decode attention with one sink logit per head, in float32: q [HQ, D], k/v [L, HKV, D]."""
    group = HQ // HKV
    kf = k.float().repeat_interleave(group, dim=1)  # [L, HQ, D]
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,lhd->hl", q.float(), kf) * scale  # [HQ, L]
    if window_left >= 0:
        scores[:, : max(0, L - 1 - window_left)] = float("-inf")
    logits = torch.cat([scores, sinks.float()[:, None]], dim=1)
    p = torch.softmax(logits, dim=1)[:, :-1]  # the sink takes probability mass and adds no value
    return torch.einsum("hl,lhd->hd", p, vf)[None]


def problems(res: dict) -> list[str]:
    """Why the timings cannot be trusted: a kernel that failed or is missing, an output out of tolerance."""
    out = [f"{name}: {err}" for name, err in res["errors"].items()]
    out += [f"{name}: did not run" for name in KERNELS if name not in res["results_us"]
            and name not in res["errors"]]
    for check in ("max_abs_diff_vs_reference", "max_abs_diff_vs_fa2_tc"):
        for name, diff in res.get(check, {}).items():
            if not diff <= TOLERANCE:
                out.append(f"{name}: {check} {diff:.3g} > {TOLERANCE}")
    return out


def time_graph(fn: Callable[[], object], iters: int = 200) -> float:
    """Microseconds per call, from replaying a graph of 10 calls."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                fn()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(iters):
        g.replay()
    en.record()
    torch.cuda.synchronize()
    return st.elapsed_time(en) * 1000 / (iters * 10)


def main() -> int:
    ap = argparse.ArgumentParser()
    # In a proof (`sparkserve-lab proof run`) the numbers go into the proof record.
    proof_dir = os.environ.get("SPARKSERVE_PROOF_DIR", ".")
    ap.add_argument("--out", default=os.path.join(proof_dir, "decode_sinks_bench.json"))
    ap.add_argument("--window-left", type=int, default=-1)
    a = ap.parse_args()
    dev = "cuda"
    res: dict = {
        "device": torch.cuda.get_device_name(),
        "cc": torch.cuda.get_device_capability(),
        "batch": 1,
        "context": L,
        "window_left": a.window_left,
        "results_us": {},
        "errors": {},
        "tolerance": TOLERANCE,
    }
    npages = L // PS
    kc = torch.randn(npages, PS, HKV, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    q = torch.randn(1, HQ, D, device=dev, dtype=torch.bfloat16)
    sinks = torch.randn(HQ, device=dev) + 2
    scale = 1 / math.sqrt(D)
    indptr = torch.tensor([0, npages], dtype=torch.int32, device=dev)
    idx = torch.arange(npages, dtype=torch.int32, device=dev)
    last = torch.tensor([PS], dtype=torch.int32, device=dev)
    bt = idx[None, :]
    seq = torch.tensor([L], dtype=torch.int32, device=dev)
    outputs: dict[str, torch.Tensor] = {}

    def bench(name: str, make: Callable[[], Callable[[], torch.Tensor]]) -> None:
        try:
            fn = make()
            outputs[name] = fn().float().reshape(1, HQ, D).clone()
            res["results_us"][name] = time_graph(fn)
        except Exception as e:
            res["errors"][name] = repr(e)

    def fa2(tc: bool) -> Callable[[], torch.Tensor]:
        ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc, backend="fa2")
        w.plan(indptr, idx, last, HQ, HKV, D, PS, window_left=a.window_left,
               q_data_type=torch.bfloat16, sm_scale=scale, use_sinks=True)
        out = torch.empty_like(q)
        return lambda: w.run(q, (kc, vc), sinks=sinks, out=out)

    def xqa() -> Callable[[], torch.Tensor]:  # as vLLM calls it on SM90/SM12x
        from flashinfer.decode import xqa_batch_decode_with_kv_cache

        kh, vh = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()  # HND
        ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
        return lambda: xqa_batch_decode_with_kv_cache(
            q, (kh, vh), ws, bt, seq, L, bmm1_scale=scale, bmm2_scale=1.0,
            window_left=a.window_left, sinks=sinks, kv_layout="HND")

    def fa3() -> Callable[[], torch.Tensor]:  # vLLM's FlashAttention 3, as its FA backend calls it
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        cu_q = torch.tensor([0, 1], dtype=torch.int32, device=dev)
        win = [a.window_left, 0] if a.window_left >= 0 else [-1, -1]
        out = torch.empty_like(q)
        return lambda: flash_attn_varlen_func(
            q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seq, max_seqlen_k=L,
            softmax_scale=scale, causal=True, window_size=win, block_table=bt, fa_version=3,
            s_aux=sinks.to(torch.bfloat16))  # FA3 takes bf16 sinks only

    bench("fa2_tc_sinks", lambda: fa2(True))
    bench("fa2_cuda_core_sinks", lambda: fa2(False))
    bench("xqa_sinks", xqa)
    bench("fa3_sinks", fa3)
    # Same inputs, so the kernels must agree with each other (a cheap cross-check of the timings' meaning).
    if "fa2_tc_sinks" in outputs:
        ref = outputs["fa2_tc_sinks"]
        res["max_abs_diff_vs_fa2_tc"] = {k: (v - ref).abs().max().item() for k, v in outputs.items()}
    ref32 = reference(q[0], kc.reshape(L, HKV, D), vc.reshape(L, HKV, D), sinks, scale, a.window_left)
    res["max_abs_diff_vs_reference"] = {k: (v - ref32).abs().max().item() for k, v in outputs.items()}
    res["problems"] = problems(res)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    if res["problems"]:
        print("FAIL: " + "; ".join(res["problems"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
