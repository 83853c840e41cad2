"""Bad inputs to the playbooks: each fails before anything changes on any host, naming the host and the cause.

Runs ansible-playbook (ansible/deploy.yml, ansible/cluster.yml) against a container that plays the Spark
(image ans-target:ci, the CI host's Docker engine through its socket), with an inventory that is valid
except for one thing. Needs: the ansible venv on PATH, ans-target:ci and sparkserve/serve-cpu:ci on the
engine, ANS_HOST_DIR (scripts/ci/50-ansible.sh sets all of it up). Skipped when they are missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
DATA = Path(__file__).resolve().parent / "data"
TARGET = "ans-bad-target"
TARGET_IMAGE = "ans-target:ci"
CPU_IMAGE = "ans-serve-cpu:ci"  # the CPU stand-in, tagged by 50-ansible.sh
HOST_DIR = Path(os.environ.get("ANS_HOST_DIR", ROOT / ".work/ci/ansible/host"))
SERVE_ROOT = "/opt/ans-bad"
PROJECT = "ans-bad"


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def _have_image(name: str) -> bool:
    return (
        shutil.which("docker") is not None and _docker("image", "inspect", name, check=False).returncode == 0
    )


pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None or not _have_image(TARGET_IMAGE) or not _have_image(CPU_IMAGE),
    reason="needs ansible-playbook, ans-target:ci and sparkserve/serve-cpu:ci (scripts/ci/50-ansible.sh)",
)


@pytest.fixture(scope="module")
def target() -> Any:
    """The target container, the tiny model in the host's HF cache, the recorded nvidia-smi outputs."""
    cache = HOST_DIR / "bad-hf-cache/hub/models--ans--tiny-llama"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (cache / "refs").mkdir(parents=True, exist_ok=True)
    (cache / "refs/main").write_text(commit)
    snap = cache / "snapshots" / commit
    if not (snap / "config.json").exists():
        shutil.copytree(HOST_DIR / "tiny-model", snap, dirs_exist_ok=True)
    shutil.copytree(DATA / "nvidia-smi", HOST_DIR / "nvidia-smi", dirs_exist_ok=True)
    _docker("rm", "-f", TARGET, check=False)
    _docker(
        "run",
        "-d",
        "--name",
        TARGET,
        "-v",
        "/var/run/docker.sock:/var/run/docker.sock",
        "-v",
        f"{HOST_DIR}:{HOST_DIR}",
        TARGET_IMAGE,
        "sleep",
        "infinity",
    )
    yield TARGET
    _docker("rm", "-f", TARGET, check=False)


def base_vars() -> dict[str, Any]:
    """A valid single-host deployment of the CPU stand-in (as molecule/default), changed per test."""
    return {
        "ansible_connection": "community.docker.docker",
        "ansible_host": TARGET,
        "serve_profile": "cpu-test",
        "serve_profile_files": {"cpu-test": str(ROOT / "tests/docker/cpu/cpu.env")},
        "serve_local_env": {"MODEL": "ans/tiny-llama", "SERVED_MODEL_NAME": "tiny"},
        "serve_compose_overrides": [str(ANSIBLE / "molecule/default/compose.cpu.yml")],
        "serve_image": CPU_IMAGE,
        "serve_image_source": "present",
        "serve_release_repo": "ans-bad/release",
        "serve_project_name": PROJECT,
        "serve_root": SERVE_ROOT,
        "serve_host_port": 18102,
        "serve_gate_real_checkpoint": False,
        "model_cache_dir": str(HOST_DIR / "bad-hf-cache"),
        "model_cache_offline": True,
        "spark_host_image_disk_gb": 1,
        "spark_host_model_disk_gb": 1,
    }


def play(
    tmp_path: Path, playbook: str, group: str, hosts: dict[str, dict[str, Any]], group_vars: dict[str, Any]
) -> tuple[int, str, dict[str, dict[str, int]]]:
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": hosts, "vars": group_vars}}}}))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    p = subprocess.run(
        ["ansible-playbook", "-i", str(inv), playbook],
        cwd=ANSIBLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = p.stdout + p.stderr
    recap = {
        m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
        for m in re.finditer(
            r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
            r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
            out,
            re.M,
        )
    }
    return p.returncode, out, recap


