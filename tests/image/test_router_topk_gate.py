"""Gate of patch vllm/0010 (gpt-oss's routing for a few tokens in one Triton kernel: the gate's GEMV, its
bias, the top-k and the softmax).

With VLLM_ROUTER_GEMV_TOPK=1, gpt-oss's MoE layer gets a GateTopKRouter that applies the model's biased gate
itself, and the model hands the layer the gate's input where the router logits went. Up to 8 tokens run one
Triton kernel (logits per CTA, the last CTA to arrive picks the top-k and the softmax over it); larger
batches apply the gate and then vLLM's top-k, and a monolithic MoE kernel gets the gate's logits. Where the
router cannot serve (not CUDA, another gate, ranks sharing tokens or experts, LoRA, a routing simulation,
batch-invariant mode) the model keeps its gate and router, logged once naming why. Unset, nothing changes.

The kernel's numbers are checked by Triton's interpreter on the CPU (TRITON_INTERPRET=1, in a process of its
own) against vllm/0006's kernel, which computes the same logits the same way, followed by a top-k and a
softmax in torch; the device capability is faked for the wiring. Triton also compiles the kernel ahead of
time, without a GPU, for the H100 (sm_90), desktop Blackwell (sm_120) and the DGX Spark (sm_121) at each
block of rows it is launched with, and the cubins must keep everything in registers.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import vllm.envs as envs
from gate_support import ARCHS, assert_compile_factor, assert_in_registers, fake_platform, run_json
from vllm.model_executor.layers.fused_moe.router import (
    bias_router_topk,
    fused_topk_router,
    gate_linear,
    gate_topk_router,
)
from vllm.model_executor.models import gpt_oss
from vllm.platforms.interface import PlatformEnum

ENV = "VLLM_ROUTER_GEMV_TOPK"
LOG_ON = "Router GEMV with top-k: the gate, its bias, the top-4 and the softmax in one Triton kernel"
LOG_OFF = "Router GEMV with top-k not used"
HIDDEN, EXPERTS, TOP_K = 2880, 128, 4  # gpt-oss's router

INTERPRETED = r"""
import json, sys, torch
from vllm.model_executor.layers.fused_moe.router import bias_router_gemv as g, bias_router_topk as t

def reference(logits, k):
    # topk_softmax's renormalized softmax: the softmax over the k largest logits, ties to the lower id.
    order = sorted(range(logits.shape[1]), key=lambda e: (-logits[0, e].item(), e))[:k]
    return torch.softmax(logits[0, order], 0), order

out = {"max_tokens": t.MAX_TOKENS, "cases": []}
torch.manual_seed(0)
w = torch.randn(128, 2880, dtype=torch.bfloat16) * 0.02
b = torch.randn(128, dtype=torch.bfloat16)
for m in range(1, t.MAX_TOKENS + 1):
    for call in range(2):  # a second call reuses the workspace with other tokens
        x = torch.randn(m, 2880, dtype=torch.bfloat16)
        pad = torch.zeros(m, dtype=torch.bool)
        pad[-1] = m > 2
        tw, ti = t.bias_router_topk(x, w, b, 4, pad if m > 2 else None)
        # vllm/0006's GEMV (the same arithmetic, 4 rows a call at most): the bf16 logits
        logits = torch.cat([g.bias_router_gemv(x[r:r + 4], w, b) for r in range(0, m, 4)]).float()
        case = {"m": m, "dtypes": [str(tw.dtype), str(ti.dtype)], "shape": list(ti.shape),
                "count": t._workspaces[x.device].count.item(), "ids": ti.tolist(), "want": [], "err": 0.0}
        for r in range(m):
            p, order = reference(logits[r:r + 1], 4)
            case["want"].append([-1] * 4 if pad[r] else order)
            case["err"] = max(case["err"], (tw[r] - p).abs().max().item())
        out["cases"].append(case)

