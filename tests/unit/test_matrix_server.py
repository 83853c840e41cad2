"""levels.server / levels.matrix: the server's process group is stopped whole, a pid file marks it."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.harness.levels import matrix
from sparkserve.harness.levels.server import Server

# A stand-in server: a child in its process group that ignores SIGTERM, then /v1/models on PORT.
FAKE = textwrap.dedent(
    """
    import json, signal, subprocess, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    open(sys.argv[2], "w").write(str(child.pid))
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a): pass
    HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_kills_the_whole_group(tmp_path: Path) -> None:
    port, child_file = _free_port(), tmp_path / "child.pid"
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    srv = Server(
        [sys.executable, str(script), str(port), str(child_file)], {}, tmp_path / "s.log",
        f"http://127.0.0.1:{port}",
    )
    srv.start(60)
    assert srv.pid_file.read_text().strip() == str(srv.pid)
    child = int(child_file.read_text())
    assert _alive(child)
    t = time.monotonic()
    srv.stop(grace_s=2)
    assert time.monotonic() - t < 30
    assert not _alive(child), "a worker that ignores SIGTERM survived"
    assert not srv.pid_file.exists()


def test_only_names_a_known_configuration(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    m = tmp_path / "m.yaml"
    m.write_text("model: x\ntokenizer: x\nconfigurations:\n  - name: a\n")
    with pytest.raises(SparkserveError, match="no configuration b"):
        matrix.run(m, tmp_path / "store", tmp_path, ["b"], tmp_path / "work")
