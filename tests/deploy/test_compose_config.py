"""`docker compose config` of every serving profile: what compose hands the container is a valid
profile for the entrypoint's own parser, on the production service's terms."""

from __future__ import annotations

import pytest

from sparkserve.serving import flags, profile
from tests.deploy.conftest import ROOT, compose, config

PROFILES = sorted(p.stem for p in (ROOT / "profiles").glob("*.env"))


def test_there_are_serving_profiles() -> None:
    assert len(PROFILES) >= 3, PROFILES


@pytest.mark.parametrize("name", PROFILES)
def test_profile_resolves_to_a_valid_service(name: str) -> None:
    cfg = config("docker-compose.yml", profile="tools", env={"SPARKSERVE_PROFILE": name})
    serve = cfg["services"]["serve"]
    env = {k: v for k, v in serve["environment"].items() if v is not None}
    p = profile.parse(env)
    assert p.name == name
    ports = serve["ports"][0]
    assert ports["host_ip"] == "127.0.0.1" and ports["target"] == 8000, ports
    assert serve["init"] is True and serve["restart"] == "unless-stopped", serve
    assert "sparkserve.serving.health" in " ".join(serve["healthcheck"]["test"]), serve["healthcheck"]
    assert any(v["target"] == "/data/huggingface" for v in serve["volumes"]), serve["volumes"]
    # the MoE tactics survive a restart: the autotune store and the table live on a named volume
    state = [v for v in serve["volumes"] if v["target"] == p.state_dir]
    assert state and state[0]["type"] == "volume", serve["volumes"]
    assert state[0]["source"] == "sparkserve-state", serve["volumes"]
    assert cfg["services"]["preflight"]["command"] == ["--print-flags"]
    assert flags.vllm_argv(p, python="python")[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_a_missing_profile_does_not_resolve() -> None:
    r = compose("-f", "docker-compose.yml", "config", "-q", env={"SPARKSERVE_PROFILE": "no-such-profile"})
    assert r.returncode != 0


def test_the_cpu_test_override_resolves() -> None:
    cfg = config("docker-compose.yml", "tests/docker/cpu/compose.override.yml",
                 env={"SPARKSERVE_TEST_MODEL_DIR": "/nonexistent"})
    assert cfg["services"]["serve"]["image"]
