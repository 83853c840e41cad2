"""Gate of flashinfer patch 0002 (N = 8 / 16 SwapAB tiles of the SM120 MXFP8 x MXFP4 MoE grouped GEMM),
inside the image: the patched generator emits the 8 new instantiations, each SwapAB-only in a compilation
unit of its own, and nothing else changes. (That they compile to block-scaled MMA is the JIT unit check,
scripts/ci/25-jit-units.sh.) Fails on an unpatched FlashInfer: no such units."""

from __future__ import annotations

import re
from pathlib import Path

# INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(Sm120, __nv_fp8_e4m3, SafeFP4, __nv_bfloat16, void,
#     EpilogueOpDefault, NONE, 128, 8, 128, 1, 1, 1, true, false, false, true);
_INST = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\(([^;]*)\);")


def _instantiations(path: Path) -> list[list[str]]:
    return [[a.strip() for a in m.group(1).split(",")] for m in _INST.finditer(path.read_text())]


def test_generator_emits_the_narrow_n_swapab_units(tmp_path: Path) -> None:
    from flashinfer.jit.gemm.cutlass.generate_kernels import generate_gemm_operations

    generate_gemm_operations(tmp_path, "120;120-real")
    units = sorted((tmp_path / "gemm_grouped" / "120").glob("*.generated.cu"))
    narrow = [u for u in units if "_SwapAB_" in u.name]
    want = {f"cutlass_kernel_file_gemm_grouped_sm120_M128_BS_N{n}_SwapAB_{f}_{o}_group0.generated.cu"
            for n in (8, 16) for f in ("none", "finalize") for o in ("f16", "bf16")}
    assert {u.name for u in narrow} == want
    fusion = {"none": "NONE", "finalize": "FINALIZE"}
    out = {"f16": "half", "bf16": "__nv_bfloat16"}
    for u in narrow:
        (args,) = _instantiations(u)
        m = re.search(r"_N(\d+)_SwapAB_(\w+?)_(b?f16)_", u.name)
        assert m is not None
        n, f, o = m.groups()
        assert args == ["Sm120", "__nv_fp8_e4m3", "SafeFP4", out[o], "void", "EpilogueOpDefault", fusion[f],
                        "128", n, "128", "1", "1", "1", "true", "false", "false", "true"]
    # no other SM120 unit instantiates a tile narrower than 32
    for u in units:
        if u not in narrow:
            assert all(int(a[8]) >= 32 for a in _instantiations(u)), u.name
