"""Check, inside an image, that every prewarmed module loads the way serving loads it (`jit load-check`).

Runs without a GPU (and, for an arm64 image on an amd64 machine, under emulation). For each module the
build info lists, in the order serving would meet them:
  - the module list selects it for the build's set (nothing listed is missing, nothing extra was built);
  - FlashInfer resolves its JitSpec to an AOT artifact, and that artifact is the prewarmed library
    (`jit aot-link`): serving then loads it without compiling;
  - the library is an ELF of this machine's arch (a module of another arch would fail to load, and
    FlashInfer would silently fall back to compiling it at the first request);
  - dlopen with RTLD_NOW binds every symbol: the CUDA driver is a generated stub that defines every
    `cu*` entry point the modules reference (no GPU here), libcudart is the venv's, tvm_ffi's runtime
    is loaded by its own import, as in the server. The only exceptions are the symbols
    docker/jit-unbound.toml explains (FlashInfer dispatch cases the module never takes): they are bound to
    a stub in a separate process for that check, and a rule that explains nothing is stale and fails;
  - FlashInfer's own loader (JitSpec.load, tvm_ffi.load_module) returns the module and its functions.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sparkserve import config
from sparkserve.errors import SparkserveError
from sparkserve.image import cross
from sparkserve.image import modules as mlist
from sparkserve.image.aot import undefined
from sparkserve.image.modules import KINDS
from sparkserve.image.specs import jit_spec


@dataclass
class Loaded:
    name: str
    library: str
    arch: str = ""
    functions: int = 0
    explained: dict[str, int] = field(default_factory=dict)  # unbound rule -> symbols it explained
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Unbound:
    """A rule of docker/jit-unbound.toml: symbols a module of these kinds may leave undefined, and why."""

    name: str
    kinds: tuple[str, ...]
    symbols: re.Pattern[str]
    why: str


# docker/jit-unbound.toml's schema (sparkserve.config).
@dataclass(frozen=True)
class _UnboundEntry:
    name: str
    kinds: tuple[str, ...]
    symbols: str
    why: str


@dataclass(frozen=True)
class _UnboundFile:
    schema: Literal[1]
    unbound: tuple[_UnboundEntry, ...] = ()


def parse_unbound(text: str, source: str = "unbound symbols") -> list[Unbound]:
    data = config.parse_toml(_UnboundFile, text, source)
    if not data.unbound:
        raise SparkserveError(f"{source}: no [[unbound]] entries")
    rules: list[Unbound] = []
    for i, e in enumerate(data.unbound):
        where = f"{source}: unbound #{i + 1}"
        if not e.name or e.name in {r.name for r in rules}:
            raise SparkserveError(f"{where}: needs a unique name")
        if not e.kinds or any(k not in KINDS for k in e.kinds):
            raise SparkserveError(f"{where}: kinds must list module kinds of {', '.join(KINDS)}")
        if not e.why.strip():
            raise SparkserveError(f"{where}: needs a why (why no call can reach these symbols)")
        try:
            pattern = re.compile(e.symbols)
        except re.error as exc:
            raise SparkserveError(f"{where}: symbols is not a regular expression: {exc}") from exc
        rules.append(Unbound(e.name, e.kinds, pattern, e.why.strip()))
    return rules


def load_unbound(path: Path) -> list[Unbound]:
    try:
        return parse_unbound(path.read_text(), str(path))
    except OSError as exc:
        raise SparkserveError(f"cannot read {path}: {exc}") from exc


def explained(kind: str, undefined_symbols: list[str], rules: list[Unbound]) -> dict[str, list[str]]:
    """rule name -> the symbols of a module of `kind` it explains."""
    out: dict[str, list[str]] = {}
    for s in undefined_symbols:
        for r in rules:
            if kind in r.kinds and r.symbols.fullmatch(s):
                out.setdefault(r.name, []).append(s)
                break
    return out


def undefined_symbols(library: Path) -> list[str]:
    proc = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SparkserveError(f"nm -D {library} failed: {proc.stderr.strip()[-300:]}")
    return sorted(undefined(proc.stdout))


def driver_symbols(libraries: list[Path]) -> list[str]:
    """CUDA driver entry points (cu*, unmangled) the libraries leave undefined."""
    names: set[str] = set()
    for lib in libraries:
        names |= {s for s in undefined_symbols(lib) if s.startswith("cu") and not s.startswith("_Z")}
    return sorted(names)


def stub_library(symbols: list[str], path: Path, soname: str) -> Path:
    """A library defining `symbols` as functions that do nothing. Never used to run anything."""
    src = path.with_suffix(".c")
    src.write_text("".join(f"void {s}(void) {{}}\n" for s in symbols)
                   or "void sparkserve_stub_empty(void) {}\n")
    proc = subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(src)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SparkserveError(f"cannot build the stub {path}: {proc.stderr.strip()[-300:]}")
    return path


def driver_stub(symbols: list[str], folder: Path) -> Path:
    """A libcuda.so.1 defining the driver entry points: what the loader binds to where no driver is
    installed."""
    return stub_library(symbols, folder / "libcuda.so.1", "libcuda.so.1")


# Binds a module with RTLD_NOW in a fresh process, after the libraries that stand in for the server's
# (tvm_ffi's runtime, libcudart, the driver stub) and a stub of the explained symbols.
_BIND_NOW = """
import ctypes, importlib, os, sys
importlib.import_module("tvm_ffi")
for lib in sys.argv[2:]:
    ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
