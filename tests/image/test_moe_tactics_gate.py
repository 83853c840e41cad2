"""Gate of patch vllm/0004 (FlashInfer CUTLASS MoE tactics from a table, logged per token count).

VLLM_FLASHINFER_MOE_TACTICS names a tactic table; a call with n tokens runs the [gemm1, gemm2] profile ids
of the first bucket at or above n (the last one beyond); a file that is not a table raises naming the
variable; without a table, what FlashInfer's autotuner picks for the two GEMMs is recorded; the tactics of
each token count are logged when new and when they change; the variable is no torch.compile cache factor.
FlashInfer's autotuner is faked (no GPU here).
"""

from __future__ import annotations

import inspect
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


def test_flashinfer_experts_pass_the_profile_ids() -> None:
    src = inspect.getsource(flashinfer_cutlass_moe.FlashInferExperts.apply)
    assert "profile_ids=profile_ids" in src and "table_profile_ids(num_tokens)" in src


def test_the_table_is_no_compile_cache_factor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "t.json"))
    assert ENV not in envs.compile_factors()
