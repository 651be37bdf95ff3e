// See pipeline_plan.h. Work: the service table first (every graph under every backend and budget a
// candidate can ask for, each layered graph simulated with one and two layers, on all cores),
// then one event graph per candidate (a few hundred launches), so a case plans in well under a
// second on two cores (bench/results/*-pipeline-planner-time).
#include "planner/pipeline_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "planner/pipeline_events.h"

namespace megaops {

const char* pipeline_group_name(int group) {
  static const char* names[] = {"prefill", "producer", "local", "codec"};
  return group >= 0 && group < PIPELINE_GROUPS ? names[group] : "?";
}

PipelineCosts default_pipeline_costs() {
  PipelineCosts c;
  c.codec_cost.dtype = "fp32";
  c.codec_cost.machine.worker_flops_per_us = 2.0e6;
  return c;
}

namespace {

constexpr int GRAPHS = 5;  // prefill, producer_step, local_step, codec_first, codec_chunk
const char* GROUP_LETTER[] = {"P", "B", "L", "C"};

const OpGraph& graph_at(const PipelineGraphs& g, int i) {
  const OpGraph* all[GRAPHS] = {&g.prefill, &g.producer_step, &g.local_step, &g.codec_first,
                                &g.codec_chunk};
  return *all[i];
}

const char* short_backend(Backend b) {
  switch (b) {
    case Backend::Conventional:
      return "conv";
    case Backend::ConventionalPdl:
      return "pdl";
    case Backend::PdlChain:
      return "chain";
    case Backend::Persistent:
      return "pers";
    case Backend::Overlap:
      return "overlap";
  }
  return "?";
}

std::vector<Backend> group_backends(int group) {
  if (group == 1 || group == 2)
    return {Backend::Conventional, Backend::ConventionalPdl, Backend::PdlChain,
            Backend::Persistent};
  return {Backend::Conventional, Backend::Persistent};
}

// The first k layers of a layered graph (embedding, layers 0..k-1, head), inputs renumbered as
// plan() truncates a step.
OpGraph first_layers(const OpGraph& g, int k) {
  int first = -1, second = -1, layers = 0;
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    layers = std::max(layers, g.ops[i].layer + 1);
    if (g.ops[i].layer == 0 && first < 0) first = i;
    if (g.ops[i].layer == 1 && second < 0) second = i;
  }
  const int per = second - first, keep_end = first + k * per, shift = (layers - k) * per;
  return remove_op_range(g, keep_end, shift);
}

int layer_count(const OpGraph& g) {
  int layers = 0;
  for (const Op& o : g.ops) layers = std::max(layers, o.layer + 1);
  return layers;
}

std::string op_key(const OpGraph& g, int i) {
  return g.ops[i].name + "|" + shape_signature(g.ops[i], g.context);
}

struct Services {
  const PipelineGraphs& g;
  const ServiceTable& table;
  const PipelineCosts& costs;
  std::vector<std::map<std::string, double>> extra;  // per graph: op key -> occupancy
  std::map<std::tuple<int, int, int>, double> us;    // (graph, backend, budget)
  std::vector<OpCalibration> calibration;
  int64_t events = 0, tasks = 0;

  const CostModel& cost_of(int graph) const { return graph >= 3 ? costs.codec_cost : costs.cost; }

  void calibrate() {
    extra.assign(GRAPHS, {});
    for (int gi = 0; gi < GRAPHS; ++gi) {
      const OpGraph& og = graph_at(g, gi);
      for (int i = 0; i < static_cast<int>(og.ops.size()); ++i) {
        const std::string key = op_key(og, i);
        if (extra[gi].count(key)) continue;
        OpCalibration c = calibrate_op(og, i, table, cost_of(gi), &events, &tasks);
        c.key = std::string(og.model) + ": " + key;
        extra[gi][key] = c.extra_tile_us;
        calibration.push_back(std::move(c));
      }
    }
  }

