"""The one way the lab starts a server: the image's entrypoint (`python -m sparkserve.serving`) in the
environment a container of the profile starts with (serving/launch.py's container_environment), so what
the lab measures is what the entrypoint starts for a user: its checks, caches and supervisor included.

A start is two runs of the entrypoint: `--plan` (every check of a start, then the launch plan: vLLM's
command line and environment), kept beside the log as `<log>.plan.json`; then the entrypoint serves, in
a process group of its own (`<log>.pid` holds its id), until /health and /v1/models answer; a cluster's
worker (SPARKSERVE_NODE_RANK > 0: no API server) until its entrypoint has started vLLM, as the head,
started after it, waits for it. A stop ends
that group (the entrypoint stops vLLM's own group in turn: serving/supervise.py), then whatever is left
of the process groups below it.

    with serving(server_for(res, work, "spark"), ready_timeout_s=1800) as srv:
        Client(srv.base_url) ...
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import Client
from sparkserve.progress import say
from sparkserve.serving import health, launch, preflight, profiles

# Where a harness-started server keeps what a container keeps in its volumes, unless the profile or
# the harness settings name a folder: its work directory, never the host's /var.
VOLUMES = {"SPARKSERVE_CACHE_DIR": "cache", "SPARKSERVE_STATE_DIR": "state"}
PLAN_TIMEOUT_S = 600.0


class NotReady(SparkserveError):
    """The server did not become ready: the entrypoint refused it, it exited, or the wait ran out."""


class Server:
    """The entrypoint serving one configuration: `command` run in `env`, its output in `log`."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path, base_url: str) -> None:
        self.name, self.command, self.env, self.log, self.base_url = name, command, env, log, base_url
        self.plan: launch.LaunchPlan | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._engine: int | None = None
        self.ready_s: float | None = None  # seconds from the entrypoint's start to ready

    @property
    def pid_file(self) -> Path:
        return self.log.with_name(self.log.name + ".pid")

    @property
    def plan_file(self) -> Path:
        return self.log.with_name(self.log.name + ".plan.json")

    @property
    def pid(self) -> int | None:
        """vLLM's API server (the entrypoint's child: what levels 3-5 watch and measure), else the
        entrypoint while vLLM is not started."""
        if self.proc is None:
            return None
        if self._engine is None:
            children = [p for p, (ppid, _pgrp) in processes().items() if ppid == self.proc.pid]
            self._engine = min(children) if children else None
        return self._engine or self.proc.pid

    @property
    def vllm_command(self) -> list[str]:
        """vLLM's command line as the entrypoint starts it (the plan's); [] before the plan."""
        return list(self.plan.argv) if self.plan else []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def make_plan(self) -> launch.LaunchPlan:
        """The entrypoint's launch plan for this environment (`--plan`), kept beside the log; a refusal is
        a SparkserveError with the entrypoint's exit code and message."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run([*self.command, launch.PLAN], env=self.env, capture_output=True, text=True,
                                  timeout=PLAN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise NotReady(f"{self.name}: the entrypoint's --plan did not end within "
                                  f"{PLAN_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            raise NotReady(f"{self.name}: the entrypoint refuses to start it ({_meaning(done.returncode)}):"
                                  f" {_tail(done.stderr)}")
        try:
            self.plan = launch.LaunchPlan.from_public(json.loads(done.stdout))
        except (ValueError, KeyError, AttributeError) as exc:
            raise NotReady(f"{self.name}: the entrypoint's --plan printed no plan ({exc}): "
                                  f"{_tail(done.stdout)}") from None
        self.plan_file.write_text(json.dumps(self.plan.public(), indent=1) + "\n")
        return self.plan

    def start(self, ready_timeout_s: float) -> float:
        """Plan, start, and wait until ready (/health and /v1/models; a cluster's worker: vLLM started);
        returns the seconds from start to ready."""
        plan = self.make_plan()
        # (a worker's watchdog URL is the head's rendezvous, which may rightly answer already)
        if not plan.worker and health.probe(plan.watchdog_url, 5):
            # a server this start did not make would answer the readiness checks for it
            raise NotReady(f"{self.name}: something already answers on {plan.watchdog_url}: stop it or "
                           "use another port")
        say(f"  server {self.name}: {' '.join(plan.argv)}")
        with self.log.open("wb") as f:
            self.proc = subprocess.Popen(self.command, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        # start_new_session: the entrypoint leads its own process group (pgid = pid); a supervisor that
        # outlives the lab stops it with `kill -- -<pid>`, and the entrypoint then stops vLLM's group.
        self.pid_file.write_text(f"{self.proc.pid}\n")
        t0 = time.monotonic()
        try:
            if plan.worker:
                self._wait_vllm(t0 + ready_timeout_s)
            else:
                self._wait_health(t0 + ready_timeout_s, plan.watchdog_url)
                Client(self.base_url).wait_ready(max(1.0, ready_timeout_s - (time.monotonic() - t0)),
                                                 self.alive)
        except SparkserveError as exc:
            status = self.proc.poll()
            if status is None:
                raise NotReady(f"{self.name}: {exc}") from exc
            raise NotReady(f"{self.name}: the server exited before it was ready ({_meaning(status)}); "
                                  f"log {self.log}: {_tail(self.log.read_text(errors='replace'))}") from exc
        waited = self.ready_s = time.monotonic() - t0
        say(f"  server {self.name} ready after {waited:.0f}s (pid {self.pid}, log {self.log})")
        return waited

    def _wait_vllm(self, deadline: float) -> None:
        """Until the entrypoint, its checks passed, has started vLLM (its child)."""
        while self.proc is not None and self.pid == self.proc.pid:
            if not self.alive():
                raise SparkserveError("the server process exited before it started vLLM")
            if time.monotonic() > deadline:
                raise SparkserveError("the entrypoint did not start vLLM before the start's deadline")
            time.sleep(0.5)

    def _wait_health(self, deadline: float, url: str) -> None:
        while not health.probe(url, 5):
            if not self.alive():
                raise SparkserveError("the server process exited before it became ready")
            if time.monotonic() > deadline:
                raise SparkserveError(f"{url} did not answer before the start's deadline")
            time.sleep(1)

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM the entrypoint's group (it stops vLLM's group and exits); after `grace_s`, SIGKILL it
        and every process group below it; wait until none of them is left."""
        if self.proc is None:
            return
        groups = {self.proc.pid} | below(self.proc.pid)
        if self.proc.poll() is None:
            _signal(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                groups |= below(self.proc.pid)
                for g in groups:
                    _signal(g, signal.SIGKILL)
                self.proc.wait(timeout=10)
        for g in sorted(groups):
            if not _wait_group_gone(g, 10):
                _signal(g, signal.SIGKILL)
                _wait_group_gone(g, 10)
        self.pid_file.unlink(missing_ok=True)


def server_for(res: profiles.Resolved, work: Path, name: str, python: str = sys.executable,
               extra_env: Mapping[str, str] | None = None, host: Mapping[str, str] | None = None,
               root: Path | None = None) -> Server:
    """The server of a resolved profile (not started): the entrypoint run by `python` in the container
    environment of `res` (`extra_env`: the harness's engine variables; `host`: the environment the
    lab runs in, default this process's), its volumes in `work` unless the profile names them, its log
    `<work>/<name>-<time>.log`."""
    root = root or profiles.entrypoint_root({})
    volumes = {var: str(work / sub) for var, sub in VOLUMES.items() if var not in res.env}
    env = launch.container_environment(res, root, os.environ if host is None else host,
                                       {**volumes, **(extra_env or {})})
    log = work / f"{name.replace('/', '_')}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    url = health.url(env).removesuffix("/health")
    return Server(name, launch.entrypoint_command(python), env, log, url)


@contextlib.contextmanager
def serving(server: Server, ready_timeout_s: float, grace_s: float = 30) -> Iterator[Server]:
    """The server started and ready inside the block, its process groups stopped after it (also when
    the start fails or the block raises)."""
    try:
        server.start(ready_timeout_s)
        yield server
    finally:
        server.stop(grace_s)


def _meaning(status: int) -> str:
    if status < 0:
        return f"signal {-status}"
    what = preflight.EXIT_CODES.get(status)
    return f"exit {status}" + (f": {what}" if what else "")


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _signal(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def processes() -> dict[int, tuple[int, int]]:
    """Live (not zombie) processes: pid -> (parent pid, process group)."""
    import psutil

    out: dict[int, tuple[int, int]] = {}
    for proc in psutil.process_iter(["ppid", "status"]):
        if proc.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            out[proc.pid] = (int(proc.info["ppid"] or 0), os.getpgid(proc.pid))
    return out


def below(pid: int) -> set[int]:
    """The process groups of every descendant of `pid` (vLLM's own, which the entrypoint starts in a
    session of its own)."""
    procs = processes()
    seen, todo, groups = {pid}, [pid], set()
    while todo:
        parent = todo.pop()
        for child, (ppid, pgrp) in procs.items():
            if ppid == parent and child not in seen:
                seen.add(child)
                todo.append(child)
                groups.add(pgrp)
    groups.discard(pid)
    return groups


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid`."""
    return [p for p, (_ppid, pgrp) in processes().items() if pgrp == pgid]


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True
