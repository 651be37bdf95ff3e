// Overlap hooks shared by every decode kernel (docs/overlap-design.md, decisions 3 and 4): a small
// POD, TileSync, in each kernel's params. Left at its defaults it does nothing and the kernel
// behaves exactly as in the conventional executor (pdl_wait() before the first activation read).
// Set by the overlap executor, the kernel
//   1. issues the loads of its own constant inputs (weights) first, as under PDL,
//   2. reads the overlap step s (1-based) from device memory once at start,
//   3. instead of pdl_wait(), waits (acquire, watchdog on) until each producer counter reaches
//      s * wait_target_per_step[i],
//   4. computes, and after its last tile signals (release) its own counter once per CTA.
//
// Granularity (v0): whole tensor. A consumer waits for all of its producer's CTAs of this step.
//
// Signal amounts. Every op adds exactly TILE_SYNC_STEP_SUM to its counter per step, however many
// CTAs it runs: CTA i of G adds TILE_SYNC_STEP_SUM / G, CTA 0 also the remainder (each add >= 1
// because G <= TILE_SYNC_STEP_SUM, checked on the host). Why not one unit per CTA: grids depend on
// the batch size, and a new prefill may change the batch while the counters, monotonic and never
// reset (DESIGN rule 3), keep what earlier steps added. With a constant sum per step, after k
// overlap steps every counter holds k * TILE_SYNC_STEP_SUM whatever the batch sizes were, so the
// target of step s is always s * TILE_SYNC_STEP_SUM. Arithmetic wraps modulo 2^32 (after 65536
// steps); tile_count_reached is wrap-safe while a consumer lags by < 2^31, here at most one step.
//
// Memory ordering: see sync/tile_semaphore.cuh. The consumer reads its producer's output with
// ordinary (coherent) loads after the CTA-wide acquire; no kernel here reads an activation through
// ld.global.nc / __ldg / `const __restrict__` (weights may: nobody writes them).
#pragma once

#include <cstdint>

#include "kernels/common.cuh"
#include "sync/tile_semaphore.cuh"

namespace megaops {

constexpr int TILE_SYNC_MAX_WAITS = 2;

// Timeline tracing (`megaops trace`): one record per CTA per op, written by thread 0 when the CTA
// signals: when it began waiting for its producers, when the wait ended (its work began) and when
// its work ended, from %globaltimer (ns), with the SM it ran on. Off (records == null) it costs
// one uniform branch at the wait and one at the signal.
struct TileTraceRecord {
  uint64_t wait_start_ns = 0, wait_end_ns = 0, work_end_ns = 0;
  uint32_t op = 0, block = 0, smid = 0, pad = 0;
};

struct TraceParams {
  TileTraceRecord* records = nullptr;  // null: tracing off
  uint32_t* cursor = nullptr;          // records appended so far (may pass capacity: dropped)
  uint32_t capacity = 0;
};
// What every op adds to its counter per step (see above). A power of two so the remainder is 0
// for power-of-two grids; grids above it are rejected by the overlap executor.
constexpr uint32_t TILE_SYNC_STEP_SUM = 1u << 16;

struct TileSync {
  // Device counter of overlap steps, 1-based for the running step; read once at kernel start.
  // Advanced only by the overlap step's step_advance, after all streams joined.
  const uint32_t* step = nullptr;
  // Producers' counters; null = no wait (then pdl_wait() as in the conventional path).
  const uint32_t* wait_counter[TILE_SYNC_MAX_WAITS] = {nullptr, nullptr};
  uint32_t wait_target_per_step[TILE_SYNC_MAX_WAITS] = {0, 0};
  // This op's counter; null = no signal.
  uint32_t* signal_counter = nullptr;
  WatchdogParams watchdog;
  uint32_t op_id = 0;  // WaitSite::op: index into the executor's op names
  // Trigger the next PDL kernel at the top of the wait instead of after it, so that its CTAs may
  // start (and stream their weights) while this op waits (the overlap executor's rule,
  // ExecutorOptions::overlap_early_trigger_o_proj). Safe as the trigger after the wait is: a
  // successor reads nothing of this op's before its own wait, and it is scheduled only once every
  // CTA of this grid is.
  bool early_trigger = false;
  // Injected random delay before each signal (stress tests); max_delay_ns = 0 (default) is off.
  DelayParams delay;
  TraceParams trace;
};

// What one launch occupies: its CTAs (= the number of tile_sync_signal calls per step, one per
// CTA) and how many of its CTAs fit on one otherwise empty SM (occupancy API). The overlap
// executor sizes CTA budgets from these.
struct KernelFootprint {
  int ctas = 0;
  int blocks_per_sm = 0;
  // The bulk streaming matmul only: its CTAs take row blocks from a ticket counter
  // (StreamSchedule::Dynamic, kernels/matmul_stream.cuh) rather than a fixed range.
  bool dynamic_schedule = false;
  // The streaming matmul only: the weight bytes one CTA's ring holds (its slots of 16 KB).
  int64_t ring_bytes = 0;
};

// Occupancy of `kernel` with `threads` per CTA and `smem` dynamic shared memory.
template <typename Kernel>
cudaError_t kernel_footprint(Kernel kernel, int ctas, int threads, size_t smem,
                             KernelFootprint* out) {
  out->ctas = ctas;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&out->blocks_per_sm, kernel, threads, smem);
}

