"""The tactic model: what FlashInfer 0.7.2.post1's CUTLASS fused-MoE tactic indices mean (replayed from
MoeGemmRunner::getTmaWarpSpecializedConfigs and cutlass_heuristic.cpp), told apart by their counts."""

from __future__ import annotations

import pytest

from sparkserve.serving.moe import tactics as t


def test_sm120_stock_list_is_three_tiles_with_swap_copies() -> None:
    stock = t.known_lists(t.SM120_MXFP8_MXFP4)[0]
    assert stock.counts == (6, 12)
    assert [x.label() for x in stock.gemm1] == [
        "128x128x128 no_swap", "128x32x128 no_swap", "128x64x128 no_swap",
        "128x128x128 swap_ab", "128x32x128 swap_ab", "128x64x128 swap_ab"]
    # GEMM2 fuses the top-k reduction: FINALIZE copies, then SwapAB copies of everything
    assert [x.index for x in stock.gemm2] == list(range(6, 18))
    assert [(x.finalize, x.swap_ab) for x in stock.gemm2[::3]] == [
        (False, False), (True, False), (False, True), (True, True)]
    # FlashInfer's default (-1) is the first candidate of each GEMM: 128x128x128 without SwapAB
    assert stock.get(-1, 1).label() == "128x128x128 no_swap"
    assert stock.get(-1, 2).index == 6 and not stock.get(-1, 2).swap_ab


def test_narrow_tiles_exist_only_as_swap_ab() -> None:
    patched = t.known_lists(t.SM120_MXFP8_MXFP4)[1]
    assert patched.counts == (8, 16)
    narrow = [x for x in patched.all() if x.tile[1] < 32]
    assert narrow and all(x.swap_ab for x in narrow)
    assert {x.tile for x in narrow} == {(128, 8, 128), (128, 16, 128)}
    assert len([x for x in patched.gemm2 if x.tile[1] < 32]) == 4  # plain and FINALIZE, SwapAB only


def test_sm90_mixed_input_list_is_swap_ab_only_without_finalize() -> None:
    (lst,) = t.known_lists(t.SM90_BF16_MXFP4)
    assert lst.counts == (116, 116)  # 29 tiles x 4 clusters, SwapAB only, no FINALIZE fusion
    assert all(x.swap_ab and not x.finalize for x in lst.all())
    assert lst.gemm2[0].index == 116
    by_tile = {x.tile: x.schedule for x in lst.gemm1}
    assert by_tile[(64, 16, 128)] == "pingpong"
    assert by_tile[(128, 16, 512)] == "cooperative"
    assert by_tile[(128, 128, 512)] == "pingpong"  # sm90_supports_coop: 128x128 only with K 128/256
    assert by_tile[(256, 256, 128)] == "cooperative"
    assert [x.cluster for x in lst.gemm1[:4]] == [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1)]


def test_resolve_by_counts() -> None:
    assert t.resolve(t.SM120_MXFP8_MXFP4, 6, 12) == t.known_lists(t.SM120_MXFP8_MXFP4)[0]
    patched = t.resolve(t.SM120_MXFP8_MXFP4, 8, 16)
    assert patched is not None and "N=8/16" in patched.variant
    assert t.resolve(t.SM120_MXFP8_MXFP4, 7, 14) is None
    with pytest.raises(KeyError):
        t.known_lists("sm100-nvfp4")


def test_index_out_of_a_gemm_is_refused() -> None:
    stock = t.known_lists(t.SM120_MXFP8_MXFP4)[0]
    with pytest.raises(KeyError, match="no GEMM1 tactic"):
        stock.get(7, 1)


@pytest.mark.parametrize(("cc", "act", "path"), [
    ((12, 1), "mxfp8", t.SM120_MXFP8_MXFP4), ((12, 0), "mxfp8", t.SM120_MXFP8_MXFP4),
    ((9, 0), "bf16", t.SM90_BF16_MXFP4), ((9, 0), "mxfp8", None), ((10, 0), "mxfp8", None),
    ((12, 1), "bf16", None), ((8, 9), "bf16", None),
])
def test_path_for(cc: tuple[int, int], act: str, path: str | None) -> None:
    assert t.path_for(*cc, act) == path


def test_supported_text_names_every_path() -> None:
    text = t.supported_text()
    assert all(p in text for p in t.PATHS) and "GB10" in text and "H100" in text
