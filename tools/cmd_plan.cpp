// `megaops plan`: ranks the supported compositions of a decode step (or, for time to first token,
// the layer prefill against the prompt rows replayed through each composition of the decode step)
// from measured profiles, without running any of them, prints the top candidates with predicted
// times and the reason each gains, writes the best supported one as a plan (graph/plan.h, the
// format every command's --plan reads), and optionally dumps the region and tile graphs. Runs on
// any CPU.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "graph/op_graph.h"
#include "graph/plan.h"
#include "io/text_file.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "planner/planner.h"
#include "planner/service_table.h"
#include "planner/target_gpu.h"

namespace megaops::cli {

namespace {

void write_file_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text)) throw Error("cannot write " + path);
}

struct Opts {
  std::string model, preset, objective = "step", out, dump, dump_out;
  std::vector<std::string> profiles;
  int batch = 1, context = 32, tokens = 32, top = 5, pool = 0;
  std::string pool_out;
  bool runnable_only = false, with_persistent = false;
  std::optional<double> pdl_wait_us, pdl_launch_us;
  TargetGpuFlags gpu;
};

// The executor's name of a planner op (graph/op_graph.h names, per layer).
std::string executor_op_name(const std::string& planner_name, int layer) {
  const std::string name = planner_name == "decode_attention" ? "attention" : planner_name;
  return layer >= 0 ? "layer " + std::to_string(layer) + " " + name : name;
}

// Candidate `index` of `r` (a decode step's, `g`) as a plan, faithfully: all conventional is the
// conventional step with PDL off; the whole-step backends are the conventional step with PDL on
// and the PDL chain with the candidate's folds; otherwise the region-composed step, each region
// with its backend, the sharing policy and, where regions co-run, their CTA budgets (under the
// serial policy the executor chooses them: 0). The executors run serial compositions of
// conventional and overlap regions (check_plan_runnable names what they do not run).
Plan plan_of_candidate(const Opts& o, const PlanResult& r, const OpGraph& g, int index) {
  const Candidate& c = r.ranked.at(index);
  Plan p;
  p.model = r.model;
  p.batch = o.batch;
  p.gpu = r.gpu;
  p.objective = objective_name(r.objective);
  p.source = "megaops plan " +
             std::string(o.model.empty() ? "--preset " + o.preset : "--model " + o.model) +
             " --batch " + std::to_string(o.batch) + ", rank " + std::to_string(index + 1) + ": " +
             c.label;
  p.predicted_us = c.predicted_us;
  if (c.regions.size() == 1 && c.regions[0].backend == Backend::ConventionalPdl) {
    p.decode.pdl = true;
    return p;
  }
  if (c.regions.size() == 1 && c.regions[0].backend == Backend::PdlChain) {
    p.decode.backend = PlanBackend::PdlChain;
    p.decode.overlap_streams = 1;
    p.decode.folds.norms = (c.regions[0].folds & CHAIN_FOLD_NORMS) != 0;
    p.decode.folds.silu = (c.regions[0].folds & CHAIN_FOLD_SILU) != 0;
    p.decode.folds.rope = (c.regions[0].folds & CHAIN_FOLD_ROPE) != 0;
    return p;
  }
  bool chain = false;
  for (const Region& reg : c.regions) chain |= reg.backend == Backend::PdlChain;
  if (chain) {
    // The chain with persistent regions (all folds on).
    p.decode.backend = PlanBackend::PdlChain;
    p.decode.overlap_streams = 1;
    for (const Region& reg : c.regions)
      p.decode.regions.push_back(
          {executor_op_name(g.ops[reg.first_op].name, g.ops[reg.first_op].layer),
           reg.backend == Backend::Persistent ? RegionBackend::Persistent : RegionBackend::PdlChain,
           0});
    return p;
  }
  bool composed = false;
  for (const Region& reg : c.regions) composed |= reg.backend != Backend::Conventional;
  if (composed) {
    p.decode.backend = PlanBackend::Overlap;
    const bool serial = c.policy == Policy::Serial;
    for (const Region& reg : c.regions)
      p.decode.regions.push_back(
          {executor_op_name(g.ops[reg.first_op].name, g.ops[reg.first_op].layer),
           reg.backend == Backend::Conventional ? RegionBackend::Conventional
           : reg.backend == Backend::Persistent ? RegionBackend::Persistent
                                                : RegionBackend::Overlap,
           serial ? 0 : reg.cta_budget});
    p.decode.sharing.policy = c.policy == Policy::FixedSplit ? "fixed_split"
                              : c.policy == Policy::Dynamic  ? "dynamic"
                                                             : "serial";
    if (c.policy == Policy::FixedSplit) p.decode.sharing.split = c.split;
  }
  return p;
}

