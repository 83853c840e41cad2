# SPDX-License-Identifier: Apache-2.0
"""Kernel time of the gpt-oss lm_head (201088 x 2880): patched online MXFP4
(Marlin W4A16, the path 0001-lm-head-mxfp4 uses) vs bf16 F.linear.

Each measurement captures a CUDA graph of --calls back-to-back calls, replays it
--replays times (timed individually with CUDA events) and reports the median
per-call time, so launch overhead is amortized. Achieved GB/s = bytes of
weights (+ scales) read / time. The device copy bandwidth of the same GPU is
measured with a large device-to-device copy ((read + write) bytes / time).

    python gpu/bench_lm_head_kernel.py --out bench.json
"""

import argparse
import json
import statistics
from types import SimpleNamespace

import torch
import torch.nn.functional as F

VOCAB, HIDDEN = 201088, 2880
def build_lm_head(weight: torch.Tensor):
    """ParallelLMHead quantized by the patched online path. Returns
    (head, packed_weight_before_repack, e8m0_scales_before_repack)."""
    import vllm.config
    import vllm.model_executor.parameter as parameter
    from vllm.config.quantization import QuantizationConfigArgs
    from vllm.model_executor.layers.quantization.online import fp8 as online_fp8
    from vllm.model_executor.layers.quantization.online.base import (
        OnlineQuantizationConfig,
    )
    from vllm.model_executor.layers.quantization.online.mxfp4 import (
        Mxfp4OnlineLMHeadMethod,
    )
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    # Only the config lookups are stubbed (no engine here); kernels are real.
    hf = SimpleNamespace(tie_word_embeddings=False)
    cfg = SimpleNamespace(
        lora_config=None,
        model_config=SimpleNamespace(
            hf_config=hf, hf_text_config=hf, dtype=torch.bfloat16,
            word_embeddings_untied_by_checkpoint=False, quantization_config=None,
        ),
    )
    vllm.config.get_current_vllm_config = lambda: cfg
    online_fp8.get_current_vllm_config = lambda: cfg
    parameter.get_tensor_model_parallel_rank = lambda: 0
    parameter.get_tensor_model_parallel_world_size = lambda: 1

    args = QuantizationConfigArgs(linear="mxfp4", lm_head="mxfp4")
    qc = SimpleNamespace(
        get_quant_method=lambda layer, prefix: None,  # GptOssMxfp4Config does this
        online_quantization_config=OnlineQuantizationConfig(args),
        packed_modules_mapping={},
    )
    with torch.device(weight.device):
        head = ParallelLMHead(
            VOCAB, HIDDEN, params_dtype=torch.bfloat16, quant_config=qc,
            prefix="lm_head", disable_tp=True,
        )
    assert isinstance(head.quant_method, Mxfp4OnlineLMHeadMethod), head.quant_method
    captured = {}
    kernel = head.quant_method.kernel
    orig = kernel.process_weights_after_loading

    def capture(layer):
        captured["w"] = layer.weight.detach().clone()
        captured["s"] = layer.weight_scale.detach().clone()
        orig(layer)

    kernel.process_weights_after_loading = capture
    # Online layerwise loader: materialize, load, quantize, repack.
    with torch.device(weight.device):
        head.weight.weight_loader(head.weight, weight)
        head.quant_method.process_weights_after_loading(head)  # no-op if done
    return head, captured["w"], captured["s"]



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
    ap.add_argument("--out", default="bench_lm_head_kernel.json")
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
