// See planner.h. Evaluation strategy, chosen so one case plans in well under a second:
// - serial candidates: region times add up (a region starts after the previous one ends), so each
//   distinct region (its ops' shapes, backend, budget) is simulated once and cached; the layers
//   repeat, so a 32-layer step needs only a handful of region simulations;
// - co-running candidates (fixed split, dynamic): the step is simulated with the first K = 1 and
//   2 layers and extrapolated linearly, T = T(2) + (L - 2) (T(2) - T(1)), which is exact when each
//   layer adds the same steady-state time.
// The region and tile graphs: planner_graphs.cpp; the JSON and dot dumps: planner_dump.cpp.
#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace megaops {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Conventional:
      return "conventional";
    case Backend::Overlap:
      return "overlap";
    case Backend::Persistent:
      return "persistent";
    case Backend::ConventionalPdl:
      return "conventional_pdl";
    case Backend::PdlChain:
      return "pdl_chain";
  }
  return "?";
}

bool is_whole_step_backend(Backend b) {
  return b == Backend::ConventionalPdl || b == Backend::PdlChain;
}

std::string chain_folds_name(uint32_t folds) {
  std::string s;
  for (auto [bit, name] : {std::pair{CHAIN_FOLD_NORMS, "norms"}, std::pair{CHAIN_FOLD_SILU, "silu"},
                           std::pair{CHAIN_FOLD_ROPE, "rope"}})
    if (folds & bit) s += (s.empty() ? "" : "+") + std::string(name);
  return s.empty() ? "none" : s;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Serial:
      return "serial";
    case Policy::FixedSplit:
      return "fixed_split";
    case Policy::Dynamic:
      return "dynamic";
  }
  return "?";
}

const char* objective_name(Objective o) {
  return o == Objective::Step ? "step" : "ttft";
}

namespace {

// Ops [first, last] of g as a graph of their own; inputs from outside are dropped (they are
// ready when the region starts).
OpGraph sub_graph(const OpGraph& g, int first, int last) {
  OpGraph s;
  s.model = g.model;
  s.step = g.step;
  s.batch = g.batch;
  s.context = g.context;
  for (int i = first; i <= last; ++i) {
    Op o = g.ops[i];
    std::vector<OpInput> ins;
    for (OpInput in : o.inputs)
      if (in.producer >= first) ins.push_back({in.producer - first, in.pattern});
    o.inputs = std::move(ins);
    s.ops.push_back(std::move(o));
  }
  return s;
}

std::string op_key(const OpGraph& g, int i) {
  return g.ops[i].name + "|" + shape_signature(g.ops[i], g.context);
}

// A candidate before expansion: a cut bit per template boundary (the last one is the wrap between
// layers) and a backend per template group.
struct Template {
  std::vector<char> cut;
  std::vector<Backend> backend;
};

struct Planner {
  const OpGraph& g;
  const RegionGraph& rg;
  const ServiceTable& table;
  const PlanOptions& opt;
  const CostModel& cost;
  std::vector<double> extra;  // per op of g
  // Region-time cache: backend, budget, keep-barriers flag, then the op-key id of every op. Ids
  // instead of the key strings: building op keys was a quarter of the planning time (perf, 8B).
  std::map<std::vector<int>, double> region_cache;
  std::map<std::string, double> key_extra;
  std::map<std::string, double> key_standalone;  // op key -> evidence or model time
  std::vector<int> key_id;            // per op of g: index of its op_key among distinct keys
  std::vector<double> standalone_us;  // per op of g, after calibrate(): evidence or model time
  PlanResult res;
  int tg = 0;  // template groups

  // Template group of full group `group` of `graph` (g's region graph or a truncated copy).
  static int tmpl_of(const RegionGraph& graph, int group) {
    const int p = graph.prefix, q = graph.period, body = q * graph.repeats;
    if (group < p) return group;
    if (group < p + body) return p + (group - p) % q;
    return p + q + (group - p - body);
  }

  // Template bit of the boundary between full groups i and i + 1: the wrap bit (tg - 1) between
  // layers, else the boundary after the template group of i.
  int bit_of(const RegionGraph& graph, int i) const {
    const int p = graph.prefix, q = graph.period, body = q * graph.repeats;
    if (q > 0 && i >= p && i + 1 < p + body && (i - p) % q == q - 1) return tg - 1;
    return tmpl_of(graph, i);
  }

