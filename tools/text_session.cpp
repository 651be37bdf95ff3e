// See text_session.h.
#include "text_session.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "core/sampling.h"
#include "reference/model.h"
#include "reference/ops.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/step_graph.h"
#include "runtime/conventional.h"
#include "runtime/plan_options.h"
#endif

namespace megaops::cli {

// Here rather than in main.cpp: the Python module links this file without main.cpp.
bool gpu_available() {
#ifdef MEGAOPS_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

namespace {

class CpuGenerator : public TokenGenerator {
 public:
  CpuGenerator(const Checkpoint& ckpt, const SamplingOptions& s, int max_context)
      : weights_(ref::load_weights(ckpt)),
        model_(weights_, max_context),
        params_{s.temperature, s.top_k, s.top_p, s.seed},
        vocab_(ckpt.config().vocab_size) {}

  int start(const std::vector<int>& prompt) override {
    // The oracle's KV cache only grows: reuse it when the new prompt extends what it holds.
    const bool extends = !context_.empty() && context_.size() < prompt.size() &&
                         std::equal(context_.begin(), context_.end(), prompt.begin());
    if (!extends) {
      model_.reset();
      context_.clear();
    }
    const std::vector<int> feed(prompt.begin() + context_.size(), prompt.end());
    context_ = prompt;
    logits_ = model_.forward(feed);
    step_ = 0;
    return sample();
  }

  int next() override {
    logits_ = model_.forward({last_});
    context_.push_back(last_);
    return sample();
  }

  const char* backend() const override { return "CPU oracle, fp32"; }

 private:
  int sample() {
    const float* last = logits_.data() + logits_.size() - vocab_;
    last_ = ref::sample(last, vocab_, params_, ref::sampling_uniform(params_.seed, 0, step_++));
    return last_;
  }

  ref::Weights weights_;
  ref::Model model_;
  SamplingParams params_;
  int vocab_;
  uint32_t step_ = 0;
  int last_ = -1;             // sampled, not yet in the KV cache
  std::vector<int> context_;  // the tokens in the KV cache
  std::vector<float> logits_;
};

#ifdef MEGAOPS_HAVE_CUDA
class GpuGenerator : public TokenGenerator {
 public:
  GpuGenerator(const Checkpoint& ckpt, const SamplingOptions& s, int max_context, const Plan& plan,
               const std::string& plan_origin)
      : ex_(ckpt.config(), checkpoint_filler(ckpt), options(s, max_context, plan),
            [&](size_t d, size_t t) { print_progress("loading weights", d, t); }),
        backend_("GPU, " + describe(plan)) {
    set_plan_regions(plan, plan_origin, ex_);
    const std::string warning = plan_gpu_warning(plan, plan_origin, ex_.device_name());
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  }

  int start(const std::vector<int>& prompt) override { return ex_.prefill({prompt})[0]; }
  int next() override { return ex_.decode_step()[0]; }
  const char* backend() const override { return backend_.c_str(); }

 private:
  static ExecutorOptions options(const SamplingOptions& s, int max_context, const Plan& plan) {
    ExecutorOptions eo;
    eo.step_graph = build_step_graph;
    apply_plan(plan, eo);
    eo.max_batch = 1;
    eo.max_seq = max_context;
    eo.sampling = {s.temperature, s.top_k, s.top_p, s.seed};
    return eo;
  }
  ConventionalExecutor ex_;
  std::string backend_;
};
#endif

}  // namespace

void check_sampling_options(float temperature, int top_k, float top_p) {
  if (!std::isfinite(temperature) || temperature < 0)
    throw_input_error(
        "--temperature", "",
        "expected a finite value >= 0 (0 = greedy), found " + std::to_string(temperature));
  if (top_k < 0)
    throw_input_error("--top-k", "", "expected >= 0 (0 = off), found " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1))
    throw_input_error("--top-p", "",
                      "expected a value in (0, 1] (1 = off), found " + std::to_string(top_p));
}

SamplingOptions resolve_sampling(const GenerationConfig& g, float temperature, int top_k,
                                 float top_p, uint64_t seed) {
  SamplingOptions s;
  const bool sample_by_default = g.do_sample.value_or(false);
  // Only the sentinel means "not given": NaN or another negative value is checked and refused.
  s.temperature = temperature != -1.0f ? temperature
                  : sample_by_default  ? g.temperature.value_or(1.0f)
                                       : 0.0f;
  s.top_k = top_k != -1 ? top_k : sample_by_default ? g.top_k.value_or(0) : 0;
  s.top_p = top_p != -1.0f ? top_p : sample_by_default ? g.top_p.value_or(1.0f) : 1.0f;
  s.seed = seed;
  check_sampling_options(s.temperature, s.top_k, s.top_p);
  return s;
}

std::unique_ptr<TokenGenerator> make_token_generator(const Checkpoint& ckpt, bool cpu,
                                                     const SamplingOptions& sampling,
                                                     int max_context, const Plan& plan,
                                                     const std::string& plan_origin) {
#ifdef MEGAOPS_HAVE_CUDA
  if (!cpu && gpu_available())
    return std::make_unique<GpuGenerator>(ckpt, sampling, max_context, plan, plan_origin);
#endif
  (void)cpu;
  (void)plan;
  (void)plan_origin;
  return std::make_unique<CpuGenerator>(ckpt, sampling, max_context);
}

TextStreamer::TextStreamer(const CheckpointText& text, const StreamLimits& limits,
                           std::function<void(const std::string&)> emit)
    : limits_(limits),
      emit_(std::move(emit)),
      decoder_(text.tokenizer(), /*skip_special_tokens=*/true),
      t0_(std::chrono::steady_clock::now()) {
  for (const std::string& s : limits.stop) longest_stop_ = std::max(longest_stop_, s.size());
  result_.stop_reason = "length";
}

void TextStreamer::start_clock() {
  t0_ = std::chrono::steady_clock::now();
}

// Emits all but the tail that could still grow into a stop string; cuts at a stop string (true).
bool TextStreamer::release(bool final) {
  size_t cut = std::string::npos;
  for (const std::string& s : limits_.stop) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    held_.resize(cut);
    final = true;
  }
  size_t keep = final || longest_stop_ == 0 ? 0 : std::min(held_.size(), longest_stop_ - 1);
  // Never split a UTF-8 character between two emits.
  while (keep > 0 && keep < held_.size() &&
         (static_cast<unsigned char>(held_[held_.size() - keep]) & 0xC0) == 0x80)
    ++keep;
  const std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  if (!out.empty()) {
    result_.text += out;
    emit_(out);
  }
  return cut != std::string::npos;
}

