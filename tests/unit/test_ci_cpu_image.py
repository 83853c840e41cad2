"""The CPU image's build step fails its caller when the build fails: the phases call it through `timed`,
in whose `||` bash's errexit does not hold, so only an explicit status can stop the phase."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_step(tmp_path: Path, docker_build_rc: int) -> subprocess.CompletedProcess[str]:
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\n[ "$1" = build ] && exit {docker_build_rc}\nexit 0\n')
    docker.chmod(0o755)
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    script = (
        "source scripts/ci/lib.sh >/dev/null\n"
        "ensure_base_image() { :; }; image_id() { :; }; retag_cleanup() { :; }\n"
        "host_ca() { echo /dev/null; }\n"
        "set -e\n"
        "timed cpu-image ensure_cpu_image\n"
        "echo reached-the-next-step\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DOCKER": str(docker),
           "TORCH_CPU_WHEEL": str(wheel), "CI_WORK": str(tmp_path / "work")}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_failed_build_stops_the_phase(tmp_path: Path) -> None:
    r = run_step(tmp_path, 1)
    assert r.returncode == 1 and "reached-the-next-step" not in r.stdout, r.stdout + r.stderr
    assert "the CPU image's build failed" in r.stderr + r.stdout


def test_a_good_build_goes_on(tmp_path: Path) -> None:
    r = run_step(tmp_path, 0)
    assert r.returncode == 0 and "reached-the-next-step" in r.stdout, r.stdout + r.stderr
