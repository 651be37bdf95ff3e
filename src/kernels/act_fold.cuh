// The SwiGLU activation folded into the matmul that consumes it (the MLP's down projection, k =
// the intermediate size), as kernels/norm_fold.cuh folds the norm: instead of silu_mul writing the
// bf16 activation and the matmul reading it, the matmul's prologue reads the fp32 gate|up rows and
// forms
//   x[b, i] = bf16(silu(gate_up[b, i]) * gate_up[b, k + i]),   i < k
// with exactly the arithmetic of silu_mul (kernels/silu_mul.cuh, gate_up_f32: both run
// kernels/silu_mul_row.cuh), so the folded step computes the same bits as the unfolded one. Only
// the bulk streaming matmul folds (MatmulParams::silu_fold, kernels/matmul.cuh); the other matmul
// paths return cudaErrorNotSupported for it. Each CTA of the matmul needs all of x anyway, so the
// fold costs every CTA a read of the 2k fp32 gate|up row (8 bytes per element of x instead of 2)
// from L2, and saves the silu_mul kernel and its boundary.
#pragma once

#include "kernels/common.cuh"

namespace megaops {

struct SiluMulFold {
  // [m, 2k] fp32, row stride 2k: gate in columns [0, k), up in [k, 2k); 16-byte aligned. Null =
  // no fold (x is read as given).
  const float* gate_up = nullptr;

  __host__ __device__ bool on() const { return gate_up != nullptr; }
};

}  // namespace megaops
