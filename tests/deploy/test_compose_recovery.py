"""The serving container recovers by itself under compose: `kill -9` of vLLM's API server, of its engine
core or of the entrypoint ends the container, `restart: unless-stopped` starts it again, and it is healthy
again within RECOVERY_S, with what the volumes held still there. Before the supervisor ran vLLM in a group
of its own, a killed API server left the container running and unhealthy for good.

Run by scripts/ci/30-serve-cpu.sh against its running, healthy CPU stand-in (SPARKSERVE_RECOVERY_PROJECT
names that compose project; the other engine tests leave this file out: `-m "engine and not recovery"`).
Without SPARKSERVE_RECOVERY_PROJECT it brings up a project of its own (the command in docs/FRESH_CLONE.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import CPU_OVERRIDE
from tests.deploy.test_compose_up import Project, need

pytestmark = [pytest.mark.engine, pytest.mark.recovery]

# From the kill to healthy: the restart (at once: the container has run for more than 10 s) plus a start
# of the tiny CPU model, ~30 s on a quiet 2-core machine.
RECOVERY_S = 180
FIRST_START_S = 1500  # the compose override's start_period

# Inside the container: the entrypoint (the child of init), vLLM's API server (the entrypoint's child)
# and its engine core (the API server's child that is not multiprocessing's resource tracker); kill -9
# the one named by argv[1]. Prints the pids found as JSON.
FIND_AND_KILL = r"""
import json, os, signal, sys
procs = {}
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
        cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        continue
    procs[int(d)] = (ppid, cmd)
def children(pid):
    return [p for p, (pp, _) in procs.items() if pp == pid]
entry = [p for p, (pp, c) in procs.items() if pp == 1 and "sparkserve.serving" in c and "health" not in c]
api = [p for p in children(entry[0]) if "vllm" in procs[p][1]] if entry else []
core = sorted((p for p in children(api[0]) if "resource_tracker" not in procs[p][1]),
              key=lambda p: "EngineCore" not in procs[p][1]) if api else []
found = {"entrypoint": entry[:1], "api-server": api[:1], "engine-core": core[:1]}
print(json.dumps({k: v[0] if v else None for k, v in found.items()}), flush=True)
pid = found[sys.argv[1]]
if not pid:
    sys.exit(3)
os.kill(pid[0], signal.SIGKILL)
"""


def inspect(project: Project, what: str) -> str:
    docker = os.environ.get("DOCKER", "docker")
    cid = project("ps", "-a", "-q", "serve").stdout.strip()
    assert cid, "serve has no container"
    r = subprocess.run([docker, "inspect", "-f", what, cid], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def wait_healthy(project: Project, restarts: int, within: float) -> float:
    """Seconds until serve is healthy with `restarts` restarts behind it; fails after `within`."""
    t0 = time.monotonic()
    state = ""
    while time.monotonic() - t0 < within:
        state = inspect(project, "{{.RestartCount}} {{if .State.Health}}{{.State.Health.Status}}{{end}}")
        if state == f"{restarts} healthy":
            return time.monotonic() - t0
        assert int(state.split()[0]) <= restarts, f"serve restarted more than once: {state}"
        time.sleep(1)
    logs = project("logs", "--no-color", "--tail", "40", "serve")
    pytest.fail(f"serve not healthy within {within} s (restarts, health: {state})\n{logs.stdout}")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """The healthy CPU stand-in: CI's running project, or one of its own."""
    env = {"SPARKSERVE_IMAGE": need("SPARKSERVE_IMAGE"), "SPARKSERVE_MODEL_DIR": need("SPARKSERVE_MODEL_DIR")}
    files = ("docker-compose.yml", CPU_OVERRIDE)
    name = os.environ.get("SPARKSERVE_RECOVERY_PROJECT")
    if name:
        yield Project(files, env, name=name)
        return
    local = tmp_path_factory.mktemp("recovery") / "local.env"
    local.write_text("")
    project = Project(files, {**env, "SPARKSERVE_LOCAL_ENV": str(local)})
    try:
        r = project("up", "-d", "serve")
        assert r.returncode == 0, r.stdout + r.stderr
        wait_healthy(project, 0, FIRST_START_S)
        yield project
    finally:
        project.down()


def targets() -> list[str]:
    """SPARKSERVE_RECOVERY_TARGETS (space-separated) narrows the processes killed; all three by default."""
    chosen = os.environ.get("SPARKSERVE_RECOVERY_TARGETS", "api-server engine-core entrypoint").split()
    assert set(chosen) <= {"api-server", "engine-core", "entrypoint"}, chosen
    return chosen


@pytest.mark.parametrize("target", targets())
def test_kill_9_of_a_serving_process_is_healthy_again(running: Project, target: str, tmp_path: Path) -> None:
    project = running
    restarts = int(inspect(project, "{{.RestartCount}}"))
    assert inspect(project, "{{.State.Health.Status}}") == "healthy"
    marker = f"/var/lib/sparkserve/recovery-{target}"
    r = project("exec", "-T", "serve", "bash", "-c",
                f"echo kept > {marker} && echo kept > /var/cache/sparkserve/recovery-{target}")
    assert r.returncode == 0, r.stderr
    r = project("exec", "-T", "serve", "python", "-c", FIND_AND_KILL, target)
    # exec's own session may end with the container (the entrypoint's kill stops it at once)
    found = json.loads(r.stdout.splitlines()[0]) if r.stdout.strip() else {}
    assert found.get(target), f"no {target} process found in the container: {r.stdout} {r.stderr}"
    took = wait_healthy(project, restarts + 1, RECOVERY_S)
    print(f"kill -9 of the {target} (pid {found[target]}): healthy again after {took:.0f} s")
    r = project("exec", "-T", "serve", "cat", marker, f"/var/cache/sparkserve/recovery-{target}")
    assert r.returncode == 0 and r.stdout == "kept\nkept\n", r.stdout + r.stderr
