"""`docker compose config` of every serving profile: what compose hands the container is a valid
profile for the entrypoint's own parser, on the production service's terms; the gates, the download tool,
the image reference and the env files behave as docs/IMAGE.md says."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.serving import flags, profile, profiles
from tests.deploy.conftest import CPU_OVERRIDE, ROOT, compose, config

PROFILES = sorted(p.stem for p in (ROOT / "profiles").glob("*.env"))
SERVICES = ("serve", "preflight", "gpu-check", "download", "harness")


def env_of(service: dict[str, object]) -> dict[str, str]:
    env = service["environment"]
    assert isinstance(env, dict)
    return {k: v for k, v in env.items() if v is not None}


def test_there_are_serving_profiles() -> None:
    assert len(PROFILES) >= 3, PROFILES


@pytest.mark.parametrize("name", PROFILES)
def test_profile_resolves_to_a_valid_service(name: str) -> None:
    cfg = config("docker-compose.yml", profile="tools", env={"SPARKSERVE_PROFILE": name})
    serve = cfg["services"]["serve"]
    for service in SERVICES:
        p = profile.parse(env_of(cfg["services"][service]))
        assert p.name == name
    p = profile.parse(env_of(serve))
    assert p.offline, "the server must run with the hub offline"
    ports = serve["ports"][0]
    assert ports["host_ip"] == "127.0.0.1" and ports["target"] == 8000, ports
    assert serve["init"] is True and serve["restart"] == "unless-stopped", serve
    assert "sparkserve.serving.health" in " ".join(serve["healthcheck"]["test"]), serve["healthcheck"]
    assert any(v["target"] == "/data/huggingface" for v in serve["volumes"]), serve["volumes"]
    # the MoE tactics survive a restart: the autotune store and the table live on a named volume
    state = [v for v in serve["volumes"] if v["target"] == p.state_dir]
    assert state and state[0]["type"] == "volume", serve["volumes"]
    assert state[0]["source"] == "sparkserve-state", serve["volumes"]
    # a restart loads vLLM's compiled model, Triton's and inductor's kernels from the cache volume
    cache = [v for v in serve["volumes"] if v["target"] == p.cache_dir]
    assert cache and cache[0]["type"] == "volume", serve["volumes"]
    assert cache[0]["source"] == "sparkserve-cache", serve["volumes"]
    assert cfg["services"]["preflight"]["command"] == ["--preflight"]
    assert flags.vllm_argv(p, python="python")[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_one_shot_gates_start_serve_only_after_they_succeed() -> None:
    """A refusal stops `up` in a one-shot container; it never becomes a restart loop of serve."""
    cfg = config("docker-compose.yml")["services"]
    assert cfg["serve"]["depends_on"] == {
        "image-check": {"condition": "service_completed_successfully", "required": True},
        "preflight": {"condition": "service_completed_successfully", "required": True},
        "gpu-check": {"condition": "service_completed_successfully", "required": True},
    }
    for gate, command in (("preflight", "--preflight"), ("gpu-check", "--check-device")):
        assert cfg[gate]["command"] == [command]
    for gate in ("image-check", "preflight", "gpu-check"):
        assert cfg[gate]["restart"] == "no" and "profiles" not in cfg[gate]
        assert cfg[gate]["network_mode"] == "none"
    assert cfg["gpu-check"]["depends_on"]["preflight"]["condition"] == "service_completed_successfully"
    # the image is the checkout's build before the other gates judge the profile by its rules
    assert cfg["preflight"]["depends_on"]["image-check"]["condition"] == "service_completed_successfully"


def test_the_preflight_does_not_inherit_the_gpu_reservation() -> None:
    """Through `extends` it used to, and stopped at Docker's `could not select device driver "nvidia"`."""
    cfg = config("docker-compose.yml")["services"]
    assert "deploy" not in cfg["preflight"], cfg["preflight"].get("deploy")
    for gpu_service in ("serve", "gpu-check"):
        devices = cfg[gpu_service]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia", devices


def test_the_image_is_never_pulled_from_a_registry() -> None:
    """`up` used to try `sparkserve/serve:latest` on Docker Hub first; whoever owns that name would run."""
    cfg = config("docker-compose.yml", profile="tools")["services"]
    for name in (*SERVICES, "image-check"):
        assert cfg[name]["image"].startswith("localhost/"), cfg[name]["image"]
        assert cfg[name]["pull_policy"] == "never", name
        assert cfg[name]["build"]["context"] == str(ROOT), name  # a missing image is built, not pulled


