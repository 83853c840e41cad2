"""A local relay between llama-benchy and a random-weight gpt-oss server that keeps token timing visible.

vLLM renders and parses every gpt-oss chat with harmony (model_type gpt_oss; the openai_gptoss parser is
on by default). Random weights never emit a complete harmony header (`<|channel|>final<|message|>`), so
the harmony parser withholds all text until the request ends and then returns the raw output at once:
each streamed chunk before that carries the generated token ids (llama-benchy asks for
`return_token_ids`) but an empty `delta`. llama-benchy times tokens by the chunks that carry text, so it
would see one token at the very end and measure no decode speed at all.

The relay forwards every request unchanged and passes every byte of the response through, except that a
streamed chunk whose choice carries token ids and no text gets `delta.content = MARK`. Each marked chunk
is a real token emission of the engine, relayed at the time it arrived; nothing is invented. It is used
only for random-weight runs (the matrix's `random_weights: true`, `sparkserve level 4 --token-relay`), and
the run's metadata records it with the number of chunks it marked. Overhead: one local hop and one JSON
round trip per streamed chunk, the same for every configuration.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARK = "\u00b7"  # what a marked chunk's delta.content says (a middle dot)
_HOP_HEADERS = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding"}


@dataclass
class RelayStats:
    requests: int = 0
    streamed_chunks: int = 0
    marked_chunks: int = 0
    marked_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "streamed_chunks": self.streamed_chunks,
            "marked_chunks": self.marked_chunks,
            "marked_tokens": self.marked_tokens,
            "errors": self.errors[:10],
        }


_EMPTY_DELTA = b'"delta":{}'
_MARKED_DELTA = b'"delta":' + json.dumps({"content": MARK}).encode()
_IDS = re.compile(rb'"token_ids":\[([0-9, ]*)\]')


def mark_line(line: bytes) -> tuple[bytes, int]:
    """One SSE line: (the line to send, token ids marked). Lines without token ids pass through."""
    if not line.startswith(b"data:") or b'"token_ids"' not in line:
        return line, 0
    if line.count(_EMPTY_DELTA) == 1 and line.count(b'"token_ids":[') == 1:
        # vLLM's usual shape (one choice, `"delta":{}`): no JSON round trip on the hot path
        m = _IDS.search(line)
        n = len(m.group(1).split(b",")) if m and m.group(1).strip() else 0
        return (line.replace(_EMPTY_DELTA, _MARKED_DELTA), n) if n else (line, 0)
    try:
        obj = json.loads(line[5:])
    except ValueError:
        return line, 0
    marked = 0
    for choice in obj.get("choices") or []:
        ids = choice.get("token_ids")
        if not isinstance(ids, list) or not ids:
            continue
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        if any(delta.get(k) for k in ("content", "reasoning", "reasoning_content", "tool_calls")):
            continue
        delta["content"] = MARK
        marked += len(ids)
    if not marked:
        return line, 0
    end = b"\r\n" if line.endswith(b"\r\n") else b"\n"
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + end, marked


@contextmanager
def token_relay(upstream: str, timeout_s: float = 900) -> Iterator[tuple[str, RelayStats]]:
    """Run the relay on 127.0.0.1 for the block: yields (its base URL, counters). `upstream` is the
    server root, e.g. http://127.0.0.1:8000 (a /v1 suffix is kept on the relay's URL too)."""
    u = urllib.parse.urlsplit(upstream)
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"the token relay forwards plain http only, not {upstream!r}")
    up_host, up_port = u.hostname, u.port or 80
    suffix = u.path.rstrip("/")
    stats = RelayStats()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; streamed bodies end at close

        def setup(self) -> None:
            super().setup()
            # small writes must leave at once (Nagle + delayed ACK would hold a token up to ~40 ms)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _forward(self) -> None:
            with stats._lock:
                stats.requests += 1
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            conn = http.client.HTTPConnection(up_host, up_port, timeout=timeout_s)
            started = False
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                ctype = resp.getheader("Content-Type", "")
                self.send_response(resp.status, resp.reason)
                started = True
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP_HEADERS:
                        self.send_header(k, v)
                if "text/event-stream" not in ctype:
                    data = resp.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.end_headers()
                pending = b""
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    out, n = mark_line(line)
                    if line.startswith(b"data:"):
                        with stats._lock:
                            stats.streamed_chunks += 1
                            if n:
                                stats.marked_chunks += 1
                                stats.marked_tokens += n
                    pending += out
                    if line.strip() == b"":  # an SSE event ends with a blank line: send it in one write
                        self.wfile.write(pending)
                        self.wfile.flush()
                        pending = b""
                if pending:
                    self.wfile.write(pending)
                    self.wfile.flush()
            except (OSError, http.client.HTTPException) as exc:
                with stats._lock:
                    stats.errors.append(f"{self.command} {self.path}: {exc}")
                if not started:
                    with contextlib.suppress(OSError):
                        self.send_error(502, f"relay: {exc}")
            finally:
                conn.close()

        do_GET = _forward
        do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}{suffix}", stats
    finally:
        srv.shutdown()
        srv.server_close()
