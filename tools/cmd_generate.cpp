// `megaops generate`: runs a prompt and streams what it generates as it is produced: text for a
// text prompt (--prompt, through the checkpoint's tokenizer, with stop strings and the EOS ids of
// generation_config.json), token ids one per line for --prompt-ids; on the GPU conventional
// executor, or on the CPU oracle (and says so) when there is no GPU. A summary line (prompt tokens,
// new tokens, TTFT, tok/s, stop reason) goes to stderr.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "core/run_options.h"
#include "core/sampling.h"
#include "core/tokens.h"
#include "graph/tensor_parallel.h"
#include "models/checkpoint.h"
#include "plan_flags.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "runtime_flags.h"
#include "text_session.h"
#include "tp_launch.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "models/step_graph.h"
#include "planner/planner.h"
#include "runtime/conventional.h"
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

bool is_eos(const ModelConfig& cfg, int tok) {
  for (int e : cfg.eos_token_ids)
    if (e == tok) return true;
  return false;
}

// What one run has generated so far: text mode streams through `streamer`; ids mode counts here.
struct GenerateState {
  std::unique_ptr<TextStreamer> streamer;
  std::chrono::steady_clock::time_point t0;
  StreamResult ids;  // ids mode: tokens, TTFT and stop reason
  GenerateState() { ids.stop_reason = "length"; }
};

// Rank 0 prints (under --tp every rank samples the same token, so every rank stops alike).
// Returns true when generation stops at this token (EOS, a stop string).
bool emit(const GenerateOpts& o, GenerateState& st, int tok) {
  if (st.streamer) return st.streamer->push(tok);
  if (st.ids.tokens.empty())
    st.ids.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.t0).count();
  st.ids.tokens.push_back(tok);
  if (o.tp.rank <= 0) {
    std::printf("%d\n", tok);
    std::fflush(stdout);
  }
  return false;
}

void start_clock(GenerateState& st) {
  st.t0 = std::chrono::steady_clock::now();
  if (st.streamer) st.streamer->start_clock();
}

// The summary line on stderr (rank 0), and the newline that ends streamed text.
void finish(const GenerateOpts& o, GenerateState& st, size_t prompt_tokens, const char* backend) {
  StreamResult r;
  if (st.streamer) {
    r = st.streamer->finish(static_cast<int>(prompt_tokens), g_interrupted);
    if (o.tp.rank <= 0) std::printf("\n");
  } else {
    r = st.ids;
    r.prompt_tokens = static_cast<int>(prompt_tokens);
    r.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.t0).count();
    if (g_interrupted) r.stop_reason = "interrupted";
  }
  if (o.tp.rank > 0) return;
  std::fflush(stdout);
  std::fprintf(stderr, "generate: %s (%s)\n", stream_summary(r).c_str(), backend);
}

int run_cpu(const GenerateOpts& o, GenerateState& st, const Checkpoint& ckpt,
            const std::vector<int>& prompt, int max_seq) {
  const ref::Weights w = ref::load_weights(ckpt);  // rejects NaN / Inf weights
  std::fprintf(stderr, "generate: %s; running on the CPU oracle (fp32, slow)\n",
               gpu_available() ? "--cpu given" : "no CUDA device");
  ref::Model model(w, max_seq, o.tp.tp);  // --tp: the CPU oracle's tensor-parallel ranks
  SamplingParams sp{o.temperature, o.top_k, o.top_p, o.seed};
  start_clock(st);
  std::vector<float> logits = model.forward(prompt);
  const int vocab = ckpt.config().vocab_size;
  for (int step = 0; step < o.max_new_tokens && !g_interrupted; ++step) {
    const float* last = logits.data() + logits.size() - vocab;
    const int tok = ref::sample(last, vocab, sp, ref::sampling_uniform(o.seed, 0, step));
    if (tok == NONFINITE_LOGITS_TOKEN)
      throw Error("generate: " +
                  (step == 0 ? std::string("prefill") : "decode step " + std::to_string(step)) +
                  ": the logits hold NaN or Inf; no token was sampled");
    if (emit(o, st, tok)) break;
    if (o.stop_at_eos && is_eos(ckpt.config(), tok)) {
      st.ids.stop_reason = "eos";
      break;
    }
    if (step + 1 < o.max_new_tokens) logits = model.forward({tok});
  }
  finish(o, st, prompt.size(), "CPU oracle, fp32");
  return g_interrupted ? interrupt_status() : 0;
}

