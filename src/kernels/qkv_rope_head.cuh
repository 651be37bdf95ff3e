// One head of one token of qkv_rope (kernels/qkv_rope.cuh): its constants and the warp that
// computes it, shared by qkv_rope's kernel (kernels/qkv_rope.cu) and a persistent region's
// qkv_rope task (kernels/persistent_region_ops.cu), so both run the same code. The arithmetic
// itself is kernels/qkv_rope_row.cuh's.
#pragma once

#include <type_traits>

#include "kernels/qkv_rope.cuh"
#include "kernels/qkv_rope_row.cuh"

namespace megaops {

#if defined(__CUDACC__)

__device__ __forceinline__ int qkv_rope_head_index(const QkvRopeParams& p, int64_t item) {
  const int heads_per_token = p.num_heads + 2 * p.num_kv_heads;
  return static_cast<int>(item % heads_per_token);
}

// The qkv input of type T: p.qkv for bf16, p.qkv_f32 for float.
template <typename T>
__device__ __forceinline__ const T* qkv_rope_input(const QkvRopeParams& p) {
  if constexpr (std::is_same<T, float>::value) {
    return p.qkv_f32;
  } else {
    static_assert(std::is_same<T, bf16>::value, "qkv is bf16 or fp32");
    return p.qkv;
  }
}

// Reads only weights, never a predecessor's output: may run before pdl_wait().
__device__ __forceinline__ QkvRopeConsts qkv_rope_load_consts(const QkvRopeParams& p,
                                                              int64_t item) {
  const int head = qkv_rope_head_index(p, item);
  const bool is_q = head < p.num_heads;
  const bool is_v = head >= p.num_heads + p.num_kv_heads;
  const bf16* norm_w = is_v ? nullptr : (is_q ? p.q_norm : p.k_norm);
  return qkv_rope_row_consts(p.inv_freq, norm_w, p.head_dim, !is_v);
}

// One tile = one head of one token; `item` indexes [t, num_heads + 2 * num_kv_heads]. Must be
// called by a whole warp, after the qkv producer has finished. T is the qkv input type (bf16:
// p.qkv, float: p.qkv_f32). The arithmetic is kernels/qkv_rope_row.cuh's, which the attention
// that folds this kernel (kernels/rope_fold.cuh) runs too.
template <typename T>
__device__ __forceinline__ void qkv_rope_head(const QkvRopeParams& p, int64_t item,
                                              const QkvRopeConsts& c) {
  const int heads_per_token = p.num_heads + 2 * p.num_kv_heads;
  const int64_t tok = item / heads_per_token;
  const int head = static_cast<int>(item - tok * heads_per_token);
  const int hd = p.head_dim;
  const bool is_q = head < p.num_heads;
  const bool is_v = head >= p.num_heads + p.num_kv_heads;
  const bool has_norm = !is_v && (is_q ? p.q_norm : p.k_norm) != nullptr;

  const T* src = qkv_rope_input<T>(p) + (tok * heads_per_token + head) * hd;
  const int pos = p.positions[tok];
  float2 lo[QKV_ROPE_GROUPS], hi[QKV_ROPE_GROUPS];
  qkv_rope_row<T>(src, hd, c, has_norm, !is_v, p.eps, pos, lo, hi);

  bf16* dst;
  if (is_q) {
    dst = p.q_out + (tok * p.num_heads + head) * hd;
  } else {
    // A position outside the cache is skipped rather than written out of bounds.
    if (pos < 0 || pos >= p.max_seq) return;
    const int kv_head = is_v ? head - p.num_heads - p.num_kv_heads : head - p.num_heads;
    const int64_t slot = p.slots[tok];
    const int64_t offset = (kv_row(p.kv, slot, pos, p.max_seq) * p.num_kv_heads + kv_head) * hd;
    dst = (is_v ? p.v_cache : p.k_cache) + offset;
  }
  qkv_rope_row_store(dst, hd, lo, hi);
}

#endif  // __CUDACC__

}  // namespace megaops
