"""Where the image runs: the entrypoint in a Kubernetes-like environment, a profile named by
SPARKSERVE_PROFILE alone, a wrong profile name, engine variable typos, gpt-oss from config.json, and exit
codes that mean one thing."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from sparkserve.serving import __main__ as entry
from sparkserve.serving import checkpoint, engine, environment, preflight, profiles, supervise
from sparkserve.serving.profile import ProfileError, parse

from .test_serving_model import ContainerEnv

ROOT = Path(__file__).resolve().parents[2]
GPT_OSS_CONFIG = json.dumps({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"]})
# What a pod gets from Kubernetes and common runtime settings, besides the image's own variables.
KUBERNETES = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": "tcp://10.96.0.1:443",
    "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
    "KUBERNETES_PORT_443_TCP_PORT": "443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
    "REDIS_SERVICE_HOST": "10.96.3.4", "REDIS_PORT": "tcp://10.96.3.4:6379",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "TMPDIR": "/scratch", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317", "MALLOC_ARENA_MAX": "2",
    "NVIDIA_VISIBLE_DEVICES": "all", "HOSTNAME": "sparkserve-0",
}


@pytest.fixture
def pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ContainerEnv:
    """The entrypoint in a pod: the image's variables, Kubernetes', and SPARKSERVE_PROFILE only."""
    env = ContainerEnv(PATH="/usr/bin:/bin", SPARKSERVE_ROOT=str(ROOT), HF_HOME=str(tmp_path / "hf"),
                       SPARKSERVE_PROFILE="desktop-sm120", MXFP4_LAYERS="moe,qkv,o", **KUBERNETES)
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(preflight, "check_gpu", lambda p, archs, env: [])
    monkeypatch.setattr(supervise, "run", lambda *a, **k: pytest.fail("vLLM must not start"))
    return env


def test_a_kubernetes_pod_starts_with_one_warning(pod: ContainerEnv,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Every pod has KUBERNETES_SERVICE_HOST: the image used to exit 2 on it (and on TMPDIR ...)."""
    assert entry.main(["--check-device"]) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if "passed through unchecked" in line]
    assert len(warnings) == 1, err
    for name in ("KUBERNETES_SERVICE_HOST", "LD_LIBRARY_PATH", "TMPDIR", "SSL_CERT_FILE",
                 "OTEL_EXPORTER_OTLP_ENDPOINT", "MALLOC_ARENA_MAX", "REDIS_PORT"):
        assert name in warnings[0]
    assert "NVIDIA_VISIBLE_DEVICES" not in warnings[0]  # an engine variable, passed through silently
    # the profile was read from its file (SPARKSERVE_TARGET=sm120 is in the file only)
    assert "device: ok for target sm120" in out


