"""Whether the metrics profile's Prometheus scrapes serve and the host, and when not, why and what to do.

Run by compose's one-shot `metrics-check` (docker compose --profile metrics ...; docs/METRICS.md) and by
`sparkserve metrics check` on the host. It reads Prometheus's own view of its targets (/api/v1/targets)
and turns each scrape error into the project's words: serve not running in this compose project, still
loading, an API key file Prometheus cannot read, a key serve refuses. Standard library only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from sparkserve.errors import SparkserveError

# The jobs of metrics/prometheus.yml, and the compose service behind each.
JOBS = {"serve": "serve", "node": "node-exporter"}
UP, STARTING, DOWN = "up", "starting", "down"


@dataclass(frozen=True)
class Target:
    job: str
    url: str
    health: str  # Prometheus's: up, down, unknown (not scraped yet)
    error: str


# Causes of a DOWN target that waiting does not change: the check reports them at once. The others (not
# scraped yet, a name that does not resolve: its container may be being created) are waited out.
LASTING = ("key", "refused-key", "timeout", "other")


@dataclass(frozen=True)
class Finding:
    target: Target
    state: str  # UP, STARTING (not a failure: serve loads its model) or DOWN
    advice: str
    cause: str = ""  # of a DOWN target: unknown, missing, key, refused-key, absent, timeout, other

    @property
    def settled(self) -> bool:
        """Waiting longer would not change the verdict."""
        return self.state != DOWN or self.cause in LASTING

    def line(self) -> str:
        t = self.target
        head = f"{t.job} ({t.url}): {self.state}"
        if self.state == UP:
            return head
        return f"{head}: {self.advice}" + (f" (Prometheus: {t.error})" if t.error else "")


UNREADABLE_KEY = (
    "Prometheus cannot read the API key file (SPARKSERVE_API_KEY_FILE, the secret serve reads too): it runs "
    "as uid 65534 with group 10001 added, so make the file readable by group 10001, e.g. `sudo chgrp 10001 "
    "FILE && sudo chmod 0640 FILE` (serve, uid 10001, still reads it)")
REFUSED_KEY = (
    "{service} refused the key Prometheus sent: both read SPARKSERVE_API_KEY_FILE, so one of them started "
    "before the file changed; recreate both (`docker compose --profile metrics up -d --force-recreate "
    "prometheus serve`)")
SERVE_ABSENT = (
    "serve is not running in this compose project (its name does not resolve): start it with `docker "
    "compose up -d serve`; the metrics profile never starts or restarts it")
SERVE_STARTING = (
    "serve runs but vLLM does not answer on its port yet: it opens it once the model is loaded and the "
    "engine is warm (minutes; `docker compose ps serve` says starting); the panels fill from then on")


def classify(t: Target) -> Finding:
    """A target's state and what to do about it, from Prometheus's scrape error."""
    service = JOBS.get(t.job, t.job)
    err = t.error.lower()
    if t.health == "up":
        return Finding(t, UP, "")
    if t.health == "unknown" or not err:
        return Finding(t, DOWN, "not scraped yet: Prometheus scrapes every few seconds; run the check again",
                       "unknown")
    if "credentials" in err:
        return Finding(t, DOWN, UNREADABLE_KEY, "key")
    if "401" in err or "403" in err or "unauthorized" in err:
        return Finding(t, DOWN, REFUSED_KEY.format(service=service), "refused-key")
    if any(s in err for s in ("no such host", "server misbehaving", "name resolution", "lookup ")):
        if t.job == "serve":
            return Finding(t, DOWN, SERVE_ABSENT, "absent")
        return Finding(t, DOWN, f"{service} is not running: `docker compose --profile metrics up -d "
                                f"{service}`", "absent")
    if "connection refused" in err and t.job == "serve":
        return Finding(t, STARTING, SERVE_STARTING)
    if "deadline exceeded" in err or "timeout" in err:
        return Finding(t, DOWN, f"the scrape of {service} timed out: it is overloaded or hung (`docker "
                                f"compose ps {service}`, `docker compose logs {service}`)", "timeout")
    return Finding(t, DOWN, f"the scrape of {service} failed: `docker compose logs {service}` may say why",
                   "other")


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def targets(prometheus: str) -> list[Target]:
    base = prometheus.rstrip("/")
    try:
        data = json.loads(_get(f"{base}/api/v1/targets?state=active"))
        active = data["data"]["activeTargets"]
        return [Target(str(t["labels"].get("job", "")), str(t.get("scrapeUrl", "")), str(t.get("health", "")),
                       str(t.get("lastError", ""))) for t in active]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        raise SparkserveError(f"cannot read Prometheus's targets at {base}: {exc}") from None


def wait_ready(prometheus: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    last = ""
    while True:
        try:
            _get(prometheus.rstrip("/") + "/-/ready")
            return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise SparkserveError(f"Prometheus at {prometheus} did not answer within {wait:.0f} s ({last}): "
                                  "is the metrics profile up (`docker compose --profile metrics up -d`)? Its "
                                  "log: `docker compose logs prometheus`")
        time.sleep(1)


def check(prometheus: str, wait: float = 30, poll: float = 2) -> list[Finding]:
    """Each target of JOBS, once every verdict is settled or `wait` seconds have passed (serve may be
    created a few seconds after Prometheus: a name that does not resolve yet is not judged before the wait
    is over)."""
    deadline = time.monotonic() + wait
    wait_ready(prometheus, wait)
    while True:
        found = [classify(t) for t in targets(prometheus) if t.job in JOBS]
        for job in JOBS:
            if not any(f.target.job == job for f in found):
                # (a Prometheus that just started lists its targets a few seconds later: waited for)
                found.append(Finding(Target(job, "", "", ""), DOWN,
                                     "no such job in Prometheus's configuration (metrics/prometheus.yml)",
                                     "missing"))
        if all(f.settled for f in found) or time.monotonic() >= deadline:
            return sorted(found, key=lambda f: list(JOBS).index(f.target.job))
        time.sleep(poll)


def ok(findings: list[Finding]) -> bool:
    """Every target up, or serve still starting (not an error: its metrics come once it answers)."""
    return all(f.state in (UP, STARTING) for f in findings)
