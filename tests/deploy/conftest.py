"""Tests of the deployment files (compose) through the real `docker compose` CLI. They need the docker
CLI with the compose v2 plugin (no engine): scripts/ci/10-lint-docker.sh provides both and runs them.
Without it they fail: a compose check that skips would prove nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    docker = os.environ.get("DOCKER", "docker")
    return subprocess.run([docker, "compose", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False)


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
