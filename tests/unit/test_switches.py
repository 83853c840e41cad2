"""The patch series' engine switches: a value the patched vLLM would choke on is refused before it starts
(exit 2, naming the variable), a switch that does nothing under the profile's MoE backend is a warning, and
the table covers every variable the series declares in vLLM's envs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkserve.serving import environment, switches
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