def test_the_download_tool_is_the_only_service_with_the_hub() -> None:
    cfg = config("docker-compose.yml", profile="tools")["services"]
    dl = cfg["download"]
    assert dl["profiles"] == ["tools"] and dl["command"] == ["--download"] and dl["restart"] == "no"
    assert env_of(dl)["HF_HUB_OFFLINE"] == "0" and "HF_TOKEN" in dl["environment"]
    assert "deploy" not in dl and "network_mode" not in dl
    volumes = {v["target"]: v for v in dl["volumes"]}
    assert volumes["/data/huggingface"]["source"] == "hf-cache"
    assert not volumes["/data/huggingface"].get("read_only")
    assert config("docker-compose.yml")["services"].keys() == {"serve", "image-check", "preflight",
                                                                "gpu-check"}


def test_the_harness_tool_runs_the_checkouts_lab_with_the_gpu_and_the_state() -> None:
    """`moe sweep --install`, `validate moe` and level 6 run in the image: GPU, the tactic state volume, no
    network, and the lab from this checkout (the image carries the product only): lab/ read-only on
    PYTHONPATH, its run store lab/results/ writable."""
    h = config("docker-compose.yml", profile="tools")["services"]["harness"]
    assert h["profiles"] == ["tools"] and h["entrypoint"] == ["/opt/venv/bin/python", "-m", "sparkserve_lab"]
    assert h["network_mode"] == "none" and env_of(h)["HF_HUB_OFFLINE"] == "1"
    assert h["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    volumes = {v["target"]: v for v in h["volumes"]}
    assert volumes["/var/lib/sparkserve"]["source"] == "sparkserve-state"
    assert volumes["/var/cache/sparkserve"]["source"] == "sparkserve-cache"
    lab = volumes[f"{h['working_dir']}/lab"]
    assert lab["source"] == str(ROOT / "lab") and lab["read_only"] is True
    results = volumes[f"{h['working_dir']}/lab/results"]
    assert results["source"] == str(ROOT / "lab" / "results") and not results.get("read_only")
    assert env_of(h)["PYTHONPATH"].split(":") == [f"{h['working_dir']}/src", f"{h['working_dir']}/lab/src"]
    assert (ROOT / "lab" / "src" / "sparkserve_lab" / "__main__.py").is_file()


def test_the_model_folder_knob_mounts_read_only(tmp_path: Path) -> None:
    cfg = config("docker-compose.yml", env={"SPARKSERVE_MODEL_DIR": str(tmp_path)})["services"]
    for name in ("serve", "preflight"):
        models = next(v for v in cfg[name]["volumes"] if v["target"] == "/models")
        assert models["source"] == str(tmp_path) and models["read_only"] is True, models


def test_a_missing_profile_is_the_entrypoints_error_listing_the_profiles() -> None:
    """compose itself used to stop at `env file .../profiles/nope.env not found` (exit 1, no list): now every
    service gets the file compose looked for and no profile, and the entrypoint refuses it (exit 2), listing
    the profiles of the image (its copy of profiles/)."""
    services = config("docker-compose.yml", profile="tools", env={"SPARKSERVE_PROFILE": "nope"})["services"]
    for name in SERVICES:
        env = env_of(services[name])
        assert env["SPARKSERVE_PROFILE_FILE"] == "profiles/nope.env" and "SPARKSERVE_PROFILE" not in env
        with pytest.raises(profile.ProfileError, match=r"no serving profile 'nope'.*spark, spark-graph-safe"):
            profiles.container_env(env, ROOT)
    # what the image carries: the checkout's profiles/ at $SPARKSERVE_ROOT/profiles
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY profiles/ /opt/sparkserve/profiles/" in dockerfile
    assert "SPARKSERVE_ROOT=/opt/sparkserve" in dockerfile


@pytest.mark.parametrize("name", PROFILES)
def test_under_compose_the_profile_is_what_compose_loaded(name: str) -> None:
    serve = config("docker-compose.yml", env={"SPARKSERVE_PROFILE": name})["services"]["serve"]
    env = env_of(serve)
    assert env["SPARKSERVE_PROFILE_FILE"] == f"profiles/{name}.env" and env["SPARKSERVE_PROFILE"] == name
    assert profiles.container_env(env, ROOT).env == env


def test_a_named_local_env_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """A SPARKSERVE_LOCAL_ENV naming a missing file used to be ignored."""
    missing = tmp_path / "my-settings.env"
    r = compose("-f", "docker-compose.yml", "config", "-q", env={"SPARKSERVE_LOCAL_ENV": str(missing)})
    assert r.returncode != 0 and f"env file {missing} not found" in r.stderr, r.stderr
    r = compose("-f", "docker-compose.yml", "-f", CPU_OVERRIDE, "config", "-q",
                env={"SPARKSERVE_LOCAL_ENV": str(missing)})
    assert r.returncode != 0 and "not found" in r.stderr, r.stderr


@pytest.mark.parametrize(("line", "variable", "fragment"), [
    ("GPU_MEMORY_UTILISATION=0.7", "GPU_MEMORY_UTILISATION", "did you mean GPU_MEMORY_UTILIZATION?"),
    ("MOE_BACKNED=marlin", "MOE_BACKNED", "did you mean MOE_BACKEND?"),
    ("MODEL=", "MODEL", "empty"),
    ("MXFP4_LAYERS=", "MXFP4_LAYERS", "empty"),
    ("SPARKSERVE_HOST_PORT=9000", "SPARKSERVE_HOST_PORT", "read by docker compose on the host"),
    ("VLLM_EXTRA_ARGS=--gpu-memory-utilization 0.95", "VLLM_EXTRA_ARGS", "set GPU_MEMORY_UTILIZATION"),
])
def test_what_a_local_env_file_gets_wrong_reaches_the_checks(tmp_path: Path, line: str, variable: str,
                                                              fragment: str) -> None:
    """The resolved environment (what every container sees) carries the mistake to the entrypoint."""
    local = tmp_path / "local.env"
    local.write_text(line + "\n")
    cfg = config("docker-compose.yml", env={"SPARKSERVE_LOCAL_ENV": str(local)})
    for name in ("serve", "preflight"):
        with pytest.raises(profile.ProfileError) as info:
            profile.parse(env_of(cfg["services"][name]))
        assert info.value.variable == variable and fragment in str(info.value)


def test_the_cpu_test_override_resolves(tmp_path: Path) -> None:
    cfg = config("docker-compose.yml", CPU_OVERRIDE, profile="tools",
                 env={"SPARKSERVE_MODEL_DIR": str(tmp_path), "SPARKSERVE_IMAGE": "sparkserve/serve-cpu:ci"})
    services = cfg["services"]
    serve = services["serve"]
    assert serve["network_mode"] == "none" and not serve.get("ports"), "the CPU serve runs without network"
    for name in SERVICES:
        assert services[name]["image"] == "sparkserve/serve-cpu:ci" and "build" not in services[name]
        assert profile.parse(env_of(services[name])).name == "cpu-test"
    gate = services["image-check"]
    assert gate["image"] == "sparkserve/serve-cpu:ci" and "build" not in gate
    for name in ("serve", "gpu-check", "harness"):
        assert "deploy" not in services[name], name


def test_the_published_address_reaches_the_gates_and_serve() -> None:
    """preflight refuses a non-loopback bind without a key, so it has to know the bind address."""
    for env, want in (({}, "127.0.0.1"), ({"SPARKSERVE_BIND": "0.0.0.0"}, "0.0.0.0")):
        services = config("docker-compose.yml", env=env)["services"]
        for name in ("preflight", "gpu-check", "serve"):
            assert env_of(services[name])["SPARKSERVE_PUBLISH_ADDRESS"] == want, (name, env)
        assert services["serve"]["ports"][0]["host_ip"] == want


def test_every_service_runs_with_least_privilege() -> None:
    """No capabilities, no privilege gain, a read-only root; /tmp and the serving user's home are tmpfs
    (the image's USER is the serving user: tests/image/test_least_privilege.py)."""
    cfg = config("docker-compose.yml", profile="tools")["services"]
    for name in (*SERVICES, "image-check"):
        s = cfg[name]
        assert s["cap_drop"] == ["ALL"] and "cap_add" not in s, name
        assert s["security_opt"] == ["no-new-privileges:true"], name
        assert s["read_only"] is True and "user" not in s, name
        tmpfs = {t.split(":")[0]: t for t in s["tmpfs"]}
        assert tmpfs.keys() == {"/tmp", "/home/serve"}, name
        assert "uid=10001" in tmpfs["/home/serve"] and "exec" in tmpfs["/tmp"].split(":")[1].split(","), name


def test_the_preflight_sees_both_volumes_serve_writes() -> None:
    """It checks their owner (a volume left by a root image stops `up` with the fix), read-only."""
    cfg = config("docker-compose.yml")["services"]
    volumes = {v["target"]: v for v in cfg["preflight"]["volumes"]}
    for target, source in (("/var/cache/sparkserve", "sparkserve-cache"), ("/var/lib/sparkserve",
                                                                             "sparkserve-state")):
        assert volumes[target]["source"] == source and volumes[target]["read_only"] is True
