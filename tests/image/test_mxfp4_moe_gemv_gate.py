"""Gate of patch vllm/0007 (gpt-oss's MXFP4 experts for decode batches in two Triton kernels over Marlin's
weights).

With VLLM_MXFP4_MOE_GEMV=1, MarlinExperts of gpt-oss's MXFP4 experts (bf16 activations, the clamped SwiGLU,
biases) send a batch of 1-8 tokens to mxfp4_moe_gemv: gate_up + bias + SwiGLU in one kernel, down + bias +
routing weight + combine in a second, both reading the weights, scales and biases as Marlin holds them. A
larger batch, expert parallelism, LoRA, other quantizations or sizes off the kernels' tile stay on Marlin, and
the first such call logs why, once; another MXFP4 backend logs that it serves every batch. Unset, nothing
changes.

The kernels' numbers are checked by Triton's interpreter on the CPU (TRITON_INTERPRET=1, in a process of its
own): experts made from random MXFP4 bytes, put into Marlin's layout by vLLM's own preparation
(prepare_moe_mxfp4_layer_for_marlin, with vLLM's CPU reference of the repack kernel), against a float32
reference of the same dequantized weights and against Marlin's data flow (bf16 after each GEMM and the
activation). Triton also compiles both kernels ahead of time, without a GPU, for the H100 (sm_90), desktop
Blackwell (sm_120) and the DGX Spark (sm_121) at each block of tokens they are launched with, and the cubins
must keep everything in registers (no local memory, no stack).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import vllm.envs as envs
import vllm.platforms
from gate_support import ARCHS, fake_platform, run_json
from marlin_mxfp4_experts import EXPERTS, HIDDEN_PAD, apply, meta_experts
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.experts import marlin_moe, mxfp4_moe_gemv
from vllm.platforms.interface import PlatformEnum

ENV = "VLLM_MXFP4_MOE_GEMV"
CAP = "VLLM_MXFP4_MOE_GEMV_MAX_TOKENS"
LOG_ON = "MXFP4 MoE GEMV: decode batches of up to 8 tokens"
LOG_OFF = "MXFP4 MoE GEMV not used"

# The interpreter's cases: experts from tests/image/marlin_mxfp4_experts.py (vLLM's preparation for Marlin,
# with vLLM's CPU reference of the repack kernel), against its float32 reference and Marlin's data flow.
INTERPRETED = r"""
import json, sys, torch
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemv as g
from marlin_mxfp4_experts import (in_marlin_layout, install_cpu_repack, random_batch, random_experts,
                                  reference)

install_cpu_repack()

def case(M, E, H, I, Hp, Ip, seed, pad=0, **kw):
    gen = torch.Generator().manual_seed(seed)
    p = random_experts(E, H, I, Hp, Ip, gen)
    mw13, mw2, ms13, ms2, mb13, mb2 = in_marlin_layout(p)
    x, ids, tw = random_batch(M, E, H, Hp, gen, share=True)  # each slot of a shared expert serves its token
    ids[M - pad:] = -1  # padded tokens, as vLLM's top-k marks them (VLLM_MOE_SKIP_PADDING)
    ws = g.Mxfp4MoeGemvWorkspace(torch.device("cpu"), Hp, Ip, 4)
    out = torch.full((M, Hp), float("nan"), dtype=torch.bfloat16)
    g.mxfp4_moe_gemv(x, ids, tw, mw13, ms13, mb13, mw2, ms2, mb2, out, H, I, ws, **kw)
    ref, mref = reference(x, ids, tw, p, False), reference(x, ids, tw, p, True)
    got = out[:, :H].float()
    ulp = 2.0 ** (torch.floor(torch.log2(ref[:, :H].abs().clamp_min(2.0 ** -100))) - 7)
    err = (got - ref[:, :H]).abs()
    return {"M": M, "shape": [E, H, I, Hp, Ip], "kw": kw, "pad": pad,
            "pad_rows_zero": bool((out[M - pad:] == 0).all()) if pad else None,
            "err": err.max().item(), "ref_max": ref.abs().max().item(), "ulps": (err / ulp).max().item(),
            "within": bool((err <= ulp + 2.0 ** -12 * ref.abs().max()).all()),
            "vs_marlin": (got - mref[:, :H]).abs().max().item(),
            "marlin_err": (mref - ref).abs().max().item(),
            "no_routing_err": (got - reference(x, ids, torch.ones_like(tw), p, False)[:, :H]).abs().max()
            .item(),
            "padding_zero": bool((out[:, H:] == 0).all()),
            "workspace_zero": all(bool((t == 0).all()) for t in (ws.down_sums, ws.down_counts,
                                                                  ws.gate_up_sums, ws.gate_up_counts))}