  std::vector<Region> expand(const RegionGraph& graph, const Template& t, Policy policy,
                             int split) const {
    std::vector<Region> out;
    for (int i = 0; i < static_cast<int>(graph.groups.size()); ++i) {
      const Backend b = t.backend[tmpl_of(graph, i)];
      if (i == 0 || t.cut[bit_of(graph, i - 1)]) {
        out.push_back({graph.groups[i].first_op, graph.groups[i].last_op, b, cost.machine.workers});
      } else {
        out.back().last_op = graph.groups[i].last_op;
      }
    }
    if (policy == Policy::FixedSplit)
      for (size_t r = 0; r < out.size(); ++r)
        out[r].cta_budget = r % 2 == 0 ? split : cost.machine.workers - split;
    return out;
  }

  // Work counters of simulations, kept per thread where candidates are simulated in parallel.
  struct SimCount {
    int64_t events = 0, tasks = 0;
  };

  double simulate(const OpGraph& graph, const std::vector<Region>& regions, Policy policy,
                  int split, const std::vector<double>& ex, bool keep_barriers,
                  SimCount* count = nullptr) const {
    const TileGraph t = build_tile_graph(graph, regions, policy, split, cost, ex, keep_barriers);
    const TileSimResult r = simulate_tiles(t.tasks, t.pool_workers, cost.machine);
    count->events += r.events;
    count->tasks += static_cast<int64_t>(t.tasks.size());
    return r.makespan_us;
  }

  double simulate(const OpGraph& graph, const std::vector<Region>& regions, Policy policy,
                  int split, const std::vector<double>& ex, bool keep_barriers) {
    SimCount count;
    const double us = simulate(graph, regions, policy, split, ex, keep_barriers, &count);
    res.sim_events += count.events;
    res.sim_tasks += count.tasks;
    return us;
  }

  // One region alone (serial composition), cached by what determines its time.
  double region_time(const Region& r, bool keep_barriers) {
    std::vector<int> key;
    key.reserve(static_cast<size_t>(r.last_op - r.first_op) + 4);
    key.push_back(static_cast<int>(r.backend));
    key.push_back(r.cta_budget);
    key.push_back(keep_barriers ? 1 : 0);
    key.push_back(static_cast<int>(r.folds));
    for (int i = r.first_op; i <= r.last_op; ++i) key.push_back(key_id[i]);
    auto it = region_cache.find(key);
    if (it != region_cache.end()) return it->second;
    const OpGraph s = sub_graph(g, r.first_op, r.last_op);
    std::vector<double> ex(extra.begin() + r.first_op, extra.begin() + r.last_op + 1);
    const Region whole{0, r.last_op - r.first_op, r.backend, r.cta_budget, r.folds};
    const TileGraph t = build_tile_graph(s, {whole}, Policy::Serial, 0, cost, ex, keep_barriers);
    // A region on a reduced budget runs on a pool of that many workers.
    const TileSimResult sr = simulate_tiles(t.tasks, {r.cta_budget}, cost.machine);
    res.sim_events += sr.events;
    res.sim_tasks += static_cast<int64_t>(t.tasks.size());
    region_cache.emplace(std::move(key), sr.makespan_us);
    return sr.makespan_us;
  }

  void calibrate() {
    extra.assign(g.ops.size(), 0.0);
    key_id.assign(g.ops.size(), 0);
    standalone_us.assign(g.ops.size(), 0.0);
    std::map<std::string, int> ids;
    for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
      const std::string key = op_key(g, i);
      key_id[i] = ids.emplace(key, static_cast<int>(ids.size())).first->second;
      auto it = key_extra.find(key);
      if (it != key_extra.end()) {
        extra[i] = it->second;
        standalone_us[i] = key_standalone.at(key);
        continue;
      }
      OpCalibration c = calibrate_op(g, i, table, cost, &res.sim_events, &res.sim_tasks);
      c.key = key;
      key_extra[key] = c.extra_tile_us;
      extra[i] = c.extra_tile_us;
      standalone_us[i] = key_standalone[key] = c.measured_us >= 0 ? c.measured_us : c.model_us;
      res.calibration.push_back(c);
    }
  }

