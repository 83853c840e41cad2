"""GPU proof for patches/vllm/0006 (router logits of a biased gate in one Triton kernel).

On the GPU, for gpt-oss's router (2880 -> 128 experts, bf16, with a bias) and 1..MAX_TOKENS tokens: the
compiled kernel must agree with an fp32 reference within one bf16 rounding of the result, as F.linear
does. Then both are timed as served, each call replayed from a CUDA graph over 64 copies of the weights
in turn (94 MB, about twice an H100's 50 MB L2 and more than a GB10's, so a replay does not find its
weight in L2), and the record keeps the times; the test asserts that the kernel is
not slower than F.linear at one token, the decode case it exists for.

Needs a CUDA GPU with the pinned vLLM (series applied) and Triton; skipped otherwise.
In a proof (`sparkserve proof run`) the numbers go to router_gemv_kernel.json in the record.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from proof_artifacts import artifact_path

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("triton")
gemv = pytest.importorskip("vllm.model_executor.layers.fused_moe.router.bias_router_gemv")

HIDDEN, EXPERTS, COPIES, REPLAYS = 2880, 128, 128, 20


def _graph_us(fn: Any, weights: list[Any], biases: list[Any], x: Any) -> float:
    """Microseconds per call: one CUDA graph holding a call per weight copy, replayed REPLAYS times."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for w, b in zip(weights[:2], biases[:2], strict=True):
            fn(x, w, b)  # compile / pick the algorithm outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for w, b in zip(weights, biases, strict=True):
            fn(x, w, b)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) * 1000.0 / (REPLAYS * len(weights))


def test_kernel_numbers_and_time_against_linear() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    weights = [torch.randn(EXPERTS, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
    biases = [torch.randn(EXPERTS, device=dev, dtype=torch.bfloat16) for _ in range(COPIES)]
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "shape": [EXPERTS, HIDDEN],
                           "weight_copies": COPIES, "rows": {}}
    for m in range(1, gemv.MAX_TOKENS + 1):
        x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        ref = torch.nn.functional.linear(x.float(), weights[0].float(), biases[0].float())
        got = gemv.bias_router_gemv(x, weights[0], biases[0])
        lin = torch.nn.functional.linear(x, weights[0], biases[0])
        bound = 2.0 ** -7 * ref.abs() + 1e-3
        out["rows"][m] = {
            "kernel_err": (got.float() - ref).abs().max().item(),
            "linear_err": (lin.float() - ref).abs().max().item(),
            "kernel_within": bool(((got.float() - ref).abs() <= bound).all()),
            "kernel_us": _graph_us(gemv.bias_router_gemv, weights, biases, x),
            "linear_us": _graph_us(torch.nn.functional.linear, weights, biases, x),
        }
    path = artifact_path("router_gemv_kernel.json")
    if path is not None:
        path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    for m, row in out["rows"].items():
        assert row["kernel_within"], (m, row)
    one = out["rows"][1]
    assert one["kernel_us"] <= one["linear_us"], one
