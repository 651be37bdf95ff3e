// Greedy token selection as one 64-bit integer maximum, so that any number of threads, warps or
// CTAs can take a row's argmax with atomicMax in any order and agree with the sampler's
// argmax_merge (kernels/sampling.cu): the larger logit wins, the lower index breaks ties, NaN
// never wins, and -0 ties with +0 (float ==). Packed bits of a candidate (logit v at index i):
//   [63:32] order_key(v): a monotone map float -> uint32 (v < w as floats <=> key(v) < key(w)),
//   [31:0]  ~i: the lower index is the larger word.
// 0 is "no candidate": the smallest key of a non-NaN float is order_key(-inf) = 0x007fffff, so a
// candidate never packs to 0. The sampler reads a pack as the token ~low, or 0 for a row whose
// logits were all NaN (argmax_merge's "any valid index").
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/common.cuh"

namespace megaops {

__host__ __device__ __forceinline__ uint32_t greedy_order_key(float x) {
  uint32_t u;
  const float z = x == 0.0f ? 0.0f : x;  // -0 folded onto +0
  memcpy(&u, &z, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The pack of logit v at index i; 0 (no candidate) for NaN.
__host__ __device__ __forceinline__ unsigned long long greedy_pack(float v, int i) {
  if (v != v) return 0ull;
  return (static_cast<unsigned long long>(greedy_order_key(v)) << 32) |
         static_cast<unsigned long long>(~static_cast<uint32_t>(i));
}

// The token a row's pack selects (0 for a row without candidates).
__host__ __device__ __forceinline__ int greedy_unpack_token(unsigned long long pack) {
  return pack == 0ull ? 0 : static_cast<int>(~static_cast<uint32_t>(pack & 0xffffffffull));
}

}  // namespace megaops
