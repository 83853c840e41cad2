"""Verb `doctor`: what this host lacks for `docker compose up serve` (src/sparkserve/serving/host.py)."""

from __future__ import annotations

import argparse
from typing import Any

from sparkserve.cli.common import FAILED, OK, print_json
from sparkserve.progress import say
from sparkserve.serving import host


def cmd_doctor(a: argparse.Namespace) -> int:
    checks = host.check_all(exe=a.docker)
    lines, summary, status = host.report(checks)
    if a.json_output:
        print_json({"checks": [c.to_dict() for c in checks], "summary": summary, "ok": not status})
    else:
        for line in lines:
            print(line)
    say(summary)
    return FAILED if status else OK


def register(sub: Any) -> None:
    sp = sub.add_parser("doctor", help="check this host for docker compose up serve (driver, toolkit, disk)")
    sp.add_argument("--docker", default="docker", help="the docker CLI (default: docker)")
    sp.set_defaults(func=cmd_doctor, json_data=True)
