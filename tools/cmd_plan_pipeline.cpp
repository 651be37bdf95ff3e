// `megaops plan-pipeline`: ranks every composition of a streaming pipeline (planner/
// pipeline_plan.h) for time to first publication, without running any of them, on any CPU:
// prints the best candidates with T_pub, RTFx and whether today's executors run them, writes the
// pick as a composition file (`megaops stream --composition` runs it), the validation pool, the
// whole ranking as JSON, and a candidate's event graph. Evidence: `megaops profile --json` files of
// the producer and the local transformer at this batch (at the contexts the JSON output names) and
// the codec's op benchmark (`megaops stream --codec-bench-out`); without any, first principles.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/text_file.h"
#include "models/codec_graph.h"
#include "models/pipeline_json.h"
#include "models/step_graph.h"
#include "planner/pipeline_plan.h"

namespace megaops::cli {

namespace {

struct Opts {
  std::string pipeline, out, json_out, pool_out, events_out, gpu;
  std::vector<std::string> profiles;
  std::string splits = "44,66,88";
  int batch = 1, top = 10, pool = 0, events_rank = 0;
  bool runnable_only = false;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) throw Error("cannot write " + path);
}

// The service table from the evidence files, and the GPU they were measured on (--gpu, or the
// one every entry names).
ServiceTable load_evidence(const Opts& o, PipelineCosts& costs) {
  ServiceTable table;
  for (const std::string& p : o.profiles) {
    const std::string text = read_text_file(p);
    const int added =
        text.find("megaops-op-bench/1") != std::string::npos
            ? table.load_bench_json(text, p)
            : table.load_profile_json(text, p, costs.cost.machine.workers, build_step_graph);
    std::fprintf(stderr, "plan-pipeline: %s: %d service-table entries\n", p.c_str(), added);
  }
  std::string gpu = o.gpu;
  for (const ServiceEntry& e : table.entries()) {
    if (!o.gpu.empty()) break;
    if (!gpu.empty() && e.key.gpu != gpu)
      throw_input_error("--profile", "gpu",
                        "expected evidence of one GPU, found " + gpu + " and " + e.key.gpu + " (" +
                            e.source + "); name the one to plan for with --gpu");
    gpu = e.key.gpu;
  }
  if (!gpu.empty()) costs.cost.gpu = costs.codec_cost.gpu = gpu;
  return table;
}

nlohmann::json candidate_row(const PipelineCandidate& c, int rank) {
  return {{"rank", rank},
          {"label", c.label},
          {"t_pub_us", c.t_pub_us},
          {"first_chunk_us", c.first_chunk_us},
          {"step_h_us", c.step_h_us},
          {"last_chunk_us", c.last_chunk_us},
          {"rtfx", c.rtfx},
          {"steady_rtfx", c.steady_rtfx},
          {"executor_supports", c.executor_supports}};
}

void write_outputs(const Opts& o, const PipelineConfig& p, const PipelineGraphs& g,
                   const PipelinePlanResult& r, double seconds) {
  if (!o.out.empty()) write_text(o.out, pipeline_candidate_json(r, r.pick) + "\n");
  if (o.pool > 0 && !o.pool_out.empty()) {
    // The N best runnable candidates, the baseline among them (the validation's reference).
    nlohmann::json pool = nlohmann::json::array();
    int taken = 0;
    for (int i = 0; i < static_cast<int>(r.ranked.size()) && taken < o.pool; ++i)
      if (r.ranked[i].executor_supports) {
        pool.push_back(nlohmann::json::parse(pipeline_candidate_json(r, i)));
        ++taken;
      }
    write_text(o.pool_out, pool.dump(1) + "\n");
  }
  if (!o.events_out.empty()) {
    if (o.events_rank < 1 || o.events_rank > static_cast<int>(r.ranked.size()))
      throw_input_error("--events-rank", "",
                        "expected 1.." + std::to_string(r.ranked.size()) + ", found " +
                            std::to_string(o.events_rank));
    write_text(o.events_out, pipeline_event_graph_json(p, r, o.events_rank - 1) + "\n");
  }
  if (o.json_out.empty()) return;
  nlohmann::json ranked = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size(); ++i)
    ranked.push_back(candidate_row(r.ranked[i], static_cast<int>(i) + 1));
  int unmatched = 0;
  nlohmann::json calibration = nlohmann::json::array();
  for (const OpCalibration& c : r.calibration) {
    unmatched += c.measured_us < 0;
    calibration.push_back({{"key", c.key},
                           {"measured_us", c.measured_us},
                           {"model_us", c.model_us},
                           {"extra_tile_us", c.extra_tile_us}});
  }
  nlohmann::json j = {
      {"schema", "megaops-pipeline-plan/1"},
      {"pipeline", r.pipeline},
      {"batch", r.batch},
      {"step_h", r.step_h},
      {"candidates", r.candidates},
      {"plan_seconds", seconds},
      {"sim_events", r.sim_events},
      {"pick", r.pick + 1},
      {"baseline_rank", r.baseline_rank + 1},
      {"monolith_rank", r.monolith_rank + 1},
      {"op_shapes", r.calibration.size()},
      {"op_shapes_without_evidence", unmatched},
      // What `megaops profile --prompt` must be for its evidence to match (attention is keyed by
      // its context): the producer's decode step and the local transformer's.
      {"profile_contexts",
       {{"producer", g.producer_step.context}, {"local", g.local_step.context}}},
      {"codec_windows", {g.codec_first.context, g.codec_chunk.context}},
      {"ranked", ranked},
      // Every distinct op shape of the groups' graphs ("<graph>: <op>|<shape signature>"), with
      // its evidence (-1: none) and its first-principles time.
      {"calibration", calibration}};
  write_text(o.json_out, j.dump(1) + "\n");
}

}  // namespace

