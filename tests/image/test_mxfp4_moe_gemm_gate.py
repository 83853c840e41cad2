"""Gate of patch vllm/0008 (gpt-oss's MXFP4 experts for large batches as two Triton grouped GEMMs over
Marlin's weights).

With VLLM_MXFP4_MOE_GEMM_MIN_TOKENS=N (N > 0), MarlinExperts of gpt-oss's MXFP4 experts send a batch of N
tokens or more to mxfp4_moe_gemm: the routed slots sorted by expert in blocks, gate_up + bias + SwiGLU as one
grouped GEMM, down + bias + routing weight as a second, the top-k slots summed; both decode the weights,
scales and biases as Marlin holds them into bf16 tiles for tl.dot. Smaller batches keep vllm/0007's kernels
(VLLM_MXFP4_MOE_GEMV) or Marlin; expert parallelism, LoRA or other quantizations stay on Marlin, the first
such call logging why, once. Unset, nothing changes.

The kernels' numbers are checked by Triton's interpreter on the CPU (TRITON_INTERPRET=1, in a process of its
own), on experts put into Marlin's layout by vLLM's own preparation, against float32 and Marlin's data flow.
Triton also compiles both kernels ahead of time for the H100 (sm_90a: warpgroup MMA), desktop Blackwell
(sm_120a) and the DGX Spark (sm_121a) at the tile shapes the launcher picks, without local memory or stack.
"""

from __future__ import annotations

import functools
import importlib
import json
from typing import Any

import pytest
import torch
import vllm.envs as envs
import vllm.platforms
from gate_support import ARCHS, fake_platform, run_json
from marlin_mxfp4_experts import EXPERTS, apply, meta_experts
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.experts import marlin_moe, mxfp4_moe_gemm, mxfp4_moe_gemv
from vllm.platforms.interface import PlatformEnum

# the module, not the function of that name the package exports
align = importlib.import_module("vllm.model_executor.layers.fused_moe.moe_align_block_size")

ENV = "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS"
LOG_ON = "MXFP4 MoE GEMM: batches of"
LOG_OFF = "MXFP4 MoE GEMM not used"

