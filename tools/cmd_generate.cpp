// `megaops generate`: runs a prompt and streams what it generates as it is produced: text for a
// text prompt (--prompt, through the checkpoint's tokenizer, with stop strings and the EOS ids of
// generation_config.json), token ids one per line for --prompt-ids; one request on the engine
// (include/megaops/engine.h) over the GPU runner, or over the CPU oracle (and says so) when there
// is no GPU. A summary line (prompt tokens, new tokens, TTFT, tok/s, stop reason) goes to stderr.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "core/run_options.h"
#include "core/sampling.h"
#include "engine/gpu_runner.h"
#include "graph/tensor_parallel.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"
#include "plan_flags.h"
#include "runtime_flags.h"
#include "text_session.h"
#include "tp_launch.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "models/step_graph.h"
#include "planner/planner.h"
#include "runtime/conventional.h"
#include "runtime/paged_runner.h"
#include "runtime/plan_options.h"
#endif

namespace megaops::cli {

namespace {

struct GenerateOpts {
  std::string model, prompt, prompt_ids, backend = "conventional", prefill = "layers";
  std::string plan_file;  // --plan
  std::vector<std::string> stop;
  int max_new_tokens = 16;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool cpu = false, pdl = false, stop_at_eos = true;
  TpOptions tp;
  RuntimeFlags runtime;
};

// What one run prints: text deltas (--prompt) or one token id a line (--prompt-ids), on rank 0
// (under --tp every rank samples the same tokens, so every rank stops alike).
std::function<void(const RequestOutput&)> printer(const GenerateOpts& o, bool text) {
  const bool print = o.tp.rank <= 0;
  return [print, text](const RequestOutput& out) {
    if (!print) return;
    if (text) {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    } else {
      for (int tok : out.new_tokens) std::printf("%d\n", tok);
    }
    std::fflush(stdout);
  };
}

// Runs the one request on the engine over `runner` and prints the summary line on stderr (rank 0).
int run_engine(const GenerateOpts& o, CliRunner runner, const CheckpointText* text,
               std::vector<int> prompt, const RequestParams& params,
               const std::vector<int>& eos_ids) {
  EngineOptions eo;
  eo.eos_token_ids = eos_ids;
  const std::string label = runner.label;
  Engine engine(std::move(runner.runner), text, eo);
  const StreamResult r =
      run_request("generate", engine, std::move(prompt), params, printer(o, text != nullptr));
  if (o.tp.rank > 0) return g_interrupted ? interrupt_status() : 0;
  if (text) std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "generate: %s (%s)\n", stream_summary(r).c_str(), label.c_str());
  return g_interrupted ? interrupt_status() : 0;
}

#ifdef MEGAOPS_HAVE_CUDA
// The GPU runner (the paged runner; the executor adapter under --tp) with every option the flags
// and the plan set, and --tp's ranks.
CliRunner gpu_runner(const GenerateOpts& o, const Checkpoint& ckpt, size_t prompt_len, int max_seq,
                     DecodeBackend backend, PrefillPath prefill_path, PlanChoice& plan,
                     const SamplingParams& sampling, TpComm* comm) {
  // The plan first: the flags' plan is settled from the options they make.
  ExecutorOptions flags;
  apply_runtime_flags(o.runtime, flags);
  flags.pdl = o.pdl;
  flags.backend = backend;
  flags.prefill_path = prefill_path;
  settle_plan(plan, flags);
  if (o.tp.rank <= 0) {
    print_plan_line(plan);
    const std::string w = plan_gpu_warning(plan.plan, plan.label, gpu_device_name());
    if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  }
  GpuRunnerOptions g;
  g.max_context = max_seq;
  g.sampling = sampling;
  g.label = plan.label;
  g.plan_origin = plan.label;
  // One request: one context's blocks. The graph prefill replays at most max_batch rows (the
  // whole prompt in one replay if it fits), every bucket on the run's plan, as the executor ran
  // it; otherwise the request decodes alone, in bucket 1.
  const int rows =
      parse_prefill_path(plan.plan.prefill.path, "plan", "prefill.path") == PrefillPath::DecodeGraph
          ? ttft_replays(static_cast<int>(prompt_len)).replay_rows
          : 1;
  g.max_batch = rows;
  g.kv_blocks = (max_seq + g.kv_block_size - 1) / g.kv_block_size;
  for (int b : paged_runner_buckets(rows)) {
    g.plans.push_back(plan.plan);
    g.plans.back().batch = b;
  }
  // What no plan holds (the watchdog, the cuDNN library, ...) and tensor parallelism.
  g.configure = [&](ExecutorOptions& eo) {
    apply_runtime_flags(o.runtime, eo);
    set_tp_options(eo, o.tp, comm);
  };
  g.progress = [&](size_t d, size_t t) { print_progress("loading " + o.model, d, t); };
  return {make_gpu_runner(ckpt, g), "GPU", true};
}
#endif

}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOpts>();
  app.add_option("--model", o->model, "Hugging Face checkpoint directory")->required();
  CLI::Option* text = app.add_option(
      "--prompt", o->prompt,
      "prompt text (the checkpoint's tokenizer.json; streams text, Llama 3 adds BOS)");
  CLI::Option* ids = app.add_option("--prompt-ids", o->prompt_ids,
                                    "prompt token ids, e.g. 1,2,3 (streams ids, one per line)");
  text->excludes(ids);
  ids->excludes(text);
  app.add_option("--stop", o->stop,
                 "--prompt: stop string (repeatable); the output ends before it");
  app.add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate");
  app.add_option("--temperature", o->temperature, "0 = greedy (default), else >= 0 and finite");
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)");
  app.add_option("--top-p", o->top_p, "nucleus sampling threshold (1 = off)");
  add_seed_option(app, o->seed, "sampling seed");
  app.add_flag("--cpu", o->cpu, "run on the fp32 CPU oracle even if a GPU is present");
  app.add_flag("--pdl", o->pdl, "launch decode kernels with programmatic dependent launch");
  app.add_option("--backend", o->backend, "decode backend: conventional (default) or overlap");
  app.add_option("--prefill", o->prefill,
                 "layers (default) or graph: the prompt as rows of the captured decode step");
  app.add_flag("!--ignore-eos", o->stop_at_eos, "keep generating past end-of-sequence tokens");
  add_plan_option(app, o->plan_file);
  add_tp_options(app, o->tp);
  add_runtime_flags(app, o->runtime);
  return [o, &app]() {
    if (o->max_new_tokens < 1)
      throw_input_error("--max-new-tokens", "",
                        "expected >= 1, found " + std::to_string(o->max_new_tokens));
    const SamplingParams sampling{o->temperature, o->top_k, o->top_p, o->seed};
    check_sampling(sampling, CLI_SAMPLING_NAMES);
    // The GPU's options, checked with --cpu and on builds without CUDA too.
    [[maybe_unused]] const DecodeBackend backend = parse_backend(o->backend, "--backend");
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    if (o->cpu && !o->plan_file.empty())
      throw_input_error("--plan", "",
                        "cannot be combined with --cpu (the CPU oracle runs no plan)");
    // The plan file is read and checked on every machine, before the model loads.
    [[maybe_unused]] PlanChoice plan = choose_plan(app, o->plan_file, 1, o->tp.tp > 1);
    if (o->prompt.empty() == o->prompt_ids.empty())
      throw_input_error("generate", "", "expected one of --prompt TEXT or --prompt-ids 1,2,3");
    if (!o->stop.empty() && o->prompt.empty())
      throw_input_error("--stop", "", "stop strings need a text prompt (--prompt)");
    std::unique_ptr<CheckpointText> text;
    std::vector<int> prompt, eos_ids;
    if (!o->prompt.empty()) {
      text = std::make_unique<CheckpointText>(CheckpointText::open(o->model));
      prompt = text->tokenizer().encode(o->prompt, true);
      if (prompt.empty()) throw_input_error("--prompt", "", "tokenizes to no tokens");
      eos_ids = text->eos_token_ids();
    } else {
      prompt = parse_int_list(o->prompt_ids, "--prompt-ids");
    }
    const char* prompt_option = o->prompt.empty() ? "--prompt-ids" : "--prompt";
    const Checkpoint ckpt = Checkpoint::open(o->model);
    // config.json's EOS ids end a run too, in both modes.
    for (int e : ckpt.config().eos_token_ids)
      if (std::find(eos_ids.begin(), eos_ids.end(), e) == eos_ids.end()) eos_ids.push_back(e);
    const int vocab = ckpt.config().vocab_size;
    for (int id : prompt)
      if (id < 0 || id >= vocab)
        throw_input_error(prompt_option, "",
                          "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ") of " + o->model);
    const int max_seq = context_length(std::string(prompt_option) + "/--max-new-tokens",
                                       {static_cast<int64_t>(prompt.size()), o->max_new_tokens},
                                       ckpt.config().max_position_embeddings, o->model);
    check_plan_for_model(plan.plan, plan.label, ckpt.config().max_position_embeddings, o->model);
    validate_tp_options(o->tp);
    if (o->tp.tp != 1) {
      // A split that does not divide the model fails here, before any rank starts.
      try {
        tp_shape(ckpt.config(), o->tp.tp, 0);
      } catch (const InputError& e) {
        throw InputError(o->model + "/" + e.what());
      }
    }
    RequestParams params;
    params.sampling = sampling;
    params.max_tokens = o->max_new_tokens;
    params.stop = o->stop;
    params.ignore_eos = !o->stop_at_eos;
#ifdef MEGAOPS_HAVE_CUDA
    if (!o->cpu && gpu_available()) {
      TpRanks ranks(o->tp);  // --tp N: starts ranks 1..N-1 here, or joins a job
      const std::unique_ptr<TpComm> comm = open_tp_comm(o->tp);
      CliRunner runner = gpu_runner(*o, ckpt, prompt.size(), max_seq, backend, prefill_path, plan,
                                    sampling, comm.get());
      const int status =
          run_engine(*o, std::move(runner), text.get(), std::move(prompt), params, eos_ids);
      ranks.join();
      return status;
    }
#endif
    if (o->tp.rank > 0)
      throw_input_error("--tp-rank", "", "the CPU oracle runs every rank in one process");
    if (plan.kind == PlanKind::File)
      print_plan_line(plan, ", not run: the CPU oracle runs no plan");
    CliRunner runner = make_cpu_runner(ckpt, max_seq, o->tp.tp);  // rejects NaN / Inf weights
    std::fprintf(stderr, "generate: %s; running on the CPU oracle (fp32, slow)\n",
                 gpu_available() ? "--cpu given" : "no CUDA device");
    return run_engine(*o, std::move(runner), text.get(), std::move(prompt), params, eos_ids);
  };
}

}  // namespace megaops::cli
