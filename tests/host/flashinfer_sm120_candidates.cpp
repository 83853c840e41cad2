// Host-side driver of FlashInfer's SM120 CUTLASS MoE tactics (flashinfer patch 0002, N = 8 / 16 SwapAB
// tiles of the MXFP8 x MXFP4 MoE grouped GEMM). Built by tests/host/test_flashinfer_sm120_candidates.py
// against a FlashInfer source tree: this file and FlashInfer's cutlass_heuristic.cpp (+ its logging and
// exception sources) by the host C++ compiler, flashinfer_sm120_moe_runner.cu by nvcc (host code only).
//
//   <exe> candidates <sm> <flags>  one line per config of get_candidate_configs(sm, 1, flags):
//                                  "MxNxK <CutlassTileConfigSM120 value>", or "throw <message>"
//   <exe> runner <sm>              MoeGemmRunner::getTmaWarpSpecializedConfigs and
//                                  are_tile_shapes_supported_sm120 (flashinfer_sm120_moe_runner.cu)
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "cutlass_extensions/gemm_configs.h"
#include "tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.h"

using tensorrt_llm::cutlass_extensions::CutlassGemmConfig;
using tensorrt_llm::cutlass_extensions::get_tile_shape_name;

void sm120_moe_runner(int sm);  // flashinfer_sm120_moe_runner.cu

int main(int argc, char** argv) {
  bool const candidates = argc == 4 && std::strcmp(argv[1], "candidates") == 0;
  bool const runner = argc == 3 && std::strcmp(argv[1], "runner") == 0;
  if (!candidates && !runner) {
    std::cerr << "usage: " << argv[0] << " candidates <sm> <CandidateConfigTypeParam flags> | runner <sm>\n";
    return 2;
  }
  int const sm = std::atoi(argv[2]);
  try {
    if (runner) {
      sm120_moe_runner(sm);
      return 0;
    }
    auto const flags = static_cast<CutlassGemmConfig::CandidateConfigTypeParam>(std::atoi(argv[3]));
    for (CutlassGemmConfig const& c :
         tensorrt_llm::kernels::cutlass_kernels::get_candidate_configs(sm, 1, flags)) {
      std::cout << get_tile_shape_name(c.tile_config_sm120) << ' ' << static_cast<int>(c.tile_config_sm120)
                << '\n';
    }
  } catch (std::exception const& e) {
    std::string const what = e.what();  // TllmException appends a stack trace after the first line
    std::cout << "throw " << what.substr(0, what.find('\n')) << '\n';
  }
  return 0;
}