// Kernel boundaries measured on the planned GPU (`megaops bench-boundary --json` in the service
// table): plain ones are the cost model's launch_us, PDL ones its pdl_wait_us; the flags
// override both.
void apply_boundary_costs(const Opts& o, const ServiceTable& table, CostModel& cost) {
  for (auto [shape, field] :
       {std::pair{"plain", &CostModel::launch_us}, std::pair{"pdl", &CostModel::pdl_wait_us}})
    if (const auto e = table.lookup(
            {"kernel_boundary", shape, cost.dtype, "standalone", cost.machine.workers, cost.gpu})) {
      cost.*field = e->us;
      std::fprintf(stderr, "plan: %s: a %s kernel boundary costs %.3f us\n", e->source.c_str(),
                   shape, e->us);
    }
  for (auto [value, field] : {std::pair{o.pdl_wait_us, &CostModel::pdl_wait_us},
                              std::pair{o.pdl_launch_us, &CostModel::pdl_launch_us}})
    if (value) cost.*field = *value;
}

// Reads the evidence files, plans for the GPU they were measured on (or --gpu, --hbm-gbps, --sms;
// target_gpu.h) and loads them into `table` under that GPU's CTA budget.
void load_evidence(const Opts& o, ServiceTable& table, CostModel& cost, PlanOptions& popt) {
  std::vector<std::string> texts;
  std::vector<TargetGpu> measured_on;
  for (const std::string& p : o.profiles) {
    texts.push_back(read_text_file(p));
    measured_on.push_back(evidence_gpu(texts.back(), p));
  }
  const TargetGpu gpu = resolve_target_gpu(measured_on, o.gpu, default_target_gpu(cost));
  apply_target_gpu(gpu, cost, popt);
  std::fprintf(stderr, "plan: for %s (%s): HBM read ceiling %.0f GB/s, %d SMs\n", gpu.name.c_str(),
               gpu.source.c_str(), gpu.hbm_gbps, gpu.sms);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& p = o.profiles[i];
    const int added =
        texts[i].find("megaops-op-bench/1") != std::string::npos
            ? table.load_bench_json(texts[i], p)
            : table.load_profile_json(texts[i], p, cost.machine.workers, build_step_graph);
    std::fprintf(stderr, "plan: %s: %d service-table entries\n", p.c_str(), added);
  }
}

std::string plan_text(const Plan& p) {
  return plan_to_json(p) + "\n";
}

// --dump: the region graph of `c`, a candidate of the decode step `g`, as dot or JSON.
void write_dump(const Opts& o, const OpGraph& g, const Candidate& c) {
  const std::string prefix = o.dump_out.empty() ? "plan" : o.dump_out;
  const RegionGraph rg = default_region_graph(g);
  write_file_text(prefix + ".regions." + o.dump,
                  o.dump == "dot" ? region_graph_dot(g, rg, c) : region_graph_json(g, rg, c));
  std::fprintf(stderr, "plan: wrote %s.regions.%s\n", prefix.c_str(), o.dump.c_str());
}

