"""Gate of patch vllm/0009 (the K loop of gpt-oss's MXFP4 decode experts on tensor cores).

With VLLM_MXFP4_MOE_GEMV_MMA=1 (and vllm/0007's VLLM_MXFP4_MOE_GEMV=1), the decode batches vllm/0007 serves
run its two kernels with their K loop as mma.sync from Gluon (mxfp4_moe_mma.py): the same calls, the same
fallbacks to Marlin. Where the tensor-core decode cannot serve the experts (a GPU before compute capability
8.0, an E8M0 scale above 2^9, sizes off the 32-wide scale group) vllm/0007's CUDA-core kernels serve them,
logged once naming why. Unset, nothing changes.

Gluon has no interpreter: the kernels' numbers are the GPU proof's (tests/gpu/test_mxfp4_moe_gemv.py, against
float32 and Marlin). Here Triton compiles both kernels ahead of time, without a GPU, for the H100 (sm_90),
desktop Blackwell (sm_120) and the DGX Spark (sm_121): no local memory or stack, and the K loop's SASS
instructions per weight word.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
import vllm.envs as envs
import vllm.platforms
from gate_support import ARCHS, fake_platform, run_json
from marlin_mxfp4_experts import apply, meta_experts
from vllm.model_executor.layers.fused_moe.experts import marlin_moe, mxfp4_moe_gemv, mxfp4_moe_mma
from vllm.platforms.interface import DeviceCapability, PlatformEnum

GEMV = "VLLM_MXFP4_MOE_GEMV"
ENV = "VLLM_MXFP4_MOE_GEMV_MMA"
LOG_ON = f"MXFP4 MoE GEMV: the K loop on tensor cores, mma.sync from Gluon kernels ({ENV})"
LOG_OFF = "MXFP4 MoE GEMV on tensor cores not used"

COMPILED = r"""
import json, os, sys, tempfile
from cubins import compile_cubin, facts, k_loop
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_gemv, mxfp4_moe_mma
i32 = ("n_experts", "k_tiles", "n_pad", "stride_we", "stride_se", "stride_be", "stride_act")
SIG = {"x_ptr": "*bf16", "ids_ptr": "*i32", "tw_ptr": "*fp32", "w_ptr": "*i32", "s_ptr": "*i32",
       "b_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32",
       "n_tiles_real": "i32", "stride_xm": "i32", "stride_om": "i32", "alpha": "fp32", "limit": "fp32",
       **{n: "i32" for n in i32}}
# the activations between the GEMMs: bf16 on tensor cores, fp32 in vllm/0007's CUDA-core kernels
ACT = {mxfp4_moe_mma: "*bf16", mxfp4_moe_gemv: "*fp32"}
SPLITS = {"_gate_up_swiglu_kernel": "SPLIT_K_GATE_UP", "_down_combine_kernel": "SPLIT_K_DOWN"}
# the pointers 16-byte aligned and the strides multiples of 16, as Triton's JIT specializes gpt-oss's tensors
ALIGNED = {"n_pad", "stride_xm", "stride_we", "stride_se", "stride_be", "stride_act", "stride_om"}
out = []
with tempfile.TemporaryDirectory() as tmp:
    # [[module, kernel, arch], ...]
    for module, name, arch in json.loads(sys.argv[1]):
        mod = {"mma": mxfp4_moe_mma, "gemv": mxfp4_moe_gemv}[module]
        consts = {"TOPK": 4, "BLOCK_S": 32, "BLOCK_M": 1, "KT": getattr(mod, "TILES_PER_STEP", None),
                  "SPLIT_K": getattr(mod, SPLITS[name])}
        warps = getattr(mod, "NUM_WARPS", None) or mod._NUM_WARPS
        cubin = compile_cubin(getattr(mod, name), SIG | {"act_ptr": ACT[mod]}, consts, arch,
                              {"num_warps": warps}, ALIGNED)
        k = facts(cubin, name, os.path.join(tmp, f"{module}-{arch}-{name}.cubin"), sass=True)
        # words a thread reads in one pass of the loop: tensor cores, 8 words a group, UNROLL groups;
        # CUDA cores, KT Marlin tiles of 128 words over the warps' 32 lanes
        words = 8 * mod.UNROLL if module == "mma" else consts["KT"] * 128 // (32 * warps)
        out.append({"module": module, "kernel": name, "arch": arch, "loop": k_loop(k.pop("sass")),
                    "words": words, **k})
