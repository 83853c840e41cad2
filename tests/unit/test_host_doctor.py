"""`sparkserve doctor`: each missing piece of a host is named with what to do (fake probes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkserve.cli import main as cli
from sparkserve.serving import host

GOOD = {
    ("docker", "version"): (0, "27.3.1"),
    ("docker", "compose"): (0, "2.40.3"),
    ("docker", "info"): (0, "/var/lib/docker"),
    ("docker", "image"): (1, "No such image"),
    ("nvidia-smi",): (0, "NVIDIA GB10, 580.95.05, 12.1"),
}
PATHS = {"docker": "/usr/bin/docker", "nvidia-smi": "/usr/bin/nvidia-smi",
         host.TOOLKIT_HOOK: f"/usr/bin/{host.TOOLKIT_HOOK}"}


def probes(answers: dict[tuple[str, ...], tuple[int, str]] | None = None, paths: dict[str, str] | None = None,
           free: int | None = 500 * host.GB, machine: str = "aarch64") -> host.Probes:
    answers = {**GOOD, **(answers or {})}
    found = {k: v for k, v in {**PATHS, **(paths or {})}.items() if v}

    def run(argv: list[str]) -> tuple[int, str]:
        for key in (tuple(argv[:2]), tuple(argv[:1])):
            if key in answers:
                if argv[1:2] == ["info"] and "Runtimes" in argv[-1]:
                    return 0, '{"io.containerd.runc.v2":{},"runc":{}}'
                return answers[key]
        raise AssertionError(argv)

    return host.Probes(run=run, which=found.get, free_bytes=lambda p: free, machine=machine)


def verdicts(h: host.Probes) -> dict[str, host.Check]:
    return {c.name: c for c in host.check_all(h)}


def test_a_dgx_spark_with_everything_passes() -> None:
    checks = verdicts(probes())
    assert all(c.ok for c in checks.values()), [c.line() for c in checks.values()]
    assert "NVIDIA GB10, driver 580.95.05, compute capability 12.1" in checks["NVIDIA driver"].detail


def test_a_host_without_the_container_toolkit_is_told_what_to_install() -> None:
    """Compose used to stop at Docker's `could not select device driver "nvidia"` with no hint."""
    c = verdicts(probes(paths={host.TOOLKIT_HOOK: ""}))["NVIDIA Container Toolkit"]
    assert c.ok is False and "install nvidia-container-toolkit" in c.detail and "nvidia-ctk" in c.detail


def test_the_nvidia_runtime_also_counts_as_the_toolkit() -> None:
    h = probes(paths={host.TOOLKIT_HOOK: ""})
    plain = h.run

    def run(argv: list[str]) -> tuple[int, str]:
        nvidia = (0, '{"nvidia":{"path":"nvidia-container-runtime"}}')
        return nvidia if "Runtimes" in argv[-1] else plain(argv)

    h.run = run
    assert verdicts(h)["NVIDIA Container Toolkit"].ok is True


def test_no_driver() -> None:
    c = verdicts(probes(paths={"nvidia-smi": ""}))["NVIDIA driver"]
    assert c.ok is False and "no NVIDIA driver" in c.detail
    c = verdicts(probes({("nvidia-smi",): (9, "NVIDIA-SMI has failed")}))["NVIDIA driver"]
    assert c.ok is False and "not loaded" in c.detail


def test_a_gpu_the_default_image_has_no_kernels_for_is_noted() -> None:
    c = verdicts(probes({("nvidia-smi",): (0, "NVIDIA H100 80GB HBM3, 580.1, 9.0")}))["NVIDIA driver"]
    assert c.ok is True and "kernels for 12.1 and 12.0 only" in c.detail


@pytest.mark.parametrize(("answer", "fragment"), [
    ((1, "docker: 'compose' is not a docker command."), "compose v2 is missing"),
    ((0, "2.20.2"), "older than 2.24.4"),
    ((0, "v2.24.3"), "older than 2.24.4"),
    ((0, "v2.24.4"), None),
])
def test_compose_version(answer: tuple[int, str], fragment: str | None) -> None:
    c = verdicts(probes({("docker", "compose"): answer}))["docker compose"]
    assert c.ok is (fragment is None)
    if fragment:
        assert fragment in c.detail


