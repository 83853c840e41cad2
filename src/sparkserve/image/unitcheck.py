"""Compile chosen compilation units of a FlashInfer JIT module and check their SASS (`sparkserve jit
unit-check`).

For a module too big to prewarm in CI (the SM120 CUTLASS fused MoE: about a hundred units of 1-10
minutes each on 2 cores), CI compiles a few units of it, one at a time, with the exact nvcc command
line of the module's ninja build file (FlashInfer's generator writes the sources and the build file;
`ninja -t commands` prints the command), measures the wall time and peak memory of each compile, and
checks the object's SASS per fatbin arch:

- the [[expect]] opcode rules of the checks file (same schema as docker/jit-sass.toml, its
  `modules` patterns match unit names);
- no trap-only kernel: a kernel whose body traps and has no tensor-core MMA is what CUTLASS leaves
  when an arch guard compiles the kernel out (`CUTE_INVALID_CONTROL_PATH`), and it fails only at run
  time on the GPU.

The pure-Python parts (checks file, build-file lookup, SASS verdicts, report) run anywhere; building
the module's ninja file needs flashinfer and torch (the image, or a venv with the patched wheel).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sparkserve import config
from sparkserve.errors import SparkserveError
from sparkserve.image import cross, sass
from sparkserve.image.modules import KINDS, Module

DEFAULT_CHECKS = Path("docker") / "jit-unit-checks.toml"
# A compile that runs longer than this is stopped and reported (a unit is minutes, not an hour).
DEFAULT_TIMEOUT_S = 1200
TRAP_OPCODES = ("BPT.TRAP",)
MMA_FAMILIES = ("HMMA", "IMMA", "QMMA", "OMMA", "HGMMA", "UTCHMMA", "UTCQMMA", "UTCOMMA")
# `build /abs/out.cuda.o: cuda_compile /abs/src.generated.cu` (FlashInfer writes one line per object)
_BUILD = re.compile(r"^build\s+(\S+?):\s+cuda_compile\s+(\S+)")


@dataclass(frozen=True)
class Unit:
    name: str
    kind: str  # the module kind (docker/jit-modules.toml) whose build file holds the unit
    source: str  # file name of the unit's source, as the module's generator writes it
    why: str


@dataclass(frozen=True)
class Checks:
    units: list[Unit]
    expectations: list[sass.SassRule]

    def expectations_for(self, unit: str) -> list[sass.SassRule]:
        return [e for e in self.expectations if any(fnmatch.fnmatchcase(unit, p) for p in e.modules)]


@dataclass
class Measured:
    returncode: int
    seconds: float
    max_rss_kib: int  # the largest process of the compile (nvcc, cudafe++, cicc, ptxas), as time -v
    output_tail: str
    cpu_seconds: float = 0.0  # user + system of the whole process tree: less sensitive to a busy machine


@dataclass
class UnitResult:
    unit: Unit
    obj: str
    command: str
    measured: Measured | None = None
    functions: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)  # arch -> func -> ops
    problems: list[str] = field(default_factory=list)


# The checks file's schema (sparkserve.config): its units, and [[expect]] rules as docker/jit-sass.toml's.
@dataclass(frozen=True)
class _UnitEntry:
    name: str
    kind: str
    source: str
    why: str


@dataclass(frozen=True)
class _ChecksFile:
    schema: Literal[1]
    unit: tuple[_UnitEntry, ...] = ()
    expect: tuple[sass.Expect, ...] = ()


def parse_checks(text: str, source: str = "unit checks") -> Checks:
    data = config.parse_toml(_ChecksFile, text, source)
    if not data.unit:
        raise SparkserveError(f"{source}: no [[unit]] entries")
    units: list[Unit] = []
    seen: set[str] = set()
    for i, u in enumerate(data.unit):
        if not u.name or u.name in seen:
            raise SparkserveError(f"{source}: unit #{i + 1}: needs a unique name")
        seen.add(u.name)
        where = f"{source}: unit {u.name!r}"
        if u.kind not in KINDS:
            raise SparkserveError(f"{where}: unknown kind {u.kind!r} (known: {', '.join(KINDS)})")
        if not u.source.endswith(".cu") or "/" in u.source:
            raise SparkserveError(f"{where}: source must be the file name of a .cu unit, got {u.source!r}")
        if not u.why.strip():
            raise SparkserveError(f"{where}: needs a why (what this unit proves)")
        units.append(Unit(name=u.name, kind=u.kind, source=u.source, why=u.why.strip()))
    checks = Checks(units=units, expectations=sass.rules(data.expect, source))
    for exp in checks.expectations:
        if not any(fnmatch.fnmatchcase(u.name, p) for u in units for p in exp.modules):
            raise SparkserveError(f"{source}: expect {exp.name!r} matches no unit ({list(exp.modules)})")
    for unit in units:
        if not checks.expectations_for(unit.name):
            raise SparkserveError(f"{source}: unit {unit.name!r} has no [[expect]] rule")
    return checks


def load_checks(path: Path) -> Checks:
    try:
        return parse_checks(path.read_text(), str(path))
    except OSError as exc:
        raise SparkserveError(f"cannot read {path}: {exc}") from exc


def find_objects(ninja_text: str, sources: list[str]) -> dict[str, str]:
    """source file name -> the object its `cuda_compile` build statement writes."""
    hits: dict[str, list[str]] = {s: [] for s in sources}
    for line in ninja_text.splitlines():
        m = _BUILD.match(line)
        if m is not None and (name := Path(m.group(2)).name) in hits:
            hits[name].append(m.group(1))
    missing = [s for s, objs in hits.items() if not objs]
    if missing:
        raise SparkserveError(f"the build file has no cuda_compile statement for {missing}")
    twice = [s for s, objs in hits.items() if len(objs) > 1]
    if twice:
        raise SparkserveError(f"more than one cuda_compile statement for {twice}")
    return {s: objs[0] for s, objs in hits.items()}


def compile_command(ninja_commands_output: str, obj: str) -> str:
    """The command that writes `obj`, from `ninja -t commands -s OBJ` (its last line)."""
    lines = [ln for ln in ninja_commands_output.splitlines() if ln.strip()]
    if not lines:
        raise SparkserveError(f"ninja printed no command for {obj}")
    cmd = lines[-1]
    if "nvcc" not in cmd or f"-o {obj}" not in cmd:
        raise SparkserveError(f"the command ninja printed for {obj} is not its nvcc compile: {cmd[:200]}")
    return cmd


def run_measured(command: str, timeout_s: float, cwd: Path | None = None) -> Measured:
    """Run a shell command as ninja would (/bin/sh -c); wall time and the peak RSS of the largest
    process of its tree (wait4's ru_maxrss covers the waited-for descendants, like /usr/bin/time)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    tail: list[str] = []
    deadline = t0 + timeout_s
    os.set_blocking(proc.stdout.fileno(), False)
    status, rusage = 0, None
    while True:
        chunk = proc.stdout.read()
        if chunk:
            tail = (tail + chunk.decode(errors="replace").splitlines())[-40:]
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, 9)
            pid, status, rusage = os.wait4(proc.pid, 0)
            tail.append(f"[stopped after {timeout_s:.0f} s]")
            break
        time.sleep(0.2)
    rest = proc.stdout.read()
    if rest:
        tail = (tail + rest.decode(errors="replace").splitlines())[-40:]
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(returncode=proc.returncode, seconds=time.monotonic() - t0,
                    max_rss_kib=int(rusage.ru_maxrss) if rusage is not None else 0,
                    output_tail="\n".join(tail),
                    cpu_seconds=rusage.ru_utime + rusage.ru_stime if rusage is not None else 0.0)