  // One graph as one region of `b` on `budget` CTAs.
  double simulate(const OpGraph& og, int gi, Backend b, int budget, int64_t* ev,
                  int64_t* tk) const {
    std::vector<double> ex(og.ops.size());
    for (size_t i = 0; i < og.ops.size(); ++i)
      ex[i] = extra[gi].at(op_key(og, static_cast<int>(i)));
    const CostModel& cost = cost_of(gi);
    const Region r{0, static_cast<int>(og.ops.size()) - 1, b, budget,
                   b == Backend::PdlChain ? static_cast<uint32_t>(CHAIN_FOLD_ALL) : 0u};
    const TileGraph t = build_tile_graph(og, {r}, Policy::Serial, 0, cost, ex, false);
    const TileSimResult s = simulate_tiles(t.tasks, {budget}, cost.machine);
    *ev += s.events;
    *tk += static_cast<int64_t>(t.tasks.size());
    double us = s.makespan_us;
    // The overlap executor's per-op cost (CostModel::overlap_serial_op_us), as plan() charges it.
    if (cost.overlap_serial_op_us > 0 && (b == Backend::PdlChain || b == Backend::Persistent)) {
      const std::vector<char> folded = b == Backend::PdlChain
                                           ? chain_folded_ops(og, CHAIN_FOLD_ALL, cost)
                                           : std::vector<char>(og.ops.size(), 0);
      us += cost.overlap_serial_op_us *
            static_cast<double>(std::count(folded.begin(), folded.end(), 0));
    }
    return us;
  }

  // Layered graphs: one and two layers, extrapolated (exact when every layer adds the same time).
  double service(int gi, Backend b, int budget, int64_t* ev, int64_t* tk) const {
    const OpGraph& og = graph_at(g, gi);
    const int layers = layer_count(og);
    if (layers <= 2) return simulate(og, gi, b, budget, ev, tk);
    const double t1 = simulate(first_layers(og, 1), gi, b, budget, ev, tk);
    const double t2 = simulate(first_layers(og, 2), gi, b, budget, ev, tk);
    return t2 + (layers - 2) * (t2 - t1);
  }

  void compute(const std::vector<int>& budgets) {
    std::vector<std::tuple<int, int, int>> jobs;
    for (int gi = 0; gi < GRAPHS; ++gi) {
      const int group = gi >= 3 ? 3 : gi;
      for (Backend b : group_backends(group))
        for (int w : budgets) jobs.emplace_back(gi, static_cast<int>(b), w);
    }
    std::vector<double> out(jobs.size());
    const size_t threads =
        std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), jobs.size()));
    std::vector<int64_t> ev(threads, 0), tk(threads, 0);
    std::vector<std::thread> pool;
    for (size_t w = 0; w < threads; ++w)
      pool.emplace_back([&, w] {
        for (size_t j = w; j < jobs.size(); j += threads) {
          auto [gi, b, budget] = jobs[j];
          out[j] = service(gi, static_cast<Backend>(b), budget, &ev[w], &tk[w]);
        }
      });
    for (std::thread& t : pool) t.join();
    for (size_t w = 0; w < threads; ++w) {
      events += ev[w];
      tasks += tk[w];
    }
    for (size_t j = 0; j < jobs.size(); ++j) us[jobs[j]] = out[j];
  }

  double get(int gi, Backend b, int budget) const {
    auto it = us.find({gi, static_cast<int>(b), budget});
    if (it == us.end())
      throw Error(std::string("pipeline plan: no service time for ") + graph_at(g, gi).model +
                  " under " + backend_name(b) + " at " + std::to_string(budget) + " CTAs");
    return it->second;
  }
};

std::string candidate_label(const PipelineCandidate& c) {
  std::string s;
  for (size_t r = 0; r < c.regions.size(); ++r) {
    if (r) s += " | ";
    for (int g = c.regions[r].first_group; g <= c.regions[r].last_group; ++g)
      s += std::string(g > c.regions[r].first_group ? "+" : "") + GROUP_LETTER[g];
    s += std::string(":") + short_backend(c.regions[r].backend);
  }
  s += std::string(" ") + policy_name(c.policy);
  if (c.policy != Policy::Serial) s += " " + std::to_string(c.split);
  return s;
}

bool runnable(const PipelineCandidate& c, const CostModel& cost) {
  if (c.policy != Policy::Serial) return false;
  for (const PipelineRegion& r : c.regions) {
    if (r.first_group != r.last_group) return false;
    const int g = r.first_group;
    if (g == 0 || g == 3) {
      if (r.backend != Backend::Conventional) return false;
    } else if (r.backend == Backend::ConventionalPdl) {
      if (!cost.pdl_supported) return false;
    } else if (r.backend == Backend::PdlChain) {
      if (!cost.chain_supported) return false;
    } else if (r.backend != Backend::Conventional) {
      return false;
    }
  }
  return true;
}

