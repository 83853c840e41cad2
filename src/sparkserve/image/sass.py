"""SASS check of prewarmed FlashInfer JIT modules (`sparkserve jit sass-check`).

Runs on the host against a copy of the image's JIT cache (no GPU, no flashinfer): for every module of
the build info that an expectation of docker/jit-sass.toml selects, `cuobjdump --list-elf`
must show an ELF for each expected arch, and the SASS of that arch (`cuobjdump --dump-sass`, split by
the `arch = ...` header of each embedded ELF) must contain / must not contain the listed opcodes.

An opcode pattern matches an instruction when it equals the instruction's opcode or is a prefix of it
at a '.' boundary: `HMMA` matches `HMMA.16816.F32.BF16`, `HMMA.16816.F32.BF16` matches only that form.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from sparkserve import config
from sparkserve.errors import SparkserveError

# cuobjdump prints each ELF's arch as `arch = sm_121a` (or sm_120f, sm_90a, sm_89...).
_ARCH_LINE = re.compile(r"^\s*arch\s*=\s*(sm_\d+[af]?)\s*$")
_ELF_LINE = re.compile(r"^ELF file\s+\d+:\s*(\S+)")
_ELF_ARCH = re.compile(r"\.(sm_\d+[af]?)\.cubin$")
# `        /*01a0*/   @!P0 HMMA.16816.F32.BF16 R4, R8, R12, R4 ;   /* 0x... */`
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_CODE_FOR = re.compile(r"^\s*code for\s+(sm_\d+[af]?)\s*$")
_HEADERFLAGS = re.compile(r'^\s*\.headerflags\s+@"([^"]*)"')

# Families always shown in the report (besides those named by an expectation).
REPORT_FAMILIES = ("HMMA", "IMMA", "QMMA", "OMMA", "UTCHMMA", "HGMMA", "FFMA", "HFMA2", "LDSM",
                   "LDGSTS", "F2FP", "MEMBAR")


@dataclass(frozen=True)
class SassRule:
    name: str
    modules: tuple[str, ...]  # fnmatch patterns over the module names of docker/jit-modules.toml
    archs: tuple[str, ...]  # as cuobjdump names them
    must_contain: tuple[str, ...]
    must_not_contain: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class ArchSass:
    arch: str  # the fatbin's `arch =` (sm_120f for a 12.0f build, sm_121a)
    code_for: str  # its `code for` line, which --list-elf uses in the ELF names (sm_120, sm_121a)
    elfs: int  # embedded ELFs of this arch (one per compilation unit, plus any device-link output)
    functions: int
    headerflags: frozenset[str]  # ELF header flags as cuobjdump prints them (EF_CUDA_SM121 ...)
    opcodes: Counter[str]  # full opcode (HMMA.16816.F32.BF16) -> count

    def count(self, pattern: str) -> int:
        return sum(n for op, n in self.opcodes.items() if opcode_matches(op, pattern))

    def families(self) -> Counter[str]:
        fam: Counter[str] = Counter()
        for op, n in self.opcodes.items():
            fam[op.split(".", 1)[0]] += n
        return fam


def opcode_matches(opcode: str, pattern: str) -> bool:
    return opcode == pattern or opcode.startswith(pattern + ".")


# An [[expect]] table, as docker/jit-sass.toml and docker/jit-unit-checks.toml write it (sparkserve.config).
@dataclass(frozen=True)
class Expect:
    name: str
    modules: tuple[str, ...]
    archs: tuple[str, ...]
    why: str
    must_contain: tuple[str, ...] = ()
    must_not_contain: tuple[str, ...] = ()


@dataclass(frozen=True)
class _SassFile:
    schema: Literal[1]
    expect: tuple[Expect, ...] = ()


def rules(entries: tuple[Expect, ...], source: str) -> list[SassRule]:
    """The [[expect]] tables of a file as rules, or the first thing wrong with them beyond their types."""
    if not entries:
        raise SparkserveError(f"{source}: no [[expect]] entries")
    out: list[SassRule] = []
    names: set[str] = set()
    for i, e in enumerate(entries):
        if not e.name or e.name in names:
            raise SparkserveError(f"{source}: expect #{i + 1}: needs a unique name")
        names.add(e.name)
        where = f"{source}: expect {e.name!r}"
        if not e.why.strip():
            raise SparkserveError(f"{where}: needs a why (what the kernel is designed to do)")
        for key in ("must_contain", "must_not_contain"):
            if not all(getattr(e, key)):  # an empty opcode would match every instruction
                raise SparkserveError(f"{where}: {key} must be a list of opcodes")
        if not e.must_contain and not e.must_not_contain:
            raise SparkserveError(f"{where}: needs must_contain and/or must_not_contain")
        both = sorted(set(e.must_contain) & set(e.must_not_contain))
        if both:
            raise SparkserveError(f"{where}: {both} both required and forbidden")
        if not e.archs:
            raise SparkserveError(f"{where}: archs must be a non-empty list")
        bad = [a for a in e.archs if not re.fullmatch(r"sm_\d+[af]?", a)]
        if bad:
            raise SparkserveError(f"{where}: archs {bad} are not cuobjdump arch names (e.g. sm_121a)")
        if not e.modules or not all(e.modules):
            raise SparkserveError(f"{where}: modules must be a non-empty list")
        out.append(SassRule(name=e.name, modules=e.modules, archs=e.archs, must_contain=e.must_contain,
                            must_not_contain=e.must_not_contain, why=e.why.strip()))
    return out


def parse_sass_rules(text: str, source: str = "SASS expectations") -> list[SassRule]:
    return rules(config.parse_toml(_SassFile, text, source).expect, source)


def load_sass_rules(path: Path) -> list[SassRule]:
    try:
        return parse_sass_rules(path.read_text(), str(path))
    except OSError as exc:
        raise SparkserveError(f"cannot read {path}: {exc}") from exc


def run_cuobjdump(cuobjdump: str, *args: str, cwd: Path | None = None) -> str:
    # --dump-sass runs nvdisasm, which it looks up on PATH: the PyPI wheels put both in nvidia/cu13/bin.
    # A path is made absolute: `cwd` may move the command elsewhere.
    exe = str(Path(cuobjdump).resolve()) if os.sep in cuobjdump else cuobjdump
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in (str(Path(exe).parent), env.get("PATH", "")) if p)
    proc = subprocess.run([exe, *args], capture_output=True, text=True, check=False, env=env, cwd=cwd)
    if proc.returncode != 0:
        raise SparkserveError(f"{cuobjdump} {' '.join(args)} failed ({proc.returncode}): "
                              f"{proc.stderr.strip()[-400:]}")
    return proc.stdout


def parse_list_elf(text: str) -> list[str]:
    """ELF names of `cuobjdump --list-elf` (e.g. batch_decode.1.sm_121a.cubin; a 12.0f build's ELFs are
    named ...sm_120.cubin: the family suffix shows only in the SASS dump's `arch = sm_120f`)."""
    return [m.group(1) for line in text.splitlines() if (m := _ELF_LINE.match(line))]


def elf_arch(elf_name: str) -> str:
    m = _ELF_ARCH.search(elf_name)
    if m is None:
        raise SparkserveError(f"cannot tell the arch of ELF {elf_name!r}")
    return m.group(1)


def parse_sass(text: str) -> dict[str, ArchSass]:
    """`cuobjdump --dump-sass` output -> per fatbin arch: ELFs, functions, header flags and opcode counts,
    summed over every ELF of that arch (a module links one fatbin per compilation unit)."""
    counts: dict[str, Counter[str]] = {}
    funcs: Counter[str] = Counter()
    elfs: Counter[str] = Counter()
    code_for: dict[str, str] = {}
    flags: dict[str, set[str]] = {}
    arch: str | None = None
    for line in text.splitlines():
        m = _ARCH_LINE.match(line)
        if m:
            arch = m.group(1)
            counts.setdefault(arch, Counter())
            flags.setdefault(arch, set())
            elfs[arch] += 1
            continue
        if arch is None:
            continue
        if (mc := _CODE_FOR.match(line)) is not None:
            if code_for.setdefault(arch, mc.group(1)) != mc.group(1):
                raise SparkserveError(f"fatbin arch {arch}: code for both {code_for[arch]} and {mc.group(1)}")
        elif _FUNC.match(line):
            funcs[arch] += 1
        elif (mh := _HEADERFLAGS.match(line)) is not None:
            flags[arch].add(mh.group(1))
        elif (mi := _INSN.search(line)) is not None:
            counts[arch][mi.group(1)] += 1
    return {a: ArchSass(arch=a, code_for=code_for.get(a, a), elfs=elfs[a], functions=funcs[a],
                        headerflags=frozenset(flags[a]), opcodes=counts[a]) for a in counts}


def parse_sass_functions(text: str) -> dict[str, dict[str, Counter[str]]]:
    """`cuobjdump --dump-sass` output -> fatbin arch -> function name -> opcode counts. A function
    that several ELFs of one arch define (the same kernel in two objects) has its counts summed."""
    out: dict[str, dict[str, Counter[str]]] = {}
    arch: str | None = None
    func: Counter[str] | None = None
    for line in text.splitlines():
        if (m := _ARCH_LINE.match(line)) is not None:
            arch, func = m.group(1), None
            out.setdefault(arch, {})
        elif arch is None:
            continue
        elif (mf := _FUNC.match(line)) is not None:
            func = out[arch].setdefault(mf.group(1), Counter())
        elif func is not None and (mi := _INSN.search(line)) is not None:
            func[mi.group(1)] += 1
    return out


@dataclass
class ModuleReport:
    module: str
    library: str
    elfs: list[str]
    sass: dict[str, ArchSass]
    expectations: list[str]


def _map_library(recorded: str, base: str, cache: Path) -> Path:
    rec = PurePosixPath(recorded)
    try:
        rel = rec.relative_to(base)
    except ValueError as exc:
        raise SparkserveError(f"{recorded} is not under the image's JIT base {base}") from exc
    return cache / rel


def check(cache: Path, expectations_path: Path, cuobjdump: str, base: str = "/opt/jit-cache",
          build_info_name: str = "sparkserve-build-info.json") -> tuple[list[str], list[ModuleReport]]:
    """(problems, per-module reports). `cache` is a copy of the image's FLASHINFER_WORKSPACE_BASE
    (`base` inside the image), holding the build info `jit prewarm` wrote."""
    info_path = cache / build_info_name
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"cannot read the build info {info_path}: {exc}") from exc
    built: dict[str, str] = {b["name"]: b["library"] for b in info["built"]}
    expectations = load_sass_rules(expectations_path)
    problems: list[str] = []
    selected: dict[str, list[SassRule]] = {}
    for exp in expectations:
        hits = [n for n in built if any(fnmatch.fnmatchcase(n, p) for p in exp.modules)]
        if not hits:
            problems.append(f"expectation {exp.name!r}: no built module matches {list(exp.modules)}")
        for n in hits:
            selected.setdefault(n, []).append(exp)
    reports: list[ModuleReport] = []
    libraries: dict[str, Path] = {}
    for name in selected:
        so = _map_library(built[name], base, cache)
        if so.is_file():
            libraries[name] = so
        else:
            problems.append(f"{name}: {so} is missing")

    def dump(so: Path) -> tuple[str, str]:
        return (run_cuobjdump(cuobjdump, "--list-elf", str(so)),
                run_cuobjdump(cuobjdump, "--dump-sass", str(so)))

    # nvdisasm dominates (~17 s for a prefill module): one process per core.
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        dumps = dict(zip(libraries, pool.map(dump, libraries.values()), strict=True))
    for name, exps in selected.items():
        if name not in dumps:
            continue
        elfs = parse_list_elf(dumps[name][0])
        sass = parse_sass(dumps[name][1])
        reports.append(ModuleReport(module=name, library=built[name], elfs=elfs, sass=sass,
                                    expectations=[e.name for e in exps]))
        listed = Counter(elf_arch(e) for e in elfs)
        dumped = Counter({s.code_for: s.elfs for s in sass.values()})
        if listed != dumped:
            problems.append(f"{name}: ELFs per arch: --list-elf {dict(listed)}, --dump-sass {dict(dumped)}")
        for exp in exps:
            for arch in exp.archs:
                if arch not in sass:
                    problems.append(f"{name} [{exp.name}]: no {arch} ELF (fatbin archs {sorted(sass)}, "
                                    f"--list-elf {sorted(listed)})")
                    continue
                code = sass[arch]
                for pat in exp.must_contain:
                    if code.count(pat) == 0:
                        problems.append(f"{name} {arch} [{exp.name}]: no {pat} instruction ({exp.why})")
                for pat in exp.must_not_contain:
                    if (found := code.count(pat)) > 0:
                        problems.append(f"{name} {arch} [{exp.name}]: {found} {pat} instruction(s), "
                                        f"expected none ({exp.why})")
    return problems, reports


