"""GPU proof for patches/vllm/0006 (router logits of a biased gate in one Triton kernel).

On the GPU, for gpt-oss's router (2880 -> 128 experts, bf16, with a bias) and 1..MAX_TOKENS tokens: the
compiled kernel must agree with an fp32 reference within one bf16 rounding of the result, as F.linear
does. Then both are timed as served, each call replayed from a CUDA graph over enough copies of the
weights to hold twice the GPU's L2 (sparkserve_lab.kernels.timing: a call never finds its weight in
L2), and the record keeps the times with that note; the test asserts that the kernel is
not slower than F.linear at one token, the decode case it exists for.

Needs a CUDA GPU with the pinned vLLM (series applied) and Triton; skipped otherwise.
In a proof (`sparkserve proof run`) the numbers go to router_gemv_kernel.json in the record.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from proof_artifacts import artifact_path
from sparkserve_lab.kernels import timing

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("triton")
gemv = pytest.importorskip("vllm.model_executor.layers.fused_moe.router.bias_router_gemv")

HIDDEN, EXPERTS = 2880, 128
WEIGHT_BYTES = (EXPERTS * HIDDEN + EXPERTS) * 2  # bf16 weight and bias, what one call reads


def _graph_us(fn: Any, weights: list[Any], biases: list[Any], x: Any) -> dict[str, Any]:
    """One call per weight copy in a CUDA graph, replayed (sparkserve_lab.kernels.timing)."""
    calls = [lambda w=w, b=b: fn(x, w, b) for w, b in zip(weights, biases, strict=True)]
    return timing.graph_time(calls, WEIGHT_BYTES, timing.l2_bytes()).to_dict()


def test_kernel_numbers_and_time_against_linear() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    copies = timing.copies_needed(WEIGHT_BYTES, timing.l2_bytes())
    weights = [torch.randn(EXPERTS, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    biases = [torch.randn(EXPERTS, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "shape": [EXPERTS, HIDDEN], "rows": {}}
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
            "kernel": _graph_us(gemv.bias_router_gemv, weights, biases, x),
            "linear": _graph_us(torch.nn.functional.linear, weights, biases, x),
        }
    path = artifact_path("router_gemv_kernel.json")
    if path is not None:
        path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    for m, row in out["rows"].items():
        assert row["kernel_within"], (m, row)
    one = out["rows"][1]
    assert one["kernel"]["median_us"] <= one["linear"]["median_us"], one
