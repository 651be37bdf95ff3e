// Per-op calibration (planner.h, calibrate_op): what plan() and the pipeline planner do to every
// distinct op before simulating a candidate.
#include "planner/planner.h"

namespace megaops {

OpCalibration calibrate_op(const OpGraph& g, int i, const ServiceTable& table,
                           const CostModel& cost, int64_t* events, int64_t* tasks) {
  OpCalibration c;
  // The op as a graph of its own: its inputs are ready when it starts.
  OpGraph s;
  s.model = g.model;
  s.step = g.step;
  s.batch = g.batch;
  s.context = g.context;
  s.ops.push_back(g.ops.at(i));
  s.ops.back().inputs.clear();
  auto standalone = [&](double x) {
    const TileGraph t = build_tile_graph(s, {{0, 0, Backend::Conventional, 0}}, Policy::Serial, 0,
                                         cost, {x}, false);
    const TileSimResult r = simulate_tiles(t.tasks, t.pool_workers, cost.machine);
    *events += r.events;
    *tasks += static_cast<int64_t>(t.tasks.size());
    return r.makespan_us;
  };
  c.model_us = standalone(0);
  const auto ev = table.lookup({g.ops[i].name, shape_signature(g.ops[i], g.context), cost.dtype,
                                "conventional", cost.machine.workers, cost.gpu});
  if (ev) {
    c.measured_us = ev->us;
    // The standalone time grows monotonically with per-tile occupancy: bisect on it. Where the
    // model is slower than the evidence (large-batch matmuls: the model computes a tile after
    // loading it, the kernel overlaps the two), the occupancy goes negative, down to taking the
    // tile's whole compute time off: only the loads are left.
    const Op& op = g.ops[i];
    const double floor_x =
        -op.flops / static_cast<double>(op.num_tiles()) / cost.machine.worker_flops_per_us;
    double lo = c.model_us > ev->us ? floor_x : 0.0, hi = c.model_us > ev->us ? 0.0 : ev->us;
    if (standalone(lo) > ev->us) {
      c.model_slower = true;  // slower than measured even with no compute at all
      hi = lo;
    }
    for (int it = 0; it < 60 && hi - lo > 1e-9; ++it) {
      const double mid = 0.5 * (lo + hi);
      (standalone(mid) < ev->us ? lo : hi) = mid;
    }
    c.extra_tile_us = 0.5 * (lo + hi);
  }
  return c;
}

}  // namespace megaops
