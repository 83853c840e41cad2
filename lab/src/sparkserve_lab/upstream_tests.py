"""Upstream's own tests against the patched packages: for every Python file the series changes, the test
files of the upstream's source tree (the pinned sdist as `patches check` builds it) that import its
module run twice in one sitting, first with the series reverted in the installed site (and the tree at
its `upstream` tag), then patched (the tree with the series' commits, so a patch's own test changes
count). Every test whose outcome changes is reported; a change fails the proof unless the series changes
that test itself in upstream's test file (the test change an upstream pull request would carry). Tests
that fail or error in both states are listed with their reason (no GPU, a missing optional package), not
hidden.

A test file exercises a changed file when it imports its module, when it uses a name the module defines
through a package that re-exports it (`flashinfer.single_decode_with_kv_cache`, `from flashinfer import
BatchDecodeWithPagedKVCacheWrapper`: the packages' `__init__.py` files are parsed), or, for a file the
JIT compiles (FlashInfer's CUDA headers, CUTLASS builders), when it exercises a module that JIT_BUILDS
names for it. A changed non-Python file that no JIT_BUILDS pattern matches is listed as having no
selection rule.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil
from sparkserve.supply.patches import pathmap
from sparkserve.supply.patches.series import Patch

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
# A subset that is the whole selection less the files EXCLUDED names for its upstream.
WHOLE: tuple[str, ...] = ("*",)

# Named subsets of the selection, per upstream (`--upstream U --subset NAME`). vllm "cpu": vLLM test files
# that run on a CPU inside the image (no GPU, no network) in well under a minute per state, each importing
# a module the series changes: vllm/utils/flashinfer.py (vllm/0003), vllm/config/quantization.py
# (vllm/0002), vllm/v1/attention/backends/flash_attn.py (vllm/0005: its metadata builder on a CPU device) and
# vllm/model_executor/models/gpt_oss.py (vllm/0010: its expert weight loading);
# test_use_trtllm_attention.py under a CUDA platform without a device (PLUGINS): vllm/0003 carries its update.
SUBSETS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "cpu": (
            "tests/kernels/attention/test_use_trtllm_attention.py",
            "tests/model_executor/model_loader/test_gpt_oss_weight_loading.py",
            "tests/quantization/test_quantization_config_args.py",
            "tests/utils_/test_flashinfer_utils.py",
            "tests/v1/attention/test_group_head_counts.py",
        ),
        # a CUDA GPU host's: the whole selection but for the files EXCLUDED names (WHOLE)
        "gpu": WHOLE,
    },
    # the whole selection, from the test files borrowed from another FlashInfer (--tests-from: the pinned
    # sdist ships none of the patched kernels')
    "flashinfer": {"gpu": WHOLE},
}

# pytest plugins a subset's file runs with (`-p`), per upstream and subset: test_use_trtllm_attention.py
# skips itself without CUDA at import, yet decides the platform questions it tests through mocks alone.
PLUGINS: dict[str, dict[str, dict[str, str]]] = {
    "vllm": {"cpu": {
        "tests/kernels/attention/test_use_trtllm_attention.py": "sparkserve_lab.testing.fake_cuda"}},
}

# Files of the selection a CUDA host does not run, by pattern (fnmatch on the test file's path), each with
# the reason the proof records. Whatever else a GPU run leaves out it says at run time: a file over the
# per-file limit, a file the state's deadline did not reach.
EXCLUDED: dict[str, dict[str, str]] = {
    "vllm": {
        "*rocm*": "ROCm only (AMD GPUs)",
        "*aiter*": "ROCm only (AITER kernels)",
        "*gfx9*": "ROCm only (gfx9 GPUs)",
        "*rdna*": "ROCm only (RDNA GPUs)",
        "*xpu*": "Intel XPU only",
    },
}

# Changed files whose tests no import names: the Python module(s) whose JIT builds compile (or generate)
# them, read from FlashInfer 0.7.2.post1's flashinfer/jit code. A changed file matching a pattern (fnmatch,
# source-tree path) gets the test files of those modules (their importers and the users of their
# re-exported names). A non-Python file matching no pattern is listed as "no selection rule".
JIT_BUILDS: dict[str, tuple[str, ...]] = {
    # single_/batch_decode_kernel_inst.jinja (gen_single_decode_module, gen_batch_decode_module: decode.py)
    # and pod.cuh/batch_pod.cuh (gen_pod_module, gen_batch_pod_module: pod.py) include it. Tensor-core
    # decode runs prefill.py's module, whose kernels (prefill.cuh) do not include decode.cuh: no prefill.py.
    "include/flashinfer/attention/decode.cuh": ("flashinfer/decode.py", "flashinfer/pod.py"),
    # the series changes its decode builders (get_batch_decode_uri, gen_batch_decode_module), which
    # decode.py calls; its own importers are selected by the import rules as well
    "flashinfer/jit/attention/modules.py": ("flashinfer/decode.py",),
    # the CUTLASS fused-MoE JIT module (jit/fused_moe.py gen_cutlass_fused_moe_module: generate_kernels.py
    # writes its grouped-GEMM units, it compiles cutlass_heuristic.cpp and the moe_gemm dispatch),
    # built and run by fused_moe/core.py (cutlass_fused_moe)
    "flashinfer/jit/gemm/cutlass/generate_kernels.py":
        ("flashinfer/fused_moe/core.py", "flashinfer/jit/fused_moe.py"),
    "csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.cpp":
        ("flashinfer/fused_moe/core.py", "flashinfer/jit/fused_moe.py"),
    "csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch*.h":
        ("flashinfer/fused_moe/core.py", "flashinfer/jit/fused_moe.py"),
    # included by the MoE units and by the dense CUTLASS GEMMs (fp4/mxfp8 gemm_cutlass*.cu: gemm_base.py)
    "csrc/nv_internal/tensorrt_llm/cutlass_extensions/include/cutlass_extensions/gemm_configs.h":
        ("flashinfer/fused_moe/core.py", "flashinfer/jit/fused_moe.py", "flashinfer/gemm/gemm_base.py"),
    # CUTLASS's sm120 collective builders: every sm120 CUTLASS build (the MoE's, the dense sm120 GEMMs')
    "3rdparty/cutlass/include/cutlass/*/collective/builders/sm120_*.inl":
        ("flashinfer/fused_moe/core.py", "flashinfer/jit/fused_moe.py", "flashinfer/gemm/gemm_base.py"),
}


def subsets_of(upstream: str) -> dict[str, tuple[str, ...]]:
    return SUBSETS.get(upstream, {})


def excluded(selected: dict[str, list[str]], upstream: str) -> dict[str, str]:
    """{test file: why a CUDA host does not run it} for the selected files EXCLUDED names."""
    out = {}
    for t in sorted({t for ts in selected.values() for t in ts}):
        why = next((r for pat, r in EXCLUDED.get(upstream, {}).items() if fnmatch.fnmatchcase(t, pat)), None)
        if why:
            out[t] = why
    return out


def restrict(selected: dict[str, list[str]], subset: str, upstream: str = "vllm") -> dict[str, list[str]]:
    """The selection cut to a named subset of `upstream`; a subset file the selection no longer names (it
    stopped importing a changed module, or the series stopped changing it) is an error, never skipped. The
    WHOLE subset is every selected file but those excluded() names."""
    known = subsets_of(upstream)
    if subset not in known:
        raise SparkserveError(f"no upstream-tests subset {subset!r} for {upstream} (known: "
                              f"{', '.join(sorted(known)) or 'none'})")
    every = {t for ts in selected.values() for t in ts}
    if known[subset] == WHOLE:
        out = excluded(selected, upstream)
        return {path: [t for t in ts if t not in out] for path, ts in selected.items()
                if any(t not in out for t in ts)}
    wanted = set(known[subset])
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


def _statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """A module's statements, into if/try/with blocks (a conditional re-export), not into functions or
    classes (a lazy `__getattr__`'s imports are no static re-export)."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, name, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            yield from _statements(handler.body)


def _module_file(tree: Path, module: str) -> Path | None:
    base = tree / module.replace(".", "/")
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError):
        return None


