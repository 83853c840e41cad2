"""docker compose itself on the env-file cases that the project's reader (tests/unit/test_envfile.py)
and the Ansible filter (tests/ansible/test_filters.py) are held to: the cases say what compose reads."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import ROOT

CASES = tomllib.loads((ROOT / "tests/data/envfile-cases.toml").read_text())["case"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_compose_reads_each_case_as_the_cases_say(case: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "case.env").write_text(case["text"], encoding="utf-8", newline="")
    (tmp_path / "compose.yml").write_text(
        "services:\n  s:\n    image: localhost/none\n    env_file: [case.env]\n")
    # Only what the docker CLI needs, plus the case's own environment: nothing of this shell leaks in.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "DOCKER_CONFIG") if k in os.environ}
    docker = os.environ.get("DOCKER", "docker")
    r = subprocess.run([docker, "compose", "config", "--format", "json"], cwd=tmp_path, capture_output=True,
                       text=True, env={**env, **case.get("lookup", {})}, check=False, timeout=60)
    if "compose_error" in case:
        assert r.returncode != 0 and case["compose_error"] in r.stderr, r.stdout + r.stderr
        return
    assert r.returncode == 0, r.stderr
    environment = json.loads(r.stdout)["services"]["s"].get("environment") or {}
    # `config` writes a literal $ as $$ (so that its output reads back the same)
    seen = {k: v.replace("$$", "$") for k, v in environment.items()}
    assert seen == case.get("compose", case.get("expect")), r.stderr