def mma_count(ops: Counter[str]) -> int:
    return sum(n for op, n in ops.items() if op.split(".", 1)[0] in MMA_FAMILIES)


def trap_only(ops: Counter[str]) -> bool:
    """A kernel body that traps and computes nothing on the tensor cores."""
    traps = sum(n for op, n in ops.items() if any(sass.opcode_matches(op, t) for t in TRAP_OPCODES))
    return traps > 0 and mma_count(ops) == 0


def judge(unit: Unit, functions: dict[str, dict[str, Counter[str]]],
          expectations: list[sass.SassRule]) -> list[str]:
    """Problems of one unit's SASS (fatbin arch -> function -> opcodes) against its rules."""
    problems: list[str] = []
    archs = sorted({a for e in expectations for a in e.archs})
    for arch in archs:
        funcs = functions.get(arch)
        if not funcs:
            problems.append(f"{unit.name}: no {arch} code (fatbin archs {sorted(functions)})")
            continue
        for name, ops in sorted(funcs.items()):
            if trap_only(ops):
                problems.append(f"{unit.name} {arch}: {name} is trap-only "
                                f"({sum(ops.values())} instructions, no tensor-core MMA)")
        total: Counter[str] = Counter()
        for ops in funcs.values():
            total.update(ops)
        for exp in expectations:
            if arch not in exp.archs:
                continue
            for pat in exp.must_contain:
                if not any(sass.opcode_matches(op, pat) for op in total):
                    problems.append(f"{unit.name} {arch} [{exp.name}]: no {pat} instruction ({exp.why})")
            for pat in exp.must_not_contain:
                found = sum(n for op, n in total.items() if sass.opcode_matches(op, pat))
                if found:
                    problems.append(f"{unit.name} {arch} [{exp.name}]: {found} {pat} instruction(s), "
                                    f"expected none ({exp.why})")
    return problems


