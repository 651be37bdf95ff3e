// Residual add fused with RMSNorm, the op between every two blocks of a decoder layer:
//   residual[r, :] += delta[r, :]   (skipped when no delta is given)
//   out[r, :] = residual[r, :] / sqrt(mean(residual[r, :]^2) + eps) * weight
// The residual stream stays fp32; out is bf16, the input of the next matmul. delta comes from a
// matmul and may be bf16 (delta) or fp32 (delta_f32, no rounding before the add): at most one of
// the two is set. Requires n % 8 == 0 and 16-byte aligned buffers (8-element vector loads).
#pragma once

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct AddRmsNormParams {
  float* residual = nullptr;         // [rows, n], updated in place when a delta is set
  const bf16* delta = nullptr;       // [rows, n] or null
  const float* delta_f32 = nullptr;  // [rows, n] or null; at most one of delta, delta_f32
  const bf16* weight = nullptr;      // [n]
  bf16* out = nullptr;               // [rows, n]; may be null (only the residual update)
  int rows = 0, n = 0;
  float eps = 1e-5f;
  TileSync sync;  // overlap hooks (kernels/tile_sync.cuh); one CTA per row, one signal per CTA
  LaunchOptions launch;
};

cudaError_t launch_add_rmsnorm(const AddRmsNormParams& p);
// The launch launch_add_rmsnorm(p) makes (grid = rows, not cappable) and its occupancy.
cudaError_t add_rmsnorm_footprint(const AddRmsNormParams& p, KernelFootprint* out);
cudaError_t preload_rmsnorm_kernels();

}  // namespace megaops
