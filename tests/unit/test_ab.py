"""`sparkserve ab`: the arms, their refusals, the schedule and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.harness import ab
from sparkserve.harness.levels import matrix

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "configs" / "engine-kernels.toml"
SETTINGS = matrix.load(ROOT / "configs" / "matrix-hopper-h100-random.yaml")


def test_arms_are_the_profile_and_its_override() -> None:
    a, b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, SETTINGS, ROOT, RULES)
    assert a.entry.name == "hopper-h100" and b.entry.name == "hopper-h100+MXFP4_LAYERS=moe,lm_head"
    assert a.entry.resolved.profile.mxfp4_layers == {"moe", "qkv", "o", "lm_head"}
    assert b.entry.resolved.profile.mxfp4_layers == {"moe", "lm_head"}
    # the harness settings (dummy weights, local checkpoint) are the same in both arms
    for arm in (a, b):
        assert arm.entry.resolved.env["LOAD_FORMAT"] == "dummy"
        assert arm.entry.resolved.env["MODEL"] == "/tmp/gpt-oss-120b"


@pytest.mark.parametrize("overrides,message", [
    ({"MXFP4_LAYERS": "moe,qkv,o,lm_head"}, "the arms are identical"),  # the shipped value again
    ({"MXFP4_LAYERS": "lm_head,o,qkv,moe"}, "the arms are identical"),  # the same set, other order
    ({"KV_CACHE_DTYPE": "auto"}, "the arms are identical"),           # already the profile's value
    ({}, "at least one --set"),
    ({"MXFP4_LAYER": "moe"}, "did you mean MXFP4_LAYERS"),
    ({"MOE_BACKEND": "cutlass-mxfp8"}, "does not run on SPARKSERVE_TARGET=hopper"),
])
def test_refused_before_any_server(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(SparkserveError, match=message):
        ab.plan("hopper-h100", overrides, SETTINGS, ROOT, RULES)


def test_schedule_interleaves() -> None:
    assert ab.schedule(3) == ["A", "B", "A", "B", "A", "B"]
    with pytest.raises(SparkserveError):
        ab.schedule(0)


def test_compare_b_faster_beyond_the_spread() -> None:
    a = [[200.0, 201.0, 199.0], [200.5, 200.0, 199.5]]
    b = [[210.0, 211.0, 209.0], [210.5, 209.5, 210.0]]
    r = ab.compare(a, b)
    assert r["b_better"] and r["rounds_b_won"] == 2 and r["change"] == pytest.approx(0.05, abs=1e-3)
    assert r["verdict"].startswith("B faster by 5.0%")


def test_compare_within_noise_is_no_difference() -> None:
    a = [[200.0, 220.0, 180.0], [210.0, 190.0, 200.0]]
    b = [[202.0, 182.0, 222.0], [195.0, 205.0, 201.0]]
    r = ab.compare(a, b)
    assert not r["b_better"] and r["verdict"].startswith("no difference beyond the spread")


def test_compare_b_slower() -> None:
    r = ab.compare([[100.0, 100.5], [100.2, 99.8]], [[90.0, 90.5], [90.2, 89.8]])
    assert not r["b_better"] and r["verdict"].startswith("B slower by 10.0%") and r["rounds_b_won"] == 0


def test_a_round_without_values_is_not_counted() -> None:
    r = ab.compare([[100.0], [], [100.0]], [[110.0], [111.0], [109.0]])
    assert r["rounds"] == 2 and r["rounds_b_won"] == 2 and r["B"]["n"] == 3


def test_an_arm_without_any_value_is_an_error_not_a_verdict() -> None:
    with pytest.raises(SparkserveError, match="no measured value"):
        ab.compare([[], []], [[1.0], [1.0]])


def test_the_record_keeps_the_commands_that_ran(tmp_path: Path) -> None:
    """The arms' command lines in the record are the servers' (harness Python, loopback), not the
    entrypoint's defaults for the image."""
    from sparkserve.harness.levels.matrix import server_for
    from sparkserve.harness.runstore import METADATA, Store, write_json

    a, b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, SETTINGS, ROOT, RULES)
    store = Store(tmp_path / "results")
    run_dir = store.root / "gpu" / "run-a"
    run_dir.mkdir(parents=True)
    write_json(run_dir / METADATA, {"schema": 1, "repo": {"commit": "c0ffee"}})
    srv = {"python": "/opt/harness/python3", "host": "127.0.0.1"}
    commands = {arm.label: server_for(arm.entry, srv, tmp_path).command for arm in (a, b)}
    record = ab._write(store, "gpu", "hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, a, b, ["A", "B"], 1,
                       {"A": [store.get(str(run_dir))], "B": []}, {}, [], 1.0, "restart", commands)
    arms = record.metadata()["arms"]
    for label in ("A", "B"):
        cmd = arms[label]["command"]
        assert cmd[0] == "/opt/harness/python3" and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert "moe,lm_head" not in " ".join(arms["A"]["command"])
    assert arms["A"]["command"] != arms["B"]["command"]


def test_an_ab_of_speculation_records_the_acceptance_of_its_arm(tmp_path: Path) -> None:
    """`sparkserve ab PROFILE --set SPECULATIVE=eagle3`: B's command carries the speculative config, and
    the record keeps the engine's draft counters of each round next to its speed."""
    from sparkserve.harness.levels.matrix import server_for
    from sparkserve.harness.runstore import METADATA, Store, write_json

    over = {"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "/tmp/gpt-oss-120b-eagle3"}
    a, b = ab.plan("hopper-h100", over, SETTINGS, ROOT, RULES)
    commands = {arm.label: server_for(arm.entry, {}, tmp_path).command for arm in (a, b)}
    assert "--speculative-config" not in commands["A"]
    spec = commands["B"][commands["B"].index("--speculative-config") + 1]
    assert '"model":"/tmp/gpt-oss-120b-eagle3"' in spec
    store = Store(tmp_path / "results")
    run_dir = store.root / "gpu" / "run-a"
    run_dir.mkdir(parents=True)
    write_json(run_dir / METADATA, {"schema": 1})
    counted = [{"drafts": 10.0, "accepted": 14.0, "acceptance_length": 2.4}, {"error": "no /metrics"}]
    record = ab._write(store, "gpu", "hopper-h100", over, a, b, ["A", "B"], 1,
                       {"A": [store.get(str(run_dir))], "B": []}, {}, [], 1.0, "restart", commands,
                       {"A": [], "B": counted})
    arms = record.metadata()["arms"]
    assert "speculation" not in arms["A"] and arms["B"]["speculation"] == counted
    # an engine whose counters cannot be read is recorded as such, not as zero acceptance
    assert "error" in ab._speculation("http://127.0.0.1:9")
