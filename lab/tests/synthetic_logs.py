"""Engine logs written from vLLM 0.33.0's own format strings (those cited in
lab/src/sparkserve_lab/validate/logparse.py), for the kernel-rule tests: what a profile's run logs when
vLLM selects the given kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "(EngineCore pid=1) INFO 11-23 12:00:00 [x.py:1] "


@dataclass
class Selection:
    moe: str = "TRITON"
    attention: str = "FLASH_ATTN"
    linear: str | None = None
    quantized: tuple[str, ...] = ()  # attn.qkv_proj / attn.o_proj in the "Quantizing" line
    lm_head: str | None = None
    sink_decode: str | None = None
    fa_version: int | None = 3
    engine: dict[str, str] = field(default_factory=lambda: {
        "device_config": "cuda", "quantization": "gpt_oss_mxfp4", "kv_cache_dtype": "auto",
        "enforce_eager": "False", "enable_prefix_caching": "True"})
    # MoE tactic lines of patch vllm/0004: (tokens, gemm1 id, gemm2 id) on the SM12x MXFP8 x MXFP4 list
    moe_tactics: tuple[tuple[int, int, int], ...] = ()
    moe_tactic_source: str = "autotuner"
    extra: tuple[str, ...] = ()

    def text(self) -> str:
        cfg = ", ".join(f"{k}={v}" for k, v in self.engine.items())
        lines = [f"Initializing a V1 LLM engine (v0.33.0) with config: model='/m', {cfg}, seed=0"]
        if self.quantized:
            types = "; ".join(f"{q}: 36 (from linear: QuantKey(u8))" for q in self.quantized)
            lines.append(f"Quantizing {36 * len(self.quantized)} layers of types: {types}")
        if self.linear:
            lines.append(f"Using {self.linear} for MXFP4 GEMM")
        if self.lm_head:
            lines.append(f"lm_head quantized online to MXFP4 (group 32, E8M0) using {self.lm_head}.")
        lines.append(f"Using '{self.moe}' Mxfp4 MoE backend.")
        lines.append(f"Using AttentionBackendEnum.{self.attention} backend.")
        if self.fa_version:
            lines.append(f"Using FlashAttention version {self.fa_version}")
        if self.sink_decode:
            lines.append(f"FlashInfer attention-sink decode kernel: {self.sink_decode} "
                         f"(VLLM_FLASHINFER_SINK_DECODE=auto).")
            lines.append("FlashInfer resolved query dtypes: prefill=torch.bfloat16, decode=torch.bfloat16, "
                         f"decode_backend={self.sink_decode}, kv_cache_dtype=torch.bfloat16, arch=sm90")
        for tokens, g1, g2 in self.moe_tactics:
            lines.append(f"FlashInfer CUTLASS MoE tactics for {tokens} tokens: gemm1={g1} gemm2={g2} of 6+12 "
                         f"(mxfp8 x mxfp4, sm121; {self.moe_tactic_source}).")
        lines += list(self.extra)
        lines.append("Starting vLLM server on http://127.0.0.1:8000")
        return "\n".join(PREFIX + line for line in lines) + "\n"