def assert_failed_unchanged(
    rc: int, out: str, recap: dict[str, dict[str, int]], host: str, cause: str
) -> None:
    assert rc != 0, out
    assert recap, out
    assert all(r["changed"] == 0 for r in recap.values()), f"something changed: {recap}\n{out}"
    # the message names the host and the cause
    assert re.search(rf"{re.escape(host)}.*{cause}", out, re.S), f"no '{host} ... {cause}' in:\n{out}"
    # nothing was deployed: no release folder on the target, no container of the project
    assert _docker("exec", TARGET, "test", "-e", SERVE_ROOT, check=False).returncode != 0
    assert (
        _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}").stdout.strip() == ""
    )


def single(tmp_path: Path, **changes: Any) -> tuple[int, str, dict[str, dict[str, int]]]:
    return play(tmp_path, "deploy.yml", "sparkserve", {"ans-bad-spark": {}}, {**base_vars(), **changes})


def test_unreachable_host(target: str, tmp_path: Path) -> None:
    ghost = {"ansible_host": "ans-bad-no-such-container"}
    rc, out, recap = play(
        tmp_path, "deploy.yml", "sparkserve", {"ans-bad-spark": {}, "ans-bad-ghost": ghost}, base_vars()
    )
    # ssh reports an unreachable host as UNREACHABLE; the docker connection as a failed first task
    assert recap["ans-bad-ghost"]["unreachable"] + recap["ans-bad-ghost"]["failed"] == 1, out
    assert_failed_unchanged(
        rc, out, recap, "ans-bad-ghost", r"(UNREACHABLE|No such container: ans-bad-no-such-container)"
    )


def test_wrong_architecture(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(tmp_path, serve_profile="spark", serve_local_env={}, model_cache_offline=False)
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"architecture is x86_64, the spark target \(DGX Spark \(GB10\)\) needs aarch64",
    )


