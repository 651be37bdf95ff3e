// How the next token is drawn from the logits: the parameters the GPU sampler
// (kernels/sampling.cuh, through ExecutorOptions::sampling) and the CPU oracle (ref::sample,
// reference/ops.h) share, so both define one distribution.
#pragma once

#include <cstdint>

namespace megaops {

// Sampling parameters. temperature <= 0 means greedy. top_k <= 0 disables top-k; top_p >= 1
// disables top-p.
struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

}  // namespace megaops
