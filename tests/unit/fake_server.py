"""A stand-in for vLLM's API server under the entrypoint's supervisor (tests/unit/test_supervise.py).

    python fake_server.py MODE PIDFILE [PORT]

Every mode forks a helper first (as vLLM's engine core and resource tracker are), which writes its pid to
PIDFILE, keeps the inherited stdout open and sleeps; then:
    die            the server kills itself with SIGKILL (the helper is left an orphan holding the pipe)
    die-stubborn   the same, with a helper that ignores SIGTERM
    hang           the server answers GET /health on 127.0.0.1:PORT with 200 three times, then stops
                   itself (SIGSTOP: a hung server)
    quiet          the server never listens and sleeps
    peer-lost      the server prints what vLLM's engine prints when another rank of a cluster is gone
                   (a line a judge reads) and sleeps
    stop-words     the same line, printed only on SIGTERM (as a stopping cluster's ranks print it), then
                   the server exits 0
"""

from __future__ import annotations

import http.server
import os
import signal
import sys
import threading
import time
from pathlib import Path


def helper(pidfile: str, ignore_term: bool) -> None:
    if os.fork() != 0:
        return
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    print("helper up", flush=True)
    time.sleep(300)
    os._exit(0)


def serve_health(port: int, answers: int) -> None:
    count = {"n": 0}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            count["n"] += 1
            self.send_response(200)
            self.end_headers()
            if count["n"] >= answers:
                os.kill(os.getpid(), signal.SIGSTOP)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()


PEER_LOST = "(EngineCore_DP0 pid=7) TimeoutError: RPC call to execute_model timed out."


def say_on_term(line: str) -> None:
    def term(signum: int, frame: object) -> None:
        print(line, flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, term)


def main(mode: str, pidfile: str, port: str = "0") -> None:
    helper(pidfile, ignore_term=mode == "die-stubborn")
    while not os.path.exists(pidfile) or not Path(pidfile).read_text():
        time.sleep(0.01)
    print("server up", flush=True)
    if mode in ("die", "die-stubborn"):
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        serve_health(int(port), answers=3)
    if mode == "peer-lost":
        print(PEER_LOST, flush=True)
    if mode == "stop-words":
        say_on_term(PEER_LOST)
    time.sleep(300)


if __name__ == "__main__":
    main(*sys.argv[1:])