# The interpreter's cases: experts from tests/image/marlin_mxfp4_experts.py (vLLM's preparation for Marlin,
# with vLLM's CPU reference of the repack kernel), against its float32 reference and Marlin's data flow; the
# routed slots sorted as moe_align_block_size sorts them (a CUDA op: here its documented result, written out).
INTERPRETED = r"""
import json, math, sys, torch
import numpy as np
import triton.language as tl
from triton.runtime import interpreter
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemm as g
from marlin_mxfp4_experts import (in_marlin_layout, install_cpu_repack, random_batch, random_experts,
                                  reference)

install_cpu_repack()

# Triton 3.8's interpreter keeps bf16 tensors as their uint16 bits and multiplies the bits in tl.dot: the
# operands go to float32 first (exact), as the tensor cores take them.
_dot = interpreter.InterpreterBuilder.create_dot
def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    def f32(h):
        if h.dtype != tl.bfloat16:
            return h
        bits = interpreter._convert_float(h.data, tl.bfloat16, tl.float32, None)
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
    return _dot(self, f32(a), f32(b), d, input_precision, max_num_imprecise_acc)
interpreter.InterpreterBuilder.create_dot = create_dot

def sort_slots(ids, block_m, n_experts):
    # moe_align_block_size(ignore_invalid_experts=True): each expert's slots in a run padded to block_m with
    # the slot count, an expert id per block, the padded length; ids outside [0, E) in no block.
    flat, n_slots = ids.flatten(), ids.numel()
    sorted_ids, expert_ids = [], []
    for e in range(n_experts):
        slots = (flat == e).nonzero().flatten().tolist()
        if slots:
            blocks = math.ceil(len(slots) / block_m)
            sorted_ids += slots + [n_slots] * (blocks * block_m - len(slots))
            expert_ids += [e] * blocks
    n_post = len(sorted_ids)
    cap = math.ceil((n_slots + n_experts * (block_m - 1)) / block_m) * block_m
    sorted_ids += [n_slots] * (cap - n_post)
    expert_ids += [-1] * (cap // block_m - len(expert_ids))
    return (torch.tensor(sorted_ids, dtype=torch.int32), torch.tensor(expert_ids, dtype=torch.int32),
            torch.tensor([n_post], dtype=torch.int32))

def case(M, E, H, I, Hp, Ip, seed, cfg, pad=0):
    gen = torch.Generator().manual_seed(seed)
    p = random_experts(E, H, I, Hp, Ip, gen)
    mw13, mw2, ms13, ms2, mb13, mb2 = in_marlin_layout(p)
    x, ids, tw = random_batch(M, E, H, Hp, gen)
    ids[M - pad:] = -1  # padded tokens, as vLLM's top-k marks them (VLLM_MOE_SKIP_PADDING)
    out = torch.full((M, Hp), float("nan"), dtype=torch.bfloat16)
    slots = sort_slots(ids, cfg[0], E)
    g.mxfp4_moe_gemm(x, ids, tw, mw13, ms13, mb13, mw2, ms2, mb2, out, H, I, *slots, *cfg)
    ref, mref = reference(x, ids, tw, p, False), reference(x, ids, tw, p, True)
    got = out[:, :H].float()
    return {"M": M, "shape": [E, H, I, Hp, Ip], "cfg": cfg, "pad": pad,
            "pad_rows_zero": bool((out[M - pad:] == 0).all()) if pad else None,
            "err": (got - ref[:, :H]).abs().max().item(), "ref_max": ref.abs().max().item(),
            "vs_marlin": (got - mref[:, :H]).abs().max().item(),
            "marlin_err": (mref - ref).abs().max().item(),
            "no_routing_err": (got - reference(x, ids, torch.ones_like(tw), p, False)[:, :H]).abs().max()
            .item(),
            "padding_zero": bool((out[:, H:] == 0).all())}

# 6 experts of hidden 96 / intermediate 48 padded to 128 / 64: partial K steps, a column block past the
# padded width, blocks of 16 slots with padding slots; tile shapes of 64 and 128 columns, 32 and 64 K.
cases = [case(12, 6, 96, 48, 128, 64, 1, (16, 64, 32, 4, 2)),
         case(10, 6, 96, 48, 128, 64, 2, (16, 128, 64, 4, 2)),
         case(9, 6, 96, 48, 128, 64, 3, (32, 64, 64, 4, 2)),
         case(12, 6, 96, 48, 128, 64, 4, (16, 64, 32, 4, 2), pad=3)]
json.dump({"cases": cases}, sys.stdout)
"""

