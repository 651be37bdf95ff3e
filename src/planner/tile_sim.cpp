// See tile_sim.h. The memory queue is one FIFO server: a request issued at t starts at
// max(t, queue free), takes bytes / bandwidth, and (with a per-worker limit) cannot finish before
// t + bytes / worker rate. Requests are issued in event-time order, so each one's completion is
// known when it is issued and the queue needs no events of its own.
#include "planner/tile_sim.h"

#include <algorithm>
#include <queue>
#include <string>
#include <tuple>

#include "core/error.h"

namespace megaops {

namespace {

enum class Ev : int { Finish = 0, ComputeEnd = 1 };

struct Event {
  double t;
  int task;
  Ev kind;
  bool operator>(const Event& o) const {
    return std::tie(t, task, kind) > std::tie(o.t, o.task, o.kind);
  }
};

struct Sim {
  const std::vector<TileTask>& tasks;
  const MachineModel& m;
  std::vector<int> free_workers;
  // Each pool issues its tasks strictly in id order (like a stream): a task takes a worker only
  // after every earlier task of its pool has one. Without this, a launchable consumer could fill
  // the pool while an earlier producer still waits for its barrier: a deadlock the executors
  // avoid the same way (producers issued first, DESIGN.md rule 2).
  std::vector<std::vector<int>> pool_tasks;
  std::vector<size_t> next_issue;
  std::vector<char> is_launchable;
  std::vector<int> launch_left, data_left;
  std::vector<char> assigned, data_done;
  std::vector<double> pre_done, data_time;
  // Reverse adjacency (CSR): who waits on task i, for launch and data deps.
  std::vector<int> l_off, l_adj, d_off, d_adj;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  double queue_free = 0;
  TileSimResult r;

  Sim(const std::vector<TileTask>& t, const MachineModel& mm) : tasks(t), m(mm) {}

  double request(double t, double bytes) {
    if (bytes <= 0) return t;
    const double start = std::max(t, queue_free);
    queue_free = start + bytes / m.bytes_per_us;
    r.bytes += bytes;
    r.queue_busy_us += bytes / m.bytes_per_us;
    double done = queue_free;
    if (m.worker_bytes_per_us > 0) done = std::max(done, t + bytes / m.worker_bytes_per_us);
    return done;
  }

  static void csr(const std::vector<TileTask>& ts, bool launch, std::vector<int>& off,
                  std::vector<int>& adj) {
    off.assign(ts.size() + 1, 0);
    for (const TileTask& t : ts)
      for (int d : launch ? t.launch_deps : t.data_deps) ++off[d + 1];
    for (size_t i = 0; i < ts.size(); ++i) off[i + 1] += off[i];
    adj.resize(off.back());
    std::vector<int> pos(off.begin(), off.end() - 1);
    for (size_t i = 0; i < ts.size(); ++i)
      for (int d : launch ? ts[i].launch_deps : ts[i].data_deps)
        adj[pos[d]++] = static_cast<int>(i);
  }

  // Both dep sets done (joins), or launch deps done (tasks): enter the pool's ready queue.
  void launchable(int i, double t) {
    const TileTask& k = tasks[i];
    if (k.join) {
      if (data_left[i] == 0) {
        r.start_us[i] = t;
        events.push({t + k.delay_us, i, Ev::Finish});
      }
      return;
    }
    is_launchable[i] = 1;
  }

  void start_compute(int i, double t, double loads_done) {
    events.push({std::max(t, loads_done) + tasks[i].compute_us, i, Ev::ComputeEnd});
  }

  void dispatch(int pool, double t) {
    const std::vector<int>& q = pool_tasks[pool];
    size_t& next = next_issue[pool];
    while (free_workers[pool] > 0 && next < q.size() && is_launchable[q[next]]) {
      const int i = q[next++];
      --free_workers[pool];
      ++r.events;
      assigned[i] = 1;
      r.start_us[i] = t;
      const TileTask& k = tasks[i];
      if (data_done[i]) {
        start_compute(i, t, request(t, k.weight_bytes + k.input_bytes));
      } else {
        pre_done[i] = request(t, std::min(k.weight_bytes, m.staging_bytes));
      }
    }
  }