def test_a_service_named_sparkserve_is_refused_with_the_fix(pod: ContainerEnv,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Kubernetes sets SPARKSERVE_PORT=tcp://... in every pod of the namespace of a Service `sparkserve`."""
    pod.update({"SPARKSERVE_SERVICE_HOST": "10.96.5.5", "SPARKSERVE_PORT": "tcp://10.96.5.5:8000"})
    assert entry.main(["--check-device"]) == 2
    err = capsys.readouterr().err
    assert "SPARKSERVE_PORT='tcp://10.96.5.5:8000'" in err and "enableServiceLinks: false" in err


@pytest.mark.parametrize(("name", "fragment"), [
    ("SPARKSERVE_PROFIL", "did you mean SPARKSERVE_PROFILE?"),
    ("SPARKSERVE_SOMETHING", "not a profile variable (docs/PROFILES.md lists them)"),
    ("MAX_NUM_SEQ", "did you mean MAX_NUM_SEQS?"),
    ("VLLM_ATTENTION_BACKEND", "set ATTENTION_BACKEND instead"),
])
def test_names_that_look_like_ours_still_stop_the_start(name: str, fragment: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(fragment)) as info:
        environment.check({**KUBERNETES, name: "1"})
    assert info.value.variable == name


def test_a_typo_of_an_engine_variable_vllm_reads_is_refused() -> None:
    """vLLM silently ignores VLLM_ variables it does not read: where its list is known, a near one is an
    error."""
    names = frozenset({"VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_V1", "VLLM_LOGGING_LEVEL"})
    with pytest.raises(ProfileError, match=r"reads no VLLM_CPU_KVCACHE_SPAC .*mean VLLM_CPU_KVCACHE_SPACE"):
        environment.check({"VLLM_CPU_KVCACHE_SPAC": "1"}, names)
    assert environment.check({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ELSE_ENTIRELY": "1"}, names) == []
    assert environment.check({"VLLM_CPU_KVCACHE_SPAC": "1"}) == []  # vLLM's list unknown: passed through


def test_the_engine_variables_are_read_from_vllms_envs_without_importing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('importing vllm would import torch')\n")
    (package / "envs.py").write_text("from typing import Any\nenvironment_variables: dict[str, Any] = {\n"
                                     "    'VLLM_USE_V1': lambda: 1,\n    'VLLM_PORT': lambda: None,\n}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert engine.env_names() == {"VLLM_USE_V1", "VLLM_PORT"}
    with pytest.raises(engine.Unavailable, match="did not load"):
        engine.server_parser()


def test_near_misses_are_one_or_two_edits() -> None:
    assert environment.near_miss("MOE_BACKNED", ["MOE_BACKEND"]) == "MOE_BACKEND"  # two letters swapped
    assert environment.near_miss("model", ["MODEL"]) == "MODEL"
    assert environment.near_miss("REDIS_PORT", ["SPARKSERVE_PORT"]) is None
    assert environment.near_miss("MODE_X", ["MODEL"]) is None
    assert environment.distance("GPU_MEMORY_UTILISATION", "GPU_MEMORY_UTILIZATION") == 1


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--preflight", "--help"],
                                  ["--max-num-seqs", "4", "-h"]])
def test_help_is_the_entrypoints_own_usage_and_starts_nothing(pod: ContainerEnv, args: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` used to be handed to vLLM, after the checks, which started."""
    pod["SPARKSERVE_PROFILE"] = "no-such-profile"  # nothing is checked: no refusal either
    assert entry.main(args) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: python -m sparkserve.serving [MODE]") and err == ""
    for mode in entry.MODES:
        assert f"\n  {mode} " in out
    assert "desktop-sm120, hopper-h100, spark, spark-graph-safe" in out
    assert all(f"\n  {code}  " in out for code in preflight.EXIT_CODES)


# --- SPARKSERVE_PROFILE: the entrypoint resolves it ----------------------------------------------------

def test_a_wrong_profile_name_under_compose_exits_2_listing_the_profiles(
        pod: ContainerEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """`SPARKSERVE_PROFILE=nope docker compose up` ended in compose's `env file ... not found` (exit 1): now
    compose passes the file it looked for, which was not there to name itself."""
    del pod["SPARKSERVE_PROFILE"]
    pod["SPARKSERVE_PROFILE_FILE"] = "profiles/nope.env"
    assert entry.main(["--preflight"]) == preflight.EXIT_PROFILE
    err = capsys.readouterr().err
    assert ("invalid serving profile: SPARKSERVE_PROFILE='nope': no serving profile 'nope': compose found no "
            "profiles/nope.env") in err
    assert "desktop-sm120, hopper-h100, spark, spark-graph-safe" in err


def test_under_compose_the_environment_is_the_profile(tmp_path: Path) -> None:
    env = {"SPARKSERVE_PROFILE_FILE": "profiles/spark.env", "SPARKSERVE_PROFILE": "spark", "MODEL": "m"}
    assert profiles.container_env(env, ROOT).env == env  # the checkout's file, as compose loaded it


@pytest.mark.parametrize("mode", [["--preflight"], ["--check-device"], []])
def test_a_name_the_image_lacks_outside_compose_exits_2_listing_the_profiles(
        pod: ContainerEnv, mode: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`docker run -e SPARKSERVE_PROFILE=sprak` used to serve the built-in defaults with one warning."""
    pod["SPARKSERVE_PROFILE"] = "sprak"
    assert entry.main(mode) == preflight.EXIT_PROFILE
    err = capsys.readouterr().err
    assert ("invalid serving profile: SPARKSERVE_PROFILE='sprak': this image has no serving profile "
            "'sprak'") in err
    assert "desktop-sm120, hopper-h100, spark, spark-graph-safe" in err


def test_outside_compose_a_profile_of_ones_own_is_named_by_its_path(tmp_path: Path) -> None:
    mine = tmp_path / "etc" / "mine.env"
    mine.parent.mkdir()
    mine.write_text("SPARKSERVE_PROFILE=mine\nSPARKSERVE_TARGET=sm120\nMAX_NUM_SEQS=4\n")
    env = profiles.container_env({"SPARKSERVE_PROFILE": str(mine), "MAX_NUM_SEQS": "8"}, ROOT).env
    assert env["SPARKSERVE_TARGET"] == "sm120" and env["MAX_NUM_SEQS"] == "8"
    with pytest.raises(ProfileError, match=re.escape("-e SPARKSERVE_PROFILE=/etc/sparkserve/mine.env)")):
        profiles.container_env({"SPARKSERVE_PROFILE": "mine"}, ROOT)


def test_outside_the_image_the_profiles_are_the_checkouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU host's scripts run the entrypoint from a checkout without SPARKSERVE_ROOT."""
    assert profiles.entrypoint_root({}) == ROOT
    assert profiles.entrypoint_root({"SPARKSERVE_ROOT": "/opt/x"}) == Path("/opt/x")
    monkeypatch.setattr(profiles, "__file__", "/nowhere/src/sparkserve/serving/profiles.py")
    assert profiles.entrypoint_root({}) == profiles.IMAGE_ROOT


def test_the_container_variables_win_over_the_profile_file(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.env").write_text(
        'SPARKSERVE_PROFILE=mine\nMAX_NUM_SEQS=4\nMAX_MODEL_LEN="${SS_LEN:-2048}"\n')
    given = {"SPARKSERVE_PROFILE": "mine", "MAX_NUM_SEQS": "8", "SS_LEN": "4096"}
    env = profiles.container_env(given, tmp_path).env
    assert env["MAX_NUM_SEQS"] == "8" and env["MAX_MODEL_LEN"] == "4096"
    assert profiles.container_env({"MODEL": "x"}, tmp_path).env == {"MODEL": "x"}  # no profile named


def test_a_profile_is_found_by_the_name_its_file_declares(tmp_path: Path) -> None:
    """The CPU test profile: tests/docker/cpu/cpu.env says SPARKSERVE_PROFILE=cpu-test."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "cpu.env").write_text((ROOT / "tests/docker/cpu/cpu.env").read_text())
    (folder / "a.env").write_text("SPARKSERVE_PROFILE=other\n")
    env = profiles.container_env({"SPARKSERVE_PROFILE": "cpu-test"}, tmp_path).env
    assert env["SPARKSERVE_TARGET"] == "cpu"
    assert profiles.names(folder) == ["cpu-test", "other"]


def test_a_broken_profile_file_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.env").write_text('SPARKSERVE_PROFILE=bad\nMODEL="never closed\n')
    with pytest.raises(ProfileError, match=r"bad\.env: line 2: unterminated quoted value") as info:
        profiles.container_env({"SPARKSERVE_PROFILE": "bad"}, tmp_path)
    assert info.value.variable == "SPARKSERVE_PROFILE"


def test_the_healthcheck_finds_the_port_in_the_profile_file(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    from sparkserve.serving import health

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "p.env").write_text("SPARKSERVE_PROFILE=p\nSPARKSERVE_PORT=8123\n")
    monkeypatch.setattr(os, "environ", {"SPARKSERVE_ROOT": str(tmp_path), "SPARKSERVE_PROFILE": "p"})
    asked: list[str] = []

    def probe(url: str, timeout: float) -> bool:
        asked.append(url)
        return False

    monkeypatch.setattr(health, "probe", probe)
    assert health.main() == 1 and asked == ["http://127.0.0.1:8123/health"]


# --- gpt-oss is what config.json says -------------------------------------------------------------------

def test_a_renamed_gpt_oss_folder_is_gpt_oss(tmp_path: Path) -> None:
    """A local folder not named gpt-oss used to be refused as `not gpt-oss`."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(GPT_OSS_CONFIG)
    p = parse({"MODEL": str(folder), "MXFP4_LAYERS": "moe,qkv"})
    assert p.gpt_oss and p.parsers == "gpt-oss"
    assert parse({"MODEL": str(folder)}).mxfp4_layers == {"moe", "qkv", "o", "lm_head"}


def test_a_folder_named_gpt_oss_whose_config_says_otherwise_is_not(tmp_path: Path) -> None:
    folder = tmp_path / "gpt-oss-look-alike"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    p = parse({"MODEL": str(folder)})
    assert not p.gpt_oss and p.mxfp4_layers == frozenset() and p.parsers == "none"
    with pytest.raises(ProfileError, match="is not gpt-oss"):
        parse({"MODEL": str(folder), "MXFP4_LAYERS": "moe"})


def test_a_config_only_checkpoint_serves_dummy_weights(tmp_path: Path) -> None:
    folder = tmp_path / "shapes-only"
    folder.mkdir()
    (folder / "config.json").write_text(GPT_OSS_CONFIG)
    p = parse({"MODEL": str(folder), "LOAD_FORMAT": "dummy"})
    assert p.gpt_oss and "moe" in p.mxfp4_layers


def test_a_hub_id_is_what_its_cached_config_says(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--acme--renamed" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(GPT_OSS_CONFIG)
    (tmp_path / "hub" / "models--acme--renamed" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--renamed" / "refs" / "main").write_text("abc")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    assert checkpoint.is_gpt_oss("acme/renamed", env)
    assert not checkpoint.is_gpt_oss("acme/not-downloaded", env)  # no config: the name decides
    assert checkpoint.is_gpt_oss("openai/gpt-oss-20b", env)
    assert parse({"MODEL": "acme/renamed", **env}).gpt_oss


# --- exit codes -----------------------------------------------------------------------------------------

def test_an_image_error_is_exit_7_not_the_gpu_code(pod: ContainerEnv, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable patch manifest used to exit 3, which means "no GPU kernels for this GPU"."""
    from sparkserve.supply.patches import manifest

    site = tmp_path / "site"
    site.mkdir()
    (site / manifest.SITE_MANIFEST).write_text("{not json")
    monkeypatch.setattr(entry.banner, "site_packages", lambda module="vllm": site)
    assert entry.main(["--preflight"]) == preflight.EXIT_INTERNAL == 7
    err = capsys.readouterr().err
    assert "the image itself is broken: unreadable patch manifest" in err and "Traceback" not in err
