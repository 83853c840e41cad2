"""Is every hunk of a patch needed? On a patched site (or dev tree), revert one hunk at a time, run the
tests the patch's `Proof:` header names (or a given command), and put the hunk back: a hunk whose
reversal fails some test is *caught*; one whose reversal every test survives is *survived* (it needs a
test that fails without it, or it is not needed). A hunk that does not revert on its own (a later patch
builds on it) or that the installed form does not ship (tests/, docs/ of a wheel) is reported as such.

The tests must pass on the untouched patched state first; otherwise no outcome would mean anything.
Each test run gets a fresh bytecode cache, so a reverted .py of the same size and mtime second is
recompiled from its source.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from unidiff.patch import PatchSet

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil
from sparkserve.supply.patches import pathmap
from sparkserve.supply.patches.series import Patch

CAUGHT, SURVIVED, NOT_REVERTIBLE, NOT_SHIPPED = "caught", "survived", "not revertible alone", "not shipped"
# A hunk of docstrings and comments alone: no test can fail without it, and none should.
DOCS_ONLY = "docs only"
# Test files named in a Proof header.
_TEST = re.compile(r"(?<![\w/.-])(tests/[\w/.-]+\.py)")


@dataclass(frozen=True)
class HunkDiff:
    patch: str  # upstream/id
    path: str  # source (sdist) path
    index: int  # 1-based, within the file
    header: str  # "@@ -a,b +c,d @@ ..."
    diff: str  # a diff of this hunk alone, in source paths


@dataclass
class Outcome:
    patch: str
    path: str
    hunk: str
    status: str
    exit_code: int | None = None
    seconds: float = 0.0


def hunks(patch: Patch) -> list[HunkDiff]:
    """Every hunk of the patch as a diff of its own."""
    out = []
    for pf in PatchSet(patch.diff):
        src = pf.source_file if not pf.is_added_file else "/dev/null"
        dst = pf.target_file if not pf.is_removed_file else "/dev/null"
        path = (pf.target_file if pf.is_added_file else pf.source_file)[2:]
        for i, h in enumerate(pf, 1):
            text = f"diff --git a/{path} b/{path}\n--- {src}\n+++ {dst}\n{h}"
            out.append(HunkDiff(f"{patch.upstream}/{patch.id}", path, i, str(h).splitlines()[0], text))
    return out


_OLD_START = re.compile(r"^@@ -(\d+)")


def _old_start(h: HunkDiff) -> str:
    """The first line of the hunk's old side, from its `@@ -LINE,...` header."""
    m = _OLD_START.match(h.header)
    return m.group(1) if m else ""


def select(found: Sequence[HunkDiff], only: Sequence[str]) -> list[HunkDiff]:
    """The hunks `only` names, each as FILE:LINE (the end of the hunk's source path, and the first line
    of its old side, as in its `@@ -LINE,...` header); every hunk when `only` is empty. A name that
    matches no hunk is an error, so a typo never passes as a table of nothing."""
    if not only:
        return list(found)
    picked = []
    for spec in only:
        path, _, line = spec.rpartition(":")
        if not path or not line.isdigit():
            raise SparkserveError(f"--hunk {spec}: give FILE:LINE, the file (or the end of its path) and "
                                  "the old start line of its @@ header, e.g. decode.cuh:363")
        hits = [h for h in found if (h.path == path or h.path.endswith("/" + path)) and _old_start(h) == line]
        if not hits:
            raise SparkserveError(f"--hunk {spec}: no hunk of {found[0].patch if found else 'the patch'} "
                                  f"starts at line {line} of a file named {path}; its hunks: "
                                  + ", ".join(f"{h.path}:{_old_start(h)}" for h in found))
        picked += [h for h in hits if h not in picked]
    return [h for h in found if h in picked]


def proof_tests(patch: Patch) -> list[str]:
    """Test files the patch's Proof header names."""
    return sorted(set(_TEST.findall(patch.header.fields.get("Proof", ""))))


def _relocate(h: HunkDiff, upstream: str, site: bool) -> tuple[str, str] | None:
    """(diff, path) as they apply where the hunk is reverted; None when the installed form lacks it."""
    if not site:
        return h.diff, h.path
    where = pathmap.to_site(upstream, h.path)
    if where is None:
        return None
    return h.diff.replace(f"a/{h.path}", f"a/{where}").replace(f"b/{h.path}", f"b/{where}"), where


def _git_apply(diff: str, cwd: Path, reverse: bool) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as f:
        f.write(diff)
    try:
        proc = gitutil.run(["apply", "--whitespace=nowarn", *(["-R"] if reverse else []), f.name], cwd,
                           check=False, extra_env={"GIT_CEILING_DIRECTORIES": str(cwd.parent)})
    finally:
        Path(f.name).unlink()
    return proc.returncode == 0