  // Standalone op time at a budget, for the additive selector: evidence if it matches, else the
  // calibrated model; reduced budgets by the CTA-wave estimate.
  double standalone_op(int i, int budget) const {
    return cta_wave_estimate(standalone_us[i], g.ops[i].num_tiles(), cost.machine.workers, budget);
  }

  double additive(const std::vector<Region>& regions) {
    double s = 0;
    for (const Region& r : regions) {
      if (is_whole_step_backend(r.backend)) {
        s += additive_pdl(r);
        continue;
      }
      if (r.backend != Backend::Conventional)
        s += r.backend == Backend::Overlap ? cost.overlap_region_us : cost.persistent_region_us;
      for (int i = r.first_op; i <= r.last_op; ++i)
        s += standalone_op(i, r.cta_budget) -
             (r.backend == Backend::Conventional ? 0.0 : cost.launch_us);
    }
    return s;
  }

  // A PDL region by the sum of standalone times: every kernel it launches (the chain's folded
  // ops launch none), each PDL boundary between two own kernels pdl_wait_us instead of launch_us.
  double additive_pdl(const Region& r) const {
    const std::vector<char> folded = r.backend == Backend::PdlChain
                                         ? chain_folded_ops(g, r.folds, cost)
                                         : std::vector<char>(g.ops.size(), 0);
    double s = 0;
    bool prev_own = false, first = true;
    for (int i = r.first_op; i <= r.last_op; ++i) {
      if (folded[i]) continue;
      const bool own = !is_vendor_op(g.ops[i], /*pdl=*/true);
      s += standalone_op(i, r.cta_budget);
      if (own && prev_own && !first) s -= cost.launch_us - cost.pdl_wait_us;
      prev_own = own;
      first = false;
    }
    return s;
  }

  double serial_sum(const std::vector<Region>& regions, bool keep_barriers) {
    double s = 0;
    for (const Region& r : regions) s += region_time(r, keep_barriers);
    return s;
  }

  // Truncated copy of g and rg with `k` layers.
  std::pair<OpGraph, RegionGraph> truncate(int k) const {
    const int p = rg.prefix, q = rg.period;
    const int first_layer_op = rg.groups[p].first_op;
    const int ops_per_layer = rg.groups[p + q].first_op - first_layer_op;
    const int keep_end = first_layer_op + k * ops_per_layer;
    const int shift = (rg.repeats - k) * ops_per_layer;
    OpGraph t = remove_op_range(g, keep_end, shift);
    RegionGraph r;
    r.prefix = p;
    r.period = q;
    r.repeats = k;
    for (int i = 0; i < static_cast<int>(rg.groups.size()); ++i) {
      if (i >= p + k * q && i < p + rg.repeats * q) continue;
      Group gr = rg.groups[i];
      if (gr.first_op >= keep_end) {
        gr.first_op -= shift;
        gr.last_op -= shift;
      }
      r.groups.push_back(gr);
    }
    return {t, r};
  }

  // The graphs co-running candidates are simulated on: the whole step when it has at most two
  // layers, else the step truncated to one and to two layers (extrapolated linearly). Built once
  // by prepare_corunning(), then only read, so candidates can be simulated in parallel.
  struct Truncated {
    OpGraph graph;
    RegionGraph rg;
    std::vector<double> extra;
  };
  std::vector<Truncated> corun_graphs;

  void prepare_corunning() {
    auto add = [&](OpGraph graph, RegionGraph graph_rg) {
      std::vector<double> ex(graph.ops.size());
      for (size_t i = 0; i < graph.ops.size(); ++i) ex[i] = key_extra.at(op_key(graph, i));
      corun_graphs.push_back({std::move(graph), std::move(graph_rg), std::move(ex)});
    };
    corun_graphs.clear();
    if (rg.period == 0 || rg.repeats <= 2) {
      add(g, rg);
      return;
    }
    for (int k = 1; k <= 2; ++k) {
      auto [tg, trg] = truncate(k);
      add(std::move(tg), std::move(trg));
    }
  }