// Every cover of the four groups, every backend per region (a region of several groups is one
// fused launch: persistent, or the PDL chain where every group takes it), every policy.
std::vector<PipelineCandidate> enumerate(const PipelinePlanOptions& opt) {
  std::vector<PipelineCandidate> out;
  for (int cuts = 0; cuts < 8; ++cuts) {
    std::vector<std::pair<int, int>> spans;
    int first = 0;
    for (int g = 0; g < PIPELINE_GROUPS; ++g)
      if (g == PIPELINE_GROUPS - 1 || (cuts >> g & 1)) {
        spans.push_back({first, g});
        first = g + 1;
      }
    std::vector<std::vector<Backend>> choices;
    for (auto [a, b] : spans) {
      std::vector<Backend> allowed = group_backends(a);
      for (int g = a + 1; g <= b; ++g) {
        const std::vector<Backend> more = group_backends(g);
        std::vector<Backend> both;
        for (Backend x : allowed)
          if (std::find(more.begin(), more.end(), x) != more.end()) both.push_back(x);
        allowed = both;
      }
      if (b > a) {  // a fused region: one launch of several groups
        std::vector<Backend> fused;
        for (Backend x : allowed)
          if (x == Backend::Persistent || x == Backend::PdlChain) fused.push_back(x);
        allowed = fused;
      }
      choices.push_back(allowed);
    }
    std::vector<size_t> idx(spans.size(), 0);
    for (;;) {
      PipelineCandidate c;
      for (size_t r = 0; r < spans.size(); ++r)
        c.regions.push_back({spans[r].first, spans[r].second, choices[r][idx[r]]});
      out.push_back(c);
      bool consumer = false, dynamic_ok = true;
      for (const PipelineRegion& r : c.regions) {
        consumer = consumer || r.first_group >= 2;
        if (r.last_group >= 1 && r.backend != Backend::Persistent) dynamic_ok = false;
      }
      if (consumer)
        for (int s : opt.splits) {
          PipelineCandidate f = c;
          f.policy = Policy::FixedSplit;
          f.split = s;
          out.push_back(f);
          if (opt.dynamic && dynamic_ok) {
            f.policy = Policy::Dynamic;
            out.push_back(f);
          }
        }
      size_t r = 0;
      while (r < idx.size() && ++idx[r] == choices[r].size()) idx[r++] = 0;
      if (r == idx.size()) break;
    }
  }
  return out;
}

std::string fmt(double v, int precision = 1) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(precision);
  o << v;
  return o.str();
}

}  // namespace