cases = [case(m, 6, 96, 48, 128, 64, m) for m in range(1, g.MAX_TOKENS + 1)]
cases.append(case(3, 6, 96, 48, 128, 64, 11, split_k_gate_up=2, split_k_down=3))
# a CUDA graph's batch of 8 with 5 padded tokens, and one of padding alone (how vLLM captures the graph)
cases.append(case(8, 6, 96, 48, 128, 64, 12, pad=5))
cases.append(case(4, 6, 96, 48, 128, 64, 13, pad=4))
# gpt-oss's own sizes (2880 padded to 3072 and 2944, 128 experts) are the GPU proof's
# (tests/gpu/test_mxfp4_moe_gemv.py): in Triton's interpreter they take minutes a case.
json.dump({"max_tokens": g.MAX_TOKENS, "cases": cases}, sys.stdout)
"""

COMPILED = r"""
import json, os, sys, tempfile
from cubins import compile_cubin, facts, k_loop
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemv as g
i32 = ("n_experts", "k_tiles", "n_pad", "stride_we", "stride_se", "stride_be", "stride_act")
kernels = {
    "_gate_up_swiglu_kernel": (
        {"x_ptr": "*bf16", "ids_ptr": "*i32", "w_ptr": "*i32", "s_ptr": "*i32", "b_ptr": "*bf16",
         "act_ptr": "*fp32", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "stride_xm": "i32",
         **{n: "i32" for n in i32}, "alpha": "fp32", "limit": "fp32"}, g.SPLIT_K_GATE_UP),
    "_down_combine_kernel": (
        {"act_ptr": "*fp32", "ids_ptr": "*i32", "tw_ptr": "*fp32", "w_ptr": "*i32", "s_ptr": "*i32",
         "b_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32",
         "n_tiles_real": "i32",
         "stride_om": "i32", **{n: "i32" for n in i32}}, g.SPLIT_K_DOWN),
}
# [[arch, kernel, block_m or null, tiles_per_step or null, aligned], ...]; aligned: the pointers 16-byte
# aligned and the strides multiples of 16, as Triton's JIT specializes gpt-oss's tensors at run time.
wanted = json.loads(sys.argv[1])
ALIGNED = {"n_pad", "stride_xm", "stride_we", "stride_se", "stride_be", "stride_act", "stride_om"}


out = []
with tempfile.TemporaryDirectory() as tmp:
    for arch, name, block_m, kt, aligned in wanted:
        sig, split = kernels[name]
        kt = kt or g.TILES_PER_STEP
        consts = {"TOPK": 4, "BLOCK_M": block_m, "BLOCK_S": 32, "KT": kt, "SPLIT_K": split}
        cubin = compile_cubin(getattr(g, name), sig, consts, arch, {"num_warps": g._NUM_WARPS},
                              ALIGNED if aligned else None)
        # the K loop of the build the JIT makes for gpt-oss
        k = facts(cubin, name, os.path.join(tmp, f"{arch}-{name}-{block_m}.cubin"), sass=aligned)
        sass = k.pop("sass", None)
        out.append({"arch": arch, "kernel": name, "block_m": block_m, "kt": kt,
                    "loop": k_loop(sass) if sass else None, "warps": g._NUM_WARPS, **k})
