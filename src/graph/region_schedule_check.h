// A CPU executor that runs a persistent region's schedule (region_schedule.h) the way the device
// would, and checks it against the tiling contracts directly, not against the schedule's own
// semaphore encoding: the oracle is input_tiles().
//
// One simulated CTA per list takes its tasks in list order; a task starts only when each of its
// waits is met (semaphore count >= target), takes a random duration (occasionally a long stall:
// the injected delays) and on finishing adds 1 to each semaphore it signals. Among CTAs ready at
// the same moment one is picked at random, so each seed is a different interleaving, and the
// whole run is deterministic for a seed. Reported:
//   - Malformed: arrays of inconsistent sizes, ids out of range, a CTA list not increasing;
//   - OrderViolation: a task numbered before a producer tile it reads (the deadlock argument needs
//     the issue order to be topological), found without running anything;
//   - Deadlock: tasks remain and no CTA can start its next one, nothing running;
//   - ReadBeforeWritten: a task started before a producer tile it reads had finished;
//   - RunTwice / NeverRun: a tile of the region run more than once, or not at all;
//   - BufferReuse: a task started writing a tensor (OpIo::writes) before the region's earlier
//     readers of that tensor since its last writer, and that writer, had finished the same row
//     block (all their tiles where the two ops' rows differ). The schedule orders only what the
//     tiling contracts say a tile reads; buffers the step rewrites (normed, qkv, delta, ...) are
//     safe only when those read-after-write edges also order every rewrite after the reads
//     before it, which this check verifies for a given graph. Conservative: OpIo names tensors,
//     not the columns a tile touches, so the unit is the row block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/op_graph.h"
#include "graph/region_schedule.h"

namespace megaops {

enum class RegionFaultKind {
  Malformed,
  OrderViolation,
  Deadlock,
  ReadBeforeWritten,
  RunTwice,
  NeverRun,
  BufferReuse
};

const char* region_fault_kind_name(RegionFaultKind k);

struct RegionFault {
  RegionFaultKind kind;
  std::string message;  // one line: which task, op, tile, CTA, semaphore
};

struct RegionCheckOptions {
  uint64_t seed = 1;
  // Task durations: uniform in [min_task_us, max_task_us]; with probability stall_probability a
  // task takes stall_us more (a CTA descheduled, a slow memory access, a watchdog-free delay).
  double min_task_us = 0.5;
  double max_task_us = 5.0;
  double stall_probability = 0.05;
  double stall_us = 100.0;
  // Instead: the tile's estimated cost (region_tile_cost_us under the default cost model) times
  // a factor uniform in [min_cost_factor, max_cost_factor], stalls as above. Makespans then
  // compare assignments.
  bool cost_durations = false;
  double min_cost_factor = 0.8, max_cost_factor = 1.25;
  int max_faults = 16;  // faults kept per kind beyond which they are only counted
};

struct RegionCheckReport {
  std::vector<RegionFault> faults;
  int64_t tasks_run = 0;
  double makespan_us = 0;  // simulated time of the last finish

  bool ok() const { return faults.empty(); }
  bool has(RegionFaultKind k) const;
  std::string summary() const;  // one fault a line, or "ok"
};

class RegionScheduleChecker {
 public:
  // Precomputes the oracle (each task's producer tiles) and the checks that need no run.
  RegionScheduleChecker(const OpGraph& g, const RegionSchedule& s);

  // The faults found without running plus those of one simulated run under `opt.seed`.
  RegionCheckReport run(const RegionCheckOptions& opt) const;

 private:
  void check_structure();
  void build_oracle();
  std::string task_label(int32_t task) const;

  const OpGraph& g_;
  const RegionSchedule& s_;
  std::vector<int64_t> op_base_;     // local tile id of tile 0 of each region op, plus the total
  std::vector<int32_t> local_;       // per task: its local tile id (-1 when invalid)
  std::vector<int64_t> read_begin_;  // per task, into reads_
  std::vector<int64_t> reads_;       // local ids of the producer tiles in the region it reads
  // Per region op: the earlier region ops that must have finished a row block before it writes
  // that row block (true) or before it writes at all (false).
  std::vector<std::vector<std::pair<int, bool>>> hazards_;
  std::vector<int64_t> rb_base_;  // per region op: index of its row block 0 in a flat array
  std::vector<RegionFault> static_faults_;
  bool malformed_ = false;
};

// One run of a fresh checker.
RegionCheckReport check_region_schedule(const OpGraph& g, const RegionSchedule& s,
                                        const RegionCheckOptions& opt);

}  // namespace megaops
