// The arithmetic of one head of the QKV post-processing (Qwen3's per-head q/k RMSNorm, RoPE, the
// bf16 rounding of the outputs), shared by qkv_rope (kernels/qkv_rope.cu) and the decode attention
// that folds it into its prologue (kernels/rope_fold.cuh, the per-query-head kernel of
// kernels/attention.cu). The folded step must compute the same bits as the unfolded one, so both
// kernels run every floating-point operation of a head here, in the same order, on the same thread
// mapping: one warp per head, lane l owning the rotate_half pairs (i, i + hd/2) for
// i in {2l, 2l + 1} + 64g, g < QKV_ROPE_GROUPS; it accumulates its squares group by group and the
// norm's sum is one xor-butterfly over the warp.
//
// Every operation is an explicit round-to-nearest intrinsic (__fmaf_rn, __fmul_rn, __fadd_rn,
// __fdiv_rn): neither nvcc nor ptxas contracts those, so no compiler choice can give the two
// kernels different FMA patterns. The pattern is the one the compilers chose for qkv_rope's plain
// expressions before they moved here (HEAD 0001be4's machine code, sm_80 and sm_90a, read with
// nvdisasm): the squares of a group as fma(hi.y², fma(hi.x², fma(lo.x², lo.y * lo.y))) added to a
// sum that starts at 0, the butterfly's adds, one div.rn, + eps and one rsqrt.approx; the scale
// as x * (inv_rms * w); the angle as the product pos * inv_freq; the rotation as
// fma(a, cos, -(b * sin)) (ptxas's contraction of a * cos - b * sin) and fma(a, sin, b * cos)
// (nvcc's of b * cos + a * sin). qkv_rope's machine code after the move has the same
// floating-point instructions (opcodes, modifiers, negations and constants, counted per kernel on
// both architectures), scheduled differently: the squares are now summed in the norm's branch.
#pragma once

#include "kernels/common.cuh"

namespace megaops {

constexpr int QKV_ROPE_MAX_HEAD_DIM = 256;
// Pair groups per lane: each group is two adjacent pairs, 64 pair indices per warp step.
constexpr int QKV_ROPE_GROUPS = QKV_ROPE_MAX_HEAD_DIM / 2 / 64;

#if defined(__CUDACC__)

// The constant inputs of one head (inverse frequencies, norm weights) for this lane's pairs.
struct QkvRopeConsts {
  float2 inv_freq[QKV_ROPE_GROUPS], w_lo[QKV_ROPE_GROUPS], w_hi[QKV_ROPE_GROUPS];
};

// This lane's constants of a head: inverse frequencies when `rope` (q and k heads), the norm's
// weights when norm_w is set (1 otherwise). Reads only weights: may run before pdl_wait().
__device__ __forceinline__ QkvRopeConsts qkv_rope_row_consts(const float* inv_freq,
                                                             const bf16* norm_w, int head_dim,
                                                             bool rope) {
  const int lane = threadIdx.x % 32;
  const int half = head_dim / 2;
  QkvRopeConsts c;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    c.inv_freq[g] = make_float2(0.f, 0.f);
    c.w_lo[g] = c.w_hi[g] = make_float2(1.f, 1.f);
    if (i < half) {
      if (rope) c.inv_freq[g] = make_float2(inv_freq[i], inv_freq[i + 1]);
      if (norm_w) {
        c.w_lo[g] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(norm_w + i));
        c.w_hi[g] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(norm_w + half + i));
      }
    }
  }
  return c;
}

// Elements i and i + 1 (i even) as floats: one 4-byte load for bf16, one 8-byte load for fp32.
__device__ __forceinline__ float2 qkv_rope_load2(const bf16* src, int i) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + i));
}
__device__ __forceinline__ float2 qkv_rope_load2(const float* src, int i) {
  return *reinterpret_cast<const float2*>(src + i);
}

// This lane's pairs of the head row at src (head_dim elements of type T); pairs past hd/2 are 0.
template <typename T>
__device__ __forceinline__ void qkv_rope_row_load(const T* src, int head_dim,
                                                  float2 (&lo)[QKV_ROPE_GROUPS],
                                                  float2 (&hi)[QKV_ROPE_GROUPS]) {
  const int lane = threadIdx.x % 32;
  const int half = head_dim / 2;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    lo[g] = hi[g] = make_float2(0.f, 0.f);
    if (i < half) {
      lo[g] = qkv_rope_load2(src, i);
      hi[g] = qkv_rope_load2(src, half + i);
    }
  }
}

