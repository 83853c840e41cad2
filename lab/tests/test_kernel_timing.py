"""The rotation that keeps weights out of L2 in the kernel microbenchmarks."""

from __future__ import annotations

from sparkserve_lab.kernels.timing import Timing, copies_needed

L2 = 50_000_000  # the H100's 50 MB


def test_small_weights_rotate_past_twice_the_l2() -> None:
    qkv_bf16 = 5120 * 2880 * 2  # 29.5 MB: fits the L2 on its own
    n = copies_needed(qkv_bf16, L2)
    assert n * qkv_bf16 >= 2 * L2 and (n - 1) * qkv_bf16 >= L2  # gone from L2 before its next use
    qkv_mxfp4 = 5120 * 2880 // 2 + 5120 * 2880 // 32
    assert copies_needed(qkv_mxfp4, L2) * qkv_mxfp4 >= 2 * L2


def test_weights_larger_than_the_l2_need_no_more_than_two_copies() -> None:
    lm_head_bf16 = 201088 * 2880 * 2
    assert copies_needed(lm_head_bf16, L2) == 1
    assert copies_needed(60_000_000, L2) == 2


def test_the_result_says_how_it_was_measured() -> None:
    t = Timing(8.7, 8.5, 9.0, copies=5, rotated_bytes=5 * 29_491_200, l2_bytes=L2, calls_per_graph=20,
               replays=30)
    assert t.to_dict()["l2_note"] == "5 weight copies rotated (147.5 MB, 2.9x the 50 MB L2)"