def test_no_gpu(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(
        tmp_path, serve_profile="desktop-sm120", serve_local_env={}, model_cache_offline=False
    )
    assert_failed_unchanged(rc, out, recap, "ans-bad-spark", r"no NVIDIA GPU visible \(`nvidia-smi`")


def test_wrong_compute_capability(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(
        tmp_path,
        serve_profile="desktop-sm120",
        serve_local_env={},
        model_cache_offline=False,
        spark_host_nvidia_smi=f"cat {HOST_DIR}/nvidia-smi/h100.csv",
    )
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"GPU 0 \(NVIDIA H100 80GB HBM3\) has compute capability 9.0, the sm120 target needs 12.0",
    )


def test_old_driver(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(
        tmp_path,
        serve_profile="desktop-sm120",
        serve_local_env={},
        model_cache_offline=False,
        spark_host_nvidia_smi=f"cat {HOST_DIR}/nvidia-smi/rtx6000-old-driver.csv",
    )
    assert_failed_unchanged(rc, out, recap, "ans-bad-spark", r"NVIDIA driver 575.64.03 is older than 580")


def test_too_little_disk(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(tmp_path, spark_host_image_disk_gb=1000000)
    assert_failed_unchanged(
        rc, out, recap, "ans-bad-spark", r"only [\d.]+ GB free on \S+, 1000000.0 GB needed for the image"
    )


def test_missing_model_offline(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(
        tmp_path, serve_local_env={"MODEL": "ans/not-cached", "SERVED_MODEL_NAME": "tiny"}
    )
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"ans/not-cached \(revision main\) is not usable in .*model_cache_offline is true",
    )


def test_profile_value_rejected_by_the_entrypoint(target: str, tmp_path: Path) -> None:
    rc, out, recap = single(tmp_path, serve_local_env={"MODEL": "ans/tiny-llama", "BLOCK_SIZE": "17"})
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"the entrypoint of ans-serve-cpu:ci rejects serving profile cpu-test.*"
        r"BLOCK_SIZE='17': must be one of 16, 32, 64",
    )


def test_pull_without_a_digest(target: str, tmp_path: Path) -> None:
    """A tag can be moved to another image between the check and the pull: refused before both."""
    rc, out, recap = single(tmp_path, serve_image="127.0.0.1:5999/sparkserve/serve:1",
                            serve_image_source="pull")
    assert_failed_unchanged(
        rc, out, recap, "ans-bad-spark",
        r"serve_image_source is pull and serve_image 127.0.0.1:5999/sparkserve/serve:1 names no digest",
    )


def test_an_image_of_another_build(target: str, tmp_path: Path) -> None:
    """The CPU stand-in with other pins in its record: refused in the check play, naming the pin."""
    other = "ans-bad/release:other-pins"  # (a name 50-ansible.sh's leftover sweep removes)
    dockerfile = (f"FROM {CPU_IMAGE}\nUSER root\n"
                  "RUN sed -i 's/^version = \"0.33.0\"/version = \"0.0.0\"/' /opt/sparkserve/pins.toml\n"
                  "USER 10001:10001\n")
    # (the classic builder: a docker CLI without its buildx plugin cannot build with BuildKit=1, which CI's
    # lib.sh exports; one RUN needs nothing more)
    subprocess.run(["docker", "build", "-q", "-t", other, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    try:
        rc, out, recap = single(tmp_path, serve_image=other)
    finally:
        _docker("image", "rm", "-f", other, check=False)
    assert_failed_unchanged(
        rc, out, recap, "ans-bad-spark",
        rf"image {re.escape(other)} .*is not the build this checkout expects: "
        r"- pins.toml upstream.vllm.version: 0.0.0 in the image's, 0.33.0 in this checkout's",
    )


def cluster_hosts(images: tuple[str, str]) -> dict[str, dict[str, Any]]:
    # Both inventory hosts are the one target container: the checks fail before any of them connects twice.
    return {
        f"ans-bad-node{i}": {"cluster_address": f"192.168.100.{10 + i}", "serve_image": img}
        for i, img in enumerate(images)
    }


def test_cluster_with_one_host(target: str, tmp_path: Path) -> None:
    hosts = dict(list(cluster_hosts((CPU_IMAGE, CPU_IMAGE)).items())[:1])
    rc, out, recap = play(tmp_path, "cluster.yml", "sparkserve_cluster", hosts, base_vars())
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-node0",
        r"needs exactly two hosts in the inventory group sparkserve_cluster, found 1: ans-bad-node0",
    )


def test_cluster_with_unequal_images(target: str, tmp_path: Path) -> None:
    hosts = cluster_hosts((CPU_IMAGE, "ans-serve-cpu:other"))
    rc, out, recap = play(tmp_path, "cluster.yml", "sparkserve_cluster", hosts, base_vars())
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-node0",
        r"the two nodes must run the same image, the inventory gives ans-bad-node0: "
        r"ans-serve-cpu:ci; ans-bad-node1: ans-serve-cpu:other",
    )


def test_public_bind_without_a_key(target: str, tmp_path: Path) -> None:
    """The role's validation used to leave the bind address out: the refusal came from the preflight gate,
    after compose had replaced the running container."""
    rc, out, recap = single(tmp_path, serve_bind="0.0.0.0")
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"rejects serving profile cpu-test with serve_local_env, serve_bind 0.0.0.0 and no API key.*"
        r"SPARKSERVE_PUBLISH_ADDRESS='0.0.0.0': serves the API to other machines without an API key",
    )


def test_host_port_in_use(target: str, tmp_path: Path) -> None:
    """Something else holds the host port: refused by the checks, not by compose after the old container
    is gone."""
    holder = "ans-bad-port-holder"
    _docker("rm", "-f", holder, check=False)
    _docker("run", "-d", "--name", holder, "-p", "127.0.0.1:18102:8000", TARGET_IMAGE, "sleep", "infinity")
    try:
        rc, out, recap = single(tmp_path)
    finally:
        _docker("rm", "-f", holder, check=False)
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-spark",
        r"127.0.0.1:18102 is taken on the host by something else than this deployment \(.*"
        r"(port is already allocated|address already in use).*\): free it or set serve_host_port",
    )


