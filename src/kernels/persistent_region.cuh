// The device side of a persistent region (docs/persistent-regions.md): one resident launch of
// num_ctas CTAs walks a static tile schedule built on the host (graph/region_schedule.h) and
// uploaded in its packed form (core/region_pack.h). CTA c takes the tasks of its list in order;
// for each, warp 0 waits (acquire, back-off, watchdog; a lane a semaphore) until every
// (semaphore, target) of the task's waits is reached for the running step, the whole CTA runs the
// task's body, and thread 0 adds 1 (release) to each of the task's signal semaphores.
//
// The loop knows tasks, semaphores and targets, nothing of ops: the body is a callable the kernel
// passes in (`body(op, tile, task)`, op an index into the step graph's ops), with an optional
// prologue called before the waits. The probe kernel below records when and where each task ran;
// the op regions (kernels/persistent_region_ops.cuh) call the standalone kernels' per-tile device
// functions.
//
// Memory ordering, per task (sync/tile_semaphore.cuh has the model):
//   wait:   a warp-0 lane's ld.acquire.gpu reads count >= target, synchronising with every
//           release add counted in it (the producers' signals form one release sequence); the
//           __syncthreads() after the waits extends that to every thread, so the body's ordinary
//           loads of the producers' tiles see their data.
//   signal: every thread's stores of the body precede a __syncthreads(); thread 0's
//           red.release.gpu after it is cumulative and publishes the whole CTA's writes, not only
//           its own.
// Bodies must read producer tiles with ordinary loads (never ld.global.nc / __ldg), and a body
// whose writes go through the async proxy (TMA) must complete them and fence.proxy.async before
// it returns.
//
// Deadlock freedom needs every CTA of the launch resident at once (num_ctas <= what the occupancy
// API allows for the kernel, and nothing else holding the SMs while it runs); the schedule gives
// the rest (each CTA in increasing global task order, every wait met by earlier tasks only).
#pragma once

#include <cstdint>

#include "core/region_pack.h"
#include "kernels/common.cuh"
#include "kernels/tile_sync.cuh"
#include "sync/tile_semaphore.cuh"