  // One co-running simulation: template `t` under `policy` on truncated graph `graph`.
  struct CorunJob {
    int graph = 0;
    const Template* t = nullptr;
    Policy policy = Policy::Serial;
    int split = 0;
    double us = 0;
  };
  double run_corunning(const CorunJob& j, SimCount* count) const {
    const Truncated& tr = corun_graphs[j.graph];
    return simulate(tr.graph, expand(tr.rg, *j.t, j.policy, j.split), j.policy, j.split, tr.extra,
                    false, count);
  }
  // What determines a job's time: its graph, the regions the template expands to there (on the
  // one-layer graph the wrap bit between layers expands to nothing, so templates that differ only
  // in it share a job), the policy and the split.
  std::vector<int> corun_key(const CorunJob& j) const {
    std::vector<int> key = {j.graph, static_cast<int>(j.policy), j.split};
    for (const Region& r : expand(corun_graphs[j.graph].rg, *j.t, j.policy, j.split))
      key.insert(key.end(), {r.first_op, r.last_op, static_cast<int>(r.backend), r.cta_budget,
                             static_cast<int>(r.folds)});
    return key;
  }
  // The step time from the jobs' times: the whole step, or extrapolated from one and two layers.
  double corunning(double t1, double t2) const {
    return corun_graphs.size() == 1 ? t1 : t2 + (rg.repeats - 2) * (t2 - t1);
  }
};

std::string describe_region(const OpGraph& g, const Region& r) {
  std::string s = std::string(backend_name(r.backend)) + "[" + g.ops[r.first_op].name;
  if (r.last_op != r.first_op) s += ".." + g.ops[r.last_op].name;
  return s + "]";
}

std::string fmt(double v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << v;
  return o.str();
}

// Every template: cut bits x backend per template group, consistent inside regions.
std::vector<Template> enumerate_templates(const Planner& p, const std::vector<Backend>& backends,
                                          int bits, bool wrap) {
  const RegionGraph& rg = p.rg;
  const PlanOptions& options = p.opt;
  const int groups_t = p.tg;
  std::vector<Template> templates;
  const int64_t nb = static_cast<int64_t>(backends.size());
  int64_t combos = int64_t{1} << bits;
  for (int i = 0; i < groups_t; ++i) combos *= nb;
  if (combos > options.max_candidates * 64)
    throw_input_error("plan", "candidate space",
                      "expected at most " + std::to_string(options.max_candidates) +
                          " candidates; " + std::to_string(groups_t) + " template groups and " +
                          std::to_string(backends.size()) +
                          " backends give too many: group more ops or raise the cap");
  for (int64_t c = 0; c < combos; ++c) {
    Template t;
    int64_t v = c;
    t.cut.resize(std::max(bits, 1));
    for (int b = 0; b < bits; ++b) t.cut[b] = (v >> b) & 1;
    v >>= bits;
    t.backend.resize(p.tg);
    for (int i = 0; i < groups_t; ++i) {
      t.backend[i] = backends[v % nb];
      v /= nb;
    }
    // Uncut neighbours share a region, hence a backend; in a period, the wrap bit links the last
    // group of a layer to the first group of the next.
    bool ok = true;
    for (int i = 0; i + 1 < groups_t && ok; ++i)
      if (!t.cut[i] && t.backend[i] != t.backend[i + 1]) ok = false;
    if (wrap && !t.cut[p.tg - 1] && t.backend[rg.prefix + rg.period - 1] != t.backend[rg.prefix])
      ok = false;
    if (ok) templates.push_back(t);
  }
  return templates;
}

