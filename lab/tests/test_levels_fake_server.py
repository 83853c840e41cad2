"""Levels 1, 2 and 3 against an in-process fake OpenAI server: they pass when it behaves, fail when not."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.levels import stress

from sparkserve.errors import SparkserveError
from sparkserve.gate import correctness, smoke
from sparkserve.gate.common import Client


class Fake:
    def __init__(self) -> None:
        self.fail_every = 0  # answer 500 to every n-th chat request
        self.reasoning = ""
        self.calls = 0
        self.model_root = "/nonexistent/tiny"
        self.health = 200


@pytest.fixture
def fake() -> Iterator[tuple[Fake, str]]:
    state = Fake()

    class H(BaseHTTPRequestHandler):
        def _send(self, code: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(state.health, None)
            elif self.path == "/v1/models":
                self._send(200, {"data": [{"id": "tiny", "root": state.model_root}]})
            else:
                self._send(404, {"error": "no"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                self._send(200, {"count": len(body["prompt"].split())})
            elif self.path == "/v1/completions":
                n = body["max_tokens"]
                toks = [f"token_id:{(len(body['prompt']) * 7 + i) % 97}" for i in range(n)]
                self._send(200, {"choices": [{"text": "x", "logprobs": {"tokens": toks}}]})
            elif self.path == "/v1/chat/completions":
                state.calls += 1
                if state.fail_every and state.calls % state.fail_every == 0:
                    self._send(500, {"error": "boom"})
                    return
                words = sum(len(m["content"].split()) for m in body["messages"])
                self._send(
                    200,
                    {
                        "choices": [
                            {
                                "message": {"content": "four", "reasoning": state.reasoning},
                                "finish_reason": "length",
                            }
                        ],
                        "usage": {"prompt_tokens": words, "completion_tokens": body["max_tokens"]},
                    },
                )
            else:
                self._send(404, {"error": "no"})

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield state, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_level1_passes_and_skips_harmony_for_llama(fake: tuple[Fake, str], tmp_path: Path) -> None:
    state, url = fake
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    state.model_root = str(tmp_path)
    res = smoke.run(Client(url))
    assert res.ok
    h = next(c for c in res.checks if c.name == "harmony reasoning present")
    assert h.ok is None and "not a harmony" in h.detail


@pytest.mark.parametrize("status", [500, 503, 404])
def test_level1_fails_when_health_is_not_200(fake: tuple[Fake, str], status: int) -> None:
    state, url = fake
    state.health = status
    res = smoke.run(Client(url))
    h = next(c for c in res.checks if c.name == "GET /health")
    assert h.ok is False and not res.ok


def test_level1_fails_when_nothing_listens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    res = smoke.run(Client(f"http://127.0.0.1:{port}", timeout=5))
    h = next(c for c in res.checks if c.name == "GET /health")
    assert h.ok is False and not res.ok


def test_level1_requires_harmony_for_gpt_oss(fake: tuple[Fake, str], tmp_path: Path) -> None:
    state, url = fake
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    state.model_root = str(tmp_path)
    assert not smoke.run(Client(url)).ok  # no reasoning field
    state.reasoning = "The user asks 2+2."
    assert smoke.run(Client(url)).ok


def test_level1_random_weights_never_pass_the_harmony_check(fake: tuple[Fake, str], tmp_path: Path) -> None:
    """Random weights: the harmony check is 'not applicable', even when the reply happens to carry
    reasoning; the chat completion itself is still required."""
    state, url = fake
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    state.model_root = str(tmp_path)
    for reasoning in ("", "looks like reasoning"):
        state.reasoning = reasoning
        res = smoke.run(Client(url), random_weights=True)
        h = next(c for c in res.checks if c.name == "harmony reasoning present")
        assert h.ok is None and h.detail.startswith("not applicable (random weights)")
        assert res.ok and res.metrics["random_weights"] is True
    state.fail_every = 1  # no chat completion: level 1 fails, random weights or not
    assert not smoke.run(Client(url), random_weights=True).ok


def test_level3_passes_on_a_healthy_server(fake: tuple[Fake, str]) -> None:
    _, url = fake
    res = stress.run(
        Client(url),
        sequential=10,
        concurrent_requests=8,
        concurrency=4,
        long_tokens=500,
        server_pid=os.getpid(),
    )
    assert res.ok, res.to_dict()


def test_level3_fails_on_any_error(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.fail_every = 7
    res = stress.run(Client(url), sequential=10, concurrent_requests=8, concurrency=4, long_tokens=500)
    assert not res.ok


def test_level3_detects_a_restart_in_the_engine_log(fake: tuple[Fake, str], tmp_path: Path) -> None:
    _, url = fake
    log = tmp_path / "engine.log"
    log.write_text("(APIServer pid=1) INFO 11-22 10:00:00 [entry.py:139] Starting vLLM server on http://x\n")

    class Restarting(Client):
        def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
            with log.open("a") as f:  # the server restarts while the stress runs
                f.write(
                    "(APIServer pid=2) INFO 11-22 10:00:09 [entry.py:139] Starting vLLM server on http://x\n"
                )
            return super().chat(model, messages, **kw)

    res = stress.run(
        Restarting(url), sequential=2, concurrent_requests=2, concurrency=2, long_tokens=100, engine_log=log
    )
    assert not res.ok


def test_level2_reference_round_trip(fake: tuple[Fake, str], tmp_path: Path) -> None:
    _, url = fake
    ref = tmp_path / "ref.json"
    assert correctness.run(Client(url), record=ref, configuration="marlin-moe", harmony="skip").ok
    assert correctness.run(Client(url), reference=ref, harmony="skip").ok
    data = json.loads(ref.read_text())
    data["prompts"][0]["token_ids"][0] += 1  # a reference that disagrees on the first token
    ref.write_text(json.dumps(data))
    assert not correctness.run(Client(url), reference=ref, harmony="skip").ok


def test_level2_compare_thresholds() -> None:
    ref = [{"prompt": "a", "token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}]
    assert correctness.compare(ref, ref, 8, 1.0)[0]
    late = [{"prompt": "a", "token_ids": [1, 2, 3, 4, 5, 6, 9, 9]}]
    assert correctness.compare(ref, late, 4, 0.5)[0]
    assert not correctness.compare(ref, late, 8, 0.5)[0]
    assert correctness.last_integer("The answer is 5,050.") == 5050
    assert correctness.last_integer("none") is None


def test_not_ready_says_what_the_last_answer_was() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with pytest.raises(SparkserveError, match=r"not ready after 0s \(last answer: .*Connection refused"):
        Client(f"http://127.0.0.1:{dead}", timeout=2).wait_ready(0)
