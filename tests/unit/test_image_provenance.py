"""The image's provenance (sparkserve.serving.provenance): what the image records of its own build, read
back: the build info the JIT stage wrote, the commit of the build argument, the pins it carries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparkserve.image.cross import host_arch
from sparkserve.serving import banner, provenance

ROOT = Path(__file__).resolve().parents[2]


def test_outside_an_image_there_is_no_provenance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(banner, "BUILD_INFO", tmp_path / "absent.json")
    assert provenance.image_info() is None


def test_the_build_info_the_commit_and_the_pins_of_the_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = {"jit_set": "ci", "flashinfer_cuda_arch_list": "12.1a 12.0f",
            "build": {"base_image": "debian:trixie-slim", "target_arch": "arm64"}, "built": []}
    (tmp_path / "build-info.json").write_text(json.dumps(info))
    shutil.copy(ROOT / "pins.toml", tmp_path / "pins.toml")
    monkeypatch.setattr(banner, "BUILD_INFO", tmp_path / "build-info.json")
    monkeypatch.setenv("SPARKSERVE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKSERVE_COMMIT", "0" * 40)
    got = provenance.image_info()
    assert got is not None
    assert got["build_info"] == info and got["commit"] == "0" * 40
    assert got["pins"]["upstreams"]["vllm"]["version"] == "0.33.0"
    assert got["platform"] == f"linux/{host_arch()}"


def test_an_image_without_readable_pins_still_says_how_it_was_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "build-info.json").write_text(json.dumps({"jit_set": "full"}))
    monkeypatch.setattr(banner, "BUILD_INFO", tmp_path / "build-info.json")
    monkeypatch.setenv("SPARKSERVE_ROOT", str(tmp_path / "nowhere"))
    monkeypatch.delenv("SPARKSERVE_COMMIT", raising=False)
    got = provenance.image_info()
    assert got is not None and got["build_info"] == {"jit_set": "full"}
    assert got["pins"] is None and got["commit"] is None
