// A counter-based random number generator usable on host and device: the value depends only on
// (seed, a, b), so the GPU sampler and the CPU oracle draw identical numbers with no shared state,
// and random weights can be generated for any slice of a tensor in parallel.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MEGAOPS_HOST_DEVICE __host__ __device__
#else
#define MEGAOPS_HOST_DEVICE
#endif

namespace megaops {

// splitmix64 finaliser: a bijective mix with good avalanche.
MEGAOPS_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 64 random bits for (seed, a, b).
MEGAOPS_HOST_DEVICE inline uint64_t counter_random(uint64_t seed, uint64_t a, uint64_t b) {
  return mix64(mix64(seed ^ mix64(a)) ^ b);
}

// Uniform in [0, 1) with 24 bits, exactly representable as float on both sides.
MEGAOPS_HOST_DEVICE inline float counter_uniform(uint64_t seed, uint64_t a, uint64_t b) {
  return static_cast<float>(counter_random(seed, a, b) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace megaops
