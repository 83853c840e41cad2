"""Upstream's own tests against the patched packages: for every Python file the series changes, the test
files of the upstream's source tree (the pinned sdist as `patches check` builds it) that import its
module run twice in one sitting, first with the series reverted in the installed site (and the tree at
its `upstream` tag), then patched (the tree with the series' commits, so a patch's own test changes
count). Every test whose outcome changes is reported; a change fails the proof unless the series changes
that test itself in upstream's test file (the test change an upstream pull request would carry). Tests
that fail or error in both states are listed with their reason (no GPU, a missing optional package), not
hidden.

Non-Python changes (FlashInfer's CUDA headers) have no selection rule here: they are listed as such.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil
from sparkserve.supply.patches import pathmap
from sparkserve.supply.patches.series import Patch

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"

# Named subsets of the selection. "cpu": vLLM test files that run on a CPU inside the image (no GPU, no
# network) in well under a minute per state, each importing a module the series changes:
# vllm/utils/flashinfer.py (vllm/0003) and vllm/config/quantization.py (vllm/0002).
SUBSETS: dict[str, tuple[str, ...]] = {
    "cpu": (
        "tests/quantization/test_quantization_config_args.py",
        "tests/utils_/test_flashinfer_utils.py",
    ),
    # a GPU host's: the kernels and layers the series changes, without FlashInfer's MoE module (its JIT
    # build takes minutes) and without the model tests that download checkpoints
    "gpu": (
        "tests/kernels/moe/test_gpt_oss_triton_kernels.py",
        "tests/kernels/quantization/test_mxfp4_kernel_selection.py",
        "tests/quantization/test_online_mxfp4.py",
        "tests/quantization/test_keep_param_objects.py",
        "tests/model_executor/model_loader/test_gpt_oss_weight_loading.py",
        "tests/v1/attention/test_flashinfer_dcp_spec_reorder.py",
    ),
}


def restrict(selected: dict[str, list[str]], subset: str) -> dict[str, list[str]]:
    """The selection cut to a named subset; a subset file the selection no longer names (it stopped
    importing a changed module, or the series stopped changing it) is an error, never skipped."""
    if subset not in SUBSETS:
        raise SparkserveError(f"no upstream-tests subset {subset!r} (known: {', '.join(sorted(SUBSETS))})")
    wanted = set(SUBSETS[subset])
    every = {t for ts in selected.values() for t in ts}
    gone = sorted(wanted - every)
    if gone:
        raise SparkserveError(f"subset {subset!r}: {', '.join(gone)} no longer import(s) a module the series "
                              "changes: update SUBSETS")
    return {path: [t for t in ts if t in wanted] for path, ts in selected.items() if wanted & set(ts)}


def module_of(path: str) -> str | None:
    """`vllm/a/b.py` -> `vllm.a.b` (a package's __init__.py -> the package); None for other files."""
    if not path.endswith(".py") or path.startswith("tests/"):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts else None


def imports(text: str, module: str) -> bool:
    """Whether a test file's source imports `module` (import m, from m import x, from parent import
    leaf)."""
    parent, _, leaf = module.rpartition(".")
    m = re.escape(module)
    if re.search(rf"^\s*(?:import\s+{m}\b|from\s+{m}\s+import\b)", text, re.M):
        return True
    return bool(parent) and re.search(
        rf"^\s*from\s+{re.escape(parent)}\s+import\s+(?:\(\s*)?(?:[\w\s,]*,\s*)?{re.escape(leaf)}\b",
        text, re.M) is not None


def select(tree: Path, changed: Sequence[str], skip: Sequence[str] = ()
           ) -> tuple[dict[str, list[str]], list[str]]:
    """({changed .py file: [test files of tree/tests importing its module]}, changed files without a
    selection rule)."""
    tests = sorted(p for p in (tree / "tests").rglob("test_*.py")) if (tree / "tests").is_dir() else []
    texts = {str(p.relative_to(tree)): p.read_text(errors="replace") for p in tests}
    chosen: dict[str, list[str]] = {}
    unruled = []
    for path in changed:
        if path in skip:
            continue
        mod = module_of(path)
        if mod is None:
            if not path.startswith("tests/"):
                unruled.append(path)
            continue
        chosen[path] = [t for t, text in texts.items() if imports(text, mod)]
    return chosen, unruled


@dataclass(frozen=True)
class Result:
    outcome: str
    message: str = ""


def parse_junit(path: Path) -> dict[str, Result]:
    """{file::class::name: outcome} from pytest's --junitxml."""
    out: dict[str, Result] = {}
    if not path.is_file():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        tid = f"{cls}::{name}" if cls else name  # a module that failed to collect has no class
        outcome, message = PASSED, ""
        for tag, name in (("failure", FAILED), ("error", ERROR), ("skipped", SKIPPED)):
            el = case.find(tag)
            if el is not None:
                outcome = name
                # a collection error's message is "collection failure"; its text ends with the cause
                cause = [ln[1:].strip() for ln in (el.text or "").splitlines() if ln.startswith("E ")]
                first = (el.get("message") or "").strip().splitlines()
                if (first and first[0] != "collection failure") or not cause:
                    message = (first[0] if first else "")[:200]
                else:
                    message = cause[-1][:200]
                break
        out[tid] = Result(outcome, message)
    return out


def run_tests(python: str, tree: Path, tests: Sequence[str], site: Path, junit: Path
              ) -> dict[str, Result]:
    """The test files of `tree` against the packages of `site` (the tree's own copy of the package must
    not shadow them: pytest runs from an empty folder, the site first on the path, and appends the tree's
    root, which vLLM's tests/__init__.py would otherwise put first)."""
    if not tests:
        return {}
    with tempfile.TemporaryDirectory(prefix="sparkserve-upstream-tests-") as cwd:
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
               "--import-mode=append",
               "--rootdir", str(tree),
               f"--junitxml={junit}", *[str(tree / t) for t in tests]]
        base = gitutil.env()
        path = os.pathsep.join(p for p in (str(site), base.get("PYTHONPATH", "")) if p)
        env = {**base, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(cmd, cwd=cwd, env=env, check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    results = parse_junit(junit)
    if not results:  # pytest missing, a usage error, a conftest that fails: no outcome is not "no flips"
        tail = "\n".join(proc.stdout.decode(errors="replace").strip().splitlines()[-15:])
        raise SparkserveError(f"pytest ran no test of {len(tests)} file(s) (exit {proc.returncode}); "
                              f"its last lines:\n{tail}")
    return results


def _site_diff(patch: Patch) -> tuple[str, list[str]]:
    """The patch's diff with installed paths, and the source paths a wheel does not ship."""
    mapping, excluded = {}, []
    for fc in patch.files:
        where = pathmap.to_site(patch.upstream, fc.path)
        if where is None:
            excluded.append(fc.path)
        else:
            mapping[fc.path] = where
    lines = []
    for line in patch.diff.splitlines(keepends=True):
        if line.startswith(("diff --git ", "--- a/", "+++ b/")):
            for src, dst in mapping.items():
                line = line.replace(f"a/{src}", f"a/{dst}").replace(f"b/{src}", f"b/{dst}")
        lines.append(line)
    return "".join(lines), excluded


def _apply_site(patch: Patch, site: Path, reverse: bool) -> None:
    diff, excluded = _site_diff(patch)
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as f:
        f.write(diff)
    try:
        args = ["apply", "--whitespace=nowarn", *(["-R"] if reverse else []),
                *[f"--exclude={p}" for p in excluded], f.name]
        proc = gitutil.run(args, site, check=False,
                           extra_env={"GIT_CEILING_DIRECTORIES": str(site.parent)})
    finally:
        Path(f.name).unlink()
    if proc.returncode != 0:
        verb = "revert" if reverse else "re-apply"
        raise SparkserveError(f"cannot {verb} {patch.upstream}/{patch.id} in {site}: "
                              f"{proc.stderr.decode(errors='replace').strip()}")


@dataclass
class Report:
    selected: dict[str, list[str]]
    unruled: list[str]
    before: dict[str, Result]
    after: dict[str, Result]
    carried: set[str]
    flips: list[dict[str, str]] = field(default_factory=list)
    environmental: list[dict[str, str]] = field(default_factory=list)

    @property
    def failures(self) -> list[dict[str, str]]:
        return [f for f in self.flips if not f["carried"]]

    def to_dict(self) -> dict[str, object]:
        return {"selected": self.selected, "no_selection_rule": self.unruled, "flips": self.flips,
                "flips_not_carried": len(self.failures), "environmental": self.environmental,
                "tests": len(set(self.before) | set(self.after))}


def test_source(text: str, name: str) -> str | None:
    """The source of test function `name` (a parametrized id's [..] dropped; Class::name looked up in the
    class) in a test file's text, None when it has none."""
    import ast

    parts = name.split("[", 1)[0].split("::")
    try:
        body: list[ast.stmt] = ast.parse(text).body
    except SyntaxError:
        return None
    node: ast.AST | None = None
    for part in parts:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        body = getattr(node, "body", [])
    return ast.get_source_segment(text, node) if node is not None else None


def compare(before: dict[str, Result], after: dict[str, Result],
            carries: Callable[[str], bool]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(flips, failing in both states with their reason). `carries(test id)`: the series changed that
    test itself (the change an upstream pull request carries with the code)."""
    flips, env = [], []
    for tid in sorted(set(before) | set(after)):
        a, b = before.get(tid), after.get(tid)
        was, now = (a.outcome if a else "absent"), (b.outcome if b else "absent")
        if was != now:
            mine = "yes" if carries(tid) else ""
            flips.append({"test": tid, "unpatched": was, "patched": now, "carried": mine})
        elif was in (FAILED, ERROR):
            seen = b or a
            env.append({"test": tid, "outcome": was, "reason": seen.message if seen else ""})
    return flips, env


def _carries(tree: Path, head: str, carried: set[str]) -> Callable[[str], bool]:
    """Whether the series changed the test `tid` (file.dotted.path::name) between `upstream` and head."""
    def show(rev: str, path: str) -> str:
        proc = gitutil.run(["show", f"{rev}:{path}"], tree, check=False)
        return proc.stdout.decode(errors="replace") if proc.returncode == 0 else ""

    def carries(tid: str) -> bool:
        cls, _, name = tid.partition("::")
        for path in carried:
            dotted = path[:-3].replace("/", ".")
            if cls == dotted or cls.startswith(dotted + "."):
                inner = cls[len(dotted) + 1:]
                full = f"{inner}::{name}" if inner else name
                return test_source(show("upstream", path), full) != test_source(show(head, path), full)
        return False
    return carries


def run(tree: Path, site: Path, series: Sequence[Patch], python: str, work: Path,
        skip: Sequence[str] = (), subset: str | None = None) -> Report:
    """Both states in one sitting; `tree` is a git tree of the sdist with `series` committed on top of
    its `upstream` tag, `site` has `series` applied. Both are left patched. `skip`: changed files whose
    importers are not selected (vllm/envs.py: most of vLLM's tests import it)."""
    if gitutil.out(["status", "--porcelain", "--untracked-files=no"], tree).strip():
        raise SparkserveError(f"{tree} has uncommitted changes")
    changed = sorted({fc.path for p in series for fc in p.files})
    selected, unruled = select(tree, changed, skip)
    if subset:
        selected = restrict(selected, subset)
    tests = sorted({t for ts in selected.values() for t in ts})
    carried = {fc.path for p in series for fc in p.files if fc.path.startswith("tests/")}
    # the patched tree selects its own new tests too
    say(f"upstream tests: {len(tests)} file(s) for {len(selected)} changed module(s)")
    head = gitutil.out(["rev-parse", "--abbrev-ref", "HEAD"], tree).strip()
    if head == "HEAD":
        head = gitutil.out(["rev-parse", "HEAD"], tree).strip()
    reverted: list[Patch] = []
    try:
        for patch in reversed(series):
            _apply_site(patch, site, reverse=True)
            reverted.append(patch)
        gitutil.run(["checkout", "-q", "upstream"], tree)
        present = [t for t in tests if (tree / t).is_file()]
        before = run_tests(python, tree, present, site, work / "unpatched.xml")
    finally:
        gitutil.run(["checkout", "-q", head], tree)
        for patch in reversed(reverted):
            _apply_site(patch, site, reverse=False)
    after = run_tests(python, tree, tests, site, work / "patched.xml")
    flips, env = compare(before, after, _carries(tree, head, carried))
    return Report(selected, unruled, before, after, carried, flips, env)
