// The arithmetic of one row of the residual add + RMSNorm, shared by add_rmsnorm
// (kernels/rmsnorm.cu) and the matmul that folds the norm into its prologue (kernels/norm_fold.cuh,
// the bulk streaming matmul in kernels/matmul_stream.cu). The folded step must compute the same
// bits as the unfolded one, so both kernels do every floating-point operation of a row here, in the
// same order, on the same thread: thread t < RMSNORM_THREADS owns the 8-element vectors t,
// t + RMSNORM_THREADS, ... of the row, accumulates their squares in that order, and the block sum
// combines the per-thread sums with the same shuffles and warp order.
//
// Every operation is written as an explicit round-to-nearest intrinsic (__fmaf_rn, __fmul_rn,
// __fadd_rn, __fdiv_rn): nvcc never contracts those, so no compiler choice can give the two kernels
// different FMA patterns. The pattern is the one nvcc chose for add_rmsnorm's plain expressions
// before they moved here (its PTX for sm_80 and sm_90a: the sum of four squares as
// fma(x, x, y * y) + z², + w², one div.rn and one rsqrt.approx), so add_rmsnorm computes the bits
// it always did.
#pragma once

#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/rmsnorm.cuh"

namespace megaops {

constexpr int RMSNORM_THREADS = 256;  // threads owning a row's elements (add_rmsnorm's CTA)
constexpr int RMSNORM_WARPS = RMSNORM_THREADS / 32;

#if defined(__CUDACC__)

// r = residual + delta over one 8-element vector: a holds elements 0-3, b elements 4-7.
__device__ __forceinline__ void rmsnorm_add8(float4& a, float4& b, const float (&d)[8]) {
  a.x = __fadd_rn(a.x, d[0]), a.y = __fadd_rn(a.y, d[1]);
  a.z = __fadd_rn(a.z, d[2]), a.w = __fadd_rn(a.w, d[3]);
  b.x = __fadd_rn(b.x, d[4]), b.y = __fadd_rn(b.y, d[5]);
  b.z = __fadd_rn(b.z, d[6]), b.w = __fadd_rn(b.w, d[7]);
}

// sumsq plus the squares of one 8-element vector (a: elements 0-3, b: 4-7).
__device__ __forceinline__ float rmsnorm_sumsq8(float sumsq, float4 a, float4 b) {
  const float sa =
      __fmaf_rn(a.w, a.w, __fmaf_rn(a.z, a.z, __fmaf_rn(a.x, a.x, __fmul_rn(a.y, a.y))));
  sumsq = __fadd_rn(sumsq, sa);
  const float sb =
      __fmaf_rn(b.w, b.w, __fmaf_rn(b.z, b.z, __fmaf_rn(b.x, b.x, __fmul_rn(b.y, b.y))));
  return __fadd_rn(sb, sumsq);
}

// Sum of v over the first RMSNORM_THREADS threads of the CTA; every thread gets the same result
// (a butterfly: each step adds the same two values on both lanes). Every thread of the CTA must
// call it (two __syncthreads); threads past RMSNORM_THREADS (the bulk matmul's producer warp) pass
// 0 and write nothing. `scratch`: RMSNORM_WARPS floats of shared memory.
__device__ __forceinline__ float rmsnorm_block_sum(float v, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0 && warp < RMSNORM_WARPS) scratch[warp] = v;
  __syncthreads();
  v = lane < RMSNORM_WARPS ? scratch[lane] : 0.0f;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  // A caller may start its next row right away: keep its scratch writes behind these reads.
  __syncthreads();
  return v;
}

// 1 / sqrt(mean square + eps) of a row of n elements whose squares sum to `total`.
__device__ __forceinline__ float rmsnorm_inv_rms(float total, int n, float eps) {
  return rsqrtf(__fadd_rn(eps, __fdiv_rn(total, static_cast<float>(n))));
}

