// Tile graph simulation: an event-driven list scheduler that runs tile tasks on fixed pools of
// workers (CTA slots) and routes every load and store through one FIFO memory queue. This is the
// cut planner's model of what happens inside a region; see docs/planner.md for the assumptions.
//
// A task goes through: launchable (its launch deps are done: kernel barriers, region starts) ->
// takes a worker of its pool, in id order (each pool issues like a stream) -> streams its weight
// bytes into staging while its data deps are pending (at most `staging_bytes`; the rest loads
// after) -> once the data deps are done, loads the rest and its inputs -> computes -> writes its
// output -> done, frees the worker. Join tasks use no worker: they finish `delay_us` after all
// their deps (barriers, launch costs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace megaops {

// A task's dependencies (task ids): up to INLINE held in place, more on the heap. Most tasks wait
// on one launch join and one or two data joins; planning builds tens of millions of tasks, and a
// std::vector each spent a third of the planning time in malloc and free.
class TaskDeps {
 public:
  static constexpr int INLINE = 3;
  TaskDeps() = default;
  TaskDeps(std::initializer_list<int> ids) {
    for (int d : ids) push_back(d);
  }
  TaskDeps(std::vector<int> ids) {  // NOLINT: a std::vector of ids converts
    if (ids.size() <= INLINE) {
      for (int d : ids) push_back(d);
    } else {
      n_ = static_cast<int>(ids.size());
      heap_ = std::move(ids);
    }
  }
  void push_back(int d) {
    if (n_ < INLINE) {
      inline_[n_] = d;
    } else {
      if (n_ == INLINE) heap_.assign(inline_, inline_ + INLINE);
      heap_.push_back(d);
    }
    ++n_;
  }
  size_t size() const { return static_cast<size_t>(n_); }
  bool empty() const { return n_ == 0; }
  const int* begin() const { return n_ <= INLINE ? inline_ : heap_.data(); }
  const int* end() const { return begin() + n_; }
  int operator[](size_t i) const { return begin()[i]; }
  std::vector<int> to_vector() const { return {begin(), end()}; }

 private:
  int n_ = 0;
  int inline_[INLINE] = {};
  std::vector<int> heap_;
};

struct TileTask {
  int op = -1;  // for reporting only
  int pool = 0;
  bool join = false;
  double delay_us = 0;  // join only
  double compute_us = 0;
  double weight_bytes = 0;  // streamable before the data deps are done (weights, KV cache)
  double input_bytes = 0;   // loaded after the data deps are done
  double output_bytes = 0;
  TaskDeps launch_deps;  // before the task may hold a worker
  TaskDeps data_deps;    // before it may load inputs and compute
};

struct MachineModel {
  int workers = 132;                   // CTA slots of the whole GPU (one per SM)
  double bytes_per_us = 4.4e6;         // FIFO memory queue bandwidth (HBM read ceiling, 4.4 TB/s)
  double worker_bytes_per_us = 0;      // per-CTA streaming limit (Little's law); 0: none
  double staging_bytes = 256 << 10;    // per-worker weight staging (shared memory / L2 share)
  double worker_flops_per_us = 6.0e6;  // bf16 FLOP/us per CTA (797 TFLOP/s / 132)
};

struct TileSimResult {
  double makespan_us = 0;
  std::vector<double> start_us;  // when the task took a worker (joins: when it became ready)
  std::vector<double> finish_us;
  int64_t events = 0;  // heap pops + dispatches: the bounded work of the simulation
  double bytes = 0;    // through the memory queue
  double queue_busy_us = 0;
};

// Runs the tasks. `pool_workers[p]` is the CTA budget of pool p. Tasks must be in topological
// order (every dep has a smaller id): that is also the issue order, so a producer always takes a
// worker before its consumers and waiting consumers can never starve it of slots. Deterministic:
// simultaneous events are taken in task-id order. Throws InputError on malformed graphs.
TileSimResult simulate_tiles(const std::vector<TileTask>& tasks,
                             const std::vector<int>& pool_workers, const MachineModel& machine);

}  // namespace megaops
