"""Host-side check of flashinfer patch 0002 (N = 8 / 16 SwapAB tiles of the SM120 MXFP8 x MXFP4 MoE
grouped GEMM), no GPU: FlashInfer's cutlass_heuristic.cpp is compiled by the host C++ compiler with
tests/host/flashinfer_sm120_candidates.cpp, and tests/host/flashinfer_sm120_moe_runner.cu (the MoE dispatch
headers) by nvcc for a virtual architecture (host code only, no kernel instantiated); the driver prints

- get_candidate_configs(sm, flags): the 128x8x128 and 128x16x128 tiles (enum values
  shape_tuple_to_enum(128, N, 128)) are candidates of the grouped FP8 x FP4 list (the flags
  MoeGemmRunner::getTmaWarpSpecializedConfigs passes for MXFP8 activations x MXFP4 weights), of no other;
- MoeGemmRunner<fp8, fp4>::getTmaWarpSpecializedConfigs on SM120/121: the two tiles only as SwapAB
  tactics (with and without finalize fusion); none for the FP4 x FP4 runner;
- are_tile_shapes_supported_sm120: true for the two tiles with FP8 activations, false with FP4.

Fails on an unpatched FlashInfer (no such enum values, candidates or tactics). The device-side hunks
(CUTLASS builders, the SwapAB launch path, the dispatch cases, the generator) are not reached here: the
JIT unit check (scripts/ci/25-jit-units.sh) and tests/image/test_moe_narrow_tiles_gate.py cover those.

The FlashInfer sources:

    SPARKSERVE_FLASHINFER_SITE=<site-packages>   the (patched) FlashInfer, default: the importable one
    SPARKSERVE_FLASHINFER_BASE=<site-packages>   a complete FlashInfer install to take every file from
                                                 that the site lacks (a site holding only the files the
                                                 series changes, as `patches mutate --site` uses)

and CUDA_HOME (default /usr/local/cuda: nvcc, the CUDA headers and CCCL) and CXX (default g++). Nothing is
cached: every run compiles the sources as they are on disk (`patches mutate` edits them); ~40 s on 2 cores.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
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
    stubs = work / "stubs"
    stubs.mkdir()
    for name, text in CUBLAS_STUBS.items():
        (stubs / name).write_text(text)
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
