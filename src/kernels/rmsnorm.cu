// Residual add fused with RMSNorm: one CTA per row. Pass 1 adds delta into the fp32 residual (in
// place) and accumulates the sum of squares; after a block reduction, pass 2 re-reads the row it
// just wrote (same threads, same addresses: no extra synchronisation needed, and the row is hot in
// L1/L2) and writes the normalised bf16 output. Loads are 8 elements wide, so n % 8 == 0. The
// kernel is instantiated per delta type (bf16 or fp32); without a delta either instance works.
// The row's arithmetic lives in kernels/rmsnorm_row.cuh, shared with the matmul that folds this
// op (kernels/norm_fold.cuh), which must compute the same bits.
#include <type_traits>

#include "kernels/rmsnorm.cuh"
#include "kernels/rmsnorm_row.cuh"

namespace megaops {
namespace {

// The delta input of type DeltaT (null when absent or of the other type).
template <typename DeltaT>
__device__ __forceinline__ const DeltaT* delta_input(const AddRmsNormParams& p) {
  if constexpr (std::is_same<DeltaT, float>::value) {
    return p.delta_f32;
  } else {
    static_assert(std::is_same<DeltaT, bf16>::value, "delta is bf16 or fp32");
    return p.delta;
  }
}

// Elements [8 * v, 8 * v + 8) of a row as floats: one 16-byte load for bf16, two for fp32.
__device__ __forceinline__ void load8(const bf16* row, int v, float* f) {
  bf16x8_to_float(reinterpret_cast<const uint4*>(row)[v], f);
}
__device__ __forceinline__ void load8(const float* row, int v, float* f) {
  const float4* r = reinterpret_cast<const float4*>(row);
  const float4 a = r[2 * v], b = r[2 * v + 1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
  f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// One tile = one row; must be called by all RMSNORM_THREADS threads of the CTA. DeltaT is the type
// of the delta input (bf16: p.delta, float: p.delta_f32); with neither set, any DeltaT works.
template <typename DeltaT>
__device__ void add_rmsnorm_row(const AddRmsNormParams& p, int row) {
  __shared__ float scratch[RMSNORM_WARPS];
  const int vecs = p.n / 8;
  float4* res = reinterpret_cast<float4*>(p.residual + static_cast<int64_t>(row) * p.n);
  const DeltaT* delta_in = delta_input<DeltaT>(p);
  const DeltaT* delta = delta_in ? delta_in + static_cast<int64_t>(row) * p.n : nullptr;
  float sumsq = 0.0f;
  for (int v = threadIdx.x; v < vecs; v += RMSNORM_THREADS) {
    float4 a = res[2 * v], b = res[2 * v + 1];
    if (delta) {
      float d[8];
      load8(delta, v, d);
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

template <typename DeltaT>
__global__ void __launch_bounds__(RMSNORM_THREADS) add_rmsnorm_kernel(AddRmsNormParams p) {
  // residual and delta are both written by predecessors; only the norm weight is constant, and it
  // is read late enough that prefetching it would buy nothing. Both are read and written with
  // ordinary loads/stores (coherent: safe after the overlap step's acquire).
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  add_rmsnorm_row<DeltaT>(p, blockIdx.x);
  tile_sync_signal(p.sync, step);
}

bool aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

}  // namespace

cudaError_t add_rmsnorm_footprint(const AddRmsNormParams& p, KernelFootprint* out) {
  if (p.delta_f32)
    return kernel_footprint(add_rmsnorm_kernel<float>, p.rows, RMSNORM_THREADS, 0, out);
  return kernel_footprint(add_rmsnorm_kernel<bf16>, p.rows, RMSNORM_THREADS, 0, out);
}

cudaError_t preload_rmsnorm_kernels() {
  const cudaError_t err = preload_kernel(add_rmsnorm_kernel<float>);
  return err != cudaSuccess ? err : preload_kernel(add_rmsnorm_kernel<bf16>);
}

cudaError_t launch_add_rmsnorm(const AddRmsNormParams& p) {
  if (p.rows < 0 || p.n <= 0 || p.n % 8 != 0 || !(p.eps >= 0.0f)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (!p.residual || !aligned16(p.residual)) return cudaErrorInvalidValue;
  if (p.delta && p.delta_f32) return cudaErrorInvalidValue;  // at most one delta
  if ((p.delta && !aligned16(p.delta)) || (p.delta_f32 && !aligned16(p.delta_f32)))
    return cudaErrorInvalidValue;
  if (p.out && (!p.weight || !aligned16(p.out) || !aligned16(p.weight)))
    return cudaErrorInvalidValue;
  if (p.delta_f32)
    return launch_kernel(add_rmsnorm_kernel<float>, dim3(p.rows), dim3(RMSNORM_THREADS), 0,
                         p.launch, p);
  return launch_kernel(add_rmsnorm_kernel<bf16>, dim3(p.rows), dim3(RMSNORM_THREADS), 0, p.launch,
                       p);
}

}  // namespace megaops
