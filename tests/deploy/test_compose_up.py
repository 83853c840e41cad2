"""`docker compose up` against a real engine with the CPU test image: every refusal stops `up` in a
one-shot gate (non-zero, the gate's message in its log), serve is never started (so no restart loop can
hide it), and nothing is pulled. Run by scripts/ci/30-serve-cpu.sh (`-m engine`), which builds the image
(SPARKSERVE_IMAGE) and the tiny model (SPARKSERVE_MODEL_DIR, holding tiny/)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import CPU_OVERRIDE, compose

pytestmark = pytest.mark.engine


def need(var: str) -> str:
    value = os.environ.get(var, "")
    assert value, f"{var} is not set: run these through scripts/ci/30-serve-cpu.sh"
    return value


class Project:
    """One throwaway compose project (removed with its volumes afterwards)."""

    def __init__(self, files: tuple[str, ...], env: dict[str, str], name: str | None = None) -> None:
        base = os.environ.get("SPARKSERVE_CI_PROJECT", "sparkserve-ci")
        self.name = name or f"{base}-{uuid.uuid4().hex[:6]}"
        self.args = ["-p", self.name, *(a for f in files for a in ("-f", f))]
        self.env = env

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return compose(*self.args, *args, env=self.env)

    def container(self, service: str) -> dict[str, object]:
        r = self("ps", "-a", "-q", service)
        assert r.returncode == 0 and r.stdout.strip(), (r.stdout, r.stderr)
        docker = os.environ.get("DOCKER", "docker")
        out = subprocess.run([docker, "inspect", r.stdout.split()[0]], capture_output=True, text=True,
                             check=True)
        return dict(json.loads(out.stdout)[0])

    def down(self) -> None:
        self("down", "-v", "--remove-orphans", "-t", "1")


@pytest.fixture
def cpu_project(tmp_path: Path) -> Iterator[tuple[Project, Path]]:
    """The production services with the CPU override; the local env file is the test's to write."""
    local = tmp_path / "local.env"
    local.write_text("")
    env = {"SPARKSERVE_IMAGE": need("SPARKSERVE_IMAGE"), "SPARKSERVE_MODEL_DIR": need("SPARKSERVE_MODEL_DIR"),
           "SPARKSERVE_LOCAL_ENV": str(local)}
    project = Project(("docker-compose.yml", CPU_OVERRIDE), env)
    try:
        yield project, local
    finally:
        project.down()


def refused(project: Project, gate: str, code: int) -> str:
    """`up -d serve` failed at `gate` with `code`; serve was created but never started. The gate's log."""
    r = project("up", "-d", "serve")
    assert r.returncode != 0, r.stdout + r.stderr
    assert f'service "{gate}" didn\'t complete successfully: exit {code}' in r.stderr, r.stderr
    serve = project.container("serve")
    state = serve["State"]
    assert isinstance(state, dict)
    assert state["Status"] == "created" and state["StartedAt"].startswith("0001-01-01"), state
    assert serve["RestartCount"] == 0
    logs = project("logs", "--no-color", gate)
    assert logs.returncode == 0
    return logs.stdout + logs.stderr


def test_a_misspelled_variable_stops_up_with_the_profile_message(cpu_project: tuple[Project, Path]) -> None:
    """An invalid profile used to return 0 from `up -d` and restart serve 8 times in 30 s."""
    project, local = cpu_project
    local.write_text("GPU_MEMORY_UTILISATION=0.7\n")
    log = refused(project, "preflight", 2)
    assert ("invalid serving profile: GPU_MEMORY_UTILISATION='0.7': unknown variable; "
            "did you mean GPU_MEMORY_UTILIZATION?") in log, log


def test_extra_args_overriding_a_validated_flag_stop_up(cpu_project: tuple[Project, Path]) -> None:
    project, local = cpu_project
    local.write_text("VLLM_EXTRA_ARGS=--max-model-len 4096\n")
    assert "set MAX_MODEL_LEN instead" in refused(project, "preflight", 2)


def test_a_model_folder_that_is_not_mounted_is_exit_4(cpu_project: tuple[Project, Path]) -> None:
    """MODEL=/models/x with nothing there used to end in vLLM's "Repo id must be..." error."""
    project, local = cpu_project
    local.write_text("MODEL=/models/x\n")
    log = refused(project, "preflight", 4)
    assert "model not available: MODEL=/models/x: no such folder in the container" in log, log
    assert "Traceback" not in log


def test_a_model_missing_offline_is_exit_4(cpu_project: tuple[Project, Path]) -> None:
    """A model missing offline used to end in a 76-line vLLM traceback."""
    project, local = cpu_project
    local.write_text("MODEL=acme/not-downloaded\n")
    log = refused(project, "preflight", 4)
    assert "acme/not-downloaded is not in the model cache /data/huggingface/hub" in log, log
    assert "docker compose --profile tools run --rm download" in log
    assert "Traceback" not in log


