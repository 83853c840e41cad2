"""Compare the device code of two builds of the same JIT modules (`sparkserve jit cubin-compare`).

The arm64 image compiles its modules' device code on an amd64 machine with the amd64 nvcc, exactly as the
amd64 image does; only the host code differs. This check holds the claim to the bytes: for every module
both caches built, every embedded CUDA ELF (one per compilation unit and arch, extracted with
`cuobjdump --extract-elf all`) is compared with its counterpart:

  identical    the same bytes;
  module-id    the same SASS in every function and the same ELF once the names nvcc gives internal-linkage
               device symbols are masked: such a name is `_INTERNAL_<hash>_<n>_<file>_<hash>_<n>`, unique
               per compilation (one hash is taken from the host-preprocessed translation unit, which
               includes the host's own system headers, the last number is the compiling process's id), so
               it differs between any two compilations, also two on one machine. Where the two names
               differ in length (a process id of another digit count) every later string offset moves,
               so the ELFs are then compared section by section: string tables as their strings, symbol
               tables as their symbols by name, every other section byte for byte;
  different    anything else: the per-function SASS that differs is listed, and the check fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from sparkserve.errors import SparkserveError
from sparkserve.image.sass import run_cuobjdump

# A mangled name part is <length><identifier>; nvcc's per-compilation identifiers start with _INTERNAL_.
_INTERNAL = re.compile(rb"(\d+)(_INTERNAL_[0-9a-f]{8}_)")
_ELF_NAME = re.compile(r"\.(\d+)\.(sm_\d+[af]?)\.cubin$")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")


VERDICTS = ("identical", "module-id", "different", "missing")


def mask_module_id(data: bytes) -> bytes:
    """Every `<length>_INTERNAL_...` identifier replaced by one of the same length: the length prefix says
    where the identifier ends (its last number runs into the rest of the mangled name)."""
    out, pos = bytearray(), 0
    for m in _INTERNAL.finditer(data):
        if m.start() < pos:
            continue
        length = int(m.group(1))
        end = m.start(2) + length
        if length < len(m.group(2)) or end > len(data):
            continue
        out += data[pos:m.start(2)] + b"_INTERNAL_" + b"x" * (length - len(b"_INTERNAL_"))
        pos = end
    return bytes(out + data[pos:])


_SHT_SYMTAB, _SHT_STRTAB, _SHT_NOBITS = 2, 3, 8
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size


def _canonical(data: bytes) -> bytes:
    """Like mask_module_id, but each identifier becomes one fixed token, whatever its length."""
    return re.sub(rb"_INTERNAL_x+", b"_INTERNAL_", re.sub(rb"\d+(_INTERNAL_x+)", rb"\1",
                                                          mask_module_id(data)))


def elf_sections(data: bytes) -> list[tuple[object, ...]] | None:
    """An ELF64 (little-endian) as comparable sections, with the names nvcc makes per compilation masked
    and string offsets resolved; None when the bytes are not such an ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1 or len(data) < 64:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(data) or shstrndx >= shnum:
        return None
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]

    def content(i: int) -> bytes:
        _, kind, _, _, offset, size, *_ = heads[i]
        return b"" if kind == _SHT_NOBITS else data[offset:offset + size]

    def string(table: int, offset: int) -> bytes:
        raw = content(table)
        return raw[offset:raw.find(b"\0", offset)] if 0 <= offset < len(raw) else b"?"

    out: list[tuple[object, ...]] = []
    for i, (name, kind, flags, _, _, size, link, info, align, entsize) in enumerate(heads):
        body: object
        if kind == _SHT_STRTAB:
            body = tuple(_canonical(s) for s in content(i).split(b"\0"))
        elif kind == _SHT_SYMTAB or (entsize == _SYM.size and string(shstrndx, name).endswith(b"symtab")):
            raw = content(i)
            body = tuple((_canonical(string(link, n)), *rest) for n, *rest in
                         (_SYM.unpack_from(raw, k) for k in range(0, len(raw) - _SYM.size + 1, _SYM.size)))
        elif kind == _SHT_NOBITS:
            body = size
        else:
            body = mask_module_id(content(i))
        out.append((string(shstrndx, name), kind, flags, link, info, align, entsize, body))
    return out


def _same_sections(a: bytes, b: bytes) -> bool:
    sections = elf_sections(a)
    return sections is not None and sections == elf_sections(b)