namespace megaops {

// What the loop needs besides the body: the packed schedule, its counters (one uint32 per
// semaphore, zeroed once when allocated, never reset), the watchdog and the injected delays.
// The step is passed to persistent_region_run separately (the kernel reads it from device memory
// or takes it as a parameter).
struct RegionSync {
  const int32_t* schedule = nullptr;  // pack_region_schedule's words, uploaded as they are
  uint32_t* semaphores = nullptr;     // [num_semaphores]
  WatchdogParams watchdog;
  // Random delays before each task's waits and before its signals (stress tests); off when
  // max_delay_ns == 0. maybe_delay adds the compile-time ones of MEGAOPS_INJECT_DELAYS builds.
  DelayParams delay;
  // Per op of the schedule's graph, its index in the step graph (what the watchdog, the traces and
  // drop_signal_op name), where the schedule's graph is not the step graph itself (a region that
  // leaves out the ops folded into a neighbour); null: the same indices.
  const int32_t* step_op = nullptr;
  // Test knob: the tasks of this op (a step graph index) never signal, so a consumer's wait must
  // trip the watchdog; -1: off.
  int32_t drop_signal_op = -1;
  // Timeline tracing (`megaops trace`): one record per task, as the overlap kernels write one per
  // CTA (block: the CTA; pad: the tile); records null: off.
  TraceParams trace;
};

namespace detail {

// The delay site of a task's wait (phase 0) or signal (phase 1) in a step: distinct for every
// (step, task, phase) of a region of fewer than 2^39 tasks.
__device__ __forceinline__ uint64_t region_delay_site(uint32_t step, int32_t task, int phase) {
  return (static_cast<uint64_t>(step) << 40) ^ (static_cast<uint64_t>(task) << 1) ^
         static_cast<uint64_t>(phase);
}

}  // namespace detail

// Whether `schedule` is a packed schedule this launch can run: magic and version, and one CTA
// list per CTA of the grid. Every thread computes the same answer.
__device__ __forceinline__ bool persistent_region_schedule_matches(const int32_t* schedule) {
  return schedule[RP_MAGIC] == REGION_PACK_MAGIC && schedule[RP_VERSION] == REGION_PACK_VERSION &&
         schedule[RP_NUM_CTAS] == static_cast<int32_t>(gridDim.x) && gridDim.y == 1 &&
         gridDim.z == 1;
}

// This CTA's (blockIdx.x's) task list in a packed schedule: positions [begin, end) of `task`,
// each task's op (an index into the schedule's graph) and output tile.
struct RegionCtaList {
  const int32_t* task = nullptr;
  const int32_t* task_op = nullptr;
  const int32_t* task_tile = nullptr;
  int32_t begin = 0, end = 0;
};

__device__ __forceinline__ RegionCtaList region_cta_list(const int32_t* s) {
  RegionCtaList l;
  const int32_t* cta_begin = s + s[RP_CTA_BEGIN];
  l.task = s + s[RP_CTA_TASK];
  l.task_op = s + s[RP_TASK_OP];
  l.task_tile = s + s[RP_TASK_TILE];
  l.begin = cta_begin[blockIdx.x];
  l.end = cta_begin[blockIdx.x + 1];
  return l;
}

// Runs this CTA's (blockIdx.x's) task list for decode step `step` (1-based; the waits target
// tile_target(step, target)). Must be reached by every thread of the CTA (1-D blocks). Per task,
// every thread calls `prologue(op, tile, task)` before the waits (it may read only what no task of
// this step writes: weights, and the step's inputs written before the launch; this is where a
// task starts streaming its weights), warp 0 waits, and every thread calls
// `body(op, tile, task)` between the waits and the signals, so a body may use __syncthreads() and
// shared memory (the barriers around it separate tasks). Returns false, running nothing, when the
// schedule does not match the launch (persistent_region_schedule_matches).
//
// A wait that times out writes the watchdog's error record with WaitSite{op, tile} of the waiting
// task (op: its index in the step graph; tile: its output tile), the target and the count it saw,
// and traps.
template <typename Prologue, typename Body>
__device__ __forceinline__ bool persistent_region_run(const RegionSync& sync, uint32_t step,
                                                      Prologue&& prologue, Body&& body) {
  const int32_t* s = sync.schedule;
  if (!persistent_region_schedule_matches(s)) return false;
  const RegionCtaList list = region_cta_list(s);
  const int32_t* wait_begin = s + s[RP_WAIT_BEGIN];
  const int32_t* wait_sem = s + s[RP_WAIT_SEM];
  const int32_t* wait_target = s + s[RP_WAIT_TARGET];
  const int32_t* signal_begin = s + s[RP_SIGNAL_BEGIN];
  const int32_t* signal_sem = s + s[RP_SIGNAL_SEM];
  const bool leader = threadIdx.x == 0;
  for (int32_t k = list.begin; k < list.end; ++k) {
    const int32_t task = list.task[k];
    const int32_t op = list.task_op[task];
    const int32_t tile = list.task_tile[task];
    const int32_t named = sync.step_op != nullptr ? sync.step_op[op] : op;
    prologue(op, tile, task);
    uint64_t wait_start = 0, wait_end = 0;
    if (threadIdx.x < 32) {
      if (leader) {
        if (sync.trace.records) wait_start = globaltimer_ns();
        const uint64_t site = detail::region_delay_site(step, task, 0);
        random_delay(sync.delay, site);
        maybe_delay(sync.delay.seed, site);
      }
      __syncwarp();
      // Warp 0 waits, a lane a semaphore: a task that reads many producer tiles (attention reads
      // its head's columns of QKV, tile by tile) pays one acquire round trip, not one per tile.
      const WaitSite at{static_cast<uint32_t>(named), static_cast<uint32_t>(tile)};
      for (int32_t w = wait_begin[task] + static_cast<int32_t>(threadIdx.x);
           w < wait_begin[task + 1]; w += 32)
        tile_wait(&sync.semaphores[wait_sem[w]],
                  tile_target(step, static_cast<uint32_t>(wait_target[w])), at, sync.watchdog);
      __syncwarp();
      if (leader && sync.trace.records) wait_end = globaltimer_ns();
    }
    // Hands warp 0's acquires to every thread before the body reads its inputs.
    __syncthreads();
    body(op, tile, task);
    // Orders every thread's stores of the body before thread 0's release.
    __syncthreads();
    if (leader && sync.trace.records) {
      const uint32_t at = atomicAdd(sync.trace.cursor, 1u);
      if (at < sync.trace.capacity) {
        TileTraceRecord r;
        r.wait_start_ns = wait_start;
        r.wait_end_ns = wait_end;
        r.work_end_ns = globaltimer_ns();
        r.op = static_cast<uint32_t>(named);
        r.block = blockIdx.x;
        r.smid = detail::sm_id();
        r.pad = static_cast<uint32_t>(tile);
        sync.trace.records[at] = r;
      }
    }
    if (leader) {
      const uint64_t site = detail::region_delay_site(step, task, 1);
      random_delay(sync.delay, site);
      maybe_delay(sync.delay.seed, site);
      if (named != sync.drop_signal_op)
        for (int32_t i = signal_begin[task]; i < signal_begin[task + 1]; ++i)
          tile_signal(&sync.semaphores[signal_sem[i]]);
    }
  }
  return true;
}

// The loop without a prologue.
template <typename Body>
__device__ __forceinline__ bool persistent_region_run(const RegionSync& sync, uint32_t step,
                                                      Body&& body) {
  return persistent_region_run(
      sync, step, [](int32_t, int32_t, int32_t) {}, body);
}

// ---- the probe kernel (tests and debugging) ----

// A region whose body does no op's work but records it: per task, the global sequence numbers at
// which its body started and finished (one atomicAdd each on `sequence`, so a task's consumers
// can be checked to start after it finished), the CTA that ran it and how many times it ran.
// Optionally each task writes a payload of PROBE_PAYLOAD_WORDS words, with every thread, whose
// value depends on (step, task, word), and before that reads and checks the payloads of the tasks
// it depends on (`deps`, built on the host from the tiling contracts): a body that read a
// producer's stale payload counts a failure.
constexpr int PERSISTENT_REGION_PROBE_THREADS = 128;
constexpr int PROBE_PAYLOAD_WORDS = 128;

struct PersistentRegionProbeParams {
  RegionSync sync;
  int num_ctas = 0;  // the grid; must equal the schedule's num_ctas
  // The step: *step_ptr when set (as a captured graph would read it), else `step`. 1-based.
  const uint32_t* step_ptr = nullptr;
  uint32_t step = 1;

