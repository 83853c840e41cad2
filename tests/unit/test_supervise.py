"""The entrypoint's supervisor with real processes: whatever of the server dies or hangs, the supervisor
ends within a bound and leaves nothing of the server running, so the container's restart policy brings it
back. The server is tests/unit/fake_server.py; the supervisor runs as a process of its own, as the
entrypoint does in the container."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkserve.serving import health, preflight

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_server.py")


def alive(pid: int) -> bool:
    """Running (a zombie is dead; it only waits for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def supervisor(mode: str, pidfile: Path, *, port: int = 0, interval: float = 0.2,
               grace: float = 1.0, dog: str = "", judge: str = "None") -> subprocess.Popen[str]:
    """The supervisor as a process of its own; `dog` and `judge`: Python expressions (default: the
    /health watchdog on `port`, no judge)."""
    argv = [sys.executable, str(FAKE), mode, str(pidfile), str(port)]
    if not dog:
        dog = f"supervise.Watchdog('http://127.0.0.1:{port}/health', {interval}, 3, 0.3)" if port else "None"
    code = ("import sys; from sparkserve.serving import rankwatch, supervise; "
            f"sys.exit(supervise.run({argv!r}, lambda line, now: [], {dog}, grace_s={grace}, judge={judge}))")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def finish(proc: subprocess.Popen[str], pidfile: Path, bound: float) -> tuple[int, str, float]:
    """The supervisor's status, output and time to exit; the helper is killed whatever happens."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the supervisor did not end within {bound} s")
    finally:
        if pidfile.exists() and pidfile.read_text():
            helper = int(pidfile.read_text())
            still = alive(helper)
            if still:
                os.kill(helper, signal.SIGKILL)
            assert not still, "the server's helper (its engine core) was left running"
    return proc.returncode, out + err, time.monotonic() - t0


@pytest.mark.parametrize(("mode", "bound"), [("die", 5.0), ("die-stubborn", 8.0)])
def test_a_killed_server_ends_the_supervisor_though_an_orphan_holds_its_output(
        tmp_path: Path, mode: str, bound: float) -> None:
    """kill -9 of vLLM's API server leaves its engine core holding the output pipe: the supervisor used to
    wait on that pipe forever. Now it returns the server's status (137) within the grace (1 s here) plus
    the drain, and the orphan is gone (SIGTERM, or SIGKILL after the grace when it ignores SIGTERM)."""
    pidfile = tmp_path / "helper.pid"
    rc, out, took = finish(supervisor(mode, pidfile), pidfile, bound)
    assert rc == 128 + signal.SIGKILL, out
    assert "server up" in out and "helper up" in out
    assert ("did not end within 1 s of SIGTERM: SIGKILL" in out) == (mode == "die-stubborn"), out
    assert took < bound


def test_a_hung_server_is_stopped_by_the_watchdog_with_exit_8(tmp_path: Path) -> None:
    """The server answered /health, then hangs (stopped, so SIGTERM cannot end it): three missed checks
    end the whole group (SIGKILL after the grace) and the supervisor exits with EXIT_WATCHDOG."""
    pidfile = tmp_path / "helper.pid"
    port = free_port()
    rc, out, _ = finish(supervisor("hang", pidfile, port=port), pidfile, 15.0)
    assert rc == preflight.EXIT_WATCHDOG == 8, out
    assert f"watchdog: http://127.0.0.1:{port}/health did not answer 3 checks in a row" in out, out
    assert not health.probe(f"http://127.0.0.1:{port}/health", 0.5)


def test_the_watchdog_counts_nothing_before_the_first_answer(tmp_path: Path) -> None:
    """A start takes minutes before /health answers: a server that never answered is not stopped (here 15
    checks), and SIGTERM still reaches it."""
    pidfile = tmp_path / "helper.pid"
    proc = supervisor("quiet", pidfile, port=free_port(), interval=0.1)
    time.sleep(2.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    rc, out, _ = finish(proc, pidfile, 10.0)
    assert rc == 128 + signal.SIGTERM, out
    assert "watchdog" not in out


def test_the_health_probe_asks_the_local_server_never_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        port = server.server_address[1]
        assert health.url({"SPARKSERVE_PORT": str(port)}) == f"http://127.0.0.1:{port}/health"
        assert health.probe(f"http://127.0.0.1:{port}/health", 2.0)
        assert not health.probe(f"http://127.0.0.1:{port}/other", 2.0)
    finally:
        server.shutdown()


HEAD_JUDGE = "rankwatch.RankWatch(2, 0).judge"


def test_a_lost_rank_stops_the_head_with_exit_9_naming_it(tmp_path: Path) -> None:
    """vLLM's engine said another rank is gone: the head used to wait for vLLM's own way down (which can
    hang on the dead peer) and exit with vLLM's status; now it stops the whole group at once with
    EXIT_RANK, saying which rank and the line that showed it."""
    pidfile = tmp_path / "helper.pid"
    rc, out, took = finish(supervisor("peer-lost", pidfile, judge=HEAD_JUDGE), pidfile, 8.0)
    assert rc == preflight.EXIT_RANK == 9, out
    assert "cluster: lost node rank 1: it did not answer the engine's call (vLLM on node rank 0 printed: " \
        in out
    assert "RPC call to execute_model timed out" in out and "stopping the server (exit 9;" in out
    assert took < 8.0


def test_what_a_server_prints_on_its_way_down_is_not_judged(tmp_path: Path) -> None:
    """A stopped cluster's ranks lose each other as they stop: that is no lost rank."""
    pidfile = tmp_path / "helper.pid"
    proc = supervisor("stop-words", pidfile, judge=HEAD_JUDGE)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    rc, out, _ = finish(proc, pidfile, 10.0)
    assert rc == 0 and "RPC call to execute_model timed out" in out and "cluster: lost" not in out, out


def test_a_worker_whose_head_stops_answering_exits_9(tmp_path: Path) -> None:
    """A headless worker has no /health and prints nothing when its head dies (it waits for the head's
    next call): its watchdog asks the head's rendezvous port, and once that answered, three misses end
    the worker with EXIT_RANK. Before the head answered, nothing is counted (the head may start later)."""
    pidfile = tmp_path / "helper.pid"
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    port = head.getsockname()[1]
    dog = (f"supervise.Watchdog('tcp://127.0.0.1:{port}', 0.2, 3, 0.3, code=9, "
           "what='cluster: lost node rank 0 (the head): its rendezvous')")
    proc = supervisor("quiet", pidfile, dog=dog)
    time.sleep(1.5)  # not listening yet: misses before the first answer do not count
    assert proc.poll() is None
    head.listen()
    time.sleep(1.0)  # answered
    head.close()
    rc, out, _ = finish(proc, pidfile, 10.0)
    assert rc == preflight.EXIT_RANK, out
    assert f"cluster: lost node rank 0 (the head): its rendezvous: tcp://127.0.0.1:{port} did not answer 3 " \
           "checks in a row" in out, out


def test_the_tcp_probe_asks_for_a_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert health.probe(f"tcp://127.0.0.1:{port}", 1.0)
    assert not health.probe(f"tcp://127.0.0.1:{port}", 1.0)
    assert not health.probe("tcp://127.0.0.1", 1.0)  # no port: nothing to ask