"""


def _cudart() -> Path:
    """The venv's libcudart.so.13 (loaded globally, as torch has it loaded in the server)."""
    nvidia = Path(importlib.import_module("nvidia").__path__[0])
    found = sorted(nvidia.glob("cu*/lib/libcudart.so.*"))
    if not found:
        raise SparkserveError(f"no libcudart.so in {nvidia}")
    return found[0]


def check(list_path: Path, build_info: Path, unbound_path: Path) -> tuple[list[Loaded], list[str]]:
    """(per-module results, problems that concern the cache as a whole)."""
    try:
        info = json.loads(build_info.read_text())
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"{build_info}: not a `jit prewarm` build info ({exc})") from exc
    names = info.get("modules")
    chosen, _ = mlist.select(mlist.load(list_path), str(info["jit_set"]),
                             [str(n) for n in names] if isinstance(names, list) else None)
    built = {str(b["name"]): b for b in info["built"]}
    general = [f"{m.name}: listed for set {info['jit_set']} but not built"
               for m in chosen if m.name not in built]
    general += [f"{n}: built but not in {list_path} for set {info['jit_set']}"
                for n in sorted(set(built) - {m.name for m in chosen})]
    here = cross.host_arch()
    wanted = str(info.get("cpu_arch", here))
    if wanted != here:
        general.append(f"the build info says the modules are for {wanted}, this machine is {here}")
    rules = load_unbound(unbound_path)
    # tvm_ffi's runtime library, loaded globally by its import, resolves the modules' FFI calls.
    importlib.import_module("tvm_ffi")
    cudart = _cudart()
    ctypes.CDLL(str(cudart), mode=os.RTLD_GLOBAL)
    results: list[Loaded] = []
    libraries = [Path(str(b["library"])) for b in built.values()]
    with tempfile.TemporaryDirectory(prefix="sparkserve-load-check-") as tmp:
        present = [lib for lib in libraries if lib.is_file()]
        stub = driver_stub(driver_symbols(present), Path(tmp))
        ctypes.CDLL(str(stub), mode=os.RTLD_GLOBAL)
        for m in chosen:
            if m.name in built:
                results.append(_check_one(m, Path(str(built[m.name]["library"])), here, rules,
                                          [cudart, stub], Path(tmp)))
    general += stale_rules(rules, results, {m.kind for m in chosen if m.name in built}, unbound_path)
    return results, general