Runner add_plan_pipeline(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--pipeline", o->pipeline, "pipeline file (docs/pipeline-format.md)")->required();
  app.add_option("--batch", o->batch, "streams run together (1..64)");
  app.add_option("--profile", o->profiles,
                 "`megaops profile --json` files of the producer and local transformer, and the "
                 "codec's megaops-op-bench/1 file (repeatable)");
  app.add_option("--gpu", o->gpu, "plan for this GPU's evidence (default: the profiles' GPU)");
  app.add_option("--splits", o->splits, "producer-side CTAs of the fixed and dynamic splits");
  app.add_option("--top", o->top, "candidates to print");
  app.add_option("--out", o->out, "write the pick (best runnable) as a composition file here");
  app.add_option("--pool", o->pool, "validation pool: the N best runnable candidates");
  app.add_option("--pool-out", o->pool_out, "write the pool here: a JSON array of compositions");
  app.add_option("--json", o->json_out, "write the whole ranking and the plan time here");
  app.add_option("--events-out", o->events_out, "write an event graph (JSON) here");
  app.add_option("--events-rank", o->events_rank, "of this rank (1 = best; default the pick)");
  app.add_flag("--runnable-only", o->runnable_only, "rank only candidates today's executors run");
  return [o]() -> int {
    if (o->batch < 1 || o->batch > 64)
      throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(o->batch));
    if (o->top < 0) throw_input_error("--top", "", "expected >= 0");
    if (o->pool < 0) throw_input_error("--pool", "", "expected >= 0");
    if (o->pool > 0 && o->pool_out.empty())
      throw_input_error("--pool", "", "needs --pool-out FILE");
    const PipelineConfig p = read_pipeline(o->pipeline);
    PipelineCosts costs = default_pipeline_costs();
    PipelinePlanOptions opt;
    opt.splits = parse_int_list(o->splits, "--splits");
    opt.include_unsupported = !o->runnable_only;
    const ServiceTable table = load_evidence(*o, costs);
    const auto t0 = std::chrono::steady_clock::now();
    const PipelineGraphs g = build_pipeline_graphs(p, o->batch);
    const PipelinePlanResult r = plan_pipeline(p, g, o->batch, table, costs, opt);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.pick < 0) throw Error("plan-pipeline: no candidate the executors run");
    if (o->events_rank == 0) o->events_rank = r.pick + 1;
    int unmatched = 0;
    for (const OpCalibration& c : r.calibration) unmatched += c.measured_us < 0;
    if (unmatched > 0)
      std::fprintf(stderr,
                   "plan-pipeline: %d of %zu op shapes have no matching evidence (batch, context, "
                   "shapes, dtype and GPU must match): first-principles estimates\n",
                   unmatched, r.calibration.size());
    std::printf("%s, batch %d: %lld candidates ranked in %.3f s; step h = %d\n", p.name.c_str(),
                o->batch, static_cast<long long>(r.candidates), seconds, r.step_h);
    std::printf("%4s %10s %10s %8s  %-8s %s\n", "rank", "T_pub ms", "chunk1 ms", "RTFx", "runnable",
                "candidate");
    for (int i = 0; i < static_cast<int>(r.ranked.size()) && i < o->top; ++i) {
      const PipelineCandidate& c = r.ranked[i];
      std::printf("%4d %10.3f %10.3f %8.2f  %-8s %s\n", i + 1, c.t_pub_us / 1000,
                  c.first_chunk_us / 1000, c.rtfx, c.executor_supports ? "yes" : "not yet",
                  c.label.c_str());
    }
    auto line = [&](const char* what, int rank) {
      if (rank < 0) return;
      const PipelineCandidate& c = r.ranked[rank];
      std::printf("%s: rank %d (%s): %s\n", what, rank + 1, c.label.c_str(), c.reason.c_str());
    };
    line("pick", r.pick);
    line("all-conventional", r.baseline_rank);
    line("one megakernel", r.monolith_rank);
    write_outputs(*o, p, g, r, seconds);
    return 0;
  };
}

}  // namespace megaops::cli