def play_args(tmp_path: Path, *args: str, **changes: Any) -> tuple[int, str]:
    """deploy.yml with more ansible-playbook arguments (--tags check, --check)."""
    inv = tmp_path / "inventory.yml"
    group = {"hosts": {"ans-bad-spark": {}}, "vars": {**base_vars(), **changes}}
    inv.write_text(yaml.safe_dump({"all": {"children": {"sparkserve": group}}}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    p = subprocess.run(["ansible-playbook", "-i", str(inv), "deploy.yml", *args], cwd=ANSIBLE, env=env,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def assert_nothing_deployed() -> None:
    assert _docker("exec", TARGET, "test", "-e", SERVE_ROOT, check=False).returncode != 0
    assert (
        _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}").stdout.strip() == ""
    )
    assert _docker("images", "-q", "ans-bad/release").stdout.strip() == ""


def test_first_deploy_online_check_mode_previews_and_creates_nothing(target: str, tmp_path: Path) -> None:
    """An empty host, online: the model is not cached and model_cache would download it. `--check` gets
    past the check play (the entrypoint used to refuse with exit 4, "model not available ... offline"),
    which changes nothing, and previews the new release (it used to fail with "... is not a directory");
    nothing is created, not even the cache folder (a bind mount of a missing folder used to create it)."""
    cache = HOST_DIR / "bad-empty-cache"
    shutil.rmtree(cache, ignore_errors=True)
    rc, out = play_args(tmp_path, "--check", model_cache_offline=False, model_cache_dir=str(cache))
    assert rc == 0, out
    checks, _, deploy = out.partition("PLAY [Deploy gpt-oss-120b]")
    assert deploy and "changed: [" not in checks, out
    said = " ".join(out.split())
    assert "is not cached yet: model_cache downloads it before the release starts" in said, out
    preview = (r"check mode: release [0-9a-f]{12} \(/opt/ans-bad/releases/[0-9a-f]{12}, new\) would be "
               r"written, started, health-checked and gated; the release that runs now: none")
    assert re.search(preview, said), out
    assert not cache.exists(), "the checks created the model cache folder"
    assert_nothing_deployed()


def test_cluster_discovery_names_docker_when_docker_is_down(target: str, tmp_path: Path) -> None:
    """Both nodes are a container without the engine's socket: Docker does not answer there, and the
    RDMA ports cannot be listed either. The failure names Docker, not the NIC tools (it used to say
    "install the MLNX OFED tools")."""
    nodocker = "ans-bad-nodocker"
    _docker("rm", "-f", nodocker, check=False)
    _docker("run", "-d", "--name", nodocker, "-v", f"{HOST_DIR}:{HOST_DIR}", TARGET_IMAGE, "sleep", "inf")
    hosts = {h: {**v, "ansible_host": nodocker} for h, v in cluster_hosts((CPU_IMAGE, CPU_IMAGE)).items()}
    try:
        rc, out, recap = play(tmp_path, "cluster.yml", "sparkserve_cluster", hosts, base_vars())
    finally:
        _docker("rm", "-f", nodocker, check=False)
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-node0",
        r"cannot check CX-7 link to ans-bad-node1 \(192.168.100.11\): Docker, not the NIC tools: "
        r"Docker does not answer on this host \(`docker version`: Cannot connect to the Docker daemon",
    )
    assert "MLNX OFED" not in out, out


def test_cluster_discovery_names_the_nic_tools_when_they_are_missing(target: str, tmp_path: Path) -> None:
    """Docker answers, `ibdev2netdev` does not exist on the host: the NIC tools are named."""
    hosts = cluster_hosts((CPU_IMAGE, CPU_IMAGE))
    rc, out, recap = play(tmp_path, "cluster.yml", "sparkserve_cluster", hosts, base_vars())
    assert_failed_unchanged(
        rc,
        out,
        recap,
        "ans-bad-node0",
        r"no usable CX-7 link to ans-bad-node1 \(192.168.100.11\): `ibdev2netdev` failed "
        r"\(not found on the host\): install the MLNX OFED / DOCA host tools",
    )
    assert "Docker, not the NIC tools" not in out, out
