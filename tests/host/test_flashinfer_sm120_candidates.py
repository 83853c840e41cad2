"""Host-side check of flashinfer patch 0002 (N = 8 / 16 SwapAB tiles of the SM120 MXFP8 x MXFP4 MoE
grouped GEMM), no GPU. Three parts:

1. The tactics. FlashInfer's cutlass_heuristic.cpp is compiled by the host C++ compiler with
   tests/host/flashinfer_sm120_candidates.cpp, and tests/host/flashinfer_sm120_moe_runner.cu (the MoE
   dispatch headers) by nvcc for a virtual architecture (host code only, no kernel instantiated); the
   driver prints

   - get_candidate_configs(sm, flags): the 128x8x128 and 128x16x128 tiles (enum values
     shape_tuple_to_enum(128, N, 128)) are candidates of the grouped FP8 x FP4 list (the flags
     MoeGemmRunner::getTmaWarpSpecializedConfigs passes for MXFP8 activations x MXFP4 weights), of no other;
   - MoeGemmRunner<fp8, fp4>::getTmaWarpSpecializedConfigs on SM120/121: the two tiles only as SwapAB
     tactics (with and without finalize fusion); none for the FP4 x FP4 runner;
   - are_tile_shapes_supported_sm120: true for the two tiles with FP8 activations, false with FP4.

2. The generator. FlashInfer's flashinfer/jit/gemm/cutlass/generate_kernels.py (pure Python, loaded from
   the site without importing flashinfer) writes the SM120 instantiation units as the JIT of
   fused_moe_120 does: the 8 new kernels (N = 8/16 x no/finalize epilogue x f16/bf16, MXFP8 x MXFP4,
   SwapAB) in one unit each, named *_N8_SwapAB_* / *_N16_SwapAB_*, and no narrow tile in any other unit.

3. The kernels and the dispatch, compiled for a real architecture (sm_120f, what FlashInfer's JIT builds
   for an SM120 GPU on CUDA 12.9+) with the module's nvcc flags, three nvcc at once:
   - the generated N = 8 and N = 16 units (plain epilogue, bf16): the CUTLASS SM120 block-scaled mainloop
     and epilogue builders must accept the tiles (a reverted builder hunk fails a static_assert), and the
     kernel's PTX must show the layout the patch builds: per warp and 128-deep k-tile, 4 k-blocks x N/8
     MMA atoms (all eight MMA warps along M), in the k-loop and in its peeled last k-tile: N block-scaled
     MMAs (mma.sync...kind::mxf8f6f4.block_scale, e2m1 x e4m3) and 8 operand-B ldmatrix, x2 at N = 8 and
     x4 at N = 16;
   - FlashInfer's dispatch unit of the FP8 x FP4 runner (moe_gemm_kernels_fp8_fp4.cu): the launchers it
     references (nm) for tile N < 32 are exactly the 8 SwapAB ones the generator emits (the dispatch cases
     exist, no non-swapped launcher is referenced), and the two compiled units define the ones it needs.
   Together ~2.5 min on 2 cores (the units take ~5.5 GB of memory each).

Fails on an unpatched FlashInfer (no such enum values, candidates, tactics, units or kernels). Not checked
here: the numbers the kernels compute (GPU only), the finalize and f16 units' compile (same builders; the
JIT unit check of CI, scripts/ci/25-jit-units.sh, compiles N = 8 and 16 for sm_121a + sm_120f and checks
their SASS).

The FlashInfer sources:

    SPARKSERVE_FLASHINFER_SITE=<site-packages>   the (patched) FlashInfer, default: the importable one
    SPARKSERVE_FLASHINFER_BASE=<site-packages>   a complete FlashInfer install to take every file from
                                                 that the site lacks (a site holding only the files the
                                                 series changes, as `patches mutate --site` uses)

and CUDA_HOME (default /usr/local/cuda: nvcc, the CUDA headers and CCCL) and CXX (default g++). Nothing is
cached: every run compiles the sources as they are on disk (`patches mutate` edits them); part 1 takes ~40 s
on 2 cores, part 3 ~2.5 min.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "flashinfer_sm120_candidates.cpp"
RUNNER = HERE / "flashinfer_sm120_moe_runner.cu"

# CutlassGemmConfig::CandidateConfigTypeParam (cutlass_extensions/gemm_configs.h)
WEIGHT_ONLY = 1 << 0
BLACKWELL = 1 << 4
GROUPED_GEMM = 1 << 5
FP4_ONLY = 1 << 7
FP8FP4_MIXED = 1 << 8
# MoeGemmRunner<__nv_fp8_e4m3, __nv_fp4_e2m1, ...>::getTmaWarpSpecializedConfigs on SM120/121
# (T != WeightType: weight_only_flag; use_wfp4afp8: fp4_only_flag and fp8fp4_mixed_flag; grouped, Blackwell)
MXFP8_MXFP4_MOE = WEIGHT_ONLY | BLACKWELL | GROUPED_GEMM | FP4_ONLY | FP8FP4_MIXED
OTHERS = {
    "grouped FP4 x FP4 (NVFP4/MXFP4 MoE)": BLACKWELL | GROUPED_GEMM | FP4_ONLY,
    "FP8 x FP4 GEMM, not grouped": BLACKWELL | FP4_ONLY | FP8FP4_MIXED,
    "FP4 x FP4 GEMM, not grouped": BLACKWELL | FP4_ONLY,
}
NARROW = {"128x8x128": 128_008_128, "128x16x128": 128_016_128}  # shape_tuple_to_enum(128, N, 128)

# Directories under flashinfer/data the compile reads: csrc/nv_internal (TensorRT-LLM's kernels and
# cutlass_extensions), include (flashinfer/exception.h), cutlass/include and cutlass/tools/util/include.
TREES = ("csrc/nv_internal", "include", "cutlass/include", "cutlass/tools/util/include")
SOURCES = (
    "csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.cpp",
    "csrc/nv_internal/cpp/common/tllmException.cpp",
    "csrc/nv_internal/cpp/common/stringUtils.cpp",
    "csrc/nv_internal/cpp/common/logger.cpp",
    "csrc/nv_internal/cpp/common/envUtils.cpp",
)
# cudaUtils.h includes cuBLAS for its error strings only; the CUDA toolkit here may have no cuBLAS.
CUBLAS_STUBS = {
    "cublasLt.h": "#pragma once\n",
    "cublas_v2.h": """#pragma once
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15, CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
""",
}


def _site() -> Path:
    env = os.environ.get("SPARKSERVE_FLASHINFER_SITE")
    if env:
        site = Path(env)
        if not (site / "flashinfer").is_dir():
            pytest.fail(f"SPARKSERVE_FLASHINFER_SITE={env}: no flashinfer/ in it")
        return site
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or spec.origin is None:
        pytest.fail("no FlashInfer to check: set SPARKSERVE_FLASHINFER_SITE to a site-packages holding the "
                    "patched flashinfer/ (and SPARKSERVE_FLASHINFER_BASE to a complete install if that site "
                    "holds only the patched files), or run with a Python that imports flashinfer")
    return Path(spec.origin).resolve().parents[1]


def _merged_tree(dest: Path) -> Path:
    """flashinfer/data of the site, every file it lacks taken from SPARKSERVE_FLASHINFER_BASE (or the
    site alone): a tree of symbolic links, so quoted includes resolve next to the including file as in
    the real tree."""
    site = _site() / "flashinfer" / "data"
    base_env = os.environ.get("SPARKSERVE_FLASHINFER_BASE")
    base = Path(base_env) / "flashinfer" / "data" if base_env else site
    data = dest / "data"
    for sub in TREES:
        if not (base / sub).is_dir():
            pytest.fail(f"{base / sub} is missing: the FlashInfer at {base.parents[1]} is incomplete; set "
                        "SPARKSERVE_FLASHINFER_BASE to a complete FlashInfer site-packages")
        (data / sub).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-rs", str(base / sub), str(data / sub)], check=True)
    for sub in TREES:
        if base == site or not (site / sub).is_dir():
            continue
        for f in (site / sub).rglob("*"):
            if f.is_file():
                link = data / sub / f.relative_to(site / sub)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.unlink(missing_ok=True)
                link.symlink_to(f.resolve())
    return data


def _cublas_stubs(work: Path) -> Path:
    stubs = work / "stubs"
    stubs.mkdir()
    for name, text in CUBLAS_STUBS.items():
        (stubs / name).write_text(text)
    return stubs


def _cudart(cuda: Path) -> tuple[Path, str]:
    """The CUDA runtime to link: a toolkit's lib64/libcudart.so, or a pip wheel's lib/libcudart.so.13
    (nvidia-cuda-runtime, as in the image's build stages)."""
    for lib in (cuda / "lib64", cuda / "lib"):
        for name in ("libcudart.so", *sorted(p.name for p in lib.glob("libcudart.so.*"))):
            if (lib / name).is_file():
                return lib, name
    pytest.fail(f"no libcudart.so in {cuda}/lib64 or {cuda}/lib: set CUDA_HOME to a CUDA toolkit")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("sm120-candidates")
    data = _merged_tree(work)
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda / "include" / "cuda_runtime_api.h").is_file():
        pytest.fail(f"no CUDA headers in {cuda}/include: set CUDA_HOME to a CUDA toolkit")
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.fail(f"no host C++ compiler {cxx!r}: set CXX")
    stubs = _cublas_stubs(work)
    nv = data / "csrc" / "nv_internal"
    includes = [f"-I{i}" for i in (
        nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include", data / "include",
        data / "cutlass" / "include", data / "cutlass" / "tools" / "util" / "include", stubs)]
    defines = ["-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4"]
    nvcc = cuda / "bin" / "nvcc"
    if not nvcc.is_file():
        pytest.fail(f"no {nvcc}: set CUDA_HOME to a CUDA toolkit (12.8 or later: SM120)")
    # nvcc and the host compiler at once (the nvcc front end takes ~35 s of the ~40 s)
    runner_o = work / "flashinfer_sm120_moe_runner.o"
    nvcc_run = subprocess.Popen(
        [str(nvcc), "-std=c++17", "-O0", "-w", "-arch=compute_120a", *defines, *includes, "-c", str(RUNNER),
         "-o", str(runner_o)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    # cmath first: logger.cpp's cudaUtils.h uses std::isnan/expf without including it.
    cxx_run = subprocess.run(
        [cxx, "-std=c++17", "-O0", "-w", "-include", "cmath", *defines, *includes,
         f"-I{cuda / 'include'}", f"-I{cuda / 'include' / 'cccl'}", "-c", str(DRIVER),
         *(str(data / s) for s in SOURCES)], capture_output=True, text=True, cwd=work)
    nvcc_out, _ = nvcc_run.communicate()
    if cxx_run.returncode != 0:
        pytest.fail(f"host compile of cutlass_heuristic.cpp failed ({cxx_run.returncode}):\n"
                    + "\n".join(cxx_run.stderr.splitlines()[-40:]))
    if nvcc_run.returncode != 0:
        pytest.fail(f"nvcc of {RUNNER.name} (MoE dispatch headers) failed ({nvcc_run.returncode}):\n"
                    + "\n".join(nvcc_out.splitlines()[-40:]))
    exe = work / "sm120_candidates"
    objects = [runner_o, *(work / (Path(s).stem + ".o") for s in (DRIVER.name, *SOURCES))]
    lib, cudart = _cudart(cuda)
    link = subprocess.run(
        [cxx, *map(str, objects), f"-L{lib}", f"-Wl,-rpath,{lib}", f"-l:{cudart}", "-ldl", "-o", str(exe)],
        capture_output=True, text=True, cwd=work)
    if link.returncode != 0:
        pytest.fail(f"link failed ({link.returncode}):\n" + "\n".join(link.stderr.splitlines()[-40:]))
    return exe


def _candidates(driver: Path, sm: int, flags: int) -> list[tuple[str, int]]:
    res = subprocess.run([str(driver), "candidates", str(sm), str(flags)], capture_output=True, text=True,
                         check=True)
    lines = res.stdout.splitlines()
    assert lines, f"no output for sm {sm} flags {flags}"
    if lines[0].startswith("throw "):
        pytest.fail(f"get_candidate_configs({sm}, flags={flags}) threw: {lines[0][6:]}")
    return [(name, int(value)) for name, value in (line.split() for line in lines)]


@pytest.mark.parametrize("sm", [120, 121])
def test_mxfp8_mxfp4_moe_gets_the_narrow_n_tiles(driver: Path, sm: int) -> None:
    tiles = _candidates(driver, sm, MXFP8_MXFP4_MOE)
    names = [n for n, _ in tiles]
    for name, value in NARROW.items():
        assert (name, value) in tiles, f"{name} is no candidate of the SM{sm} MXFP8 x MXFP4 MoE: {names}"
        assert names.count(name) == 1
    # the patch adds exactly these two: every other candidate is one the list had (N >= 32)
    wider = [n for n in names if n not in NARROW]
    assert wider and all(int(n.split("x")[1]) >= 32 for n in wider), names


@pytest.mark.parametrize("sm", [120, 121])
@pytest.mark.parametrize("what", sorted(OTHERS))
def test_no_other_gemm_gets_them(driver: Path, sm: int, what: str) -> None:
    names = [n for n, _ in _candidates(driver, sm, OTHERS[what])]
    assert names, f"SM{sm} {what}: empty candidate list"
    assert all(int(n.split("x")[1]) >= 32 for n in names), f"SM{sm} {what}: {names}"


def _runner(driver: Path, sm: int) -> list[list[str]]:
    res = subprocess.run([str(driver), "runner", str(sm)], capture_output=True, text=True, check=True)
    lines = [line.split() for line in res.stdout.splitlines()]
    if lines and lines[0][0] == "throw":
        pytest.fail(f"MoeGemmRunner::getTmaWarpSpecializedConfigs({sm}) threw: {res.stdout}")
    return lines


@pytest.mark.parametrize("sm", [120, 121])
def test_moe_runner_offers_them_only_as_swapab_tactics(driver: Path, sm: int) -> None:
    lines = _runner(driver, sm)
    # runner <fp8xfp4|fp4xfp4> <tile> swap_ab=<0|1> fusion=<0 none|1 finalize>
    fp8 = {(tile, swap, fusion) for _, runner, tile, swap, fusion in
           (line for line in lines if line[0] == "runner") if runner == "fp8xfp4"}
    narrow = {t for t in fp8 if t[0] in NARROW}
    assert narrow == {(n, "swap_ab=1", f"fusion={f}") for n in NARROW for f in (0, 1)}, sorted(fp8)
    assert {t[0] for t in fp8 if t[1] == "swap_ab=0"}.isdisjoint(NARROW)
    fp4 = [line[2] for line in lines if line[:2] == ["runner", "fp4xfp4"]]
    assert fp4 and set(fp4).isdisjoint(NARROW), fp4


def test_sm120_dispatch_supports_them_for_fp8_activations_only(driver: Path) -> None:
    supported = {(line[1], line[2]): line[3] for line in _runner(driver, 120) if line[0] == "supported"}
    assert supported == {
        ("fp8xfp4", "128x8x128"): "1", ("fp8xfp4", "128x16x128"): "1", ("fp8xfp4", "128x32x128"): "1",
        ("fp4xfp4", "128x8x128"): "0", ("fp4xfp4", "128x16x128"): "0", ("fp4xfp4", "128x32x128"): "1",
    }


# ---------------------------------------------------------------- 2. the generator (pure Python)
GENERATOR = Path("flashinfer", "jit", "gemm", "cutlass")
# FlashInfer's JIT of fused_moe_120: generate_gemm_operations(output_dir, f"{arch};{arch}-real"), arch "120"
GENERATOR_ARCHS = "120;120-real"
OUT_TYPES = {"f16": "half", "bf16": "__nv_bfloat16"}
FUSIONS = {"none": "NONE", "finalize": "FINALIZE"}


def _unit_name(n: int, fusion: str, out: str) -> str:
    return f"cutlass_kernel_file_gemm_grouped_sm120_M128_BS_N{n}_SwapAB_{fusion}_{out}_group0.generated.cu"


# unit file name -> the arguments of its one INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM: arch, activation,
# weight, output, epilogue schedule, epilogue tag, fusion, CTA M N K, cluster M N K, MXFPX, dynamic CGA,
# bias, SwapAB
NARROW_UNITS = {
    _unit_name(n, fusion, out): ("Sm120", "__nv_fp8_e4m3", "SafeFP4", OUT_TYPES[out], "void",
                                 "EpilogueOpDefault", FUSIONS[fusion], "128", str(n), "128", "1", "1", "1",
                                 "true", "false", "false", "true")
    for n in (8, 16) for fusion in FUSIONS for out in OUT_TYPES
}
INSTANTIATION = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\((.*?)\);", re.S)


def _generator_dirs() -> list[Path]:
    """flashinfer/jit/gemm/cutlass of the site, then of SPARKSERVE_FLASHINFER_BASE (a site holding only the
    patched files has generate_kernels.py but not cutlass_library.py)."""
    dirs = [_site() / GENERATOR]
    base = os.environ.get("SPARKSERVE_FLASHINFER_BASE")
    if base:
        dirs.append(Path(base) / GENERATOR)
    return [d for d in dirs if d.is_dir()]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SM120 instantiation units as FlashInfer's JIT writes them for fused_moe_120: the site's
    generate_kernels.py, run from disk as a package of its own (importing flashinfer would need torch)."""
    dirs = _generator_dirs()
    source = next((d / "generate_kernels.py" for d in dirs if (d / "generate_kernels.py").is_file()), None)
    if source is None:
        pytest.fail(f"no {GENERATOR}/generate_kernels.py in {_site()} (or SPARKSERVE_FLASHINFER_BASE)")
    package = f"_sparkserve_fi_generator_{os.getpid()}"
    module = types.ModuleType(package)
    module.__path__ = [str(d) for d in dirs]  # cutlass_library.py from the first that has it
    sys.modules[package] = module
    try:
        spec = importlib.util.spec_from_file_location(f"{package}.generate_kernels", source)
        assert spec is not None and spec.loader is not None
        gen = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = gen
        spec.loader.exec_module(gen)
        out = tmp_path_factory.mktemp("sm120-generated")
        gen.generate_gemm_operations(str(out), GENERATOR_ARCHS)
    finally:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]
    return out / "gemm_grouped" / "120"


def _instantiations(unit: Path) -> list[tuple[str, ...]]:
    return [tuple(a.strip() for a in m.group(1).split(","))
            for m in INSTANTIATION.finditer(unit.read_text())]


def test_generator_emits_one_unit_per_narrow_swapab_kernel(generated: Path) -> None:
    units = sorted(p.name for p in generated.glob("*.generated.cu"))
    narrow = [u for u in units if "_SwapAB_" in u]
    assert sorted(narrow) == sorted(NARROW_UNITS), units
    for name, args in NARROW_UNITS.items():
        assert _instantiations(generated / name) == [args], name


def test_generator_keeps_the_narrow_tiles_out_of_other_units(generated: Path) -> None:
    others = [p for p in generated.glob("*.generated.cu") if p.name not in NARROW_UNITS]
    assert others, "no other SM120 unit"
    count = 0
    for unit in others:
        for args in _instantiations(unit):
            count += 1
            assert int(args[8]) >= 32, f"{unit.name}: {args}"
    assert count, "no instantiation in the other SM120 units"


# ------------------------------------ 3. the kernels and the dispatch, compiled for a real architecture
# FlashInfer's JIT builds compute_120f for an SM120 GPU (CUDA >= 12.9) and compute_121a for SM121 (the DGX
# Spark; CI's JIT unit check compiles both): one family-specific arch keeps the compile to one pass.
KERNEL_ARCH = "-gencode=arch=compute_120f,code=sm_120f"
# gen_cutlass_fused_moe_sm120_module's defines, the FP8 / FP4 ones of common_nvcc_flags, and the flags
# every FlashInfer CUDA source gets (jit/cpp_ext.py; -use_fast_math is gen_jit_spec's default)
KERNEL_FLAGS = [
    "-std=c++17", "-O3", "-w", "--expt-relaxed-constexpr", "-static-global-template-stub=false",
    "-use_fast_math", "-DCOMPILE_BLACKWELL_TMA_GEMMS", "-DCOMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS",
    "-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4", "-DUSING_OSS_CUTLASS_MOE_GEMM",
    "-DCUTLASS_ENABLE_GDC_FOR_SM100=1", "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1",
]
# the N = 8 and N = 16 units compiled here: plain epilogue, bf16 out (CI's JIT unit check compiles the same)
KERNEL_UNITS = {n: _unit_name(n, "none", "bf16") for n in (8, 16)}
DISPATCH = "csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_kernels_fp8_fp4.cu"
# demangled (nm -C) tma_warp_specialized_generic_moe_gemm_kernelLauncher<Sm120, ...>
LAUNCHER = re.compile(
    r"tma_warp_specialized_generic_moe_gemm_kernelLauncher<cutlass::arch::Sm120, (?P<t>[^,]+), (?P<w>[^,]+), "
    r"(?P<out>[^,]+), void, [^,]+, \([^)]+\)(?P<fusion>\d), "
    r"cute::tuple<cute::C<(?P<m>\d+)>, cute::C<(?P<n>\d+)>, cute::C<(?P<k>\d+)> >, "
    r"cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, (?P<flags>(?:true|false)(?:, (?:true|false)){3})>\(")
FUSION_VALUES = {"0": "NONE", "3": "FINALIZE"}  # TmaWarpSpecializedGroupedGemmInput::EpilogueFusion
DEMANGLED_OUT = {"half": "__half", "__nv_bfloat16": "__nv_bfloat16"}


@dataclass
class Compiled:
    source: str
    returncode: int
    log: str
    obj: Path
    ptx: Path | None

    def check(self) -> None:
        if self.returncode != 0:
            pytest.fail(f"nvcc of {self.source} failed ({self.returncode}):\n"
                        + "\n".join(self.log.splitlines()[-30:]))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory, generated: Path) -> dict[str, Compiled]:
    """nvcc -c of the two generated units (kept PTX) and of FlashInfer's FP8 x FP4 dispatch unit, at once."""
    work = tmp_path_factory.mktemp("sm120-kernels")
    data = _merged_tree(work)
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    nvcc = cuda / "bin" / "nvcc"
    if not nvcc.is_file():
        pytest.fail(f"no {nvcc}: set CUDA_HOME to a CUDA toolkit (12.9 or later: sm_120f)")
    if shutil.which("nm") is None:
        pytest.fail("no nm (binutils) to read the objects' symbols")
    nv = data / "csrc" / "nv_internal"
    ck = nv / "tensorrt_llm" / "kernels" / "cutlass_kernels"
    includes = [f"-I{i}" for i in (
        nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include", ck / "include", ck,
        generated, data / "include", data / "cutlass" / "include",
        data / "cutlass" / "tools" / "util" / "include", _cublas_stubs(work))]
    jobs: dict[str, tuple[subprocess.Popen[str], Path, Path | None]] = {}
    sources = {f"N{n}": generated / unit for n, unit in KERNEL_UNITS.items()} | {"dispatch": data / DISPATCH}
    for key, source in sources.items():
        keep = work / f"keep-{key}" if key != "dispatch" else None
        obj = work / f"{key}.o"
        cmd = [str(nvcc), *KERNEL_FLAGS, KERNEL_ARCH, *includes, "-c", str(source), "-o", str(obj)]
        if keep is not None:  # the PTX of the kernel stays in the keep dir
            keep.mkdir()
            cmd += ["-keep", f"-keep-dir={keep}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
        jobs[key] = (proc, obj, keep)
    compiled = {}
    for key, (proc, obj, keep) in jobs.items():
        log, _ = proc.communicate()
        ptx = None
        if keep is not None:
            ptx = next(iter(keep.glob("*.ptx")), None)
            for f in keep.iterdir():  # ~200 MB of intermediates per unit
                if f != ptx:
                    f.unlink()
        compiled[key] = Compiled(sources[key].name, proc.returncode, log, obj, ptx)
    return compiled


def _launchers(obj: Path, which: str) -> dict[str, tuple[str, ...]]:
    """mangled name -> (n, fusion, output type, MXFPX, dynamic CGA, bias, SwapAB) of every Sm120 MXFP8 x
    MXFP4 MoE launcher with tile N < 32 that obj defines or references (which: "--defined-only" or
    "--undefined-only")."""
    mangled = subprocess.run(["nm", which, "--format=just-symbols", str(obj)], capture_output=True,
                             text=True, check=True).stdout.split()
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    assert len(demangled) == len(mangled)
    found = {}
    for sym, name in zip(mangled, demangled, strict=True):
        m = LAUNCHER.search(name)
        if m is None or int(m["n"]) >= 32:
            continue
        assert (m["t"], m["w"], m["m"], m["k"]) == ("__nv_fp8_e4m3", "__nv_fp4_e2m1", "128", "128"), name
        found[sym] = (m["n"], FUSION_VALUES.get(m["fusion"], m["fusion"]), m["out"],
                      *m["flags"].split(", "))
    return found


def test_dispatch_references_the_narrow_tiles_only_as_swapab_kernels(kernels: dict[str, Compiled]) -> None:
    """dispatchMoeGemmSelectTileShapeTmaWarpSpecialized has the N = 8 / 16 cases, and
    dispatchMoeGemmFinalDispatchTmaWarpSpecialized calls only their SwapAB launcher: exactly the 8 kernels
    the generator emits (MXFPX, no dynamic CGA, no bias, SwapAB)."""
    kernels["dispatch"].check()
    referenced = set(_launchers(kernels["dispatch"].obj, "--undefined-only").values())
    expected = {(args[8], args[6], DEMANGLED_OUT[args[3]], "true", "false", "false", "true")
                for args in NARROW_UNITS.values()}
    assert referenced == expected, sorted(referenced)


@pytest.mark.parametrize("n", sorted(KERNEL_UNITS))
def test_narrow_swapab_unit_compiles_and_defines_what_the_dispatch_calls(kernels: dict[str, Compiled],
                                                                          n: int) -> None:
    unit = kernels[f"N{n}"]
    unit.check()
    defined = _launchers(unit.obj, "--defined-only")
    assert set(defined.values()) == {(str(n), "NONE", "__nv_bfloat16", "true", "false", "false", "true")}
    kernels["dispatch"].check()
    assert set(defined) <= set(_launchers(kernels["dispatch"].obj, "--undefined-only")), (
        f"the dispatch unit does not reference the launcher {KERNEL_UNITS[n]} defines: {sorted(defined)}")


@pytest.mark.parametrize("n", sorted(KERNEL_UNITS))
def test_narrow_swapab_kernel_has_the_block_scaled_mma_layout(kernels: dict[str, Compiled], n: int) -> None:
    """The PTX of the one kernel of the unit. Eight MMA warps stacked along M, each with all N columns:
    per 128-deep k-tile 4 k-blocks (m16n8k32) x N/8 atoms, once in the k-loop and once in the peeled last
    k-tile = N MMAs (a 4x2 warp layout gives 16 at N = 8, a 32-wide N permutation 32). Operand A (the e2m1
    weights, SwapAB) is read with 8 x4 ldmatrix, operand B (the e4m3 activations) with 8 ldmatrix of 8 x N
    bytes: x2 at N = 8, x4 at N = 16."""
    unit = kernels[f"N{n}"]
    unit.check()
    assert unit.ptx is not None, f"nvcc -keep left no PTX of {unit.source}"
    ptx = unit.ptx.read_text()
    entries = re.findall(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)", ptx, re.M)
    assert len(entries) == 1, entries
    mma = re.findall(r"\bmma\.sync\.aligned\.kind::mxf8f6f4\.block_scale\S*", ptx)
    assert mma and set(mma) == {
        "mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e2m1.e4m3.f32.ue8m0"
    }, sorted(set(mma))
    assert len(mma) == n, f"{len(mma)} block-scaled MMAs at N = {n}"
    assert len(re.findall(r"\bldmatrix\.sync\.aligned\.m8n16\.x4\.shared\.b8x16\.b4x16_p64\b", ptx)) == 8
    b_loads = re.findall(r"\bldmatrix\.sync\.aligned\.(x[124])\.m8n8\.shared\.b16\b", ptx)  # not .trans
    assert b_loads == ["x2" if n == 8 else "x4"] * 8, b_loads
    assert not re.search(r"^\s*trap;", ptx, re.M), "a trap in the kernel (an arch guard compiled it out?)"