def _public_names(tree: Path, module: str) -> set[str]:
    """What `from module import *` binds: its literal `__all__`, else its public top-level names."""
    f = _module_file(tree, module)
    mod = _parse(f) if f else None
    if mod is None:
        return set()
    names: set[str] = set()
    for node in _statements(mod.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            try:
                return {str(n) for n in ast.literal_eval(node.value)}
            except ValueError:
                pass
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update((a.asname or a.name) for a in node.names if a.name != "*")
    return {n for n in names if not n.startswith("_")}


def reexports(tree: Path, roots: Sequence[str]) -> dict[str, str]:
    """{package.name: the dotted object it is} for the `from X import name [as alias]` of every package
    `__init__.py` under `roots` (top-level package folders of tree): `flashinfer.single_decode_with_kv_cache`
    -> `flashinfer.decode.single_decode_with_kv_cache`, `flashinfer.decode` -> `flashinfer.decode` for
    `from . import decode`; `import *` binds the source's `__all__` or public names."""
    out: dict[str, str] = {}
    for root in roots:
        if not (tree / root).is_dir():
            continue
        for init in sorted((tree / root).rglob("__init__.py")):
            pkg = module_of(str(init.relative_to(tree)))
            mod = _parse(init)
            if pkg is None or mod is None:
                continue
            for node in _statements(mod.body):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    parts = pkg.split(".")
                    if node.level - 1 >= len(parts):
                        continue
                    head = parts[:len(parts) - node.level + 1]
                    base = ".".join(head + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    if alias.name == "*":
                        for n in _public_names(tree, base):
                            out.setdefault(f"{pkg}.{n}", f"{base}.{n}")
                    else:
                        out[f"{pkg}.{alias.asname or alias.name}"] = f"{base}.{alias.name}"
    return out


def _under(name: str, prefixes: set[str]) -> str | None:
    """The prefix of `prefixes` that dotted `name` is or is inside of (a.b.c under a.b), if any."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in prefixes:
            return head
    return None


def reach(module: str, exported: dict[str, str]) -> set[str]:
    """Every dotted name under which `module` or what it defines is reachable: the module itself and the
    package names that re-export it or its names, through any chain of packages."""
    names = {module}
    grew = True
    while grew:
        grew = False
        for name, target in exported.items():
            if name not in names and _under(target, names):
                names.add(name)
                grew = True
    return names


def used_names(text: str) -> set[str]:
    """The dotted names a test file's source uses: what it imports (`from P import b` -> P.b, `import P.Q`
    -> P.Q) and the attribute chains on imported names (`import flashinfer` ... `flashinfer.X(...)` ->
    flashinfer.X; `import flashinfer as fi` ... `fi.X` -> flashinfer.X)."""
    try:
        mod = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    alias: dict[str, str] = {}
    used: set[str] = set()
    for node in ast.walk(mod):
        if isinstance(node, ast.Import):
            for a in node.names:
                used.add(a.name)
                if a.asname:
                    alias[a.asname] = a.name
                else:
                    root = a.name.split(".", 1)[0]
                    alias[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    used.add(f"{node.module}.{a.name}")
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(mod):
        if isinstance(node, ast.Attribute):
            chain = [node.attr]
            inner: ast.expr = node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in alias:
                used.add(".".join([alias[inner.id], *reversed(chain)]))
    return used


@dataclass
class Selection:
    """Per changed file: the test files selected and, per test file, the rule that selected it; `rules`:
    the rules that apply to the file (import, re-export, the JIT_BUILDS pattern); `unruled`: changed
    non-Python files no rule covers."""
    tests: dict[str, list[str]]
    why: dict[str, dict[str, str]]
    rules: dict[str, list[str]]
    unruled: list[str]


def selection(tree: Path, changed: Sequence[str], skip: Sequence[str] = (),
              builds: dict[str, tuple[str, ...]] | None = None) -> Selection:
    """The selection rules, in order, for each changed file:
    import: test files that import its module (`import m`, `from m import x`, `from parent import leaf`);
    re-export: test files that use a name of the module through a package that re-exports it (the package
      `__init__.py` files of the tree, parsed: `from flashinfer import X`, `flashinfer.X`);
    JIT build: a changed file matching a pattern of `builds` (default JIT_BUILDS) gets the test files of the
      modules named there, by the two rules above.
    A non-Python file matching no pattern is `unruled`."""
    table = JIT_BUILDS if builds is None else builds
    tests = sorted(p for p in (tree / "tests").rglob("test_*.py")) if (tree / "tests").is_dir() else []
    texts = {str(p.relative_to(tree)): p.read_text(errors="replace") for p in tests}
    used: dict[str, set[str]] = {}
    exported: dict[str, str] | None = None

    def by_module(mod: str) -> dict[str, str]:
        nonlocal exported
        if exported is None:
            roots = sorted({p.split("/", 1)[0] for p in [*changed, *(t for ts in table.values() for t in ts)]
                            if module_of(p)})
            exported = reexports(tree, roots)
        names = reach(mod, exported)
        out = {}
        for t, text in texts.items():
            if imports(text, mod):
                out[t] = f"import {mod}"
                continue
            if t not in used:
                used[t] = used_names(text)
            hit = sorted((n for n in used[t] if _under(n, names)), key=lambda n: (-len(n), n))
            if hit:
                via = _under(hit[0], names)
                out[t] = f"attribute {hit[0]}" if via == mod else f"re-export {via}"
        return out

    sel = Selection({}, {}, {}, [])
    for path in changed:
        if path in skip or path.startswith("tests/"):
            continue
        why: dict[str, str] = {}
        rules: list[str] = []
        mod = module_of(path)
        if mod is not None:
            rules.append(f"import/re-export of {mod}")
            why.update(by_module(mod))
        for pattern, targets in table.items():
            if not fnmatch.fnmatchcase(path, pattern):
                continue
            rules.append(f"JIT build {pattern} -> {', '.join(targets)}")
            for target in targets:
                tmod = module_of(target)
                if tmod is None:
                    continue
                for t, reason in by_module(tmod).items():
                    why.setdefault(t, f"JIT build -> {target}: {reason}")
        if not rules:
            sel.unruled.append(path)
            continue
        sel.tests[path] = sorted(why)
        sel.why[path] = dict(sorted(why.items()))
        sel.rules[path] = rules
    return sel


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
                # a message that ends where its detail starts ("Ninja build failed. Ninja output:") keeps
                # the first later line that names an error (the compiler's)
                if message.rstrip().endswith(":"):
                    detail = next((ln.strip() for ln in [*first[1:], *cause]
                                   if _DETAIL.search(ln) and ln.strip() not in message), "")
                    message = f"{message} ... {detail[:200]}" if detail else message
                break
        out[tid] = Result(outcome, message)
    return out


_DETAIL = re.compile(r"\berror\b|\bfatal\b", re.I)


# pytest -v's line per test: the node id, then its outcome (the phase that decided it: a setup error is
# ERROR, an xfail is reported as skipped and an xpass as passed, as --junitxml records them)
_VERBOSE = re.compile(r"^(?P<node>\S[^\s]*?::.+?) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s|$)")
_WORDS = {"PASSED": PASSED, "XPASS": PASSED, "FAILED": FAILED, "ERROR": ERROR, "SKIPPED": SKIPPED,
          "XFAIL": SKIPPED}
OVER_LIMIT = "over the per-file limit of"


def junit_id(node: str) -> str:
    """A pytest node id (tests/a/test_x.py::Cls::test_y[p]) as --junitxml names the test
    (tests.a.test_x.Cls::test_y[p]), so that a stopped file's tests meet the junit ids of the other state."""
    path, bracket, params = node.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return f"{'.'.join(names[:-1])}::{names[-1]}"


def parse_verbose(text: str, cwd: Path | None = None, root: Path | None = None) -> dict[str, Result]:
    """{junit id: outcome} of the tests a `pytest -v` log reports as done: what a file stopped at the
    per-file limit got through (its junit report is never written). pytest -v names a file relative to
    the folder it ran in (`cwd`), junit relative to its rootdir (`root`). A test reported twice (a
    teardown error after a pass) keeps the last word, as junit keeps the error."""
    out: dict[str, Result] = {}
    for line in text.splitlines():
        m = _VERBOSE.match(line)
        if not m:
            continue
        node = m["node"]
        if cwd is not None and root is not None:
            path, sep, rest = node.partition("::")
            where = os.path.realpath(os.path.join(cwd, path))
            node = os.path.relpath(where, os.path.realpath(root)) + sep + rest
        out[junit_id(node)] = Result(_WORDS[m["word"]])
    return out


def _site_env(site: Path | Sequence[Path], more: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment upstream's tests run in: `site`'s packages first on the path (several folders: in
    that order), no bytecode written into it, then `more`."""
    base = gitutil.env()
    first = [str(site)] if isinstance(site, Path) else [str(p) for p in site]
    path = os.pathsep.join(p for p in (*first, base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1", **(more or {})}


def run_tests(python: str, tree: Path, tests: Sequence[str], site: Path, junit: Path,
              plugins: Mapping[str, str] | None = None) -> dict[str, Result]:
    """The test files of `tree` against the packages of `site` (the tree's own copy of the package must
    not shadow them: pytest runs from an empty folder, the site first on the path, and appends the tree's
    root, which vLLM's tests/__init__.py would otherwise put first). One pytest for the files without a
    plugin, one per plugin of `plugins` ({file: plugin module}) for its files."""
    groups: dict[str, list[str]] = {}
    for t in tests:
        groups.setdefault((plugins or {}).get(t, ""), []).append(t)
    results: dict[str, Result] = {}
    for i, (plugin, files) in enumerate(sorted(groups.items())):
        results.update(_pytest(python, tree, files, site, junit.with_suffix(f".{i}.xml") if i else junit,
                               plugin))
    return results


def _pytest(python: str, tree: Path, tests: Sequence[str], site: Path, junit: Path, plugin: str
            ) -> dict[str, Result]:
    with tempfile.TemporaryDirectory(prefix="sparkserve-upstream-tests-") as cwd:
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-p", plugin] if plugin else []),
               "--continue-on-collection-errors", "--import-mode=append", "--rootdir", str(tree),
               f"--junitxml={junit}", *[str(tree / t) for t in tests]]
        env = _site_env(site)
        proc = subprocess.run(cmd, cwd=cwd, env=env, check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    results = parse_junit(junit)
    if not results:  # pytest missing, a usage error, a conftest that fails: no outcome is not "no flips"
        tail = "\n".join(proc.stdout.decode(errors="replace").strip().splitlines()[-15:])
        raise SparkserveError(f"pytest ran no test of {len(tests)} file(s) (exit {proc.returncode}); "
                              f"its last lines:\n{tail}")
    return results


def run_files(python: str, tree: Path, tests: Sequence[str], site: Path | Sequence[Path], work: Path,
              jobs: int, file_timeout: float, deadline: float | None = None,
              extra_env: dict[str, str] | None = None, plugins: Mapping[str, str] | None = None,
              label: str = "") -> tuple[dict[str, Result], dict[str, str]]:
    """The test files of `tree` against `site` as run_tests() runs them, but one pytest per file, `jobs`
    at a time: a file that crashes its process (a CUDA fault) takes no other file's outcomes with it. A
    file still running after `file_timeout` seconds is stopped, with the outcomes of the tests its verbose
    log reports done; a file not started before `deadline` (a time.monotonic() value) is not run; both
    are returned as {file: why}. `plugins`: as run_tests()'s; `label`: the state its progress lines name."""
    import shlex
    import signal
    import time

    work.mkdir(parents=True, exist_ok=True)
    # unbuffered: a stopped file's log holds every test line written before the kill
    env = _site_env(site, {"PYTHONUNBUFFERED": "1", **(extra_env or {})})
    results: dict[str, Result] = {}
    cut: dict[str, str] = {}
    waiting = list(tests)
    running: dict[str, tuple[subprocess.Popen[bytes], float, Path, Path]] = {}
    with tempfile.TemporaryDirectory(prefix="sparkserve-upstream-tests-") as cwd:
        while waiting or running:
            while waiting and len(running) < max(1, jobs):
                t = waiting.pop(0)
                if deadline is not None and time.monotonic() > deadline:
                    cut[t] = "not reached before the state's deadline"
                    continue
                slug = re.sub(r"[^A-Za-z0-9]+", "_", t)
                junit, log = work / f"{slug}.xml", work / f"{slug}.log"
                plugin = (plugins or {}).get(t)
                cmd = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                       *(["-p", plugin] if plugin else []), "--import-mode=append", "--rootdir", str(tree),
                       f"--junitxml={junit}", str(tree / t)]
                with log.open("wb") as out:
                    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                say(f"  upstream tests{label and f' ({label})'}: {t} ({len(waiting)} waiting)")
                running[t] = (proc, time.monotonic(), junit, log)
            time.sleep(0.2)
            for t, (proc, started, junit, log) in list(running.items()):
                if proc.poll() is None and time.monotonic() - started <= file_timeout:
                    continue
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    done = parse_verbose(log.read_text(errors="replace"), Path(cwd), tree)
                    results.update(done)
                    cut[t] = f"{OVER_LIMIT} {file_timeout:.0f} s ({len(done)} test(s) done)"
                else:
                    got = parse_junit(junit)
                    if not got:  # the process died before pytest wrote its report
                        last = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
                        got = {t: Result(ERROR, f"pytest exited {proc.returncode} without a report: "
                                                f"{last[:160]}")}
                    results.update(got)
                del running[t]
                say(f"  upstream tests{label and f' ({label})'}: {t} done: {shlex.quote(cut.get(t, 'ran'))}")
    return results, cut


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
    rules: dict[str, list[str]] = field(default_factory=dict)
    # test files selected but not compared, with why (EXCLUDED, the deadline, the per-file limit in a
    # state that got through none of the tests the other state did)
    left_out: dict[str, str] = field(default_factory=dict)
    # test files stopped at the per-file limit in a state: compared on the tests both states got through
    partial: dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> list[dict[str, str]]:
        return [f for f in self.flips if not f["carried"]]

    def to_dict(self) -> dict[str, object]:
        return {"selected": self.selected, "selection_rules": self.rules, "no_selection_rule": self.unruled,
                "flips": self.flips,
                "flips_not_carried": len(self.failures), "environmental": self.environmental,
                "left_out": self.left_out, "partial": self.partial,
                "tests": len(set(self.before) | set(self.after))}


def test_source(text: str, name: str) -> str | None:
    """The source of test function `name` (a parametrized id's [..] dropped; Class::name looked up in the
    class) in a test file's text, None when it has none."""
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


@dataclass(frozen=True)
class Pace:
    """How a GPU host runs a large selection: `jobs` pytest processes at a time (one file each), a file
    stopped after `file_timeout` s, and each state's files started within `state_s` s of its start."""
    jobs: int
    file_timeout: float
    state_s: float | None = None
    # an environment variable set to a folder of each state's own (FlashInfer's JIT workspace: a kernel
    # compiled from the reverted sources must not be found by the patched state)
    state_dir_var: str | None = None
    # both states at once, each with `jobs` files (states_together()), on a host with the processors and
    # the GPU memory for both: the two states in about the time of one
    together: bool = False

    def deadline(self) -> float | None:
        """The time.monotonic() value after which a state starts no file, counted from now."""
        import time

        return time.monotonic() + self.state_s if self.state_s else None


def _note_cut(left_out: dict[str, str], state: str, cut: Mapping[str, str]) -> None:
    """Each file `state` did not run to its end, into `left_out` with why, after what another state said."""
    for t, why in cut.items():
        left_out[t] = f"{left_out[t]}; {state}: {why}" if t in left_out else f"{state}: {why}"


@dataclass(frozen=True)
class BorrowedTests:
    """Test files of another version of the upstream, for a pinned source that ships none of the patched
    code's (FlashInfer's sdist): `version` is theirs, `pinned` the package's; the report records both (the
    version gap). `added`: the files copied into the tree (a file the tree has stays the tree's)."""
    source: Path
    version: str
    pinned: str
    added: tuple[str, ...]
    kept: int
    commit: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"source": str(self.source), "version": self.version, "pinned": self.pinned,
                "commit": self.commit, "files": len(self.added), "kept_the_trees_own": self.kept,
                "gap": f"tests of {self.version} against {self.pinned}"}


@contextlib.contextmanager
def borrowed_tests(tree: Path, source: Path, version: str, pinned: str) -> Iterator[BorrowedTests]:
    """The files of `source`/tests that `tree`/tests lacks, copied into it untracked (the series' commits
    and the `upstream` tag do not hold them, so no patch can carry one of their tests) while the block
    runs, and removed after it, with the folders that held only them."""
    import shutil

    if not (source / "tests").is_dir():
        raise SparkserveError(f"{source} has no tests/ folder: give the checkout that holds upstream's tests")
    added: list[str] = []
    kept = 0
    try:
        for f in sorted(p for p in (source / "tests").rglob("*") if p.is_file()):
            rel = str(f.relative_to(source))
            if (tree / rel).exists():
                kept += 1
                continue
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, tree / rel)
            added.append(rel)
        commit = gitutil.out(["rev-parse", "HEAD"], source).strip() if (source / ".git").exists() else None
        yield BorrowedTests(source, version, pinned, tuple(added), kept, commit)
    finally:
        for rel in added:
            (tree / rel).unlink(missing_ok=True)
        for folder in sorted({(tree / rel).parent for rel in added}, key=lambda p: len(p.parts),
                             reverse=True):
            while folder != tree and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent


