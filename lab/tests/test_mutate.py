"""`sparkserve-lab mutate`: each hunk reverted alone on a patched site, the Proof tests run, the
hunk put back; caught, survived, not revertible alone, not shipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sparkserve_lab import mutate
from sparkserve_lab.cli.main import main

from sparkserve.errors import SparkserveError
from sparkserve.supply.patches import apply
from sparkserve.supply.patches.series import Patch, load_series
from tests.unit.conftest import Project, author_series

ROOT = Path(__file__).resolve().parents[2]


def _patched_site(project: Project, site: Path, tmp_path: Path) -> dict[str, list[Patch]]:
    author_series(project, tmp_path)
    series = {n: load_series(project.root, n) for n in ("vllm", "flashinfer")}
    apply.apply_site(project.pins, site, series)
    return series


def _needs(site: Path, text: str) -> list[str]:
    """A 'test' that passes while vllm/kernel.py of the site holds `text`."""
    code = (f"import pathlib, sys; sys.exit(0 if {text!r} in pathlib.Path({str(site / 'vllm/kernel.py')!r})"
            ".read_text() else 1)")
    return [sys.executable, "-c", code]


def _snapshot(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def test_each_hunk_is_caught_survived_or_named(project: Project, site: Path, tmp_path: Path) -> None:
    series = _patched_site(project, site, tmp_path)
    before = _snapshot(site)
    second = series["vllm"][1]  # kernel.py lines 3 and 20 (two hunks), other.py, tests/ (not in a wheel)
    got = mutate.mutate(second, site, True, _needs(site, "LINE XX"), project.root)
    assert [(o.path, o.status) for o in got] == [  # in the diff's order
        ("tests/test_kernel.py", mutate.NOT_SHIPPED), ("vllm/kernel.py", mutate.SURVIVED),
        ("vllm/kernel.py", mutate.CAUGHT), ("vllm/other.py", mutate.SURVIVED)]
    assert got[2].exit_code == 1 and got[2].hunk.startswith("@@ -17,")
    first = series["vllm"][0]  # its only hunk is the line the second patch changes again
    assert [o.status for o in mutate.mutate(first, site, True, _needs(site, "LINE XX"), project.root)] == [
        mutate.NOT_REVERTIBLE]
    assert _snapshot(site) == before  # every hunk was put back


def test_a_command_failing_on_the_patched_state_is_refused(project: Project, site: Path,
                                                           tmp_path: Path) -> None:
    series = _patched_site(project, site, tmp_path)
    with pytest.raises(SparkserveError, match="fix that first"):
        mutate.mutate(series["vllm"][1], site, True, _needs(site, "not in the file"), project.root)


def test_the_cli_writes_the_table_and_fails_on_a_survivor(project: Project, site: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    _patched_site(project, site, tmp_path)
    out = tmp_path / "mutations.json"
    rc = main(["mutate", "vllm/0002", "--site", str(site), "--out", str(out),
               "--command", shlex.join(_needs(site, "LINE XX"))])
    printed = capsys.readouterr().out
    assert rc == 1 and "FAIL: 2 hunk(s) survived" in printed
    assert "| vllm/0002-kernel-change-line-20-again-and-other-py | vllm/kernel.py |" in printed
    data = json.loads(out.read_text())
    assert (data["caught"], data["survived"]) == (1, 2) and len(data["hunks"]) == 4
    assert main(["mutate", "vllm/0009", "--site", str(site)]) == 3
    assert "'vllm/0009' names no patch of the series" in capsys.readouterr().err


def test_hunk_names_limit_the_table_to_those_hunks(project: Project, site: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    _patched_site(project, site, tmp_path)
    out = tmp_path / "mutations.json"
    rc = main(["mutate", "vllm/0002", "--site", str(site), "--out", str(out),
               "--hunk", "kernel.py:17", "--command", shlex.join(_needs(site, "LINE XX"))])
    data = json.loads(out.read_text())
    assert rc == 0 and data["only"] == ["kernel.py:17"]
    assert [(h["path"], h["status"]) for h in data["hunks"]] == [("vllm/kernel.py", mutate.CAUGHT)]
    assert data["hunks"][0]["hunk"].startswith("@@ -17,")
    capsys.readouterr()
    # the full path works as well as its end; a line no hunk starts at is refused, listing the hunks
    rc = main(["mutate", "vllm/0002", "--site", str(site), "--out", str(out),
               "--hunk", "vllm/kernel.py:17", "--hunk", "other.py:1", "--command",
               shlex.join(_needs(site, "LINE XX"))])
    assert [h["path"] for h in json.loads(out.read_text())["hunks"]] == ["vllm/kernel.py", "vllm/other.py"]
    for bad in ("kernel.py:18", "kernel.py", "nokernel.py:17"):
        assert main(["mutate", "vllm/0002", "--site", str(site), "--hunk", bad]) == 3
        assert f"--hunk {bad}" in capsys.readouterr().err
    assert main(["mutate", "--site", str(site), "--hunk", "kernel.py:17"]) == 3
    assert "--hunk names hunks of one patch" in capsys.readouterr().err


def test_the_proof_header_names_the_tests() -> None:
    v1 = next(p for p in load_series(ROOT, "vllm") if p.id.startswith("0001"))
    assert mutate.proof_tests(v1) == ["tests/gpu/test_mxfp4_quant_mask_patch.py"]
    cmd = mutate.default_command(v1, "py")
    assert cmd[:3] == ["py", "-m", "pytest"] and cmd[-1] == "tests/gpu/test_mxfp4_quant_mask_patch.py"
    hunks = mutate.hunks(v1)
    assert len(hunks) == 1 and hunks[0].header.startswith("@@ -409,13 +409,13 @@")


def test_a_hunk_that_changes_compiled_sources_gets_an_empty_jit_cache(project: Project, site: Path,
                                                                        tmp_path: Path) -> None:
    """FlashInfer caches a JIT module by its name: a reverted CUDA header under a cache built from the
    patched sources would test the patched kernel. Python hunks share the patched state's cache."""
    assert mutate.compiles("include/flashinfer/attention/decode.cuh")
    assert mutate.compiles("flashinfer/jit/attention/modules.py")
    assert not mutate.compiles("flashinfer/decode.py") and not mutate.compiles("vllm/kernel.py")
    series = _patched_site(project, site, tmp_path)
    seen = tmp_path / "caches.txt"
    # passes while the cache it is given is the patched state's (left there by its first run)
    code = (f"import os, pathlib, sys; c = pathlib.Path(os.environ['FLASHINFER_WORKSPACE_BASE']); "
            f"open({str(seen)!r}, 'a').write(c.name + '\\n'); m = c / 'built'; "
            "first = not m.exists(); m.parent.mkdir(parents=True, exist_ok=True); m.touch(); "
            "sys.exit(0 if first or c.name == 'patched' else 1)")
    got = mutate.mutate(series["vllm"][1], site, True, [sys.executable, "-c", code], project.root)
    assert [o.status for o in got if o.status != mutate.NOT_SHIPPED] == [mutate.SURVIVED] * 3
    assert seen.read_text().split() == ["patched"] * 4  # the baseline and three .py hunks: one cache
    # a hunk taken for a compiled source gets a cache of its own, removed after its run
    seen.unlink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mutate, "compiles", lambda path: path == "vllm/other.py")
        mutate.mutate(series["vllm"][1], site, True, [sys.executable, "-c", code], project.root)
    names = seen.read_text().split()
    assert names[:3] == ["patched"] * 3 and names[3].startswith("hunk-")