def test_the_host_check_and_the_ansible_role_want_one_compose_minimum() -> None:
    want = ".".join(map(str, host.MIN_COMPOSE))
    role = Path(__file__).resolve().parents[2] / "ansible/roles/spark_host"
    assert yaml.safe_load((role / "defaults/main.yml").read_text())["spark_host_min_compose"] == want
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    declared = {entry["options"]["spark_host_min_compose"]["default"] for entry in specs.values()
                if "spark_host_min_compose" in (entry.get("options") or {})}
    assert declared == {want}


def test_docker_missing_or_refusing() -> None:
    checks = verdicts(probes(paths={"docker": ""}))
    assert checks["docker"].ok is False and "install Docker Engine" in checks["docker"].detail
    c = verdicts(probes({("docker", "version"): (1, "permission denied while trying to connect")}))["docker"]
    assert c.ok is False and "usermod -aG docker" in c.detail


def test_without_docker_the_checks_that_need_it_say_they_did_not_run_and_why() -> None:
    """No Docker answering used to print 3 lines: compose, the toolkit and the disk left out silently."""
    no_cli = verdicts(probes(paths={"docker": "", host.TOOLKIT_HOOK: ""}))
    assert list(no_cli) == ["architecture", "docker", "docker compose", "NVIDIA driver",
                            "NVIDIA Container Toolkit", "disk"]
    for name in ("docker compose", "NVIDIA Container Toolkit", "disk"):
        assert no_cli[name].ok is None and "the docker CLI (`docker`) is not installed" in no_cli[name].detail
    down = {("docker", "version"): (1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock")}
    no_daemon = verdicts(probes(down, paths={host.TOOLKIT_HOOK: ""}))
    assert no_daemon["docker compose"].ok is True  # the CLI's own version: asked without the daemon
    for name in ("NVIDIA Container Toolkit", "disk"):
        assert no_daemon[name].ok is None and "the Docker daemon does not answer" in no_daemon[name].detail
    assert verdicts(probes(down))["NVIDIA Container Toolkit"].ok is True  # its hook is on the host
    lines, summary, status = host.report(host.check_all(probes(down, paths={host.TOOLKIT_HOOK: ""})))
    assert status == 1 and "[skip] disk: not checked: " in "\n".join(lines)
    assert summary.endswith("not checked: NVIDIA Container Toolkit, disk (above: why)")


def test_disk_needs_room_for_the_model_and_a_first_build() -> None:
    c = verdicts(probes(free=80 * host.GB))["disk"]
    assert c.ok is False and "need about 90 GB" in c.detail and "80 GB free in /var/lib/docker" in c.detail
    built = probes({("docker", "image"): (0, "sha256:abc")}, free=80 * host.GB)
    assert verdicts(built)["disk"].ok is True  # the image exists: only the model is left
    assert "the model (~65 GB) needs about 65 GB" in verdicts(built)["disk"].detail
    assert verdicts(probes(free=None))["disk"].ok is None


def test_architecture() -> None:
    assert verdicts(probes(machine="ppc64le"))["architecture"].ok is False


def test_the_doctor_verb_exits_1_when_something_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    lacking, complete = probes(paths={host.TOOLKIT_HOOK: ""}), probes()
    monkeypatch.setattr(host, "Probes", lambda: lacking)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr()
    assert "[FAIL] NVIDIA Container Toolkit" in out.out and "1 problem(s)" in out.err
    monkeypatch.setattr(host, "Probes", lambda: complete)
    assert cli.main(["doctor"]) == 0


def test_probes_default_to_this_machine(tmp_path: Path) -> None:
    h = host.Probes()
    assert h.free_bytes(tmp_path) and h.run(["true"])[0] == 0 and h.machine


def test_the_host_check_runs_from_a_fresh_clone_without_installing_anything(tmp_path: Path) -> None:
    """Docker's `could not select device driver "nvidia"` comes before any gate of `up` can speak, so the
    README has a first-time user run the host check before `up`: on the standard library alone (-S: no
    site-packages), from the checkout's src/."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-S", "-m", "sparkserve.serving.host", str(tmp_path / "no-docker")],
                       cwd=root, env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[FAIL] docker: " in r.stdout and "doctor: " in r.stderr and "problem(s)" in r.stderr
