"""`metrics check`: the metrics profile's Prometheus, scraping serve and the host, or why not.

    sparkserve metrics check [--prometheus URL] [--wait S]
        Prometheus's targets (serve's /metrics, node-exporter) each up, or what stops the scrape and what to
        do; exit 0 all up (or serve still loading its model), 1 a target down, 3 Prometheus does not answer.
        Compose runs it as the one-shot `metrics-check` of the metrics profile (docs/METRICS.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from sparkserve.cli.common import FAILED, OK
from sparkserve.progress import say


def cmd_check(a: argparse.Namespace) -> int:
    from sparkserve.metrics import check

    findings = check.check(a.prometheus, a.wait)
    for f in findings:
        print(f"  {f.line()}")
    if check.ok(findings):
        starting = [f.target.job for f in findings if f.state == check.STARTING]
        up = ", ".join(f.target.job for f in findings if f.state == check.UP)
        say(f"metrics check: Prometheus scrapes {up}" + (f"; {', '.join(starting)} still starting" if starting
                                                        else ""))
        return OK
    say("metrics check: FAILED: " + "; ".join(f"{f.target.job} {f.state}" for f in findings
                                             if f.state == check.DOWN) + " (above: why, and what to do)")
    return FAILED


def register(sub: Any) -> None:
    p = sub.add_parser("metrics", help="the metrics profile: does Prometheus scrape serve and the host?") \
        .add_subparsers(dest="what", required=True)
    sp = p.add_parser("check", help="each Prometheus target up, or why not and what to do")
    sp.add_argument("--prometheus", default="http://127.0.0.1:9090",
                    help="Prometheus's URL (http://127.0.0.1:9090, the profile's loopback port; in compose: "
                         "http://prometheus:9090)")
    sp.add_argument("--wait", type=float, default=30,
                    help="seconds to wait for Prometheus and for every target to be up (30)")
    sp.set_defaults(func=cmd_check)
