"""apply (tree and site forms), all-or-nothing on failure, manifest, export round trip."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.supply import sourcetree
from sparkserve.supply.patches import apply, export
from sparkserve.supply.patches.manifest import SITE_MANIFEST, TREE_MANIFEST
from sparkserve.supply.patches.series import load_series
from sparkserve.supply.sources import fetch

from .conftest import Project, author_series


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and ".git/" not in str(p.relative_to(d)) + "/"}


def test_export_names_and_round_trip(project: Project, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    names = (project.root / "patches/vllm/series").read_text().splitlines()[1:]
    assert names == ["0001-kernel-change-line-20.patch",
                     "0002-kernel-change-line-20-again-and-other-py.patch"]
    # a fresh tree from the sdist + apply + export reproduces patches/ byte for byte
    for name in ("vllm", "flashinfer"):
        tree = sourcetree.make(fetch(project.pins, name), tmp_path / "fresh" / name,
                               project.pins.upstream(name))
        apply.apply_tree(project.pins, tree, name, load_series(project.root, name))
        assert export.diff_against(export.render(tree), project.root / "patches" / name) == []


def test_export_check_detects_a_hand_edit(project: Project, tmp_path: Path) -> None:
    trees = author_series(project, tmp_path)
    p = next((project.root / "patches/vllm").glob("0001-*.patch"))
    p.write_text(p.read_text().replace("Gate: always on", "Gate: always on "))
    assert export.diff_against(export.render(trees["vllm"]), project.root / "patches/vllm") == [
        f"{p.name}: differs from what export produces"
    ]


def test_site_apply_maps_flashinfer_paths_and_writes_manifest(
    project: Project, site: Path, tmp_path: Path
) -> None:
    author_series(project, tmp_path)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    apply.apply_site(project.pins, site, series)
    assert "LINE XX" in (site / "vllm/kernel.py").read_text()
    assert "L3" in (site / "vllm/kernel.py").read_text()
    assert "int sink;" in (site / "flashinfer/data/include/flashinfer/decode.cuh").read_text()
    assert "f(int s)" in (site / "flashinfer/data/csrc/batch_decode.cu").read_text()
    assert not (site / "tests").exists()  # not shipped in wheels: skipped
    m = json.loads((site / SITE_MANIFEST).read_text())["upstreams"]
    assert [e["id"] for e in m["vllm"]["patches"]] == [p.id for p in series["vllm"]]
    assert m["vllm"]["patches"][0]["sha256"] == series["vllm"][0].sha256
    assert sorted(m["flashinfer"]["patches"][0]["files"]) == [
        "flashinfer/data/csrc/batch_decode.cu",
        "flashinfer/data/include/flashinfer/decode.cuh",
        "flashinfer/decode.py",
    ]


def test_site_apply_leaves_hard_linked_copies_alone(
    project: Project, site: Path, tmp_path: Path
) -> None:
    """Installers hard-link site files to their cache: patching must not write through the link."""
    author_series(project, tmp_path)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    cache_copy = tmp_path / "installer-cache-kernel.py"
    os.link(site / "vllm/kernel.py", cache_copy)
    original = cache_copy.read_bytes()
    apply.apply_site(project.pins, site, series)
    assert "LINE XX" in (site / "vllm/kernel.py").read_text()
    assert cache_copy.read_bytes() == original


def test_site_apply_twice_is_detected_and_does_nothing(
    project: Project, site: Path, tmp_path: Path
) -> None:
    author_series(project, tmp_path)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    apply.apply_site(project.pins, site, series)
    before = _snapshot(site)
    again = apply.apply_site(project.pins, site, series)
    assert again == {"vllm": [], "flashinfer": []}
    assert _snapshot(site) == before


def test_site_apply_refuses_a_manifest_from_another_series(
    project: Project, site: Path, tmp_path: Path
) -> None:
    author_series(project, tmp_path)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    apply.apply_site(project.pins, site, series)
    p = series["vllm"][0].path
    p.write_bytes(p.read_bytes().replace(b"Gate: always on", b"Gate: on"))
    with pytest.raises(SparkserveError, match="was patched with 0001-kernel-change-line-20"):
        apply.apply_site(project.pins, site, {"vllm": load_series(project.root, "vllm")})


def _corrupt_second_vllm_patch(project: Project) -> Path:
    """Change a context line of hunk 2 of vllm/kernel.py in patch 0002 so it cannot apply."""
    p = next((project.root / "patches/vllm").glob("0002-*.patch"))
    text = p.read_text()
    assert " line 19\n" in text
    p.write_text(text.replace(" line 19\n", " line nineteen\n"))
    return p


def test_corrupt_patch_site_is_all_or_nothing(project: Project, site: Path, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    bad = _corrupt_second_vllm_patch(project)
    before = _snapshot(site)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    with pytest.raises(apply.PatchFailed) as err:
        apply.apply_site(project.pins, site, series)
    msg = str(err.value)
    # names the patch, the file and the hunk
    assert f"patch vllm/{bad.name} does not apply" in msg
    assert "file vllm/kernel.py (installed as vllm/kernel.py), hunk 2 of 2 (@@ -17,7 +17,7 @@)" in msg
    # nothing changed: not patch 0001 (which applied), not flashinfer, and no manifest
    assert _snapshot(site) == before
    assert not (site / SITE_MANIFEST).exists()


def test_a_failure_in_the_second_upstream_undoes_the_first(
    project: Project, site: Path, tmp_path: Path
) -> None:
    """The series of all upstreams is one transaction: vLLM's patches apply first, then FlashInfer's
    fails, and the site keeps none of either."""
    author_series(project, tmp_path)
    p = next((project.root / "patches/flashinfer").glob("0001-*.patch"))
    text = p.read_text()
    assert " // binding\n" in text
    p.write_text(text.replace(" // binding\n", " // bindings\n"))
    before = _snapshot(site)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    assert [n for n in series] == ["vllm", "flashinfer"] and len(series["vllm"]) == 2
    with pytest.raises(apply.PatchFailed, match=rf"patch flashinfer/{p.name} does not apply"):
        apply.apply_site(project.pins, site, series)
    assert _snapshot(site) == before  # vllm/kernel.py and vllm/other.py untouched
    assert not (site / SITE_MANIFEST).exists()


def test_corrupt_patch_tree_is_all_or_nothing(project: Project, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    bad = _corrupt_second_vllm_patch(project)
    tree = sourcetree.make(fetch(project.pins, "vllm"), tmp_path / "t" / "vllm",
                           project.pins.upstream("vllm"))
    head = (tree / ".git/refs/heads/main").read_text()
    before = _snapshot(tree)
    with pytest.raises(apply.PatchFailed, match=rf"patch vllm/{bad.name} does not apply: "
                       r"file vllm/kernel.py, hunk 2 of 2"):
        apply.apply_tree(project.pins, tree, "vllm", load_series(project.root, "vllm"))
    assert (tree / ".git/refs/heads/main").read_text() == head
    assert _snapshot(tree) == before
    assert not (tree / TREE_MANIFEST).exists()


def test_tree_apply_commits_headers_verbatim_and_is_idempotent(
    project: Project, tmp_path: Path
) -> None:
    author_series(project, tmp_path)
    series = load_series(project.root, "vllm")
    tree = sourcetree.make(fetch(project.pins, "vllm"), tmp_path / "t" / "vllm",
                           project.pins.upstream("vllm"))
    assert len(apply.apply_tree(project.pins, tree, "vllm", series)) == 2
    from sparkserve.supply import gitutil

    assert gitutil.commit_message(tree, "HEAD") == series[1].header_text
    assert apply.apply_tree(project.pins, tree, "vllm", series) == []
    assert gitutil.out(["status", "--porcelain"], tree) == ""  # manifest is git-ignored


def test_site_version_mismatch_is_refused(project: Project, site: Path, tmp_path: Path) -> None:
    meta = site / "vllm-0.33.0.dist-info"
    shutil.move(meta, site / "vllm-0.32.0.dist-info")
    (site / "vllm-0.32.0.dist-info/METADATA").write_text("Name: vllm\nVersion: 0.32.0\n")
    with pytest.raises(SparkserveError, match=r"has vllm 0.32.0; the series is for the pinned 0.33.0"):
        apply.apply_site(project.pins, site, {"vllm": []})


def test_missing_installed_file_is_named(project: Project, site: Path, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    (site / "flashinfer/data/csrc/batch_decode.cu").unlink()
    with pytest.raises(apply.PatchFailed,
                       match=r"file csrc/batch_decode.cu \(installed as flashinfer/data/csrc/"
                             r"batch_decode.cu\) is missing"):
        apply.apply_site(project.pins, site, {"flashinfer": load_series(project.root, "flashinfer")})


def test_sdist_commit_must_match_pin(project: Project, tmp_path: Path) -> None:
    up = project.pins.upstream("vllm")
    bad = type(up)(**{**up.__dict__, "commit": "deadbeef"})
    with pytest.raises(SparkserveError, match=r"pin upstream\.vllm\.commit is deadbeef"):
        sourcetree.make(fetch(project.pins, "vllm"), tmp_path / "x", bad)


def test_site_overlay_carries_changed_added_and_deleted_files(
    project: Project, site: Path, tmp_path: Path
) -> None:
    """The image takes the unpatched venv layer plus this overlay: a file the series deletes must be
    listed, since laying a tree over another cannot remove anything."""
    from .conftest import commit_patch

    trees = author_series(project, tmp_path)
    v = trees["vllm"]
    (v / "vllm/other.py").unlink()
    commit_patch(v, "Remove other.py, add new.py", {"vllm/new.py": "NEW = 1\n"})
    export.write(export.render(v), project.root / "patches" / "vllm")
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    overlay = tmp_path / "overlay"
    apply.apply_site(project.pins, site, series, overlay=overlay)
    assert not (site / "vllm/other.py").exists() and (site / "vllm/new.py").read_text() == "NEW = 1\n"
    deleted = (overlay / apply.OVERLAY_DELETED).read_text().splitlines()
    assert deleted == [str((site / "vllm/other.py").resolve())]
    files = overlay / apply.OVERLAY_FILES
    def laid(p: Path) -> Path:
        r = p.resolve()
        return files / r.relative_to(r.anchor)
    assert laid(site / "vllm/new.py").read_text() == "NEW = 1\n"
    assert "LINE XX" in laid(site / "vllm/kernel.py").read_text()
    assert laid(site / SITE_MANIFEST).is_file()
    assert not laid(site / "vllm/other.py").exists()
    assert not laid(site / "vllm/_version.py").exists()  # untouched files are not in the overlay
