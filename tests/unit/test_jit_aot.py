"""The prebuilt SM90 fused-MoE module: which units each set keeps, and the symbol check that says whether
a restricted build loads (RTLD_LAZY binds calls late, data and address references at dlopen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import aot

GEN = Path("/c/generated/cutlass_instantiations/90")
BF16 = "template void sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_bfloat16, SafeFP4, __nv_bfloat16,\n"
FP8 = "template void sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_fp8_e4m3, cutlass::uint4b_t, half,\n"
SMALLK = "template void sm90_generic_mixed_moe_small_k_kernelLauncher<__nv_fp8_e4m3, SafeFP4, half,\n"


@pytest.mark.parametrize(("path", "text", "kind"), [
    (Path("/c/csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu"), None, "fixed"),
    (GEN / "gemm/90/cutlass_kernel_file_gemm_sm90_M128_group3.generated.cu", None, "fpA_intB"),
    (GEN / "gemm_grouped/90/cutlass_kernel_file_gemm_grouped_sm90_M128_group0.generated.cu", None, "grouped"),
    (GEN / "gemm_grouped/80/cutlass_kernel_file_gemm_grouped_sm80_M16_group0.generated.cu", None, "grouped"),
    (GEN / "gemm_grouped/90/cutlass_kernel_file_gemm_grouped_sm90_M64_Mixed_group12.generated.cu", BF16 * 8,
     "mixed-bf16-mxfp4"),
    (GEN / "gemm_grouped/90/cutlass_kernel_file_gemm_grouped_sm90_M64_Mixed_group0.generated.cu", FP8 * 8,
     "mixed-other"),
    (GEN / "gemm_grouped/90/cutlass_kernel_file_gemm_grouped_sm90_M128_Mixed_group71.generated.cu", SMALLK,
     "mixed-other"),
    (GEN / "gemm_grouped/90/cutlass_kernel_file_gemm_grouped_sm90_M64_Mixed_group9.generated.cu", BF16 + FP8,
     "mixed-other"),
])
def test_unit_kinds(path: Path, text: str | None, kind: str) -> None:
    assert aot.unit_kind(path, text) == kind


def test_unit_sets() -> None:
    kinds = ("fixed", "fpA_intB", "grouped", "mixed-bf16-mxfp4", "mixed-other")
    assert [aot.keep(k, "full") for k in kinds] == ["compile"] * 5
    assert [aot.keep(k, "moe") for k in kinds] == ["compile", "drop", "compile", "compile", "compile"]
    assert [aot.keep(k, "bf16-mxfp4") for k in kinds] == ["compile", "drop", "stub", "compile", "stub"]
    with pytest.raises(SparkserveError, match="unknown unit set"):
        aot.keep("fixed", "tiny")
    with pytest.raises(SparkserveError, match="without launcher instantiations"):
        aot.unit_kind(GEN / "gemm_grouped/90/x_Mixed_group1.generated.cu", "")


READELF = """
Relocation section '.rela.dyn' at offset 0x1 contains 3 entries:
    Offset             Info             Type               Symbol's Value  Symbol's Name + Addend
000000000001  000100000006 R_X86_64_GLOB_DAT      0000000000000000 _ZTVfp8Runner + 0
000000000002  000200000001 R_X86_64_64            0000000000000000 cuGetProcAddress + 0
Relocation section '.rela.plt' at offset 0x2 contains 3 entries:
000000000003  000300000007 R_X86_64_JUMP_SLOT     0000000000000000 _Z14fp8u4Launcherv + 0
000000000004  000400000007 R_X86_64_JUMP_SLOT     0000000000000000 cudaLaunchKernel@libcudart.so.13 + 0
000000000005  000500000007 R_X86_64_JUMP_SLOT     0000000000000000 _Z16bf16fp4Launcherv + 0
"""
NM_UNDEF = """                 U _ZTVfp8Runner
                 U cuGetProcAddress
                 U _Z14fp8u4Launcherv
                 U cudaLaunchKernel@libcudart.so.13
                 U _ZTVmissingOnlyHere
                 w __gmon_start__
                 w _ITM_registerTMCloneTable
"""


def test_symbol_classes() -> None:
    relocs = aot.relocations(READELF)
    assert relocs["_Z14fp8u4Launcherv"] == {"R_X86_64_JUMP_SLOT"}
    assert relocs["cudaLaunchKernel"] == {"R_X86_64_JUMP_SLOT"}
    provided = aot.defined("0000000000001000 T cudaLaunchKernel@@libcudart.so.13\n")
    assert "__gmon_start__" not in aot.undefined(NM_UNDEF)  # weak: null when absent, never fails dlopen
    rep = aot.classify(aot.undefined(NM_UNDEF), provided, relocs)
    # the driver's cu* entry points are there where the module runs; cudart exports cudaLaunchKernel
    assert rep.undefined == {"_ZTVfp8Runner", "_Z14fp8u4Launcherv", "_ZTVmissingOnlyHere"}
    assert rep.lazy == {"_Z14fp8u4Launcherv"}
    assert rep.eager == {"_ZTVfp8Runner", "_ZTVmissingOnlyHere"}  # a symbol without relocation: assume eager
    assert not rep.loads


def test_aot_path(tmp_path: Path) -> None:
    assert aot.aot_path(tmp_path) == tmp_path / "flashinfer/data/aot/fused_moe_90/fused_moe_90.so"
    with pytest.raises(SparkserveError, match="no flashinfer package"):
        aot.install(tmp_path / "x.so", tmp_path)
    (tmp_path / "flashinfer").mkdir()
    (tmp_path / "x.so").write_bytes(b"\x7fELF")
    assert aot.install(tmp_path / "x.so", tmp_path).read_bytes() == b"\x7fELF"


def test_stubs_specialize_what_flashinfer_instantiates() -> None:
    open_ns = "namespace tensorrt_llm\n{\nnamespace kernels\n{\nnamespace cutlass_kernels_oss\n{\n"
    close_ns = "} // namespace cutlass_kernels_oss\n} // namespace kernels\n} // namespace tensorrt_llm\n"
    mixed = ('#include "x/moe_gemm_tma_ws_mixed_input_launcher.inl"\n' + open_ns + "\n" + FP8
             + "tkc::EpilogueOpDefault, cute::Shape<cute::Int<64>, cute::Int<16>, cute::Int<128>>> (\n"
             + "GroupedGemmInput<__nv_fp8_e4m3, cutlass::uint4b_t, half, half>inputs, int sm_count_);\n\n"
             + close_ns)
    grouped = (open_ns + "#if 1 && 1\nINSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(Sm90, half, half, half, "
               "void, EpilogueOpDefault, NONE, 128, 16, 64, 1, 1, 1, false, false, false, true);\n#endif\n"
               + close_ns)
    src = aot.stub_source([("a.generated.cu", mixed), ("b.generated.cu", grouped)])
    assert "template void" not in src and '.inl"' not in src
    head = "template <> void sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_fp8_e4m3, cutlass::uint4b_t, "
    assert head in src
    assert 'int sm_count_) { sparkserve_left_out("sm90_generic_mixed_moe_gemm_kernelLauncher"); }' in src
    assert "INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM(Sm90, half" in src  # the prelude's macro specializes
    assert src.count("namespace cutlass_kernels_oss {") == 1 and src.rstrip().endswith("tensorrt_llm")
    with pytest.raises(SparkserveError, match="no cutlass_kernels_oss namespace"):
        aot.stub_body("int x;", "c.generated.cu")
