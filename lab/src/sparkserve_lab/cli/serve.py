"""`sparkserve-lab serve`: one server of a profile, started as the lab starts every server (the entrypoint
in the profile's container environment: sparkserve_lab/server.py), for the GPU scripts and CI.

    sparkserve-lab serve --profile P [--set VAR=VALUE ...] [--port N] [--ready-file F]   serve until stopped
    sparkserve-lab serve --profile P [--set VAR=VALUE ...] -- COMMAND ...       COMMAND against it, then stop

COMMAND runs once the server answers /health and /v1/models, with SERVER_URL, SERVER_PID (vLLM's API
server), SERVER_LOG and SERVER_READY_S in its environment; its exit status is the verb's. Without one,
the verb serves until SIGTERM or SIGINT (0) or until the server exits (1); `--ready-file` is written at
ready (JSON: url, pid, entrypoint_pid, log, plan, ready_s). Either way the server's process groups are
stopped before the verb exits. A cluster's worker (--set SPARKSERVE_NODE_RANK=1 ...: no API server) is
ready once its entrypoint started vLLM; serve it until stopped, then start the head around the command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, root
from sparkserve.progress import say


def _stop_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0 if signum in (signal.SIGTERM, signal.SIGINT) else 128 + signum)


def cmd_serve(a: argparse.Namespace) -> int:
    from sparkserve.serving import profiles
    from sparkserve_lab.server import server_for, serving

    repo = root()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    common = {"SPARKSERVE_LISTEN": a.host, "SPARKSERVE_PORT": str(a.port)}
    res = profiles.resolve(a.profile, repo, common, profiles.parse_set(a.set))
    work = Path(a.work) if a.work else repo / ".work" / "serve"
    server = server_for(res, work, a.name or res.label, python=a.python, extra_env=profiles.parse_set(a.env),
                        root=repo)
    if a.log:
        server.log = Path(a.log)
    previous = {s: signal.signal(s, _stop_on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        with serving(server, a.ready_timeout, a.grace) as srv:
            ready_s = srv.ready_s or 0.0
            say(f"serve: ready after {ready_s:.1f} s: {srv.base_url} (pid {srv.pid}, log {srv.log})")
            info: dict[str, Any] = {"url": srv.base_url, "pid": srv.pid,
                                    "entrypoint_pid": srv.proc.pid if srv.proc else None, "log": str(srv.log),
                                    "plan": str(srv.plan_file), "ready_s": round(ready_s, 1)}
            if a.ready_file:
                Path(a.ready_file).write_text(json.dumps(info, indent=1) + "\n")
            if command:
                env = {**os.environ, "SERVER_URL": srv.base_url, "SERVER_PID": str(srv.pid),
                       "SERVER_LOG": str(srv.log), "SERVER_READY_S": f"{ready_s:.1f}"}
                return subprocess.run(command, env=env, check=False).returncode
            while srv.alive():
                time.sleep(1)
            status = srv.proc.poll() if srv.proc else None
            say(f"serve: the server exited by itself (status {status}); log {srv.log}")
            return FAILED
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return OK


def register(sub: Any) -> None:
    sp = sub.add_parser("serve", help="serve a profile as the lab serves it (until stopped, or around a "
                                      "command)")
    sp.add_argument("--profile", required=True, help="a serving profile (profiles/NAME.env or a path)")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE",
                    help="a profile variable, or an engine variable as a profile file may set one; "
                         "repeatable")
    sp.add_argument("--env", action="append", metavar="VAR=VALUE",
                    help="an engine variable of the server besides the profile (CUDA_VISIBLE_DEVICES, "
                         "HOME, ...); repeatable")
    sp.add_argument("--host", default="127.0.0.1", help="SPARKSERVE_LISTEN (127.0.0.1)")
    sp.add_argument("--port", type=int, default=8000, help="SPARKSERVE_PORT (8000)")
    sp.add_argument("--python", default=sys.executable, help="the Python that runs the entrypoint")
    sp.add_argument("--work", help="the folder of its log, plan, caches and state (<repo>/.work/serve)")
    sp.add_argument("--name", help="the log's name (default: the profile and its overrides)")
    sp.add_argument("--log", help="the server's log (default: <work>/<name>-<time>.log)")
    sp.add_argument("--ready-timeout", type=float, default=1800, help="seconds to wait for ready (1800)")
    sp.add_argument("--grace", type=float, default=30,
                    help="seconds between SIGTERM and SIGKILL when stopping (30)")
    sp.add_argument("--ready-file", help="write the server's url, pids, log and plan here (JSON) at ready")
    sp.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- COMMAND ...: run against the server, then stop it (after every option)")
    sp.set_defaults(func=cmd_serve)