// --pool: the pool the validation protocol measures end to end: the --pool best runnable of the
// n ranked candidates, always with both simpler selectors' picks and the baseline, each entry
// saying which selectors picked it, into --pool-out. `runnable(i)` says whether the executors run
// candidate i, `json_of(i)` is its plan and `candidate_of(i)` the planner's description of it
// (plan_json: regions by op index, backends, budgets; what scripts/planner_insample.py matches).
template <typename RunnableOf, typename JsonOf, typename CandidateOf>
void write_pool(const Opts& o, int n, RunnableOf&& runnable, int pick, int additive_pick,
                int no_overlap_pick, int baseline_rank, JsonOf&& json_of,
                CandidateOf&& candidate_of) {
  if (o.pool_out.empty()) throw_input_error("--pool-out", "", "needed with --pool");
  const std::string& path = o.pool_out;
  const int size = o.pool;
  std::vector<int> ids;
  auto add_id = [&](int i) {
    if (i >= 0 && runnable(i) && std::find(ids.begin(), ids.end(), i) == ids.end())
      ids.push_back(i);
  };
  for (int i = 0; i < n && static_cast<int>(ids.size()) < size; ++i) add_id(i);
  add_id(additive_pick);
  add_id(no_overlap_pick);
  // All-conventional too: the reference every candidate is compared with, and in round 1 of the
  // protocol the fastest composition where the planner ranked it ninth or lower.
  add_id(baseline_rank);
  nlohmann::json arr = nlohmann::json::array();
  for (int i : ids) {
    nlohmann::json by = nlohmann::json::array();
    if (i == pick) by.push_back("planner");
    if (i == additive_pick) by.push_back("additive");
    if (i == no_overlap_pick) by.push_back("no_overlap");
    if (i == baseline_rank) by.push_back("baseline");
    arr.push_back({{"rank", i + 1},
                   {"selected_by", by},
                   {"plan", json_of(i)},
                   {"candidate", candidate_of(i)}});
  }
  write_file_text(path, arr.dump(1) + "\n");
  std::fprintf(stderr, "plan: pool of %zu runnable candidates written to %s%s\n", ids.size(),
               path.c_str(),
               static_cast<int>(ids.size()) < size
                   ? " (fewer than asked: the executors cannot run the others yet)"
                   : "");
}