// The candidates of every template (serial in its canonical form; fixed split and dynamic where
// the template has two regions or more), each with its label; cand_template[i]: candidate i's
// template.
void enumerate_candidates(Planner& p, const std::vector<Template>& templates, int bits,
                          std::vector<Candidate>& cands, std::vector<int>& cand_template) {
  const RegionGraph& rg = p.rg;
  const PlanOptions& options = p.opt;
  const CostModel& cost = p.cost;
  const int groups_t = p.tg;
  auto add = [&](int ti, Policy policy, int split) {
    const Template& t = templates[ti];
    Candidate c;
    c.regions = p.expand(rg, t, policy, split);
    c.policy = policy;
    c.split = split;
    bool unsupported = (policy == Policy::Dynamic && !cost.dynamic_supported) ||
                       (policy == Policy::FixedSplit && !cost.fixed_split_supported);
    // A persistent region holds only what the executors run in one (no vendor GEMM, a launch of
    // its own; persistent_refusal): another cover is no candidate at all.
    for (const Region& r : c.regions)
      if (r.backend == Backend::Persistent)
        for (int i = r.first_op; i <= r.last_op; ++i)
          if (!persistent_refusal(p.g, i, false, cost.machine.workers).empty()) return;
    for (const Region& r : c.regions) {
      if (r.backend == Backend::Persistent && !cost.persistent_supported) unsupported = true;
      if (r.backend == Backend::Overlap && !cost.overlap_supported) unsupported = true;
    }
    c.executor_supports = !unsupported;
    if (unsupported && !options.include_unsupported) return;
    std::string label;
    for (int b = 0; b < bits; ++b) label += t.cut[b] ? '|' : '-';
    label += " ";
    for (int i = 0; i < groups_t; ++i) label += backend_name(t.backend[i])[0];
    label += std::string(" ") + policy_name(policy);
    if (policy == Policy::FixedSplit) label += " " + std::to_string(split);
    c.label = label;
    cands.push_back(std::move(c));
    cand_template.push_back(ti);
  };
  for (int ti = 0; ti < static_cast<int>(templates.size()); ++ti) {
    const Template& t = templates[ti];
    // Serially, a cut between two conventional groups changes nothing: keep the uncut form.
    bool canonical = true;
    const std::vector<Region> probe = p.expand(rg, t, Policy::Serial, 0);
    for (size_t r = 1; r < probe.size(); ++r)
      if (probe[r].backend == Backend::Conventional &&
          probe[r - 1].backend == Backend::Conventional)
        canonical = false;
    if (canonical) add(ti, Policy::Serial, 0);
    if (probe.size() < 2) continue;
    for (int s : options.splits) add(ti, Policy::FixedSplit, s);
    add(ti, Policy::Dynamic, 0);
  }
  if (static_cast<int64_t>(cands.size()) > options.max_candidates)
    throw_input_error("plan", "candidate space",
                      "expected at most " + std::to_string(options.max_candidates) +
                          " candidates, found " + std::to_string(cands.size()) +
                          ": group more ops, offer fewer splits or raise the cap");
}

// The whole-step candidates (PlanOptions::step_backends): conventional+PDL, and the PDL chain
// once per distinct set of ops its folds remove, asking for the most folds that give the set
// (a fold that removes nothing here is asked for anyway: the plan then runs as the default).
void enumerate_step_candidates(Planner& p, std::vector<Candidate>& cands,
                               std::vector<int>& cand_template) {
  const OpGraph& g = p.g;
  const CostModel& cost = p.cost;
  const int last = static_cast<int>(g.ops.size()) - 1;
  auto add = [&](Backend b, uint32_t folds, bool supported) {
    if (!supported && !p.opt.include_unsupported) return;
    Candidate c;
    c.regions = {{0, last, b, cost.machine.workers, folds}};
    c.executor_supports = supported;
    c.label = std::string("step ") + backend_name(b);
    if (b == Backend::PdlChain) c.label += " folds " + chain_folds_name(folds);
    c.label += " serial";
    cands.push_back(std::move(c));
    cand_template.push_back(-1);
  };
  for (Backend b : p.opt.step_backends) {
    if (b == Backend::ConventionalPdl) {
      add(b, 0, cost.pdl_supported);
    } else if (b == Backend::PdlChain) {
      std::vector<std::vector<char>> seen;
      for (int folds = CHAIN_FOLD_ALL; folds >= 0; --folds) {
        if (!p.opt.chain_fold_variants && folds != CHAIN_FOLD_ALL) break;
        std::vector<char> removed = chain_folded_ops(g, static_cast<uint32_t>(folds), cost);
        if (std::find(seen.begin(), seen.end(), removed) != seen.end()) continue;
        seen.push_back(std::move(removed));
        add(b, static_cast<uint32_t>(folds), cost.chain_supported);
      }
    } else {
      throw_input_error(
          "plan", "step_backends",
          std::string("expected conventional_pdl or pdl_chain, found ") + backend_name(b));
    }
  }
}

