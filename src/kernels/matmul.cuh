// Matmul y = x · Wᵀ with bf16 weights in HF Linear layout ([n, k], row-major). Small m (decode,
// m <= 64) runs our own memory-bound kernel, which issues its weight loads before pdl_wait() so the
// weights stream while the predecessor finishes; large m (prefill) runs cuBLASLt.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/common.cuh"

namespace megaops {

struct MatmulParams {
  const bf16* x = nullptr;  // [m, k], row stride ldx elements
  int64_t ldx = 0;
  const bf16* w = nullptr;  // [n, k], contiguous
  void* y = nullptr;        // [m, n], row stride ldy elements, dtype y_dtype
  int64_t ldy = 0;
  DType y_dtype = DType::BF16;  // BF16 or F32
  int m = 0, n = 0, k = 0;      // k must be a multiple of 8 (16-byte rows)
  LaunchOptions launch;
};

// Largest m the small-batch kernel handles; above it the cuBLASLt path is used.
constexpr int MATMUL_SMALL_M_MAX = 64;

// Owns the cuBLASLt handle and workspace. One per executor; not thread-safe. Usable inside CUDA
// stream capture (the workspace is fixed at construction).
class MatmulContext {
 public:
  MatmulContext();
  ~MatmulContext();
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  // Dispatches on m; returns the launch status. Invalid shapes give cudaErrorInvalidValue.
  cudaError_t run(const MatmulParams& p);

  // Forces a path (tests and benchmarks).
  cudaError_t run_small_m(const MatmulParams& p);
  cudaError_t run_cublaslt(const MatmulParams& p);

 private:
  // Path forced by MEGAOPS_MATMUL_PATH=small|cublaslt (a developer knob for measuring the two
  // paths in situ); 0 = dispatch by shape.
  int forced_path_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace megaops