// Loads the kernel's module now (DESIGN rule 1: never lazily while a consumer spins), and asks
// for the largest shared-memory carveout, so every kernel of an overlap step wants the same
// L1 / shared split and a waiting kernel's CTAs never keep an SM in a split another kernel's CTA
// cannot start in (graph/overlap_budget.h, condition (B)).
template <typename Kernel>
cudaError_t preload_kernel(Kernel kernel) {
  cudaFuncAttributes attr;
  if (const cudaError_t err = cudaFuncGetAttributes(&attr, kernel); err != cudaSuccess) return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared);
}

// The overlap step (0 when the kernel is not synchronised). Call at kernel start, before any wait;
// a relaxed (coherent) load: step_advance of the previous step wrote it, and kernel/graph ordering
// already makes that write visible.
__device__ __forceinline__ uint32_t tile_sync_step(const TileSync& s) {
  return s.step != nullptr ? ld_relaxed_gpu(s.step) : 0u;
}

// Replaces pdl_wait(): waits for every producer counter (CTA-wide, acquire) or, without any,
// falls back to pdl_wait(). Must be reached by all threads of the CTA. With tracing on, thread 0
// stamps the wait's start and end.
namespace detail {

// Thread 0's wait timestamps, kept between tile_sync_wait and tile_sync_signal (one per kernel).
struct TraceStamps {
  uint64_t wait_start_ns, wait_end_ns;
};
__device__ __forceinline__ TraceStamps& trace_stamps() {
  __shared__ TraceStamps stamps;
  return stamps;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

}  // namespace detail

__device__ __forceinline__ void tile_sync_wait_untraced(const TileSync& s, uint32_t step) {
  if (s.early_trigger) pdl_launch_dependents();
  if (s.wait_counter[0] == nullptr) {
    pdl_wait();
    return;
  }
#pragma unroll
  for (int i = 0; i < TILE_SYNC_MAX_WAITS; ++i)
    if (s.wait_counter[i] != nullptr)
      tile_wait_cta(s.wait_counter[i], tile_target(step, s.wait_target_per_step[i]),
                    WaitSite{s.op_id, static_cast<uint32_t>(i)}, s.watchdog);
}

__device__ __forceinline__ void tile_sync_wait(const TileSync& s, uint32_t step) {
  if (s.trace.records == nullptr) {
    tile_sync_wait_untraced(s, step);
    return;
  }
  const uint64_t start = threadIdx.x == 0 ? globaltimer_ns() : 0;
  tile_sync_wait_untraced(s, step);
  if (threadIdx.x == 0) detail::trace_stamps() = {start, globaltimer_ns()};
}

// Appends this CTA's trace record (after a barrier: the CTA's work is done). Every thread.
__device__ __forceinline__ void tile_sync_trace(const TileSync& s) {
  if (s.trace.records == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  const uint64_t end = globaltimer_ns();
  const uint32_t at = atomicAdd(s.trace.cursor, 1u);
  if (at >= s.trace.capacity) return;
  const detail::TraceStamps st = detail::trace_stamps();
  TileTraceRecord r;
  r.wait_start_ns = st.wait_start_ns;
  r.wait_end_ns = st.wait_end_ns;
  r.work_end_ns = end;
  r.op = s.op_id;
  r.block = detail::linear_block_index();
  r.smid = detail::sm_id();
  s.trace.records[at] = r;
}

// This CTA's share of TILE_SYNC_STEP_SUM (see the header comment).
__device__ __forceinline__ uint32_t tile_sync_share() {
  const uint32_t grid = gridDim.x * gridDim.y * gridDim.z;
  const uint32_t share = TILE_SYNC_STEP_SUM / grid;
  return detail::linear_block_index() == 0 ? share + TILE_SYNC_STEP_SUM % grid : share;
}

// Publishes everything this CTA wrote (release, after a CTA barrier) to the op's counter. Call
// once per CTA after its last tile; must be reached by all threads of the CTA, including those
// whose tile function returned early.
__device__ __forceinline__ void tile_sync_signal(const TileSync& s, uint32_t step) {
  tile_sync_trace(s);
  if (s.signal_counter == nullptr) return;
  const uint64_t site = (static_cast<uint64_t>(s.op_id) << 40) ^
                        (static_cast<uint64_t>(step) << 20) ^ detail::linear_block_index();
  random_delay(s.delay, site);
  maybe_delay(s.delay.seed, site);
  tile_signal_cta(s.signal_counter, tile_sync_share());
}

}  // namespace megaops