bool TextStreamer::push(int token) {
  if (done_) return true;
  if (result_.tokens.empty())
    result_.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  result_.tokens.push_back(token);
  if (std::find(limits_.eos_ids.begin(), limits_.eos_ids.end(), token) != limits_.eos_ids.end()) {
    result_.stop_reason = "eos";
    return done_ = true;
  }
  held_ += decoder_.push(token);
  if (release(false)) {
    result_.stop_reason = "stop string";
    return done_ = true;
  }
  if (static_cast<int>(result_.tokens.size()) >= limits_.max_new_tokens) done_ = true;
  return done_;
}

StreamResult TextStreamer::finish(int prompt_tokens, bool interrupted) {
  if (result_.stop_reason != "stop string") {
    held_ += decoder_.finish();
    release(true);
  }
  if (interrupted && !done_) result_.stop_reason = "interrupted";
  result_.prompt_tokens = prompt_tokens;
  result_.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return result_;
}

StreamResult stream_text(TokenGenerator& gen, const CheckpointText& text,
                         const std::vector<int>& prompt, const StreamLimits& limits,
                         const std::function<void(const std::string&)>& emit) {
  TextStreamer streamer(text, limits, emit);
  streamer.start_clock();
  bool stop = limits.max_new_tokens < 1;
  for (int i = 0; !stop && !g_interrupted; ++i)
    stop = streamer.push(i == 0 ? gen.start(prompt) : gen.next());
  return streamer.finish(static_cast<int>(prompt.size()), g_interrupted);
}

std::string stream_summary(const StreamResult& r) {
  const int n = static_cast<int>(r.tokens.size());
  // Decode speed over the tokens after the first, as llama.cpp and vLLM report it.
  const double decode_s = r.total_s - r.ttft_s;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "prompt %d tokens, %d new tokens, TTFT %.1f ms, %.1f tok/s, stop: %s",
                r.prompt_tokens, n, r.ttft_s * 1e3,
                n > 1 && decode_s > 0 ? (n - 1) / decode_s : 0.0, r.stop_reason.c_str());
  return buf;
}

}  // namespace megaops::cli
