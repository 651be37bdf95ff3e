// The residual add + RMSNorm folded into the matmul that consumes it (DESIGN.md's tile contract
// "RMSNorm folds into its consumer"): instead of an add_rmsnorm kernel writing the normalised bf16
// row and the matmul reading it, the matmul's prologue reads the fp32 residual and delta, forms
//   r = residual + delta,   x = bf16(r / sqrt(mean(r^2) + eps) * weight)
// with exactly the arithmetic of add_rmsnorm (kernels/rmsnorm.cuh, delta_f32: both run the
// functions of kernels/rmsnorm_row.cuh on the same thread mapping), so the folded step computes the
// same bits as the unfolded one, and CTA 0 writes r to residual_out (the residual stream for the
// ops after it). Only the bulk streaming matmul folds (MatmulParams::fold, kernels/matmul.cuh);
// the other matmul paths return cudaErrorNotSupported for it. Each CTA of the matmul needs all of x
// anyway (one row of W per output column over the whole k), so the fold costs every CTA one extra
// read of two fp32 rows from L2 and a block reduction, and saves the norm kernel and its boundary.
//
// residual_out must not alias residual: the matmul's CTAs read residual while CTA 0 writes; the
// overlap executor alternates two residual buffers (runtime/conventional.cu).
#pragma once

#include "kernels/common.cuh"
#include "kernels/rmsnorm.cuh"

namespace megaops {

struct NormFold {
  const float* residual = nullptr;  // [m, k] fp32, row stride k
  const float* delta = nullptr;     // [m, k] fp32 or null (then r = residual)
  const bf16* weight = nullptr;     // [k]: the norm's gain; null = no fold (x is read as given)
  float* residual_out = nullptr;    // [m, k] or null: receives r (written by CTA 0)
  float eps = 1e-5f;

  __host__ __device__ bool on() const { return weight != nullptr; }
};

// The fold of the add_rmsnorm launch p (fp32 delta, or none) into the matmul after it, its new
// residual written to residual_out instead of in place.
inline NormFold norm_fold(const AddRmsNormParams& p, float* residual_out) {
  NormFold f;
  f.residual = p.residual;
  f.delta = p.delta_f32;
  f.weight = p.weight;
  f.residual_out = residual_out;
  f.eps = p.eps;
  return f;
}

}  // namespace megaops