// The per-head RMSNorm of the row (lo, hi): x * (1 / sqrt(mean(x²) + eps) * w). Must be called by
// a whole warp (the sum of squares is reduced over it).
__device__ __forceinline__ void qkv_rope_row_norm(float2 (&lo)[QKV_ROPE_GROUPS],
                                                  float2 (&hi)[QKV_ROPE_GROUPS], int head_dim,
                                                  float eps, const QkvRopeConsts& c) {
  float sumsq = 0.0f;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const float2 a = lo[g], b = hi[g];
    const float s =
        __fmaf_rn(b.y, b.y, __fmaf_rn(b.x, b.x, __fmaf_rn(a.x, a.x, __fmul_rn(a.y, a.y))));
    sumsq = __fadd_rn(sumsq, s);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    sumsq = __fadd_rn(sumsq, __shfl_xor_sync(0xffffffffu, sumsq, off));
  const float inv_rms = rsqrtf(__fadd_rn(__fdiv_rn(sumsq, static_cast<float>(head_dim)), eps));
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    lo[g].x = __fmul_rn(lo[g].x, __fmul_rn(inv_rms, c.w_lo[g].x));
    lo[g].y = __fmul_rn(lo[g].y, __fmul_rn(inv_rms, c.w_lo[g].y));
    hi[g].x = __fmul_rn(hi[g].x, __fmul_rn(inv_rms, c.w_hi[g].x));
    hi[g].y = __fmul_rn(hi[g].y, __fmul_rn(inv_rms, c.w_hi[g].y));
  }
}

// RoPE (rotate_half) of the row (lo, hi) at position pos. The angle is formed in fp32 exactly as
// the reference does; sincosf (not __sincosf) keeps full accuracy for the large arguments of long
// contexts.
__device__ __forceinline__ void qkv_rope_row_rotate(float2 (&lo)[QKV_ROPE_GROUPS],
                                                    float2 (&hi)[QKV_ROPE_GROUPS], int pos,
                                                    const QkvRopeConsts& c) {
  const float fpos = static_cast<float>(pos);
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    float s0, c0, s1, c1;
    sincosf(__fmul_rn(fpos, c.inv_freq[g].x), &s0, &c0);
    sincosf(__fmul_rn(fpos, c.inv_freq[g].y), &s1, &c1);
    const float2 a = lo[g], b = hi[g];
    lo[g] = make_float2(__fmaf_rn(a.x, c0, -__fmul_rn(b.x, s0)),
                        __fmaf_rn(a.y, c1, -__fmul_rn(b.y, s1)));
    hi[g] =
        make_float2(__fmaf_rn(a.x, s0, __fmul_rn(b.x, c0)), __fmaf_rn(a.y, s1, __fmul_rn(b.y, c1)));
  }
}

// The row (lo, hi) rounded to bf16 at dst (head_dim elements, 4-byte aligned).
__device__ __forceinline__ void qkv_rope_row_store(bf16* dst, int head_dim,
                                                   const float2 (&lo)[QKV_ROPE_GROUPS],
                                                   const float2 (&hi)[QKV_ROPE_GROUPS]) {
  const int lane = threadIdx.x % 32;
  const int half = head_dim / 2;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    if (i < half) {
      *reinterpret_cast<__nv_bfloat162*>(dst + i) = __floats2bfloat162_rn(lo[g].x, lo[g].y);
      *reinterpret_cast<__nv_bfloat162*>(dst + half + i) = __floats2bfloat162_rn(hi[g].x, hi[g].y);
    }
  }
}

// The whole transform of one head row at src: load, the norm when norm_w is given, RoPE when
// `rope` (q and k heads; v heads are copied). c from qkv_rope_row_consts with the same norm_w and
// rope. Must be called by a whole warp.
template <typename T>
__device__ __forceinline__ void qkv_rope_row(const T* src, int head_dim, const QkvRopeConsts& c,
                                             bool norm, bool rope, float eps, int pos,
                                             float2 (&lo)[QKV_ROPE_GROUPS],
                                             float2 (&hi)[QKV_ROPE_GROUPS]) {
  qkv_rope_row_load(src, head_dim, lo, hi);
  if (norm) qkv_rope_row_norm(lo, hi, head_dim, eps, c);
  if (rope) qkv_rope_row_rotate(lo, hi, pos, c);
}

#endif  // __CUDACC__

}  // namespace megaops
