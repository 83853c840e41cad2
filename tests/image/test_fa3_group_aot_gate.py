"""Gate of patch vllm/0005 (FlashAttention 3: the ahead-of-time schedule per KV cache group).

FA3 can take its split schedule (`scheduler_metadata`) from one kernel the metadata builder launches per
step instead of from a scheduler kernel inside every attention call; vLLM keeps that only when all the
model's FlashAttention layers share one sliding window. gpt-oss alternates sliding-window and full layers,
which the hybrid KV cache manager puts in separate groups, each with its own builder: with
VLLM_FLASH_ATTN_GROUP_AOT=1 a builder asks only its own layers, keeps the schedule when they agree (with
their window) and logs the decision; unset, every builder scans the whole model as upstream does. The
builder is vLLM's own, built on a CPU device as vLLM's tests/v1/attention/test_group_head_counts.py builds
it; only FA3's scheduler call is a stand-in (it needs a GPU; a CPU build of vLLM does not even import it),
recording the window it is asked for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock, patch

import pytest
import torch
from vllm.v1.attention.backends import flash_attn
from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl, FlashAttentionMetadataBuilder

ENV = "VLLM_FLASH_ATTN_GROUP_AOT"
WINDOW = 128  # gpt-oss's sliding window; FlashAttentionImpl stores (WINDOW - 1, 0)
SLIDING = (WINDOW - 1, 0)
FULL = (-1, -1)


def _model(windows: list[tuple[int, int]]) -> dict[str, Any]:
    """Stand-in attention layers of a whole model, one per window, named as vLLM names them."""
    layers = {}
    for i, window in enumerate(windows):
        impl = MagicMock(spec=FlashAttentionImpl, num_heads=64, sliding_window=window)
        impl.get_impl_variants.return_value = [impl]
        layers[f"model.layers.{i}.attn"] = SimpleNamespace(impl=impl, num_heads=64)
    return layers


def _lookup(model: dict[str, Any]) -> Any:
    """get_layers_from_vllm_config over the stand-in model: the named layers, or all of them."""

    def get_layers(vllm_config: Any, layer_type: Any, layer_names: Any = None) -> dict[str, Any]:
        names = list(model) if layer_names is None else list(layer_names)
        return {name: model[name] for name in names}

    return get_layers


def _vllm_config() -> MagicMock:
    cfg = MagicMock()
    cfg.model_config.get_num_attention_heads.return_value = 64
    cfg.model_config.rswa_window = None
    cfg.model_config.is_mm_prefix_lm = False
    cfg.cache_config.cache_dtype = "auto"
    cfg.parallel_config.cp_kv_cache_interleave_size = 1
    cfg.compilation_config.cudagraph_mode.has_full_cudagraphs.return_value = False
    cfg.compilation_config.max_cudagraph_capture_size = None
    return cfg


def _build(model: dict[str, Any], group: list[str]) -> tuple[FlashAttentionMetadataBuilder, MagicMock, Any]:
    """A builder for the layers of `group`, after one decode step's build(); FA3's scheduler a stand-in."""
    spec = SimpleNamespace(block_size=16, num_kv_heads=8, head_size=64, dtype=torch.bfloat16,
                           dcp_sharded=False)
    cfg = _vllm_config()
    scheduler = MagicMock(return_value=torch.zeros(8, dtype=torch.int32))
    lookup = _lookup(model)
    with patch("vllm.v1.attention.backends.utils.get_layers_from_vllm_config", side_effect=lookup), \
            patch.object(flash_attn, "get_layers_from_vllm_config", side_effect=lookup), \
            patch.object(flash_attn, "get_flash_attn_version", return_value=3), \
            patch.object(flash_attn, "get_scheduler_metadata", scheduler, create=True), \
            patch("vllm.distributed.parallel_state.get_dcp_group", side_effect=AssertionError):
        builder = FlashAttentionMetadataBuilder(kv_cache_spec=spec, layer_names=group, vllm_config=cfg,
                                                device=torch.device("cpu"))
        assert builder.aot_schedule  # FA3: the builder starts out scheduling ahead of time
        step = SimpleNamespace(
            num_reqs=1, num_actual_tokens=1, max_query_len=1, max_seq_len=70,
            query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
            query_start_loc_cpu=torch.tensor([0, 1], dtype=torch.int32),
            seq_lens=torch.tensor([70], dtype=torch.int32), seq_lens_cpu_upper_bound=None,
            block_table_tensor=torch.zeros(1, 8, dtype=torch.int32),
            slot_mapping=torch.zeros(1, dtype=torch.int64), causal=True,
            mm_req_doc_ranges=None, rswa_prefix_lens=None)
        metadata = builder.build(common_prefix_len=0, common_attn_metadata=step)
    return builder, scheduler, metadata


@pytest.fixture
def gpt_oss() -> tuple[dict[str, Any], list[str], list[str]]:
    """gpt-oss's pattern: sliding-window and full layers alternating, one KV cache group each."""
    model = _model([SLIDING if i % 2 == 0 else FULL for i in range(6)])
    names = list(model)
    return model, names[0::2], names[1::2]


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


