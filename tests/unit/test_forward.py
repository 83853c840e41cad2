"""`sparkserve patches export --to-upstream DIR`: a branch per upstream with the patches ready to
forward, as commits on the pinned sdist."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkserve.cli.main import main
from sparkserve.errors import SparkserveError
from sparkserve.supply.patches import forward
from sparkserve.supply.patches.series import load_series
from sparkserve.supply.sources import fetch

from .conftest import Project, author_series

NOT_READY = "Forward: not ready: a test patch\n"


def _mark_ready(project: Project, upstream: str, index: int) -> None:
    d = project.root / "patches" / upstream
    name = (d / "series").read_text().splitlines()[1:][index]
    text = (d / name).read_text()
    (d / name).write_text(text.replace(NOT_READY, "Forward: ready: the change and its test\n", 1))


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout


def test_the_ready_patches_become_commits_on_the_pinned_sdist(project: Project, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    _mark_ready(project, "vllm", 0)
    out = tmp_path / "forward"
    branch = forward.write(project.pins, "vllm", fetch(project.pins, "vllm"),
                           load_series(project.root, "vllm"), out)
    assert branch.commits == ["0001-kernel-change-line-20"]
    assert branch.held_back == {"0002-kernel-change-line-20-again-and-other-py": "a test patch"}
    tree = out / "vllm"
    assert _git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == "sparkserve-forward-0.33.0"
    log = _git(tree, "log", "--format=%an <%ae>|%s", "upstream..HEAD").splitlines()
    assert log == ["sparkserve developers <dev@sparkserve.invalid>|Kernel: change line 20"]
    msg = _git(tree, "log", "-1", "--format=%B")
    assert msg.startswith("Kernel: change line 20\n\nA longer explanation.\n\nSecond paragraph.\n")
    assert "Gate:" not in msg and "Ready to forward: the change and its test" in msg
    assert (tree / "vllm/kernel.py").read_text().count("LINE 20") == 1
    assert _git(tree, "diff", "--stat", "upstream", "HEAD").strip().startswith("vllm/kernel.py")


def test_a_ready_patch_that_needs_a_held_back_one_is_refused(project: Project, tmp_path: Path) -> None:
    author_series(project, tmp_path)
    _mark_ready(project, "vllm", 1)  # edits lines the held-back first patch changed
    with pytest.raises(SparkserveError, match="without the patches held back before it"):
        forward.write(project.pins, "vllm", fetch(project.pins, "vllm"), load_series(project.root, "vllm"),
                      tmp_path / "forward")


def test_the_cli_writes_a_tree_per_upstream(project: Project, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    author_series(project, tmp_path)
    _mark_ready(project, "flashinfer", 0)
    assert main(["patches", "export", "--to-upstream", str(tmp_path / "fw")]) == 0
    printed = capsys.readouterr().out
    assert "branch sparkserve-forward-0.33.0, 0 commit(s)" in printed
    assert "held back 0001-kernel-change-line-20: not ready: a test patch" in printed
    assert "branch sparkserve-forward-0.7.2.post1, 1 commit(s)" in printed
    assert (tmp_path / "fw" / "flashinfer" / "tests/test_new.py").is_file()  # the patch's test travels
