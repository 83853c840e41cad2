"""GPU proof for patches/vllm/0007 (gpt-oss's MXFP4 experts for decode batches in two Triton kernels) and
vllm/0009 (their K loop on tensor cores), each set of kernels on its own.

On the GPU, one gpt-oss-120b layer of 128 random MXFP4 experts (hidden and intermediate 2880, padded to
3072 and 2944 as Marlin pads them) is put into Marlin's layout by vLLM's own preparation (the real
gptq_marlin_repack), and for 1..8 tokens with top-4 routing the compiled kernels must agree with

- a float32 reference of the same dequantized weights: one bf16 rounding of each output (half a bf16 ulp)
  plus 2^-12 of the largest output for the fp32 sums' order;
- Marlin itself (fused_marlin_moe, vLLM's current backend, on the same inputs and weights): within twice
  Marlin's own distance from float32 plus one bf16 ulp of the largest output (Marlin rounds to bf16 after
  each GEMM and the activation; the kernels keep fp32 until the output);

and their own error must not exceed Marlin's. Twice in a row (the workspace each call leaves zeroed), and
from a CUDA graph. The tensor-core kernels round the activations between the GEMMs to bf16 (their MMA's
input), so their float32 reference does too. In a proof the numbers go to mxfp4_moe_gemv.json (and
mxfp4_moe_mma.json) in the record.
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
gemv = pytest.importorskip("vllm.model_executor.layers.fused_moe.experts.mxfp4_moe_gemv")
marlin_moe = pytest.importorskip("vllm.model_executor.layers.fused_moe.experts.marlin_moe")
mx = pytest.importorskip("sparkserve_lab.kernels.mxfp4_experts")
# the module name of each set of kernels: its call, and whether it rounds the activations to bf16
KERNELS = {"mxfp4_moe_gemv": False, "mxfp4_moe_mma": True}


@pytest.fixture(params=sorted(KERNELS))
def kernels(request: pytest.FixtureRequest) -> tuple[str, Any, bool]:
    module = pytest.importorskip(f"vllm.model_executor.layers.fused_moe.experts.{request.param}")
    return request.param, getattr(module, request.param), KERNELS[request.param]


def _run(fn: Any, ex: Any, x: Any, ids: Any, w: Any, ws: Any) -> Any:
    out = torch.empty_like(x)
    w13, w2, s13, s2, b13, b2 = ex.marlin
    fn(x, ids, w, w13, s13, b13, w2, s2, b2, out, mx.HIDDEN, mx.INTER, ws)
    return out


def _run_graph(fn: Any, ex: Any, x: Any, ids: Any, w: Any, ws: Any) -> Any:
    """The same call captured in a CUDA graph, replayed once."""
    out = torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w13, w2, s13, s2, b13, b2 = ex.marlin
        fn(x, ids, w, w13, s13, b13, w2, s2, b2, out, mx.HIDDEN, mx.INTER, ws)
    graph.replay()
    torch.cuda.synchronize()
    return out


def _tokens(m: int, gen: Any) -> Any:
    """m random bf16 tokens, zero in the padded hidden columns."""
    x = torch.zeros(m, mx.HIDDEN_PAD, device="cuda", dtype=torch.bfloat16)
    x[:, :mx.HIDDEN] = torch.randn(m, mx.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
    return x


@pytest.fixture(scope="module")
def experts() -> Any:
    """One layer of 128 experts in Marlin's layout (1.7 GB), made once for the module's tests."""
    return mx.make_experts(mx.EXPERTS, torch.device("cuda"))


def _marlin(ex: Any, x: Any, ids: Any, w: Any) -> Any:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.scalar_type import scalar_types

    w13, w2, s13, s2, b13, b2 = ex.marlin
    return marlin_moe.fused_marlin_moe(x, w13, w2, b13, b2, s13, s2, w, ids,
                                       quant_type_id=scalar_types.float4_e2m1f.id,
                                       activation=MoEActivation.SWIGLUOAI)


def test_kernels_against_float32_and_marlin(experts: Any, kernels: tuple[str, Any, bool]) -> None:
    name, fn, bf16_act = kernels
    dev = torch.device("cuda")
    ex = experts
    ws = gemv.get_workspace(dev, mx.HIDDEN_PAD, mx.INTER_PAD, mx.TOPK)
    gen = torch.Generator(device=dev).manual_seed(1)
    rows: dict[int, dict[str, Any]] = {}
    for m in range(1, gemv.MAX_TOKENS + 1):
        x = _tokens(m, gen)
        ids, w = mx.route(m, mx.EXPERTS, dev, gen)
        if m > 1:
            ids[1] = ids[0]  # two tokens on the same experts: each expert read once for both
        ref = mx.reference(x, ids, w, ex)[:, :mx.HIDDEN]
        # the kernels' own flow: float32 but for the activations' bf16 rounding where they round them
        flow = mx.reference(x, ids, w, ex, bf16_activations=True)[:, :mx.HIDDEN] if bf16_act else ref
        got = _run(fn, ex, x, ids, w, ws)
        again = _run(fn, ex, x, ids, w, ws)
        graph_out = _run_graph(fn, ex, x, ids, w, ws)
        marlin = _marlin(ex, x, ids, w)[:, :mx.HIDDEN].float()
        g = got[:, :mx.HIDDEN].float()
        half_ulp = 2.0 ** (torch.floor(torch.log2(flow.abs().clamp_min(2.0 ** -100))) - 8)
        ref_max = ref.abs().max().item()
        rows[m] = {
            "err": (g - ref).abs().max().item(), "flow_err": (g - flow).abs().max().item(),
            "marlin_err": (marlin - ref).abs().max().item(), "ref_max": ref_max,
            "vs_marlin": (g - marlin).abs().max().item(),
            "within": bool(((g - flow).abs() <= half_ulp + 2.0 ** -12 * ref_max).all()),
            "repeat_equal_within": (again.float() - got.float()).abs().max().item(),
            "graph_equal_within": (graph_out.float() - got.float()).abs().max().item(),
            "padding_zero": bool((got[:, mx.HIDDEN:] == 0).all()),
        }
    out = {"device": torch.cuda.get_device_name(), "kernels": name, "experts": mx.EXPERTS, "rows": rows}
    path = artifact_path(f"{name}.json")
    if path is not None:
        path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    for m, r in rows.items():
        assert r["within"], (m, r)
        assert r["vs_marlin"] <= 2 * r["marlin_err"] + 2.0 ** -7 * r["ref_max"], (m, r)
        assert r["err"] <= r["marlin_err"], (m, r)
        # The sums meet through fp32 atomics in any order: a repeat may differ by a rounding of the output.
        bound = 2.0 ** -7 * r["ref_max"]
        assert r["repeat_equal_within"] <= bound and r["graph_equal_within"] <= bound, (m, r)
        assert r["padding_zero"], (m, r)


def test_padded_tokens_add_nothing(experts: Any, kernels: tuple[str, Any, bool]) -> None:
    """vLLM routes a padded token to expert -1 (VLLM_MOE_SKIP_PADDING): every row while it captures a CUDA
    graph, the rows that fill a batch up to a captured size while it serves. Their slots read no expert and
    add nothing: a zero row, and the real tokens' rows as without the padding. Eagerly and from a graph."""
    dev = torch.device("cuda")
    ex = experts
    ws = gemv.get_workspace(dev, mx.HIDDEN_PAD, mx.INTER_PAD, mx.TOPK)
    gen = torch.Generator(device=dev).manual_seed(2)
    real, m = 3, gemv.MAX_TOKENS
    x = _tokens(m, gen)
    ids, w = mx.route(m, mx.EXPERTS, dev, gen)
    ids[real:] = -1
    fn = kernels[1]
    alone = _run(fn, ex, x[:real].contiguous(), ids[:real].contiguous(), w[:real].contiguous(), ws)
    padded = _run(fn, ex, x, ids, w, ws)
    graph_out = _run_graph(fn, ex, x, ids, w, ws)
    bound = 2.0 ** -7 * alone.float().abs().max().item()
    for got in (padded, graph_out):
        assert bool((got[real:] == 0).all())
        assert (got[:real].float() - alone.float()).abs().max().item() <= bound
