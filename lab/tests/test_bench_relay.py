"""bench.relay: llama-benchy's view of a random-weight gpt-oss stream (harmony withholds the text)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sparkserve_lab.bench.relay import MARK, mark_line, token_relay


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n"


def test_mark_line_marks_only_silent_token_chunks() -> None:
    silent = sse({"choices": [{"index": 0, "delta": {}, "token_ids": [5, 6]}]})
    out, n = mark_line(silent)
    assert n == 2 and json.loads(out[5:])["choices"][0]["delta"] == {"content": MARK}
    assert out.endswith(b"\n")
    # vLLM's compact form (the fast path) and a delta with explicit nulls (the JSON path)
    compact = b'data: {"id":"c","choices":[{"index":0,"delta":{},"logprobs":null,"token_ids":[60542]}]}\n'
    out, n = mark_line(compact)
    assert n == 1 and json.loads(out[5:])["choices"][0]["delta"] == {"content": MARK}
    nulls = sse({"choices": [{"index": 0, "delta": {"content": None, "role": None}, "token_ids": [1, 2, 3]}]})
    out, n = mark_line(nulls)
    assert n == 3 and json.loads(out[5:])["choices"][0]["delta"]["content"] == MARK
    two = sse({"choices": [{"index": i, "delta": {}, "token_ids": [i]} for i in range(2)]})
    out, n = mark_line(two)
    assert n == 2 and all(c["delta"] == {"content": MARK} for c in json.loads(out[5:])["choices"])
    for keep in (
        sse({"choices": [{"index": 0, "delta": {"content": "hi"}, "token_ids": [5]}]}),  # has text
        sse({"choices": [{"index": 0, "delta": {"reasoning": "r"}, "token_ids": [5]}]}),
        sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),  # no token ids
        sse({"choices": [], "usage": {"completion_tokens": 3}}),
        b"data: [DONE]\n",
        b"\n",
        b"data: {not json token_ids\n",
    ):
        assert mark_line(keep) == (keep, 0)


class _Upstream(BaseHTTPRequestHandler):
    """A vLLM-like stream: a role chunk, silent token chunks, a last chunk with all the text, usage."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(b: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()

        n = int(req["max_tokens"])
        chunk(sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}) + b"\n")
        for i in range(n - 1):
            time.sleep(0.01)
            silent = {"index": 0, "delta": {}, "token_ids": [i]}
            chunk(sse({"t": time.perf_counter(), "choices": [silent]}) + b"\n")
        last = {"index": 0, "delta": {"content": "all the text"}, "finish_reason": "length", "token_ids": [n]}
        chunk(sse({"t": time.perf_counter(), "choices": [last]}) + b"\n")
        chunk(sse({"choices": [], "usage": {"completion_tokens": n}}) + b"\n")
        chunk(b"data: [DONE]\n\n")
        chunk(b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_relay_streams_each_token_when_it_arrives(upstream: str) -> None:
    with token_relay(upstream + "/v1") as (url, stats):
        assert url.endswith("/v1")
        port = int(url.split(":")[2].split("/")[0])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/models")
        assert json.loads(c.getresponse().read())["data"][0]["id"] == "m"
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/chat/completions", body=json.dumps({"max_tokens": 8}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and "text/event-stream" in r.getheader("Content-Type", "")
        texts, lags = [], []
        while line := r.readline():
            if line.startswith(b"data: {"):
                obj = json.loads(line[6:])
                for ch in obj["choices"]:
                    if ch.get("token_ids"):
                        texts.append(ch["delta"].get("content"))
                        lags.append(time.perf_counter() - obj["t"])
    assert texts == [MARK] * 7 + ["all the text"]  # every token visible; the real text untouched
    assert max(lags) < 0.5  # relayed as it came, not buffered to the end
    assert stats.marked_chunks == 7 and stats.marked_tokens == 7 and stats.requests == 2
    assert not stats.errors


def test_relay_reports_an_unreachable_upstream() -> None:
    with token_relay("http://127.0.0.1:9") as (url, stats):
        c = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=30)
        c.request("GET", "/v1/models")
        assert c.getresponse().status == 502
    assert stats.errors