json.dump(out, sys.stdout)
"""

# The tensor-core K loop's budget: about 21 SASS instructions a 32-bit weight word (8 fp4 weights) on
# sm_90a and sm_121a, against vllm/0007's 42-44 on the CUDA cores, which bound those at 0.36 of an H200's
# copy bandwidth; at the memory's speed an H200 SM allows about 31 (16 bytes and 4 warp instructions a cycle).
PER_WORD = 24
# the load-time check itself (the tests replace it with one over CPU scales)
SCALE_CHECK = mxfp4_moe_mma.scales_unsupported


def _capability(monkeypatch: pytest.MonkeyPatch, major: int, minor: int) -> None:
    """A CUDA platform of that compute capability, without a device."""
    platform = fake_platform(PlatformEnum.CUDA)
    type(platform).get_device_capability = classmethod(  # type: ignore[method-assign]
        lambda cls, device_id=0: DeviceCapability(major, minor))
    monkeypatch.setattr(vllm.platforms, "current_platform", platform)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Which kernels each call ran, by token count (none can run on a CPU), and E8M0 scales of 2^-7 in place
    of the meta device's (which hold no values) for the load-time scale check."""
    seen: dict[str, list[int]] = {"mma": [], "gemv": [], "marlin": []}
    monkeypatch.setattr(mxfp4_moe_mma, "mxfp4_moe_mma", lambda x, *a, **k: seen["mma"].append(x.shape[0]))
    monkeypatch.setattr(mxfp4_moe_gemv, "mxfp4_moe_gemv", lambda x, *a, **k: seen["gemv"].append(x.shape[0]))
    monkeypatch.setattr(marlin_moe, "fused_marlin_moe",
                        lambda hidden_states, *a, **k: seen["marlin"].append(hidden_states.shape[0]))
    monkeypatch.setattr(mxfp4_moe_gemv, "get_workspace", lambda *a: None)  # no memory on the meta device
    scales_with(monkeypatch, 120)
    return seen


def scales_with(monkeypatch: pytest.MonkeyPatch, byte: int) -> None:
    """The load-time check of mxfp4_moe_mma run on CPU scales of the experts' shapes, every byte BYTE."""
    monkeypatch.setattr(mxfp4_moe_mma, "scales_unsupported", lambda *scales: SCALE_CHECK(
        *(torch.full(s.shape, byte, dtype=torch.uint8) for s in scales)))


