// Device-side per-step state of a decode batch and the kernel that advances it at the end of each
// captured step: positions, context lengths and the sampler's step counter only grow, so a CUDA
// graph replays any number of times with no host update.
#pragma once

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct StepAdvanceParams {
  int32_t* positions = nullptr;  // [b]: position of the token fed next
  int32_t* ctx_lens = nullptr;   // [b]: positions + 1
  uint32_t* step = nullptr;      // scalar
  int b = 0;
  // Overlap step only: the overlap step counter (TileSync::step of every kernel of the step),
  // incremented with `step`; null in the conventional step. step_advance must be the last kernel
  // of the step, after all streams joined, so that no kernel of step s reads s + 1.
  uint32_t* overlap_step = nullptr;
  TileSync sync;  // overlap hooks: waits for the sampler's counter (belt and braces to the join)
  LaunchOptions launch;
};

cudaError_t launch_step_advance(const StepAdvanceParams& p);
cudaError_t preload_step_state_kernels();

}  // namespace megaops