// --objective ttft: the layer prefill (measured in the profile of this batch when it has
// prefill_us, else the prefill graph's first-principles estimate) against the decode-graph
// prefill replaying each candidate of `step`, a plan of the decode step at the replay's rows.
int run_ttft(const Opts& o, const ModelConfig& cfg, const std::string& name, const OpGraph& g,
             const PlanResult& step, const ServiceTable& table, const CostModel& cost,
             TtftReplays replays) {
  const int rows = o.batch * o.tokens;
  double layers_us = -1;
  std::string layers_from;
  const OpGraph own = build_decode_graph(cfg, name, o.batch, o.tokens);
  if (const auto fig = table.step_figures(own, cost.dtype, cost.gpu); fig && fig->prefill_us > 0) {
    layers_us = fig->prefill_us;
    layers_from = "measured in " + fig->source;
  } else {
    CostModel prefill_cost = cost;
    prefill_cost.overlap_supported = false;
    PlanOptions po;
    po.objective = Objective::Ttft;
    po.backends = {Backend::Conventional};
    const OpGraph gp = build_prefill_graph(cfg, name, rows, 0);
    layers_us = plan(gp, table, po, prefill_cost).baseline_us;
    layers_from = "first-principles estimate";
    std::fprintf(stderr,
                 "plan: warning: no profile of batch %d with prefill_us: the layer prefill is a "
                 "first-principles estimate (it leaves out the host's eager launches)\n",
                 o.batch);
  }
  const TtftPlan t = rank_ttft(step, layers_us, replays, cost.prefill_replay_us);
  const int n = static_cast<int>(t.ranked.size());
  auto label = [&](const TtftCandidate& c) {
    return c.step_index < 0 ? std::string("layer prefill (") + layers_from + ")"
                            : "graph prefill, " + std::to_string(replays.replays) + " x " +
                                  std::to_string(replays.replay_rows) +
                                  " rows: " + step.ranked[c.step_index].label;
  };
  std::printf(
      "%s, batch %d, objective ttft: %d candidates (the layer prefill, and %d prompt rows in %d "
      "replay(s) of a %d-row decode step); layer prefill %.1f us\n",
      name.c_str(), o.batch, n, rows, replays.replays, replays.replay_rows, layers_us);
  std::printf("%4s %12s %9s  %-8s %s\n", "rank", "predicted us", "vs layers", "runnable",
              "candidate");
  for (int i = 0; i < n && i < o.top; ++i) {
    const TtftCandidate& c = t.ranked[i];
    std::printf("%4d %12.1f %8.1f%%  %-8s %s\n", i + 1, c.predicted_us,
                100.0 * (c.predicted_us - layers_us) / layers_us,
                c.executor_supports ? "yes" : "not yet", label(c).c_str());
  }
  if (t.pick < 0) throw Error("plan: no candidate the executors support");
  std::printf(
      "pick: rank %d (%s), predicted %.1f us; sum-of-standalone selector picks rank %d, "
      "planner without overlap picks rank %d\n",
      t.pick + 1, label(t.ranked[t.pick]).c_str(), t.ranked[t.pick].predicted_us,
      t.additive_pick + 1, t.no_overlap_pick + 1);
  // A TTFT plan is a decode-step plan (the replays' composition; the layer prefill's is
  // all-conventional, which its decode steps then run) with the prefill path and the batch of
  // sequences: what `bench --plan` needs to time the first token.
  auto plan_of = [&](int i) {
    const TtftCandidate& c = t.ranked[i];
    const int base = c.step_index < 0 ? step.baseline_rank : c.step_index;
    Plan p = plan_of_candidate(o, step, g, base);
    p.objective = "ttft";
    p.prefill.path = c.step_index < 0 ? "layers" : "graph";
    p.predicted_us = c.predicted_us;
    p.source += c.step_index < 0 ? ", the layer prefill (" + layers_from + ")"
                                 : ", graph prefill of " + std::to_string(o.tokens) +
                                       " tokens in " + std::to_string(replays.replays) + " x " +
                                       std::to_string(replays.replay_rows) + " rows";
    return p;
  };
  auto json_of = [&](int i) { return nlohmann::json::parse(plan_to_json(plan_of(i))); };
  if (!o.out.empty()) write_file_text(o.out, plan_text(plan_of(t.pick)));
  if (o.pool > 0)
    write_pool(
        o, n, [&](int i) { return t.ranked[i].executor_supports; }, t.pick, t.additive_pick,
        t.no_overlap_pick, t.baseline_rank, json_of,
        [&](int i) {
          const int si = t.ranked[i].step_index;
          return nlohmann::json::parse(plan_json(step, g, si < 0 ? step.baseline_rank : si));
        });
  if (!o.dump.empty()) {
    const int si = t.ranked[t.pick].step_index;
    write_dump(o, g, step.ranked[si < 0 ? step.baseline_rank : si]);
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "Hugging Face checkpoint directory (config.json is read)");
  app.add_option("--preset", o->preset, "a named architecture");
  app.add_option("--batch", o->batch, "sequences decoded together");
  app.add_option("--objective", o->objective,
                 "step (decode step time) or ttft (time to first token of --batch prompts of "
                 "--tokens tokens: the layer prefill or the prompt rows through the decode step)");
  app.add_option("--profile", o->profiles,
                 "`megaops profile --json` files or megaops-op-bench/1 files (repeatable; "
                 "without any, every op is a first-principles estimate)");
  app.add_option("--context", o->context, "cached positions per sequence");
  app.add_option("--tokens", o->tokens, "prompt tokens (objective ttft)");
  app.add_option("--top", o->top, "candidates to print");
  app.add_option("--out", o->out,
                 "write the best supported candidate as a plan here (--plan of generate, bench, "
                 "profile and trace reads it)");
  app.add_option("--dump", o->dump, "also dump the best candidate's graphs: dot or json");
  app.add_option("--dump-out", o->dump_out, "prefix of the dump files (default: plan)");
  app.add_option("--pool", o->pool,
                 "validation pool: the N best runnable candidates plus the picks of the simpler "
                 "selectors");
  app.add_option("--pool-out", o->pool_out,
                 "write the pool here: a JSON array of {rank, selected_by, plan}");
  app.add_option("--pdl-wait-us", o->pdl_wait_us,
                 "cost model: a PDL boundary's latency from a kernel's end to the release of the "
                 "next one's tiles (default: the measured grid handoff, 0.65)");
  app.add_option("--pdl-launch-us", o->pdl_launch_us,
                 "cost model: from a kernel passing its wait to the next kernel's CTAs starting "
                 "(default 1.0)");
  app.add_option("--gpu", o->gpu.gpu,
                 "the GPU to plan for, as CUDA names it (default: the one the --profile files "
                 "were measured on; they must agree)");
  app.add_option("--hbm-gbps", o->gpu.hbm_gbps,
                 "its HBM read ceiling in GB/s (default: the profiles' record; `megaops "
                 "hbm-ceiling` measures it)");
  app.add_option("--sms", o->gpu.sms, "its SM count (default: the profiles' record)");
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
    if (!o->dump.empty()) check_one_of("--dump", o->dump, {"dot", "json"});
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
    CostModel cost;
    for (auto [flag, value] : {std::pair{"--pdl-wait-us", o->pdl_wait_us},
                               std::pair{"--pdl-launch-us", o->pdl_launch_us}})
      if (value && !(*value >= 0 && *value <= 100))
        throw_input_error(flag, "", "expected 0..100 us, found " + std::to_string(*value));
    cost.fixed_split_supported = false;
    // The overlap executor as measured (docs/overlap-design.md, a trace of its step): consumers
    // wait for whole tensors, a handoff takes 2.6 us (median), and a waiting small-m CTA holds
    // one 32 KB weight group (three CTAs per SM: 96 KB per worker, not the 256 KB default).
    cost.overlap_tensor_waits = true;
    cost.overlap_handoff_us = 2.6;
    // ... and runs the conventional step's cuBLASLt GEMMs behind gates, with a barrier after each.
    cost.overlap_vendor_gemms = true;
    cost.machine.staging_bytes = 96 << 10;
    ServiceTable table;
    load_evidence(*o, table, cost, popt);
    apply_boundary_costs(*o, table, cost);
    // The objective ttft plans a decode step too: the decode-graph prefill replays it.
    const TtftReplays replays = ttft_replays(o->batch * o->tokens);
    const int step_batch = popt.objective == Objective::Step ? o->batch : replays.replay_rows;
    const int step_context = popt.objective == Objective::Step ? o->context : o->tokens;
    const OpGraph g = build_decode_graph(cfg, name, step_batch, step_context);
    // What every op of a plan with an overlap region costs more on the overlap executor, when
    // the profile of exactly this step measured it (docs/planner-validation.md, rounds 1-2).
    if (const auto fig = table.step_figures(g, cost.dtype, cost.gpu)) {
      if (fig->serial_overlap_op_us >= 0) cost.overlap_serial_op_us = fig->serial_overlap_op_us;
      std::fprintf(stderr,
                   "plan: %s: %.2f us per op of event overhead taken off the profile; "
                   "every op of an overlap plan costs %.2f us more\n",
                   fig->source.c_str(), fig->event_overhead_us, cost.overlap_serial_op_us);
    }
    PlanOptions step_opt = popt;
    step_opt.objective = Objective::Step;
    const PlanResult r = plan(g, table, step_opt, cost);
    if (popt.objective == Objective::Ttft)
      return run_ttft(*o, cfg, name, g, r, table, cost, replays);
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
    if (!o->out.empty()) write_file_text(o->out, plan_text(plan_of_candidate(*o, r, g, r.pick)));
    if (o->pool > 0)
      write_pool(
          *o, static_cast<int>(r.ranked.size()),
          [&](int i) { return r.ranked[i].executor_supports; }, r.pick, r.additive_pick,
          r.no_overlap_pick, r.baseline_rank,
          [&](int i) {
            return nlohmann::json::parse(plan_to_json(plan_of_candidate(*o, r, g, i)));
          },
          [&](int i) { return nlohmann::json::parse(plan_json(r, g, i)); });
    if (!o->dump.empty()) write_dump(*o, g, best);
    return 0;
  };
}

}  // namespace megaops::cli
