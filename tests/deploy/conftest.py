"""Tests of the deployment files (compose) through the real `docker compose` CLI.

Two kinds, both failing (never skipping) without what they need, since a compose check that skips proves
nothing:
- config tests (no mark): the docker CLI with the compose v2 plugin, no engine;
  scripts/ci/10-lint-docker.sh provides both and runs them (`-m "not engine"`).
- engine tests (`@pytest.mark.engine`): a Docker engine and the CPU test image (SPARKSERVE_IMAGE) plus a
  tiny model folder (SPARKSERVE_MODEL_DIR); scripts/ci/30-serve-cpu.sh builds both and runs them
  (`-m engine`). Their compose project is SPARKSERVE_CI_PROJECT (default sparkserve-ci) plus a suffix.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_OVERRIDE = "tests/docker/cpu/compose.override.yml"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers",
                            "engine: needs a Docker engine and the CPU test image (serve-cpu phase)")
    config.addinivalue_line("markers",
                            "recovery: kills the serving processes of a running CPU stand-in "
                            "(test_compose_recovery.py)")


def compose(*args: str, env: dict[str, str] | None = None,
            timeout: int = 600) -> subprocess.CompletedProcess[str]:
    docker = os.environ.get("DOCKER", "docker")
    return subprocess.run([docker, "compose", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False, timeout=timeout)


@pytest.fixture(scope="session", autouse=True)
def compose_cli() -> None:
    r = compose("version")
    assert r.returncode == 0, f"`docker compose` is not available ({r.stderr.strip()}): see {__doc__}"


def config(*files: str, profile: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    args = [a for f in files for a in ("-f", f)]
    if profile:
        args += ["--profile", profile]
    r = compose(*args, "config", "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))
