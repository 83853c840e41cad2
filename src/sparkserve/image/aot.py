"""Prebuild FlashInfer's SM90 CUTLASS fused-MoE module without a GPU, check it, and install it where
FlashInfer loads a module with no toolchain at all.

FlashInfer loads `<flashinfer package>/data/aot/<name>/<name>.so` in JitSpec.try_load() before anything
else (flashinfer/jit/env.py get_aot_artifacts): no ninja, no nvcc, no hash check. For the fused MoE of an
H100, <name> is `fused_moe_90` (gen_cutlass_fused_moe_sm90_module; `fused_moe_90_h20_prebuilt_d` only on a
78-SM H20 with JIT enabled). The file must come from the same FlashInfer sources (the Python side calls the
module's `init` with positional arguments) and the same apache-tvm-ffi ABI, and its NEEDED libraries
(libcudart.so.13, libnvrtc.so.13, libcuda.so.1) must load where it runs; a file that fails to load is
skipped with a warning and FlashInfer compiles instead (FLASHINFER_DISABLE_JIT=1 turns that into an error).

Unit sets of the module (FlashInfer writes ~220 generated instantiation files and 28 fixed sources):
  full        every source: what FlashInfer itself compiles (248 units).
  moe         without the 48 fpA_intB GEMM units (generated/cutlass_instantiations/90/gemm/90/): their
              launchers are referenced by no source of the module, so nothing becomes undefined (200).
  bf16-mxfp4  the fixed sources, the 23 BF16 x MXFP4 mixed-input units, and one generated unit of stubs for
              the 54 same-type/SM80 grouped and 95 other mixed-input units (52 units). A stub is an explicit
              specialization with the template arguments of FlashInfer's explicit instantiation, so the same
              mangled name, whose body throws: every symbol is defined (the runners take the same-type
              launchers' addresses, so leaving them undefined would fail at dlopen), and a call on a
              left-out kernel raises a Python error instead of running. `check_symbols` checks the file.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError

UNIT_SETS = ("full", "moe", "bf16-mxfp4")
MODULE = "fused_moe_90"
# The launcher instantiations of a generated mixed-input file, e.g.
# `template void sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_bfloat16, SafeFP4, ...`
_MIXED = re.compile(r"^template void sm90_generic_mixed_moe_(?:small_k_kernel|gemm_kernel)Launcher"
                    r"<([^,]+), ([^,]+),", re.MULTILINE)
BF16_MXFP4 = ("__nv_bfloat16", "SafeFP4")


def unit_kind(path: Path, text: str | None) -> str:
    """fixed | fpA_intB | mixed-bf16-mxfp4 | mixed-other | grouped (a generated same-type or SM80 grouped
    GEMM file). `text` is the file's content (needed for generated mixed-input files only)."""
    name = path.name
    if not name.endswith(".generated.cu"):
        return "fixed"
    if path.parent.name == "90" and path.parent.parent.name == "gemm":
        return "fpA_intB"
    if "_Mixed_" in name:
        pairs = set(_MIXED.findall(text or ""))
        if not pairs:
            raise SparkserveError(f"{path}: a mixed-input unit without launcher instantiations")
        return "mixed-bf16-mxfp4" if pairs == {BF16_MXFP4} else "mixed-other"
    return "grouped"


def keep(kind: str, units: str) -> str:
    """What a unit set does with a unit of `kind`: compile, stub (its launchers defined by the stub unit) or
    drop (nothing references it)."""
    if units == "full":
        return "compile"
    if units == "moe":
        return "drop" if kind == "fpA_intB" else "compile"
    if units == "bf16-mxfp4":
        return {"fixed": "compile", "mixed-bf16-mxfp4": "compile", "fpA_intB": "drop"}.get(kind, "stub")
    raise SparkserveError(f"unknown unit set {units!r} (known: {', '.join(UNIT_SETS)})")


def spec_for(units: str) -> tuple[Any, dict[str, int]]:
    """FlashInfer's own JitSpec for fused_moe_90, restricted to `units` and renamed (its own JIT folder) when
    not full; and how many units of each kind it keeps."""
    jfm = importlib.import_module("flashinfer.jit.fused_moe")
    spec = jfm.gen_cutlass_fused_moe_sm90_module()
    if spec.name != MODULE:
        raise SparkserveError(f"FlashInfer chose module {spec.name!r} (an H20?), not {MODULE}: set "
                              "FLASHINFER_DISABLE_JIT=1 or build on a machine without that GPU")
    kept: list[Path] = []
    stubbed: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    for src in spec.sources:
        p = Path(src)
        kind = unit_kind(p, p.read_text() if "_Mixed_" in p.name else None)
        what = keep(kind, units)
        counts[f"{kind} {what}"] = counts.get(f"{kind} {what}", 0) + 1
        if what == "compile":
            kept.append(p)
        elif what == "stub":
            stubbed.append((p.name, p.read_text()))
    name = MODULE if units == "full" else f"{MODULE}_{units.replace('-', '_')}"
    if stubbed:
        # Not next to FlashInfer's generated files: its generator deletes what it did not write there.
        env = importlib.import_module("flashinfer.jit.env")
        stub = Path(env.FLASHINFER_GEN_SRC_DIR) / "sparkserve" / name / STUB_FILE
        stub.parent.mkdir(parents=True, exist_ok=True)
        text = stub_source(stubbed)
        if not stub.exists() or stub.read_text() != text:  # keep its mtime: ninja rebuilds only on change
            stub.write_text(text)
        kept.append(stub)
        counts["stub unit"] = 1
    return dataclasses.replace(spec, name=name, sources=kept), counts


