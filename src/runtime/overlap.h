// The multi-stream tile-overlap backend's types (docs/overlap-design.md): the per-layer buffers of
// the overlap step, one op of it (how it launches, its budget, stream and waits) and everything
// the backend owns once set up. The functions are ExecutorCore's (runtime/executor_core.h):
// setup and recording in overlap.cu, the op list in overlap_ops.cu, the chain's rules in
// pdl_chain.cu.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"
#include "runtime/persistent.h"
#include "sync/error_record.h"

namespace megaops {

// Per-layer activations of the overlap step: one output buffer per op instance
// (docs/overlap-design.md decision 2), sized for max_batch rows.
struct OverlapLayer {
  bf16* n1 = nullptr;     // input_layernorm output
  float* qkv = nullptr;   // qkv_proj output
  bf16* q = nullptr;      // qkv_rope's q (k and v go to the layer's cache)
  float* ws = nullptr;    // attention split partials
  bf16* attn = nullptr;   // attention output
  float* o = nullptr;     // o_proj output
  bf16* n2 = nullptr;     // post_attention_layernorm output
  float* gu = nullptr;    // gate_up_proj output
  bf16* act = nullptr;    // silu_mul output
  float* down = nullptr;  // down_proj output
};

// One op of the overlap step. footprint/launch take the op's CTA cap (0 = the kernel's default
// grid; ignored by kernels whose grid is fixed by their shape).
struct OverlapOp {
  std::string name;
  bool cappable = false;
  std::function<cudaError_t(int cap, KernelFootprint*)> footprint;
  // pdl: launched as a programmatic dependent of the kernel before it on the stream (the chain).
  std::function<cudaError_t(int cap, const TileSync&, bool pdl, cudaStream_t)> launch;
  int cap = 0;   // chosen budget (launch argument)
  int ctas = 0;  // CTAs launched with that budget
  // A vendor (cuBLASLt) kernel: stream-ordered below, or with chunks behind a gate
  // (kernels/tile_gate.cuh) whose one CTA, while it waits, is its footprint; a barrier follows it
  // (graph/overlap_budget.h).
  bool opaque = false;
  int segment = 0;  // ops of one segment may be live together (graph/overlap_budget.h)
  // An opaque op ordered by its stream instead of a gate: it is issued last in its segment, on
  // the stream of the op before it (its producer), so the stream's order is the wait; it signals
  // nothing, because the barrier after it is what the next op waits for.
  bool stream_ordered = false;
  // How it is issued and ordered (graph/overlap_budget.h, overlap_sync_plan): its stream (-1: the
  // executor's, after the join), whether it waits for op k - 1's counter and whether it signals.
  int stream = 0;
  bool waits = false;
  bool signals = false;
  // The O projection: its weight bytes, for the early-trigger rule (build_overlap_ops); 0
  // elsewhere.
  int64_t o_proj_weight_bytes = 0;
  // Its kernel triggers the next PDL kernel at the top of its wait (TileSync::early_trigger).
  bool early_trigger = false;
  // A norm or SiLU·mul folded into the matmul after it, or qkv_rope into the attention after it
  // (ExecutorOptions::overlap_fold_norms, overlap_fold_silu, overlap_fold_rope): it keeps its
  // name and counter id but launches nothing; its consumer waits where it would have.
  bool folded = false;
  // What a persistent region's task runs for this op (its launch params), or why it cannot run in
  // one (runtime/persistent.h).
  RegionOp region;
  std::string region_refusal;
  // In a persistent region: the region's launch replaces the op's; the region's first op holds
  // the region (set up by build_persistent_regions).
  bool in_persistent = false;
  std::shared_ptr<PersistentRegionRun> persistent;
};

// Everything the overlap backend owns, set up on first use (so a conventional executor allocates
// and loads nothing more than before).
struct OverlapState {
  std::vector<cudaStream_t> streams;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // One monotonic counter per op id, zeroed once here and never again (DESIGN rule 3).
  uint32_t* counters = nullptr;
  // Overlap steps, 1-based for the running step: set to 1 once, advanced only by the overlap
  // step's step_advance. Separate from the sampler's step (which prefill resets), so counters and
  // targets stay consistent across prefills and conventional steps, which touch neither.
  uint32_t* step = nullptr;
  std::unique_ptr<WatchdogRecord> watchdog;
  std::vector<std::string> op_names;
  // Region of each op (ExecutorOptions::overlap_regions; all 0 without regions) and whether it is
  // serial; step_advance (the last op) runs after the join, outside every region.
  std::vector<int> region_of;
  std::vector<char> region_serial;
  std::vector<char> region_persistent;  // a persistent region (also serial for the budgets)
  float* resid = nullptr;  // residual stream [max_batch, h], updated in place by the norms
  // With norms folded into their matmuls: the second residual buffer. A folded norm's matmul
  // reads one and its CTA 0 writes the sum into the other (its other CTAs still read the first).
  float* resid_alt = nullptr;
  std::vector<OverlapLayer> layers;
  bf16* final_normed = nullptr;
  int sms = 0;
  // Ops with budgets, per batch size (budgets depend on the grids, which depend on b).
  std::map<int, std::vector<OverlapOp>> plans;
  // Timeline tracing (ExecutorOptions::overlap_trace_capacity > 0).
  TileTraceRecord* trace_records = nullptr;
  uint32_t* trace_cursor = nullptr;
};

}  // namespace megaops