def stale_rules(rules: list[Unbound], results: list[Loaded], kinds_built: set[str],
                source: Path) -> list[str]:
    """A rule for a kind that was built but explained no symbol of it: it would hide a future one."""
    used = {name for r in results for name in r.explained}
    return [f"unbound rule {r.name!r} of {source} explains no symbol of a built {'/'.join(r.kinds)} "
            "module: it is stale (remove it, or it hides a future missing symbol)"
            for r in rules if r.name not in used and set(r.kinds) & kinds_built]


def _bind_now(library: Path, kind: str, rules: list[Unbound], preload: list[Path], tmp: Path,
              out: Loaded) -> bool:
    """dlopen(RTLD_NOW): in this process when every symbol binds; else in a fresh one, with the symbols
    docker/jit-unbound.toml explains bound to a stub (so that they cannot hide another module's)."""
    try:
        ctypes.CDLL(str(library), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        return True
    except OSError as exc:
        first_error = str(exc)
    rules_hit = explained(kind, undefined_symbols(library), rules)
    if not rules_hit:
        out.problems.append(f"dlopen(RTLD_NOW) fails: {first_error}")
        return False
    symbols = [s for names in rules_hit.values() for s in names]
    stub = stub_library(symbols, tmp / f"unbound-{library.stem[:40]}.so", "libsparkserve-unbound.so")
    proc = subprocess.run([sys.executable, "-c", _BIND_NOW, str(library), *map(str, preload), str(stub)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        out.problems.append("dlopen(RTLD_NOW) fails beyond the explained symbols: "
                            f"{proc.stderr.strip()[-400:]}")
        return False
    out.explained = {name: len(names) for name, names in rules_hit.items()}
    return True


def _check_one(module: mlist.Module, library: Path, here: str, rules: list[Unbound], preload: list[Path],
               tmp: Path) -> Loaded:
    out = Loaded(module.name, str(library))
    if not library.is_file():
        out.problems.append(f"{library} is missing")
        return out
    out.arch = cross.elf_arch(library)
    if out.arch != here:
        out.problems.append(f"{library} is an {out.arch} library on an {here} machine: refused, not loaded")
        return out
    spec = jit_spec(module)
    artifacts = spec.aot_artifacts
    if not artifacts:
        out.problems.append(f"FlashInfer finds no AOT artifact for {spec.name}: serving would compile it "
                            "(is `jit aot-link` missing from the image?)")
        return out
    if Path(artifacts[0].path).resolve() != library.resolve():
        out.problems.append(f"FlashInfer's AOT artifact {artifacts[0].path} is not the prewarmed {library}")
        return out
    if not _bind_now(library, module.kind, rules, preload, tmp, out):
        return out
    try:
        spec.load(Path(artifacts[0].path))
        raw = importlib.import_module("tvm_ffi").load_module(str(artifacts[0].path))
    except Exception as exc:  # tvm_ffi raises its own error types
        out.problems.append(f"FlashInfer's loader fails: {exc}")
        return out
    exported = exported_functions(library)
    missing = [n for n in exported if not raw.implements_function(n)]
    out.functions = len(exported) - len(missing)
    if not exported:
        out.problems.append("the library exports no tvm_ffi function")
    if missing:
        out.problems.append(f"the loaded module lacks exported functions {missing}")
    return out


_EXPORT_PREFIX = "__tvm_ffi_"


def exported_functions(library: Path) -> list[str]:
    """The functions a module exports to tvm_ffi (dynamic symbols `__tvm_ffi_<name>`)."""
    proc = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SparkserveError(f"nm -D {library} failed: {proc.stderr.strip()[-300:]}")
    names = [line.split()[-1] for line in proc.stdout.splitlines() if len(line.split()) >= 3]
    return sorted(n[len(_EXPORT_PREFIX):] for n in names
                  if n.startswith(_EXPORT_PREFIX) and not n.startswith(_EXPORT_PREFIX + "_"))
