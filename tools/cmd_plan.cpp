// `megaops plan`: ranks the supported compositions of a decode step (or of a prefill chunk, for
// time to first token) from a measured profile, without running any of them, prints the top
// candidates with predicted times and the reason each gains, writes the best supported one as a
// plan JSON, and optionally dumps the region and tile graphs. Runs on any CPU.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "graph/op_graph.h"
#include "io/text_file.h"
#include "models/checkpoint.h"
#include "planner/planner.h"
#include "planner/service_table.h"

namespace megaops::cli {

namespace {

void write_file_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text)) throw Error("cannot write " + path);
}

}  // namespace

Runner add_plan(CLI::App& app) {
  struct Opts {
    std::string model, preset, objective = "step", out, dump, dump_out;
    std::vector<std::string> profiles;
    int batch = 1, context = 32, tokens = 32, top = 5, pool = 0;
    std::string pool_out;
    bool runnable_only = false, with_persistent = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "Hugging Face checkpoint directory (config.json is read)");
  app.add_option("--preset", o->preset, "a named architecture");
  app.add_option("--batch", o->batch, "sequences decoded together");
  app.add_option("--objective", o->objective, "step (decode step time) or ttft (prefill chunk)");
  app.add_option("--profile", o->profiles,
                 "`megaops profile --json` files or megaops-op-bench/1 files (repeatable; "
                 "without any, every op is a first-principles estimate)");
  app.add_option("--context", o->context, "cached positions per sequence");
  app.add_option("--tokens", o->tokens, "prompt tokens (objective ttft)");
  app.add_option("--top", o->top, "candidates to print");
  app.add_option("--out", o->out, "write the best supported candidate's plan JSON here");
  app.add_option("--dump", o->dump, "also dump the best candidate's graphs: dot or json");
  app.add_option("--dump-out", o->dump_out, "prefix of the dump files (default: plan)");
  app.add_option("--pool", o->pool,
                 "validation pool: the N best runnable candidates plus the picks of the simpler "
                 "selectors");
  app.add_option("--pool-out", o->pool_out,
                 "write the pool here: a JSON array of {rank, selected_by, plan}");
  app.add_flag("--runnable-only", o->runnable_only,
               "rank only candidates today's executors can run");
  app.add_flag("--with-persistent", o->with_persistent,
               "also rank persistent regions and dynamic splits (no executor yet; larger space)");
  return [o]() -> int {
    if (o->model.empty() == o->preset.empty())
      throw_input_error("--model/--preset", "", "give exactly one of --model DIR or --preset NAME");
    if (o->batch < 1 || o->batch > 64)
      throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(o->batch));
    if (o->context < 1 || o->tokens < 1)
      throw_input_error("--context/--tokens", "", "expected positive values");
    if (o->dump != "" && o->dump != "dot" && o->dump != "json")
      throw_input_error("--dump", "", "expected dot or json, found '" + o->dump + "'");
    PlanOptions popt;
    if (o->objective == "step") {
      popt.objective = Objective::Step;
    } else if (o->objective == "ttft") {
      popt.objective = Objective::Ttft;
    } else {
      throw_input_error("--objective", "", "expected step or ttft, found '" + o->objective + "'");
    }
    // Every composition is ranked; the pick is the best one today's executors can run: serial
    // compositions of conventional and (decode only) overlap regions, which `bench --plan` runs
    // with barriers between regions; CTA splits and dynamic sharing are predicted, not runnable.
    popt.include_unsupported = !o->runnable_only;
    if (!o->with_persistent) popt.backends = {Backend::Conventional, Backend::Overlap};
    const ModelConfig cfg =
        o->model.empty() ? preset_config(o->preset) : read_model_config(o->model + "/config.json");
    const std::string name = o->model.empty() ? o->preset : o->model;
    const OpGraph g = popt.objective == Objective::Step
                          ? build_decode_graph(cfg, name, o->batch, o->context)
                          : build_prefill_graph(cfg, name, o->tokens, 0);
    CostModel cost;
    cost.overlap_supported = popt.objective == Objective::Step;
    cost.fixed_split_supported = false;
    // The overlap executor as measured (docs/overlap-design.md, trace of 2026-11-29): consumers
    // wait for whole tensors, a handoff takes 2.6 us (median), and a waiting small-m CTA holds
    // one 32 KB weight group (three CTAs per SM: 96 KB per worker, not the 256 KB default).
    cost.overlap_tensor_waits = true;
    cost.overlap_handoff_us = 2.6;
    // ... and runs the conventional step's cuBLASLt GEMMs behind gates, with a barrier after each
    // (2026-11-29, fourth session).
    cost.overlap_vendor_gemms = true;
    cost.machine.staging_bytes = 96 << 10;
    ServiceTable table;
    for (const std::string& p : o->profiles) {
      const std::string text = read_text_file(p);
      const int added = text.find("megaops-op-bench/1") != std::string::npos
                            ? table.load_bench_json(text, p)
                            : table.load_profile_json(text, p, cost.machine.workers);
      std::fprintf(stderr, "plan: %s: %d service-table entries\n", p.c_str(), added);
    }
    // What every op of a plan with an overlap region costs more on the overlap executor, when
    // the profile of exactly this step measured it (docs/planner-validation.md, rounds 1-2).
    if (const auto fig = table.step_figures(g, cost.dtype, cost.gpu)) {
      if (fig->serial_overlap_op_us >= 0) cost.overlap_serial_op_us = fig->serial_overlap_op_us;
      std::fprintf(stderr,
                   "plan: %s: %.2f us per op of event overhead taken off the profile; "
                   "every op of an overlap plan costs %.2f us more\n",
                   fig->source.c_str(), fig->event_overhead_us, cost.overlap_serial_op_us);
    }
    const PlanResult r = plan(g, table, popt, cost);
    int unmatched = 0;
    for (const OpCalibration& c : r.calibration) unmatched += c.measured_us < 0;
    if (unmatched > 0)
      std::fprintf(stderr,
                   "plan: warning: %d of %zu op shapes have no matching evidence in the profiles "
                   "(batch, context, shapes and GPU must match); they use first-principles "
                   "estimates\n",
                   unmatched, r.calibration.size());
    std::printf("%s, batch %d, objective %s: %lld candidates; all-conventional baseline %.1f us\n",
                name.c_str(), o->batch, objective_name(popt.objective),
                static_cast<long long>(r.candidates), r.baseline_us);
    std::printf("%4s %12s %9s  %-8s %s\n", "rank", "predicted us", "vs base", "runnable",
                "candidate / reason");
    for (int i = 0; i < static_cast<int>(r.ranked.size()) && i < o->top; ++i) {
      const Candidate& c = r.ranked[i];
      std::printf("%4d %12.1f %8.1f%%  %-8s %s\n       %s\n", i + 1, c.predicted_us,
                  100.0 * (c.predicted_us - r.baseline_us) / r.baseline_us,
                  c.executor_supports ? "yes" : "not yet", c.label.c_str(), c.reason.c_str());
    }
    if (r.pick < 0) throw Error("plan: no candidate the executors support");
    const Candidate& best = r.ranked[r.pick];
    std::printf(
        "pick: rank %d (%s), predicted %.1f us; sum-of-standalone selector picks rank %d, "
        "planner without overlap picks rank %d\n",
        r.pick + 1, best.label.c_str(), best.predicted_us, r.additive_pick + 1,
        r.no_overlap_pick + 1);
    if (!o->out.empty()) write_file_text(o->out, plan_json(r, g, r.pick));
    if (o->pool > 0) {
      if (o->pool_out.empty()) throw_input_error("--pool-out", "", "needed with --pool");
      // The pool is what the validation protocol measures end to end: only runnable candidates,
      // ranked by the planner, always including both simpler selectors' picks and the baseline.
      std::vector<int> ids;
      auto add_id = [&](int i) {
        if (i >= 0 && r.ranked[i].executor_supports &&
            std::find(ids.begin(), ids.end(), i) == ids.end())
          ids.push_back(i);
      };
      for (int i = 0;
           i < static_cast<int>(r.ranked.size()) && static_cast<int>(ids.size()) < o->pool; ++i)
        add_id(i);
      add_id(r.additive_pick);
      add_id(r.no_overlap_pick);
      // All-conventional too: the reference every candidate is compared with, and in round 1 of
      // the protocol the fastest composition where the planner ranked it ninth or lower.
      add_id(r.baseline_rank);
      // Each entry says which selectors picked it, so the report can score all three.
      nlohmann::json arr = nlohmann::json::array();
      for (int i : ids) {
        nlohmann::json by = nlohmann::json::array();
        if (i == r.pick) by.push_back("planner");
        if (i == r.additive_pick) by.push_back("additive");
        if (i == r.no_overlap_pick) by.push_back("no_overlap");
        if (i == r.baseline_rank) by.push_back("baseline");
        arr.push_back({{"rank", i + 1},
                       {"selected_by", by},
                       {"plan", nlohmann::json::parse(plan_json(r, g, i))}});
      }
      write_file_text(o->pool_out, arr.dump(1) + "\n");
      std::fprintf(stderr, "plan: pool of %zu runnable candidates written to %s%s\n", ids.size(),
                   o->pool_out.c_str(),
                   static_cast<int>(ids.size()) < o->pool
                       ? " (fewer than asked: the executors cannot run the others yet)"
                       : "");
    }
    if (!o->dump.empty()) {
      const std::string prefix = o->dump_out.empty() ? "plan" : o->dump_out;
      const RegionGraph rg = default_region_graph(g);
      const bool dot = o->dump == "dot";
      write_file_text(prefix + ".regions." + o->dump,
                      dot ? region_graph_dot(g, rg, best) : region_graph_json(g, rg, best));
      std::fprintf(stderr, "plan: wrote %s.regions.%s\n", prefix.c_str(), o->dump.c_str());
    }
    return 0;
  };
}

}  // namespace megaops::cli
