"""The dev trees and `patches export` on bad input: no trees, trees of other pins, the tree of another
upstream, a dirty tree, a commit that no longer exists. Each refusal names what is wrong and leaves
patches/ as it was."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkserve.cli.main import main
from sparkserve.errors import SparkserveError
from sparkserve.supply import devtree, gitutil, sourcetree

from .conftest import Project, author_series


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture
def trees(project: Project, tmp_path: Path) -> dict[str, Path]:
    """patches/ holds two vLLM patches and one FlashInfer patch; dev-src/ has trees made by `dev init`."""
    author_series(project, tmp_path)
    return devtree.init(project.pins)


def _export(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(["patches", "export", *args])
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_export_refuses_the_tree_of_another_upstream(
    project: Project, trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _snapshot(project.root / "patches/vllm")
    rc, out = _export(capsys, "--tree", str(trees["flashinfer"]), "--upstream", "vllm")
    assert rc == 3
    assert f"{trees['flashinfer']} was made from flashinfer-python 0.7.2.post1" in out
    assert "pins upstream.vllm to vllm 0.33.0 (sdist vllm-0.33.0.tar.gz" in out
    assert _snapshot(project.root / "patches/vllm") == before


@pytest.mark.parametrize("explicit_tree", [True, False])
def test_export_before_dev_init_says_to_run_it(
    project: Project, capsys: pytest.CaptureFixture[str], explicit_tree: bool
) -> None:
    tree = ["--tree", str(project.root / "dev-src/vllm")] if explicit_tree else []
    rc, out = _export(capsys, *tree, "--upstream", "vllm")
    assert rc == 3
    assert f"no source tree at {project.root / 'dev-src/vllm'}" in out
    assert "sparkserve dev init" in out and "Traceback" not in out


def test_export_never_deletes_a_patch_it_did_not_recreate(
    project: Project, trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A commit dropped (or renamed) in the tree: its patch stays, and nothing else is written either."""
    gitutil.run(["reset", "-q", "--hard", "HEAD~1"], trees["vllm"])
    (project.root / "patches/vllm/series").write_text("# hand-edited\n" + (
        project.root / "patches/vllm/series").read_text())
    before = _snapshot(project.root / "patches/vllm")
    rc, out = _export(capsys, "--upstream", "vllm")
    assert rc == 3
    assert "0002-kernel-change-line-20-again-and-other-py.patch, which this tree does not produce" in out
    assert "never deletes a patch, and wrote nothing" in out
    assert _snapshot(project.root / "patches/vllm") == before


def test_export_of_a_dirty_tree_names_the_files(
    project: Project, trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    v = trees["vllm"]
    (v / "vllm/other.py").write_text("edited, not committed\n")
    (v / "vllm/new_module.py").write_text("x = 1\n")
    before = _snapshot(project.root / "patches/vllm")
    rc, out = _export(capsys, "--upstream", "vllm")
    assert rc == 3
    assert f"{v} has uncommitted changes" in out
    assert " M vllm/other.py" in out and "?? vllm/new_module.py" in out
    assert _snapshot(project.root / "patches/vllm") == before


def test_export_changes_exactly_the_amended_patch(
    project: Project, trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _snapshot(project.root / "patches/vllm")
    rc, out = _export(capsys, "--upstream", "vllm")
    assert rc == 0 and "byte-identical, nothing changed" in out
    assert _snapshot(project.root / "patches/vllm") == before
    v = trees["vllm"]
    (v / "vllm/other.py").write_text((v / "vllm/other.py").read_text().replace("zeta", "ZETA"))
    gitutil.run(["commit", "-q", "-a", "--amend", "--no-edit", "--cleanup=verbatim"], v)
    rc, out = _export(capsys, "--upstream", "vllm")
    assert rc == 0
    second = "0002-kernel-change-line-20-again-and-other-py.patch"
    assert f"{second} (changed)" in out
    after = _snapshot(project.root / "patches/vllm")
    assert {n for n in after if after[n] != before[n]} == {second}
    assert b"+ZETA" in after[second]


def _repin_vllm(project: Project) -> str:
    """pins.toml now pins another vLLM sdist (sha256); returns the old sha."""
    text = (project.root / "pins.toml").read_text()
    old = re.search(r'sdist_sha256 = "([0-9a-f]+)"', text)
    assert old
    (project.root / "pins.toml").write_text(text.replace(old.group(1), "0" * 64, 1))
    project.reload()
    return old.group(1)


def test_trees_of_other_pins_are_refused_naming_both(
    project: Project, trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old = _repin_vllm(project)
    want = f"was made from vllm 0.33.0 (sdist vllm-0.33.0.tar.gz, sha256 {old}), but pins.toml pins " \
           f"upstream.vllm to vllm 0.33.0 (sdist vllm-0.33.0.tar.gz, sha256 {'0' * 64})"
    with pytest.raises(SparkserveError, match=re.escape(want)):
        devtree.require(project.pins, "vllm")
    with pytest.raises(SparkserveError, match=re.escape(want)):
        devtree.init(project.pins)
    rc, out = _export(capsys, "--upstream", "vllm")
    assert rc == 3 and want in out.replace("\n", " ")


def test_a_folder_that_is_not_a_dev_tree_is_refused(project: Project, tmp_path: Path) -> None:
    (project.root / "dev-src/vllm").mkdir(parents=True)  # e.g. made empty by a bind mount
    with pytest.raises(SparkserveError, match=r"is not a source tree made by `sparkserve dev init`"):
        devtree.require(project.pins, "vllm")


def test_trees_dir_follows_the_environment(project: Project, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert devtree.trees_dir(project.pins) == project.root / "dev-src"
    monkeypatch.setenv(devtree.ENV_DIR, str(tmp_path / "elsewhere"))
    assert devtree.trees_dir(project.pins) == tmp_path / "elsewhere"
    with pytest.raises(sourcetree.MissingTree, match="sparkserve dev init"):
        devtree.require(project.pins, "flashinfer")


def test_describe_names_base_and_commits(trees: dict[str, Path]) -> None:
    text = devtree.describe(trees["vllm"])
    assert text.startswith("vllm 0.33.0 (sdist vllm-0.33.0.tar.gz, sha256 ")
    assert " + 2 commit(s), HEAD " in text


def test_the_tree_export_reads_is_not_moved_by_a_copy(project: Project, trees: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """A copied tree (e.g. moved to another disk) is still the same tree: the base travels with git."""
    moved = tmp_path / "moved" / "vllm"
    shutil.copytree(trees["vllm"], moved, symlinks=True)
    assert subprocess.run(["git", "-C", str(moved), "status", "--porcelain"], capture_output=True,
                          check=True).stdout == b""
    devtree.require(project.pins, "vllm", moved.parent)
