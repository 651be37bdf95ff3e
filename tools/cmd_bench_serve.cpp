// `megaops bench-serve`: the engine's offline throughput (as vLLM's benchmark_throughput):
// --requests requests of --prompt random token ids each, added at once, each generating --gen
// tokens (greedy, EOS ignored), stepped to the end on the runner `serve` would use (the paged GPU
// runner, or the CPU oracle), --repeats times after a warm-up that captures the decode graphs. Per
// repeat: output tok/s, engine steps, the model step's mean (the runner's step, host to host) and
// what the engine adds around it a step, so `serve` under load (scripts/serve_load.py) can be split
// into the HTTP front end, the engine's host work and the runner's step, and the runner's step
// compared with `megaops bench` on the same checkpoint.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "engine/gpu_runner.h"
#include "engine_runner.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"
#include "plan_flags.h"

namespace megaops::cli {

namespace {

struct BenchServeOpts {
  EngineRunnerOptions runner;  // its max_batch is --batch
  int prompt = 128, gen = 256, requests = 0, repeats = 3;
  uint64_t seed = 0;
  std::string json_out;
};

struct RepeatResult {
  double wall_s = 0, model_s = 0;
  uint64_t steps = 0, output_tokens = 0;
};

// A request of the workload: greedy, `gen` tokens, EOS ignored.
RequestParams workload_params(int gen) {
  RequestParams params;
  params.max_tokens = gen;
  params.ignore_eos = true;
  return params;
}

// One pass of the workload on `engine`: every request added at once, stepped until none is left.
RepeatResult run_workload(Engine& engine, const std::vector<std::vector<int>>& prompts, int gen) {
  const RequestParams params = workload_params(gen);
  const EngineStats before = engine.stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::vector<int>& p : prompts) engine.add_request(p, params);
  RepeatResult r;
  while (engine.has_work())
    for (const RequestOutput& o : engine.step()) {
      if (o.finished && o.finish_reason != FinishReason::Length)
        throw Error("bench-serve: a request ended with '" +
                    std::string(finish_reason_name(o.finish_reason)) + "': " + o.stop_reason);
      r.output_tokens += o.new_tokens.size();
    }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats after = engine.stats();
  r.steps = after.steps_total - before.steps_total;
  r.model_s = after.model_step_s.sum - before.model_step_s.sum;
  return r;
}

void check(const BenchServeOpts& o) {
  check_engine_runner_options(o.runner);
  require_at_least("--batch", o.runner.max_batch, 1);
  require_at_least("--prompt", o.prompt, 1);
  require_at_least("--gen", o.gen, 1);
  require_at_least("--requests", o.requests, 0);
  require_at_least("--repeats", o.repeats, 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Runner add_bench_serve(CLI::App& app) {
  auto o = std::make_shared<BenchServeOpts>();
  o->runner.max_batch = 32;
  o->runner.batch_option = "--batch";
  add_engine_runner_options(app, o->runner);
  app.add_option("--batch", o->runner.max_batch,
                 "most requests decoded together, as serve's --max-batch (default 32)");
  app.add_option("--prompt", o->prompt, "prompt tokens a request (random ids; default 128)");
  app.add_option("--gen", o->gen, "tokens each request generates (EOS ignored; default 256)");
  app.add_option("--requests", o->requests, "requests a repeat, added at once (default: --batch)");
  app.add_option("--repeats", o->repeats, "timed passes of the workload (median; default 3)");
  app.add_option("--seed", o->seed, "seed of the prompts' token ids (default 0)");
  app.add_option("--json", o->json_out, "write the repeats and their medians here");
  return [o]() {
    check(*o);
    const Checkpoint ckpt = Checkpoint::open(o->runner.model);
    const ModelConfig& cfg = ckpt.config();
    const int batch = o->runner.max_batch;
    const int requests = o->requests > 0 ? o->requests : batch;
    const int max_context = o->prompt + o->gen;
    if (max_context > cfg.max_position_embeddings)
      throw_input_error("--prompt", "",
                        "prompt + gen is " + std::to_string(max_context) +
                            ", beyond the model's context of " +
                            std::to_string(cfg.max_position_embeddings));
    std::string label;
    std::unique_ptr<ModelRunner> runner = make_engine_runner(o->runner, ckpt, max_context, &label);
    // The checkpoint's tokenizer where it has one, as serve: the engine's host work a step
    // includes the requests' text deltas.
    std::unique_ptr<CheckpointText> text;
    if (std::filesystem::exists(std::filesystem::path(o->runner.model) / "tokenizer.json"))
      text = std::make_unique<CheckpointText>(CheckpointText::open(o->runner.model));
    EngineOptions eo;
    eo.max_running = batch;
    // Every repeat runs the same prompts: with the prefix cache the later ones would compute
    // none of them, and the figure compares with bench's, which computes every prompt.
    eo.prefix_caching = false;
    Engine engine(std::move(runner), text.get(), eo);
    std::mt19937_64 rng(o->seed);
    std::uniform_int_distribution<int> id(0, cfg.vocab_size - 1);
    std::vector<std::vector<int>> prompts(static_cast<size_t>(requests));
    for (std::vector<int>& p : prompts) {
      p.resize(static_cast<size_t>(o->prompt));
      for (int& t : p) t = id(rng);
    }
    for (const std::vector<int>& p : prompts) engine.check_request(p, workload_params(o->gen));
    std::fprintf(stderr, "bench-serve: %s on the %s, %d requests of %d + %d tokens, %d a step\n",
                 o->runner.model.c_str(), label.c_str(), requests, o->prompt, o->gen, batch);
    // Warm-up: every decode bucket the workload reaches captures its graph on its first step.
    run_workload(engine, prompts, std::min(o->gen, 8));
    std::printf("%6s %9s %12s %7s %12s %14s\n", "repeat", "wall s", "output tok/s", "steps",
                "model ms", "host ms/step");
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> tok_s, model_ms, host_ms;
    for (int i = 0; i < o->repeats; ++i) {
      const RepeatResult r = run_workload(engine, prompts, o->gen);
      const double steps = static_cast<double>(std::max<uint64_t>(r.steps, 1));
      tok_s.push_back(static_cast<double>(r.output_tokens) / r.wall_s);
      model_ms.push_back(1e3 * r.model_s / steps);
      host_ms.push_back(1e3 * (r.wall_s - r.model_s) / steps);
      std::printf("%6d %9.4f %12.1f %7llu %12.4f %14.4f\n", i, r.wall_s, tok_s.back(),
                  static_cast<unsigned long long>(r.steps), model_ms.back(), host_ms.back());
      rows.push_back({{"wall_s", r.wall_s},
                      {"output_tokens", r.output_tokens},
                      {"output_tok_per_s", tok_s.back()},
                      {"steps", r.steps},
                      {"model_step_ms_mean", model_ms.back()},
                      {"host_ms_per_step", host_ms.back()}});
    }
    std::printf("median: %.1f output tok/s, model step %.4f ms, host %.4f ms a step\n",
                median(tok_s), median(model_ms), median(host_ms));
    if (!o->json_out.empty()) {
      const char* sha = std::getenv("MEGAOPS_GIT_SHA");
      const nlohmann::json j = {{"kind", "bench_serve"},
                                {"gpu", o->runner.cpu ? std::string("cpu") : gpu_device_name()},
                                {"git_sha", sha ? sha : "unknown"},
                                {"date_utc", utc_now()},
                                {"model", o->runner.model},
                                {"runner", label},
                                {"batch", batch},
                                {"requests", requests},
                                {"prompt_tokens", o->prompt},
                                {"new_tokens", o->gen},
                                {"block_size", o->runner.block_size},
                                {"plan", o->runner.plan_file},
                                {"detokenized", text != nullptr},
                                {"repeats", rows},
                                {"median_output_tok_per_s", median(tok_s)},
                                {"median_model_step_ms", median(model_ms)},
                                {"median_host_ms_per_step", median(host_ms)}};
      std::ofstream f(o->json_out);
      if (!f) throw Error("cannot write " + o->json_out);
      f << j.dump(1) << "\n";
    }
    return 0;
  };
}

}  // namespace megaops::cli