def table(results: list[UnitResult]) -> str:
    """Markdown: per unit and fatbin arch, compile time and peak RSS, kernels, MMA and traps."""
    head = ["unit", "compile s", "CPU s", "peak RSS MiB", "arch", "functions", "instructions",
            "tensor-core MMA", "block-scaled MMA (QMMA.SF)", "trap-only functions"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        m = r.measured
        secs = f"{m.seconds:.0f}" if m else "-"
        cpu = f"{m.cpu_seconds:.0f}" if m else "-"
        rss = f"{m.max_rss_kib / 1024:.0f}" if m else "-"
        if not r.functions:
            lines.append(f"| {r.unit.name} | {secs} | {cpu} | {rss} | - | - | - | - | - | - |")
        for arch, funcs in sorted(r.functions.items(), reverse=True):
            total: Counter[str] = Counter()
            for ops in funcs.values():
                total.update(ops)
            qmma_sf = sum(n for op, n in total.items() if sass.opcode_matches(op, "QMMA.SF"))
            lines.append(f"| {r.unit.name} | {secs} | {cpu} | {rss} | {arch} | {len(funcs)} "
                         f"| {sum(total.values())} | {mma_count(total)} | {qmma_sf} "
                         f"| {sum(trap_only(o) for o in funcs.values())} |")
    return "\n".join(lines)


def report_json(results: list[UnitResult]) -> str:
    return json.dumps({"units": [{
        "unit": r.unit.name, "source": r.unit.source, "object": r.obj, "command": r.command,
        "seconds": round(r.measured.seconds, 1) if r.measured else None,
        "cpu_seconds": round(r.measured.cpu_seconds, 1) if r.measured else None,
        "max_rss_kib": r.measured.max_rss_kib if r.measured else None,
        "problems": r.problems,
        "sass": {arch: {name: dict(sorted(ops.items())) for name, ops in sorted(funcs.items())}
                 for arch, funcs in sorted(r.functions.items())},
    } for r in results]}, indent=1) + "\n"


# ------------------------------------------------------------------ the parts that need the toolchain

def ninja_exe() -> str:
    found = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    if not Path(found).is_file():
        raise SparkserveError("no ninja: FlashInfer JIT needs it (the `ninja` wheel of the lock)")
    return found


def write_build_file(kind: str) -> Path:
    """Generate the module's sources and ninja file as FlashInfer's JIT would (no compile)."""
    from sparkserve.image.prewarm import check_environment
    from sparkserve.image.specs import jit_spec

    check_environment()
    spec = jit_spec(Module(name=kind, kind=kind, ci=True))
    spec.write_ninja()
    return Path(spec.ninja_path)


def run(checks_path: Path, cuobjdump: str, only: list[str] | None = None,
        build_file: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
        say: Callable[[str], None] = print, jobs: int = 1, target_arch: str | None = None,
        cross_link_dir: Path | None = None) -> list[UnitResult]:
    """Compile the chosen units (`jobs` at a time: each nvcc is one process) and judge each object's SASS.
    target_arch: the CPU arch of the objects' host code (default: this machine's; another arch's is
    compiled by its cross compiler, as `jit prewarm --target-arch` does)."""
    tools = cross.toolchain(target_arch or cross.host_arch(), cross_link_dir)
    os.environ.update(tools.environment())
    if tools.cross:
        say(f"host code for {tools.target} by {tools.compiler} (cross, on {tools.host})")
    checks = load_checks(checks_path)
    units = [u for u in checks.units if not only or u.name in only]
    unknown = sorted(set(only or []) - {u.name for u in checks.units})
    if unknown or not units:
        raise SparkserveError(f"no such unit(s) {unknown} in {checks_path}" if unknown
                              else f"{checks_path}: no unit selected")
    files: dict[str, Path] = {}
    results: list[UnitResult] = []
    for unit in units:
        if unit.kind not in files:
            files[unit.kind] = build_file or write_build_file(unit.kind)
        bf = files[unit.kind]
        obj = find_objects(bf.read_text(), [unit.source])[unit.source]
        listing = subprocess.run([ninja_exe(), "-f", str(bf), "-t", "commands", "-s", obj],
                                 capture_output=True, text=True, check=False)
        if listing.returncode != 0:
            raise SparkserveError(f"ninja -t commands {obj} failed: {listing.stderr.strip()[-400:]}")
        results.append(UnitResult(unit=unit, obj=obj, command=compile_command(listing.stdout, obj)))
        Path(obj).parent.mkdir(parents=True, exist_ok=True)

    def compile_and_judge(result: UnitResult) -> None:
        unit = result.unit
        say(f"unit {unit.name}: compiling {unit.source}")
        result.measured = m = run_measured(result.command, timeout_s)
        say(f"unit {unit.name}: exit {m.returncode} in {m.seconds:.0f} s ({m.cpu_seconds:.0f} s CPU), "
            f"peak RSS {m.max_rss_kib / 1024:.0f} MiB")
        if m.returncode != 0:
            result.problems.append(f"{unit.name}: compile failed (exit {m.returncode}):\n{m.output_tail}")
            return
        if (arch := cross.elf_arch(Path(result.obj))) != tools.target:
            result.problems.append(f"{unit.name}: the object is {arch} code, not {tools.target}")
        dump = sass.run_cuobjdump(cuobjdump, "--dump-sass", result.obj)
        result.functions = sass.parse_sass_functions(dump)
        result.problems += judge(unit, result.functions, checks.expectations_for(unit.name))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(compile_and_judge, results))
    return results