def describe(r: ModuleReport) -> str:
    """One line: the ELFs --list-elf names per arch, and per fatbin arch its ELF code name and flags."""
    listed = Counter(elf_arch(e) for e in r.elfs)
    archs = "; ".join(f"fatbin arch {a}: code for {s.code_for}, flags {' | '.join(sorted(s.headerflags))}"
                      for a, s in sorted(r.sass.items(), reverse=True))
    return f"--list-elf {', '.join(f'{n} x *.{a}.cubin' for a, n in sorted(listed.items()))}; {archs}"


def families_shown(reports: list[ModuleReport], expectations: list[SassRule]) -> list[str]:
    named = {p.split(".", 1)[0] for e in expectations for p in (*e.must_contain, *e.must_not_contain)}
    return [f for f in REPORT_FAMILIES if f in named or any(
        r.sass[a].families()[f] for r in reports for a in r.sass)] + sorted(named - set(REPORT_FAMILIES))


def table(reports: list[ModuleReport], families: list[str]) -> str:
    """Markdown table: module, arch, ELF count, functions, instructions, then a count per family."""
    head = ["module", "arch", "ELFs", "functions", "instructions", *families]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(reports, key=lambda r: r.module):
        for arch in sorted(r.sass, reverse=True):
            code = r.sass[arch]
            fam = code.families()
            row = [r.module, arch, str(code.elfs), str(code.functions), str(sum(code.opcodes.values())),
                   *(str(fam[f]) for f in families)]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def report_json(reports: list[ModuleReport], problems: list[str]) -> str:
    return json.dumps({
        "problems": problems,
        "modules": [{
            "module": r.module, "library": r.library, "elfs": r.elfs, "expectations": r.expectations,
            "sass": {a: {"code_for": s.code_for, "elfs": s.elfs, "headerflags": sorted(s.headerflags),
                         "functions": s.functions, "instructions": sum(s.opcodes.values()),
                         "families": dict(sorted(s.families().items())),
                         "opcodes": dict(sorted(s.opcodes.items()))} for a, s in sorted(r.sass.items())},
        } for r in reports],
    }, indent=1) + "\n"
