"""The report's speculative-decoding section: which cost records it shows and what it computes from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.report import speculative
from sparkserve_lab.runstore import METADATA, Store, write_json
from sparkserve_lab.speculative.recheck import RECHECK


def cost_record(store: Store, hw: str, k: int, *, valid: bool = True, recheck: bool | None = None,
                env: dict[str, str] | None = None) -> Any:
    """A cost record: 250 tok/s without speculation (4 ms a step), 6 ms a step with k draft tokens at zero
    and at full acceptance."""
    run = store.new_record(hw, "speculative-cost-hopper-h100-eagle3")
    write_json(run.file(METADATA), {
        "kind": "speculative-cost", "hardware": hw, "profile": "hopper-h100", "valid": valid,
        "overrides": {"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "/tmp/draft", "MXFP4_LAYERS": "moe"},
        "profile_env": env or {"MXFP4_LAYERS": "moe,qkv,o,lm_head", "MOE_BACKEND": "marlin"},
        "points": [{"k": 0, "mode": "off", "tok_s": 250.0, "acceptance_length": 1.0},
                   {"k": k, "mode": "zero", "tok_s": 1 / 0.006, "acceptance_length": 1.0},
                   {"k": k, "mode": "full", "tok_s": (k + 1) / 0.006, "acceptance_length": k + 1.0}]})
    if recheck is not None:
        write_json(run.file(RECHECK), {"ok": recheck})
    return run


def render(store: Store, tmp_path: Path) -> str:
    return "\n".join(speculative.section(store, tmp_path / "docs" / "B.md", tmp_path / "img", "img",
                                         make_plots=False))


def test_a_valid_record_shows_its_break_even_and_what_it_served(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    run = cost_record(store, "nvidia-h200", 3)
    text = render(store, tmp_path)
    # break-even: 6 ms a step against 4 ms a token without speculation -> 1.5 tokens a step
    assert (f"[`{run.run_id}`](../results/nvidia-h200/{run.run_id}) | hopper-h100 MXFP4_LAYERS=moe "
            "SPECULATIVE=eagle3 (served: MXFP4_LAYERS=moe, MOE_BACKEND=marlin) | 3 | 250.0 | 6.00 | 6.00 | "
            "1.50 | 167, 333, 500, 667 |") in text
    assert "/tmp/draft" not in text
    # the published k=3 acceptance length of 2.41 at 6 ms a step: 401.7 tok/s, 1.61x of 250
    assert "2.41 at k=3" in text and "401.7 tok/s, x1.61" in text


def test_a_k_without_a_published_length_has_no_estimate(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    cost_record(store, "nvidia-h200", 2)
    text = render(store, tmp_path)
    assert "| 2 | 250.0 | 6.00 | 6.00 | 1.50 | 167, 333, 500 |" in text
    assert "Estimate" not in text


@pytest.mark.parametrize(("valid", "recheck", "shown"), [
    (False, None, False),   # invalid by level 1.5 when it ran, never judged again
    (False, True, True),    # judged valid again after the rules changed
    (True, False, False),   # the recheck's verdict is the newest
    (True, None, True),
])
def test_which_records_count_is_the_newest_level_1_5_judgement(tmp_path: Path, valid: bool,
                                                                recheck: bool | None, shown: bool) -> None:
    store = Store(tmp_path / "results")
    run = cost_record(store, "nvidia-h200", 3, valid=valid, recheck=recheck)
    text = render(store, tmp_path)
    assert (run.run_id in text) is shown
    if shown:
        assert ("(valid on recheck)" in text) is (recheck is not None)
    else:
        assert "None in the store." in text


def test_a_record_without_a_run_without_speculation_is_left_out(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    run = cost_record(store, "nvidia-h200", 3)
    meta = run.metadata()
    meta["points"] = [p for p in meta["points"] if p["k"] != 0]
    write_json(run.file(METADATA), meta)
    assert "None in the store." in render(store, tmp_path)

