"""The benchmark text, served on 127.0.0.1 so llama-benchy never goes to the network.

llama-benchy only fetches `--book-url` over HTTP (no file://) and caches it under
~/.cache/llama-benchy/<md5(url)>.txt; the driver gives it a private HOME, so no stale cache is read.
Default text: `tinymodel.corpus` (deterministic pseudo-English, ~0.75 MB). A real book can be given
(`--book FILE`), e.g. the Gutenberg Sherlock Holmes that llama-benchy uses online; the metadata records
the sha256 of whichever text was used.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEFAULT_WORDS = 150_000


def default_text() -> str:
    from sparkserve.testing.tinymodel import corpus

    return corpus(DEFAULT_WORDS, seed=1)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@contextmanager
def serve(text: str) -> Iterator[str]:
    """Serve `text` at http://127.0.0.1:<free port>/book-<sha12>.txt for the duration of the block."""
    body = text.encode()
    name = f"/book-{sha256(text)[:12]}.txt"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != name:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{name}"
    finally:
        server.shutdown()
        server.server_close()


def load(path: Path | None) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path else default_text()
