"""Gate of patch vllm/0004 (FlashInfer CUTLASS MoE tactics from a table, logged per token count).

VLLM_FLASHINFER_MOE_TACTICS names a tactic table; a call with n tokens runs the [gemm1, gemm2] profile ids
of the first bucket at or above n (the last one beyond); a file that is not a table raises naming the
variable; without a table, what FlashInfer's autotuner picks for the two GEMMs is recorded; the tactics of
each token count are logged when new and when they change; the variable is no torch.compile cache factor.
FlashInfer's autotuner is faked (no GPU here).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import vllm.envs as envs
from vllm.model_executor.layers.fused_moe.experts import flashinfer_cutlass_moe
from vllm.model_executor.layers.fused_moe.experts import flashinfer_moe_tactics as t

ENV = "VLLM_FLASHINFER_MOE_TACTICS"
LOG = "FlashInfer CUTLASS MoE tactics for"


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    t._table.cache_clear()
    t._logged.clear()


def write(path: Path, buckets: list[dict[str, int]]) -> Path:
    path.write_text(json.dumps({"build": {"tactic_counts": [6, 12]}, "buckets": buckets}))
    return path


def test_table_buckets_round_up_and_clamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert t.table_profile_ids(1) is None
    table = write(tmp_path / "t.json", [{"tokens": 1, "gemm1": 4, "gemm2": 13},
                                        {"tokens": 64, "gemm1": 5, "gemm2": 14}])
    monkeypatch.setenv(ENV, str(table))
    assert str(table) == envs.VLLM_FLASHINFER_MOE_TACTICS
    assert t.table_profile_ids(1) == ([4, 13], 1, "6+12")
    assert t.table_profile_ids(2) == ([5, 14], 64, "6+12")
    assert t.table_profile_ids(9000) == ([5, 14], 64, "6+12")


@pytest.mark.parametrize("content", ["{", '{"buckets": []}', '{"buckets": [{"tokens": 1}]}',
                                     '{"buckets": [{"tokens": 8, "gemm1": 0, "gemm2": 6}, '
                                     '{"tokens": 1, "gemm1": 0, "gemm2": 6}]}'])
def test_a_bad_table_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        content: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    monkeypatch.setenv(ENV, str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match=ENV):
        t.table_profile_ids(1)


class FakeTuner:
    def __init__(self, picks: dict[str, int]) -> None:
        self.picks = picks

    def choose_one(self, op: str, runners: list[Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
        return runners[0], self.picks.get(op, 0)


def test_autotuner_choice_is_recorded_and_logged_when_it_changes(monkeypatch: pytest.MonkeyPatch,
                                                                  vllm_log: Any) -> None:
    from flashinfer import autotuner

    tuner = FakeTuner({"trtllm::fused_moe::gemm1": -1, "trtllm::fused_moe::gemm2": -1})
    monkeypatch.setattr(autotuner.AutoTuner, "get", classmethod(lambda cls: tuner))
    counts = SimpleNamespace(get_gemm1_tactic_count=lambda: 6, get_gemm2_tactic_count=lambda: 12)
    runner = SimpleNamespace(fused_moe_runner=counts)

    def call(tokens: int) -> None:
        with t.autotuner_choice() as picked:
            for op in ("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2", "fp4_gemm"):
                autotuner.AutoTuner.get().choose_one(op, [runner], None, [])
        assert set(picked) == {"trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2"}
        t.log_autotuner_choice("mxfp8 x mxfp4, sm121", tokens, picked)

    call(8192)  # before tuning: FlashInfer's defaults, logged as the ids they stand for
    call(8192)
    tuner.picks = {"trtllm::fused_moe::gemm1": 1, "trtllm::fused_moe::gemm2": 16}
    call(8192)  # tuned: changed, logged again
    lines = vllm_log.messages(LOG)
    assert lines == [
        f"{LOG} 8192 tokens: gemm1=0 gemm2=6 of 6+12 (mxfp8 x mxfp4, sm121; autotuner).",
        f"{LOG} 8192 tokens: gemm1=1 gemm2=16 of 6+12 (mxfp8 x mxfp4, sm121; autotuner).",
    ]
    with t.autotuner_choice() as picked:  # the wrapper is installed once, records per block
        pass
    assert picked == {}


def _apply(monkeypatch: pytest.MonkeyPatch, tokens: int, during: Any = None) -> dict[str, Any]:
    """FlashInferExperts.apply on bf16 (unquantized) experts with FlashInfer's fused MoE faked: the
    keyword arguments it was called with. `during` runs inside the fake call (FlashInfer's autotuner)."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    calls: list[dict[str, Any]] = []

    def fused_moe(**kwargs: Any) -> None:
        if during is not None:
            during()
        calls.append(kwargs)

    monkeypatch.setattr(flashinfer_cutlass_moe, "flashinfer_cutlass_fused_moe", fused_moe)
    monkeypatch.setattr(flashinfer_cutlass_moe.current_platform, "get_device_capability",
                        lambda device_id=0: SimpleNamespace(major=12, minor=1))
    experts = SimpleNamespace(quant_dtype=None, weight_quant_dtype=None, use_deepseek_fp8_block_scale=False,
                              gemm1_clamp_limit=None, out_dtype=torch.bfloat16, tp_size=1, tp_rank=0,
                              ep_size=1, ep_rank=0)
    hidden = torch.zeros(tokens, 8, dtype=torch.bfloat16)
    flashinfer_cutlass_moe.FlashInferExperts.apply(
        experts, torch.zeros_like(hidden), hidden, torch.zeros(2, 16, 8), torch.zeros(2, 8, 8),
        torch.ones(tokens, 1), torch.zeros(tokens, 1, dtype=torch.int64), MoEActivation.SILU, 2, None,
        None, None, None, None, None, False)
    assert len(calls) == 1
    return calls[0]


def test_flashinfer_experts_run_the_table_tactics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  vllm_log: Any) -> None:
    table = write(tmp_path / "t.json", [{"tokens": 1, "gemm1": 4, "gemm2": 13},
                                        {"tokens": 64, "gemm1": 5, "gemm2": 14}])
    monkeypatch.setenv(ENV, str(table))
    assert _apply(monkeypatch, 3)["profile_ids"] == [5, 14]
    assert _apply(monkeypatch, 1)["profile_ids"] == [4, 13]
    assert vllm_log.messages(LOG) == [
        f"{LOG} 3 tokens: gemm1=5 gemm2=14 of 6+12 (bf16 x bf16, sm121; table {table}, bucket 64).",
        f"{LOG} 1 tokens: gemm1=4 gemm2=13 of 6+12 (bf16 x bf16, sm121; table {table}, bucket 1).",
    ]


