"""compose.pull.yml: a prebuilt release is pulled by digest, never built, and the image-check gate compares
it with this checkout before anything serves (config tests: the docker CLI with compose, no engine; the
pull itself against a registry is scripts/ci/30-serve-cpu.sh's)."""

from __future__ import annotations

from pathlib import Path

from sparkserve import provenance
from tests.deploy.conftest import CPU_OVERRIDE, ROOT, compose, config

REF = "127.0.0.1:5000/sparkserve/serve:0.1.0-vllm0.33.0-fi0.7.2.post1@sha256:" + "ab" * 32
PULL = "compose.pull.yml"


def image_services() -> set[str]:
    """The services docker-compose.yml builds from this checkout's Dockerfile: the serving image's."""
    cfg = config("docker-compose.yml", profile="tools")["services"]
    return {name for name, s in cfg.items() if s.get("build", {}).get("context") == str(ROOT)}


def test_every_service_of_the_image_pulls_the_release_and_none_builds() -> None:
    """With a build section compose builds whenever a pull fails: an unreachable registry would start the
    image's compiles (tens of minutes), then refuse to name the result after a digest."""
    services = image_services()
    assert {"serve", "image-check", "preflight", "gpu-check", "download", "harness"} <= services
    cfg = config("docker-compose.yml", PULL, profile="tools", env={"SPARKSERVE_IMAGE": REF})["services"]
    for name in services:
        assert cfg[name]["image"] == REF and cfg[name]["pull_policy"] == "missing", name
        assert "build" not in cfg[name], name
    # the same with the CPU stand-in's override (CI's pull path)
    cpu = config("docker-compose.yml", CPU_OVERRIDE, PULL, env={"SPARKSERVE_IMAGE": REF})["services"]
    assert cpu["serve"]["image"] == REF and cpu["serve"]["pull_policy"] == "missing"


def test_the_release_reference_is_required_and_its_digest_checked() -> None:
    r = compose("-f", "docker-compose.yml", "-f", PULL, "config", env={"SPARKSERVE_IMAGE": ""})
    assert r.returncode != 0 and "SPARKSERVE_IMAGE" in r.stderr and "docs/RELEASE.md" in r.stderr
    gate = config("docker-compose.yml", PULL, env={"SPARKSERVE_IMAGE": REF})["services"]["image-check"]
    assert gate["environment"]["SPARKSERVE_REQUIRE_DIGEST"] == "1"
    assert gate["environment"]["SPARKSERVE_IMAGE_REF"] == REF
    # a build here has no digest: only the pulled release must name one
    here = config("docker-compose.yml")["services"]["image-check"]
    assert "SPARKSERVE_REQUIRE_DIGEST" not in here["environment"]


def test_the_gate_sees_every_file_of_the_checkouts_record_read_only() -> None:
    """The checkout's pins, series, patches and the rules themselves, mounted where the gate's command
    reads them; a file that is not there is an error, never an empty folder Docker makes."""
    gate = config("docker-compose.yml")["services"]["image-check"]
    mounts = {Path(v["source"]): Path(v["target"]) for v in gate["volumes"]}
    assert all(v["read_only"] and v["type"] == "bind" for v in gate["volumes"])
    assert all(not v["bind"].get("create_host_path", False) for v in gate["volumes"])
    entry = gate["entrypoint"]
    expected_root = Path(entry[entry.index("--expected-root") + 1])
    for rel in provenance.files(ROOT):
        source = ROOT / rel
        covering = [m for m in mounts if source == m or m in source.parents]
        assert covering, f"{rel} is not mounted into the gate"
        m = covering[0]
        assert mounts[m] / source.relative_to(m) == expected_root / rel, rel
    assert Path(entry[2]) == expected_root / "src/sparkserve/provenance.py" and entry[1] == "-I"
    assert entry[entry.index("--image-root") + 1] == "/opt/sparkserve"
