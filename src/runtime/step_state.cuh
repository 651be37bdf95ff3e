// Device-side per-step state of a decode batch and the kernel that advances it at the end of each
// captured step: positions, context lengths and the sampler's step counter only grow, so a CUDA
// graph replays any number of times with no host update.
#pragma once

#include "kernels/common.cuh"

namespace megaops {

struct StepAdvanceParams {
  int32_t* positions = nullptr;  // [b]: position of the token fed next
  int32_t* ctx_lens = nullptr;   // [b]: positions + 1
  uint32_t* step = nullptr;      // scalar
  int b = 0;
  LaunchOptions launch;
};

cudaError_t launch_step_advance(const StepAdvanceParams& p);

}  // namespace megaops