# ---- stubs for the launchers a restricted module leaves out ---------------------------------------------
STUB_FILE = "sparkserve_left_out_launchers.generated.cu"
# The prelude of the stub unit (C++): includes, the aliases the generated files use, the throwing body, and
# the macro of the same-type grouped files redefined to specialize instead of instantiate.
STUB_PRELUDE = Path(__file__).with_name("left_out_launchers.cu.in")
_STUB_END = "\n}  // namespace cutlass_kernels_oss\n}  // namespace kernels\n}  // namespace tensorrt_llm\n"
_NS_OPEN = re.compile(r"namespace tensorrt_llm\s*\{\s*namespace kernels\s*\{\s*"
                      r"namespace cutlass_kernels_oss\s*\{")
_NS_CLOSE = re.compile(r"\}\s*//\s*namespace cutlass_kernels_oss.*", re.DOTALL)
_EXPLICIT = re.compile(r"\btemplate void (\w+)([^;]*?)\);", re.DOTALL)


def stub_body(text: str, source: str) -> str:
    """The instantiations of one generated file as throwing specializations (its namespace body)."""
    m = _NS_OPEN.search(text)
    if m is None:
        raise SparkserveError(f"{source}: no cutlass_kernels_oss namespace to take instantiations from")
    body = _NS_CLOSE.sub("", text[m.end():])
    def specialize(e: re.Match[str]) -> str:
        return f'template <> void {e[1]}{e[2]}) {{ sparkserve_left_out("{e[1]}"); }}'

    body = _EXPLICIT.sub(specialize, body)
    return f"\n// ---- from {source}\n{body.strip()}\n"


def stub_source(files: list[tuple[str, str]]) -> str:
    """One compilation unit defining every launcher of `files` ((name, text) of generated files)."""
    return STUB_PRELUDE.read_text() + "".join(stub_body(text, name) for name, text in files) + _STUB_END


# ---- the built file's dynamic symbols -------------------------------------------------------------------
_EAGER = ("R_X86_64_GLOB_DAT", "R_X86_64_64", "R_X86_64_COPY", "R_AARCH64_GLOB_DAT", "R_AARCH64_ABS64")
_LAZY = ("R_X86_64_JUMP_SLOT", "R_AARCH64_JUMP_SLOT")


@dataclass
class SymbolReport:
    undefined: set[str] = field(default_factory=set)  # after removing what the given libraries export
    eager: set[str] = field(default_factory=set)  # of those, bound at dlopen even with RTLD_LAZY
    lazy: set[str] = field(default_factory=set)  # bound at first call only

    @property
    def loads(self) -> bool:
        return not self.eager


def relocations(readelf_r: str) -> dict[str, set[str]]:
    """symbol -> relocation types, from `readelf -rW` output."""
    out: dict[str, set[str]] = {}
    for line in readelf_r.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[2].startswith("R_"):
            sym = parts[4].split("@")[0]
            out.setdefault(sym, set()).add(parts[2])
    return out


def undefined(nm_d: str) -> set[str]:
    """Names of `nm -D --undefined-only` output (versions stripped), without weak references (`w`, `v`:
    __gmon_start__, _ITM_*), which the loader leaves null when nothing defines them."""
    return {parts[-1].split("@")[0] for parts in (line.split() for line in nm_d.splitlines())
            if len(parts) >= 2 and parts[-2] not in ("w", "v")}


def defined(nm_d: str) -> set[str]:
    """Names `nm -D --defined-only` lists (versions stripped)."""
    return {line.split()[-1].split("@")[0] for line in nm_d.splitlines() if len(line.split()) >= 3}


def classify(undef: set[str], provided: set[str], relocs: dict[str, set[str]],
             driver_prefix: str = "cu") -> SymbolReport:
    """Undefined symbols no provider exports, split by how they are bound. CUDA driver entry points (cu*)
    count as provided: the driver's libcuda.so.1 is there where the module runs."""
    rep = SymbolReport()
    for s in undef - provided:
        if s.startswith(driver_prefix) and not s.startswith("_Z"):
            continue
        rep.undefined.add(s)
        types = relocs.get(s, set())
        (rep.eager if types & set(_EAGER) or not types & set(_LAZY) else rep.lazy).add(s)
    return rep


def _tool(*cmd: str) -> str:
    r = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SparkserveError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-300:]}")
    return r.stdout


def check_symbols(so: Path, providers: list[Path]) -> SymbolReport:
    """Which symbols of `so` no provider library exports, and whether dlopen(RTLD_LAZY) would need them."""
    provided: set[str] = set()
    for lib in providers:
        provided |= defined(_tool("nm", "-D", "--defined-only", str(lib)))
    return classify(undefined(_tool("nm", "-D", "--undefined-only", str(so))), provided,
                    relocations(_tool("readelf", "-rW", str(so))))


def demangle(names: set[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return sorted(names)
    r = subprocess.run(["c++filt"], input="\n".join(sorted(names)), capture_output=True, text=True,
                       check=False)
    return r.stdout.splitlines() if r.returncode == 0 else sorted(names)


def aot_dir(site: Path) -> Path:
    """FlashInfer's AOT folder in `site`: <aot_dir>/<name>/<name>.so loads with no toolchain."""
    return site / "flashinfer" / "data" / "aot"


def aot_path(site: Path, name: str = MODULE) -> Path:
    return aot_dir(site) / name / f"{name}.so"


def install(so: Path, site: Path, name: str = MODULE) -> Path:
    if not (site / "flashinfer").is_dir():
        raise SparkserveError(f"{site} holds no flashinfer package")
    dest = aot_path(site, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(so, tmp)
    tmp.replace(dest)
    return dest
