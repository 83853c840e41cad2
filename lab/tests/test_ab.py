"""`sparkserve ab`: the arms, their refusals, the schedule and the verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from entrypoint_fakes import model_folder, plan_of
from sparkserve_lab import ab
from sparkserve_lab.levels import matrix
from sparkserve_lab.testing.gptoss_dummy import gpt_oss_config

from sparkserve.errors import SparkserveError

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "lab" / "configs" / "engine-kernels.toml"
SETTINGS = matrix.load(ROOT / "lab" / "configs" / "matrix-hopper-h100-random.yaml")


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
    ({"INDUCTOR_ENABLE_PDL": "1"}, "not a serving-profile variable"),  # no engine prefix either
    ({"MOE_BACKEND": "cutlass-mxfp8"}, "does not run on SPARKSERVE_TARGET=hopper"),
])
def test_refused_before_any_server(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(SparkserveError, match=message):
        ab.plan("hopper-h100", overrides, SETTINGS, ROOT, RULES)


def test_an_engine_variable_is_an_arm_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set TORCHINDUCTOR_ENABLE_PDL=1`: an engine variable as a profile file may hold one; B's server
    gets it, A's does not; a profile that already sets it to that value makes the arms identical."""
    from sparkserve.serving import profiles

    a, b = ab.plan("hopper-h100", {"TORCHINDUCTOR_ENABLE_PDL": "1"}, SETTINGS, ROOT, RULES)
    assert b.entry.name == "hopper-h100+TORCHINDUCTOR_ENABLE_PDL=1"
    assert b.entry.resolved.env["TORCHINDUCTOR_ENABLE_PDL"] == "1"
    assert "TORCHINDUCTOR_ENABLE_PDL" not in a.entry.resolved.env
    assert a.entry.resolved.profile == b.entry.resolved.profile  # the profile itself is the same
    read = profiles.read_env_file
    monkeypatch.setattr(profiles, "read_env_file",
                        lambda path: {**read(path), "TORCHINDUCTOR_ENABLE_PDL": "1"})
    with pytest.raises(SparkserveError, match="the arms are identical"):
        ab.plan("hopper-h100", {"TORCHINDUCTOR_ENABLE_PDL": "1"}, SETTINGS, ROOT, RULES)


def test_schedule_interleaves() -> None:
    assert ab.schedule(3) == ["A", "B", "A", "B", "A", "B"]
    with pytest.raises(SparkserveError):
        ab.schedule(0)


def _rounds(values: list[float], spread: float = 0.0) -> list[list[float]]:
    """One round per value: three requests around it."""
    return [[v - spread, v, v + spread] for v in values]


def test_sign_test_and_the_rounds_it_needs() -> None:
    assert ab.sign_test_p(6, 0) == pytest.approx(2 / 64)
    assert ab.sign_test_p(5, 0) == pytest.approx(2 / 32)  # 0.0625: five rounds cannot decide at 0.05
    assert ab.sign_test_p(3, 3) == 1.0 and ab.sign_test_p(0, 0) == 1.0
    assert ab.sign_test_p(7, 1) == pytest.approx(2 * 9 / 256)
    assert ab.min_rounds(0.05) == 6 and ab.min_rounds(0.01) == 8


def test_b_faster_in_every_round_of_enough_rounds() -> None:
    r = ab.compare(_rounds([200.0] * 6, 1.0), _rounds([210.0] * 6, 1.0))
    assert r["decision"] == "faster" and r["b_better"] and r["rounds_b_won"] == 6
    assert r["change"] == pytest.approx(0.05) and r["verdict"].startswith("B faster by 5.0%")
    assert r["round_medians"] == {"A": [200.0] * 6, "B": [210.0] * 6}


def test_a_p_value_equal_to_alpha_decides() -> None:
    r = ab.compare(_rounds([100.0] * 6), _rounds([110.0] * 6), alpha=2 / 64)
    assert r["p_value"] == 2 / 64 and r["decision"] == "faster"


def test_b_slower_in_every_round() -> None:
    r = ab.compare(_rounds([100.0] * 6), _rounds([90.0] * 6))
    assert r["decision"] == "slower" and not r["b_better"] and r["verdict"].startswith("B slower by 10.0%")


def test_too_few_rounds_is_undecided_however_large_the_change() -> None:
    r = ab.compare(_rounds([100.0] * 5), _rounds([150.0] * 5))
    assert r["decision"] == "undecided" and not r["b_better"] and r["rounds_b_won"] == 5
    assert "needs at least 6" in r["verdict"]


