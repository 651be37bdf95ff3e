// The static tile schedule of a persistent region: a contiguous range of the step graph's ops run
// as one resident launch of `num_ctas` CTAs, each taking tile tasks from a list built here, on the
// host, at plan time. Pure C++ (no CUDA headers) so it is built and tested on any CPU; the device
// kernel uploads the packed form (pack_region_schedule) as it is. docs/persistent-regions.md has
// the whole picture.
//
// Tasks. One task per output tile of every op in [first_op, last_op]. The tasks are numbered in a
// global issue order that is a topological order of the tile graph: every producer tile a task
// reads (input_tiles) inside the region has a smaller number. Producers before first_op are ready
// when the region starts (the launch is stream-ordered after them).
//
// Order and assignment. The order comes from a list schedule over estimated tile costs (bytes at
// a per-CTA share of the HBM bandwidth, or FLOPs at a per-CTA share of the tensor-core rate, plus a
// fixed per-task overhead): among tasks whose producers are all already ordered, the one whose
// producers are estimated to finish first comes next (ties: op order, then tile), and it goes to
// the CTA estimated to be free first (ties: the lowest CTA). The estimate only shapes the balance;
// correctness never depends on it. RegionAssign::RoundRobin gives task i to CTA i % num_ctas
// instead (same order), for tests and for comparison.
//
// Dependencies as the device waits for them. Semaphores follow sync/tile_semaphore.cuh: monotonic
// uint32 counters, one release add per finished tile, a consumer waits (acquire) until a counter
// reaches a target. A producer op inside the region owns
//   - a row-block semaphore per row block, which every tile of that row block adds 1 to: a
//     consumer that reads a whole row block (matmul, norm, sampling) waits for it to reach
//     col_tiles(), one wait instead of one per tile;
//   - a tile semaphore per tile, only when some consumer reads part of a row block (rope, SiLU-mul,
//     attention): target 1.
// Targets are per step: in step s (1-based) the kernel waits for tile_target(s, target), so
// counters are never reset (DESIGN rule 3). A schedule's counters belong to it: a schedule of
// another shape has other counts and gets its own zeroed counters.
//
// Deadlock freedom, by construction:
//   1. all num_ctas CTAs are co-resident (num_ctas <= max_resident_ctas, checked here; the caller
//      takes max_resident_ctas from the occupancy API of the region kernel);
//   2. each CTA runs its tasks in increasing global index, a task only after its waits are met;
//   3. every task a task waits on has a smaller global index (the builder asserts it).
// Take the lowest-numbered unfinished task i. Every task it waits on has a smaller index, so it
// has finished: its waits are met. Its CTA has finished every task of its own list before i (all
// have smaller indices, so they are finished), so that CTA is at i, not blocked elsewhere, and
// being resident it runs i. So some task always makes progress, and all finish. Nothing depends
// on how the hardware orders CTAs, on timing, or on the cost estimate.
//
// Vendor GEMMs (cuBLASLt) cannot run inside a region (they are whole launches of their own): a
// region must end before one. The builder refuses a range that holds one, by a predicate whose
// default is the executors' dispatch rule (is_vendor_gemm, graph/op_graph.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/region_pack.h"
#include "graph/op_graph.h"

namespace megaops {

enum class RegionAssign { EarliestFree, RoundRobin };

struct RegionScheduleOptions {
  RegionAssign assign = RegionAssign::EarliestFree;
  // Cost model of one tile for the list schedule (only relative sizes matter): an H200's 4.6 TB/s
  // and ~800 bf16 TFLOP/s shared by 132 CTAs, and an overhead per task (wait, signal, take).
  double cta_bytes_per_us = 35e3;
  double cta_flops_per_us = 6e6;
  double task_overhead_us = 0.5;
  // Ops that cannot run inside a region; null means is_vendor_gemm (graph/op_graph.h).
  std::function<bool(const Op&)> is_vendor_gemm;
};

// The schedule, already in the int32 arrays a device kernel reads. Task ids are global issue
// indices 0..num_tasks()-1; ranges are [begin[i], begin[i + 1]).
struct RegionSchedule {
  int32_t first_op = 0, last_op = -1;
  int32_t num_ctas = 0;
  int32_t num_semaphores = 0;

  // Per task, in global issue order.
  std::vector<int32_t> task_op;       // index into OpGraph::ops
  std::vector<int32_t> task_tile;     // tile of that op
  std::vector<int32_t> wait_begin;    // num_tasks + 1: the task's waits
  std::vector<int32_t> wait_sem;      // semaphore id of each wait
  std::vector<int32_t> wait_target;   // per-step count the semaphore must reach
  std::vector<int32_t> signal_begin;  // num_tasks + 1: the semaphores the task adds 1 to
  std::vector<int32_t> signal_sem;

  // Per CTA: its tasks, increasing global indices.
  std::vector<int32_t> cta_begin;  // num_ctas + 1
  std::vector<int32_t> cta_task;   // num_tasks

  // Per semaphore (for the watchdog's error record and dumps): the producer op, its row block,
  // and the tile for a tile semaphore (-1 for a row-block semaphore).
  std::vector<int32_t> sem_op, sem_row_block, sem_tile;

  int32_t num_tasks() const { return static_cast<int32_t>(task_op.size()); }
  int32_t num_waits() const { return static_cast<int32_t>(wait_sem.size()); }
  int32_t num_signals() const { return static_cast<int32_t>(signal_sem.size()); }
};

// Builds the schedule of ops [first_op, last_op] of `g` for `num_ctas` resident CTAs. Throws
// InputError (one line naming the field) on an empty or out-of-range range, num_ctas < 1,
// num_ctas > max_resident_ctas, an op in the range that is a vendor GEMM or has no tiles, an input
// whose producer does not come before its consumer, or a schedule too large for int32 indices.
RegionSchedule build_region_schedule(const OpGraph& g, int first_op, int last_op, int num_ctas,
                                     int max_resident_ctas, const RegionScheduleOptions& opt = {});

// The invariant the deadlock argument rests on, on the semaphore encoding: every semaphore a task
// waits for is signalled at least its target times per step, by tasks that all come before it.
// Throws Error (a bug, not bad input) naming the first task that breaks it; the builder calls it
// on every schedule it returns.
void assert_region_waits_precede(const RegionSchedule& s);

// The estimated time of one tile of `op` under `opt`'s cost model, in microseconds.
double region_tile_cost_us(const Op& op, const RegionScheduleOptions& opt);

// ---- packed form ----
//
// One int32 buffer a kernel uploads as it is; its word layout (header words RP_*, then the arrays
// at the offsets the header holds) is core/region_pack.h, shared with the device loop.
std::vector<int32_t> pack_region_schedule(const RegionSchedule& s);

// The inverse of pack_region_schedule. Throws InputError on a buffer that is not one (magic,
// version, sizes, offsets out of bounds).
RegionSchedule unpack_region_schedule(const std::vector<int32_t>& words);

}  // namespace megaops