json.dump(out, sys.stdout)
"""


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Which path each call took, by token count: the kernels cannot run on a CPU, nor Marlin's CUDA ops."""
    seen: dict[str, list[int]] = {"gemv": [], "marlin": []}
    monkeypatch.setattr(mxfp4_moe_gemv, "mxfp4_moe_gemv",
                        lambda x, *a, **k: seen["gemv"].append(x.shape[0]))
    monkeypatch.setattr(marlin_moe, "fused_marlin_moe",
                        lambda hidden_states, *a, **k: seen["marlin"].append(hidden_states.shape[0]))
    monkeypatch.setattr(mxfp4_moe_gemv, "get_workspace", lambda *a: None)  # no memory on the meta device
    return seen


def test_decode_batches_run_the_kernels_and_larger_ones_marlin(cuda: None, calls: dict[str, list[int]],
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               vllm_log: Any) -> None:
    monkeypatch.setenv(ENV, "1")
    experts, layer = meta_experts()
    experts.process_weights_after_loading(layer)
    assert experts.mxfp4_gemv is not None
    assert vllm_log.messages(LOG_ON) == [f"{LOG_ON} run two Triton kernels over Marlin's weights ({ENV})"]
    for m in (1, 3, 8, 9, 64, 512):
        apply(experts, layer, m)
    assert calls == {"gemv": [1, 3, 8], "marlin": [9, 64, 512]}
    # One line, once, naming why: the larger batches.
    assert vllm_log.messages(LOG_OFF) == [
        f"{LOG_OFF}: a batch of more than 8 tokens; Marlin serves it ({ENV})"]
    apply(experts, layer, 2, expert_map=torch.arange(EXPERTS))
    assert calls["marlin"][-1] == 2
    assert vllm_log.messages(LOG_OFF)[-1] == (
        f"{LOG_OFF}: expert parallelism (an expert map); Marlin serves it ({ENV})")


def test_a_lower_cap_sends_larger_decode_batches_to_marlin(cuda: None, calls: dict[str, list[int]],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           vllm_log: Any) -> None:
    """VLLM_MXFP4_MOE_GEMV_MAX_TOKENS=4 (where Marlin decoded 8 requests faster than the CUDA-core loop):
    1-4 tokens run the kernels, 5-8 Marlin, and the load line and the fallback line say so."""
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv(CAP, "4")
    experts, layer = meta_experts()
    experts.process_weights_after_loading(layer)
    assert vllm_log.messages("MXFP4 MoE GEMV: decode batches") == [
        "MXFP4 MoE GEMV: decode batches of up to 4 tokens run two Triton kernels over Marlin's weights "
        f"({ENV})"]
    for m in range(1, 10):
        apply(experts, layer, m)
    assert calls == {"gemv": [1, 2, 3, 4], "marlin": [5, 6, 7, 8, 9]}
    assert vllm_log.messages(LOG_OFF) == [
        f"{LOG_OFF}: a batch of more than 4 tokens ({CAP}); Marlin serves it ({ENV})"]