def already_compared(earlier: Mapping[str, object], files: Sequence[str], record: str) -> dict[str, str]:
    """{file: why it is not run again} for the files of `files` that an earlier report of the same
    upstream (`earlier`, its upstream-tests.json entry) compared, wholly or in part, with no changed
    outcome in them: a run that resumes it takes the files it left out (the deadline, a file stopped
    before any test both states got through) and those with a changed outcome (a test update the series
    carries since runs again)."""
    left = earlier.get("left_out") or {}
    flips = earlier.get("flips") or []
    if not isinstance(left, dict) or not isinstance(flips, list):
        raise SparkserveError(f"{record}: its report has no left_out table or flips list to resume from")
    flipped = {t for t in files for f in flips if _in_files(str(f.get("test", "")), {t: ""})}
    return {t: f"compared by {record}, which this run resumes" for t in files
            if t not in left and t not in flipped}


def preflight(python: str, site: Path | Sequence[Path], code: str, extra_env: Mapping[str, str],
              state: str) -> None:
    """Python CODE run once in the environment a state's test files get (the site first on the path, the
    state's own folder variable); a failure stops the run with its output, so that a toolchain the tests
    need and the host lacks (FlashInfer's JIT without a CUDA compiler) fails it in a minute, not as every
    test of every file."""
    env = _site_env(site, extra_env)
    with tempfile.TemporaryDirectory(prefix="sparkserve-upstream-tests-") as cwd:
        proc = subprocess.run([python, "-c", code], cwd=cwd, env=env, check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.decode(errors="replace").strip().splitlines()[-25:])
        raise SparkserveError(f"{state}: the preflight failed (exit {proc.returncode}), so no test ran; "
                              f"its last lines:\n{tail}")
    say(f"upstream tests: {state}: preflight passed")