def test_rounds_that_disagree_are_no_difference() -> None:
    """The pooled medians differ by 2%, but B loses two of eight rounds."""
    r = ab.compare(_rounds([100.0] * 8), _rounds([104.0, 104.0, 104.0, 97.0, 104.0, 97.0, 104.0, 104.0]))
    assert r["rounds_b_won"] == 6 and r["rounds_b_lost"] == 2 and r["p_value"] > 0.05
    assert r["decision"] == "no difference" and r["verdict"].startswith("no difference: the rounds disagree")


def test_a_narrow_b_wide_is_judged_by_rounds_not_by_the_narrow_arm() -> None:
    """A is steady, B's requests scatter widely: a pooled comparison against A's narrow spread would call
    B faster; B's rounds go both ways, so there is no difference."""
    a = _rounds([100.0] * 6, 0.1)
    b = [[80.0, 112.0, 113.0], [81.0, 111.0, 114.0], [82.0, 112.0, 115.0],
         [119.0, 113.0, 84.0], [120.0, 88.0, 89.0], [86.0, 87.0, 118.0]]
    r = ab.compare(a, b)
    assert r["B"]["median"] > 1.05 * r["A"]["median"]  # what a pooled verdict would have seen
    assert r["decision"] == "no difference" and not r["b_better"]


def test_changes_within_the_floor_are_ties() -> None:
    r = ab.compare(_rounds([200.0] * 6), _rounds([200.8] * 6))  # +0.4% every round
    assert r["rounds_tied"] == 6 and r["rounds_b_won"] == 0
    assert r["decision"] == "no difference" and "every round within 0.5%" in r["verdict"]
    above = ab.compare(_rounds([200.0] * 6), _rounds([201.2] * 6))  # +0.6%: beyond the floor
    assert above["decision"] == "faster"


def test_a_change_of_exactly_the_floor_is_a_tie() -> None:
    for b, change in ((125.0, 0.25), (75.0, -0.25)):
        r = ab.compare(_rounds([100.0] * 6), _rounds([b] * 6), floor=0.25)
        assert r["round_changes"] == [change] * 6 and r["rounds_tied"] == 6
        assert r["decision"] == "no difference"


def test_ties_are_left_out_of_the_sign_test() -> None:
    """Five wins and three ties of eight rounds: five decisive rounds cannot decide; ties never count as
    wins."""
    r = ab.compare(_rounds([100.0] * 8), _rounds([110.0] * 5 + [100.2] * 3))
    assert (r["rounds_b_won"], r["rounds_tied"]) == (5, 3)
    assert r["decision"] == "undecided" and "too few rounds differ" in r["verdict"]
    r = ab.compare(_rounds([100.0] * 8), _rounds([110.0] * 6 + [100.2] * 2))
    assert r["decision"] == "faster"


def test_a_round_without_values_is_not_counted() -> None:
    r = ab.compare([[100.0], [], [100.0]], [[110.0], [111.0], [109.0]])
    assert r["rounds"] == 2 and r["rounds_b_won"] == 2 and r["B"]["n"] == 3


def test_an_arm_without_any_value_is_an_error_not_a_verdict() -> None:
    with pytest.raises(SparkserveError, match="no measured value"):
        ab.compare([[], []], [[1.0], [1.0]])


def test_every_stored_ab_verdict_is_what_its_runs_give() -> None:
    """Each A/B record of results/ is judged again from the benchmark runs its arms name."""
    from sparkserve_lab.runstore import Store

    store = Store(ROOT / "lab" / "results")
    records = store.abs()
    assert records, "the repository stores A/B comparisons"
    for rec in records:
        stored, again = rec.metadata()["results"], ab.recompute(rec, store)
        assert set(stored) == set(again), rec.run_id
        # one verdict per metric, or per metric and test for an A/B of several tests (a curve)
        assert {name.split()[0] for name in again} == set(rec.metadata().get("metrics")
                                                           or ab.LEGACY_METRICS), rec.run_id
        for metric in again:
            assert stored[metric]["verdict"] == again[metric]["verdict"], (rec.run_id, metric)
            assert stored[metric]["decision"] == again[metric]["decision"], (rec.run_id, metric)
            assert stored[metric]["round_changes"] == pytest.approx(again[metric]["round_changes"])