@pytest.mark.parametrize("cap", ["0", "9", "-1"])
def test_a_cap_the_kernels_cannot_serve_is_refused_at_load(cap: str, cuda: None, calls: dict[str, list[int]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv(CAP, cap)
    experts, layer = meta_experts()
    with pytest.raises(ValueError, match=rf"^{CAP}={cap}: .* 1 to 8 tokens; set a value in that range"):
        experts.process_weights_after_loading(layer)


@pytest.mark.parametrize("case", ["unset", "not cuda", "not mxfp4", "not swigluoai", "hidden off the tile"])
def test_otherwise_marlin_serves_every_batch(case: str, cuda: None, calls: dict[str, list[int]],
                                            monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    if case == "unset":
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, "1")
    if case == "not cuda":
        monkeypatch.setattr(vllm.platforms, "current_platform", fake_platform(PlatformEnum.CPU))
    experts, layer = meta_experts(
        activation=MoEActivation.SILU if case == "not swigluoai" else MoEActivation.SWIGLUOAI,
        mxfp4=case != "not mxfp4",
        hidden_pad=HIDDEN_PAD + 32 if case == "hidden off the tile" else HIDDEN_PAD)
    experts.process_weights_after_loading(layer)
    assert experts.mxfp4_gemv is None
    reason = {"unset": None, "not cuda": "not a CUDA platform",
              "not mxfp4": "the experts are not MXFP4 weights with 16-bit activations",
              "not swigluoai": "activation silu is not gpt-oss's SwiGLU",
              "hidden off the tile":
                  "hidden size 3104 or intermediate size 2944 is off the kernel's 64-column tile"}
    expected = [] if reason[case] is None else [f"{LOG_OFF}: {reason[case]}; Marlin serves it ({ENV})"]
    assert vllm_log.messages(LOG_OFF) == expected
    assert vllm_log.messages(LOG_ON) == []
    apply(experts, layer, 1)
    assert calls == {"gemv": [], "marlin": [1]}


@pytest.mark.parametrize("backend", ["FLASHINFER_CUTLASS_MXFP4_MXFP8", "MARLIN"])
def test_another_mxfp4_backend_says_it_serves_every_batch(backend: str, monkeypatch: pytest.MonkeyPatch,
                                                          vllm_log: Any) -> None:
    """gpt-oss's method names the backend when the switch cannot apply (the Spark's cutlass-mxfp8)."""
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
    from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4MoEMethod

    monkeypatch.setenv(ENV, "1")
    set_up: list[str] = []
    method = SimpleNamespace(mxfp4_backend=Mxfp4MoeBackend[backend],
                             _setup_kernel=lambda *a: set_up.append("ok"))
    layer = SimpleNamespace(w13_weight=None, w2_weight=None, w13_weight_scale=None, w2_weight_scale=None)
    GptOssMxfp4MoEMethod.process_weights_after_loading(method, layer)  # type: ignore[arg-type]
    assert set_up == ["ok"]
    expected = [] if backend == "MARLIN" else [
        f"{LOG_OFF}: it reads Marlin's weights and the MXFP4 MoE backend is '{backend}', which serves every "
        f"batch ({ENV})"]
    assert vllm_log.messages(LOG_OFF) == expected


def test_the_variable_is_declared_and_no_compile_cache_factor(envs_type_checked: set[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Read inside the opaque MoE op at run time: the traced graph is the same either way."""
    monkeypatch.setenv(ENV, "1")
    assert ENV in envs.environment_variables and envs.VLLM_MXFP4_MOE_GEMV is True
    assert ENV in envs_type_checked
    assert ENV not in envs.compile_factors()
    monkeypatch.setenv(ENV, "0")
    assert envs.VLLM_MXFP4_MOE_GEMV is False
    # the cap: declared, 8 (every batch the kernels serve) when unset, no compile factor either
    monkeypatch.delenv(CAP, raising=False)
    assert CAP in envs_type_checked and envs.VLLM_MXFP4_MOE_GEMV_MAX_TOKENS == 8
    monkeypatch.setenv(CAP, "4")
    assert envs.VLLM_MXFP4_MOE_GEMV_MAX_TOKENS == 4 and CAP not in envs.compile_factors()


def test_a_spilling_variant_fails_the_register_check() -> None:
    """The check below can fail: 64 Marlin tiles per step hold 64 KB of words and fp32 partial sums per CTA,
    beyond the 255 registers a thread has, and ptxas spills them to the stack."""
    (k,) = run_json(COMPILED, False, json.dumps([[121, "_gate_up_swiglu_kernel", None, 64, False]]))
    assert k["LOCAL"] > 0 or k["STACK"] > 0, k


def test_the_kernels_compile_for_the_h100_and_both_blackwells_without_spills() -> None:
    # Triton's own compiler and ptxas, for a target named here, not a device's; the down kernel at each
    # block of output rows the launcher uses (gate_up serves one token a program).
    wanted = [[a, "_gate_up_swiglu_kernel", None, None, False] for a in ARCHS] + [
        [a, "_down_combine_kernel", m, None, False] for a in ARCHS for m in (1, 2, 4, 8)]
    kernels = run_json(COMPILED, False, json.dumps(wanted))
    assert [[k["arch"], k["kernel"], k["block_m"], None, False] for k in kernels] == wanted
    print(json.dumps([{x: k[x] for x in ("arch", "kernel", "block_m", "kt", "REG", "STACK", "LOCAL")}
                      for k in kernels]))
    for k in kernels:
        assert f".sm_{k['arch']}" in k["elf"], k  # a cubin for that architecture
        assert k["LOCAL"] == 0 and k["STACK"] == 0, k  # everything in registers
        assert 0 < k["REG"] <= 255, k


def test_the_k_loop_spends_few_instructions_per_weight_word() -> None:
    """What bounds these kernels is instructions, not bytes: an H200 SM takes about 16 bytes a cycle from
    memory and issues 4 warp instructions a cycle, so at the memory's speed a thread may spend about 31
    instructions on each 32-bit word of FP4 weights (8 weights, one token). The K loop as the JIT builds it
    for gpt-oss's tensors (aligned pointers and strides) must stay within 48 a word on sm_90a; the first
    version of these kernels took 106-116, and measured 0.14 of an H200's copy bandwidth. A GB10 SM gets a
    fifth of an H200 SM's bytes: the same bound holds the Spark's build with room to spare."""
    wanted = [[a, "_gate_up_swiglu_kernel", None, None, True] for a in (90, 121)] + [
        [a, "_down_combine_kernel", 1, None, True] for a in (90, 121)]
    kernels = run_json(COMPILED, False, json.dumps(wanted))
    for k in kernels:
        words = k["kt"] * 128 // (32 * k["warps"])  # a Marlin tile is 128 words
        print(f"sm_{k['arch']} {k['kernel']}: {k['loop']} instructions for {words} words a thread")
        assert k["loop"] <= 48 * words, k


# Last: the interpreter's process takes minutes, and `patches mutate` stops at the first failing test.
def test_the_kernels_match_float32_and_marlins_math_for_each_served_batch() -> None:
    result = run_json(INTERPRETED, True)
    assert result["max_tokens"] == 8
    cases = result["cases"]
    assert [c["M"] for c in cases] == [1, 2, 3, 4, 5, 6, 7, 8, 3, 8, 4]
    assert [c["pad"] for c in cases] == [0] * 9 + [5, 4]
    for c in cases:
        # vLLM routes a padded token to expert -1 (every row while it captures a CUDA graph): its slots add
        # nothing and read no expert, its row is zero.
        assert c["pad_rows_zero"] is (True if c["pad"] else None), c
        # fp32 products and sums of the same dequantized weights (exact in fp32), one bf16 rounding of the
        # output: Triton's interpreter rounds fp32 to bf16 toward zero, so up to one bf16 ulp of the result
        # here (half on a GPU), plus 2^-12 of the largest output for the fp32 sums' order (up to 2880 terms
        # per sum; an output near zero is a difference of large terms).
        assert c["within"], c
        # Marlin rounds to bf16 three times more (after GEMM1, the activation and GEMM2): the kernels stay
        # within twice that rounding of Marlin's math, and one ulp of the largest output.
        assert c["vs_marlin"] <= 2 * c["marlin_err"] + 2.0 ** -7 * c["ref_max"], c
        if c["pad"] < c["M"]:
            assert c["no_routing_err"] > 50 * c["err"], c  # the routing weights are in the result
        assert c["padding_zero"] and c["workspace_zero"], c  # padded columns zero; the next call finds zeros