# Ties, a padded token and a number of experts off a power of two: a zero gate, the bias alone.
w6, b6 = torch.zeros(6, 40, dtype=torch.bfloat16), torch.tensor([0.5, 3, 1, 3, 2, 3], dtype=torch.bfloat16)
tw, ti = t.bias_router_topk(torch.randn(2, 40, dtype=torch.bfloat16), w6, b6, 4, torch.tensor([False, True]))
out["ties"] = {"ids": ti.tolist(), "weights": tw.tolist(),
               "want": torch.softmax(torch.tensor([3.0, 3, 3, 2]), 0).tolist()}
json.dump(out, sys.stdout)
"""

COMPILED = r"""
import json, os, sys, tempfile, triton
from cubins import compile_cubin, facts
from vllm.model_executor.layers.fused_moe.router import bias_router_topk as t
signature = {name: "*bf16" for name in ("x_ptr", "w_ptr", "b_ptr")}
signature |= {"pad_ptr": "*i1", "ws_ptr": "*fp32", "cnt_ptr": "*i32"}
signature |= {"topk_w_ptr": "*fp32", "topk_id_ptr": "*i32"}
signature |= {name: "i32" for name in ("M", "N", "K", "stride_xm", "stride_wn", "stride_ws")}
out = []
with tempfile.TemporaryDirectory() as tmp:
    for arch in json.loads(sys.argv[1]):
        for block_m in sorted({triton.next_power_of_2(m) for m in range(1, t.MAX_TOKENS + 1)}):
            consts = {"TOP_K": 4, "HAS_PAD": True, "BLOCK_M": block_m, "BLOCK_N": t._BLOCK_N,
                      "BLOCK_K": t.block_k(block_m, 2880), "BLOCK_E": 128, "BLOCK_T": 4}
            cubin = compile_cubin(t._bias_router_topk_kernel, signature, consts, arch)
            k = facts(cubin, "_bias_router_topk_kernel", os.path.join(tmp, f"{arch}-{block_m}.cubin"))
            out.append({"arch": arch, "block_m": block_m, "block_k": consts["BLOCK_K"], **k})
json.dump(out, sys.stdout)
"""


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA platform, and a tensor-parallel group of one (a replicated layer's weights ask their rank)."""
    from vllm.distributed import parallel_state

    for module in (gate_linear, gate_topk_router):
        monkeypatch.setattr(module, "current_platform", fake_platform(PlatformEnum.CUDA))
    monkeypatch.setattr(parallel_state, "_TP", SimpleNamespace(rank_in_group=0, world_size=1))


def _gate(bias: bool = True, dtype: torch.dtype = torch.bfloat16) -> Any:
    """gpt-oss's router as vLLM builds it, random weights."""
    gate = gate_linear.GateLinear(HIDDEN, EXPERTS, bias=bias, params_dtype=dtype,
                                  prefix="model.layers.0.mlp.router", return_bias=False)
    with torch.no_grad():
        gate.weight.normal_(std=0.02)
        if bias:
            gate.bias.normal_()
    return gate


def _config(**parallel: Any) -> Any:
    """The parts of a VllmConfig that gpt-oss's MoE block and the router read."""
    hf = SimpleNamespace(hidden_size=HIDDEN, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
                         intermediate_size=HIDDEN)
    fields = {"data_parallel_size": 1, "enable_expert_parallel": False, "enable_eplb": False,
              "prefill_context_parallel_size": 1, "use_sequence_parallel_moe": False,
              "use_ubatching": False} | parallel
    return SimpleNamespace(model_config=SimpleNamespace(hf_config=hf), quant_config=None,
                           parallel_config=SimpleNamespace(**fields), lora_config=None)