def test_the_production_preflight_runs_without_gpu_or_toolkit(tmp_path: Path) -> None:
    """The production file as is (only the image swapped): its preflight runs on this host, which has no
    GPU and no NVIDIA Container Toolkit, and says the model is missing (exit 4), instead of Docker's
    `could not select device driver "nvidia"`."""
    local = tmp_path / "local.env"
    local.write_text("MXFP4_LAYERS=moe,qkv,o\n")  # the CPU image has no lm_head patch manifest
    project = Project(("docker-compose.yml",), {"SPARKSERVE_IMAGE": need("SPARKSERVE_IMAGE"),
                                                "SPARKSERVE_LOCAL_ENV": str(local)})
    try:
        r = project("run", "--rm", "preflight")
        out = r.stdout + r.stderr
        assert r.returncode == 4, out
        assert "openai/gpt-oss-120b is not in the model cache" in out and "device driver" not in out, out
    finally:
        project.down()


def test_compose_never_pulls_the_image() -> None:
    """`up` used to pull sparkserve/serve:latest from Docker Hub before building."""
    project = Project(("docker-compose.yml",), {})
    r = project("--profile", "tools", "pull")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for service in ("serve", "preflight", "gpu-check", "download"):
        assert f"{service} Skipped" in out, out
    assert "Pulling" not in out and "registry" not in out, out


def test_a_public_bind_without_a_key_stops_up_unless_allowed(cpu_project: tuple[Project, Path]) -> None:
    project, local = cpu_project
    project.env["SPARKSERVE_BIND"] = "0.0.0.0"
    log = refused(project, "preflight", 2)
    assert "SPARKSERVE_PUBLISH_ADDRESS='0.0.0.0': serves the API to other machines without an API key" in log
    assert "SPARKSERVE_ALLOW_UNAUTHENTICATED=1" in log, log
    project.down()
    local.write_text("SPARKSERVE_ALLOW_UNAUTHENTICATED=1\n")
    r = project("run", "--rm", "preflight")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_cache_volume_left_by_a_root_image_stops_up_with_the_fix_that_works(
        cpu_project: tuple[Project, Path]) -> None:
    """An image that ran as root left the volume root's and not empty (so docker does not hand it to the
    mount point's owner); the preflight says so, and the command it gives repairs it under compose's
    hardening (no capabilities, read-only root)."""
    project, _ = cpu_project
    docker = os.environ.get("DOCKER", "docker")
    volume = f"{project.name}_sparkserve-cache"
    subprocess.run([docker, "run", "--rm", "--network", "none", "--user", "0", "-v", f"{volume}:/v",
                    "--entrypoint", "touch", need("SPARKSERVE_IMAGE"), "/v/left-by-an-older-image"],
                   check=True, capture_output=True)
    try:
        log = refused(project, "preflight", 6)
        assert "/var/cache/sparkserve is not writable by uid 10001" in log, log
        fix = log.split("Give it to this user once: `")[1].split("`")[0]
        assert fix.startswith("docker compose run --rm --no-deps --user 0 --cap-add CHOWN"), fix
        r = project(*fix.split()[2:])
        assert r.returncode == 0, r.stdout + r.stderr
        r = project("run", "--rm", "preflight")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        project.down()
        subprocess.run([docker, "volume", "rm", "-f", volume], capture_output=True, check=False)


def test_a_wrong_profile_name_is_the_preflights_exit_2_with_the_list(tmp_path: Path) -> None:
    """`SPARKSERVE_PROFILE=nope` used to end in compose's own `env file ... not found` (exit 1)."""
    project = Project(("docker-compose.yml",), {"SPARKSERVE_IMAGE": need("SPARKSERVE_IMAGE"),
                                                "SPARKSERVE_PROFILE": "nope"})
    try:
        r = project("run", "--rm", "preflight")
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert "SPARKSERVE_PROFILE='nope': no serving profile 'nope'" in out, out
        assert "desktop-sm120, hopper-h100, spark, spark-graph-safe" in out, out
    finally:
        project.down()


@pytest.mark.parametrize(("extra", "dest"), [("-qfp8", "quantization"), ("-q=fp8", "quantization"),
                                             ("-cc.cudagraph_mode=FULL", "compilation_config")])
def test_vllms_own_parser_reads_the_extra_args(cpu_project: tuple[Project, Path], extra: str,
                                               dest: str) -> None:
    """-q=fp8 and -qfp8 used to pass the guard and reach vLLM as quantization=fp8; in the image vLLM's own
    parser reads them, and a JSON config that turns graphs or kernels around is caught too."""
    project, local = cpu_project
    local.write_text(f"VLLM_EXTRA_ARGS={extra}\n")
    log = refused(project, "preflight", 2)
    assert f"vLLM reads {dest}" in log and "would override a validated setting" in log, log


def test_extra_args_that_change_nothing_validated_pass_vllms_parser(
        cpu_project: tuple[Project, Path]) -> None:
    project, local = cpu_project
    local.write_text("VLLM_EXTRA_ARGS=--max-logprobs 5\n")
    r = project("run", "--rm", "preflight")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "override check: vLLM's own argument parser" in out and "--max-logprobs 5" in out, out
