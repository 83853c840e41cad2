"""`sparkserve proof upstream-tests`: upstream's own test files that import a changed module run with the
series reverted, then applied; a changed outcome fails unless a patch carries that test file; tests that
fail in both states are listed with their reason."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.harness import upstream_tests as ut
from sparkserve.supply import gitutil
from sparkserve.supply.patches.series import Patch, load_patch

from .conftest import Project, author_series

HEADER = """Description: {summary}
Author: sparkserve developers <dev@sparkserve.invalid>
Origin: vendor
Forwarded: no
Forward: not ready: a test patch
Gate: always on
Proof: tests/test_calc.py
Verified-On: cpu
Last-Update: 2026-11-22
---
"""
UPSTREAM = {
    "vllm/__init__.py": "",
    "vllm/calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from vllm.calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
    "tests/test_needs_gpu.py": "import vllm.calc\nimport a_gpu_only_package_not_here\n\n\n"
                               "def test_x():\n    pass\n",
    "tests/test_other.py": "def test_unrelated():\n    pass\n",
}


def _tree(tmp: Path) -> Path:
    tree = tmp / "tree"
    for rel, text in UPSTREAM.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    gitutil.run(["init", "-q", "-b", "main"], tree)
    gitutil.run(["add", "-A"], tree)
    gitutil.run(["commit", "-q", "-m", "upstream"], tree, date="2000-01-01T00:00:00+00:00")
    gitutil.run(["tag", "upstream"], tree)
    return tree


def _patch(tree: Path, tmp: Path, summary: str, edits: dict[str, str]) -> Patch:
    before = gitutil.out(["rev-parse", "HEAD"], tree).strip()
    for rel, text in edits.items():
        (tree / rel).write_text(text)
    gitutil.run(["add", "-A"], tree)
    gitutil.run(["commit", "-q", "-m", summary], tree, date="2000-01-02T00:00:00+00:00")
    diff = gitutil.out(["diff", "--full-index", before, "HEAD"], tree)
    path = tmp / f"{len(list(tmp.glob('*.patch'))) + 1:04d}-{summary.replace(' ', '-')}.patch"
    path.write_text(HEADER.format(summary=summary) + diff)
    return load_patch("vllm", path)


def _patched_site(tree: Path, tmp: Path, series: list[Patch]) -> Path:
    site = tmp / "site"
    for rel, text in UPSTREAM.items():
        if rel.startswith("vllm/"):
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
    for p in series:
        ut._apply_site(p, site, reverse=False)
    return site


def test_module_and_import_rules() -> None:
    assert ut.module_of("vllm/a/b.py") == "vllm.a.b" and ut.module_of("vllm/a/__init__.py") == "vllm.a"
    assert ut.module_of("include/x.cuh") is None and ut.module_of("tests/test_a.py") is None
    assert ut.imports("import vllm.a.b as m\n", "vllm.a.b")
    assert ut.imports("from vllm.a.b import f\n", "vllm.a.b")
    assert ut.imports("from vllm.a import (x,\n    b)\n", "vllm.a.b")  # a parenthesised list over lines
    assert ut.imports("from vllm.a import x, b\n", "vllm.a.b")
    assert not ut.imports("import vllm.a.bc\n", "vllm.a.b")
    assert not ut.imports("# import vllm.a.b\n", "vllm.a.b")


def test_flips_are_reported_and_fail_unless_the_patch_carries_the_test(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    pdir = tmp_path / "patches"
    pdir.mkdir()
    carried = _patch(tree, pdir, "add mul with its test", {
        "vllm/calc.py": UPSTREAM["vllm/calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n",
        "tests/test_calc.py": UPSTREAM["tests/test_calc.py"].replace("import add", "import add, mul")
        + "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"})
    breaking = _patch(tree, pdir, "add subtracts", {
        "vllm/calc.py": (tree / "vllm/calc.py").read_text().replace("return a + b", "return a - b")})
    series = [carried, breaking]
    site = _patched_site(tree, tmp_path, series)
    site_before = {p: p.read_bytes() for p in site.rglob("*.py")}
    work = tmp_path / "work"
    work.mkdir()
    rep = ut.run(tree, site, series, sys.executable, work)
    assert rep.selected == {"vllm/calc.py": ["tests/test_calc.py", "tests/test_needs_gpu.py"]}
    assert ut.select(tree, ["vllm/calc.py"], skip=["vllm/calc.py"]) == ({}, [])
    flips = {f["test"]: f for f in rep.flips}
    assert flips["tests.test_calc::test_mul"] == {"test": "tests.test_calc::test_mul", "unpatched": "absent",
                                                  "patched": "passed", "carried": "yes"}
    # test_add's file is one a patch changes, but not test_add itself: its flip is the breaking patch's
    assert flips["tests.test_calc::test_add"]["patched"] == "failed"
    assert [f["test"] for f in rep.failures] == ["tests.test_calc::test_add"]
    assert [e["test"] for e in rep.environmental] == ["tests.test_needs_gpu"]
    assert "a_gpu_only_package_not_here" in rep.environmental[0]["reason"]
    assert {p: p.read_bytes() for p in site.rglob("*.py")} == site_before  # left patched
    assert gitutil.out(["rev-parse", "--abbrev-ref", "HEAD"], tree).strip() == "main"


def test_a_test_the_patch_changes_may_flip() -> None:
    old = "import x\n\n\ndef test_a():\n    assert 1\n\n\nclass TestB:\n    def test_c(self):\n        pass\n"
    assert ut.test_source(old, "test_a[p1]") == "def test_a():\n    assert 1"
    assert ut.test_source(old, "TestB::test_c") == "def test_c(self):\n        pass"
    assert ut.test_source(old, "test_missing") is None and ut.test_source("def (", "test_a") is None


def test_a_flip_in_a_test_no_patch_carries_fails(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    pdir = tmp_path / "patches"
    pdir.mkdir()
    breaking = _patch(tree, pdir, "add subtracts", {"vllm/calc.py": "def add(a, b):\n    return a - b\n"})
    site = _patched_site(tree, tmp_path, [breaking])
    work = tmp_path / "work"
    work.mkdir()
    rep = ut.run(tree, site, [breaking], sys.executable, work)
    assert [(f["test"], f["carried"]) for f in rep.failures] == [("tests.test_calc::test_add", "")]
    shutil.rmtree(work)


def test_the_cli_builds_the_tree_from_the_sdist_and_leaves_the_site_patched(
        project: Project, site: Path, tmp_path: Path) -> None:
    """The synthetic upstreams (tests/unit/conftest.py): the series reverted and re-applied in the site
    (its tests/ hunk is not shipped there), the sdist tree built and patched as `patches check` does."""
    import json

    from sparkserve.cli.main import main
    from sparkserve.supply.patches import apply
    from sparkserve.supply.patches.series import load_series

    author_series(project, tmp_path)
    apply.apply_site(project.pins, site, {"vllm": load_series(project.root, "vllm")})
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    out = tmp_path / "upstream-tests.json"
    argv = ["proof", "upstream-tests", "--site", str(site), "--upstream", "vllm", "--out", str(out)]
    assert main(argv) == 0
    rep = json.loads(out.read_text())["vllm"]
    assert rep["selected"] == {"vllm/kernel.py": [], "vllm/other.py": []} and rep["flips"] == []
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    assert main(["proof", "upstream-tests", "--list", "--upstream", "vllm"]) == 0  # no site needed
    assert main(["proof", "upstream-tests", "--upstream", "vllm"]) == 3  # neither --site nor --list


def test_the_site_is_imported_not_the_trees_own_copy(tmp_path: Path) -> None:
    """vLLM's tests/ is a package: pytest's default import mode would put the tree's root, and with it the
    tree's uncompiled vllm/, first on the path."""
    import sys

    tree, site = tmp_path / "tree", tmp_path / "site"
    for root, where in ((tree, "tree"), (site, "site")):
        (root / "vllm").mkdir(parents=True)
        (root / "vllm" / "__init__.py").write_text(f"WHERE = {where!r}\n")
    (tree / "tests").mkdir()
    (tree / "tests" / "__init__.py").write_text("")
    (tree / "tests" / "test_which.py").write_text("import vllm\n\n\ndef test_site():\n"
                                                  "    assert vllm.WHERE == 'site'\n")
    got = ut.run_tests(sys.executable, tree, ["tests/test_which.py"], site, tmp_path / "j.xml")
    assert [r.outcome for r in got.values()] == [ut.PASSED], got


