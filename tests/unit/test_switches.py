"""The patch series' engine switches: a value the patched vLLM would choke on is refused before it starts
(exit 2, naming the variable), a switch that does nothing under the profile's MoE backend is a warning, and
the table covers every variable the series declares in vLLM's envs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkserve.serving import environment, switches
from sparkserve.serving.gpu import Gpu
from sparkserve.serving.kinds import ProfileError
from sparkserve.serving.settings import BY_VAR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("var", "value", "why"), [
    ("VLLM_ROUTER_BIAS_GEMV", "yes", "must be one of 0, 1"),
    ("VLLM_ROUTER_BIAS_GEMV", "2", "must be one of 0, 1"),
    ("VLLM_FLASH_ATTN_GROUP_AOT", "on", "must be one of 0, 1"),
    ("VLLM_MXFP4_MOE_GEMV_MAX_TOKENS", "9", "must be from 1 to 8"),
    ("VLLM_MXFP4_MOE_GEMV_MAX_TOKENS", "4.0", "must be a whole number"),
    ("VLLM_MXFP4_MOE_GEMM_MIN_TOKENS", "-1", "must be at least 0"),
    ("VLLM_MXFP4_MOE_GEMV_MMA", "true", "must be one of 0, 1"),
])
def test_a_value_the_patched_vllm_would_not_parse_is_refused(var: str, value: str, why: str) -> None:
    with pytest.raises(ProfileError) as info:
        environment.check({"MOE_BACKEND": "marlin-gemv", var: value})
    assert info.value.variable == var and why in info.value.why and "vllm/00" in info.value.why


def test_accepted_values_pass_and_a_switch_off_its_backend_is_a_warning() -> None:
    env = {"MOE_BACKEND": "marlin-gemv", "VLLM_ROUTER_BIAS_GEMV": "1", "VLLM_MXFP4_MOE_GEMV_MMA": "1",
           "VLLM_MXFP4_MOE_GEMV_MAX_TOKENS": " 4 ", "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS": "64"}
    assert environment.check(env) == []
    # an ablation to Marlin alone keeps the profile's MMA switch: it does nothing there, and says so
    warned = environment.check({**env, "MOE_BACKEND": "marlin"})
    assert warned == ["VLLM_MXFP4_MOE_GEMV_MAX_TOKENS=4 does nothing: patch vllm/0007 acts only with "
                      "MOE_BACKEND=marlin-gemv (here marlin)",
                      "VLLM_MXFP4_MOE_GEMV_MMA=1 does nothing: patch vllm/0009 acts only with "
                      "MOE_BACKEND=marlin-gemv (here marlin)"]
    # at its default, or with no backend condition, nothing to say
    assert environment.check({"VLLM_MXFP4_MOE_GEMV_MMA": "0", "VLLM_FLASH_ATTN_GROUP_AOT": "1"}) == []


KERNELS = {"MOE_BACKEND": "marlin-gemv", "VLLM_ROUTER_BIAS_GEMV": "1", "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS": "64",
           "VLLM_MXFP4_MOE_GEMV_MMA": "1", "VLLM_ROUTER_GEMV_TOPK": "1"}


@pytest.mark.parametrize("cc", switches.COMPILED_FOR)
def test_the_series_kernels_pass_on_the_gpus_they_are_compiled_for(cc: tuple[int, int]) -> None:
    switches.check_gpu(KERNELS, Gpu(0, "GPU", *cc))


@pytest.mark.parametrize(("var", "backend", "patch", "without"), [
    ("MOE_BACKEND", None, "vllm/0007", "marlin"),
    ("VLLM_ROUTER_BIAS_GEMV", "triton", "vllm/0006", "0"),
    ("VLLM_ROUTER_GEMV_TOPK", "triton", "vllm/0010", "0"),
    ("VLLM_MXFP4_MOE_GEMM_MIN_TOKENS", "marlin", "vllm/0008", "0"),
    ("VLLM_MXFP4_MOE_GEMV_MMA", "marlin-gemv", "vllm/0009", "0"),
])
def test_each_setting_that_runs_the_series_kernels_is_refused_on_another_gpu(
        var: str, backend: str | None, patch: str, without: str) -> None:
    """Each, under a backend it acts under and first among the settings that ask for kernels, is refused
    naming itself, its patch and the value that leaves the kernels out."""
    env = {var: KERNELS[var]} | ({"MOE_BACKEND": backend} if backend else {})
    asks = switches.kernel_requests(env)
    assert (var, KERNELS[var], patch, without) in asks
    first, value, first_patch, first_without = asks[0]  # the backend's, where it asks too
    with pytest.raises(ProfileError) as info:
        switches.check_gpu(env, Gpu(0, "NVIDIA B200", 10, 0))
    assert info.value.variable == first and info.value.value == value
    assert f"runs patch {first_patch}'s kernels" in info.value.why
    assert "compute capability 9.0, 12.0, 12.1 only" in info.value.why
    assert f"GPU 0 (NVIDIA B200) is 10.0: set {first}={first_without} in" in info.value.why


def test_settings_that_run_no_kernel_of_the_series_pass_on_any_gpu() -> None:
    """Defaults, the GEMV cap, FA3's schedule (FlashAttention's own kernels) and a switch under a backend
    it does not act under."""
    b200 = Gpu(0, "NVIDIA B200", 10, 0)
    for env in ({}, {"MOE_BACKEND": "marlin", "VLLM_ROUTER_BIAS_GEMV": "0", "VLLM_ROUTER_GEMV_TOPK": "0"},
                {"MOE_BACKEND": "marlin", "VLLM_MXFP4_MOE_GEMV_MAX_TOKENS": "4",
                 "VLLM_MXFP4_MOE_GEMV_MMA": "1"},
                {"VLLM_FLASH_ATTN_GROUP_AOT": "1"},
                {"MOE_BACKEND": "triton", "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS": "64"}):
        assert switches.kernel_requests(env) == []
        switches.check_gpu(env, b200)


def test_the_table_covers_every_variable_the_series_declares_in_vllms_envs() -> None:
    """Each VLLM_ variable the series adds to vllm/envs.py is an engine switch here (its patch named),
    a profile variable, the tactic table the entrypoint sets, or an override the preflight refuses."""
    declared: dict[str, str] = {}
    for f in sorted((ROOT / "patches" / "vllm").glob("0*.patch")):
        for name in re.findall(r"(?m)^\+    (VLLM_[A-Z0-9_]+): ", f.read_text()):
            declared[name] = f"vllm/{f.name[:4]}"
    elsewhere = {"VLLM_FLASHINFER_MOE_TACTICS", *environment.ENGINE_OVERRIDES, *BY_VAR}
    assert {n: p for n, p in declared.items() if n not in elsewhere} == {
        s.var: s.patch for s in switches.SWITCHES}


def test_docs_list_the_table() -> None:
    text = (ROOT / "docs" / "PROFILES.md").read_text()
    begin, end = "<!-- engine switches: begin -->\n", "<!-- engine switches: end -->"
    between = text.split(begin, 1)[1].split(end, 1)[0]
    assert between == switches.markdown(), ("docs/PROFILES.md is stale: put the output of "
                                            "`python -m sparkserve.serving.switches` between its markers")
