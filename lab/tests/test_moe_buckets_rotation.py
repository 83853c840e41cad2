"""The sweep's token buckets (FlashInfer's own for its CUTLASS MoE) and the weight-rotation plan that keeps
timings out of L2. Pure Python."""

from __future__ import annotations

import pytest
from sparkserve_lab.moe import buckets, rotation

from sparkserve.errors import SparkserveError

# flashinfer/fused_moe/utils.py get_hybrid_num_tokens_buckets(8192) in FlashInfer 0.7.2.post1
FLASHINFER_8192 = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584,
                   4096, 8192)


def test_buckets_are_flashinfers() -> None:
    assert buckets.hybrid(8192) == FLASHINFER_8192
    assert buckets.hybrid(1000) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1000)
    assert buckets.parse("all") == FLASHINFER_8192
    assert buckets.parse("quick") == buckets.QUICK
    assert buckets.parse("64, 1,8") == (1, 8, 64)
    for bad in ("x", "0,1", ""):
        with pytest.raises(SparkserveError, match="--buckets"):
            buckets.parse(bad)


GB = 2**30
MB = 2**20
EXPERT = 13 * MB  # one gpt-oss-120b expert in MXFP4 (fc1 + fc2 + scales), roughly


def test_rotation_reads_several_times_the_l2() -> None:
    decode = rotation.plan(128 * EXPERT, EXPERT, tokens=1, top_k=4, experts=128, l2_bytes=50 * MB,
                           budget_bytes=40 * GB)
    assert decode.touched_per_call == 4 * EXPERT
    assert decode.copies == 4 and decode.l2_multiple() >= rotation.DEFAULT_FACTOR
    prefill = rotation.plan(128 * EXPERT, EXPERT, tokens=8192, top_k=4, experts=128, l2_bytes=50 * MB,
                            budget_bytes=40 * GB)
    assert prefill.copies == rotation.MIN_COPIES  # every expert read once already dwarfs the L2
    assert "4 copies" in decode.note() and "50 MiB L2" in decode.note()


def test_rotation_stays_within_the_memory_budget() -> None:
    tight = rotation.plan(128 * EXPERT, EXPERT, tokens=1, top_k=4, experts=128, l2_bytes=50 * MB,
                          budget_bytes=2 * 128 * EXPERT)
    assert tight.copies == 2
    none = rotation.plan(128 * EXPERT, EXPERT, tokens=1, top_k=4, experts=128, l2_bytes=50 * MB,
                         budget_bytes=0)
    assert none.copies == 1


def test_slow_tactics_get_fewer_replays_per_batch() -> None:
    from sparkserve_lab.moe.timing import BATCH_MS, MIN_REPLAYS, replays_for

    assert replays_for(0.3, 20) == 20  # a decode tactic: the full batch
    assert replays_for(BATCH_MS / 5, 20) == 5
    assert replays_for(170.0, 20) == MIN_REPLAYS  # ~0.2 s a replay: never fewer than MIN_REPLAYS
    assert replays_for(0.0, 20) == 20
