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
