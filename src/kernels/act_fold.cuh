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

// The SwiGLU activation applied by the matmul that produces gate|up (the MLP's gate_up
// projection), in its epilogue, instead of by silu_mul after it or by the down projection's
// prologue (SiluMulFold): with w = [gate rows (inter); up rows (inter)] and y the fp32 product,
//   out[b, i] = bf16(silu(y[b, i]) * y[b, inter + i]),   i < inter
// with silu_mul's arithmetic (kernels/silu_mul_row.cuh) on the same fp32 values, so the step
// computes the same bits; y itself is not written. The bulk streaming matmul only: a row block
// of its CTA takes gate rows 4j .. 4j + 3 and up rows inter + 4j .. inter + 4j + 3 (its rows are
// copied one by one, so the weights keep their layout), and the row sums of a pair meet in one
// warp. inter % 4 == 0.
struct SiluMulEpilogue {
  bf16* out = nullptr;  // [m, inter], row stride ld; null = off
  int64_t ld = 0;
  int inter = 0;

  __host__ __device__ bool on() const { return out != nullptr; }
};

}  // namespace megaops