def run(tree: Path, site: Path, series: Sequence[Patch], python: str, work: Path,
        skip: Sequence[str] = (), subset: str | None = None, pace: Pace | None = None,
        resume: tuple[Mapping[str, object], str] | None = None, check: str | None = None) -> Report:
    """Both states in one sitting; `tree` is a git tree of the sdist with `series` committed on top of
    its `upstream` tag, `site` has `series` applied. Both are left patched. `skip`: changed files whose
    importers are not selected (vllm/envs.py: most of vLLM's tests import it). `resume`: (an earlier
    report of this upstream, its record's name): the files it compared without a changed outcome are left
    out (already_compared()), so that sittings of a bounded length cover the whole selection between them.
    `check`: Python code each state runs first (preflight()). With `pace`, files run side by side
    (run_files()); the patched state runs the files the unpatched state started; a file either state did
    not start is not compared (Report.left_out says why), and a file stopped at the per-file limit in
    either state is compared on the tests both states got through (Report.partial). With `pace.together`,
    both states run at once (states_together()) and the site and the tree are never changed."""
    if gitutil.out(["status", "--porcelain", "--untracked-files=no"], tree).strip():
        raise SparkserveError(f"{tree} has uncommitted changes")
    changed = sorted({fc.path for p in series for fc in p.files})
    sel = selection(tree, changed, skip)
    selected, unruled = sel.tests, sel.unruled
    upstream = series[0].upstream if series else "vllm"
    left_out: dict[str, str] = {}
    if subset:
        if subsets_of(upstream).get(subset) == WHOLE:
            left_out.update(excluded(selected, upstream))
        selected = restrict(selected, subset, upstream)
    tests = sorted({t for ts in selected.values() for t in ts})
    plugins = PLUGINS.get(upstream, {}).get(subset or "", {})
    if resume is not None:
        done = already_compared(resume[0], tests, resume[1])
        left_out.update(done)
        tests = [t for t in tests if t not in done]
    carried = {fc.path for p in series for fc in p.files if fc.path.startswith("tests/")}
    # the patched tree selects its own new tests too
    say(f"upstream tests: {len(tests)} file(s) for {len(selected)} changed module(s)")
    head = gitutil.out(["rev-parse", "--abbrev-ref", "HEAD"], tree).strip()
    if head == "HEAD":
        head = gitutil.out(["rev-parse", "HEAD"], tree).strip()
    partial: dict[str, str] = {}
    if pace is not None and pace.together:
        before, after = states_together(tree, site, series, python, work, tests, pace, plugins, check,
                                        left_out)
        before, after, partial = _comparable(before, after, left_out)
    else:
        reverted: list[Patch] = []
        try:
            for patch in reversed(series):
                _apply_site(patch, site, reverse=True)
                reverted.append(patch)
            gitutil.run(["checkout", "-q", "upstream"], tree)
            present = [t for t in tests if (tree / t).is_file()]
            state_env = _state_env(pace, work, "unpatched") if pace else {}
            if check is not None:
                preflight(python, site, check, state_env, "unpatched")
            if pace is None:
                before = run_tests(python, tree, present, site, work / "unpatched.xml", plugins)
            else:
                before, cut = run_files(python, tree, present, site, work / "unpatched", pace.jobs,
                                        pace.file_timeout, pace.deadline(), state_env, plugins)
                _note_cut(left_out, "unpatched", cut)
        finally:
            gitutil.run(["checkout", "-q", head], tree)
            for patch in reversed(reverted):
                _apply_site(patch, site, reverse=False)
        state_env = _state_env(pace, work, "patched") if pace else {}
        if check is not None:
            preflight(python, site, check, state_env, "patched")
        if pace is None:
            after = run_tests(python, tree, tests, site, work / "patched.xml", plugins)
        else:
            started = [t for t in tests if t not in left_out or _stopped(left_out[t])]
            after, cut = run_files(python, tree, started, site, work / "patched", pace.jobs,
                                   pace.file_timeout, pace.deadline(), state_env, plugins)
            _note_cut(left_out, "patched", cut)
            before, after, partial = _comparable(before, after, left_out)
    flips, env = compare(before, after, _carries(tree, head, carried))
    return Report(selected, unruled, before, after, carried, flips, env,
                  {p: r for p, r in sel.rules.items() if p in selected}, dict(sorted(left_out.items())),
                  dict(sorted(partial.items())))


