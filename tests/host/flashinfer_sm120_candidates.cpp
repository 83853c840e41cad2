// Host-side driver of FlashInfer's SM120 CUTLASS tactic list (flashinfer patch 0002, N = 8 / 16 SwapAB
// tiles of the MXFP8 x MXFP4 MoE grouped GEMM). Compiled with the host compiler against a FlashInfer
// source tree together with its cutlass_heuristic.cpp (tests/host/test_flashinfer_sm120_candidates.py).
//
//   flashinfer_sm120_candidates <sm> <flags>
//
// prints one line per candidate config of get_candidate_configs(sm, 1, flags): "MxNxK <enum value>",
// or "throw <message>" when the list is refused (SM120 throws for non-FP4 flags).
#include <cstdlib>
#include <exception>
#include <iostream>

#include "cutlass_extensions/gemm_configs.h"
#include "tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.h"

using tensorrt_llm::cutlass_extensions::CutlassGemmConfig;
using tensorrt_llm::cutlass_extensions::get_tile_shape_name;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " <sm> <CandidateConfigTypeParam flags>\n";
    return 2;
  }
  int const sm = std::atoi(argv[1]);
  auto const flags = static_cast<CutlassGemmConfig::CandidateConfigTypeParam>(std::atoi(argv[2]));
  try {
    for (CutlassGemmConfig const& c :
         tensorrt_llm::kernels::cutlass_kernels::get_candidate_configs(sm, 1, flags)) {
      std::cout << get_tile_shape_name(c.tile_config_sm120) << ' ' << static_cast<int>(c.tile_config_sm120)
                << '\n';
    }
  } catch (std::exception const& e) {
    std::cout << "throw " << e.what() << '\n';
  }
  return 0;
}