PipelinePlanResult plan_pipeline(const PipelineConfig& p, const PipelineGraphs& g, int batch,
                                 const ServiceTable& table, const PipelineCosts& costs,
                                 const PipelinePlanOptions& opt) {
  const int workers = costs.cost.machine.workers;
  if (costs.codec_cost.machine.workers != workers)
    throw_input_error("pipeline plan", "costs", "expected one CTA count for every group");
  std::set<int> budgets = {workers};
  for (int s : opt.splits) {
    if (s < 1 || s >= workers)
      throw_input_error(
          "pipeline plan", "splits",
          "expected 1.." + std::to_string(workers - 1) + ", found " + std::to_string(s));
    budgets.insert(s);
    budgets.insert(workers - s);
  }
  Services sv{g, table, costs, {}, {}, {}, 0, 0};
  sv.calibrate();
  sv.compute(std::vector<int>(budgets.begin(), budgets.end()));

  PipelineEventCosts ek;
  ek.workers = workers;
  ek.persistent_region_us = costs.cost.persistent_region_us;
  ek.launch_us = costs.cost.launch_us;
  ek.dynamic_tile_us = costs.cost.dynamic_tile_us;
  for (int gi = 0; gi < GRAPHS; ++gi) ek.graph_tiles.push_back(graph_at(g, gi).total_tiles());
  const PipelineServiceFn fn = [&](int gi, Backend b, int w) { return sv.get(gi, b, w); };
  const double audio_us = p.schedule.stream_frames / p.codec.frame_rate * 1e6;

  std::vector<PipelineCandidate> cands;
  for (PipelineCandidate& c : enumerate(opt)) {
    c.executor_supports = runnable(c, costs.cost);
    if (!c.executor_supports && !opt.include_unsupported) continue;
    c.label = candidate_label(c);
    const PipelineEvents ev = simulate_pipeline_events(p, c, fn, ek);
    c.t_pub_us = ev.t_pub_us;
    c.first_chunk_us = ev.first_chunk_us;
    c.step_h_us = ev.step_h_us;
    c.last_chunk_us = ev.last_chunk_us;
    c.rtfx = ev.last_chunk_us > 0 ? audio_us / ev.last_chunk_us : 0;
    const double rest = audio_us * (1.0 - static_cast<double>(p.schedule.first_chunk_frames) /
                                              p.schedule.stream_frames);
    c.steady_rtfx = ev.last_chunk_us > ev.first_chunk_us && rest > 0
                        ? rest / (ev.last_chunk_us - ev.first_chunk_us)
                        : c.rtfx;
    cands.push_back(std::move(c));
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const PipelineCandidate& a, const PipelineCandidate& b) {
                     return a.t_pub_us != b.t_pub_us ? a.t_pub_us < b.t_pub_us : a.label < b.label;
                   });

  PipelinePlanResult res;
  res.pipeline = p.name;
  res.batch = batch;
  res.step_h = publication_step(p);
  res.candidates = static_cast<int64_t>(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    const PipelineCandidate& c = cands[i];
    const int n = static_cast<int>(i);
    if (res.pick < 0 && c.executor_supports) res.pick = n;
    bool all_conv = c.policy == Policy::Serial, monolith = c.policy == Policy::Serial;
    for (const PipelineRegion& r : c.regions)
      all_conv = all_conv && r.backend == Backend::Conventional;
    monolith = monolith && c.regions.size() == 1 && c.regions[0].backend == Backend::Persistent;
    if (all_conv) res.baseline_rank = n;
    if (monolith) res.monolith_rank = n;
  }
  const double base = res.baseline_rank >= 0 ? cands[res.baseline_rank].t_pub_us : 0;
  for (PipelineCandidate& c : cands) {
    c.reason = "T_pub " + fmt(c.t_pub_us / 1000, 3) + " ms (" +
               (base > 0 ? fmt(100.0 * (c.t_pub_us - base) / base) + "% vs all-conventional"
                         : std::string("no baseline")) +
               "): first chunk " + fmt(c.first_chunk_us / 1000, 3) + " ms, producer step h " +
               fmt(c.step_h_us / 1000, 3) + " ms; RTFx " + fmt(c.rtfx, 2) + " (steady state " +
               fmt(c.steady_rtfx, 2) + ")";
    if (!c.executor_supports) c.reason += "; not runnable yet (executor_supports=false)";
  }
  res.ranked = std::move(cands);
  res.sim_events = sv.events;
  res.event_costs = ek;
  res.calibration = std::move(sv.calibration);
  for (const auto& [key, us] : sv.us)
    res.services.push_back(
        {std::get<0>(key), static_cast<Backend>(std::get<1>(key)), std::get<2>(key), us});
  return res;
}

std::string pipeline_candidate_json(const PipelinePlanResult& r, int index) {
  const PipelineCandidate& c = r.ranked.at(index);
  nlohmann::json regions = nlohmann::json::array();
  for (const PipelineRegion& reg : c.regions) {
    nlohmann::json groups = nlohmann::json::array();
    for (int g = reg.first_group; g <= reg.last_group; ++g)
      groups.push_back(pipeline_group_name(g));
    regions.push_back({{"groups", groups}, {"backend", backend_name(reg.backend)}});
  }
  nlohmann::json j = {{"schema", "megaops-pipeline-composition/1"},
                      {"pipeline", r.pipeline},
                      {"batch", r.batch},
                      {"rank", index},
                      {"label", c.label},
                      {"regions", regions},
                      {"policy", policy_name(c.policy)},
                      {"split", c.split},
                      {"executor_supports", c.executor_supports},
                      {"predicted",
                       {{"t_pub_us", c.t_pub_us},
                        {"first_chunk_us", c.first_chunk_us},
                        {"step_h_us", c.step_h_us},
                        {"last_chunk_us", c.last_chunk_us},
                        {"rtfx", c.rtfx},
                        {"steady_rtfx", c.steady_rtfx}}},
                      {"reason", c.reason}};
  return j.dump(1);
}

std::string pipeline_event_graph_json(const PipelineConfig& p, const PipelinePlanResult& r,
                                      int index) {
  std::map<std::tuple<int, int, int>, double> us;
  for (const PipelineService& s : r.services)
    us[{s.graph, static_cast<int>(s.backend), s.budget}] = s.us;
  const PipelineServiceFn fn = [&](int gi, Backend b, int w) {
    return us.at({gi, static_cast<int>(b), w});
  };
  const PipelineEvents ev = simulate_pipeline_events(p, r.ranked.at(index), fn, r.event_costs);
  return event_graph_json(ev.graph, ev.result);
}

}  // namespace megaops
