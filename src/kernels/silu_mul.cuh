// SwiGLU activation: out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], i.e. the fused
// gate|up projection's two halves. Requires inter % 8 == 0 and 16-byte aligned buffers.
#pragma once

#include "kernels/common.cuh"

namespace megaops {

struct SiluMulParams {
  const bf16* gate_up = nullptr;  // [m, 2 * inter]
  bf16* out = nullptr;            // [m, inter]
  int m = 0, inter = 0;
  LaunchOptions launch;
};

cudaError_t launch_silu_mul(const SiluMulParams& p);

}  // namespace megaops
