"""The dev container's Python side without a container: the verbs on missing trees, the check of where
vllm/flashinfer import from, and the editable installs (with a stand-in for uv's build) keeping the
trees' git status clean and using the locked vLLM wheel."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkserve.cli.main import main
from sparkserve.errors import SparkserveError
from sparkserve.supply import devcheck, devtree, editable, gitutil

from .conftest import Project, author_series

WHEEL = "vllm-0.33.0-cp38-abi3-manylinux_2_35_x86_64.whl"


@pytest.fixture
def trees(project: Project, tmp_path: Path) -> dict[str, Path]:
    author_series(project, tmp_path)
    return devtree.init(project.pins)


@pytest.fixture(autouse=True)
def _no_real_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("vllm", "flashinfer"):
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.parametrize("verb", ["install", "check", "enter"])
def test_dev_verbs_without_trees_say_to_run_dev_init(
    project: Project, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["dev", verb])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert f"no source tree at {project.root / 'dev-src'}/" in err
    assert "run `sparkserve dev init` in the checkout" in err and "Traceback" not in err


def _package(root: Path, name: str) -> Path:
    init = root / name / "__init__.py"
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text("")
    return init


def test_origin_check_tells_the_tree_from_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trees = {"vllm": tmp_path / "dev-src/vllm", "flashinfer": tmp_path / "dev-src/flashinfer"}
    v = _package(trees["vllm"], "vllm")
    elsewhere = _package(tmp_path / "site-packages", "flashinfer")
    monkeypatch.syspath_prepend(str(trees["vllm"]))
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    origins = {o.upstream: o for o in devcheck.check(trees)}
    assert origins["vllm"].ok and origins["vllm"].file == v
    assert not origins["flashinfer"].ok
    assert origins["flashinfer"].line() == f"flashinfer: {elsewhere} is NOT in the tree {trees['flashinfer']}"
    monkeypatch.setattr(devcheck, "origin", lambda module: None)
    assert "NOT importable" in devcheck.check(trees)[0].line()


def test_dev_check_fails_unless_both_come_from_the_trees(
    trees: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, tree in trees.items():
        _package(tree, name)
        monkeypatch.syspath_prepend(str(tree))
    assert main(["dev", "check"]) == 0
    out = capsys.readouterr().out
    assert f"vllm: {trees['vllm'] / 'vllm/__init__.py'} (the tree {trees['vllm']})" in out
    assert "vllm tree: " in out and "+ 2 commit(s)" in out
    _package(tmp_path / "site-packages", "flashinfer")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    assert main(["dev", "check"]) == 1
    assert "is NOT in the tree" in capsys.readouterr().out


Build = Callable[[list[str], dict[str, str], Path], subprocess.CompletedProcess[str]]


def _fake_build(calls: list[dict[str, str]], edits: dict[str, str]) -> Build:
    """A stand-in for `uv pip install -e TREE`: records the environment, writes what a backend writes."""
    def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        assert cmd[1:3] == ["pip", "install"] and "--offline" in cmd and "--no-build-isolation" in cmd
        calls.append(env)
        for rel, text in edits.items():
            (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
            (cwd / rel).write_text(text)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_flashinfer_install_keeps_generated_files_out_of_git_status(
    project: Project, trees: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    fi = trees["flashinfer"]
    original = (fi / "flashinfer/_build_meta.py").read_text()
    calls: list[dict[str, str]] = []
    monkeypatch.setattr(editable, "uv_bin", lambda: "uv")
    monkeypatch.setattr(editable, "run_build", _fake_build(calls, {
        "flashinfer/_build_meta.py": '__version__ = "0.0.0+unknown"\n__git_commit__ = "abc"\n',
        "build/lib/x.py": "", "flashinfer/data/include/x.cuh": "", "flashinfer/__pycache__/a.pyc": "",
    }))
    done = editable.install(project.pins, "flashinfer", fi)
    assert calls[0]["FLASHINFER_BUILD_NO_PIP"] == "1" and calls[0]["BUILD_NVEP"] == "0"
    assert (fi / "version.txt").read_text() == "0.7.2.post1\n"
    assert done.restored == ["flashinfer/_build_meta.py"]
    assert (fi / "flashinfer/_build_meta.py").read_text() == original
    assert gitutil.dirty(fi) == []
    editable.install(project.pins, "flashinfer", fi, force=True)  # excludes are not written twice
    excludes = (fi / ".git/info/exclude").read_text().splitlines()
    assert excludes.count(editable.EXCLUDE_HEADER) == 1 and excludes.count("/flashinfer/data/") == 1


def test_an_install_that_leaves_other_changes_fails_naming_them(
    project: Project, trees: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(editable, "uv_bin", lambda: "uv")
    monkeypatch.setattr(editable, "run_build", _fake_build([], {"flashinfer/surprise.txt": "x"}))
    with pytest.raises(SparkserveError, match=r"left changes in .* \?\? flashinfer/surprise.txt"):
        editable.install(project.pins, "flashinfer", trees["flashinfer"])


def _locked_wheel(project: Project, tmp_path: Path, data: bytes, locked: bytes) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / WHEEL).write_bytes(data)
    lock = project.root / "locks/amd64.txt"
    lock.parent.mkdir(exist_ok=True)
    lock.write_text(f"vllm==0.33.0 \\\n    --hash=sha256:{hashlib.sha256(locked).hexdigest()}\n"
                    "    # via -r requirements.in\n")
    return wheels


def test_vllm_install_runs_on_the_locked_wheel(
    project: Project, trees: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = _locked_wheel(project, tmp_path, b"the wheel", b"the wheel")
    calls: list[dict[str, str]] = []
    monkeypatch.setattr(editable, "uv_bin", lambda: "uv")
    monkeypatch.setattr(editable, "host_lock_platform", lambda: "linux-amd64")
    monkeypatch.setattr(editable, "run_build", _fake_build(calls, {"vllm/_version.py": "version = 'x'\n"}))
    done = editable.install(project.pins, "vllm", trees["vllm"], wheels=wheels)
    assert calls[0]["VLLM_USE_PRECOMPILED"] == "1"
    assert calls[0]["VLLM_PRECOMPILED_WHEEL_LOCATION"] == str(wheels / WHEEL)
    assert calls[0]["VLLM_VERSION_OVERRIDE"] == "0.33.0"
    assert done.restored == ["vllm/_version.py"] and gitutil.dirty(trees["vllm"]) == []


def test_a_vllm_wheel_that_is_not_the_locked_one_is_refused(
    project: Project, trees: dict[str, Path], tmp_path: Path
) -> None:
    wheels = _locked_wheel(project, tmp_path, b"another build", b"the wheel")
    with pytest.raises(SparkserveError, match=r"not the locked vllm wheel \(no sha256 of locks/amd64.txt"):
        editable.locked_wheel(project.pins, wheels, "linux-amd64")
    with pytest.raises(SparkserveError, match=r"no vllm 0.33.0 wheel in .*\(Dockerfile, target dev\)"):
        editable.locked_wheel(project.pins, tmp_path / "empty", "linux-amd64")


def test_an_editable_install_from_the_tree_is_not_repeated(
    project: Project, trees: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "site/flashinfer_python-0.7.2.post1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.7.2.post1\n")
    (info / "direct_url.json").write_text(json.dumps(
        {"url": trees["flashinfer"].resolve().as_uri(), "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert editable.installed_from("flashinfer-python") == trees["flashinfer"].resolve()
    assert editable.install(project.pins, "flashinfer", trees["flashinfer"]).skipped


def test_trees_compare_only_mtime_and_size(trees: dict[str, Path]) -> None:
    """Host and container see the same files with another uid and st_dev: git must not re-hash them all."""
    for tree in trees.values():
        assert gitutil.out(["config", "core.checkStat"], tree).strip() == "minimal"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_what_root_made_in_a_tree_goes_to_the_tree_owner(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    os.chown(tree, 12345, 12345)
    (tree / "vllm/_C.abi3.so").write_bytes(b"x")
    (tree / "vllm/data").symlink_to(tree / "vllm")
    assert editable.match_owner(tree) == 3
    assert {p.lstat().st_uid for p in tree.rglob("*")} == {12345}
    assert editable.match_owner(tree) == 0


def test_the_serving_banner_lists_the_patches_of_the_trees(trees: dict[str, Path]) -> None:
    """Serving from the trees (the `serve` profile): the patches come from the trees' manifests."""
    from sparkserve.serving import banner

    assert banner.applied_patches([trees["vllm"], trees["flashinfer"], None]) == [
        "flashinfer: 0001-decode-honour-sinks",
        "vllm: 0001-kernel-change-line-20",
        "vllm: 0002-kernel-change-line-20-again-and-other-py",
    ]