// bf16(r * inv_rms * weight) of one 8-element vector (a: elements 0-3, b: 4-7), packed as 8 bf16
// in element order; w_raw holds the 8 bf16 weights.
__device__ __forceinline__ uint4 rmsnorm_scale8(float4 a, float4 b, uint4 w_raw, float inv_rms) {
  float w[8];
  bf16x8_to_float(w_raw, w);
  uint4 o_raw;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&o_raw);
  o[0] = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(a.x, inv_rms), w[0]),
                               __fmul_rn(__fmul_rn(a.y, inv_rms), w[1]));
  o[1] = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(a.z, inv_rms), w[2]),
                               __fmul_rn(__fmul_rn(a.w, inv_rms), w[3]));
  o[2] = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(b.x, inv_rms), w[4]),
                               __fmul_rn(__fmul_rn(b.y, inv_rms), w[5]));
  o[3] = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(b.z, inv_rms), w[6]),
                               __fmul_rn(__fmul_rn(b.w, inv_rms), w[7]));
  return o_raw;
}

// ---- add_rmsnorm's row (kernels/rmsnorm.cu; also a persistent region's norm task) ----

// The delta input of type DeltaT (null when absent or of the other type).
template <typename DeltaT>
__device__ __forceinline__ const DeltaT* rmsnorm_delta_input(const AddRmsNormParams& p) {
  if constexpr (std::is_same<DeltaT, float>::value) {
    return p.delta_f32;
  } else {
    static_assert(std::is_same<DeltaT, bf16>::value, "delta is bf16 or fp32");
    return p.delta;
  }
}

// Elements [8 * v, 8 * v + 8) of a row as floats: one 16-byte load for bf16, two for fp32.
__device__ __forceinline__ void rmsnorm_load8(const bf16* row, int v, float* f) {
  bf16x8_to_float(reinterpret_cast<const uint4*>(row)[v], f);
}
__device__ __forceinline__ void rmsnorm_load8(const float* row, int v, float* f) {
  const float4* r = reinterpret_cast<const float4*>(row);
  const float4 a = r[2 * v], b = r[2 * v + 1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
  f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// One tile = one row; must be called by all RMSNORM_THREADS threads of a CTA of exactly that
// many. DeltaT is the type of the delta input (bf16: p.delta, float: p.delta_f32); with neither
// set, any DeltaT works.
template <typename DeltaT>
__device__ __forceinline__ void add_rmsnorm_row(const AddRmsNormParams& p, int row) {
  __shared__ float scratch[RMSNORM_WARPS];
  const int vecs = p.n / 8;
  float4* res = reinterpret_cast<float4*>(p.residual + static_cast<int64_t>(row) * p.n);
  const DeltaT* delta_in = rmsnorm_delta_input<DeltaT>(p);
  const DeltaT* delta = delta_in ? delta_in + static_cast<int64_t>(row) * p.n : nullptr;
  float sumsq = 0.0f;
  for (int v = threadIdx.x; v < vecs; v += RMSNORM_THREADS) {
    float4 a = res[2 * v], b = res[2 * v + 1];
    if (delta) {
      float d[8];
      rmsnorm_load8(delta, v, d);
      rmsnorm_add8(a, b, d);
      res[2 * v] = a;
      res[2 * v + 1] = b;
    }
    sumsq = rmsnorm_sumsq8(sumsq, a, b);
  }
  if (!p.out) return;
  const float inv_rms = rmsnorm_inv_rms(rmsnorm_block_sum(sumsq, scratch), p.n, p.eps);
  const uint4* weight = reinterpret_cast<const uint4*>(p.weight);
  uint4* out = reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(row) * p.n);
  for (int v = threadIdx.x; v < vecs; v += RMSNORM_THREADS) {
    const float4 a = res[2 * v], b = res[2 * v + 1];
    out[v] = rmsnorm_scale8(a, b, weight[v], inv_rms);
  }
}

#endif  // __CUDACC__

}  // namespace megaops
