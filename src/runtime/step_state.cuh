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
  // Optional: the step's tokens ([b], what the sampler wrote) copied into host memory mapped into
  // the device (pinned, [2, tokens_ld]), into half positions[0] % 2 (the parity of the position
  // the step fed, before it advances), so the host reads a step's tokens once the step is done
  // without a copy on the stream between steps, and the step after it may already run.
  const int32_t* tokens = nullptr;
  int32_t* host_tokens = nullptr;
  int tokens_ld = 0;
  // Overlap step only: the overlap step counter (TileSync::step of every kernel of the step),
  // incremented with `step`; null in the conventional step. step_advance must be the last kernel
  // of the step, after all streams joined, so that no kernel of step s reads s + 1.
  uint32_t* overlap_step = nullptr;
  // Overlap step only: every op's tile counter, set to this step's target (overlap_step x
  // TILE_SYNC_STEP_SUM) before the step advances. The ops that signalled have brought theirs there
  // already; the others (ordered by stream or barrier, graph/overlap_budget.h) must not fall
  // behind, since another plan or batch may wait on them.
  uint32_t* counters = nullptr;
  int counters_n = 0;
  TileSync sync;  // overlap hooks (the step's ops have all joined before it: no wait needed)
  LaunchOptions launch;
};

cudaError_t launch_step_advance(const StepAdvanceParams& p);
cudaError_t preload_step_state_kernels();

// Copies `bytes` (a multiple of 4) from src to dst: the paged runner's step inputs, from pinned
// host memory mapped into the device to the device region the step reads, at the head of a
// captured step. A kernel rather than a memcpy node, so the step's first kernel (a PDL launch
// where the plan asks for PDL) follows a kernel and its wait covers the copy. src and dst
// 16-byte aligned (pinned pages and device allocations are). The host must not write src again
// before the copy has run.
struct CopyStepInputsParams {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
  LaunchOptions launch;
};

cudaError_t launch_copy_step_inputs(const CopyStepInputsParams& p);

}  // namespace megaops
