"""levels.server / levels.matrix: the server's process group is stopped whole, a pid file marks it."""

from __future__ import annotations

import os
import re
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sparkserve_lab.levels import matrix
from sparkserve_lab.levels.server import Server

from sparkserve.errors import SparkserveError

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


ROOT = Path(__file__).resolve().parents[2]


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
    m = tmp_path / "m.yaml"
    m.write_text("profile: spark\ntokenizer: x\nconfigurations:\n  - name: a\n")
    with pytest.raises(SparkserveError, match="no configuration b"):
        matrix.run(m, tmp_path / "store", ROOT, ["b"], tmp_path / "work")


def _matrix(tmp_path: Path, text: str) -> Path:
    m = tmp_path / "m.yaml"
    m.write_text("profile: spark\ntokenizer: x\n" + text)
    return m


@pytest.mark.parametrize("text,message", [
    ("configurations:\n  - profile: no-such\n", "no serving profile 'no-such'"),
    ("configurations:\n  - set: {MOE_BACKNED: marlin}\n", "did you mean MOE_BACKEND"),
    ("configurations:\n  - set: {MOE_BACKEND: cutlass}\n", "MOE_BACKEND='cutlass': must be one of"),
    ("configurations:\n  - set: {MOE_BACKEND: cutlass-mxfp8, SPARKSERVE_TARGET: hopper}\n",
     "does not run on SPARKSERVE_TARGET=hopper"),
    ("model: x\nconfigurations:\n  - name: a\n", "not written by hand"),
    ("configurations:\n  - name: a\n    args: [--enforce-eager]\n", "not written by hand"),
    ("configurations:\n  - name: a\n  - name: a\n", "named twice"),
    ("configurations:\n  - name: a\n  - set: {KV_CACHE_DTYPE: fp8}\n", "resolves to the same server as a"),
])
def test_a_bad_matrix_is_refused_before_any_server(tmp_path: Path, text: str, message: str) -> None:
    """The profile's own message, and no server started (the work directory stays empty)."""
    with pytest.raises(SparkserveError, match=re.escape(message)):
        matrix.run(_matrix(tmp_path, text), tmp_path / "store", ROOT, None, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_an_uncovered_claim_is_refused(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[profile_rule]]\nname = "base"\nwhen = { target = "spark" }\n'
                     'must = { moe = [".+"] }\n')
    m = _matrix(tmp_path, f"kernel_rules: {rules}\nconfigurations:\n  - name: a\n")
    with pytest.raises(SparkserveError, match=r"no kernel rule .* checks .*MOE_BACKEND=cutlass-mxfp8"):
        matrix.run(m, tmp_path / "store", ROOT, None, tmp_path / "work")


def test_a_configuration_becomes_the_entrypoint_command(tmp_path: Path) -> None:
    from sparkserve.serving import flags, profiles

    data = matrix.load(_matrix(tmp_path, "set: {MAX_MODEL_LEN: '8192'}\nserver: {port: 8123, python: py}\n"
                               "configurations:\n  - set: {MOE_BACKEND: marlin}\n"))
    (e,) = matrix.entries(data, ROOT, ROOT / "lab" / "configs" / "engine-kernels.toml")
    assert e.name == "spark+MOE_BACKEND=marlin"
    srv = matrix.server_for(e, data["server"], tmp_path)
    want = profiles.resolve("spark", ROOT, {"MAX_MODEL_LEN": "8192", "SPARKSERVE_PORT": "8123"},
                            {"MOE_BACKEND": "marlin"})
    assert srv.command == flags.vllm_argv(want.profile, python="py", host="127.0.0.1")
    assert srv.command[srv.command.index("--moe-backend") + 1] == "marlin"
    assert srv.env["VLLM_FLASHINFER_SINK_DECODE"] == "xqa" and srv.base_url == "http://127.0.0.1:8123"
    assert srv.env["HF_HUB_OFFLINE"] == "1"  # offline unless the profile says otherwise, as the entrypoint