def test_flashinfer_experts_without_a_table_log_the_autotuner_choice(monkeypatch: pytest.MonkeyPatch,
                                                                     vllm_log: Any) -> None:
    from flashinfer import autotuner

    tuner = FakeTuner({"trtllm::fused_moe::gemm1": 2, "trtllm::fused_moe::gemm2": 9})
    monkeypatch.setattr(autotuner.AutoTuner, "get", classmethod(lambda cls: tuner))
    counts = SimpleNamespace(get_gemm1_tactic_count=lambda: 6, get_gemm2_tactic_count=lambda: 12)
    runner = SimpleNamespace(fused_moe_runner=counts)

    def tune() -> None:
        for op in ("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2"):
            autotuner.AutoTuner.get().choose_one(op, [runner], None, [])

    assert _apply(monkeypatch, 5, tune)["profile_ids"] is None
    assert vllm_log.messages(LOG) == [
        f"{LOG} 5 tokens: gemm1=2 gemm2=9 of 6+12 (bf16 x bf16, sm121; autotuner)."]


def test_the_variable_is_declared_for_type_checkers(envs_type_checked: set[str]) -> None:
    """vLLM declares every variable of envs.environment_variables under TYPE_CHECKING, for mypy."""
    assert ENV in envs.environment_variables
    assert ENV in envs_type_checked


def test_the_table_is_no_compile_cache_factor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "t.json"))
    assert ENV not in envs.compile_factors()