def test_a_state_where_pytest_ran_nothing_fails_with_its_output(tmp_path: Path) -> None:
    """A proof over zero tests proves nothing: a conftest that breaks the session is an error, not a pass."""
    tree, site = tmp_path / "tree", tmp_path / "site"
    (tree / "tests").mkdir(parents=True)
    site.mkdir()
    (tree / "tests" / "conftest.py").write_text("raise ImportError('needs a package this host lacks')\n")
    (tree / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    with pytest.raises(SparkserveError, match=r"(?s)ran no test.*needs a package this host lacks"):
        ut.run_tests(sys.executable, tree, ["tests/test_a.py"], site, tmp_path / "j.xml")


def test_a_named_subset_cuts_the_selection_and_a_stale_entry_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    selected = {"vllm/a.py": ["tests/t1.py", "tests/t2.py"], "vllm/b.py": ["tests/t2.py"], "vllm/c.py": []}
    monkeypatch.setitem(ut.SUBSETS, "small", ("tests/t2.py",))
    assert ut.restrict(selected, "small") == {"vllm/a.py": ["tests/t2.py"], "vllm/b.py": ["tests/t2.py"]}
    monkeypatch.setitem(ut.SUBSETS, "stale", ("tests/t2.py", "tests/gone.py"))
    with pytest.raises(SparkserveError, match=r"tests/gone\.py no longer"):
        ut.restrict(selected, "stale")
    with pytest.raises(SparkserveError, match="no upstream-tests subset 'nope'"):
        ut.restrict(selected, "nope")


def test_a_run_where_pytest_ran_nothing_is_an_error(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    python = tmp_path / "python-without-pytest"
    python.write_text("#!/bin/sh\necho 'No module named pytest' >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(SparkserveError, match=r"(?s)pytest ran no test .*No module named pytest"):
        ut.run_tests(str(python), tree, ["tests/test_calc.py"], tmp_path, tmp_path / "j.xml")
