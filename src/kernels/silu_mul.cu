// SwiGLU: out = silu(gate) * up over the fused gate|up projection, 8 outputs per thread per step
// (one 16-byte load of each half for bf16 input, two for fp32 input). The vector width needs
// inter % 8 == 0 and 16-byte aligned buffers (checked by the launcher). Math in fp32, one rounding
// to bf16 at the end. The kernel is instantiated per input type. The arithmetic lives in
// kernels/silu_mul_row.cuh, shared with the matmul that folds this op (kernels/act_fold.cuh), which
// must compute the same bits.
#include <algorithm>
#include <type_traits>

#include "kernels/silu_mul.cuh"
#include "kernels/silu_mul_row.cuh"

namespace megaops {
namespace {

constexpr int SILU_MUL_THREADS = 256;

// The gate_up input of type T: p.gate_up for bf16, p.gate_up_f32 for float.
template <typename T>
__device__ __forceinline__ const T* gate_up_input(const SiluMulParams& p) {
  if constexpr (std::is_same<T, float>::value) {
    return p.gate_up_f32;
  } else {
    static_assert(std::is_same<T, bf16>::value, "gate_up is bf16 or fp32");
    return p.gate_up;
  }
}

// 8 consecutive elements as 4 float2 pairs: one 16-byte load for bf16, two for fp32.
__device__ __forceinline__ void load8(const bf16* src, float2* f) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __bfloat1622float2(h[i]);
}
__device__ __forceinline__ void load8(const float* src, float2* f) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  f[0] = make_float2(a.x, a.y), f[1] = make_float2(a.z, a.w);
  f[2] = make_float2(b.x, b.y), f[3] = make_float2(b.z, b.w);
}

// One tile = 8 consecutive outputs of one row; vec indexes [m, inter / 8] in row-major order. T is
// the input type (bf16: p.gate_up, float: p.gate_up_f32).
template <typename T>
__device__ void silu_mul_vec(const SiluMulParams& p, int64_t vec) {
  const int64_t vecs_per_row = p.inter / 8;
  const int64_t row = vec / vecs_per_row;
  const int64_t col = (vec - row * vecs_per_row) * 8;
  const T* gate = gate_up_input<T>(p) + row * 2 * p.inter + col;
  float2 g[4], u[4];
  load8(gate, g);
  load8(gate + p.inter, u);
  *reinterpret_cast<uint4*>(p.out + row * p.inter + col) = silu_mul8(g, u);
}

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