@pytest.mark.parametrize("which", ["sliding", "full"])
def test_each_group_keeps_the_schedule_with_its_own_window(
        gpt_oss: Any, which: str, monkeypatch: pytest.MonkeyPatch, vllm_log: Any) -> None:
    model, sliding, full = gpt_oss
    monkeypatch.setenv(ENV, "1")
    group, window = (sliding, SLIDING) if which == "sliding" else (full, FULL)
    builder, scheduler, metadata = _build(model, group)
    assert builder.aot_schedule
    assert builder.aot_sliding_window == window
    scheduler.assert_called_once()
    assert scheduler.call_args.kwargs["window_size"] == window
    assert metadata.scheduler_metadata is not None
    logged = f"FlashAttention AOT schedule on for a KV cache group of 3 layer(s), window {window}"
    assert vllm_log.messages("FlashAttention AOT schedule") == [logged]


def test_unset_keeps_upstreams_model_wide_scan(gpt_oss: Any, vllm_log: Any) -> None:
    """Without the variable a mixed model loses the schedule in every group, as vLLM 0.33 does (A/B arm A)."""
    model, sliding, _ = gpt_oss
    builder, scheduler, metadata = _build(model, sliding)
    assert not builder.aot_schedule
    scheduler.assert_not_called()
    assert metadata.scheduler_metadata is None
    assert vllm_log.messages("FlashAttention AOT schedule") == []


def test_a_group_that_mixes_windows_still_drops_it(monkeypatch: pytest.MonkeyPatch,
                                                   vllm_log: Any) -> None:
    """One group holding both kinds (the hybrid KV cache manager disabled): no single window, no schedule."""
    model = _model([SLIDING, FULL, SLIDING, FULL])
    monkeypatch.setenv(ENV, "1")
    builder, scheduler, _ = _build(model, list(model))
    assert not builder.aot_schedule
    scheduler.assert_not_called()
    assert vllm_log.messages("FlashAttention AOT schedule") == [
        f"FlashAttention AOT schedule off for a KV cache group of 4 layer(s), window {FULL}"]


def test_the_scan_reads_only_the_named_layers(gpt_oss: Any) -> None:
    model, sliding, full = gpt_oss
    with patch.object(flash_attn, "get_layers_from_vllm_config", side_effect=_lookup(model)):
        assert flash_attn._get_sliding_window_configs(MagicMock(), sliding) == {SLIDING}
        assert flash_attn._get_sliding_window_configs(MagicMock(), full) == {FULL}
        assert flash_attn._get_sliding_window_configs(MagicMock()) == {SLIDING, FULL}


def test_the_variable_is_declared_and_no_compile_cache_factor(envs_type_checked: set[str]) -> None:
    """Declared as vLLM declares its variables; the builder reads it and no compiled graph depends on it,
    so both A/B arms share one compile cache."""
    import vllm.envs as envs

    assert ENV in envs.environment_variables
    assert ENV in envs_type_checked
    assert ENV not in envs.compile_factors()