// The PDL chain with persistent regions (PlanOptions::chain_persistent): one candidate per
// non-empty set of template groups run persistent, the rest on the chain with all its folds.
void enumerate_chain_persistent(Planner& p, std::vector<Candidate>& cands,
                                std::vector<int>& cand_template) {
  const OpGraph& g = p.g;
  const RegionGraph& rg = p.rg;
  const CostModel& cost = p.cost;
  if (!p.opt.chain_persistent || !cost.chain_supported || !cost.persistent_supported ||
      rg.groups.empty() || p.tg > 12)
    return;
  const int last = static_cast<int>(g.ops.size()) - 1;
  const int step_advance = g.ops[last].code == OpCode::StepAdvance ? last : -1;
  for (int mask = 1; mask < (1 << p.tg); ++mask) {
    std::vector<Region> regions;
    bool runnable = true;
    for (int gi = 0; gi < static_cast<int>(rg.groups.size()) && runnable; ++gi) {
      const bool pers = (mask >> Planner::tmpl_of(rg, gi)) & 1;
      const Backend b = pers ? Backend::Persistent : Backend::PdlChain;
      int first = rg.groups[gi].first_op, end = rg.groups[gi].last_op;
      // step_advance never runs in a region: it closes the step on the chain.
      if (pers && end == step_advance) --end;
      if (pers)
        for (int i = first; i <= end && runnable; ++i)
          runnable = persistent_refusal(g, i, true, cost.machine.workers).empty();
      if (first <= end) {
        if (!regions.empty() && regions.back().backend == b)
          regions.back().last_op = end;
        else
          regions.push_back({first, end, b, cost.machine.workers, CHAIN_FOLD_ALL});
      }
      if (end < rg.groups[gi].last_op) {
        if (!regions.empty() && regions.back().backend == Backend::PdlChain)
          regions.back().last_op = step_advance;
        else
          regions.push_back({step_advance, step_advance, Backend::PdlChain, cost.machine.workers,
                             CHAIN_FOLD_ALL});
      }
    }
    if (!runnable) continue;
    Candidate c;
    c.regions = std::move(regions);
    c.label = "chain+persistent ";
    for (int t = 0; t < p.tg; ++t) c.label += (mask >> t) & 1 ? 'P' : 'C';
    c.label += " serial";
    cands.push_back(std::move(c));
    cand_template.push_back(-1);
  }
}

// Each candidate's predicted, additive and no-overlap times: serial ones from the region cache,
// co-running ones by simulating their tile graphs.
void predict_candidates(Planner& p, const std::vector<Template>& templates,
                        const std::vector<int>& cand_template, std::vector<Candidate>& cands) {
  std::vector<size_t> corun;
  for (size_t ci = 0; ci < cands.size(); ++ci) {
    Candidate& c = cands[ci];
    c.additive_us = p.additive(c.regions);
    c.no_overlap_us = p.serial_sum(c.regions, true);
    if (c.policy == Policy::Serial) {
      c.predicted_us = p.serial_sum(c.regions, false);
    } else {
      corun.push_back(ci);
    }
  }
  // Co-running candidates are the expensive ones (whole tile graphs, no region cache): each
  // distinct simulation once (corun_key), on all cores. Each job writes only its own time, and the
  // counters are summed in a fixed order, so the result does not depend on the thread count.
  p.prepare_corunning();
  std::vector<Planner::CorunJob> jobs;
  std::map<std::vector<int>, int> job_of;
  std::vector<std::array<int, 2>> cand_jobs(corun.size());
  for (size_t j = 0; j < corun.size(); ++j) {
    const Candidate& c = cands[corun[j]];
    for (int graph = 0; graph < static_cast<int>(p.corun_graphs.size()); ++graph) {
      const Planner::CorunJob job{graph, &templates[cand_template[corun[j]]], c.policy, c.split};
      const auto [it, added] = job_of.emplace(p.corun_key(job), static_cast<int>(jobs.size()));
      if (added) jobs.push_back(job);
      cand_jobs[j][graph] = it->second;
    }
  }
  const size_t threads =
      std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), jobs.size()));
  std::vector<Planner::SimCount> counts(threads);
  std::vector<std::thread> pool;
  for (size_t w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (size_t j = w; j < jobs.size(); j += threads)
        jobs[j].us = p.run_corunning(jobs[j], &counts[w]);
    });
  for (std::thread& t : pool) t.join();
  for (size_t j = 0; j < corun.size(); ++j) {
    const double t1 = jobs[cand_jobs[j][0]].us;
    cands[corun[j]].predicted_us =
        p.corunning(t1, p.corun_graphs.size() > 1 ? jobs[cand_jobs[j][1]].us : t1);
  }
  for (const Planner::SimCount& k : counts) {
    p.res.sim_events += k.events;
    p.res.sim_tasks += k.tasks;
  }
}

