"""`sparkserve-lab metrics`: the metrics profile's dashboards checked, not trusted (docs/METRICS.md).

    sparkserve-lab metrics dashboards [--vllm-source]      the dashboard JSON's schema, the declared
                                                          speculation-only panels, and (--vllm-source)
                                                          every vllm: metric against the pinned vLLM's sources
    sparkserve-lab metrics ci-config OUT --target JOB=HOST:PORT ...   metrics/prometheus.yml for CI
    sparkserve-lab metrics live --prometheus URL --server URL        a bounded load, then every panel's
                                                          query must return data (CI's serve-cpu phase)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, root
from sparkserve.errors import SparkserveError
from sparkserve.progress import say


def _folder(a: argparse.Namespace) -> Path:
    return Path(a.metrics) if a.metrics else root() / "metrics"


def cmd_dashboards(a: argparse.Namespace) -> int:
    from sparkserve_lab.metrics import dashboards, live

    folder = _folder(a)
    problems = dashboards.check_folder(folder / "grafana/dashboards", folder / "grafana/provisioning")
    boards = [dashboards.load(p) for p in dashboards.dashboard_files(folder / "grafana/dashboards")]
    problems += live.declared_problems(boards)
    n = sum(len(dashboards.queries(b)) for b in boards)
    if a.vllm_source:
        from sparkserve.supply import pins, sources

        sdist = sources.fetch(pins.load(root()), "vllm")
        known = dashboards.vllm_metric_names(sdist)
        for b in boards:
            problems += dashboards.unknown_vllm_metrics(b, known)
        say(f"metrics: the vllm: metrics of {n} queries checked against {sdist.name} ({len(known)} names)")
    for line in problems:
        print(f"  {line}")
    if problems:
        say(f"metrics: {len(problems)} problem(s) in the dashboards of {folder}")
        return FAILED
    say(f"metrics: {len(boards)} dashboard(s), {n} queries: valid")
    return OK


def cmd_ci_config(a: argparse.Namespace) -> int:
    from sparkserve_lab.metrics import live

    targets = {}
    for item in a.target:
        job, sep, address = item.partition("=")
        if not sep or not job or not address:
            raise SparkserveError(f"--target takes JOB=HOST:PORT, not {item!r}")
        targets[job] = address
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(live.ci_config(_folder(a) / "prometheus.yml", targets, a.scrape_interval))
    say(f"metrics: {out} (targets {targets}, every {a.scrape_interval})")
    return OK


def cmd_live(a: argparse.Namespace) -> int:
    from sparkserve_lab.metrics import live

    key = Path(a.api_key_file).read_text().strip() if a.api_key_file else None
    report = live.run(a.prometheus, a.server, _folder(a) / "grafana/dashboards", requests=a.requests,
                      concurrency=a.concurrency, max_tokens=a.max_tokens, rate_interval=a.rate_interval,
                      api_key=key or None)
    for r in report.results:
        print(r.line())
    for line in report.problems:
        print(f"  FAIL  {line}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    bad = [r for r in report.results if not r.ok]
    declared = sum(1 for r in report.results if r.expected != "data")
    say(f"metrics: {len(report.results) - len(bad)} of {len(report.results)} panel queries as expected "
        f"({len(report.results) - declared} with data, {declared} declared to need speculation and without "
        f"data here){'' if report.ok else ': FAILED'}")
    return OK if report.ok else FAILED


def register(sub: Any) -> None:
    group = sub.add_parser("metrics", help="the metrics profile's dashboards: schema, names, live queries")
    verbs = group.add_subparsers(required=True)

    def folder(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--metrics", metavar="DIR",
                        help="the metrics folder (default: the checkout's metrics/)")

    sp = verbs.add_parser("dashboards", help="the dashboards' JSON schema and declared panels (offline)")
    folder(sp)
    sp.add_argument("--vllm-source", action="store_true",
                    help="also every vllm: metric of the queries against the pinned vLLM's sources (its "
                         "sdist, fetched and verified like `sparkserve sources fetch`)")
    sp.set_defaults(func=cmd_dashboards)

    sp = verbs.add_parser("ci-config", help="metrics/prometheus.yml with other targets and interval (CI)")
    folder(sp)
    sp.add_argument("out", help="the file to write")
    sp.add_argument("--target", action="append", required=True, metavar="JOB=HOST:PORT",
                    help="the target of a job of metrics/prometheus.yml (one per job)")
    sp.add_argument("--scrape-interval", default="2s", help="every job's scrape interval (2s)")
    sp.set_defaults(func=cmd_ci_config)

    sp = verbs.add_parser("live", help="a bounded load, then every panel's query of every dashboard must "
                                       "return data from Prometheus")
    folder(sp)
    sp.add_argument("--prometheus", required=True, help="Prometheus's URL (http://127.0.0.1:9090)")
    sp.add_argument("--server", required=True, help="the vLLM server Prometheus scrapes (http://HOST:PORT)")
    sp.add_argument("--api-key-file", help="the server's API key, when it has one")
    sp.add_argument("--requests", type=int, default=16, help="completions of the load (16)")
    sp.add_argument("--concurrency", type=int, default=6,
                    help="at a time (6: more than the stand-in's MAX_NUM_SEQS 4, so some wait)")
    sp.add_argument("--max-tokens", type=int, default=16, help="tokens each completion generates (16)")
    sp.add_argument("--rate-interval", default="30s", help="Grafana's $__rate_interval for the queries (30s)")
    sp.add_argument("--json-out", help="the results as JSON")
    sp.set_defaults(func=cmd_live)
