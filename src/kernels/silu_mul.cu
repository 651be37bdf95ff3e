// SwiGLU: out = silu(gate) * up over the fused gate|up projection, 8 outputs per thread per step
// (one 16-byte load of each half for bf16 input, two for fp32 input). The vector width needs
// inter % 8 == 0 and 16-byte aligned buffers (checked by the launcher). Math in fp32, one rounding
// to bf16 at the end. The kernel is instantiated per input type. The arithmetic lives in
// kernels/silu_mul_row.cuh, shared with the matmul that folds this op (kernels/act_fold.cuh), which
// must compute the same bits.
#include <algorithm>

#include "kernels/silu_mul.cuh"
#include "kernels/silu_mul_row.cuh"

namespace megaops {
namespace {

constexpr int SILU_MUL_THREADS = 256;

template <typename T>
__global__ void silu_mul_kernel(SiluMulParams p) {
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  const int64_t total = static_cast<int64_t>(p.m) * (p.inter / 8);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < total;
       v += stride)
    silu_mul_vec<T>(p, v);
  tile_sync_signal(p.sync, step);
}

bool aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

int64_t silu_mul_blocks(const SiluMulParams& p) {
  const int64_t total = static_cast<int64_t>(p.m) * (p.inter / 8);
  // Enough CTAs to fill an H200 several times over; the grid-stride loop covers the rest.
  int64_t blocks = std::min<int64_t>((total + SILU_MUL_THREADS - 1) / SILU_MUL_THREADS, 4096);
  if (p.max_ctas > 0) blocks = std::min<int64_t>(blocks, p.max_ctas);
  return blocks;
}

}  // namespace

cudaError_t silu_mul_footprint(const SiluMulParams& p, KernelFootprint* out) {
  const int blocks = static_cast<int>(silu_mul_blocks(p));
  if (p.gate_up_f32)
    return kernel_footprint(silu_mul_kernel<float>, blocks, SILU_MUL_THREADS, 0, out);
  return kernel_footprint(silu_mul_kernel<bf16>, blocks, SILU_MUL_THREADS, 0, out);
}

cudaError_t preload_silu_mul_kernels() {
  const cudaError_t err = preload_kernel(silu_mul_kernel<float>);
  return err != cudaSuccess ? err : preload_kernel(silu_mul_kernel<bf16>);
}

cudaError_t launch_silu_mul(const SiluMulParams& p) {
  if (p.m < 0 || p.inter <= 0 || p.inter % 8 != 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if ((p.gate_up != nullptr) == (p.gate_up_f32 != nullptr)) return cudaErrorInvalidValue;
  if (!p.out || !aligned16(p.out) || (p.gate_up && !aligned16(p.gate_up)) ||
      (p.gate_up_f32 && !aligned16(p.gate_up_f32)))
    return cudaErrorInvalidValue;
  if (p.max_ctas < 0) return cudaErrorInvalidValue;
  const int64_t blocks = silu_mul_blocks(p);
  if (p.gate_up_f32)
    return launch_kernel(silu_mul_kernel<float>, dim3(static_cast<unsigned>(blocks)),
                         dim3(SILU_MUL_THREADS), 0, p.launch, p);
  return launch_kernel(silu_mul_kernel<bf16>, dim3(static_cast<unsigned>(blocks)),
                       dim3(SILU_MUL_THREADS), 0, p.launch, p);
}

}  // namespace megaops