def _ran(arm: ab.Arm, srv: matrix.ServerSettings, work: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """vLLM's command line as the entrypoint starts the arm's server (its launch plan, which the started
    server records)."""
    from sparkserve_lab.levels.matrix import server_for

    return plan_of(server_for(arm.entry, srv, work, ROOT).env, monkeypatch).argv


def _local(tmp_path: Path) -> matrix.Matrix:
    """The random-weight matrix with its checkpoint where this test can make it."""
    model = model_folder(tmp_path / "gpt-oss-120b", gpt_oss_config())
    return replace(SETTINGS, variables={**SETTINGS.variables, "MODEL": str(model)})


def _fake_measures(monkeypatch: pytest.MonkeyPatch, server_for: Any, bench: Any,
                   test: tuple[int, int, int, int] = (0, 2048, 128, 1)) -> None:
    """ab's servers (SERVER_FOR), level 1 and level 4 (BENCH) faked: each measure's value is its run's
    `value`, for the one llama-benchy TEST."""
    from types import SimpleNamespace

    monkeypatch.setattr(ab, "server_for", server_for)
    monkeypatch.setattr(ab.smoke, "run", lambda client, random_weights: SimpleNamespace(
        ok=True, write=lambda path: path.write_text("{}")))
    monkeypatch.setattr(ab.benchmark, "run", bench)
    monkeypatch.setattr(ab, "rows", lambda bench: [SimpleNamespace(key=test)])
    monkeypatch.setattr(ab, "_values", lambda r, key, metric: [r.value])


def test_the_record_keeps_the_commands_that_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The arms' command lines in the record are the servers' (harness address), not the entrypoint's
    defaults for the image."""
    from sparkserve_lab.runstore import METADATA, Store, write_json

    a, b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, _local(tmp_path), ROOT, RULES)
    store = Store(tmp_path / "results")
    run_dir = store.root / "gpu" / "run-a"
    run_dir.mkdir(parents=True)
    write_json(run_dir / METADATA, {"schema": 1, "repo": {"commit": "c0ffee"}})
    srv = matrix.ServerSettings(python="/opt/harness/python3", host="127.0.0.1")
    commands = {arm.label: _ran(arm, srv, tmp_path / "work", monkeypatch) for arm in (a, b)}
    record = ab._write(store, "gpu", "hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, a, b, ["A", "B"], 1,
                       {"A": [store.get(str(run_dir))], "B": []}, {}, [], 1.0, "restart", commands)
    arms = record.metadata()["arms"]
    for label in ("A", "B"):
        cmd = arms[label]["command"]
        assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert "moe,lm_head" not in " ".join(arms["A"]["command"])
    assert arms["A"]["command"] != arms["B"]["command"]


def test_an_ab_of_speculation_records_the_acceptance_of_its_arm(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`sparkserve ab PROFILE --set SPECULATIVE=eagle3`: B's command carries the speculative config, and
    the record keeps the engine's draft counters of each round next to its speed."""
    from sparkserve_lab.runstore import METADATA, Store, write_json
    from sparkserve_lab.testing import eagle3_dummy

    draft = eagle3_dummy.make(tmp_path / "gpt-oss-120b-eagle3")
    over = {"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": str(draft), "MXFP4_LAYERS": "moe"}
    a, b = ab.plan("hopper-h100", over, _local(tmp_path), ROOT, RULES)
    srv = matrix.ServerSettings()
    commands = {arm.label: _ran(arm, srv, tmp_path / "work", monkeypatch) for arm in (a, b)}
    assert "--speculative-config" not in commands["A"]
    spec = commands["B"][commands["B"].index("--speculative-config") + 1]
    assert f'"model":"{draft}"' in spec
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


def test_two_gpus_swap_the_placement_halfway() -> None:
    got = ab.placements(6, ("0", "1"))
    assert got[:3] == [{"A": "0", "B": "1"}] * 3 and got[3:] == [{"A": "1", "B": "0"}] * 3
    for rounds, gpus, why in ((5, ("0", "1"), "must be even"), (6, ("0", "0"), "two different devices"),
                              (0, ("0", "1"), "must be even")):
        with pytest.raises(SparkserveError, match=why):
            ab.placements(rounds, gpus)  # type: ignore[arg-type]


def test_a_two_gpu_ab_runs_each_arm_on_each_gpu_for_half_the_rounds(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Both engines up at once, each pinned to its GPU; restarted once, swapped, after half the rounds;
    every round measures both; the record keeps the placement of each round."""
    from types import SimpleNamespace

    from sparkserve_lab.runstore import Store

    events: list[tuple[str, str, str | None]] = []

    class FakeServer:
        def __init__(self, name: str, gpu: str | None) -> None:
            self.name, self.gpu = name, gpu
            self.command, self.base_url, self.log, self.pid = ["vllm", name], "http://x", tmp_path / "log", 1
            self.vllm_command = self.command

        def start(self, timeout: float) -> None:
            events.append(("start", self.name, self.gpu))

        def stop(self) -> None:
            events.append(("stop", self.name, self.gpu))

    live: dict[str, FakeServer] = {}

    def server_for(entry: Any, srv: matrix.ServerSettings, work: Path, root: Path | None = None
                   ) -> FakeServer:
        live[entry.name] = FakeServer(entry.name, srv.environment().get("CUDA_VISIBLE_DEVICES"))
        return live[entry.name]

    measured: list[tuple[str, str | None]] = []

    def bench(spec: Any) -> tuple[Any, Any]:
        gpu = live[spec.configuration].gpu
        measured.append((spec.configuration, gpu))
        assert spec.preset.concurrency == (4, 5)
        value = 100.0 + (1.0 if gpu == "1" else 0.0)  # GPU 1 is 1% faster; the arms are the same
        run = SimpleNamespace(run_id=f"r{len(measured)}", status=lambda: "valid", metadata=lambda: {},
                              value=value, bench=lambda: {})
        return run, SimpleNamespace(ok=True)

    _fake_measures(monkeypatch, server_for, bench)
    record, results = ab.run("hopper-h100", {"MXFP4_LAYERS": "moe"}, replace(SETTINGS, hardware="gpu"), ROOT,
                             Store(tmp_path / "results"), RULES, 6, 1, tmp_path, gpus=("0", "1"),
                             concurrency=[4, 5])
    a_name, b_name = (ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, RULES)[i].entry.name
                      for i in (0, 1))
    starts = [e for e in events if e[0] == "start"]
    assert sorted(starts[:2]) == sorted([("start", a_name, "0"), ("start", b_name, "1")])
    assert sorted(starts[2:]) == sorted([("start", a_name, "1"), ("start", b_name, "0")])
    assert len(starts) == 4 and sum(e[0] == "stop" for e in events) == 4  # swapped once, all stopped
    assert measured[:6] == [(a_name, "0"), (b_name, "1")] * 3
    assert measured[6:] == [(a_name, "1"), (b_name, "0")] * 3
    meta = record.metadata()
    assert meta["mode"] == "two-gpus" and meta["placements"] == ab.placements(6, ("0", "1"))
    assert meta["preset"]["concurrency"] == [4, 5] and meta["preset"]["runs"] == 1
    # the card's own 1% favours B in three rounds and A in three: no verdict for either arm
    assert results["decode"]["decision"] == ab.NO_DIFFERENCE
    with pytest.raises(SparkserveError, match="choose one"):
        ab.run("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, Store(tmp_path / "r2"), RULES, 6, 1,
               tmp_path, concurrent=True, gpus=("0", "1"))


def test_a_curve_is_judged_per_concurrency_never_over_mixed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the concurrency preset, B faster at c=5 only: c=5 says faster, c=1 no difference."""
    from types import SimpleNamespace

    tests = [(0, 512, 128, 1), (0, 512, 128, 5)]
    monkeypatch.setattr(ab, "rows", lambda bench: [SimpleNamespace(key=t) for t in tests])

    def values(r: SimpleNamespace, key: tuple[int, int, int, int], metric: str) -> list[float]:
        return [100.0 * (1.1 if r.arm == "B" and key[3] == 5 else 1.0)]

    monkeypatch.setattr(ab, "_values", values)
    per_arm = {arm: [SimpleNamespace(arm=arm, bench=lambda: {}) for _ in range(6)] for arm in "AB"}
    got = ab.judge(per_arm)  # type: ignore[arg-type]
    assert set(got) == {f"{m} pp512/tg128 c{c}" for m in ("decode", "prefill", "ttft", "e2e")
                        for c in (1, 5)}
    assert got["decode pp512/tg128 c5"]["decision"] == ab.FASTER
    assert got["decode pp512/tg128 c1"]["decision"] == ab.NO_DIFFERENCE
    assert ab.result_name("decode", (4096, 2048, 32, 1), True) == "decode pp2048/tg32 d4096 c1"
    assert ab.result_name("decode", (0, 2048, 128, 1), False) == "decode"


def test_the_report_gives_an_ab_of_a_curve_a_row_per_concurrency_in_order(tmp_path: Path) -> None:
    from sparkserve_lab.report import markdown
    from sparkserve_lab.runstore import KIND_AB, METADATA, Store, write_json

    store = Store(tmp_path / "results")
    rec = store.root / "gpu" / "20261127T000000Z-ab-x"
    rec.mkdir(parents=True)
    verdict = {"A": {"median": 1.0, "q1": 1.0, "q3": 1.0}, "B": {"median": 1.1, "q1": 1.1, "q3": 1.1},
               "rounds": 6, "change": 0.1}
    results = {f"{m} pp512/tg128 c{c}": {**verdict, "verdict": f"{m} at {c}"} for m in ("decode", "prefill")
               for c in (10, 5, 1)}
    write_json(rec / METADATA, {"schema": 1, "kind": KIND_AB, "name": "p vs p+X", "mode": "two-gpus",
                                "results": results, "arms": {}})
    rows = [ln for ln in markdown._ab_section(store, tmp_path / "out.md", None) if "p vs p+X" in ln]
    assert [ln.split("|")[9].strip() for ln in rows] == ["decode at 1", "decode at 5", "decode at 10"]
    assert "pp512/tg128 c5 | two-gpus, 6 |" in rows[1]


AB_ARGS = ["ab", "hopper-h100", "--set", "MOE_BACKEND=triton", "--matrix", "m.yaml"]


@pytest.mark.parametrize(("bad", "why"), [
    ("4,,5", "(an empty item)"), ("4,5,", "(an empty item)"), ("", "(an empty item)"),
    ("0", "(0 is below 1)"), ("-1", "(-1 is below 1)"), ("4,x", "('x' is not a whole number)"),
    ("2.5", "('2.5' is not a whole number)"),
])
def test_ab_refuses_a_concurrency_list_that_is_not_whole_numbers(bad: str, why: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve_lab.cli.main import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*AB_ARGS, f"--concurrency={bad}"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert (f"argument --concurrency: expected whole numbers >= 1 separated by commas, got {bad!r} {why}"
            in err)


@pytest.mark.parametrize(("text", "want"), [("4,5,8,10", [4, 5, 8, 10]), ("4, 5 ,8", [4, 5, 8]), ("8", [8])])
def test_ab_takes_a_concurrency_list(text: str, want: list[int]) -> None:
    from sparkserve_lab.cli.main import build_parser

    assert build_parser().parse_args([*AB_ARGS, "--concurrency", text]).concurrency == want
    assert build_parser().parse_args(AB_ARGS).concurrency is None  # the preset's own concurrencies


def test_a_time_is_better_lower() -> None:
    """TTFT: B's round medians 10% lower than A's in every round of six is B faster, not slower."""
    r = ab.compare(_rounds([1000.0] * 6, 5.0), _rounds([900.0] * 6, 5.0), lower_is_better=True)
    assert r["decision"] == ab.FASTER and r["change"] == pytest.approx(1000 / 900 - 1)
    assert ab.compare(_rounds([1000.0] * 6), _rounds([900.0] * 6))["decision"] == ab.SLOWER


def test_the_summary_gives_each_metric_its_unit() -> None:
    """A time to the first token is printed in ms, the throughputs in tok/s, per concurrency."""
    arm = {"median": 100.0, "q1": 90.0, "q3": 110.0}
    results = {f"{m} pp2048/tg128 c4": {"A": arm, "B": arm, "verdict": "v"} for m in ab.METRICS}
    lines = {line.split()[0]: line for line in ab.summary(results)}
    assert "] ms " in lines["ttft"] and "tok/s" not in lines["ttft"]
    assert all("] tok/s " in lines[m] for m in ("decode", "prefill", "e2e"))


def test_ttft_and_end_to_end_are_read_from_the_run(tmp_path: Path) -> None:
    """TTFT per request from llama-benchy's e2e_ttft values; end-to-end tok/s per batch from batches.json."""
    from sparkserve_lab.runstore import BATCHES, BENCH, Run, write_json

    run = Run(tmp_path / "r")
    run.path.mkdir()
    test = (0, 2048, 128, 32)
    write_json(run.file(BENCH), {"benchmarks": [
        {"context_size": 0, "prompt_size": 2048, "response_size": 128, "concurrency": 32,
         "is_context_prefill_phase": False, "e2e_ttft": {"mean": 2.0, "values": [1500.0, 2500.0]}}]})
    write_json(run.file(BATCHES), {"batches": [
        {"test": list(test), "e2e_tps": 700.0, "errors": 0},
        {"test": list(test), "e2e_tps": 650.0, "errors": 0},
        {"test": list(test), "e2e_tps": 900.0, "errors": 1},  # a batch with a failed request: not a number
        {"test": [0, 2048, 128, 64], "e2e_tps": 800.0, "errors": 0}]})
    assert ab._values(run, test, "e2e_ttft") == [1500.0, 2500.0]
    assert ab._values(run, test, "e2e_tps") == [700.0, 650.0]


def test_three_arms_rotate_over_three_gpus() -> None:
    """A Latin square: each arm on each GPU for as many rounds; two arms keep the halfway swap."""
    got = ab.placements(6, ("0", "1", "2"), 3)
    assert got[:2] == [{"A": "0", "B": "1", "C": "2"}] * 2
    assert got[2:4] == [{"A": "1", "B": "2", "C": "0"}] * 2
    assert got[4:] == [{"A": "2", "B": "0", "C": "1"}] * 2
    for label in "ABC":
        assert sorted(p[label] for p in got) == ["0", "0", "1", "1", "2", "2"]
    for rounds, gpus, arms, why in ((4, ("0", "1", "2"), 3, "multiple of 3"),
                                    (6, ("0", "1"), 3, "3 arms need 3 GPUs"),
                                    (6, ("0", "1", "1"), 3, "3 different devices")):
        with pytest.raises(SparkserveError, match=why):
            ab.placements(rounds, gpus, arms)


def test_more_arms_are_refused_when_two_are_the_same() -> None:
    arms = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, RULES,
                   ({"MOE_BACKEND": "triton"},))
    assert [a.label for a in arms] == ["A", "B", "C"]
    assert arms[2].entry.name == "hopper-h100+MOE_BACKEND=triton"
    with pytest.raises(SparkserveError, match="two arms are identical"):
        ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, RULES, ({"MXFP4_LAYERS": "moe"},))
    with pytest.raises(SparkserveError, match="two arms are identical"):
        ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, RULES, ({"KV_CACHE_DTYPE": "auto"},))


