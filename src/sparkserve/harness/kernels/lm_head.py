"""The patched online-MXFP4 lm_head of gpt-oss (vllm/0002), built without an engine.

Used by tests/gpu/test_lm_head_mxfp4_numerics.py and scripts/gpu/bench_lm_head_kernel.py.
"""

from types import SimpleNamespace
from typing import Any

import torch

VOCAB, HIDDEN = 201088, 2880


def build_lm_head(weight: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """ParallelLMHead quantized by the patched online path. Returns
    (head, packed_weight_before_repack, e8m0_scales_before_repack)."""
    import vllm.config
    import vllm.model_executor.parameter as parameter
    from vllm.config.quantization import QuantizationConfigArgs
    from vllm.model_executor.layers.quantization.online import fp8 as online_fp8
    from vllm.model_executor.layers.quantization.online.base import (
        OnlineQuantizationConfig,
    )
    from vllm.model_executor.layers.quantization.online.mxfp4 import (
        Mxfp4OnlineLMHeadMethod,
    )
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    # Only the config lookups are stubbed (no engine here); kernels are real.
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
    qc = SimpleNamespace(
        get_quant_method=lambda layer, prefix: None,  # GptOssMxfp4Config does this
        online_quantization_config=OnlineQuantizationConfig(args),
        packed_modules_mapping={},
    )
    with torch.device(weight.device):
        head = ParallelLMHead(
            VOCAB, HIDDEN, params_dtype=torch.bfloat16, quant_config=qc,
            prefix="lm_head", disable_tp=True,
        )
    assert isinstance(head.quant_method, Mxfp4OnlineLMHeadMethod), head.quant_method
    captured: dict[str, torch.Tensor] = {}
    kernel = head.quant_method.kernel
    orig = kernel.process_weights_after_loading

    def capture(layer: Any) -> None:
        captured["w"] = layer.weight.detach().clone()
        captured["s"] = layer.weight_scale.detach().clone()
        orig(layer)

    kernel.process_weights_after_loading = capture
    # Online layerwise loader: materialize, load, quantize, repack.
    with torch.device(weight.device):
        head.weight.weight_loader(head.weight, weight)
        head.quant_method.process_weights_after_loading(head)  # no-op if done
    return head, captured["w"], captured["s"]
