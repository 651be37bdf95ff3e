// The arithmetic of the SwiGLU activation, bf16(silu(g) * u), shared by silu_mul
// (kernels/silu_mul.cu) and the matmul that folds it into its prologue (kernels/act_fold.cuh, the
// bulk streaming matmul in kernels/matmul_stream.cu). The folded step must compute the same bits
// as the unfolded one; the operation is elementwise, so any thread may compute any element, as
// long as both kernels run the same operations on it, which they do here.
//
// The pattern is the one nvcc chose for silu_mul's plain expressions before they moved here (its
// PTX for sm_80 and sm_90a): expf inlined, 1 + e^-x, one div.rn, one mul, one cvt.rn to bf16. The
// division and the product are explicit round-to-nearest intrinsics (__fdiv_rn, __fmul_rn), which
// nvcc never contracts. 1.0f + expf(-x) stays a plain sum: nvcc contracts it with expf's last step
// (e^-x = ex2(f) * 2^j, the scale a power of two) into fma(ex2(f), 2^j, 1), and __fadd_rn would
// forbid that and change silu_mul's code. Either choice gives the same bits: the product by 2^j is
// exact unless it overflows (inf either way) or falls below 2^-126 (then 1 + it rounds to 1 either
// way), and nothing else in silu(x) can contract. So no compiler choice can make the two kernels
// differ, and silu_mul's code is what it was.
#pragma once

#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/silu_mul.cuh"

namespace megaops {

#if defined(__CUDACC__)

// bf16(silu(g) * u) of two elements: (g.x, u.x) in the low half, (g.y, u.y) in the high half.
__device__ __forceinline__ __nv_bfloat162 silu_mul2(float2 g, float2 u) {
  // silu(x) = x / (1 + e^-x): for x -> -inf, e^-x -> inf and the quotient -> -0, no NaN.
  const float sx = __fdiv_rn(g.x, 1.0f + expf(-g.x));
  const float sy = __fdiv_rn(g.y, 1.0f + expf(-g.y));
  return __floats2bfloat162_rn(__fmul_rn(sx, u.x), __fmul_rn(sy, u.y));
}

// bf16(silu(g) * u) of 8 consecutive elements given as 4 pairs, packed as 8 bf16 in element order.
__device__ __forceinline__ uint4 silu_mul8(const float2 (&g)[4], const float2 (&u)[4]) {
  uint4 o_raw;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&o_raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = silu_mul2(g[i], u[i]);
  return o_raw;
}

// ---- silu_mul's element vectors ----

// The gate_up input of type T: p.gate_up for bf16, p.gate_up_f32 for float.
template <typename T>
__device__ __forceinline__ const T* silu_mul_input(const SiluMulParams& p) {
  if constexpr (std::is_same<T, float>::value) {
    return p.gate_up_f32;
  } else {
    static_assert(std::is_same<T, bf16>::value, "gate_up is bf16 or fp32");
    return p.gate_up;
  }
}

// 8 consecutive elements as 4 float2 pairs: one 16-byte load for bf16, two for fp32.
__device__ __forceinline__ void silu_mul_load8(const bf16* src, float2* f) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __bfloat1622float2(h[i]);
}
__device__ __forceinline__ void silu_mul_load8(const float* src, float2* f) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  f[0] = make_float2(a.x, a.y), f[1] = make_float2(a.z, a.w);
  f[2] = make_float2(b.x, b.y), f[3] = make_float2(b.z, b.w);
}

// One tile = 8 consecutive outputs of one row (silu_mul's kernel; a persistent region's task); vec
// indexes [m, inter / 8] in row-major order. T is the input type (bf16: p.gate_up, float:
// p.gate_up_f32).
template <typename T>
__device__ __forceinline__ void silu_mul_vec(const SiluMulParams& p, int64_t vec) {
  const int64_t vecs_per_row = p.inter / 8;
  const int64_t row = vec / vecs_per_row;
  const int64_t col = (vec - row * vecs_per_row) * 8;
  const T* gate = silu_mul_input<T>(p) + row * 2 * p.inter + col;
  float2 g[4], u[4];
  silu_mul_load8(gate, g);
  silu_mul_load8(gate + p.inter, u);
  *reinterpret_cast<uint4*>(p.out + row * p.inter + col) = silu_mul8(g, u);
}

#endif  // __CUDACC__

}  // namespace megaops