def function_sass(sass: str) -> dict[str, str]:
    """`cuobjdump --dump-sass` of one ELF -> function name (module id masked) -> its SASS text."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in sass.splitlines():
        if (m := _FUNCTION.match(line)) is not None:
            current = out.setdefault(_masked(m.group(1)), [])
        elif current is not None and line.strip():
            current.append(_masked(line.strip()))
    return {name: "\n".join(lines) for name, lines in out.items()}


def _masked(text: str) -> str:
    return mask_module_id(text.encode()).decode()


@dataclass
class ElfPair:
    unit: int  # the ELF's index in the library (cuobjdump's numbering)
    arch: str
    verdict: str  # identical | module-id | different | missing
    sha256_a: str = ""
    sha256_b: str = ""
    functions: int = 0
    differing_functions: list[str] = field(default_factory=list)


@dataclass
class ModuleComparison:
    module: str
    pairs: list[ElfPair]

    @property
    def problems(self) -> list[str]:
        out = []
        for p in self.pairs:
            if p.verdict == "missing":
                out.append(f"{self.module}: ELF {p.unit} ({p.arch}) is in one build only")
            elif p.verdict == "different":
                shown = ", ".join(p.differing_functions[:5]) or "no function differs: other ELF sections do"
                out.append(f"{self.module}: ELF {p.unit} ({p.arch}) differs: {shown}")
        return out


def extract(library: Path, cuobjdump: str, into: Path) -> dict[tuple[int, str], Path]:
    """(unit, arch) -> the extracted ELF file."""
    into.mkdir(parents=True, exist_ok=True)
    run_cuobjdump(cuobjdump, "--extract-elf", "all", str(library.resolve()), cwd=into)
    found: dict[tuple[int, str], Path] = {}
    for f in into.iterdir():
        if (m := _ELF_NAME.search(f.name)) is not None:
            found[(int(m.group(1)), m.group(2))] = f
    if not found:
        raise SparkserveError(f"{library}: no CUDA ELF inside")
    return found


def compare_elf(a: Path, b: Path, cuobjdump: str) -> tuple[str, int, list[str]]:
    """(verdict, functions compared, functions whose SASS differs)."""
    da, db = a.read_bytes(), b.read_bytes()
    if da == db:
        return "identical", 0, []
    fa = function_sass(run_cuobjdump(cuobjdump, "--dump-sass", str(a)))
    fb = function_sass(run_cuobjdump(cuobjdump, "--dump-sass", str(b)))
    differing = sorted(n for n in set(fa) | set(fb) if fa.get(n) != fb.get(n))
    if not differing and (mask_module_id(da) == mask_module_id(db) or _same_sections(da, db)):
        return "module-id", len(fa), []
    return "different", len(set(fa) | set(fb)), differing


def _libraries(cache: Path, base: str) -> dict[str, Path]:
    info_path = cache / "sparkserve-build-info.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"cannot read the build info {info_path}: {exc}") from exc
    out = {}
    for b in info["built"]:
        rec = PurePosixPath(str(b["library"]))
        try:
            out[str(b["name"])] = cache / rec.relative_to(base)
        except ValueError as exc:
            raise SparkserveError(f"{rec} is not under the image's JIT base {base}") from exc
    return out


def compare(cache_a: Path, cache_b: Path, cuobjdump: str,
            base: str = "/opt/jit-cache") -> list[ModuleComparison]:
    """Every module both caches built, ELF by ELF. Modules only one cache has are not compared (the
    caller names them)."""
    libs_a, libs_b = _libraries(cache_a, base), _libraries(cache_b, base)
    results = []
    with tempfile.TemporaryDirectory(prefix="sparkserve-cubins-") as tmp:
        for name in sorted(set(libs_a) & set(libs_b)):
            ea = extract(libs_a[name], cuobjdump, Path(tmp) / name / "a")
            eb = extract(libs_b[name], cuobjdump, Path(tmp) / name / "b")
            pairs = []
            for key in sorted(set(ea) | set(eb)):
                unit, arch = key
                if key not in ea or key not in eb:
                    pairs.append(ElfPair(unit, arch, "missing"))
                    continue
                verdict, functions, differing = compare_elf(ea[key], eb[key], cuobjdump)
                pairs.append(ElfPair(unit, arch, verdict, _sha(ea[key]), _sha(eb[key]), functions, differing))
            results.append(ModuleComparison(name, pairs))
    return results


def only_in_one(cache_a: Path, cache_b: Path, base: str = "/opt/jit-cache") -> tuple[list[str], list[str]]:
    a, b = set(_libraries(cache_a, base)), set(_libraries(cache_b, base))
    return sorted(a - b), sorted(b - a)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def table(results: list[ModuleComparison]) -> str:
    """Markdown: per module and arch, how many ELFs are identical, identical but for the module id, or
    different, and how many functions' SASS was compared."""
    head = ["module", "arch", "ELFs", "identical", "module id only (SASS identical)", "different",
            "functions compared"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        for arch in sorted({p.arch for p in r.pairs}, reverse=True):
            ps = [p for p in r.pairs if p.arch == arch]
            count = {v: sum(p.verdict == v for p in ps) for v in VERDICTS}
            lines.append(f"| {r.module} | {arch} | {len(ps)} | {count['identical']} | {count['module-id']} | "
                         f"{count['different'] + count['missing']} | {sum(p.functions for p in ps)} |")
    return "\n".join(lines)


def report_json(results: list[ModuleComparison]) -> str:
    return json.dumps([{"module": r.module, "pairs": [asdict(p) for p in r.pairs], "problems": r.problems}
                       for r in results], indent=1) + "\n"
