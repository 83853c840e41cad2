"""Numerics of the patched online-MXFP4 lm_head (vLLM 0.33.0 + vllm/0002).

Builds a ParallelLMHead of the real gpt-oss shape (201088 x 2880, bf16) through
the PATCHED vLLM path (OnlineQuantizationConfig(lm_head="mxfp4") ->
resolve_quant_method -> Mxfp4OnlineLMHeadMethod -> layerwise online loader ->
mxfp4_quantize -> the kernel's repack), with the kernel the kernel rules name for
this GPU's profile (Humming on sm_90, Marlin on SM12x), then compares
  * quant_method.apply (what LogitsProcessor calls) against a fp32 reference
    computed from the DEQUANTIZED MXFP4 weights (captured right before the
    kernel repack): rel err ||a-b||/||b|| <= 1e-2, for M = 1..16;
  * top-1 agreement with the unquantized bf16 logits (reported, not gated).

    pytest -q tests/gpu/test_lm_head_mxfp4_numerics.py   (a proof keeps lm_head_numerics.json)
"""

import json
import re
from pathlib import Path

import pytest
import torch
from proof_artifacts import artifact_path
from sparkserve_lab.kernels.mxfp4_layers import HIDDEN, VOCAB, build
from sparkserve_lab.validate import profile_rules

from sparkserve.serving import flags, profiles

ROOT = Path(__file__).resolve().parents[2]
M_VALUES = list(range(1, 17))
REL_TOL = 1e-2

_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
         -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] (low nibble first) + uint8 E8M0 [N, K/32] -> fp32 [N, K]."""
    lut = torch.tensor(_E2M1, device=packed.device)
    lo, hi = (packed & 0xF).long(), (packed >> 4).long()
    vals = torch.stack([lut[lo], lut[hi]], -1).reshape(packed.shape[0], -1)
    s = torch.exp2(scales.view(torch.uint8).float() - 127.0)
    return vals * s.repeat_interleave(32, dim=1)




def expected_kernel() -> tuple[str | None, list[str]]:
    """The kernel the profile of this GPU's kind serves the lm_head with: the backend its flags force
    (if any) and the lm_head patterns of the kernel rules (lab/configs/engine-kernels.toml)."""
    major, minor = torch.cuda.get_device_capability()
    name = {(9, 0): "hopper-h100", (12, 1): "spark", (12, 0): "desktop-sm120"}.get((major, minor))
    if name is None:
        pytest.fail(f"no serving profile for compute capability {major}.{minor}")
    resolved = profiles.resolve(name, ROOT, overrides={"MXFP4_LAYERS": "moe,lm_head"})
    table = profile_rules.load(ROOT / "lab" / "configs" / "engine-kernels.toml")
    rules = profile_rules.rules_for(resolved.profile, table, resolved.label)
    argv = flags.vllm_argv(resolved.profile)
    forced = "MarlinMxFp4LinearKernel" if "--linear-backend" in argv else None
    return forced, rules.must["lm_head"]


def run(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    dev = torch.device("cuda")
    w = (torch.randn(VOCAB, HIDDEN, device=dev) * 0.02).to(torch.bfloat16)
    forced, _ = expected_kernel()
    head, packed, scales = build("lm_head", w, forced)
    w_dq = dequant_mxfp4(packed, scales)
    assert w_dq.shape == (VOCAB, HIDDEN)
    res = dict(kernel=type(head.quant_method.kernel).__name__,
               weight_quant_rel_err=float((w_dq - w.float()).norm() / w.float().norm()),
               per_m=[])
    for m in M_VALUES:
        x = torch.randn(m, HIDDEN, device=dev, dtype=torch.bfloat16)
        logits = head.quant_method.apply(head, x, bias=None)
        ref_dq = x.float() @ w_dq.t()
        ref_bf16 = torch.nn.functional.linear(x, w).float()
        rel = float((logits.float() - ref_dq).norm() / ref_dq.norm())
        top1 = float((logits.float().argmax(-1) == ref_bf16.argmax(-1)).float().mean())
        res["per_m"].append(dict(m=m, shape=list(logits.shape), rel_err_vs_dequant=rel,
                                 top1_agree_vs_bf16=top1))
    res["max_rel_err"] = max(r["rel_err_vs_dequant"] for r in res["per_m"])
    res["mean_top1_agree_vs_bf16"] = sum(
        r["top1_agree_vs_bf16"] for r in res["per_m"]) / len(M_VALUES)
    res["pass"] = bool(res["max_rel_err"] <= REL_TOL and all(
        r["shape"] == [r["m"], VOCAB] for r in res["per_m"]))
    return res


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_lm_head_mxfp4_numerics():
    res = run()
    print(json.dumps(res, indent=1))
    out = artifact_path("lm_head_numerics.json")
    if out:
        out.write_text(json.dumps(res, indent=1))
    _, patterns = expected_kernel()
    assert all(re.search(p, res["kernel"]) for p in patterns), (res["kernel"], patterns)
    for r in res["per_m"]:
        assert r["shape"] == [r["m"], VOCAB]
        assert r["rel_err_vs_dequant"] <= REL_TOL, r
