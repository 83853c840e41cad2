"""The prewarmed FlashInfer modules become FlashInfer AOT modules (image/aotlinks.py), so the JIT workspace
can live in the cache volume. Pure Python: files and links in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import aotlinks
from sparkserve.serving import caches


def _image(tmp_path: Path, uris: list[str]) -> tuple[Path, Path]:
    site, cache = tmp_path / "site", tmp_path / "jit-cache"
    (site / "flashinfer").mkdir(parents=True)
    built = []
    for uri in uris:
        lib = cache / "cached_ops" / uri / f"{uri}.so"
        lib.parent.mkdir(parents=True)
        lib.write_bytes(b"\x7fELF" + uri.encode())
        built.append({"name": uri, "uri": uri, "library": str(lib)})
    info = cache / "sparkserve-build-info.json"
    info.write_text(json.dumps({"built": built}))
    return site, info


def test_built_modules_load_from_the_aot_folder_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    site, info = _image(tmp_path, ["xqa_a", "batch_decode_b"])
    links = aotlinks.link(info, site)
    assert sorted(p.name for p in links) == ["batch_decode_b.so", "xqa_a.so"]
    so = site / "flashinfer/data/aot/xqa_a/xqa_a.so"
    assert so.is_symlink() and so.read_bytes() == b"\x7fELFxqa_a"  # FlashInfer's own fallback path
    before = {p: p.readlink() for p in aotlinks.aot_dir(site).rglob("*.so")}
    aotlinks.link(info, site)
    assert {p: p.readlink() for p in aotlinks.aot_dir(site).rglob("*.so")} == before
    assert not list(aotlinks.aot_dir(site).rglob("*.tmp"))
    assert aotlinks.linked(site) == (2, [])
    line = caches.prebuilt_line(site)
    assert line is not None and "2 prewarmed module(s) load without compiling" in line


def test_a_missing_library_changes_nothing(tmp_path: Path) -> None:
    site, info = _image(tmp_path, ["mod_a", "mod_b"])
    (tmp_path / "jit-cache/cached_ops/mod_b/mod_b.so").unlink()
    with pytest.raises(SparkserveError, match=r"mod_b: the prewarmed library .* is missing"):
        aotlinks.link(info, site)
    assert not aotlinks.aot_dir(site).exists()


def test_a_real_module_in_the_way_is_not_replaced(tmp_path: Path) -> None:
    site, info = _image(tmp_path, ["mod_a"])
    real = aotlinks.aot_dir(site) / "mod_a" / "mod_a.so"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"built elsewhere")
    with pytest.raises(SparkserveError, match="is a file, not a link"):
        aotlinks.link(info, site)
    assert real.read_bytes() == b"built elsewhere"


def test_not_a_build_info_or_no_flashinfer(tmp_path: Path) -> None:
    site, info = _image(tmp_path, ["mod_a"])
    info.write_text("{}")
    with pytest.raises(SparkserveError, match="not a `jit prewarm` build info"):
        aotlinks.link(info, site)
    with pytest.raises(SparkserveError, match="holds no flashinfer package"):
        aotlinks.link(info, tmp_path / "elsewhere")


def test_dangling_links_are_reported_at_start(tmp_path: Path) -> None:
    site, info = _image(tmp_path, ["mod_a", "mod_b"])
    aotlinks.link(info, site)
    (tmp_path / "jit-cache/cached_ops/mod_b/mod_b.so").unlink()
    good, dangling = aotlinks.linked(site)
    assert good == 1 and [p.parent.name for p in dangling] == ["mod_b"]
    line = caches.prebuilt_line(site)
    assert line is not None and "1 link(s) lead nowhere (mod_b)" in line and "rebuild the image" in line
    assert caches.prebuilt_line(tmp_path / "no-site") is None


def test_the_flashinfer_workspace_is_a_cache_folder(tmp_path: Path) -> None:
    plan = caches.prepare(tmp_path / "cache", "0123456789abcdef", {})
    assert plan.env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "cache/0123456789abcdef/flashinfer")
    kept = caches.prepare(tmp_path / "cache", "0123456789abcdef", {"FLASHINFER_WORKSPACE_BASE": "/elsewhere"})
    assert "FLASHINFER_WORKSPACE_BASE" not in kept.env