def _code(text: str) -> str | None:
    """The program a Python source holds, without its docstrings and comments (None: not Python)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def docs_only(before: str, after: str, path: str) -> bool:
    """Whether two versions of a file differ in docstrings and comments alone."""
    if not path.endswith(".py"):
        return False
    code = _code(before)
    return code is not None and code == _code(after)


def compiles(path: str) -> bool:
    """Whether a hunk in `path` changes what FlashInfer's JIT compiles (a non-Python source, or the JIT's
    own generators): its tests then need an empty JIT cache, since the cache is keyed by the module's
    name, not by its sources."""
    return not path.endswith(".py") or "/jit/" in f"/{path}"


@contextlib.contextmanager
def _jit_cache(path: Path) -> Iterator[None]:
    """The FlashInfer JIT cache the runs inside use (they inherit this process's environment)."""
    was = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(path)
    try:
        yield
    finally:
        if was is None:
            del os.environ["FLASHINFER_WORKSPACE_BASE"]
        else:
            os.environ["FLASHINFER_WORKSPACE_BASE"] = was


def _run(command: Sequence[str], cwd: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparkserve-mutate-pyc-") as pyc:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": pyc}
        rc = subprocess.run(list(command), cwd=cwd, env=env, check=False,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return rc, time.monotonic() - t0


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _put_back(diff: str, where: Path, h: HunkDiff) -> None:
    if not _git_apply(diff, where, reverse=False):
        raise SparkserveError(f"could not put back {h.path} hunk {h.index} in {where}: "
                              "reinstall the patched packages")


def fresh_roots(patch: Patch, where: Path, site: bool) -> list[Path]:
    """The top folders (packages) of `where` that the patch's hunks change: what each run imports anew."""
    tops = set()
    for h in hunks(patch):
        placed = _relocate(h, patch.upstream, site)
        if placed is not None:
            tops.add(placed[1].split("/", 1)[0])
    return [where / t for t in sorted(tops)]


def default_command(patch: Patch, python: str = sys.executable, under: str | None = None) -> list[str]:
    """pytest on the Proof header's test files (only those under the folder `under`, e.g. tests/image:
    the ones that run on a CPU)."""
    tests = proof_tests(patch)
    if under:
        tests = [t for t in tests if t.startswith(under.rstrip("/") + "/")]
    if not tests:
        raise SparkserveError(f"{patch.upstream}/{patch.id}: its Proof header names no test file "
                              f"(tests/...py){f' under {under}' if under else ''}: give the command to run "
                              "with --command")
    return [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]


Runner = Callable[[], tuple[int, float]]


def mutate(patch: Patch, where: Path, site: bool, command: Sequence[str], cwd: Path,
           runner: Runner | None = None, first: Runner | None = None,
           only: Sequence[str] = ()) -> list[Outcome]:
    """Revert each hunk of `patch` alone in `where` (a site-packages or a dev tree with the series
    applied), run `command` in `cwd`, restore the hunk. `runner` runs the tests another way (a forked
    child, `forkrun`), `first` its first run; a hunk survives only when `command` in a process of its
    own passes too. `only` (FILE:LINE, `select`) limits it to the hunks named. The FlashInfer JIT modules
    built from the patched sources are shared by the runs of hunks that do not change them; the others
    build theirs afresh."""
    chosen = select(hunks(patch), only)
    with tempfile.TemporaryDirectory(prefix="sparkserve-mutate-jit-") as jit:
        return _mutate(patch, chosen, where, site, command, cwd, runner, first, Path(jit))


def _mutate(patch: Patch, chosen: Sequence[HunkDiff], where: Path, site: bool, command: Sequence[str],
            cwd: Path, runner: Runner | None, first: Runner | None, jit: Path) -> list[Outcome]:
    fresh: Runner = lambda: _run(command, cwd)  # noqa: E731
    run = runner or fresh
    with _jit_cache(jit / "patched"):
        rc, _ = (first or run)()
    if rc != 0:
        raise SparkserveError(f"{' '.join(command)} fails (exit {rc}) with {patch.upstream}/{patch.id} "
                              "applied: fix that first, a mutation outcome would mean nothing")
    out = []
    for h in chosen:
        placed = _relocate(h, patch.upstream, site)
        if placed is None:
            out.append(Outcome(h.patch, h.path, h.header, NOT_SHIPPED))
            say(f"  {h.path} hunk {h.index}: {NOT_SHIPPED} in the installed form")
            continue
        diff, placed_path = placed
        patched_text = _text(where / placed_path)
        if not _git_apply(diff, where, reverse=True):
            out.append(Outcome(h.patch, h.path, h.header, NOT_REVERTIBLE))
            say(f"  {h.path} hunk {h.index}: {NOT_REVERTIBLE}")
            continue
        if docs_only(patched_text, _text(where / placed_path), placed_path):
            _put_back(diff, where, h)
            out.append(Outcome(h.patch, h.path, h.header, DOCS_ONLY))
            say(f"  {h.path} hunk {h.index}: {DOCS_ONLY} (docstrings and comments; no test run)")
            continue
        cache = jit / f"hunk-{len(out)}" if compiles(h.path) else jit / "patched"
        try:
            with _jit_cache(cache):
                rc, dt = run()
                if rc == 0 and runner is not None:  # a survivor is confirmed in a fresh process
                    rc, more = fresh()
                    dt += more
        finally:
            _put_back(diff, where, h)
            if cache.name != "patched":
                shutil.rmtree(cache, ignore_errors=True)
        status = CAUGHT if rc != 0 else SURVIVED
        out.append(Outcome(h.patch, h.path, h.header, status, rc, round(dt, 1)))
        say(f"  {h.path} hunk {h.index} ({h.header}): {status.upper()} (exit {rc}, {dt:.1f} s)")
    return out


def table(outcomes: list[Outcome]) -> list[str]:
    rows = ["| patch | file | hunk | outcome | test exit | s |", "|---|---|---|---|---:|---:|"]
    for o in outcomes:
        code = "" if o.exit_code is None else str(o.exit_code)
        rows.append(f"| {o.patch} | {o.path} | `{o.hunk}` | {o.status} | {code} | {o.seconds} |")
    return rows


def as_json(outcomes: list[Outcome], command: Sequence[str]) -> dict[str, object]:
    return {"command": list(command), "hunks": [asdict(o) for o in outcomes],
            "survived": sum(o.status == SURVIVED for o in outcomes),
            "caught": sum(o.status == CAUGHT for o in outcomes)}
