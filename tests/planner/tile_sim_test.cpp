// The tile scheduler on hand-checkable graphs: the FIFO memory queue, worker pools, barriers,
// weight prefetch into bounded staging, determinism, bounded work, malformed graphs.
#include "planner/tile_sim.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace megaops {
namespace {

MachineModel machine(int workers, double bw) {
  MachineModel m;
  m.workers = workers;
  m.bytes_per_us = bw;
  m.staging_bytes = 1e18;
  return m;
}

TileTask task(double compute, double weight, std::vector<int> launch = {},
              std::vector<int> data = {}) {
  TileTask t;
  t.compute_us = compute;
  t.weight_bytes = weight;
  t.launch_deps = std::move(launch);
  t.data_deps = std::move(data);
  return t;
}

TileTask join(std::vector<int> deps, double delay) {
  TileTask t;
  t.join = true;
  t.delay_us = delay;
  t.launch_deps = std::move(deps);
  return t;
}

TEST(TileSim, FifoQueueSerialisesLoadsAtItsBandwidth) {
  // Four loads of 100 bytes at 100 B/us on four workers: done at 1, 2, 3, 4 us, then 0.5 us each.
  std::vector<TileTask> ts(4, task(0.5, 100));
  const TileSimResult r = simulate_tiles(ts, {4}, machine(4, 100));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.finish_us[i], i + 1.5, 1e-12);
  EXPECT_NEAR(r.bytes, 400, 1e-9);
  EXPECT_NEAR(r.queue_busy_us, 4, 1e-12);
}

TEST(TileSim, WorkersBoundComputeAndPerWorkerRateBoundsStreaming) {
  // 10 compute tasks of 1 us on 3 workers: ceil(10 / 3) = 4 waves.
  std::vector<TileTask> ts(10, task(1, 0));
  EXPECT_NEAR(simulate_tiles(ts, {3}, machine(3, 1)).makespan_us, 4, 1e-12);
  // A per-worker limit: 2 workers at 10 B/us each under a 1000 B/us queue stream 20 B/us.
  MachineModel m = machine(2, 1000);
  m.worker_bytes_per_us = 10;
  std::vector<TileTask> loads(4, task(0, 100));
  EXPECT_NEAR(simulate_tiles(loads, {2}, m).makespan_us, 20, 1e-9);
}

TEST(TileSim, BarrierDelaysLaunchPrefetchOverlapsTheWait) {
  // Producer: 1 task, 10 us compute. Consumer: 1 task, 400 bytes at 100 B/us, 1 us compute.
  // With a barrier (+2 us boundary): 10 + 2 + 4 + 1. With only a data dep: the consumer streams
  // its weights during the producer: 10 + 1.
  std::vector<TileTask> barrier = {task(10, 0), join({0}, 2), task(1, 400, {1}, {0})};
  EXPECT_NEAR(simulate_tiles(barrier, {2}, machine(2, 100)).makespan_us, 17, 1e-12);
  std::vector<TileTask> overlap = {task(10, 0), task(1, 400, {}, {0})};
  EXPECT_NEAR(simulate_tiles(overlap, {2}, machine(2, 100)).makespan_us, 11, 1e-12);
  // Staging holds 100 of the 400 bytes: the other 300 load after the wait (3 us).
  MachineModel small = machine(2, 100);
  small.staging_bytes = 100;
  EXPECT_NEAR(simulate_tiles(overlap, {2}, small).makespan_us, 14, 1e-12);
}

TEST(TileSim, PoolsAreSeparateBudgets) {
  std::vector<TileTask> ts;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(task(1, 0));
    ts.back().pool = i < 4 ? 0 : 1;
  }
  // Pool 0 (2 workers) runs 4 tasks in 2 waves; pool 1 (1 worker) runs 2 tasks in 2 waves.
  EXPECT_NEAR(simulate_tiles(ts, {2, 1}, machine(3, 1)).makespan_us, 2, 1e-12);
  EXPECT_THROW(simulate_tiles(ts, {2}, machine(3, 1)), InputError);
}

TEST(TileSim, DeterministicAndBoundedWork) {
  std::vector<TileTask> ts;
  ts.push_back(task(1, 50));
  for (int i = 1; i < 2000; ++i) ts.push_back(task(0.1 * (i % 7), 10.0 * (i % 5), {}, {i / 2}));
  const MachineModel m = machine(16, 100);
  const TileSimResult a = simulate_tiles(ts, {16}, m), b = simulate_tiles(ts, {16}, m);
  EXPECT_EQ(a.finish_us, b.finish_us);
  EXPECT_EQ(a.events, b.events);
  // Per task: one dispatch, one compute end, one finish.
  EXPECT_LE(a.events, 3 * static_cast<int64_t>(ts.size()));
}

TEST(TileSim, RejectsMalformedGraphs) {
  EXPECT_THROW(simulate_tiles({task(1, 0, {}, {1}), task(1, 0)}, {1}, machine(1, 1)), InputError);
  EXPECT_THROW(simulate_tiles({task(1, 0)}, {1}, machine(1, 0)), InputError);
}

}  // namespace
}  // namespace megaops
