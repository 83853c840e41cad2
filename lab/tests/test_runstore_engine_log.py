"""A run's engine log is stored gzipped (the store travels with every GPU call, whose size is capped),
read back as the text it was, and level 1.5 of a stored run reads either form."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from sparkserve_lab.cli.main import main
from sparkserve_lab.runstore import ENGINE_LOG, ENGINE_LOG_GZ, METADATA, Run, Store
from sparkserve_lab.validate.logparse import parse_file, read_log

from sparkserve.cli import common

ROOT = Path(__file__).resolve().parents[2]
# a stored H200 run of the profile as shipped (its log shows every kernel the profile claims)
SHIPPED = ROOT / "lab" / "results" / "nvidia-h200" / "20261203T135054Z-hopper-h100-load-55a8"


def test_a_stored_log_is_gzipped_read_back_whole_and_the_same_bytes_twice(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO Using FlashAttention backend.\n" * 500 + "ünïcode line\n")
    run = Run(tmp_path / "run")
    run.path.mkdir()
    stored = run.store_engine_log(log)
    assert stored.name == ENGINE_LOG_GZ and not run.file(ENGINE_LOG).exists()
    assert stored.read_bytes()[:2] == b"\x1f\x8b" and stored.stat().st_size < log.stat().st_size / 10
    assert run.engine_log() == stored
    assert read_log(stored) == log.read_text()
    first = stored.read_bytes()
    assert run.store_engine_log(log).read_bytes() == first


def test_a_record_made_before_keeps_its_plain_log(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.path.mkdir()
    assert run.engine_log() is None
    run.file(ENGINE_LOG).write_text("INFO Using FlashAttention backend.\n")
    assert run.engine_log() == run.file(ENGINE_LOG)
    assert parse_file(run.file(ENGINE_LOG)).selected == parse_file(_gzipped(run.file(ENGINE_LOG))).selected


def _gzipped(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    out.write_bytes(gzip.compress(path.read_bytes()))
    return out


def _stored_copy(tmp_path: Path, with_log: bool) -> Store:
    dest = tmp_path / "store" / SHIPPED.parent.name / SHIPPED.name
    dest.mkdir(parents=True)
    shutil.copyfile(SHIPPED / METADATA, dest / METADATA)
    if with_log:
        shutil.copyfile(SHIPPED / ENGINE_LOG_GZ, dest / ENGINE_LOG_GZ)
    return Store(tmp_path / "store")


def test_level_1_5_of_a_stored_run_reads_its_gzipped_log(tmp_path: Path) -> None:
    store = _stored_copy(tmp_path, with_log=True)
    rc = main(["level", "1.5", "--store", str(store.root), "--run", SHIPPED.name])
    assert rc == common.OK
    validation = store.get(SHIPPED.name).validation()
    assert validation is not None and validation["valid"] is True


def test_level_1_5_of_a_stored_run_without_a_log_says_to_give_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _stored_copy(tmp_path, with_log=False)
    rc = main(["level", "1.5", "--store", str(store.root), "--run", SHIPPED.name])
    assert rc == common.ERROR
    assert "has no engine log: give one with --log" in capsys.readouterr().err
