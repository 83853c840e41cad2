"""`sparkserve ab`: the arms, their refusals, the schedule and the verdict."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.harness import ab
from sparkserve.harness.levels import matrix
from sparkserve.harness.runstore import Store
from sparkserve.serving import flags

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


# --- sleep mode: both engines up, the one not measured asleep ---------------------------------------------

def test_sleep_mode_turns_on_the_flag_and_the_endpoints_in_both_arms_once() -> None:
    s = ab.with_sleep_mode(SETTINGS)
    assert ab.with_sleep_mode(s) == s  # the flag is not added twice
    assert s["server"]["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert SETTINGS["server"]["env"].get("VLLM_SERVER_DEV_MODE") is None  # the loaded settings unchanged
    a, b = ab.plan("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, s, ROOT, RULES)
    for arm in (a, b):
        argv = flags.vllm_argv(arm.entry.resolved.profile)
        assert argv.count("--enable-sleep-mode") == 1 and "--max-cudagraph-capture-size" in argv


class FakeEngine:
    """vLLM's /sleep, /wake_up and /is_sleeping; a change shows only after `lag` polls, as it takes time."""

    def __init__(self, lag: int = 2) -> None:
        self.asleep, self.pending, self.lag, self.calls = False, 0, lag, []  # type: ignore[var-annotated]

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        engine = self

        class H(BaseHTTPRequestHandler):
            def _send(self, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                assert self.path == "/is_sleeping"
                if engine.pending:
                    engine.pending -= 1
                    self._send({"is_sleeping": not engine.asleep})
                else:
                    self._send({"is_sleeping": engine.asleep})

            def do_POST(self) -> None:
                engine.calls.append(self.path)
                engine.asleep = self.path.startswith("/sleep")
                engine.pending = engine.lag
                self._send({"status": "ok"})

            def log_message(self, *args: object) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def test_sleep_and_wake_wait_until_the_engine_says_so() -> None:
    engine = FakeEngine(lag=3)
    httpd, url = engine.serve()
    try:
        switch = ab.Sleep(url, timeout_s=5, poll_s=0.01)
        switch.sleep()
        assert engine.asleep and engine.pending == 0 and switch.sleeping()
        switch.wake()
        assert not engine.asleep and engine.pending == 0
        assert engine.calls == ["/sleep?level=1", "/wake_up"]
    finally:
        httpd.shutdown()


def test_an_engine_without_sleep_mode_is_an_error_that_says_what_it_needs() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(SparkserveError, match="--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1"):
        ab.Sleep(f"http://127.0.0.1:{port}", timeout_s=2).sleep()


def test_an_engine_that_never_falls_asleep_times_out() -> None:
    engine = FakeEngine(lag=10**6)
    httpd, url = engine.serve()
    try:
        with pytest.raises(SparkserveError, match="not asleep after"):
            ab.Sleep(url, timeout_s=0.3, poll_s=0.01).sleep()
    finally:
        httpd.shutdown()


def test_an_unknown_mode_is_refused_before_any_server(tmp_path: Path) -> None:
    with pytest.raises(SparkserveError, match="one of restart, concurrent, sleep"):
        ab.run("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, SETTINGS, ROOT, Store(tmp_path), RULES, 1, 1,
               tmp_path, mode="interleaved")
