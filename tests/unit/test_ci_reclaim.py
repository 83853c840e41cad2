"""scripts/ci/reclaim.sh: what scripts/test.sh runs when the room check finds the disk short and an earlier
run left Docker data: the untagged images and the build cache beyond a bound go; nothing else."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_reclaim(tmp_path: Path, with_dockerd: bool, env: dict[str, str] | None = None) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho "Total reclaimed space: 1GB"\n')
    docker.chmod(0o755)
    if with_dockerd:
        (bin_dir / "dockerd").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "dockerd").chmod(0o755)
    r = subprocess.run(["bash", "scripts/ci/reclaim.sh"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
                                        "DOCKER": str(docker), **(env or {})})
    return r, calls.read_text().splitlines() if calls.exists() else []


def test_untagged_images_and_the_cache_beyond_its_bound_go(tmp_path: Path) -> None:
    r, calls = run_reclaim(tmp_path, with_dockerd=True)
    assert r.returncode == 0, r.stderr
    assert calls == ["info", "image prune -f", "builder prune -f --keep-storage 30GB"]
    assert "GB free before" in r.stderr


def test_the_bound_is_a_setting(tmp_path: Path) -> None:
    _, calls = run_reclaim(tmp_path, with_dockerd=True, env={"SPARKSERVE_CI_KEEP_CACHE": "5GB"})
    assert calls[-1] == "builder prune -f --keep-storage 5GB"


def test_without_docker_installed_nothing_runs(tmp_path: Path) -> None:
    r, calls = run_reclaim(tmp_path, with_dockerd=False)
    assert r.returncode == 0 and calls == []
    assert "not installed" in r.stderr


def test_the_test_command_reclaims_only_when_the_room_check_is_short() -> None:
    script = (ROOT / "scripts/test.sh").read_text()
    assert "room || room_rc=$?" in script
    reclaim = script.index("bash scripts/ci/reclaim.sh")
    assert script.index("if (( room_rc != 0 ))") < reclaim < script.index("(( room_rc != 1 )) || exit 1")