def test_the_variable_is_declared_and_no_compile_cache_factor(envs_type_checked: set[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Read at load time, inside the opaque MoE op's setup: the traced graph is the same either way."""
    monkeypatch.setenv(ENV, "1")
    assert ENV in envs.environment_variables and envs.VLLM_MXFP4_MOE_GEMV_MMA is True
    assert ENV in envs_type_checked and ENV not in envs.compile_factors()
    monkeypatch.delenv(ENV)
    assert envs.VLLM_MXFP4_MOE_GEMV_MMA is False


@pytest.mark.parametrize("cap", [None, "4"])
def test_decode_batches_run_the_tensor_core_kernels(cap: str | None, calls: dict[str, list[int]],
                                                    monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    """The batches vllm/0007 serves (up to its cap) run the tensor-core kernels; larger ones Marlin."""
    _capability(monkeypatch, 9, 0)
    monkeypatch.setenv(GEMV, "1")
    monkeypatch.setenv(ENV, "1")
    if cap:
        monkeypatch.setenv("VLLM_MXFP4_MOE_GEMV_MAX_TOKENS", cap)
    experts, layer = meta_experts()
    experts.process_weights_after_loading(layer)
    assert vllm_log.messages(LOG_ON) == [LOG_ON] and vllm_log.messages(LOG_OFF) == []
    for m in (1, 4, 5, 8, 9):
        apply(experts, layer, m)
    served = [1, 4] if cap else [1, 4, 5, 8]
    assert calls == {"mma": served, "gemv": [], "marlin": [m for m in (1, 4, 5, 8, 9) if m not in served]}


@pytest.mark.parametrize("case", ["unset", "compute capability 7.5", "scale 2^10", "scale 2^9"])
def test_otherwise_the_cuda_core_kernels_serve(case: str, calls: dict[str, list[int]],
                                               monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    _capability(monkeypatch, *((7, 5) if case == "compute capability 7.5" else (12, 1)))
    monkeypatch.setenv(GEMV, "1")
    if case == "unset":
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, "1")
    if case.startswith("scale"):
        scales_with(monkeypatch, 127 + int(case.split("^")[1]))
    experts, layer = meta_experts()
    experts.process_weights_after_loading(layer)
    reason = {"compute capability 7.5": "mma.sync on bf16 needs compute capability 8.0 or newer",
              "scale 2^10": "an E8M0 scale of 2^10 is beyond the tensor-core decode's 2^9"}.get(case)
    if case == "scale 2^9":  # the largest scale the decode is exact for: the tensor cores serve it
        assert vllm_log.messages(LOG_ON) == [LOG_ON] and vllm_log.messages(LOG_OFF) == []
        apply(experts, layer, 1)
        assert calls["mma"] == [1]
        return
    assert vllm_log.messages(LOG_ON) == []
    assert vllm_log.messages(LOG_OFF) == (
        [] if reason is None else [f"{LOG_OFF}: {reason}; the CUDA-core kernels serve it ({ENV})"])
    apply(experts, layer, 1)
    apply(experts, layer, 9)
    assert calls == {"mma": [], "gemv": [1], "marlin": [9]}


def test_sizes_off_the_scale_group_are_refused() -> None:
    assert mxfp4_moe_mma.sizes_unsupported(2880, 2880) is None
    assert mxfp4_moe_mma.sizes_unsupported(2880, 2880 + 16) == (
        "hidden size 2880 or intermediate size 2896 is off the 32-wide scale group")


def test_the_kernels_compile_for_the_h100_and_both_blackwells_without_spills() -> None:
    # Triton's own compiler and ptxas, for a target named here, not a device's
    wanted = [["mma", k, a] for k in ("_gate_up_swiglu_kernel", "_down_combine_kernel")
              for a in ARCHS]
    kernels = run_json(COMPILED, False, json.dumps(wanted))
    assert [[k["module"], k["kernel"], k["arch"]] for k in kernels] == wanted
    for k in kernels:
        print(f"sm_{k['arch']} {k['kernel']}: {k['REG']} registers, {k['loop'] / k['words']:.1f} SASS "
              "instructions a weight word in the K loop")
        assert f".sm_{k['arch']}" in k["elf"], k  # a cubin for that architecture
        assert k["LOCAL"] == 0 and k["STACK"] == 0, k  # everything in registers
        assert 0 < k["REG"] <= 255, k
        assert k["loop"] <= PER_WORD * k["words"], k


def test_the_cuda_core_k_loop_is_over_the_tensor_core_budget() -> None:
    """The budget above can fail: vllm/0007's K loop, counted the same way, spends about twice it."""
    (k,) = run_json(COMPILED, False, json.dumps([["gemv", "_gate_up_swiglu_kernel", 90]]))
    assert k["loop"] > PER_WORD * k["words"], k
