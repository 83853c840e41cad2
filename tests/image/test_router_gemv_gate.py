"""Gate of patch vllm/0006 (router logits of a biased gate for a few tokens in one Triton kernel).

With VLLM_ROUTER_BIAS_GEMV=1 on CUDA, GateLinear sends a biased bf16 gate (gpt-oss's router: 2880 -> 128)
through the custom op vllm::bias_router_gemv_dispatch: up to MAX_TOKENS rows go to one Triton kernel that
adds the bias itself, larger batches to F.linear as before; the layer logs the choice once. Unset, or for
a gate without a bias, nothing changes. The kernel's numbers are checked here by Triton's interpreter on
the CPU (TRITON_INTERPRET=1, in a process of its own: the variable is read when a kernel is defined); the
device capability is faked for the wiring. Triton also compiles it ahead of time, without a GPU, for the
H100 (sm_90), desktop Blackwell (sm_120) and the DGX Spark (sm_121) at each block of rows it is launched
with, and the cubins must keep everything in registers (no local memory, no stack).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from gate_support import ARCHS, assert_compile_factor, assert_in_registers, fake_platform, run_json
from vllm.model_executor.layers.fused_moe.router import gate_linear
from vllm.platforms.interface import PlatformEnum

ENV = "VLLM_ROUTER_BIAS_GEMV"
LOG = "Router GEMM: a Triton GEMV with the bias"
HIDDEN, EXPERTS = 2880, 128  # gpt-oss's router

INTERPRETED = r"""
import json, sys, torch
from vllm.model_executor.layers.fused_moe.router import bias_router_gemv as g
torch.manual_seed(0)
out = {"max_tokens": g.MAX_TOKENS, "rows": {}}
w = torch.randn(128, 2880, dtype=torch.bfloat16) * 0.02
b = torch.randn(128, dtype=torch.bfloat16)
for m in range(1, g.MAX_TOKENS + 2):
    x = torch.randn(m, 2880, dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(x.float(), w.float(), b.float())
    got = g.bias_router_gemv_dispatch_impl(x, w, b)
    no_bias = torch.nn.functional.linear(x.float(), w.float())
    out["rows"][m] = {
        "dtype": str(got.dtype), "shape": list(got.shape),
        "err": (got.float() - ref).abs().max().item(),
        "bound": (2.0 ** -7 * ref.abs() + 1e-3).min().item(),
        "within": bool(((got.float() - ref).abs() <= 2.0 ** -7 * ref.abs() + 1e-3).all()),
        "bias_shift": (got.float() - no_bias).abs().max().item(),
    }
json.dump(out, sys.stdout)
"""


COMPILED = r"""
import json, os, sys, tempfile, triton
from cubins import compile_cubin, facts
from vllm.model_executor.layers.fused_moe.router import bias_router_gemv as g
signature = {name: "*bf16" for name in ("x_ptr", "w_ptr", "b_ptr", "out_ptr")}
signature |= {name: "i32" for name in ("M", "N", "K", "stride_xm", "stride_wn", "stride_om")}
signature |= {name: "constexpr" for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
block_k = min(triton.next_power_of_2(2880), g._MAX_BLOCK_K)  # as the launcher picks it for gpt-oss
out = []
with tempfile.TemporaryDirectory() as tmp:
    for arch in json.loads(sys.argv[1]):
        for block_m in sorted({triton.next_power_of_2(m) for m in range(1, g.MAX_TOKENS + 1)}):
            cubin = compile_cubin(g._bias_router_gemv_kernel, signature,
                                  {"BLOCK_M": block_m, "BLOCK_N": g._BLOCK_N, "BLOCK_K": block_k}, arch)
            k = facts(cubin, "_bias_router_gemv_kernel", os.path.join(tmp, f"{arch}-{block_m}.cubin"))
            out.append({"arch": arch, "block_m": block_m, "block_k": block_k, **k})
json.dump(out, sys.stdout)
"""


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA platform, and a tensor-parallel group of one (a replicated layer's weights ask their rank)."""
    from vllm.distributed import parallel_state

    monkeypatch.setattr(gate_linear, "current_platform", fake_platform(PlatformEnum.CUDA))
    monkeypatch.setattr(parallel_state, "_TP", SimpleNamespace(rank_in_group=0, world_size=1))


def _gate(bias: bool = True) -> Any:
    """gpt-oss's router as vLLM builds it, in the model's dtype."""
    return gate_linear.GateLinear(HIDDEN, EXPERTS, bias=bias, params_dtype=torch.bfloat16,
                                  prefix="model.layers.0.mlp.router", return_bias=False)


def test_a_biased_gate_takes_the_kernel_for_a_few_tokens(cuda: None, monkeypatch: pytest.MonkeyPatch,
                                                        vllm_log: Any) -> None:
    from vllm.model_executor.layers.fused_moe.router import bias_router_gemv

    monkeypatch.setenv(ENV, "1")
    gate = _gate()
    assert gate.allow_bias_router_gemv
    assert vllm_log.messages(LOG) == [f"{LOG} for up to 4 tokens ({ENV})"]
    calls: list[int] = []

    def kernel(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])  # a CPU tensor cannot launch the compiled kernel: record, then compute
        return torch.nn.functional.linear(x, w, b)

    monkeypatch.setattr(bias_router_gemv, "bias_router_gemv", kernel)
    with torch.no_grad():
        gate.weight.normal_(std=0.02)
        gate.bias.normal_()
        for m in (1, 4, 5, 32):
            x = torch.randn(m, HIDDEN, dtype=gate.weight.dtype)
            torch.testing.assert_close(gate(x), torch.nn.functional.linear(x, gate.weight, gate.bias))
    assert calls == [1, 4]  # 5 and 32 tokens: F.linear inside the op


@pytest.mark.parametrize("case", ["unset", "no bias", "not cuda"])
def test_otherwise_nothing_changes(case: str, cuda: None, monkeypatch: pytest.MonkeyPatch,
                                   vllm_log: Any) -> None:
    if case != "unset":
        monkeypatch.setenv(ENV, "1")
    else:
        monkeypatch.delenv(ENV, raising=False)
    if case == "not cuda":
        monkeypatch.setattr(gate_linear, "current_platform", fake_platform(PlatformEnum.CPU))
    gate = _gate(bias=case != "no bias")
    assert not gate.allow_bias_router_gemv
    assert vllm_log.messages(LOG) == []


def test_the_variable_is_declared_and_a_compile_cache_factor(envs_type_checked: set[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """It changes the traced graph (a custom op instead of addmm): compiled graphs must not be shared."""
    monkeypatch.setenv(ENV, "1")
    assert_compile_factor(ENV, envs_type_checked)


def test_the_kernel_compiles_for_the_h100_and_both_blackwells_without_spills() -> None:
    # Triton's own compiler and ptxas, for a target named here, not a device's.
    kernels = run_json(COMPILED, False, json.dumps(ARCHS))
    assert_in_registers(kernels, (1, 2, 4))
    assert {k["block_k"] for k in kernels} == {4096}  # gpt-oss's whole K in one tile


# Last: the interpreter's process takes ~20 s, and `patches mutate` stops at the first failing test.
def test_the_kernel_matches_linear_with_its_bias_for_each_served_batch() -> None:
    result = run_json(INTERPRETED, True)
    assert result["max_tokens"] == 4
    rows = result["rows"]
    assert sorted(rows, key=int) == ["1", "2", "3", "4", "5"]
    for m, row in rows.items():
        assert row["dtype"] == "torch.bfloat16" and row["shape"] == [int(m), EXPERTS], (m, row)
        assert row["within"], (m, row)  # fp32 accumulation, one bf16 rounding of the result
        assert row["bias_shift"] > 0.5, (m, row)  # the bias (std 1) is in the logits