def test_docstrings_and_comments_alone_are_docs_only() -> None:
    code = 'def f(x):\n    """Add one."""\n    return x + 1  # one\n'
    assert mutate.docs_only(code, code.replace("Add one.", "Add one to x.").replace("# one", ""), "a/f.py")
    assert mutate.docs_only(code, code.replace('    """Add one."""\n', ""), "a/f.py")
    assert not mutate.docs_only(code, code.replace("x + 1", "x + 2"), "a/f.py")
    assert not mutate.docs_only(code, code, "include/f.cuh")  # not Python: the tests decide
    assert not mutate.docs_only("line 20\n", "line 20\n", "vllm/kernel.py")  # not parseable either


def test_a_docs_only_hunk_runs_no_test_and_is_put_back(project: Project, site: Path, tmp_path: Path) -> None:
    series = _patched_site(project, site, tmp_path)
    before = _snapshot(site)
    runs = tmp_path / "runs.txt"
    code = (f"import pathlib, sys; open({str(runs)!r}, 'a').write('x'); "
            f"sys.exit(0 if 'LINE XX' in pathlib.Path({str(site / 'vllm/kernel.py')!r}).read_text() else 1)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mutate, "docs_only", lambda before, after, path: path == "vllm/other.py")
        got = mutate.mutate(series["vllm"][1], site, True, [sys.executable, "-c", code], project.root)
    assert [(o.path, o.status) for o in got][-1] == ("vllm/other.py", mutate.DOCS_ONLY)
    assert runs.read_text() == "xxx"  # the patched state and the two kernel.py hunks, not other.py's
    assert _snapshot(site) == before


# A third-party module of the changed package that nothing else in this test process imports (a stdlib
# module such as colorsys is imported by matplotlib when the report tests ran first).
THIRD = "sparkserve_fork_third_party"


def _fork_project(tmp_path: Path) -> tuple[Path, Path]:
    """pkg/mod.py (VALUE = 1, importing a third-party module) and a test that passes while VALUE == 1; the
    folder has its own ini."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path.parent / f"{tmp_path.name}-site").mkdir()  # installed elsewhere: not the project's own
    (tmp_path.parent / f"{tmp_path.name}-site" / f"{THIRD}.py").write_text("LOADED = True\n")
    mod = tmp_path / "pkg" / "mod.py"
    mod.write_text(f"import {THIRD}\nVALUE = 1\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_value.py").write_text(
        "import pkg.mod\n\n\ndef test_value():\n    assert pkg.mod.VALUE == 1\n")
    return mod, tmp_path


def test_forked_runs_import_the_changed_package_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkserve_lab import forkrun

    mod, cwd = _fork_project(tmp_path)
    assert THIRD not in sys.modules
    monkeypatch.syspath_prepend(str(cwd.parent / f"{cwd.name}-site"))
    monkeypatch.syspath_prepend(str(cwd))
    runner = forkrun.ForkedPytest(["-q", "-p", "no:cacheprovider", "test_value.py"], cwd, [cwd / "pkg"])
    assert runner.first()[0] == 0
    assert THIRD in runner.preloaded and not any(n.startswith("pkg") for n in runner.preloaded)
    stat = mod.stat()
    mod.write_text(f"import {THIRD}\nVALUE = 2\n")  # same size; same mtime: a stale .pyc would hide it
    import os

    os.utime(mod, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert runner()[0] == 1
    mod.write_text(f"import {THIRD}\nVALUE = 1\n")
    assert runner()[0] == 0
    assert "pkg" not in sys.modules  # the parent never imported the changed package
    sys.modules.pop(THIRD, None)


def test_forked_mutation_confirms_a_survivor_in_a_process_of_its_own(project: Project, site: Path,
                                                                      tmp_path: Path) -> None:
    series = _patched_site(project, site, tmp_path)
    forked: list[int] = []

    def runner() -> tuple[int, float]:  # a fork that misses every change: all would survive
        forked.append(1)
        return 0, 0.0

    got = mutate.mutate(series["vllm"][1], site, True, _needs(site, "LINE XX"), project.root, runner)
    assert [o.status for o in got] == [mutate.NOT_SHIPPED, mutate.SURVIVED, mutate.CAUGHT, mutate.SURVIVED]
    assert len(forked) == 4  # the check of the patched state and the three revertible hunks


def test_tests_under_keeps_the_cpu_tests_of_the_proof_header() -> None:
    v2 = next(p for p in load_series(ROOT, "vllm") if p.id.startswith("0002"))
    assert mutate.default_command(v2, "py", "tests/image")[-1:] == ["tests/image/test_lm_head_mxfp4_gates.py"]
    assert "tests/gpu/test_lm_head_mxfp4_numerics.py" in mutate.default_command(v2, "py")
    v1 = next(p for p in load_series(ROOT, "vllm") if p.id.startswith("0001"))
    with pytest.raises(SparkserveError, match="under tests/image"):
        mutate.default_command(v1, "py", "tests/image")


def test_fork_takes_no_command_and_no_other_python(project: Project, site: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _patched_site(project, site, tmp_path)
    assert main(["mutate", "vllm/0002", "--site", str(site), "--fork", "--command", "true"]) == 3
    assert "--fork runs the Proof tests with pytest in forks of this Python" in capsys.readouterr().err
    assert main(["mutate", "vllm/0002", "--site", str(site), "--fork", "--python",
                 str(tmp_path / "other-python")]) == 3