// Why a candidate ranks where it does: what each non-conventional region gains over running its
// ops conventionally, and what co-running adds over the same cover run serially.
std::string candidate_reason(Planner& p, const Candidate& c) {
  const OpGraph& g = p.g;
  const CostModel& cost = p.cost;
  std::map<std::string, std::pair<double, int>> gains;
  for (const Region& r : c.regions) {
    if (r.backend == Backend::Conventional) continue;
    Region conv = r;
    conv.backend = Backend::Conventional;
    conv.folds = 0;
    conv.cta_budget = cost.machine.workers;
    Region own = r;
    own.cta_budget = cost.machine.workers;
    const double gain = p.region_time(conv, false) - p.region_time(own, false);
    auto& e = gains[describe_region(g, r)];
    e.first += gain;
    e.second += 1;
  }
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [name, v] : gains)
    sorted.push_back({v.first, name + (v.second > 1 ? " x" + std::to_string(v.second) : "")});
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const double delta = c.predicted_us - p.res.baseline_us;
  std::string why =
      fmt(delta) + " us (" + fmt(100.0 * delta / p.res.baseline_us) + "%) vs all-conventional";
  for (size_t i = 0; i < sorted.size() && i < 3; ++i)
    why += "; " + sorted[i].second + " saves " + fmt(sorted[i].first) +
           " us (weight prefetch across removed barriers, fewer boundaries)";
  if (c.policy != Policy::Serial) {
    std::vector<Region> full = c.regions;
    for (Region& r : full) r.cta_budget = cost.machine.workers;
    const double serial = p.serial_sum(full, false);
    why += std::string("; ") + policy_name(c.policy) +
           (c.policy == Policy::FixedSplit ? " " + std::to_string(c.split) + "/" +
                                                 std::to_string(cost.machine.workers - c.split)
                                           : "") +
           " sharing " + (c.predicted_us <= serial ? "saves " : "costs ") +
           fmt(std::fabs(serial - c.predicted_us)) + " us vs the same cover run serially";
  }
  if (!c.executor_supports) why += "; not runnable yet (executor_supports=false)";
  return why;
}

// Ranks the candidates by predicted time into res (the pick, the baseline's rank), and the picks
// the additive and no-overlap models would make.
void rank_candidates(std::vector<Candidate>& cands, PlanResult& res) {
  auto rank = [](std::vector<Candidate>& v, auto score) {
    std::vector<int> idx(v.size());
    for (size_t i = 0; i < v.size(); ++i) idx[i] = static_cast<int>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
      const double sa = score(v[a]), sb = score(v[b]);
      return sa != sb ? sa < sb : v[a].label < v[b].label;
    });
    return idx;
  };
  const std::vector<int> order = rank(cands, [](const Candidate& c) { return c.predicted_us; });
  for (int i : order) res.ranked.push_back(cands[i]);
  auto first_supported = [&](const std::vector<int>& idx) {
    for (int i : idx)
      if (cands[i].executor_supports)
        for (size_t r = 0; r < order.size(); ++r)
          if (order[r] == i) return static_cast<int>(r);
    return -1;
  };
  res.pick = first_supported(order);
  for (size_t r = 0; r < order.size(); ++r) {
    const Candidate& c = cands[order[r]];
    if (c.policy == Policy::Serial && c.regions.size() == 1 &&
        c.regions[0].backend == Backend::Conventional)
      res.baseline_rank = static_cast<int>(r);
  }
  res.additive_pick =
      first_supported(rank(cands, [](const Candidate& c) { return c.additive_us; }));
  res.no_overlap_pick =
      first_supported(rank(cands, [](const Candidate& c) { return c.no_overlap_us; }));
}

}  // namespace