  // Outputs, [num_tasks] each unless said otherwise; the caller clears them (and `sequence`)
  // before a launch.
  uint32_t* sequence = nullptr;     // [1] the global counter of body starts and ends
  uint32_t* start_seq = nullptr;    // the counter's value when the task's body began
  uint32_t* done_seq = nullptr;     // and when it ended (after every thread finished)
  int32_t* task_cta = nullptr;      // blockIdx.x of the CTA that ran it
  uint32_t* task_runs = nullptr;    // times the task's body ran
  uint32_t* rejected = nullptr;     // [1] CTAs that found the schedule not matching the launch
  uint32_t* stale_reads = nullptr;  // [1] tasks that read a stale payload of a dependency
  int32_t* first_stale = nullptr;   // [1] one of those tasks (the caller clears it to -1)

  // Optional payload check (all null: off). deps_begin [num_tasks + 1], deps: the tasks whose
  // payloads a task reads; payload [num_tasks * PROBE_PAYLOAD_WORDS].
  const int32_t* deps_begin = nullptr;
  const int32_t* deps = nullptr;
  uint32_t* payload = nullptr;
  uint64_t payload_seed = 0;

  // Time spent in each body between its start and its end, pseudo-random in [0, max_delay_ns]
  // (seeded), to perturb the interleaving; 0: none.
  DelayParams body_delay;
};

// The payload word `word` of `task` in step `step`: a function of all three, so a stale read (an
// earlier step's value or the poison) differs.
__host__ __device__ inline uint32_t probe_payload_value(uint64_t seed, uint32_t step, int32_t task,
                                                        int word) {
  return static_cast<uint32_t>(detail::delay_mix(seed ^ (static_cast<uint64_t>(step) << 44) ^
                                                 (static_cast<uint64_t>(task) << 12) ^
                                                 static_cast<uint64_t>(word)));
}

// Launches the probe region: p.num_ctas CTAs of PERSISTENT_REGION_PROBE_THREADS threads. The
// caller checks p.num_ctas against persistent_region_probe_max_resident_ctas first (deadlock
// freedom). cudaErrorInvalidValue on missing pointers or num_ctas < 1.
cudaError_t launch_persistent_region_probe(const PersistentRegionProbeParams& p,
                                           cudaStream_t stream);

// How many CTAs of the probe kernel can be resident at once on the current device: blocks per SM
// by the occupancy API times the SM count. A region launch must not use more.
cudaError_t persistent_region_probe_max_resident_ctas(int* out);

}  // namespace megaops