class _Experts:
    """Stands in for the MoE layer gpt-oss builds: records what the block hands it."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, hidden_states: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        self.calls.append((hidden_states, router_logits))
        return hidden_states


def _block(monkeypatch: pytest.MonkeyPatch, config: Any) -> Any:
    """gpt-oss's MoE block as vLLM builds it (in the model's dtype), random router weights."""
    monkeypatch.setattr(gpt_oss, "FusedMoEFactory", _Experts)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        block = gpt_oss.MLPBlock(config, layer_idx=0, prefix="model.layers.0.mlp")
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        block.router.weight.normal_(std=0.02)
        block.router.bias.normal_()
    return block


def test_gpt_oss_hands_its_moe_layer_the_gate_input_and_a_router_that_applies_the_gate(
        cuda: None, monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    monkeypatch.setenv(ENV, "1")
    block = _block(monkeypatch, _config())
    router = block.experts.kwargs["router"]
    assert isinstance(router, gate_topk_router.GateTopKRouter) and router.gate is block.router
    assert (router.top_k, router.global_num_experts, router.renormalize) == (TOP_K, EXPERTS, True)
    assert vllm_log.messages(LOG_ON) == [f"{LOG_ON} for up to 8 tokens ({ENV})"]
    gate_calls: list[int] = []
    monkeypatch.setattr(block.router, "forward", lambda x: gate_calls.append(x.shape[0]))
    x = torch.randn(3, HIDDEN, dtype=torch.bfloat16)
    block(x)
    (hidden, logits), = block.experts.calls
    assert hidden is x and logits is x and gate_calls == []  # the router applies the gate, not the model


def test_the_router_runs_the_kernel_for_a_few_tokens_and_the_gate_then_top_k_for_more(
        cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    gate = _gate()
    router = gate_topk_router.GateTopKRouter(gate, TOP_K, EXPERTS)
    kernel: list[tuple[int, Any]] = []
    top_k: list[torch.Tensor] = []

    def fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, k: int, pad: Any) -> tuple[Any, Any]:
        assert w is gate.weight and b is gate.bias and k == TOP_K
        kernel.append((x.shape[0], pad))  # a CPU tensor cannot launch the compiled kernel: record, compute
        return _softmax_top_k(torch.nn.functional.linear(x, w, b))

    def vllm_top_k(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool,
                   indices_type: Any = None, scoring_func: str = "softmax") -> tuple[Any, Any, None]:
        assert (topk, renormalize, scoring_func) == (TOP_K, True, "softmax")
        top_k.append(gating_output)
        return (*_softmax_top_k(gating_output), None)

    monkeypatch.setattr(bias_router_topk, "bias_router_topk", fused)
    monkeypatch.setattr(fused_topk_router, "fused_topk", vllm_top_k)
    with torch.no_grad():
        for m in (1, 8, 9, 32):
            x = torch.randn(m, HIDDEN, dtype=torch.bfloat16)
            weights, ids = router.select_experts(hidden_states=x, router_logits=x)
            if m > 8:
                torch.testing.assert_close(top_k[-1], gate(x))
            want_w, want_ids = _softmax_top_k(torch.nn.functional.linear(x, gate.weight, gate.bias))
            torch.testing.assert_close((weights, ids), (want_w, want_ids))
            # A monolithic MoE kernel routes by itself: it gets the gate's logits.
            torch.testing.assert_close(router.prepare_monolithic_logits(x), gate(x))
    assert kernel == [(1, None), (8, None)]
    assert [t.shape[0] for t in top_k] == [9, 32]  # the gate's logits, then vLLM's top-k


def _softmax_top_k(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, ids = logits.float().topk(TOP_K, dim=1)
    return torch.softmax(values, dim=1), ids.to(torch.int32)


@pytest.mark.parametrize("case, why", [
    ("not cuda", "not CUDA"),
    ("top-9", "top-9"),  # the kernel's MAX_TOP_K is 8
    ("257 experts", "257 experts"),  # its MAX_EXPERTS is 256
    ("no bias", "the gate is not an unquantized bf16 linear layer with a bias"),
    ("fp32 gate", "the gate is not an unquantized bf16 linear layer with a bias"),
    ("batch invariant", "batch-invariant mode"),
    ("sequence parallel", "tokens or experts are spread over ranks"),
    ("data parallel", "tokens or experts are spread over ranks"),
    ("expert parallel", "tokens or experts are spread over ranks"),
    ("eplb", "tokens or experts are spread over ranks"),
    ("context parallel", "tokens or experts are spread over ranks"),
    ("micro-batching", "micro-batching (DBO)"),
    ("lora", "LoRA"),
    ("routing simulation", "VLLM_MOE_ROUTING_SIMULATION_STRATEGY is set"),
])
def test_where_the_router_cannot_serve_the_model_keeps_its_gate_and_router(
        case: str, why: str, cuda: None, monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    monkeypatch.setenv(ENV, "1")
    if case == "not cuda":
        monkeypatch.setattr(gate_topk_router, "current_platform", fake_platform(PlatformEnum.CPU))
    if case == "batch invariant":
        monkeypatch.setattr(envs, "VLLM_BATCH_INVARIANT", True, raising=False)
    if case == "routing simulation":
        monkeypatch.setenv("VLLM_MOE_ROUTING_SIMULATION_STRATEGY", "uniform_random")
    parallel = {"sequence parallel": {"use_sequence_parallel_moe": True},
                "data parallel": {"data_parallel_size": 2},
                "expert parallel": {"enable_expert_parallel": True},
                "eplb": {"enable_eplb": True},
                "context parallel": {"prefill_context_parallel_size": 2},
                "micro-batching": {"use_ubatching": True}}.get(case, {})
    config = _config(**parallel)
    if case == "lora":
        config.lora_config = SimpleNamespace()
    gate = _gate(bias=case != "no bias", dtype=torch.float32 if case == "fp32 gate" else torch.bfloat16)
    top_k, experts = 9 if case == "top-9" else TOP_K, 257 if case == "257 experts" else EXPERTS
    router = gate_topk_router.maybe_gate_topk_router(gate, top_k, experts, config,
                                                     case == "sequence parallel")
    assert router is None
    assert vllm_log.messages(LOG_OFF) == [f"{LOG_OFF}: {why}; the gate and vLLM's top-k route ({ENV})"]


def test_unset_nothing_changes(cuda: None, monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    monkeypatch.delenv(ENV, raising=False)
    block = _block(monkeypatch, _config())
    assert block.experts.kwargs["router"] is None
    assert vllm_log.messages("Router GEMV with top-k") == []
    x = torch.randn(2, HIDDEN, dtype=torch.bfloat16)
    with torch.no_grad():
        block(x)
    (hidden, logits), = block.experts.calls
    assert hidden is x
    torch.testing.assert_close(logits, block.router(x))  # the model applies its gate


def test_the_variable_is_declared_and_a_compile_cache_factor(envs_type_checked: set[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """It changes the traced graph (the gate moves into the MoE layer's opaque op)."""
    monkeypatch.setenv(ENV, "1")
    assert_compile_factor(ENV, envs_type_checked)


def test_the_kernel_compiles_for_the_h100_and_both_blackwells_without_spills() -> None:
    kernels = run_json(COMPILED, False, json.dumps(ARCHS))
    assert_in_registers(kernels, (1, 2, 4, 8))
    # gpt-oss's K in one tile up to 4 tokens, in two at 8 (8 x 4096 spills on sm_90a)
    assert [k["block_k"] for k in kernels if k["arch"] == 90] == [4096, 4096, 4096, 2048]


# Last: the interpreter's process takes a while, and `patches mutate` stops at the first failing test.
def test_the_kernel_picks_and_weighs_what_the_gate_and_top_k_softmax_pick() -> None:
    result = run_json(INTERPRETED, True)
    assert result["max_tokens"] == 8
    assert [c["m"] for c in result["cases"]] == [m for m in range(1, 9) for _ in range(2)]
    for case in result["cases"]:
        assert case["dtypes"] == ["torch.float32", "torch.int32"] and case["shape"] == [case["m"], 4], case
        assert case["ids"] == case["want"], case  # the same experts in the same order; padded rows -1
        assert case["err"] <= 1e-6, case  # the softmax over the same logits
        assert case["count"] == 0, case  # the counter left for the next call
    ties = result["ties"]
    assert ties["ids"] == [[1, 3, 5, 4], [-1, -1, -1, -1]]  # ties to the lower id; a padded token nowhere
    for row in ties["weights"]:
        assert row == pytest.approx(ties["want"], abs=1e-6)
