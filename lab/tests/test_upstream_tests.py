"""`sparkserve proof upstream-tests`: upstream's own test files that import a changed module run with the
series reverted, then applied; a changed outcome fails unless a patch carries that test file; tests that
fail in both states are listed with their reason."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from sparkserve_lab import gzfile
from sparkserve_lab import upstream_tests as ut

from sparkserve.errors import SparkserveError
from sparkserve.supply import gitutil
from sparkserve.supply.patches.series import Patch, load_patch
from tests.unit.conftest import Project, author_series

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


def _subtracting(tree: Path, tmp: Path) -> tuple[Patch, Path]:
    """A one-patch series that breaks vllm/calc.py's add, and a site with it applied."""
    pdir = tmp / "patches"
    pdir.mkdir()
    breaking = _patch(tree, pdir, "add subtracts", {
        "vllm/calc.py": UPSTREAM["vllm/calc.py"].replace("return a + b", "return a - b")})
    return breaking, _patched_site(tree, tmp, [breaking])


def _carried_and_breaking(tree: Path, tmp: Path) -> tuple[list[Patch], Path]:
    """Two patches: one adds mul with its test (the test file is carried), one breaks add; a site with
    both applied."""
    pdir = tmp / "patches"
    pdir.mkdir()
    carried = _patch(tree, pdir, "add mul with its test", {
        "vllm/calc.py": UPSTREAM["vllm/calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n",
        "tests/test_calc.py": UPSTREAM["tests/test_calc.py"].replace("import add", "import add, mul")
        + "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"})
    breaking = _patch(tree, pdir, "add subtracts", {
        "vllm/calc.py": (tree / "vllm/calc.py").read_text().replace("return a + b", "return a - b")})
    return [carried, breaking], _patched_site(tree, tmp, [carried, breaking])


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
    series, site = _carried_and_breaking(tree, tmp_path)
    site_before = {p: p.read_bytes() for p in site.rglob("*.py")}
    work = tmp_path / "work"
    work.mkdir()
    rep = ut.run(tree, site, series, sys.executable, work)
    assert rep.selected == {"vllm/calc.py": ["tests/test_calc.py", "tests/test_needs_gpu.py"]}
    skipped = ut.selection(tree, ["vllm/calc.py"], skip=["vllm/calc.py"])
    assert (skipped.tests, skipped.unruled) == ({}, [])
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

    from sparkserve_lab.cli.main import main

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
    assert main([*argv, "--states-together"]) == 3  # both states at once: files side by side only
    assert main([*argv, "--states-together", "--jobs", "2"]) == 0
    assert json.loads(out.read_text())["vllm"]["flips"] == []
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    # a resumed run reads an earlier record's report where the store keeps it gzipped
    earlier = tmp_path / "20261206T000000Z-upstream-tests-vllm-gpu-0000"
    earlier.mkdir()
    (earlier / "upstream-tests.json").write_text(json.dumps({"vllm": {"left_out": {}, "flips": [],
                                                                      "padding": "x" * (1 << 18)}}))
    assert gzfile.compact(earlier) == ["upstream-tests.json"]
    assert main([*argv, "--resume", str(earlier)]) == 0
    assert json.loads(out.read_text())["vllm"]["flips"] == []


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
    monkeypatch.setitem(ut.SUBSETS["vllm"], "small", ("tests/t2.py",))
    assert ut.restrict(selected, "small") == {"vllm/a.py": ["tests/t2.py"], "vllm/b.py": ["tests/t2.py"]}
    monkeypatch.setitem(ut.SUBSETS["vllm"], "stale", ("tests/t2.py", "tests/gone.py"))
    with pytest.raises(SparkserveError, match=r"tests/gone\.py no longer"):
        ut.restrict(selected, "stale")
    with pytest.raises(SparkserveError, match="no upstream-tests subset 'nope' for vllm"):
        ut.restrict(selected, "nope")
    # subsets are per upstream: the same name chooses within --upstream
    monkeypatch.setitem(ut.SUBSETS, "flashinfer", {"small": ("tests/t1.py",)})
    assert ut.restrict(selected, "small", "flashinfer") == {"vllm/a.py": ["tests/t1.py"]}
    with pytest.raises(SparkserveError, match="no upstream-tests subset 'stale' for flashinfer"):
        ut.restrict(selected, "stale", "flashinfer")


def test_the_cli_keeps_the_vllm_subset_names() -> None:
    """scripts/ci and lab/scripts/gpu/proofs.sh run `--upstream vllm --subset cpu|gpu`."""
    from sparkserve_lab.cli.runs import upstream_tests_subsets

    assert {"cpu", "gpu"} <= set(upstream_tests_subsets())
    assert set(ut.SUBSETS["vllm"]) == {"cpu", "gpu"}
    assert ut.SUBSETS["flashinfer"] == {"gpu": ut.WHOLE}


def test_a_run_where_pytest_ran_nothing_is_an_error(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    python = tmp_path / "python-without-pytest"
    python.write_text("#!/bin/sh\necho 'No module named pytest' >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(SparkserveError, match=r"(?s)pytest ran no test .*No module named pytest"):
        ut.run_tests(str(python), tree, ["tests/test_calc.py"], tmp_path, tmp_path / "j.xml")


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


# a package that re-exports what its modules define, as FlashInfer's flashinfer/__init__.py does
PKG = {
    "pkg/__init__.py": "from .decode import Wrapper as Wrapper\nfrom .decode import single as single\n"
                       "from .sub import helper\nfrom . import other\ntry:\n    from .starred import *\n"
                       "except ImportError:\n    pass\n\n\ndef __getattr__(name):\n"
                       "    from .lazy import lazy_name\n    return lazy_name\n",
    "pkg/decode.py": "class Wrapper:\n    pass\n\n\ndef single():\n    pass\n",
    "pkg/sub/__init__.py": "from .impl import helper as helper\n",
    "pkg/sub/impl.py": "def helper():\n    pass\n",
    "pkg/other.py": "def thing():\n    pass\n",
    "pkg/starred.py": "__all__ = ['star_name']\n\n\ndef star_name():\n    pass\n",
    "pkg/lazy.py": "def lazy_name():\n    pass\n",
    "tests/test_attr.py": "import pkg\n\n\ndef test_a():\n    pkg.Wrapper()\n",
    "tests/test_from.py": "from pkg import (\n    single,\n)\n\n\ndef test_b():\n    single()\n",
    "tests/test_alias.py": "import pkg as p\n\n\ndef test_c():\n    p.helper()\n",
    "tests/test_sub.py": "from pkg.sub import helper\n\n\ndef test_d():\n    helper()\n",
    "tests/test_module_attr.py": "import pkg\n\n\ndef test_e():\n    pkg.other.thing()\n",
    "tests/test_star.py": "from pkg import star_name\n\n\ndef test_f():\n    star_name()\n",
    "tests/test_lazy.py": "import pkg\n\n\ndef test_g():\n    pkg.lazy_name()\n",
    "tests/test_direct.py": "from pkg.decode import Wrapper\n\n\ndef test_h():\n    Wrapper()\n",
    "tests/test_none.py": "import pkg\n\n\ndef test_i():\n    pkg.something_else()\n",
}


def test_a_name_used_through_the_package_that_re_exports_it_selects_the_test(tmp_path: Path) -> None:
    """`pkg.Wrapper` and `from pkg import single` exercise pkg/decode.py though no test imports
    pkg.decode: the package __init__ files are parsed (chains through subpackages, `from . import m`,
    `import *` with __all__); a lazy `__getattr__` is no static re-export."""
    tree = _files(tmp_path, PKG)
    changed = ["pkg/decode.py", "pkg/sub/impl.py", "pkg/other.py", "pkg/starred.py", "pkg/lazy.py"]
    sel = ut.selection(tree, changed, builds={})
    assert sel.tests == {
        "pkg/decode.py": ["tests/test_attr.py", "tests/test_direct.py", "tests/test_from.py"],
        "pkg/sub/impl.py": ["tests/test_alias.py", "tests/test_sub.py"],
        "pkg/other.py": ["tests/test_module_attr.py"],
        "pkg/starred.py": ["tests/test_star.py"],
        "pkg/lazy.py": [],
    }
    assert sel.why["pkg/decode.py"] == {"tests/test_attr.py": "re-export pkg.Wrapper",
                                        "tests/test_direct.py": "import pkg.decode",
                                        "tests/test_from.py": "re-export pkg.single"}
    assert sel.why["pkg/sub/impl.py"]["tests/test_alias.py"] == "re-export pkg.helper"
    assert sel.why["pkg/other.py"]["tests/test_module_attr.py"] == "attribute pkg.other.thing"
    # the import rule alone selects none of them: without the re-export rule these tests would be lost
    texts = {t: (tree / t).read_text()
             for t in ("tests/test_attr.py", "tests/test_from.py", "tests/test_alias.py")}
    assert not any(ut.imports(text, m) for text in texts.values() for m in ("pkg.decode", "pkg.sub.impl"))
    assert ut.reach("pkg.sub.impl", ut.reexports(tree, ["pkg"])) == {"pkg.sub.impl", "pkg.sub.helper",
                                                                     "pkg.helper"}


def test_a_non_python_file_gets_the_tests_of_the_modules_its_jit_build_table_names(tmp_path: Path) -> None:
    tree = _files(tmp_path, PKG)
    builds = {"include/pkg/attention/*.cuh": ("pkg/decode.py",), "csrc/moe_dispatch*.h": ("pkg/other.py",)}
    changed = ["include/pkg/attention/decode.cuh", "csrc/moe_dispatch_tma.h", "csrc/unmapped.cu",
               "tests/data.bin"]
    sel = ut.selection(tree, changed, builds=builds)
    assert sel.tests == {
        "include/pkg/attention/decode.cuh": ["tests/test_attr.py", "tests/test_direct.py",
                                             "tests/test_from.py"],
        "csrc/moe_dispatch_tma.h": ["tests/test_module_attr.py"],
    }
    assert sel.unruled == ["csrc/unmapped.cu"]  # listed, never dropped; a tests/ file is no code
    assert sel.rules["include/pkg/attention/decode.cuh"] == [
        "JIT build include/pkg/attention/*.cuh -> pkg/decode.py"]
    assert sel.why["include/pkg/attention/decode.cuh"]["tests/test_attr.py"] == \
        "JIT build -> pkg/decode.py: re-export pkg.Wrapper"
    # without the table the header has no rule
    assert ut.selection(tree, changed, builds={}).unruled == ["include/pkg/attention/decode.cuh",
                                                             "csrc/moe_dispatch_tma.h", "csrc/unmapped.cu"]
    unmapped = ut.selection(tree, ["csrc/unmapped.cu"])
    assert (unmapped.tests, unmapped.unruled) == ({}, ["csrc/unmapped.cu"])


def test_the_jit_table_covers_every_non_python_file_of_the_flashinfer_series() -> None:
    """The FlashInfer series' CUDA/C++ files and its kernel generator each match a JIT_BUILDS pattern
    (a new unmapped file would be listed as "no selection rule": this keeps the table current)."""
    import fnmatch

    root = Path(__file__).resolve().parents[2]
    paths = {line.split(" b/", 1)[1] for f in sorted((root / "patches" / "flashinfer").glob("0*.patch"))
             for line in f.read_text().splitlines() if line.startswith("diff --git ")}
    unmapped = [p for p in sorted(paths) if not p.endswith(".py") and not p.startswith("tests/")
                and not any(fnmatch.fnmatchcase(p, pat) for pat in ut.JIT_BUILDS)]
    assert unmapped == []
    assert "include/flashinfer/attention/decode.cuh" in paths
    assert ut.JIT_BUILDS["include/flashinfer/attention/decode.cuh"][0] == "flashinfer/decode.py"


def test_the_gpu_subset_is_the_whole_selection_less_what_it_excludes_with_a_reason() -> None:
    selected = {"vllm/a.py": ["tests/kernels/test_x.py", "tests/kernels/test_rocm_x.py"],
                "vllm/b.py": ["tests/kernels/quantization/test_mxfp4_w4a8_rdna3.py"]}
    assert ut.restrict(selected, "gpu") == {"vllm/a.py": ["tests/kernels/test_x.py"]}
    assert ut.excluded(selected, "vllm") == {
        "tests/kernels/quantization/test_mxfp4_w4a8_rdna3.py": "ROCm only (RDNA GPUs)",
        "tests/kernels/test_rocm_x.py": "ROCm only (AMD GPUs)"}


def test_files_run_side_by_side_a_crash_and_a_timeout_stay_their_own(tmp_path: Path) -> None:
    """One pytest per file: a file whose process dies, and one over the per-file limit, are left out with
    why; the others' outcomes are kept; a file the deadline does not reach is not started."""
    import time

    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (tree / "tests" / "test_dies.py").write_text("import os\n\n\ndef test_dies():\n    os._exit(3)\n")
    (tree / "tests" / "test_slow.py").write_text("import time\n\n\ndef test_quick():\n    assert False\n\n\n"
                                                 "def test_slow():\n    time.sleep(60)\n")
    site = tmp_path / "site"
    site.mkdir()
    files = ["tests/test_ok.py", "tests/test_dies.py", "tests/test_slow.py"]
    got, cut = ut.run_files(sys.executable, tree, files, site, tmp_path / "w", 3, 8.0)
    assert got["tests.test_ok::test_ok"].outcome == ut.PASSED
    assert got["tests/test_dies.py"].outcome == ut.ERROR and "exited 3" in got["tests/test_dies.py"].message
    assert cut == {"tests/test_slow.py": "over the per-file limit of 8 s (1 test(s) done)"}
    # the stopped file's test that finished before the kill, from its verbose log
    assert got["tests.test_slow::test_quick"].outcome == ut.FAILED and "tests.test_slow::test_slow" not in got
    got, cut = ut.run_files(sys.executable, tree, files[:1], site, tmp_path / "w2", 1, 8.0,
                            time.monotonic() - 1)
    assert got == {} and cut == {"tests/test_ok.py": "not reached before the state's deadline"}


def test_a_paced_run_compares_only_what_both_states_completed(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    work = tmp_path / "work"
    real = ut.run_files
    calls: list[list[str]] = []

    def paced(python: str, tree: Path, tests: list[str], site: Path, work: Path, jobs: int, limit: float,
              deadline: float | None = None, extra_env: dict[str, str] | None = None,
              plugins: dict[str, str] | None = None) -> tuple[dict[str, ut.Result], dict[str, str]]:
        calls.append(list(tests))
        dirs.append((extra_env or {}).get("FLASHINFER_WORKSPACE_BASE", ""))
        got, cut = real(python, tree, tests, site, work, jobs, limit, deadline, extra_env, plugins)
        if len(calls) == 2:  # the patched state: the one file it ran is over the limit there
            return {}, {t: "over the per-file limit of 1 s" for t in tests}
        return got, cut

    dirs: list[str] = []
    monkeypatch.setattr(ut, "run_files", paced)
    rep = ut.run(tree, site, [breaking], sys.executable, work,
                 pace=ut.Pace(2, 60.0, state_dir_var="FLASHINFER_WORKSPACE_BASE"))
    assert len(set(dirs)) == 2 and all(dirs)  # each state its own JIT workspace
    assert calls[0] == ["tests/test_calc.py", "tests/test_needs_gpu.py"]
    assert rep.flips == [] and rep.before == {} and rep.after == {}
    assert rep.left_out == {t: "patched: over the per-file limit of 1 s" for t in calls[1]}


def test_the_verbose_log_names_each_test_and_outcome_as_junit_does(tmp_path: Path) -> None:
    """What a stopped file's `pytest -v` log says equals what --junitxml records for the same run: ids
    (classes, parameters, nested folders) and outcomes (fail, setup error, skip, xfail, xpass)."""
    import subprocess

    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_kinds.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('setup')\n\n\n"
        "@pytest.mark.parametrize('n', [1, 2, 'a b'])\ndef test_param(n):\n    assert n != 2\n\n\n"
        "def test_setup_error(broken):\n    pass\n\n\n@pytest.mark.skip(reason='no')\ndef test_skip():\n"
        "    pass\n\n\n@pytest.mark.xfail\ndef test_xfail():\n    assert False\n\n\n@pytest.mark.xfail\n"
        "def test_xpass():\n    pass\n\n\nclass TestGroup:\n    def test_in_class(self):\n        pass\n")
    junit = tmp_path / "r.xml"
    target = str(tmp_path / "tests" / "sub" / "test_kinds.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), f"--junitxml={junit}", target],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    by_junit = {k: v.outcome for k, v in ut.parse_junit(junit).items()}
    assert len(by_junit) == 8 and set(by_junit.values()) == {ut.PASSED, ut.FAILED, ut.ERROR, ut.SKIPPED}
    assert {k: v.outcome for k, v in ut.parse_verbose(proc.stdout).items()} == by_junit


def test_a_message_that_ends_where_its_detail_starts_keeps_the_error_line(tmp_path: Path) -> None:
    """FlashInfer's JIT failure says only "Ninja build failed. Ninja output:" on its first line: the record
    keeps the compiler's error line after it; a one-line message stays as it is."""
    junit = tmp_path / "r.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="tests.t" name="a"><error message="failed on setup with '
        '&quot;RuntimeError: Ninja build failed. Ninja output:&#10;[1/3] nvcc -c x.cu&#10;FAILED: x.o&#10;'
        'x.cu(3): error: identifier &quot;foo&quot; is undefined">E   RuntimeError: Ninja build failed. '
        '</error></testcase><testcase classname="tests.t" name="b"><failure message="assert 1 == 2">'
        '</failure></testcase></testsuite></testsuites>')
    got = ut.parse_junit(junit)
    assert got["tests.t::a"] == ut.Result(ut.ERROR, 'failed on setup with "RuntimeError: Ninja build failed. '
                                          'Ninja output: ... x.cu(3): error: identifier "foo" is undefined')
    assert got["tests.t::b"] == ut.Result(ut.FAILED, "assert 1 == 2")


def test_a_stopped_file_compares_the_tests_both_states_got_through(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over the per-file limit runs in both states; the tests both got through are compared (a
    changed one is a flip), those only one state reached are not; a file one state stopped before any test
    the other reached stays left out; one the deadline did not reach runs in neither."""
    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    calls: list[list[str]] = []
    P, F = ut.Result(ut.PASSED), ut.Result(ut.FAILED)
    stop = "over the per-file limit of 9 s"
    states = [
        ({"tests.test_calc::a": P, "tests.test_calc::b": P, "tests.test_calc::c": P},
         {"tests/test_calc.py": f"{stop} (3 test(s) done)",
          "tests/test_needs_gpu.py": f"{stop} (0 test(s) done)",
          "tests/test_other.py": "not reached before the state's deadline"}),
        ({"tests.test_calc::a": P, "tests.test_calc::b": F, "tests.test_needs_gpu::x": P},
         {"tests/test_calc.py": f"{stop} (2 test(s) done)"}),
    ]

    def paced(python: str, tree: Path, tests: list[str], site: Path, work: Path, jobs: int, limit: float,
              deadline: float | None = None, extra_env: dict[str, str] | None = None,
              plugins: dict[str, str] | None = None) -> tuple[dict[str, ut.Result], dict[str, str]]:
        calls.append(list(tests))
        return states[len(calls) - 1]

    monkeypatch.setattr(ut, "run_files", paced)
    files = ["tests/test_calc.py", "tests/test_needs_gpu.py", "tests/test_other.py"]
    monkeypatch.setattr(ut, "selection", lambda *a, **k: ut.Selection({"vllm/calc.py": files}, {}, {}, []))
    rep = ut.run(tree, site, [breaking], sys.executable, tmp_path / "work", pace=ut.Pace(2, 9.0))
    assert calls[1] == ["tests/test_calc.py", "tests/test_needs_gpu.py"]  # stopped files run again
    assert [(f["test"], f["unpatched"], f["patched"]) for f in rep.flips] == [("tests.test_calc::b", "passed",
                                                                             "failed")]
    assert set(rep.before) == set(rep.after) == {"tests.test_calc::a", "tests.test_calc::b"}
    assert rep.partial == {"tests/test_calc.py": f"unpatched: {stop} (3 test(s) done); patched: "
                                                 f"{stop} (2 test(s) done); 2 test(s) both states got "
                                                 "through compared"}
    assert rep.left_out == {"tests/test_needs_gpu.py": f"unpatched: {stop} (0 test(s) done)",
                            "tests/test_other.py": "unpatched: not reached before the state's deadline"}
    assert rep.to_dict()["partial"] == rep.partial


def test_a_file_with_a_plugin_runs_in_a_pytest_of_its_own_with_it(tmp_path: Path) -> None:
    """PLUGINS: a subset's file that needs a plugin (a CUDA platform without a device) gets it; the other
    files run without it."""
    tree, site = tmp_path / "tree", tmp_path / "site"
    (tree / "tests").mkdir(parents=True)
    site.mkdir()
    (site / "plug.py").write_text("import builtins\n\nbuiltins.PLUGGED = True\n")
    check = "import builtins\n\n\ndef test_it():\n    assert getattr(builtins, 'PLUGGED', False) is {}\n"
    (tree / "tests" / "test_needs.py").write_text(check.format(True))
    (tree / "tests" / "test_plain.py").write_text(check.format(False))
    files = ["tests/test_needs.py", "tests/test_plain.py"]
    got = ut.run_tests(sys.executable, tree, files, site, tmp_path / "r.xml", {"tests/test_needs.py": "plug"})
    assert {k: v.outcome for k, v in got.items()} == {"tests.test_needs::test_it": ut.PASSED,
                                                      "tests.test_plain::test_it": ut.PASSED}
    got = ut.run_tests(sys.executable, tree, files, site, tmp_path / "r2.xml")
    assert got["tests.test_needs::test_it"].outcome == ut.FAILED
    # paced, one pytest a file: the same
    got, cut = ut.run_files(sys.executable, tree, files, site, tmp_path / "w", 2, 60.0,
                            plugins={"tests/test_needs.py": "plug"})
    assert cut == {} and {v.outcome for v in got.values()} == {ut.PASSED} and len(got) == 2


def test_every_plugin_is_for_a_file_of_its_subset() -> None:
    for upstream, by_subset in ut.PLUGINS.items():
        for subset, files in by_subset.items():
            assert set(files) <= set(ut.SUBSETS[upstream][subset]), (upstream, subset)


def test_a_resumed_run_takes_the_files_the_earlier_one_left_out_or_saw_change(tmp_path: Path) -> None:
    """Sittings of bounded length cover the selection between them: a run that resumes an earlier record
    leaves out what that one compared without a change (saying so), and runs what it did not reach and
    what changed there (the series may carry that test's update since)."""
    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    earlier = {"left_out": {"tests/test_needs_gpu.py": "unpatched: not reached before the state's deadline"},
               "flips": []}
    rep = ut.run(tree, site, [breaking], sys.executable, tmp_path / "w1", resume=(earlier, "rec-1"))
    assert rep.left_out == {"tests/test_calc.py": "compared by rec-1, which this run resumes"}
    assert rep.flips == [] and {k.split("::")[0] for k in rep.after} == {"tests.test_needs_gpu"}
    flipped = {**earlier, "flips": [{"test": "tests.test_calc::test_add", "unpatched": "passed",
                                     "patched": "failed", "carried": ""}]}
    rep = ut.run(tree, site, [breaking], sys.executable, tmp_path / "w2", resume=(flipped, "rec-1"))
    assert rep.left_out == {} and [f["test"] for f in rep.flips] == ["tests.test_calc::test_add"]


def test_borrowed_tests_run_in_both_states_no_patch_carries_them_and_leave_no_trace(tmp_path: Path) -> None:
    """A source without the patched code's tests (FlashInfer's sdist) borrows another version's: the files
    the tree lacks are selected and run as its own, never carried by the series (the tag and the commits do
    not hold them), recorded with both versions, and gone from the tree afterwards; a file the tree has
    stays the tree's."""
    tree = _tree(tmp_path)
    borrowed_from = tmp_path / "other-version"
    shutil.copytree(tree / "tests", borrowed_from / "tests")
    (borrowed_from / "tests" / "test_other.py").write_text("def test_theirs():\n    pass\n")
    gitutil.run(["rm", "-q", "tests/test_calc.py", "tests/test_needs_gpu.py"], tree)
    gitutil.run(["commit", "-q", "-m", "the sdist ships other tests"], tree, date="2000-01-01T00:00:01+00:00")
    gitutil.run(["tag", "-f", "upstream"], tree)
    breaking, site = _subtracting(tree, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(SparkserveError, match="no tests/ folder"), \
            ut.borrowed_tests(tree, tmp_path / "nowhere", "0.6.18", "0.7.2.post1"):
        pass
    with ut.borrowed_tests(tree, borrowed_from, "0.6.18", "0.7.2.post1") as got:
        rep = ut.run(tree, site, [breaking], sys.executable, work)
    assert got.to_dict() == {"source": str(borrowed_from), "version": "0.6.18", "pinned": "0.7.2.post1",
                             "commit": None, "files": 2, "kept_the_trees_own": 1,
                             "gap": "tests of 0.6.18 against 0.7.2.post1"}
    assert rep.selected == {"vllm/calc.py": ["tests/test_calc.py", "tests/test_needs_gpu.py"]}
    assert [f["test"] for f in rep.failures] == ["tests.test_calc::test_add"]
    assert sorted(p.name for p in (tree / "tests").iterdir()) == ["test_other.py"]
    assert (tree / "tests" / "test_other.py").read_text() == UPSTREAM["tests/test_other.py"]
    assert gitutil.out(["status", "--porcelain", "--untracked-files=all"], tree).strip() == ""


def test_the_cli_wants_the_borrowed_tests_version_and_one_upstream() -> None:
    from sparkserve_lab.cli.main import main

    assert main(["proof", "upstream-tests", "--list", "--upstream", "flashinfer", "--tests-from", "x"]) == 3
    assert main(["proof", "upstream-tests", "--list", "--tests-from", "x", "--tests-version", "1"]) == 3


def test_a_failing_preflight_stops_the_run_before_any_test_and_leaves_the_site_patched(
        tmp_path: Path) -> None:
    """FlashInfer's JIT without a compiler failed every test of a sitting; a preflight in each state's
    environment (the site first on the path, the state's own folder) stops it at once with its output."""
    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    work = tmp_path / "work"
    failing = ("import os, sys, vllm.calc\n"
               "print('workspace', os.environ['FLASHINFER_WORKSPACE_BASE'])\n"
               "print('nvcc: not found', 'add(2, 2) =', vllm.calc.add(2, 2)); sys.exit(3)")
    with pytest.raises(SparkserveError) as info:
        ut.run(tree, site, [breaking], sys.executable, work, check=failing,
               pace=ut.Pace(2, 60.0, state_dir_var="FLASHINFER_WORKSPACE_BASE"))
    msg = str(info.value)
    assert msg.startswith("unpatched: the preflight failed (exit 3), so no test ran")
    assert "nvcc: not found add(2, 2) = 4" in msg  # the unpatched site: its add still adds
    assert f"workspace {work / 'unpatched-flashinfer_workspace_base'}" in msg
    assert not list(work.glob("unpatched/*.xml"))  # no test file started
    assert "return a - b" in (site / "vllm" / "calc.py").read_text()  # the site is left patched


def test_a_passing_preflight_runs_in_each_state_then_the_tests_run(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    code = (f"import vllm.calc, pathlib\n"
            f"pathlib.Path({str(marks)!r}, str(vllm.calc.add(2, 2))).touch()")
    rep = ut.run(tree, site, [breaking], sys.executable, tmp_path / "work", check=code)
    assert sorted(p.name for p in marks.iterdir()) == ["0", "4"]  # unpatched adds, patched subtracts
    assert [f["test"] for f in rep.flips] == ["tests.test_calc::test_add"]


def test_both_states_at_once_find_what_one_after_the_other_finds_and_change_nothing(tmp_path: Path) -> None:
    """Pace.together: the unpatched state runs against a reverted copy of the changed packages and a second
    checkout of the tree; the flips are those of the sequential run, and the site (whose unchanged files
    the copy hard-links), the tree and its worktrees are as they were."""
    tree = _tree(tmp_path)
    series, site = _carried_and_breaking(tree, tmp_path)
    site_before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    reports = {}
    for together in (False, True):
        work = tmp_path / f"work-{together}"
        work.mkdir()
        reports[together] = ut.run(tree, site, series, sys.executable, work,
                                   pace=ut.Pace(2, 60.0, together=together))
        assert not (work / "unpatched-site").exists() and not (work / "unpatched-tree").exists()
    assert reports[True].flips == reports[False].flips
    assert {f["test"] for f in reports[True].flips} == {"tests.test_calc::test_mul",
                                                        "tests.test_calc::test_add"}
    assert reports[True].left_out == reports[False].left_out == {}
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == site_before
    assert gitutil.out(["rev-parse", "--abbrev-ref", "HEAD"], tree).strip() == "main"
    assert len(gitutil.out(["worktree", "list"], tree).splitlines()) == 1


def test_both_states_run_at_the_same_time_each_on_its_own_code(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each state's files start before the other's end (a barrier both must reach), the unpatched one with
    the reverted copy first on its path and the upstream checkout, which also holds the tree's untracked
    (borrowed) test files; each state's cut files are left out with its name."""
    import threading

    tree = _tree(tmp_path)
    breaking, site = _subtracting(tree, tmp_path)
    borrowed = "from vllm.calc import add\n\n\ndef test_b():\n    pass\n"
    (tree / "tests" / "test_borrowed.py").write_text(borrowed)
    both = threading.Barrier(2, timeout=20)
    seen: dict[str, tuple[Path, list[Path], list[str], str]] = {}

    def paced(python: str, tree_: Path, tests: list[str], site_: Path | list[Path], work: Path, jobs: int,
              limit: float, deadline: float | None = None, extra_env: dict[str, str] | None = None,
              plugins: dict[str, str] | None = None, label: str = ""
              ) -> tuple[dict[str, ut.Result], dict[str, str]]:
        both.wait()
        folders = [site_] if isinstance(site_, Path) else list(site_)
        seen[label] = (tree_, folders, list(tests), (folders[0] / "vllm/calc.py").read_text())
        return {}, {tests[-1]: "not reached before the state's deadline"}

    monkeypatch.setattr(ut, "run_files", paced)
    rep = ut.run(tree, site, [breaking], sys.executable, tmp_path / "work",
                 pace=ut.Pace(1, 60.0, together=True))
    checkout, folders, files, calc = seen["unpatched"]
    assert folders[1:] == [site] and "return a + b" in calc
    assert checkout != tree and "tests/test_borrowed.py" in files
    assert seen["patched"][1] == [site] and "return a - b" in seen["patched"][3]
    assert seen["patched"][0] == tree and seen["patched"][2] == files
    assert rep.left_out == {files[-1]: "unpatched: not reached before the state's deadline; patched: not "
                                       "reached before the state's deadline"}
