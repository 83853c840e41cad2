"""lab/scripts/gpu/sitting.sh without a GPU: a bundle's pieces installed once, a background job that keeps
its own pid and outlives nothing it should not, and the records written since setup coming back under OUT
(older ones not)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lab/scripts/gpu/sitting.sh"


def sitting(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATE": str(tmp / "state"), "REPO": str(tmp / "repo"), "SITE": str(tmp / "site"),
           "OUT": str(tmp / "out"), "PY": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def tiny_wheel(folder: Path) -> Path:
    wheel = folder / "tinypkg-1.0-py3-none-any.whl"
    files = {"tinypkg/__init__.py": "VALUE = 7\n",
             "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n"}
    files["tinypkg-1.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in files) + \
        "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_the_pieces_of_a_bundle_are_installed_once(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tiny_wheel(wheels)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with tarfile.open(tmp_path / "bundle.tar", "w") as tar:
        tar.add(next(wheels.iterdir()), arcname="tinypkg-1.0-py3-none-any.whl")
    data = (tmp_path / "bundle.tar").read_bytes()
    step = len(data) // 101 + 1  # 101 pieces, p00..p99 and p100: p100 comes after p99, not after p10
    for i in range(0, len(data), step):
        (bundle / f"p{i // step:02d}").write_bytes(data[i:i + step])
    assert (bundle / "p100").exists()

    first = sitting(tmp_path, "install", str(bundle))
    assert first.returncode == 0, first.stderr
    assert "reassembling 101 pieces" in first.stdout
    assert (tmp_path / "site/tinypkg/__init__.py").read_text() == "VALUE = 7\n"
    again = sitting(tmp_path, "install", str(bundle))
    assert again.returncode == 0 and "already installed" in again.stdout, again.stdout + again.stderr


def become_subreaper() -> None:
    """Orphans become this process's children and, unreaped, zombies: a job that ended must still read as
    ended (the host's init reaps them; a supervising parent, as in serving's supervise.py, may not)."""
    assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER


def test_a_background_job_comes_back_with_the_records_written_since_setup(tmp_path: Path) -> None:
    become_subreaper()
    repo, state = tmp_path / "repo", tmp_path / "state"
    old = repo / "lab/results/gpu/20260101T000000Z-old"
    old.mkdir(parents=True)
    past = time.time() - 3600
    os.utime(old, (past, past))
    state.mkdir()
    (state / "since").touch()
    job = "sleep 1; mkdir -p lab/results/gpu/20260102T000000Z-new; echo record written"
    started = sitting(tmp_path, "start", "job", "sh", "-c", job)
    assert started.returncode == 0, started.stderr

    waited = sitting(tmp_path, "wait", "job", "60")
    assert waited.returncode == 0, waited.stderr
    assert "record written" in waited.stdout and "job: ended" in waited.stdout, waited.stdout
    with tarfile.open(tmp_path / "out/records.tgz") as tar:
        names = tar.getnames()
    assert "lab/results/gpu/20260102T000000Z-new" in names, names
    assert not any("old" in n for n in names), names
    with tarfile.open(tmp_path / "out/logs.tgz") as tar:
        assert any(n.endswith("job.log") for n in tar.getnames())
    os.waitpid(int((state / "job.pid").read_text()), 0)


def test_the_kept_pid_is_the_job_itself_in_a_session_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state/since").touch()
    started = sitting(tmp_path, "start", "long", "sleep", "30")
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "state/long.pid").read_text())
    try:
        time.sleep(0.5)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
        assert os.getsid(pid) == pid  # its own session: the host keeps it when the call returns
        waited = sitting(tmp_path, "wait", "long", "1")
        assert "long: still running" in waited.stdout, waited.stdout
    finally:
        os.kill(pid, 9)


@pytest.mark.parametrize("args", [["start"], ["start", "job"], ["wait"], ["collect"]])
def test_a_step_without_its_arguments_is_refused(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "repo").mkdir()
    assert sitting(tmp_path, *args).returncode != 0