  void on_data_ready(int i, double t) {
    data_done[i] = 1;
    data_time[i] = t;
    const TileTask& k = tasks[i];
    if (k.join) {
      if (launch_left[i] == 0) launchable(i, t);
      return;
    }
    if (assigned[i]) {
      const double rest = k.weight_bytes - std::min(k.weight_bytes, m.staging_bytes);
      const double done = request(t, rest + k.input_bytes);
      start_compute(i, t, std::max(done, pre_done[i]));
    }
  }

  void finish(int i, double t) {
    r.finish_us[i] = t;
    r.makespan_us = std::max(r.makespan_us, t);
    const TileTask& k = tasks[i];
    if (!k.join) ++free_workers[k.pool];
    for (int j = l_off[i]; j < l_off[i + 1]; ++j) {
      const int c = l_adj[j];
      if (--launch_left[c] == 0 && (!tasks[c].join || data_done[c])) launchable(c, t);
    }
    for (int j = d_off[i]; j < d_off[i + 1]; ++j) {
      const int c = d_adj[j];
      if (--data_left[c] == 0) on_data_ready(c, t);
    }
  }
};

}  // namespace

TileSimResult simulate_tiles(const std::vector<TileTask>& tasks,
                             const std::vector<int>& pool_workers, const MachineModel& machine) {
  if (machine.bytes_per_us <= 0) throw_input_error("tile sim", "bytes_per_us", "expected > 0");
  const int n = static_cast<int>(tasks.size());
  for (int i = 0; i < n; ++i) {
    const TileTask& t = tasks[i];
    if (!t.join &&
        (t.pool < 0 || t.pool >= static_cast<int>(pool_workers.size()) || pool_workers[t.pool] < 1))
      throw_input_error("tile sim", "task " + std::to_string(i) + " pool",
                        "expected a pool with >= 1 worker, found " + std::to_string(t.pool));
    for (const auto* deps : {&t.launch_deps, &t.data_deps})
      for (int d : *deps)
        if (d < 0 || d >= i)
          throw_input_error(
              "tile sim", "task " + std::to_string(i) + " dep",
              "expected an earlier task (topological order), found " + std::to_string(d));
  }
  Sim s(tasks, machine);
  {
    std::vector<Event> heap;
    heap.reserve(2 * static_cast<size_t>(n));
    s.events = decltype(s.events)(std::greater<Event>(), std::move(heap));
  }
  s.free_workers = pool_workers;
  s.pool_tasks.resize(pool_workers.size());
  for (std::vector<int>& q : s.pool_tasks) q.reserve(static_cast<size_t>(n));
  s.next_issue.assign(pool_workers.size(), 0);
  s.is_launchable.assign(n, 0);
  for (int i = 0; i < n; ++i)
    if (!tasks[i].join) s.pool_tasks[tasks[i].pool].push_back(i);
  s.launch_left.resize(n);
  s.data_left.resize(n);
  s.assigned.assign(n, 0);
  s.data_done.assign(n, 0);
  s.pre_done.assign(n, 0);
  s.data_time.assign(n, 0);
  s.r.start_us.assign(n, 0);
  s.r.finish_us.assign(n, 0);
  Sim::csr(tasks, true, s.l_off, s.l_adj);
  Sim::csr(tasks, false, s.d_off, s.d_adj);
  for (int i = 0; i < n; ++i) {
    s.launch_left[i] = static_cast<int>(tasks[i].launch_deps.size());
    s.data_left[i] = static_cast<int>(tasks[i].data_deps.size());
  }
  for (int i = 0; i < n; ++i) {
    if (s.data_left[i] == 0) s.data_done[i] = 1;
    if (s.launch_left[i] == 0) s.launchable(i, 0);
  }
  for (size_t p = 0; p < pool_workers.size(); ++p) s.dispatch(static_cast<int>(p), 0);
  int64_t finished = 0;
  while (!s.events.empty()) {
    const Event e = s.events.top();
    s.events.pop();
    ++s.r.events;
    if (e.kind == Ev::ComputeEnd) {
      const double done = s.request(e.t, tasks[e.task].output_bytes);
      s.events.push({done, e.task, Ev::Finish});
      continue;
    }
    s.finish(e.task, e.t);
    ++finished;
    // Freed workers and newly launchable tasks: fill every pool in id order.
    for (size_t p = 0; p < pool_workers.size(); ++p) s.dispatch(static_cast<int>(p), e.t);
  }
  if (finished != n)
    throw Error("tile sim: " + std::to_string(n - finished) + " tasks never ran (cyclic deps?)");
  return s.r;
}

}  // namespace megaops
