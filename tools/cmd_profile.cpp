// `megaops profile`: where a conventional decode step spends its time, op by op, measured on the
// GPU inside a captured step (an event after every op). Prints per-op totals per step and writes
// every (op, layer) time as JSON, keyed by what makes a measurement comparable: model shapes,
// batch, backend, GPU. Beside them, two whole-step times as `bench` measures them (graph
// replays, no events): the conventional step (`graph_step_us`, which the planner calibrates to:
// each event between ops costs a few microseconds) and the overlap executor running the whole
// step as one serial region (`serial_overlap_step_us`: what every op costs more inside a plan
// that has overlap regions), both over `--gen` steps, and the layer prefill of the prompts as
// `bench` times TTFT (`prefill_us`). docs/planner-validation.md, rounds 1-4. The plan (--plan, the
// step flags or the batch's default, tools/plan_flags.h) sets the executor's options, and its own
// step is timed too (`plan_step_us`); the serial overlap figure needs an executor set up for the
// multi-stream overlap step, so a plan of the PDL chain leaves it out.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "plan_flags.h"
#include "runtime_flags.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "model_source.h"
#include "models/step_graph.h"
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

Runner add_profile(CLI::App& app) {
  struct Opts : ModelRunOptions {
    std::string json_out, plan_file;
    int steps = 32;
    int gen = 128;
    RuntimeFlags runtime;
  };
  auto o = std::make_shared<Opts>();
  add_model_run_options(app, *o);
  app.add_option("--steps", o->steps, "decode steps averaged (per-op times)");
  app.add_option("--gen", o->gen,
                 "decode steps of the whole-step figures, as bench's --gen (the context they "
                 "span is the one the planner predicts for)");
  app.add_option("--json", o->json_out, "write per-op times here");
  add_plan_option(app, o->plan_file);
  add_runtime_flags(app, o->runtime);
  return [o, &app]() -> int {
    // Options first, on every build and machine, so a bad one is named before "no GPU".
    check_model_run_options(*o);
    if (o->steps < 1)
      throw_input_error("--steps", "", "expected >= 1, found " + std::to_string(o->steps));
    if (o->gen < 2)
      throw_input_error("--gen", "", "expected >= 2, found " + std::to_string(o->gen));
    [[maybe_unused]] PlanChoice plan = choose_plan(app, o->plan_file, o->batch);
    // The per-op profile's two rounds; the whole-step figures start from a new prefill each.
    [[maybe_unused]] const int max_seq =
        check_run_context(o->model, o->preset, "--prompt/--steps/--gen",
                          {o->prompt, std::max<int64_t>(2 * int64_t{o->steps}, o->gen), 2}, {plan});
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("profile: no CUDA device; profile needs a GPU");
    // The JSON records the GPU's HBM read ceiling (for `megaops plan`), measured in a child
    // process before the model loads (tools/cmd_hbm_ceiling.cpp says why).
    const double ceiling_gbps = o->json_out.empty() ? 0 : measure_hbm_ceiling_isolated(4096, 20, 0);
    const ModelSource src = open_model_source(o->model, o->preset, o->seed);
    ExecutorOptions eo;
    eo.step_graph = build_step_graph;
    apply_runtime_flags(o->runtime, eo);
    eo.max_batch = o->batch;
    eo.max_seq = max_seq;
    settle_plan(plan, eo);
    print_plan_line(plan);
    // The per-op profile and the planner's figures run the conventional step without PDL and the
    // layer prefill, whatever the plan; the executor starts there, so the overlap set-up's
    // process-wide carveout (cmd_bench.cpp) comes after them.
    const DecodeBackend plan_backend = eo.backend;
    const bool plan_pdl = eo.pdl;
    const PrefillPath plan_prefill = eo.prefill_path;
    eo.backend = DecodeBackend::Conventional;
    eo.pdl = false;
    eo.prefill_path = PrefillPath::Layers;
    ConventionalExecutor ex(src.cfg, src.weights, eo, [&](size_t d, size_t t) {
      print_progress("loading " + src.name, d, t);
    });
    const std::vector<std::vector<int>> prompts =
        make_prompts(src.cfg, o->batch, o->prompt, o->seed);
    ex.prefill(prompts);
    ex.profile_decode_steps(o->steps);  // warm-up: first replays pay for cold caches
    const auto times = ex.profile_decode_steps(o->steps);
    std::map<std::string, std::pair<double, int>> by_op;
    double total = 0;
    for (const auto& t : times) {
      by_op[t.op].first += t.us;
      by_op[t.op].second += 1;
      total += t.us;
    }
    std::vector<std::pair<std::string, std::pair<double, int>>> rows(by_op.begin(), by_op.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    std::printf("%-26s %10s %8s %7s %12s\n", "op", "us/step", "launches", "%step", "us/launch");
    for (const auto& [op, v] : rows)
      std::printf("%-26s %10.1f %8d %6.1f%% %12.2f\n", op.c_str(), v.first, v.second,
                  100 * v.first / total, v.first / v.second);
    std::printf("%-26s %10.1f %8zu\n", "total (graph, no PDL)", total, times.size());
    ex.set_pdl(false);
    // The layer prefill of these prompts, as `bench` times TTFT (the planner's reference for the
    // ttft objective): median of five after a warm-up.
    std::vector<double> prefill_runs;
    for (int r = 0; r <= 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ex.prefill(prompts);
      const auto t1 = std::chrono::steady_clock::now();
      if (r > 0) prefill_runs.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    const double prefill_us = median(prefill_runs);
    std::printf("%-26s %10.1f\n", "prefill (layers)", prefill_us);
    // Over --gen steps, as `bench` measures a candidate: round 2 of the validation timed 32 here
    // and under-predicted every measured step by 1-5% (the longer context of 128 steps).
    const double graph_step_us = time_decode_step_us(ex, prompts, o->gen, 3);
    std::printf("%-26s %10.1f\n", "step (graph, no events)", graph_step_us);
    double serial_overlap_step_us = -1;
    if (plan.plan.decode.backend == PlanBackend::PdlChain) {
      std::printf("%-26s %10s (the plan's executor runs the pdl chain)\n", "step (overlap, serial)",
                  "-");
    } else {
      ex.set_overlap_regions({{ex.overlap_op_names().front(), true}});
      ex.set_backend(DecodeBackend::Overlap);
      serial_overlap_step_us = time_decode_step_us(ex, prompts, o->gen, 3);
      ex.set_backend(DecodeBackend::Conventional);
      ex.set_overlap_regions({});
      std::printf("%-26s %10.1f\n", "step (overlap, serial)", serial_overlap_step_us);
    }
    // The plan's own step, as bench times it.
    check_and_set_regions(plan, ex);
    ex.set_backend(plan_backend);
    ex.set_pdl(plan_pdl);
    ex.set_prefill_path(plan_prefill);
    const double plan_step_us = time_decode_step_us(ex, prompts, o->gen, 3);
    std::printf("%-26s %10.1f\n", "step (plan)", plan_step_us);
    if (!o->json_out.empty()) {
      cudaDeviceProp prop{};
      cudaGetDeviceProperties(&prop, 0);
      const ModelConfig& c = src.cfg;
      nlohmann::json ops = nlohmann::json::array();
      for (const auto& t : times) ops.push_back({{"op", t.op}, {"layer", t.layer}, {"us", t.us}});
      nlohmann::json j = {{"gpu", prop.name},
                          {"hbm_read_ceiling_gbps", ceiling_gbps},
                          {"sms", prop.multiProcessorCount},
                          {"backend", "conventional"},
                          {"model", src.name},
                          {"shapes",
                           {{"arch", arch_name(c.arch)},
                            {"hidden", c.hidden_size},
                            {"intermediate", c.intermediate_size},
                            {"layers", c.num_layers},
                            {"heads", c.num_heads},
                            {"kv_heads", c.num_kv_heads},
                            {"head_dim", c.head_dim},
                            {"vocab", c.vocab_size}}},
                          {"dtype", "bf16"},
                          {"batch", o->batch},
                          {"context", o->prompt},
                          {"steps_averaged", o->steps},
                          {"whole_step_decode_steps", o->gen},
                          {"step_us", total},
                          {"graph_step_us", graph_step_us},
                          {"prefill_us", prefill_us},
                          {"plan", nlohmann::json::parse(plan_to_json(plan.plan))},
                          {"plan_step_us", plan_step_us},
                          {"ops", ops}};
      if (serial_overlap_step_us >= 0) j["serial_overlap_step_us"] = serial_overlap_step_us;
      std::ofstream f(o->json_out);
      if (!f) throw Error("cannot write " + o->json_out);
      f << j.dump(1) << "\n";
    }
    return 0;
#else
    throw DeviceError("profile: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
