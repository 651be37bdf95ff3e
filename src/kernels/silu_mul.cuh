// SwiGLU activation: out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], i.e. the fused
// gate|up projection's two halves. gate_up comes from a matmul and may be bf16 (gate_up) or fp32
// (gate_up_f32): exactly one of the two is set; out is bf16 either way. Requires inter % 8 == 0
// and 16-byte aligned buffers.
#pragma once

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct SiluMulParams {
  const bf16* gate_up = nullptr;       // [m, 2 * inter]
  const float* gate_up_f32 = nullptr;  // same, fp32; exactly one of gate_up, gate_up_f32
  bf16* out = nullptr;                 // [m, inter]
  int m = 0, inter = 0;
  int max_ctas = 0;  // grid cap (0 = default); the grid-stride loop covers the rest
  TileSync sync;     // overlap hooks (kernels/tile_sync.cuh); one signal per CTA
  LaunchOptions launch;
};

cudaError_t launch_silu_mul(const SiluMulParams& p);
// The launch launch_silu_mul(p) makes (with p.max_ctas) and its occupancy.
cudaError_t silu_mul_footprint(const SiluMulParams& p, KernelFootprint* out);
cudaError_t preload_silu_mul_kernels();

}  // namespace megaops