PlanResult plan(const OpGraph& g, const ServiceTable& table, const PlanOptions& options,
                const CostModel& cost, const RegionGraph* rg_in) {
  if (g.ops.empty()) throw_input_error("plan", "ops", "expected a non-empty op graph");
  const RegionGraph rg = rg_in ? *rg_in : default_region_graph(g);
  Planner p{g, rg, table, options, cost, {}, {}, {}, {}, {}, {}, {}, 0, {}};
  p.res.model = g.model;
  p.res.gpu = cost.gpu;
  p.res.batch = g.batch;
  p.res.objective = options.objective;
  const int ng = static_cast<int>(rg.groups.size());
  if (ng < 1 || rg.groups.front().first_op != 0 ||
      rg.groups.back().last_op + 1 != (int)g.ops.size())
    throw_input_error("plan", "region graph", "expected groups covering every op");
  for (int s : options.splits)
    if (s < 1 || s >= cost.machine.workers)
      throw_input_error("plan", "splits",
                        "expected 1.." + std::to_string(cost.machine.workers - 1) + ", found " +
                            std::to_string(s));
  p.tg = rg.period > 0 ? ng - rg.period * (rg.repeats - 1) : ng;
  const bool wrap = rg.period > 0 && rg.repeats > 1;
  const int bits = p.tg - 1 + (wrap ? 1 : 0);

  std::vector<Backend> backends;
  for (Backend b : options.backends) {
    if (is_whole_step_backend(b))
      throw_input_error("plan", "backends",
                        std::string("expected region backends (conventional, overlap, "
                                    "persistent), found ") +
                            backend_name(b) + ": whole-step backends go in step_backends");
    if (b != Backend::Persistent || cost.persistent_supported || options.include_unsupported)
      backends.push_back(b);
  }

  p.calibrate();

  const std::vector<Template> templates = enumerate_templates(p, backends, bits, wrap);

  std::vector<Candidate> cands;
  std::vector<int> cand_template;
  enumerate_candidates(p, templates, bits, cands, cand_template);
  enumerate_step_candidates(p, cands, cand_template);
  enumerate_chain_persistent(p, cands, cand_template);
  p.res.candidates = static_cast<int64_t>(cands.size());

  const Region all_conv{0, static_cast<int>(g.ops.size()) - 1, Backend::Conventional,
                        cost.machine.workers};
  p.res.baseline_us = p.serial_sum({all_conv}, false);
  {
    CostModel raw = cost;
    const std::vector<double> zero(g.ops.size(), 0.0);
    const TileGraph t = build_tile_graph(g, {all_conv}, Policy::Serial, 0, raw, zero, false);
    p.res.uncalibrated_baseline_us =
        simulate_tiles(t.tasks, t.pool_workers, raw.machine).makespan_us;
  }

  predict_candidates(p, templates, cand_template, cands);

  // A plan with any overlap or persistent region runs every op of the step on the overlap
  // executor, as an overlap kernel (CostModel::overlap_serial_op_us); so does the PDL chain, for
  // every op it launches.
  if (cost.overlap_serial_op_us > 0)
    for (Candidate& c : cands) {
      if (c.regions.size() == 1 && c.regions[0].backend == Backend::PdlChain) {
        const std::vector<char> folded = chain_folded_ops(g, c.regions[0].folds, cost);
        c.predicted_us += cost.overlap_serial_op_us *
                          static_cast<double>(std::count(folded.begin(), folded.end(), 0));
      } else if (std::any_of(c.regions.begin(), c.regions.end(), [](const Region& r) {
                   return r.backend == Backend::Overlap || r.backend == Backend::Persistent;
                 })) {
        c.predicted_us += cost.overlap_serial_op_us * static_cast<double>(g.ops.size());
      }
    }

  // Reasons: what each non-conventional region gains, and what co-running adds.
  for (Candidate& c : cands) c.reason = candidate_reason(p, c);

  rank_candidates(cands, p.res);
  return p.res;
}

}  // namespace megaops
