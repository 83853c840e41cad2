"""The disk-room check scripts/test.sh runs before its first phase."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from sparkserve_lab.testing import room

ROOT = Path(__file__).resolve().parents[2]


class FakeStat:
    def __init__(self, free: int) -> None:
        self.f_bavail, self.f_frsize = free // 4096, 4096


def with_free(monkeypatch: pytest.MonkeyPatch, gb: float) -> None:
    monkeypatch.setattr(room.os, "statvfs", lambda _p: FakeStat(int(gb * room.GB)))


def test_a_disk_without_room_for_the_phases_without_docker_stops_the_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_free(monkeypatch, 0.0)
    (tmp_path / "docker").mkdir()
    status, message = room.check(["setup", "unit", "patches-site", "image"], [tmp_path],
                                 docker_root=tmp_path / "docker", work=tmp_path / ".work")
    assert status == room.REFUSE
    assert "0.0 GB free" in message and "not enough to start" in message
    assert "footprint.sh" in message and "docker builder prune" in message  # what frees it


def test_a_shortfall_only_docker_could_cover_is_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    with_free(monkeypatch, 10.0)
    status, message = room.check(["setup", "patches-site", "image", "image-arm64"], [tmp_path],
                                 docker_root=tmp_path / "none", work=tmp_path / ".work")
    assert status == room.SHORT and "may fill the disk" in message


def test_enough_room_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_free(monkeypatch, 500.0)
    status, message = room.check(list(room.NEEDS_GB), [tmp_path])
    assert status == room.OK and "\n" not in message


def test_the_need_counts_only_the_phases_that_run() -> None:
    total, without_docker = room.need_gb(["setup", "image", "a-new-phase"])
    assert total == room.NEEDS_GB["setup"] + room.NEEDS_GB["image"] + 1.0
    assert without_docker == room.NEEDS_GB["setup"] + 1.0


def test_the_least_free_path_is_named_and_missing_paths_use_their_parent(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    frees = {str(tmp_path / "a"): 5.0, str(tmp_path): 3.0}
    monkeypatch.setattr(room.os, "statvfs", lambda p: FakeStat(int(frees[str(p)] * room.GB)))
    (tmp_path / "a").mkdir()
    free, where = room.free_bytes([tmp_path / "a", tmp_path / "b" / "c"]) or (0, None)
    assert where == tmp_path / "b" / "c" and free == pytest.approx(3.0 * room.GB, rel=1e-3)


def test_the_table_knows_every_phase_of_the_test_command() -> None:
    script = (ROOT / "scripts/test.sh").read_text()
    listed = re.search(r"^OWN_PHASES=\(([^)]*)\)", script, re.M)
    assert listed, "OWN_PHASES not found in scripts/test.sh"
    own = {entry.split(":")[0] for entry in listed.group(1).split()}
    numbered = {re.sub(r"^\d\d-", "", p.stem) for p in (ROOT / "scripts/ci").glob("[0-9][0-9]-*.sh")}
    assert own and numbered
    assert own | numbered == set(room.NEEDS_GB)
    assert set(room.NEEDS_GB) >= room.DOCKER_PHASES


def test_the_command_exits_1_and_says_so_on_stderr(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with_free(monkeypatch, 0.1)
    assert room.main(["--phases", "setup unit", "--work", str(tmp_path), str(tmp_path)]) == 1
    assert "not enough to start" in capsys.readouterr().err
    assert os.path.isdir(tmp_path)