def test_three_arms_on_three_gpus_alternate_and_rotate(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Three arms on three GPUs: measured one after another in each round (never two at once), each
    placement a restart of every engine; one record per arm against A, with that pair's placements and
    the sitting's arms."""
    import threading
    from types import SimpleNamespace

    from sparkserve_lab.runstore import Store

    starts: list[tuple[str, str | None]] = []
    live: dict[str, Any] = {}
    measured: list[tuple[str, str | None]] = []
    inside, most = [0], [0]
    lock = threading.Lock()

    def server_for(entry: Any, srv: matrix.ServerSettings, work: Path, root: Path | None = None) -> Any:
        gpu = srv.environment().get("CUDA_VISIBLE_DEVICES")
        server = SimpleNamespace(command=["vllm", entry.name], vllm_command=["vllm", entry.name],
                                 base_url="http://x", log=tmp_path / "log",
                                 pid=1, gpu=gpu, start=lambda timeout: starts.append((entry.name, gpu)),
                                 stop=lambda: None)
        live[entry.name] = server
        return server

    def bench(spec: Any) -> tuple[Any, Any]:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        gpu = live[spec.configuration].gpu
        measured.append((spec.configuration, gpu))
        with lock:
            inside[0] -= 1
        faster = 1.05 if "MOE_BACKEND" in spec.configuration else 1.0
        value = 100.0 * faster + (0.5 if gpu == "2" else 0.0)
        run = SimpleNamespace(run_id=f"r{len(measured)}", status=lambda: "valid", metadata=lambda: {},
                              value=value, bench=lambda: {})
        return run, SimpleNamespace(ok=True)

    _fake_measures(monkeypatch, server_for, bench)
    out = ab.run_arms("hopper-h100", {"MXFP4_LAYERS": "moe"}, replace(SETTINGS, hardware="gpu"), ROOT,
                      Store(tmp_path / "results"), RULES, 6, 1, tmp_path, gpus=("0", "1", "2"),
                      more=({"MOE_BACKEND": "triton"},))
    assert most[0] == 1  # one arm measured at a time
    assert len(starts) == 9  # three placements, three engines each
    assert len(measured) == 18 and [m[0] for m in measured[:3]] == [a.entry.name for a in ab.plan(
        "hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, RULES, ({"MOE_BACKEND": "triton"},))]
    c_name = measured[2][0]
    assert sorted(g for n, g in measured if n == c_name) == ["0", "0", "1", "1", "2", "2"]
    (_, res_b), (rec_c, res_c) = out
    assert res_c["decode"]["decision"] == ab.FASTER  # C 5% faster on every GPU
    assert res_b["decode"]["decision"] != ab.FASTER  # B the same as A but for GPU 2's 0.5%
    meta = rec_c.metadata()
    assert meta["mode"] == "gpus" and meta["overrides"] == {"MOE_BACKEND": "triton"}
    assert meta["placements"] == [{"A": p["A"], "B": p["C"]} for p in ab.placements(6, ("0", "1", "2"), 3)]
    assert set(meta["sitting_arms"]) == {"A", "B", "C"} and meta["metrics"] == list(ab.METRICS)
    with pytest.raises(SparkserveError, match="more arms need --gpus"):
        ab.run_arms("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, Store(tmp_path / "r2"), RULES,
                    6, 1, tmp_path, concurrent=True, more=({"MOE_BACKEND": "triton"},))


def test_sleep_mode_starts_both_engines_once_and_wakes_the_one_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both engines on one GPU, each on its port with vLLM's sleep mode: A asleep before B starts, then
    per measure the other asleep and this one awake (no restart), both stopped at the end; the record says
    the mode and what each change of the awake engine took."""
    from types import SimpleNamespace

    from sparkserve_lab.runstore import Store

    events: list[tuple[str, str]] = []
    awake: dict[str, bool] = {}

    class FakeServer:
        def __init__(self, name: str, env: dict[str, str]) -> None:
            self.name, self.env, self.base_url = name, env, f"http://127.0.0.1:{env['SPARKSERVE_PORT']}"
            self.command, self.log, self.pid = ["vllm", name], tmp_path / "log", 1
            self.vllm_command = self.command

        def start(self, timeout: float) -> None:
            events.append(("start", self.name))
            awake[self.base_url] = True

        def stop(self) -> None:
            events.append(("stop", self.name))

    by_url: dict[str, FakeServer] = {}

    def server_for(entry: Any, srv: matrix.ServerSettings, work: Path,
                   root: Path | None = None) -> FakeServer:
        server = FakeServer(entry.name, entry.resolved.env)
        by_url[server.base_url] = server
        return server

    class FakeClient:
        def __init__(self, base_url: str) -> None:
            self.url = base_url

        def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
            assert path in ("/sleep?level=1", "/wake_up") and timeout == ab.SLEEP_TIMEOUT_S
            assert awake[self.url] is (path == "/sleep?level=1")  # never asleep twice nor woken awake
            events.append((path.split("?")[0].strip("/"), by_url[self.url].name))
            awake[self.url] = path == "/wake_up"
            return {}

        def get(self, path: str, timeout: float | None = None) -> Any:
            assert path == "/is_sleeping"
            return {"is_sleeping": not awake[self.url]}

    def bench(spec: Any) -> tuple[Any, Any]:
        assert [by_url[u].name for u, on in awake.items() if on] == [spec.configuration]
        events.append(("measure", spec.configuration))
        run = SimpleNamespace(run_id=f"r{len(events)}", status=lambda: "valid", metadata=lambda: {},
                              value=100.0, bench=lambda: {})
        return run, SimpleNamespace(ok=True)

    _fake_measures(monkeypatch, server_for, bench, (0, 2048, 128, 32))
    monkeypatch.setattr(ab, "Client", FakeClient)
    record, _ = ab.run("hopper-h100", {"MXFP4_LAYERS": "moe"}, replace(SETTINGS, hardware="gpu"), ROOT,
                       Store(tmp_path / "results"), RULES, 2, 1, tmp_path, sleep=True)
    a, b = (s.name for s in sorted(by_url.values(), key=lambda s: s.base_url))
    assert events == [("start", a), ("sleep", a), ("start", b),
                      ("sleep", b), ("wake_up", a), ("measure", a),
                      ("sleep", a), ("wake_up", b), ("measure", b),
                      ("sleep", b), ("wake_up", a), ("measure", a),
                      ("sleep", a), ("wake_up", b), ("measure", b),
                      ("stop", a), ("stop", b)]
    for server in by_url.values():  # each engine with sleep mode and its endpoints, on its own port
        assert server.env["VLLM_EXTRA_ARGS"].split()[-1] == "--enable-sleep-mode"
        assert server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert len({s.base_url for s in by_url.values()}) == 2
    meta = record.metadata()
    assert meta["mode"] == "sleep"
    assert [e["awake"] for e in meta["sleep_switches"]] == ["A", "B", "A", "B"]
    assert all("sleep_s" in e and "wake_s" in e for e in meta["sleep_switches"])


@pytest.mark.parametrize(("kw", "message"), [
    ({"concurrent": True}, "choose one"),
    ({"gpus": ("0", "1")}, "choose one"),
    ({"more": ({"MAX_NUM_SEQS": "8"},)}, "two arms"),
])
def test_sleep_mode_is_refused_with_another_mode_or_more_arms(kw: dict[str, Any], message: str,
                                                              tmp_path: Path) -> None:
    from sparkserve_lab.runstore import Store

    with pytest.raises(SparkserveError, match=message):
        ab.run_arms("hopper-h100", {"MXFP4_LAYERS": "moe"}, SETTINGS, ROOT, Store(tmp_path / "r"), RULES, 2,
                    1, tmp_path, sleep=True, **kw)


def test_a_wake_that_leaves_the_engine_asleep_stops_the_ab(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    class Stuck:
        def __init__(self, base_url: str) -> None:
            pass

        def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
            return {}

        def get(self, path: str, timeout: float | None = None) -> Any:
            return {"is_sleeping": True}

    monkeypatch.setattr(ab, "Client", Stuck)
    server = type("S", (), {"base_url": "http://127.0.0.1:8001", "log": tmp_path / "log"})()
    with pytest.raises(SparkserveError, match="still asleep after /wake_up"):
        ab.wake_engine(server)


def test_sleep_is_refused_where_the_host_cannot_hold_the_weights(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """An engine of 63.95 GiB of weights (its log's line) is refused before /sleep is asked where the host has
    less than 1.25 times that available (79 GiB); with 125 GiB it sleeps; a log without the line (not known)
    does not stop it."""
    posted: list[str] = []

    class Sleepy:
        def __init__(self, base_url: str) -> None:
            pass

        def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
            posted.append(path)
            return {}

    log = tmp_path / "engine.log"
    log.write_text("(EngineCore pid=1) INFO [model_runner.py:428] Model loading took 63.95 GiB memory and "
                   "12.08 seconds\n")
    server = type("S", (), {"base_url": "http://127.0.0.1:8001", "log": log})()
    monkeypatch.setattr(ab, "Client", Sleepy)
    memory = type("M", (), {"available": 125 * 2**30})()
    monkeypatch.setattr("psutil.virtual_memory", lambda: memory)
    memory.available = 79 * 2**30
    with pytest.raises(SparkserveError, match=r"63\.95 GiB of weights.*up to 80 GiB.*79 GiB available"):
        ab.sleep_engine(server)
    assert posted == []
    memory.available = 125 * 2**30
    ab.sleep_engine(server)
    assert posted == ["/sleep?level=1"]
    memory.available = 1
    log.write_text("starting\n")
    ab.sleep_engine(server)
    assert posted == ["/sleep?level=1"] * 2


def test_a_sleep_mode_arm_is_what_the_entrypoint_starts_with_the_flag_and_the_endpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entrypoint accepts the sleep flag (no profile variable owns it) and hands vLLM the variable that
    serves /sleep and /wake_up; the arm's own flags stay."""
    from sparkserve_lab.levels.matrix import server_for

    b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, _local(tmp_path), ROOT, RULES)[1]
    sleepy = ab._on_port(b, 8001, sleep=True)
    srv = matrix.ServerSettings(python="/opt/harness/python3", host="127.0.0.1")
    plan = plan_of(server_for(sleepy.entry, srv, tmp_path / "work", ROOT).env, monkeypatch)
    assert "--enable-sleep-mode" in plan.argv and plan.env["VLLM_SERVER_DEV_MODE"] == "1"
    # pinned backups of the weights not rounded up to powers of two (torch's allocator setting)
    assert plan.env["PYTORCH_ALLOC_CONF"] == "pinned_max_round_threshold_mb:64"
    assert plan.argv[plan.argv.index("--port") + 1] == "8001"
    awake = _ran(ab._on_port(b, 8001), srv, tmp_path / "work2", monkeypatch)
    assert [x for x in plan.argv if x != "--enable-sleep-mode"] == awake


def test_a_sleep_mode_arm_keeps_its_own_allocator_settings_and_adds_the_pinned_threshold(
        tmp_path: Path) -> None:
    b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe"}, _local(tmp_path), ROOT, RULES)[1]
    env = dict(b.entry.resolved.env)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:False"
    own = ab.Arm(b.label, ab.MatrixEntry(b.entry.name, ab.profiles.Resolved(
        b.entry.resolved.name, env, ab.parse(env), b.entry.resolved.overrides)))
    moved = ab._on_port(own, 8001, sleep=True).entry.resolved.env
    assert moved["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False,pinned_max_round_threshold_mb:64"
    assert "PYTORCH_ALLOC_CONF" not in moved
    assert "PYTORCH_ALLOC_CONF" not in ab._on_port(b, 8001).entry.resolved.env  # awake arms: unchanged