#ifdef MEGAOPS_HAVE_CUDA
int run_gpu(const GenerateOpts& o, GenerateState& st, const Checkpoint& ckpt,
            const std::vector<int>& prompt, int max_seq, DecodeBackend backend,
            PrefillPath prefill_path, PlanChoice plan) {
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  apply_runtime_flags(o.runtime, eo);
  eo.max_batch = 1;
  eo.max_seq = max_seq;
  eo.pdl = o.pdl;
  eo.backend = backend;
  eo.prefill_path = prefill_path;
  settle_plan(plan, eo);
  // The graph prefill replays at most max_batch rows: the whole prompt in one replay if it fits.
  if (eo.prefill_path == PrefillPath::DecodeGraph)
    eo.max_batch = ttft_replays(static_cast<int>(prompt.size())).replay_rows;
  eo.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
  const std::unique_ptr<TpComm> comm = open_tp_comm(o.tp);
  set_tp_options(eo, o.tp, comm.get());
  if (o.tp.rank <= 0) print_plan_line(plan);
  ConventionalExecutor ex(ckpt.config(), checkpoint_filler(ckpt), eo,
                          [&](size_t d, size_t t) { print_progress("loading " + o.model, d, t); });
  check_and_set_regions(plan, ex);
  start_clock(st);
  int tok = ex.prefill({prompt})[0];
  if (o.tp.rank <= 0) print_prefill_attention_note(ex);
  for (int step = 0; step < o.max_new_tokens && !g_interrupted; ++step) {
    if (emit(o, st, tok)) break;
    if (o.stop_at_eos && is_eos(ckpt.config(), tok)) {
      st.ids.stop_reason = "eos";
      break;
    }
    if (step + 1 < o.max_new_tokens) tok = ex.decode_step()[0];
  }
  finish(o, st, prompt.size(), "GPU");
  return g_interrupted ? interrupt_status() : 0;
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
    check_sampling_options(o->temperature, o->top_k, o->top_p);
    // The GPU's options, checked with --cpu and on builds without CUDA too.
    [[maybe_unused]] const DecodeBackend backend = parse_backend(o->backend, "--backend");
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    if (o->cpu && !o->plan_file.empty())
      throw_input_error("--plan", "",
                        "cannot be combined with --cpu (the CPU oracle runs no plan)");
    // The plan file is read and checked on every machine, before the model loads.
    const PlanChoice plan = choose_plan(app, o->plan_file, 1, o->tp.tp > 1);
    if (o->prompt.empty() == o->prompt_ids.empty())
      throw_input_error("generate", "", "expected one of --prompt TEXT or --prompt-ids 1,2,3");
    if (!o->stop.empty() && o->prompt.empty())
      throw_input_error("--stop", "", "stop strings need a text prompt (--prompt)");
    GenerateState st;
    StreamLimits limits;
    std::unique_ptr<CheckpointText> text;
    std::vector<int> prompt;
    if (!o->prompt.empty()) {
      text = std::make_unique<CheckpointText>(CheckpointText::open(o->model));
      prompt = text->tokenizer().encode(o->prompt, true);
      if (prompt.empty()) throw_input_error("--prompt", "", "tokenizes to no tokens");
      limits.max_new_tokens = o->max_new_tokens;
      limits.stop = o->stop;
      if (o->stop_at_eos) limits.eos_ids = text->eos_token_ids();
      const bool print = o->tp.rank <= 0;
      st.streamer = std::make_unique<TextStreamer>(*text, limits, [print](const std::string& s) {
        if (!print) return;
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      });
    } else {
      prompt = parse_int_list(o->prompt_ids, "--prompt-ids");
    }
    const char* prompt_option = o->prompt.empty() ? "--prompt-ids" : "--prompt";
    const Checkpoint ckpt = Checkpoint::open(o->model);
    // config.json's EOS ids end a text run too (the loops stop on them in both modes).
    if (o->stop_at_eos && text)
      for (int e : ckpt.config().eos_token_ids)
        if (std::find(limits.eos_ids.begin(), limits.eos_ids.end(), e) == limits.eos_ids.end())
          limits.eos_ids.push_back(e);
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
#ifdef MEGAOPS_HAVE_CUDA
    if (!o->cpu && gpu_available()) {
      TpRanks ranks(o->tp);  // --tp N: starts ranks 1..N-1 here, or joins a job
      const int status = run_gpu(*o, st, ckpt, prompt, max_seq, backend, prefill_path, plan);
      ranks.join();
      return status;
    }
#endif
    if (o->tp.rank > 0)
      throw_input_error("--tp-rank", "", "the CPU oracle runs every rank in one process");
    if (plan.kind == PlanKind::File)
      print_plan_line(plan, ", not run: the CPU oracle runs no plan");
    return run_cpu(*o, st, ckpt, prompt, max_seq);
  };
}

}  // namespace megaops::cli
