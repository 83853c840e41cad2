// The MoE-runner half of tests/host/flashinfer_sm120_candidates.cpp: needs the CUDA front end (the
// dispatch headers pull in CUTLASS's kernels), compiled by nvcc for a virtual architecture only, no kernel
// is instantiated. Two host-side facts of flashinfer patch 0002:
//   - MoeGemmRunner::getTmaWarpSpecializedConfigs: the tactic list the autotuner walks (tiles x finalize
//     fusion x swap_ab);
//   - are_tile_shapes_supported_sm120<CtaShape, 1x1x1, T>: which tiles the SM120 dispatch accepts.
#include <iostream>

#include "tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch.h"

namespace {
using tensorrt_llm::cutlass_extensions::CutlassGemmConfig;
using tensorrt_llm::cutlass_extensions::get_tile_shape_name;
namespace ck = tensorrt_llm::kernels::cutlass_kernels;

template <typename Runner>
void print_configs(char const* name, int sm) {
  for (CutlassGemmConfig const& c : Runner::getTmaWarpSpecializedConfigs(sm, true)) {
    std::cout << "runner " << name << ' ' << get_tile_shape_name(c.tile_config_sm120)
              << " swap_ab=" << int(c.swap_ab) << " fusion=" << int(c.epilogue_fusion_type) << '\n';
  }
}

template <typename T, int N>
void print_supported(char const* name) {
  using Tile = cute::Shape<cute::_128, cute::Int<N>, cute::_128>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  constexpr bool ok =
      tensorrt_llm::kernels::cutlass_kernels_oss::are_tile_shapes_supported_sm120<Tile, Cluster, T>();
  std::cout << "supported " << name << " 128x" << N << "x128 " << int(ok) << '\n';
}
}  // namespace

void sm120_moe_runner(int sm) {
  print_configs<ck::MoeGemmRunner<__nv_fp8_e4m3, ck::Fp4Type, __nv_bfloat16>>("fp8xfp4", sm);
  print_configs<ck::MoeGemmRunner<ck::Fp4Type, ck::Fp4Type, __nv_bfloat16>>("fp4xfp4", sm);
  print_supported<__nv_fp8_e4m3, 8>("fp8xfp4");
  print_supported<__nv_fp8_e4m3, 16>("fp8xfp4");
  print_supported<__nv_fp8_e4m3, 32>("fp8xfp4");
  print_supported<ck::Fp4Type, 8>("fp4xfp4");
  print_supported<ck::Fp4Type, 16>("fp4xfp4");
  print_supported<ck::Fp4Type, 32>("fp4xfp4");
}
