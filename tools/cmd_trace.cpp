// `megaops trace`: a timeline of one overlap decode step. Every CTA of every op records when it
// began waiting for its producers, when its work began and ended (%globaltimer) and its SM
// (kernels/tile_sync.cuh); the records of one step after warm-up steps become a Chrome-trace /
// Perfetto JSON (io/chrome_trace.h). `scripts/render_trace.py` draws it as a PNG. The step is the
// plan's (--plan, the flags, or the batch's default, tools/plan_flags.h); a conventional step has
// no timeline, so a plan file of one is refused, and where the batch's default is conventional
// trace runs the overlap step with W = 3.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "io/chrome_trace.h"
#include "plan_flags.h"
#include "runtime_flags.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "model_source.h"
#include "models/step_graph.h"
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

Runner add_trace(CLI::App& app) {
  struct Opts : ModelRunOptions {
    std::string out = "trace.json", plan_file;
    int warmup = 8, streams = 3;
    bool pdl_chain = false;
    ChainOptions chain;  // --chain-waits, --fold-norms, --fold-silu, --fold-rope
    RuntimeFlags runtime;
  };
  auto o = std::make_shared<Opts>();
  add_model_run_options(app, *o);
  app.add_option("--warmup", o->warmup, "decode steps before the traced one");
  app.add_option("--streams", o->streams, "overlap streams (W)");
  app.add_flag("--pdl-chain", o->pdl_chain, "the overlap step as a PDL chain (needs --streams 1)");
  add_chain_options(app, o->chain, "--");
  app.add_option("--out", o->out, "Chrome-trace JSON to write (default trace.json)");
  add_plan_option(app, o->plan_file);
  add_runtime_flags(app, o->runtime);
  return [o, &app]() -> int {
    // Options first, on every build and machine, so a bad one is named before "no GPU".
    check_model_run_options(*o);
    if (o->warmup < 0)
      throw_input_error("--warmup", "", "expected >= 0, found " + std::to_string(o->warmup));
    if (o->streams < 1 || o->streams > 8)
      throw_input_error("--streams", "", "expected 1..8, found " + std::to_string(o->streams));
    check_chain_options(o->chain, "--");
    if (o->pdl_chain && o->streams != 1)
      throw_input_error(
          "--pdl-chain", "",
          "needs --streams 1 (one stream carries the chain), found " + std::to_string(o->streams));
    [[maybe_unused]] PlanChoice plan = choose_plan(app, o->plan_file, o->batch);
    if (plan.plan.decode.backend == PlanBackend::Conventional) {
      if (plan.kind == PlanKind::File)
        throw_input_error(plan.label, "decode.backend",
                          "trace records the overlap step: expected pdl_chain or overlap, found "
                          "conventional");
      if (plan.kind == PlanKind::Default) {
        const int batch = plan.plan.batch;
        plan.plan = Plan{};
        plan.plan.batch = batch;
        plan.plan.decode.backend = PlanBackend::Overlap;
        plan.plan.source = "trace's default for batch " + std::to_string(batch) +
                           " (the batch's default plan runs the conventional step, which has no "
                           "timeline)";
        plan.label = plan.plan.source;
      }
    }
    [[maybe_unused]] const int max_seq = check_run_context(o->model, o->preset, "--prompt/--warmup",
                                                           {o->prompt, o->warmup, 2}, {plan});
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("trace: no CUDA device; trace needs a GPU");
    const ModelSource src = open_model_source(o->model, o->preset, o->seed);
    ExecutorOptions eo;
    eo.step_graph = build_step_graph;
    apply_runtime_flags(o->runtime, eo);
    eo.max_batch = o->batch;
    eo.max_seq = max_seq;
    eo.backend = DecodeBackend::Overlap;
    eo.overlap_streams = o->streams;
    eo.overlap_pdl_chain = o->pdl_chain;
    apply_chain_options(o->chain, eo);
    eo.overlap_trace_capacity = 1u << 20;
    settle_plan(plan, eo);
    print_plan_line(plan);
    ConventionalExecutor ex(src.cfg, src.weights, eo, [&](size_t d, size_t t) {
      print_progress("loading " + src.name, d, t);
    });
    check_and_set_regions(plan, ex);
    ex.prefill(make_prompts(src.cfg, o->batch, o->prompt, o->seed));
    for (int i = 0; i < o->warmup; ++i) ex.decode_step();
    uint64_t dropped = 0;
    ex.take_overlap_trace(&dropped);  // discard the warm-up steps' records
    ex.decode_step();
    const std::vector<TraceEvent> events = ex.take_overlap_trace(&dropped);
    if (events.empty()) throw DeviceError("trace: the traced step recorded no CTA");

    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    TraceMeta meta;
    meta.model = src.name;
    meta.gpu = prop.name;
    meta.backend = describe(plan.plan);
    meta.batch = o->batch;
    meta.dropped = dropped;
    std::ofstream f(o->out);
    if (!f) throw Error("cannot write " + o->out);
    f << chrome_trace_json(events, meta) << "\n";

    // Summary: the step's span, and per op its CTAs, mean wait and mean work.
    uint64_t t0 = UINT64_MAX, t1 = 0;
    std::map<uint32_t, std::pair<std::string, std::vector<const TraceEvent*>>> by_op;
    for (const TraceEvent& e : events) {
      t0 = std::min(t0, e.wait_start_ns);
      t1 = std::max(t1, e.work_end_ns);
      by_op[e.op_index].first = e.op;
      by_op[e.op_index].second.push_back(&e);
    }
    std::printf("%zu CTAs over %zu ops, step span %.1f us%s -> %s\n", events.size(), by_op.size(),
                (t1 - t0) / 1000.0,
                dropped ? (" (" + std::to_string(dropped) + " records dropped)").c_str() : "",
                o->out.c_str());
    std::printf("%-36s %6s %12s %12s\n", "op", "CTAs", "wait us", "work us");
    for (const auto& [idx, v] : by_op) {
      double wait = 0, work = 0;
      for (const TraceEvent* e : v.second) {
        wait += (e->wait_end_ns - e->wait_start_ns) / 1000.0;
        work += (e->work_end_ns - e->wait_end_ns) / 1000.0;
      }
      const double n = static_cast<double>(v.second.size());
      std::printf("%-36s %6zu %12.2f %12.2f\n", v.first.c_str(), v.second.size(), wait / n,
                  work / n);
    }
    return 0;
#else
    throw DeviceError("trace: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