def states_together(tree: Path, site: Path, series: Sequence[Patch], python: str, work: Path,
                    tests: Sequence[str], pace: Pace, plugins: Mapping[str, str], check: str | None,
                    left_out: dict[str, str]) -> tuple[dict[str, Result], dict[str, Result]]:
    """Both states at once, each with its own `pace.jobs` files running and its own deadline from the same
    start: the unpatched state imports a copy of the site's changed packages with the series reverted, put
    first on the path (unpatched_overlay()), and runs the test files of a second checkout of `tree` at its
    upstream tag (with the tree's untracked files: borrowed tests); the patched state runs `site` and `tree`
    as they are, which stay untouched. Every file runs in both states; each state's cut files go into
    `left_out`. Returns both states' outcomes."""
    from concurrent.futures import ThreadPoolExecutor

    overlay, checkout = work / "unpatched-site", work / "unpatched-tree"
    gitutil.run(["worktree", "prune"], tree)
    gitutil.run(["worktree", "add", "-q", "--detach", str(checkout), "upstream"], tree)
    try:
        unpatched_overlay(site, series, overlay)
        untracked = gitutil.out(["ls-files", "--others", "--exclude-standard", "-z"], tree).split("\0")
        for rel in filter(None, untracked):
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, checkout / rel)
        sites: dict[str, list[Path]] = {"unpatched": [overlay, site], "patched": [site]}
        envs = {state: _state_env(pace, work, state) for state in sites}
        if check is not None:
            for state, folders in sites.items():
                preflight(python, folders, check, envs[state], state)
        deadline = pace.deadline()
        files = {"unpatched": [t for t in tests if (checkout / t).is_file()], "patched": list(tests)}
        trees = {"unpatched": checkout, "patched": tree}
        say(f"upstream tests: both states at once, {pace.jobs} file(s) each")
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = {state: pool.submit(run_files, python, trees[state], files[state], sites[state],
                                       work / state, pace.jobs, pace.file_timeout, deadline, envs[state],
                                       plugins, state) for state in sites}
            (before, cut_before), (after, cut_after) = runs["unpatched"].result(), runs["patched"].result()
    finally:
        gitutil.run(["worktree", "remove", "--force", str(checkout)], tree, check=False)
        shutil.rmtree(overlay, ignore_errors=True)
    _note_cut(left_out, "unpatched", cut_before)
    _note_cut(left_out, "patched", cut_after)
    return before, after


