"""FlashInfer's CUTLASS fused MoE called the way vLLM 0.33.0 calls it for gpt-oss's MXFP4 experts
(vllm/model_executor/layers/fused_moe/oracle/mxfp4.py weight preparation, experts/flashinfer_cutlass_moe.py
FlashInferExperts.apply), on the paths of `sparkserve.serving.moe.tactics`:

- sm120-mxfp8-mxfp4: activations quantized to MXFP8 (flashinfer.mxfp8_quantize, 128x4-swizzled UE8M0
  scales), weights as int64 views, weight scales block_scale_interleave'd and viewed as int32, a unit
  "input scale" per expert, use_mxfp8_act_scaling=True;
- sm90-bf16-mxfp4: BF16 activations, weights and scales interleaved for the SM90 mixed-input GEMM
  (interleave_moe_weights/scales_for_sm90_mixed_gemm), use_w4_group_scaling=True.

Both pass the fc1/fc2 biases and gpt-oss's SwiGLU alpha/beta/limit per expert with ActivationType.Swiglu
(FlashInfer then runs its SwigluBias activation). GPU only: torch and flashinfer are imported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sparkserve.errors import SparkserveError
from sparkserve.serving.moe import tactics as tmod
from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe.reference import Experts


class Unsupported(SparkserveError):
    """No FlashInfer CUTLASS MXFP4 MoE path for this GPU (or this activation on it)."""


def device_capability(device: torch.device) -> tuple[int, int]:
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def choose_path(device: torch.device, activation: str | None = None) -> str:
    """The path for this GPU; `activation` ("mxfp8" / "bf16") narrows it. Raises Unsupported naming what
    is supported."""
    major, minor = device_capability(device)
    wanted = [activation] if activation else ["mxfp8", "bf16"]
    for act in wanted:
        path = tmod.path_for(major, minor, act)
        if path:
            return path
    name = torch.cuda.get_device_name(device)
    what = f"{activation} activations on " if activation else ""
    raise Unsupported(f"FlashInfer's CUTLASS MXFP4 fused MoE has no kernels for {what}{name} (compute "
                      f"capability {major}.{minor}). Supported: {tmod.supported_text()}")


def activation_of(path: str) -> str:
    return "mxfp8" if path == tmod.SM120_MXFP8_MXFP4 else "bf16"


@dataclass
class Prepared:
    """Kernel-layout weights on the GPU (one copy)."""

    fc1: torch.Tensor
    fc2: torch.Tensor
    quant_scales: list[torch.Tensor]
    fc1_bias: torch.Tensor
    fc2_bias: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.fc1, self.fc2, self.fc1_bias, self.fc2_bias,
                                                          *self.quant_scales))


def prepare(experts: Experts, path: str, device: torch.device) -> Prepared:
    import flashinfer.fused_moe as fmoe

    w13, w2 = experts.w13.to(device), experts.w2.to(device)
    s13, s2 = experts.w13_scale.to(device), experts.w2_scale.to(device)
    b13 = experts.b13.to(device, torch.bfloat16).contiguous()
    b2 = experts.b2.to(device, torch.bfloat16).contiguous()
    if path == tmod.SM90_BF16_MXFP4:
        return Prepared(
            fmoe.interleave_moe_weights_for_sm90_mixed_gemm(w13.contiguous(), "fp4"),
            fmoe.interleave_moe_weights_for_sm90_mixed_gemm(w2.contiguous(), "fp4"),
            [fmoe.interleave_moe_scales_for_sm90_mixed_gemm(s13.contiguous()),
             fmoe.interleave_moe_scales_for_sm90_mixed_gemm(s2.contiguous())],
            b13, b2)
    if path == tmod.SM120_MXFP8_MXFP4:
        from flashinfer import block_scale_interleave

        def interleave(s: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = block_scale_interleave(s.contiguous().view(torch.uint8)).reshape(s.shape)
            return out.view(torch.int32)

        ones = torch.ones(experts.count, dtype=torch.float32, device=device)
        return Prepared(w13.contiguous().view(torch.long), w2.contiguous().view(torch.long),
                        [interleave(s13), ones, interleave(s2), ones], b13, b2)
    raise Unsupported(f"unknown path {path!r}")


def swizzle_128x4(sf: torch.Tensor) -> torch.Tensor:
    """(M, K/32) UE8M0 scales -> FlashInfer's 128x4-swizzled flat layout (rows padded to 128, scale columns
    to 4; the layout vLLM's swizzle_mxfp8_scale writes)."""
    m, cols = sf.shape
    mt, kt = (m + 127) // 128, (cols + 3) // 4
    padded = torch.zeros(mt * 128, kt * 4, dtype=sf.dtype, device=sf.device)
    padded[:m, :cols] = sf
    out: torch.Tensor = padded.view(mt, 4, 32, kt, 4).transpose(1, 3).contiguous().view(-1)
    return out


