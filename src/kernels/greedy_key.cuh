// Greedy token selection as one 64-bit integer maximum, so that any number of threads, warps or
// CTAs can take a row's argmax with atomicMax in any order and agree with the sampler's
// argmax_merge (kernels/sampling.cu): the larger logit wins, the lower index breaks ties, and -0
// ties with +0 (float ==). Packed bits of a finite candidate (logit v at index i):
//   [63:32] order_key(v): a monotone map float -> uint32 (v < w as floats <=> key(v) < key(w)),
//   [31:0]  ~i: the lower index is the larger word.
// 0 is "no candidate": the smallest key of a finite float is order_key(-FLT_MAX) > 0, so a
// candidate never packs to 0. A non-finite logit (NaN or +-Inf) packs to all ones, above every
// finite pack (whose key is at most order_key(FLT_MAX) = 0xff7fffff), so one such logit anywhere
// in a row makes the row's maximum GREEDY_PACK_NONFINITE whatever the order of the atomicMax: the
// row's logits are broken and it gets no token (NONFINITE_LOGITS_TOKEN), never a guess.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/tokens.h"
#include "kernels/common.cuh"

namespace megaops {

constexpr unsigned long long GREEDY_PACK_NONFINITE = ~0ull;

__host__ __device__ __forceinline__ uint32_t greedy_order_key(float x) {
  uint32_t u;
  const float z = x == 0.0f ? 0.0f : x;  // -0 folded onto +0
  memcpy(&u, &z, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__host__ __device__ __forceinline__ bool logit_is_finite(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return (u & 0x7f800000u) != 0x7f800000u;
}

// The pack of logit v at index i; GREEDY_PACK_NONFINITE for NaN or +-Inf.
__host__ __device__ __forceinline__ unsigned long long greedy_pack(float v, int i) {
  if (!logit_is_finite(v)) return GREEDY_PACK_NONFINITE;
  return (static_cast<unsigned long long>(greedy_order_key(v)) << 32) |
         static_cast<unsigned long long>(~static_cast<uint32_t>(i));
}

// The token a row's pack selects: NONFINITE_LOGITS_TOKEN for a row with a non-finite logit, 0 for
// a row without candidates (an empty row).
__host__ __device__ __forceinline__ int greedy_unpack_token(unsigned long long pack) {
  if (pack == GREEDY_PACK_NONFINITE) return NONFINITE_LOGITS_TOKEN;
  return pack == 0ull ? 0 : static_cast<int>(~static_cast<uint32_t>(pack & 0xffffffffull));
}

}  // namespace megaops
