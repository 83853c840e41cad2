"""GPU proof for patches/vllm/0010 (gpt-oss's routing for a few tokens in one Triton kernel).

On the GPU, for gpt-oss's router (2880 -> 128 experts, bf16, with a bias, top 4) and 1..MAX_TOKENS tokens,
eagerly and replayed from a CUDA graph (its workspace and arrival counter are shared across calls), a padded
token routing to -1: up to 4 tokens (vllm/0006's GEMV, the same arithmetic) the compiled kernel must pick the
experts that vllm/0006's GEMV followed by vLLM's topk_softmax picks, in the same order, with the same weights
(1e-6); at 5-8 (its K tile split in two, where the two-launch path is F.linear's) it must pick a float32
reference's experts wherever bf16 rounding cannot reorder them and weigh them within 2^-6 of it. Then both
paths are timed as served, each call replayed from a CUDA graph over enough copies of the weights to hold
twice the GPU's L2 (sparkserve_lab.kernels.timing: a call never finds its weight in L2), and the test
asserts that the one launch is not slower than the two at one token, the decode case it exists for.

Needs a CUDA GPU with the pinned vLLM (series applied) and Triton; skipped otherwise.
In a proof (`sparkserve proof run`) the numbers go to router_topk_kernel.json in the record.
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
fused = pytest.importorskip("vllm.model_executor.layers.fused_moe.router.bias_router_topk")
from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk  # noqa: E402

HIDDEN, EXPERTS, TOP_K = 2880, 128, 4
WEIGHT_BYTES = (EXPERTS * HIDDEN + EXPERTS) * 2  # bf16 weight and bias, what one call reads


def two_launches(x: Any, w: Any, b: Any, pad: Any = None) -> tuple[Any, Any]:
    """The gate (vllm/0006's GEMV up to its 4 tokens, F.linear above), then vLLM's topk_softmax
    (renormalized), as the model and router run them without the patch."""
    if x.shape[0] <= gemv.MAX_TOKENS:
        logits = gemv.bias_router_gemv(x, w, b)
    else:
        logits = torch.nn.functional.linear(x, w, b)
    weights, ids, _ = fused_topk(x, logits, TOP_K, renormalize=True)
    if pad is not None:
        ids = torch.where(pad[:, None], -1, ids)
    return weights, ids


def one_launch(x: Any, w: Any, b: Any, pad: Any = None) -> tuple[Any, Any]:
    return fused.bias_router_topk(x, w, b, TOP_K, pad)


def _graph_us(fn: Any, weights: list[Any], biases: list[Any], x: Any) -> dict[str, Any]:
    calls = [lambda w=w, b=b: fn(x, w, b) for w, b in zip(weights, biases, strict=True)]
    return timing.graph_time(calls, WEIGHT_BYTES, timing.l2_bytes()).to_dict()


def _agree(got: tuple[Any, Any], want: tuple[Any, Any]) -> dict[str, Any]:
    return {"ids_equal": bool(torch.equal(got[1].int(), want[1].int())),
            "weight_err": (got[0] - want[0]).abs().max().item()}


def _against_float32(got: tuple[Any, Any], x: Any, w: Any, b: Any, pad: Any = None) -> dict[str, Any]:
    """The float32 reference's top-k and softmax; ids compared on the rows whose top k + 1 logits are more
    than 2^-5 apart (a bf16 rounding of logits below 8 moves one by at most 2^-6)."""
    values, ids = torch.nn.functional.linear(x.float(), w.float(), b.float()).topk(TOP_K + 1, dim=1)
    clear = (values[:, :-1] - values[:, 1:]).min(dim=1).values > 2.0 ** -5
    want = ids[:, :TOP_K].int()
    if pad is not None:
        want = torch.where(pad[:, None], -1, want)
    return {"rows_clear": int(clear.sum()),
            "ids_equal": bool(torch.equal(got[1][clear].int(), want[clear])),
            "weight_err": (got[0] - torch.softmax(values[:, :TOP_K], dim=1)).abs().max().item()}


def _check(exact: bool, got: tuple[Any, Any], x: Any, w: Any, b: Any, pad: Any = None) -> dict[str, Any]:
    return _agree(got, two_launches(x, w, b, pad)) if exact else _against_float32(got, x, w, b, pad)


def test_kernel_picks_what_gemv_and_topk_softmax_pick_and_its_time() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    copies = timing.copies_needed(WEIGHT_BYTES, timing.l2_bytes())
    weights = [torch.randn(EXPERTS, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    biases = [torch.randn(EXPERTS, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "shape": [EXPERTS, HIDDEN], "top_k": TOP_K,
                           "rows": {}}
    for m in range(1, fused.MAX_TOKENS + 1):
        x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        pad = torch.zeros(m, device=dev, dtype=torch.bool)
        pad[-1] = m > 1
        exact = m <= gemv.MAX_TOKENS  # vllm/0006's arithmetic: the same logits
        eager = _check(exact, one_launch(x, weights[0], biases[0], pad), x, weights[0], biases[0], pad)
        # From a CUDA graph, over every weight copy: each replayed call must agree with its eager twin.
        results: list[tuple[Any, Any]] = []
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for w, b in zip(weights, biases, strict=True):
                results.append(one_launch(x, w, b))
        graph.replay()
        torch.cuda.synchronize()
        replayed = [_check(exact, r, x, w, b) for r, w, b in zip(results, weights, biases, strict=True)]
        out["rows"][m] = {
            "against": "vllm/0006 + topk_softmax" if exact else "float32",
            "eager": eager,
            "graph_ids_equal": all(r["ids_equal"] for r in replayed),
            "graph_weight_err": max(r["weight_err"] for r in replayed),
            "one_launch": _graph_us(one_launch, weights, biases, x),
            "two_launches": _graph_us(two_launches, weights, biases, x),
        }
    path = artifact_path("router_topk_kernel.json")
    if path is not None:
        path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    for m, row in out["rows"].items():
        bound = 1e-6 if m <= gemv.MAX_TOKENS else 2.0 ** -6
        assert row["eager"]["ids_equal"] and row["eager"]["weight_err"] <= bound, (m, row)
        assert row["graph_ids_equal"] and row["graph_weight_err"] <= bound, (m, row)
    one = out["rows"][1]
    assert one["one_launch"]["median_us"] <= one["two_launches"]["median_us"], one
