"""`docker compose config` of docker-compose.dev.yml: the dev shell and the `serve` profile on the dev
image, the checkout mounted, the caches as volumes, nothing pulled from a registry."""

from __future__ import annotations

from sparkserve.serving import profile
from tests.deploy.conftest import config

DEV = "docker-compose.dev.yml"
CACHES = {"/data/huggingface", "/cache/flashinfer", "/cache/vllm", "/cache/ccache", "/cache/pycache"}


def test_dev_service() -> None:
    cfg = config(DEV)
    dev = cfg["services"]["dev"]
    assert dev["image"].startswith("localhost/") and dev["pull_policy"] == "never"
    assert dev["build"]["dockerfile"] == "Dockerfile" and dev["build"]["target"] == "dev"
    assert dev["stdin_open"] and dev["tty"] and dev["init"]
    assert dev["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    binds = {v["target"]: v for v in dev["volumes"] if v["type"] == "bind"}
    assert set(binds) == {"/workspace"}, binds
    assert {v["target"] for v in dev["volumes"] if v["type"] == "volume"} == CACHES
    # the model cache is the production project's volume: one download for both
    assert cfg["volumes"]["hf-cache"]["name"] == "sparkserve_hf-cache"
    assert "serve" not in cfg["services"]  # a profile: not started by a plain `up`


def test_serve_profile_serves_a_valid_profile_from_the_trees() -> None:
    serve = config(DEV, profile="serve")["services"]["serve"]
    assert serve["command"] == ["python", "-m", "sparkserve.serving"]
    env = {k: v for k, v in serve["environment"].items() if v is not None}
    assert profile.parse(env).name == "spark"
    port = serve["ports"][0]
    assert port["host_ip"] == "127.0.0.1" and port["published"] == "8001" and port["target"] == 8000
    assert "sparkserve.serving.health" in " ".join(serve["healthcheck"]["test"])


def test_the_ci_override_has_no_gpu_and_no_network() -> None:
    cfg = config(DEV, "tests/docker/dev/compose.ci.yml", env={"SPARKSERVE_DEV_IMAGE": "sparkserve/dev:ci"})
    dev = cfg["services"]["dev"]
    assert dev["network_mode"] == "none" and "deploy" not in dev and "build" not in dev
    assert dev["environment"]["SPARKSERVE_DEV_SRC"] == "/workspace/.work/ci/dev-src"
    assert cfg["volumes"]["hf-cache"]["name"].startswith("dev-ci")
