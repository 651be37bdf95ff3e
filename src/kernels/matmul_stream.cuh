// The weight-streaming matmul for decode at batch 1-2 (kernels/matmul_stream.cu): y = x · Wᵀ with
// W streamed through a ring of shared-memory stages by cp.async, so that each SM keeps ~100 KB of
// weights in flight without spending registers on them. Reached through MatmulContext
// (kernels/matmul.cuh), which validates the parameters first; declared here for matmul.cu only.
// Two versions: the ring of cp.async stages (any sm_80+ GPU) and, on sm_90, bulk copies into the
// ring from a producer warp (MatmulContext's MEGAOPS_STREAM_KERNEL).
#pragma once

#include <cstdint>

#include "kernels/act_fold.cuh"
#include "kernels/common.cuh"
#include "kernels/matmul_dispatch.h"
#include "kernels/norm_fold.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct StreamMatmulArgs {
  const bf16* x;  // [m, ldx]; unused with a fold on
  int64_t ldx;
  const bf16* w;  // [n, k]
  void* y;        // [m, ldy], bf16 or fp32 (y_f32)
  int64_t ldy;
  int m, n, k;
  bool y_f32;
  TileSync sync;
  // On (fold.on()): x is not read but computed in the prologue from the fold's residual rows
  // (row stride k), with add_rmsnorm's arithmetic (kernels/norm_fold.cuh). Bulk version only.
  NormFold fold;
  // On (silu_fold.on()): x is not read but computed in the prologue from the gate|up rows (row
  // stride 2k), with silu_mul's arithmetic (kernels/act_fold.cuh). Bulk version only; at most one
  // of fold and silu_fold.
  SiluMulFold silu_fold;
  // On (silu_out.on()): y is not written; the epilogue writes bf16(silu(gate) * up) of the fp32
  // row sums (kernels/act_fold.cuh). Bulk version only; n = 2 * silu_out.inter.
  SiluMulEpilogue silu_out;
  // Set: the greedy argmax of each batch row's sums, packed (kernels/greedy_key.cuh), folded by
  // atomicMax into argmax[b] (MatmulParams::argmax_out). Bulk version only; y_f32, not with
  // silu_out.
  unsigned long long* argmax = nullptr;
  // The order a CTA takes its row blocks in (bulk version, m = 1; kernels/matmul_dispatch.h):
  // Static, a contiguous range fixed by its index; Dynamic, its first block by its index and the
  // rest from a ticket counter as it finishes, so CTAs on faster SMs take more; Auto, Dynamic
  // where the launch has many row blocks a CTA (matmul_stream_dynamic). Dynamic needs `sched`:
  // two zeroed unsigned counters in device memory that no other launch uses while this one runs
  // (the launch's last CTA zeroes them again); without it, Static.
  StreamSchedule schedule = StreamSchedule::Auto;
  unsigned* sched = nullptr;
  // Bulk version: the weight copies carry an L2 evict_first policy (else evict_normal), so that
  // the weights, read once a step, leave L2 to what is read again: the KV cache, the activations,
  // the norms' gains. Measured (one binary, rows alternated, ms/token at batch 1, conventional +
  // PDL / chain; docs/perf-notes.md, "Greedy sampling in the LM head's epilogue, the weights' L2
  // evict_first policy"): llama3.2-1b 0.882 / 0.763 -> 0.863 / 0.755, qwen3-0.6b 0.819 / 0.713
  // -> 0.785 / 0.695, llama3.1-8b 4.23-4.25 / 3.91-3.92 -> 4.14-4.16 / 3.90-3.91, qwen3-8b 4.38 /
  // 4.02-4.03 -> 4.29 / 4.03 (without the policy: no hint at all).
  bool l2_evict_first = false;
};

// Launches (footprint == null) or describes the launch (footprint set). The caller has validated
// the parameters (MatmulContext). `stages` (ring slots of 16 KB) = 0 takes the default, 4; any
// value is clamped to what the GPU's shared memory allows. Shapes that do not fit
// (matmul_stream_fits) get cudaErrorInvalidValue.
// bulk: the bulk-copy version (sm_90 only, else cudaErrorNotSupported; its default ring is 4
// slots): a producer warp fills the ring with one cp.async.bulk per 2 KB row slice, and the
// consumer warps reuse each x value for four rows (matmul_stream.cu). Only the bulk version folds
// a norm or the SwiGLU (a.fold or a.silu_fold on): the ring version returns cudaErrorNotSupported
// for either; both on is cudaErrorInvalidValue.
cudaError_t launch_matmul_stream(const StreamMatmulArgs& a, int max_ctas, int stages,
                                 const LaunchOptions& opt, KernelFootprint* footprint,
                                 bool bulk = false);

// True when the current device runs the bulk-copy version (compute capability 9.x).
bool matmul_stream_bulk_supported();

// Loads every instantiation and raises its dynamic shared-memory limit (outside stream capture).
cudaError_t preload_matmul_stream();

}  // namespace megaops