def unpatched_overlay(site: Path, series: Sequence[Patch], overlay: Path) -> None:
    """`overlay`: the top-level packages of `site` that the series changes, with the series reverted. A file
    the series does not change is a hard link into the site (a copy where the two are on different file
    systems); one it changes gets bytes of its own before the revert, so the site stays patched."""
    touched = {w for p in series for fc in p.files if (w := pathmap.to_site(p.upstream, fc.path))}
    shutil.rmtree(overlay, ignore_errors=True)
    overlay.mkdir(parents=True)
    for top in sorted({w.split("/")[0] for w in touched}):
        if (site / top).is_dir():
            shutil.copytree(site / top, overlay / top, symlinks=True, copy_function=_link_or_copy)
        elif (site / top).is_file():
            shutil.copy2(site / top, overlay / top)
    for w in sorted(touched):
        if (overlay / w).is_file() and not (overlay / w).is_symlink():
            (overlay / w).unlink()
            shutil.copy2(site / w, overlay / w)
    for patch in reversed(series):
        _apply_site(patch, overlay, reverse=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _stopped(why: str) -> bool:
    """Whether a left-out file's reason is only the per-file limit (its done tests are comparable)."""
    return all(OVER_LIMIT in part for part in why.split("; "))


def _comparable(before: dict[str, Result], after: dict[str, Result], left_out: dict[str, str]
                ) -> tuple[dict[str, Result], dict[str, Result], dict[str, str]]:
    """Both states' outcomes cut to what compares: a file either state did not start, in neither; a file
    stopped at the per-file limit, on the tests both states got through (moved from `left_out` to the
    returned partial files, unless that is none). A stopped file's crash in the other state (its one
    outcome named by the file) stays, a changed outcome."""
    partial: dict[str, str] = {}
    for t, why in list(left_out.items()):
        if not _stopped(why):
            before, after = ({k: v for k, v in d.items() if not _in_files(k, {t: why})}
                             for d in (before, after))
            continue
        mine = [{k for k in d if k != t and _in_files(k, {t: why})} for d in (before, after)]
        both = mine[0] & mine[1]
        before, after = ({k: v for k, v in d.items() if k not in (m - both)}
                         for d, m in zip((before, after), mine, strict=True))
        if both:
            partial[t] = f"{why}; {len(both)} test(s) both states got through compared"
            del left_out[t]
    return before, after, partial


def _state_env(pace: Pace, work: Path, state: str) -> dict[str, str]:
    if not pace.state_dir_var:
        return {}
    folder = work / f"{state}-{pace.state_dir_var.lower()}"
    folder.mkdir(parents=True, exist_ok=True)
    return {pace.state_dir_var: str(folder)}


def _in_files(test_id: str, files: dict[str, str]) -> bool:
    """Whether a junit test id (tests.dir.file::name, or a file path for a crashed file) is of one of
    `files` (tree-relative test file paths)."""
    mod = test_id.split("::", 1)[0]
    dotted = [f[:-3].replace("/", ".") for f in files]
    return test_id in files or any(mod == d or mod.startswith(d + ".") for d in dotted)