COMPILED = r"""
import json, os, re, sys, tempfile
from cubins import compile_cubin, facts
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemm as g
i32 = ("n_slots", "n_experts", "k_tiles", "n_pad", "stride_we", "stride_se", "stride_be", "stride_act")
kernels = {
    "_gate_up_swiglu_gemm_kernel": {
        "x_ptr": "*bf16", "sorted_ptr": "*i32", "expert_ids_ptr": "*i32", "n_post_ptr": "*i32",
        "w_ptr": "*i32", "s_ptr": "*i32", "b_ptr": "*bf16", "act_ptr": "*bf16", "stride_xm": "i32",
        **{n: "i32" for n in i32}, "alpha": "fp32", "limit": "fp32"},
    "_down_gemm_kernel": {
        "act_ptr": "*bf16", "sorted_ptr": "*i32", "expert_ids_ptr": "*i32", "n_post_ptr": "*i32",
        "tw_ptr": "*fp32", "w_ptr": "*i32", "s_ptr": "*i32", "b_ptr": "*bf16", "out_ptr": "*bf16",
        "stride_om": "i32", **{n: "i32" for n in i32}},
}
# the pointers 16-byte aligned and the strides multiples of 16, as Triton's JIT specializes gpt-oss's tensors
ALIGNED = {"n_pad", "stride_xm", "stride_we", "stride_se", "stride_be", "stride_act", "stride_om"}
out = []
with tempfile.TemporaryDirectory() as tmp:
    for arch, name, (block_m, block_n, block_k, warps, stages) in json.loads(sys.argv[1]):
        consts = {"TOPK": 4, "BLOCK_M": block_m, "BNT": block_n // 64, "BKT": block_k // 16}
        cubin = compile_cubin(getattr(g, name), kernels[name], consts, arch,
                              {"num_warps": warps, "num_stages": stages}, ALIGNED)
        k = facts(cubin, name, os.path.join(tmp, f"{arch}-{name}-{block_m}.cubin"), sass=True)
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", k.pop("sass"))
        out.append({"arch": arch, "kernel": name, "block_m": block_m, "wgmma": ops.count("HGMMA"),
                    "mma": ops.count("HMMA"), **k})
json.dump(out, sys.stdout)
"""


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Which path each call took, by token count (the kernels and Marlin's CUDA ops cannot run on a CPU),
    and the block of slots the GEMMs were sorted into."""
    seen: dict[str, list[Any]] = {"gemm": [], "gemv": [], "marlin": [], "sorted_by": []}
    monkeypatch.setattr(mxfp4_moe_gemm, "mxfp4_moe_gemm", lambda x, *a, **k: seen["gemm"].append(x.shape[0]))
    monkeypatch.setattr(align, "moe_align_block_size",
                        lambda ids, block, *a, **k: seen["sorted_by"].append(block) or (None, None, None))
    monkeypatch.setattr(mxfp4_moe_gemv, "mxfp4_moe_gemv", lambda x, *a, **k: seen["gemv"].append(x.shape[0]))
    monkeypatch.setattr(marlin_moe, "fused_marlin_moe",
                        lambda hidden_states, *a, **k: seen["marlin"].append(hidden_states.shape[0]))
    monkeypatch.setattr(mxfp4_moe_gemv, "get_workspace", lambda *a: None)  # no memory on the meta device
    return seen


@pytest.mark.parametrize("gemv", [False, True])
def test_large_batches_run_the_gemms_and_smaller_ones_stay(gemv: bool, cuda: None,
                                                           calls: dict[str, list[Any]],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           vllm_log: Any) -> None:
    monkeypatch.setenv(ENV, "1024")
    monkeypatch.setenv("VLLM_MXFP4_MOE_GEMV", "1" if gemv else "0")
    experts, layer = meta_experts()
    experts.process_weights_after_loading(layer)
    assert experts.mxfp4_gemm is not None
    assert vllm_log.messages(LOG_ON) == [
        f"{LOG_ON} 1024 tokens or more run two Triton grouped GEMMs over Marlin's weights ({ENV})"]
    for m in (1, 8, 9, 1023, 1024, 8192):
        apply(experts, layer, m)
    assert calls["gemm"] == [1024, 8192]
    assert calls["gemv"] == ([1, 8] if gemv else [])
    assert calls["marlin"] == ([9, 1023] if gemv else [1, 8, 9, 1023])
    # the slots sorted into the kernels' blocks
    assert calls["sorted_by"] == [mxfp4_moe_gemm.BLOCK_M] * 2
    assert vllm_log.messages(LOG_OFF) == []
    apply(experts, layer, 2048, expert_map=torch.arange(EXPERTS))
    assert calls["marlin"][-1] == 2048
    assert vllm_log.messages(LOG_OFF) == [
        f"{LOG_OFF}: expert parallelism (an expert map); Marlin serves it ({ENV})"]


@pytest.mark.parametrize("case", ["unset", "zero", "not cuda", "not mxfp4", "not swigluoai"])
def test_otherwise_marlin_serves_every_batch(case: str, cuda: None, calls: dict[str, list[Any]],
                                            monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    if case == "unset":
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, "0" if case == "zero" else "256")
    if case == "not cuda":
        monkeypatch.setattr(vllm.platforms, "current_platform", fake_platform(PlatformEnum.CPU))
    experts, layer = meta_experts(
        activation=MoEActivation.SILU if case == "not swigluoai" else MoEActivation.SWIGLUOAI,
        mxfp4=case != "not mxfp4")
    experts.process_weights_after_loading(layer)
    assert experts.mxfp4_gemm is None
    reason = {"not cuda": "not a CUDA platform",
              "not mxfp4": "the experts are not MXFP4 weights with 16-bit activations",
              "not swigluoai": "activation silu is not gpt-oss's SwiGLU"}.get(case)
    expected = [] if reason is None else [f"{LOG_OFF}: {reason}; Marlin serves it ({ENV})"]
    assert vllm_log.messages(LOG_OFF) == expected
    assert vllm_log.messages(LOG_ON) == []
    apply(experts, layer, 4096)
    assert calls["gemm"] == [] and calls["marlin"] == [4096]


def test_the_variable_is_declared_and_no_compile_cache_factor(envs_type_checked: set[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Read inside the opaque MoE op at run time: the traced graph is the same either way."""
    monkeypatch.setenv(ENV, "512")
    assert ENV in envs.environment_variables and envs.VLLM_MXFP4_MOE_GEMM_MIN_TOKENS == 512
    assert ENV in envs_type_checked
    assert ENV not in envs.compile_factors()
    monkeypatch.delenv(ENV)
    assert envs.VLLM_MXFP4_MOE_GEMM_MIN_TOKENS == 0


def _config() -> list[int]:
    """The tile shape the launcher uses."""
    g = mxfp4_moe_gemm
    return [g.BLOCK_M, g.BLOCK_N, g.BLOCK_K, g.NUM_WARPS, g.NUM_STAGES]


# A warpgroup's MMA takes 64 rows: Triton gives a block of 16 slots mma.sync on sm_90a.
SMALL_BLOCK = [16, 128, 64, 4, 3]


@functools.cache
def _compiled() -> list[dict[str, Any]]:
    """Both kernels at the launcher's tile shape for each target, and the down kernel at SMALL_BLOCK on
    sm_90a, in one process (vLLM's import takes most of its time)."""
    wanted = [[a, k, _config()] for a in ARCHS
              for k in ("_gate_up_swiglu_gemm_kernel", "_down_gemm_kernel")]
    kernels = run_json(COMPILED, False, json.dumps([*wanted, [90, "_down_gemm_kernel", SMALL_BLOCK]]))
    assert [[k["arch"], k["kernel"], k["block_m"]] for k in kernels] == [
        [a, k, c[0]] for a, k, c in [*wanted, [90, "_down_gemm_kernel", SMALL_BLOCK]]]
    return kernels


def test_the_kernels_compile_for_the_h100_and_both_blackwells_without_spills() -> None:
    kernels = _compiled()[:-1]
    keys = ("arch", "kernel", "block_m", "REG", "wgmma", "mma")
    print(json.dumps([{x: k[x] for x in keys} for k in kernels]))
    for k in kernels:
        assert f".sm_{k['arch']}" in k["elf"], k  # a cubin for that architecture
        assert k["LOCAL"] == 0 and k["STACK"] == 0, k  # everything in registers
        assert 0 < k["REG"] <= 255, k
        # the wide MMA where the GPU has it (Hopper's warpgroup MMA), the tensor cores' mma.sync elsewhere
        assert (k["wgmma"] > 0) is (k["arch"] == 90) and (k["wgmma"] > 0 or k["mma"] > 0), k


def test_a_block_of_16_slots_gets_no_warpgroup_mma() -> None:
    """The check above can fail: the same kernel with a block of 16 slots has no warpgroup MMA on sm_90a."""
    k = _compiled()[-1]
    assert k["block_m"] == SMALL_BLOCK[0] and k["wgmma"] == 0 and k["mma"] > 0, k


# Last: the interpreter's process takes minutes, and `patches mutate` stops at the first failing test.
def test_the_gemms_match_float32_and_marlins_math() -> None:
    cases = run_json(INTERPRETED, True)["cases"]
    assert [c["pad"] for c in cases] == [0, 0, 0, 3]
    for c in cases:
        # The kernels round to bf16 where Marlin's data flow does (the activations, each slot's output): they
        # stay within twice Marlin's own distance from float32 plus one bf16 ulp of the largest output, of
        # float32 and of Marlin's math.
        bound = 2 * c["marlin_err"] + 2.0 ** -7 * c["ref_max"]
        assert c["err"] <= bound and c["vs_marlin"] <= bound, c
        assert c["no_routing_err"] > 50 * c["err"], c  # the routing weights are in the result
        assert c["padding_zero"], c  # the padded columns of the output are zero
        # vLLM routes a padded token to expert -1: its slots are in no block, its row is zero.
        assert c["pad_rows_zero"] is (True if c["pad"] else None), c
