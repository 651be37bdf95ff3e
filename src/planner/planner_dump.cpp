// Dumps of the planner's results and graphs (see planner.h): a plan as JSON, region and tile
// graphs as Graphviz dot and JSON, for `megaops plan` and the docs.
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "planner/planner.h"

namespace megaops {

using nlohmann::json;

std::string plan_json(const PlanResult& r, const OpGraph& g, int index) {
  const Candidate& c = r.ranked.at(index);
  json regions = json::array();
  for (const Region& reg : c.regions) {
    json region = {
        {"ops", {reg.first_op, reg.last_op}},   {"first_op", g.ops[reg.first_op].name},
        {"last_op", g.ops[reg.last_op].name},   {"first_layer", g.ops[reg.first_op].layer},
        {"backend", backend_name(reg.backend)}, {"cta_budget", reg.cta_budget}};
    if (reg.backend == Backend::PdlChain) region["folds"] = chain_folds_name(reg.folds);
    regions.push_back(std::move(region));
  }
  json j = {{"model", r.model},
            {"batch", r.batch},
            {"objective", objective_name(r.objective)},
            {"regions", regions},
            {"policy", policy_name(c.policy)},
            {"split", c.split},
            {"predicted_us", c.predicted_us},
            {"baseline_us", r.baseline_us},
            {"executor_supports", c.executor_supports},
            {"reason", c.reason}};
  return j.dump(1);
}

std::string region_graph_dot(const OpGraph& g, const RegionGraph& rg, const Candidate& c) {
  std::ostringstream o;
  o << "digraph regions {\n  rankdir=LR;\n";
  for (size_t r = 0; r < c.regions.size(); ++r) {
    const Region& reg = c.regions[r];
    o << "  subgraph cluster_" << r << " {\n    label=\"" << backend_name(reg.backend) << ", "
      << reg.cta_budget << " CTAs\";\n";
    for (size_t i = 0; i < rg.groups.size(); ++i)
      if (rg.groups[i].first_op >= reg.first_op && rg.groups[i].last_op <= reg.last_op)
        o << "    g" << i << " [shape=box,label=\"" << g.ops[rg.groups[i].first_op].name << " .. "
          << g.ops[rg.groups[i].last_op].name << "\\nlayer " << g.ops[rg.groups[i].first_op].layer
          << "\"];\n";
    o << "  }\n";
  }
  for (size_t i = 1; i < rg.groups.size(); ++i) o << "  g" << i - 1 << " -> g" << i << ";\n";
  o << "}\n";
  return o.str();
}

std::string region_graph_json(const OpGraph& g, const RegionGraph& rg, const Candidate& c) {
  json groups = json::array();
  for (const Group& gr : rg.groups)
    groups.push_back({{"ops", {gr.first_op, gr.last_op}},
                      {"first_op", g.ops[gr.first_op].name},
                      {"last_op", g.ops[gr.last_op].name}});
  json regions = json::array();
  for (const Region& r : c.regions)
    regions.push_back({{"ops", {r.first_op, r.last_op}},
                       {"backend", backend_name(r.backend)},
                       {"cta_budget", r.cta_budget}});
  return json{{"groups", groups},      {"prefix", rg.prefix}, {"period", rg.period},
              {"repeats", rg.repeats}, {"regions", regions},  {"policy", policy_name(c.policy)}}
      .dump(1);
}

namespace {

void check_small(const TileGraph& t, size_t max_tasks) {
  if (t.tasks.size() > max_tasks)
    throw_input_error("tile graph dump", "tasks",
                      "expected at most " + std::to_string(max_tasks) + ", found " +
                          std::to_string(t.tasks.size()) + " (dump a smaller graph)");
}

std::string task_name(const OpGraph& g, const TileGraph& t, int i) {
  const TileTask& k = t.tasks[i];
  if (k.join) return "join " + std::to_string(i);
  return g.ops[k.op].name + " L" + std::to_string(g.ops[k.op].layer) + " t" +
         std::to_string(i - t.op_first_tile[k.op]);
}

}  // namespace

std::string tile_graph_dot(const OpGraph& g, const TileGraph& t, const TileSimResult& r,
                           size_t max_tasks) {
  check_small(t, max_tasks);
  std::ostringstream o;
  o << "digraph tiles {\n  rankdir=LR;\n";
  for (size_t i = 0; i < t.tasks.size(); ++i) {
    const TileTask& k = t.tasks[i];
    o << "  t" << i << " [shape=" << (k.join ? "point" : "box") << ",label=\""
      << task_name(g, t, static_cast<int>(i)) << "\\n"
      << r.start_us[i] << " .. " << r.finish_us[i] << "\"];\n";
    for (int d : k.launch_deps) o << "  t" << d << " -> t" << i << " [style=dashed];\n";
    for (int d : k.data_deps) o << "  t" << d << " -> t" << i << ";\n";
  }
  o << "}\n";
  return o.str();
}

std::string tile_graph_json(const OpGraph& g, const TileGraph& t, const TileSimResult& r,
                            size_t max_tasks) {
  check_small(t, max_tasks);
  json tasks = json::array();
  for (size_t i = 0; i < t.tasks.size(); ++i) {
    const TileTask& k = t.tasks[i];
    tasks.push_back({{"id", i},
                     {"name", task_name(g, t, static_cast<int>(i))},
                     {"join", k.join},
                     {"pool", k.pool},
                     {"compute_us", k.compute_us},
                     {"weight_bytes", k.weight_bytes},
                     {"input_bytes", k.input_bytes},
                     {"output_bytes", k.output_bytes},
                     {"launch_deps", k.launch_deps.to_vector()},
                     {"data_deps", k.data_deps.to_vector()},
                     {"start_us", r.start_us[i]},
                     {"finish_us", r.finish_us[i]}});
  }
  return json{{"pool_workers", t.pool_workers}, {"makespan_us", r.makespan_us}, {"tasks", tasks}}
      .dump(1);
}

}  // namespace megaops
