"""Gates of patch vllm/0002 (quantize lm_head online to MXFP4, Marlin W4A16).

quantization_config {"linear": "mxfp4", "lm_head": "mxfp4"} selects the online MXFP4 lm_head method for
gpt-oss's ParallelLMHead; the lm_head stays BF16, with one log line giving the reason, with LoRA, with
tied word embeddings (by config, by the checkpoint, by tie_weights, or by sharing storage with
embed_tokens), with a bias, or with a head dtype other than the model dtype; a checkpoint-quantized
lm_head keeps its checkpoint method. Unit level: the patched functions with small fakes, CPU only.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import vllm.config
import vllm.model_executor.parameter as vllm_parameter
from torch import nn
from vllm.config.quantization import QuantizationConfigArgs, QuantSpec, resolve_quantization_config
from vllm.model_executor.layers.quantization import base_config
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4Config
from vllm.model_executor.layers.quantization.online import base as online_base
from vllm.model_executor.layers.quantization.online import fp8 as online_fp8
from vllm.model_executor.layers.quantization.online import mxfp4 as online_mxfp4
from vllm.model_executor.layers.quantization.online.base import (
    OnlineQuantizationConfig,
    OnlineQuantizationSource,
)
from vllm.model_executor.layers.quantization.online.mxfp4 import Mxfp4OnlineLMHeadMethod
from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Static
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    UnquantizedEmbeddingMethod,
    VocabParallelEmbedding,
)

KEPT = "lm_head is not quantized online to MXFP4"
VOCAB, HIDDEN = 256, 64  # HIDDEN divisible by the MXFP4 group (32)
GPT_OSS_FLAGS = {"linear": "mxfp4", "lm_head": "mxfp4"}  # what MXFP4_LAYERS=moe,qkv,o,lm_head emits
MXFP4_W = QuantSpec(weight=kMxfp4Static)  # weight-only MXFP4, the linear spec of the mxfp4 shorthand


@pytest.fixture(autouse=True)
def single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM parameters ask the tensor-parallel group for rank and size; there is none here."""
    monkeypatch.setattr(vllm_parameter, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(vllm_parameter, "get_tensor_model_parallel_world_size", lambda: 1)


# ------------------------------------------------------------------------------------------ resolution

@pytest.mark.parametrize("quantization", [None, "gpt_oss_mxfp4", "mxfp4"])
def test_quantization_config_resolves_lm_head(quantization: str | None) -> None:
    """The dict form (gpt-oss: checkpoint method gpt_oss_mxfp4; or the mxfp4 shorthand merged with it)
    keeps the lm_head spec, which is the linear one of the mxfp4 shorthand: weight-only MXFP4 (static)."""
    args = resolve_quantization_config(quantization, dict(GPT_OSS_FLAGS))
    assert args is not None
    assert args.lm_head == MXFP4_W == args.linear
    assert args.lm_head.activation is None  # W4A16: activations stay in the model dtype


def test_only_lm_head_selects_the_lm_head() -> None:
    online = OnlineQuantizationConfig(QuantizationConfigArgs(**GPT_OSS_FLAGS))
    online.packed_modules_mapping = {}
    source, key, pattern, spec, cls = online.resolve_quant_method_cls(ParallelLMHead, "lm_head")
    assert (source, key, pattern, spec, cls) == (OnlineQuantizationSource.lm_head, str(MXFP4_W), None,
                                                 MXFP4_W, Mxfp4OnlineLMHeadMethod)
    # `linear` alone, `targets` patterns and `ignore` do not quantize the lm_head
    for args in (QuantizationConfigArgs(linear="mxfp4"), QuantizationConfigArgs(targets={"re:.*": "mxfp4"}),
                 QuantizationConfigArgs(linear="mxfp4", lm_head="mxfp4", ignore=["lm_head"])):
        cfg = OnlineQuantizationConfig(args)
        cfg.packed_modules_mapping = {}
        assert cfg.resolve_quant_method_cls(ParallelLMHead, "lm_head") is None
    # an lm_head-only config is valid; a format other than MXFP4 is refused for the lm_head
    OnlineQuantizationConfig(QuantizationConfigArgs(lm_head="mxfp4"))
    cfg = OnlineQuantizationConfig(QuantizationConfigArgs(lm_head="mxfp8"))
    cfg.packed_modules_mapping = {}
    with pytest.raises(ValueError, match="online quantization for ParallelLMHead"):
        cfg.resolve_quant_method_cls(ParallelLMHead, "lm_head")


def test_gpt_oss_hands_its_quant_config_to_the_lm_head() -> None:
    from vllm.model_executor.models.gpt_oss import GptOssForCausalLM

    src = inspect.getsource(GptOssForCausalLM.__init__)
    head = src[src.index("self.lm_head = ParallelLMHead("):]
    assert "quant_config=vllm_config.quant_config" in head[:head.index(")\n")]


# ------------------------------------------------------------------------------------- the gates

def _vllm_config(lora: bool = False, tie: str = "", head_dtype: torch.dtype = torch.bfloat16) -> Any:
    hf = SimpleNamespace(tie_word_embeddings=tie == "hf_config")
    text = SimpleNamespace(tie_word_embeddings=tie == "hf_text_config")
    return SimpleNamespace(
        lora_config=object() if lora else None,
        model_config=SimpleNamespace(hf_config=hf, hf_text_config=text, dtype=torch.bfloat16,
                                     head_dtype=head_dtype,
                                     word_embeddings_untied_by_checkpoint=tie == "checkpoint"),
    )


@pytest.fixture
def vllm_cfg(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The current vLLM config the patched code reads, and a stand-in MXFP4 linear kernel (the Marlin
    selection needs a GPU; it is not what these gates decide)."""
    box = {"cfg": _vllm_config()}

    def current() -> Any:
        return box["cfg"]

    monkeypatch.setattr(vllm.config, "get_current_vllm_config", current)
    monkeypatch.setattr(online_fp8, "get_current_vllm_config", current)
    monkeypatch.setattr(online_mxfp4, "init_mxfp4_linear_kernel",
                        lambda activation_quant_key=None: SimpleNamespace(kind="stand-in MXFP4 kernel"))
    return box


def _gpt_oss_quant_config() -> GptOssMxfp4Config:
    """gpt-oss's checkpoint config (MXFP4 experts) with the profile's online config on top."""
    cfg = GptOssMxfp4Config()
    cfg.online_quantization_config = OnlineQuantizationConfig(QuantizationConfigArgs(**GPT_OSS_FLAGS))
    return cfg


def _lm_head(quant_config: Any, bias: bool = False) -> ParallelLMHead:
    return ParallelLMHead(VOCAB, HIDDEN, bias=bias, params_dtype=torch.bfloat16, quant_config=quant_config,
                          prefix="lm_head", disable_tp=True)


def test_quantized_when_nothing_forbids_it(vllm_cfg: Any, vllm_log: Any) -> None:
    cfg = _gpt_oss_quant_config()
    head = _lm_head(cfg)
    assert isinstance(head.quant_method, Mxfp4OnlineLMHeadMethod)
    assert head.weight.is_meta  # loaded bf16 shard by shard, quantized after loading
    assert cfg.online_quantization_config.quantized_layers["lm_head"] == ("lm_head", str(MXFP4_W), None)
    assert vllm_log.messages(KEPT) == []
    # without "lm_head" in the config the head is untouched
    cfg2 = GptOssMxfp4Config()
    cfg2.online_quantization_config = OnlineQuantizationConfig(QuantizationConfigArgs(linear="mxfp4"))
    assert isinstance(_lm_head(cfg2).quant_method, UnquantizedEmbeddingMethod)


@pytest.mark.parametrize(("config", "bias", "reason"), [
    (_vllm_config(lora=True), False, "LoRA is enabled"),
    (_vllm_config(tie="hf_config"), False, "the word embeddings are tied (tie_word_embeddings)"),
    (_vllm_config(tie="hf_text_config"), False, "the word embeddings are tied (tie_word_embeddings)"),
    (_vllm_config(tie="checkpoint"), False, "the word embeddings are tied (tie_word_embeddings)"),
    (_vllm_config(head_dtype=torch.float32), False, "head_dtype differs from the model dtype"),
    (_vllm_config(), True, "the lm_head has a bias"),
])
def test_stays_bf16_with_the_reason(vllm_cfg: Any, vllm_log: Any, config: Any, bias: bool,
                                    reason: str) -> None:
    vllm_cfg["cfg"] = config
    cfg = _gpt_oss_quant_config()
    head = _lm_head(cfg, bias=bias)
    assert isinstance(head.quant_method, UnquantizedEmbeddingMethod)
    assert head.weight.dtype == torch.bfloat16 and not head.weight.is_meta
    assert "lm_head" not in cfg.online_quantization_config.quantized_layers
    assert online_base.lm_head_online_quant_skip_reason(head, config) == reason
    assert vllm_log.messages(KEPT) == [f"{KEPT}: {reason}."]


def test_checkpoint_quantized_lm_head_keeps_its_method(vllm_cfg: Any, vllm_log: Any) -> None:
    class CheckpointLMHeadMethod(QuantizeMethodBase):
        def create_weights(self, layer: nn.Module, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("not reached")

        def apply(self, layer: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
            raise AssertionError("not reached")

    checkpoint_method = CheckpointLMHeadMethod()

    class Checkpoint(GptOssMxfp4Config):
        def get_quant_method(self, layer: nn.Module, prefix: str) -> QuantizeMethodBase | None:
            if isinstance(layer, ParallelLMHead):
                return checkpoint_method
            return super().get_quant_method(layer, prefix)

    cfg = Checkpoint()
    cfg.online_quantization_config = OnlineQuantizationConfig(QuantizationConfigArgs(**GPT_OSS_FLAGS))
    head = _lm_head(None)  # an existing layer; resolve as its constructor would with cfg
    assert base_config.resolve_quant_method(cfg, head, "lm_head") is checkpoint_method
    assert "lm_head" not in cfg.online_quantization_config.quantized_layers


# ------------------------------------------------------------------------------ tied word embeddings

def _model(cfg: Any) -> nn.Module:
    model = nn.Module()
    model.embed_tokens = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16,
                                                prefix="model.embed_tokens", disable_tp=True)
    model.lm_head = _lm_head(cfg)
    assert isinstance(model.lm_head.quant_method, Mxfp4OnlineLMHeadMethod)
    return model


def test_tie_weights_keeps_bf16(vllm_cfg: Any, vllm_log: Any) -> None:
    cfg = _gpt_oss_quant_config()
    model = _model(cfg)
    head = model.lm_head.tie_weights(model.embed_tokens)
    assert isinstance(head.quant_method, UnquantizedEmbeddingMethod)
    assert head.weight is model.embed_tokens.weight
    assert "lm_head" not in cfg.online_quantization_config.quantized_layers
    assert vllm_log.messages(KEPT) == [f"{KEPT}: its weight is tied to the input embeddings."]


@pytest.mark.parametrize("alias", ["same parameter", "view of the storage"])
def test_storage_aliasing_keeps_bf16(vllm_cfg: Any, vllm_log: Any, alias: str) -> None:
    """A model that ties by assignment (no tie_weights call) is caught after construction."""
    cfg = _gpt_oss_quant_config()
    model = _model(cfg)
    embed = model.embed_tokens.weight
    model.lm_head.weight = embed if alias == "same parameter" else nn.Parameter(embed.data[:],
                                                                               requires_grad=False)
    online_base.keep_tied_lm_heads_unquantized(model)
    assert isinstance(model.lm_head.quant_method, UnquantizedEmbeddingMethod)
    assert "lm_head" not in cfg.online_quantization_config.quantized_layers
    assert vllm_log.messages(KEPT) == [f"{KEPT}: its weight shares storage with the input embeddings."]


def test_the_model_loader_checks_the_built_model(vllm_cfg: Any, vllm_log: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every loader's create_model runs the check after building the model, with online quantization on:
    a model that ties by assignment keeps a bf16 head when loaded as vLLM loads it."""
    from vllm.model_executor.model_loader import base_loader

    cfg = _gpt_oss_quant_config()
    model = _model(cfg)
    model.lm_head.weight = model.embed_tokens.weight
    monkeypatch.setattr(base_loader, "initialize_model", lambda **kw: model)
    loader = SimpleNamespace(load_config=None)
    built = base_loader.BaseModelLoader.create_model(loader, SimpleNamespace(quant_config=cfg), None)
    assert built is model and isinstance(model.lm_head.quant_method, UnquantizedEmbeddingMethod)
    assert vllm_log.messages(KEPT) == [f"{KEPT}: its weight shares storage with the input embeddings."]


def test_untied_head_stays_quantized(vllm_cfg: Any, vllm_log: Any) -> None:
    model = _model(_gpt_oss_quant_config())
    online_base.keep_tied_lm_heads_unquantized(model)
    assert isinstance(model.lm_head.quant_method, Mxfp4OnlineLMHeadMethod)
    assert vllm_log.messages(KEPT) == []
    a, b = torch.zeros(4), torch.zeros(4)
    assert online_base.tensors_share_storage(a, a[1:]) and not online_base.tensors_share_storage(a, b)
    assert not online_base.tensors_share_storage(torch.empty(4, device="meta"), torch.empty(4, device="meta"))


# ------------------------------------------------------------------- logits, sampling and logprobs

def test_logits_argmax_and_logprobs_run_through_the_mxfp4_head(
    vllm_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quantized head serves every LogitsProcessor path (full logits -> sampling/logprobs, and the
    greedy vocab-parallel argmax) through its kernel, with the vocab padding removed or masked.
    The kernel is a stand-in matmul (Marlin needs a GPU); the H100 runs prove the real kernel."""
    from vllm.model_executor.layers import logits_processor as lp_mod

    monkeypatch.setattr(lp_mod, "get_current_vllm_config", lambda: vllm_cfg["cfg"], raising=False)
    org_vocab = VOCAB - 6  # the checkpoint's vocab; the head pads it to a multiple of 64 (VOCAB)
    head = ParallelLMHead(org_vocab, HIDDEN, params_dtype=torch.bfloat16,
                          quant_config=_gpt_oss_quant_config(), prefix="lm_head", disable_tp=True)
    assert isinstance(head.quant_method, Mxfp4OnlineLMHeadMethod)
    assert head.shard_indices.num_org_vocab_padding == VOCAB - org_vocab
    w = torch.randn(VOCAB, HIDDEN)
    calls: list[tuple[int, ...]] = []

    def apply_weights(layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        assert layer is head and bias is None
        calls.append(tuple(x.shape))
        return (x.float() @ w.T).to(x.dtype)

    head.quant_method.kernel = SimpleNamespace(apply_weights=apply_weights)
    proc = lp_mod.LogitsProcessor(org_vocab)
    x = torch.randn(3, HIDDEN, dtype=torch.bfloat16)
    ref = (x.float() @ w.T).to(torch.bfloat16)

    logits = proc(head, x)
    assert logits is not None and logits.shape == (3, org_vocab)
    assert torch.equal(logits, ref[:, :org_vocab])
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # what the sampler's logprobs are made of
    assert torch.allclose(logprobs.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert calls == [(3, HIDDEN)]

    if hasattr(proc, "get_top_tokens"):  # greedy fast path: argmax without materialising the gather
        top = proc.get_top_tokens(head, x)
        assert torch.equal(top.view(-1), ref[:, :org_vocab].float().argmax(-1))
        assert len(calls) == 2
