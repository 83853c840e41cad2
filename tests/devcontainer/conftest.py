"""Tests that run inside the dev container (CPU only; scripts/ci/26-dev.sh):

    docker compose -p dev-ci -f docker-compose.dev.yml -f tests/docker/dev/compose.ci.yml \
        exec -T dev python -m pytest -p no:cacheprovider -s tests/devcontainer

The container's entrypoint has installed the trees of $SPARKSERVE_DEV_SRC editable. The tests edit those
trees (a Python file, a .cuh header) and commit the edits into their patches, so they need throwaway trees
(CI makes fresh ones with `sparkserve dev init` each run) and run in file order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkserve.supply import devtree, pins

IN_CONTAINER = Path("/opt/wheels").is_dir() and os.environ.get("SPARKSERVE_ROOT") == "/workspace"


@pytest.fixture(scope="session", autouse=True)
def dev_container() -> None:
    assert IN_CONTAINER, f"these tests run inside the dev container only: see {__doc__}"


@pytest.fixture(scope="session")
def p() -> pins.Pins:
    return pins.load()


@pytest.fixture(scope="session")
def trees(p: pins.Pins) -> dict[str, Path]:
    return {name: devtree.require(p, name) for name in p.upstreams}


def run(*args: str, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    # the container's environment, without pytest's own PYTEST_* (the entrypoint refuses unknown names)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False,
                          env={**base, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def python(code: str) -> str:
    """Output of a new interpreter: what a fresh `python` in the container imports."""
    return run(sys.executable, "-c", code).stdout