def quantize_input_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x as vLLM hands it to the kernel: E4M3 values and 128x4-swizzled UE8M0 scales, by FlashInfer's
    quantizer, or, if that cannot run here, by the reference's rule and the same swizzle."""
    try:
        from flashinfer import mxfp8_quantize

        xq, sf = mxfp8_quantize(x, True)
        return xq, sf
    except Exception:  # FlashInfer's JIT/runtime error types; the torch path computes the same bytes
        from sparkserve_lab.moe.reference import quantize_mxfp8

        q, s = quantize_mxfp8(x)
        return q, swizzle_128x4(s)


@dataclass
class Call:
    """One fused-MoE invocation's activation-side tensors (reused across tactics and graph replays)."""

    x: torch.Tensor  # bf16 (T, H) or MXFP8 values
    x_sf: torch.Tensor | None
    ids: torch.Tensor
    weights: torch.Tensor
    out: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)


class Runner:
    """Runs the fused MoE of one path and shape on one GPU, with explicit tactics when asked."""

    def __init__(self, path: str, shape: MoeShape, device: torch.device) -> None:
        self.path, self.shape, self.device = path, shape, device
        e = shape.experts
        self.alpha = torch.full((e,), shape.swiglu_alpha, dtype=torch.float32, device=device)
        self.beta = torch.full((e,), shape.swiglu_beta, dtype=torch.float32, device=device)
        self.limit = torch.full((e,), shape.swiglu_limit, dtype=torch.float32, device=device)

    @property
    def activation(self) -> str:
        return activation_of(self.path)

    def call(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> Call:
        """Quantize x as vLLM does for this path (MXFP8 with swizzled scales, or none)."""
        x = x.to(self.device, torch.bfloat16).contiguous()
        out = torch.empty(x.shape[0], self.shape.padded_hidden, dtype=torch.bfloat16, device=self.device)
        ids = ids.to(self.device, torch.int32).contiguous()
        weights = weights.to(self.device, torch.float32).contiguous()
        if self.path == tmod.SM120_MXFP8_MXFP4:
            xq, sf = quantize_input_mxfp8(x)
            return Call(xq, sf, ids, weights, out)
        return Call(x, None, ids, weights, out)

    def run(self, c: Call, w: Prepared, profile_ids: list[int] | None = None) -> torch.Tensor:
        from flashinfer.fused_moe import cutlass_fused_moe
        from flashinfer.fused_moe.core import ActivationType

        mxfp8 = self.path == tmod.SM120_MXFP8_MXFP4
        cutlass_fused_moe(
            input=c.x, token_selected_experts=c.ids, token_final_scales=c.weights,
            fc1_expert_weights=w.fc1, fc2_expert_weights=w.fc2, output_dtype=torch.bfloat16,
            quant_scales=w.quant_scales, fc1_expert_biases=w.fc1_bias, fc2_expert_biases=w.fc2_bias,
            input_sf=c.x_sf, swiglu_alpha=self.alpha, swiglu_beta=self.beta, swiglu_limit=self.limit,
            output=c.out, use_mxfp8_act_scaling=mxfp8, use_w4_group_scaling=not mxfp8,
            activation_type=ActivationType.Swiglu, profile_ids=profile_ids,
        )
        return c.out

    def tactic_runner(self, c: Call, w: Prepared) -> Any:
        """FlashInfer's MoERunner for these tensors (the autotuner's view of the op: tactic counts, the
        tactics it would try for a shape). Its C++ runner is the one cutlass_fused_moe uses."""
        from flashinfer.fused_moe.core import ActivationType, get_cutlass_fused_moe_module
        from flashinfer.utils import device_support_pdl

        major, minor = device_capability(self.device)
        mod = get_cutlass_fused_moe_module(f"{major * 10 + minor}")
        mxfp8 = self.path == tmod.SM120_MXFP8_MXFP4
        return mod.MoERunner(
            x_dtype=c.x.dtype, weight_dtype=w.fc1.dtype, output_dtype=torch.bfloat16, top_k=c.ids.shape[1],
            tp_size=1, tp_rank=0, ep_size=1, ep_rank=0, cluster_size=1, cluster_rank=0,
            enable_alltoall=False, use_deepseek_fp8_block_scale=False, use_w4_group_scaling=not mxfp8,
            use_mxfp8_act_scaling=mxfp8, min_latency_mode=False, enable_pdl=device_support_pdl(self.device),
            activation_type=ActivationType.Swiglu, use_packed_weights=False, use_fused_finalize=True,
            use_wfp4afp8_humming=False)


def module_status(device: torch.device) -> dict[str, Any]:
    """Whether the FlashInfer fused-MoE module this GPU loads is prebuilt (an AOT .so in the package's
    data/aot/, loaded without any toolchain), already in the JIT cache, or still to be compiled."""
    import flashinfer.jit.fused_moe as jfm
    from flashinfer.jit import env as jit_env

    major, _ = device_capability(device)
    gen = jfm.gen_cutlass_fused_moe_sm120_module if major == 12 else jfm.gen_cutlass_fused_moe_sm90_module
    spec = gen()
    aot = [str(a.path) for a in jit_env.get_aot_artifacts(spec.name)]
    jit = Path(spec.jit_library_path)
    if aot:
        state = f"prebuilt (AOT, no compile): {aot[0]}"
    elif jit.exists():
        state = f"in the JIT cache: {jit} (ninja checks it is current; a changed CUDA path or flag rebuilds)"
    else:
        state = (f"NOT BUILT: the first call JIT-compiles {len(spec.sources)} compilation units into {jit} "
                 "(docs/GPU.md, MoE tactics: prebuild it elsewhere)")
    return {"module": spec.name, "state": state, "aot": aot, "jit_library": str(jit),
            "jit_built": jit.exists(), "units": len(spec.sources)}


@dataclass(frozen=True)
class TacticSpace:
    counts: tuple[int, int]
    gemm1: list[int]  # the tactics FlashInfer's autotuner would try (occupancy and shape filters)
    gemm2: list[int]
    listing: tmod.TacticList | None  # sparkserve's description of the indices, None for an unknown build


def tactic_space(runner: Runner, c: Call, w: Prepared) -> TacticSpace:
    mr = runner.tactic_runner(c, w)
    fr = mr.fused_moe_runner
    counts = (int(fr.get_gemm1_tactic_count()), int(fr.get_gemm2_tactic_count()))
    inputs = [c.x, w.fc1, w.fc1_bias, w.fc2, w.fc2_bias]
    stages = []
    for stage in (1, 2):
        mr.gemm_idx_for_tuning = stage
        stages.append([int(t) for t in mr.get_valid_tactics(inputs, None) if int(t) >= 0])
    return TacticSpace(counts, stages[0], stages[1], tmod.resolve(runner.path, *counts))
