// Standalone timing of one prefill matmul y[m, n] = x[m, k] . w[n, k]^T at prefill sizes (m =
// hundreds to thousands of tokens), where the GEMM is compute-bound and the figure of merit is
// TFLOP/s against the bf16 tensor-core ceiling (`megaops bench-matmul --prefill-tokens`). Pure
// C++ header (the CLI is compiled without CUDA headers).
#pragma once

#include <iterator>
#include <string>

namespace megaops {

// The calls timed:
//   executor: MatmulContext::run (cuBLASLt above m = 64, the heuristic's first answer) with fp32
//             y, as the conventional prefill step calls it today;
//   lt-bf16:  cuBLASLt, bf16 y;
//   lt-residual: cuBLASLt, bf16 y = x w^T + y (beta = 1 in place: the residual add fused into
//             the epilogue, for o_proj and down_proj, which then need no separate add pass);
//   lt-f32-residual: as lt-residual into an fp32 y, the executor's residual stream (o_proj and
//             down_proj would then write no fp32 delta for the next norm to read and add);
//   lt-best:  as lt-bf16 with the fastest of the heuristic's first PREFILL_GEMM_CANDIDATES
//             algorithms (each timed, 3 runs), so the table says whether its first answer is
//             already the best cuBLASLt has.
inline constexpr const char* PREFILL_GEMM_PATHS[] = {"executor", "lt-bf16", "lt-residual",
                                                     "lt-f32-residual", "lt-best"};
inline constexpr int PREFILL_GEMM_CANDIDATES = 8;
// "executor, lt-bf16, ... or lt-best", for error messages.
inline std::string prefill_gemm_paths_text() {
  std::string t;
  const size_t n = std::size(PREFILL_GEMM_PATHS);
  for (size_t i = 0; i < n; ++i)
    t += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + PREFILL_GEMM_PATHS[i];
  return t;
}
inline bool prefill_gemm_path_known(const std::string& p) {
  for (const char* q : PREFILL_GEMM_PATHS)
    if (p == q) return true;
  return false;
}

struct PrefillGemmCase {
  int m = 0, n = 0, k = 0;
  std::string path = "lt-bf16";  // one of PREFILL_GEMM_PATHS
  int warmups = 2;
  int repeats = 10;
};

struct PrefillGemmTime {
  double median_us = 0, min_us = 0, max_us = 0;
  int algo_index = 0;  // lt-best: which of the heuristic's answers won (0 = its first)
};

// Times the case on the current device (random bf16 inputs, never zeros). Throws InputError for an
// unknown path or a bad shape, DeviceError when a launch fails.
PrefillGemmTime time_prefill_gemm(const PrefillGemmCase& c);

}  // namespace megaops
