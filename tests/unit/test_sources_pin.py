"""A wrong sdist pin: the error names the pin, and no file is deleted until the user decides."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from sparkserve.cli import main as cli
from sparkserve.supply import pins, sources

GOOD = b"the pinned sdist bytes"
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()


def pinned(sha: str) -> pins.Pins:
    p = pins.load()
    up = dataclasses.replace(p.upstream("vllm"), sdist_sha256=sha)
    return dataclasses.replace(p, upstreams={**p.upstreams, "vllm": up})


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The package index, served from memory: every download writes GOOD."""
    downloads: list[str] = []
    monkeypatch.setattr(sources, "_sdist_url", lambda index_url, up: f"https://index.invalid/{up.sdist}")

    def download(url: str, dest: Path) -> None:
        downloads.append(url)
        dest.write_bytes(GOOD)

    monkeypatch.setattr(sources, "_download", download)
    return downloads


def test_a_wrong_pin_names_the_pin_and_keeps_the_good_cached_copy(tmp_path: Path, index: list[str]) -> None:
    """It used to say "cached copy has the wrong sha256", delete the good copy and download it again."""
    p = pinned(GOOD_SHA)
    cached = sources.fetch(p, "vllm", tmp_path)
    assert index and cached.read_bytes() == GOOD
    wrong = pinned("f" * 64)
    with pytest.raises(sources.PinMismatch) as info:
        sources.fetch(wrong, "vllm", tmp_path)
    text = str(info.value)
    assert "the pin upstream.vllm.sdist_sha256 in pins.toml says " + "f" * 64 in text
    assert f"has sha256 {GOOD_SHA}" in text and "The file is kept" in text and "--refetch" in text
    assert cached.read_bytes() == GOOD and len(index) == 1  # kept, not downloaded again


def test_a_download_that_does_not_match_the_pin_is_kept(tmp_path: Path, index: list[str]) -> None:
    with pytest.raises(sources.PinMismatch, match="just downloaded from"):
        sources.fetch(pinned("e" * 64), "vllm", tmp_path)
    assert (tmp_path / pins.load().upstream("vllm").sdist).read_bytes() == GOOD
    with pytest.raises(sources.PinMismatch, match="the cached copy"):
        sources.fetch(pinned("e" * 64), "vllm", tmp_path)
    assert len(index) == 1


def test_refetch_is_the_users_decision(tmp_path: Path, index: list[str]) -> None:
    sdist = tmp_path / pins.load().upstream("vllm").sdist
    sdist.write_bytes(b"a corrupt copy")
    with pytest.raises(sources.PinMismatch):
        sources.fetch(pinned(GOOD_SHA), "vllm", tmp_path)
    assert sources.fetch(pinned(GOOD_SHA), "vllm", tmp_path, refetch=True).read_bytes() == GOOD


def test_the_cli_reports_the_mismatch_as_an_error(tmp_path: Path, index: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    sdist = tmp_path / pins.load().upstream("vllm").sdist
    sdist.write_bytes(b"not what the pin says")
    assert cli.main(["sources", "fetch", "--upstream", "vllm", "--dest", str(tmp_path)]) == 3
    assert "upstream.vllm.sdist_sha256" in capsys.readouterr().err
    assert sdist.read_bytes() == b"not what the pin says"
