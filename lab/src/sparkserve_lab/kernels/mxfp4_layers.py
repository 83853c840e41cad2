"""gpt-oss's dense layers quantized online to MXFP4 by the pinned vLLM (the lm_head through the patched
vllm/0002 path), built without an engine: only the config lookups are stubbed, the kernels are real.

Used by tests/gpu/test_lm_head_mxfp4_numerics.py and lab/scripts/gpu/bench_linear.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

VOCAB, HIDDEN = 201088, 2880
# (out_features, in_features) of gpt-oss-120b's attention projections and lm_head.
SHAPES = {"qkv": (5120, HIDDEN), "o": (HIDDEN, 4096), "lm_head": (VOCAB, HIDDEN)}
# The MXFP4 kernels vLLM 0.33.0 can pick for these layers on CUDA (by class name).
KERNELS = ("MarlinMxFp4LinearKernel", "HummingMxFp4LinearKernel")
# Marlin ignores a requested activation quantization (vllm/model_executor/kernels/linear/mxfp4/marlin.py:
# "a weight-only (A16) kernel"); Humming keeps it, and online "linear": "mxfp4" requests one for qkv/o.
WEIGHT_ONLY = frozenset({"MarlinMxFp4LinearKernel"})


def quantizes_inputs(layer: Any) -> bool:
    """Whether the layer's MXFP4 kernel quantizes its input activations (W4A8) rather than reading BF16."""
    kernel = layer.quant_method.kernel
    return (type(kernel).__name__ not in WEIGHT_ONLY
            and getattr(kernel.config, "activation_quant_key", None) is not None)


def _quant_config() -> Any:
    """The online MXFP4 config of `--quantization-config '{"linear":"mxfp4","lm_head":"mxfp4"}'`, as
    the gpt-oss checkpoint config carries it (no engine: the config lookups are stubbed)."""
    import vllm.config
    import vllm.model_executor.parameter as parameter
    from vllm.config.quantization import QuantizationConfigArgs
    from vllm.model_executor.layers.quantization.online import fp8 as online_fp8
    from vllm.model_executor.layers.quantization.online.base import OnlineQuantizationConfig

    hf = SimpleNamespace(tie_word_embeddings=False)
    cfg = SimpleNamespace(
        lora_config=None,
        model_config=SimpleNamespace(
            hf_config=hf, hf_text_config=hf, dtype=torch.bfloat16,
            word_embeddings_untied_by_checkpoint=False, quantization_config=None,
        ),
    )
    vllm.config.get_current_vllm_config = lambda: cfg
    online_fp8.get_current_vllm_config = lambda: cfg
    parameter.get_tensor_model_parallel_rank = lambda: 0
    parameter.get_tensor_model_parallel_world_size = lambda: 1
    args = QuantizationConfigArgs(linear="mxfp4", lm_head="mxfp4")
    return SimpleNamespace(
        get_quant_method=lambda layer, prefix: None,  # GptOssMxfp4Config does this
        online_quantization_config=OnlineQuantizationConfig(args),
        packed_modules_mapping={},
    )


def build(kind: str, weight: torch.Tensor, kernel: str | None = None
          ) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The layer `kind` (qkv, o or lm_head) holding `weight` quantized online to MXFP4, with vLLM's own
    kernel choice or the named kernel class. Returns (layer, packed weight and E8M0 scales as quantized,
    before the kernel's repack)."""
    from vllm.model_executor.kernels import linear as kernels
    from vllm.model_executor.layers.linear import ReplicatedLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    out_features, in_features = SHAPES[kind]
    assert weight.shape == (out_features, in_features), (kind, weight.shape)
    qc = _quant_config()
    with torch.device(weight.device):
        if kind == "lm_head":
            layer = ParallelLMHead(out_features, in_features, params_dtype=torch.bfloat16, quant_config=qc,
                                   prefix="lm_head", disable_tp=True)
        else:
            layer = ReplicatedLinear(in_features, out_features, bias=False, params_dtype=torch.bfloat16,
                                     quant_config=qc, prefix=f"model.layers.0.self_attn.{kind}_proj",
                                     disable_tp=True)
    method = layer.quant_method
    if kernel is not None and type(method.kernel).__name__ != kernel:
        method.kernel = getattr(kernels, kernel)(method.kernel.config)
    captured: dict[str, torch.Tensor] = {}
    orig = method.kernel.process_weights_after_loading

    def capture(lay: Any) -> None:
        captured["w"] = lay.weight.detach().clone()
        captured["s"] = lay.weight_scale.detach().clone()
        orig(lay)

    method.kernel.process_weights_after_loading = capture
    # Online layerwise loader: materialize, load, quantize, repack.
    with torch.device(weight.device):
        layer.weight.weight_loader(layer.weight, weight)
        method.process_weights_after_loading(layer)  # a no-op if the loader already did it
    return layer, captured["w"], captured["s"]


def kernel_name(layer: Any) -> str:
    return type(layer.quant_method.kernel).__name__


def weight_bytes(layer: Any) -> int:
    """Bytes a call reads of the quantized weight (packed values + scales, as repacked)."""
    return sum(t.numel() * t.element_size() for t in (layer.weight, layer.weight_scale))


def build_lm_head(weight: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The lm_head with vLLM's own kernel choice (what `MXFP4_LAYERS=...,lm_head` serves)."""
    return build("lm_head", weight)
