// See text_session.h.
#include "text_session.h"

#include <chrono>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "reference/model.h"
#include "reference/ops.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

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
  ref::SamplingParams params_;
  int vocab_;
  uint32_t step_ = 0;
  int last_ = -1;             // sampled, not yet in the KV cache
  std::vector<int> context_;  // the tokens in the KV cache
  std::vector<float> logits_;
};

#ifdef MEGAOPS_HAVE_CUDA
class GpuGenerator : public TokenGenerator {
 public:
  GpuGenerator(const Checkpoint& ckpt, const SamplingOptions& s, int max_context)
      : ex_(ckpt.config(), checkpoint_filler(ckpt), options(s, max_context),
            [&](size_t d, size_t t) { print_progress("loading weights", d, t); }) {}

  int start(const std::vector<int>& prompt) override { return ex_.prefill({prompt})[0]; }
  int next() override { return ex_.decode_step()[0]; }
  const char* backend() const override { return "GPU, conventional executor"; }

 private:
  static ExecutorOptions options(const SamplingOptions& s, int max_context) {
    ExecutorOptions eo;
    eo.max_batch = 1;
    eo.max_seq = max_context;
    eo.sampling = {s.temperature, s.top_k, s.top_p, s.seed};
    return eo;
  }
  ConventionalExecutor ex_;
};
#endif

}  // namespace

std::unique_ptr<TokenGenerator> make_token_generator(const Checkpoint& ckpt, bool cpu,
                                                     const SamplingOptions& sampling,
                                                     int max_context) {
#ifdef MEGAOPS_HAVE_CUDA
  if (!cpu && gpu_available()) return std::make_unique<GpuGenerator>(ckpt, sampling, max_context);
#endif
  (void)cpu;
  return std::make_unique<CpuGenerator>(ckpt, sampling, max_context);
}

StreamResult stream_text(TokenGenerator& gen, const CheckpointText& text,
                         const std::vector<int>& prompt, const StreamLimits& limits,
                         const std::function<void(const std::string&)>& emit) {
  using clock = std::chrono::steady_clock;
  StreamResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  StreamDecoder decoder(text.tokenizer(), /*skip_special_tokens=*/true);
  std::string held;  // decoded text not yet emitted: it may be the start of a stop string
  size_t longest_stop = 0;
  for (const std::string& s : limits.stop) longest_stop = std::max(longest_stop, s.size());
  const auto release = [&](bool final) {
    // Emit all but the tail that could still grow into a stop string; cut at a stop string.
    size_t cut = std::string::npos;
    for (const std::string& s : limits.stop) cut = std::min(cut, held.find(s));
    if (cut != std::string::npos) {
      held.resize(cut);
      final = true;
    }
    size_t keep = final || longest_stop == 0 ? 0 : std::min(held.size(), longest_stop - 1);
    // Never split a UTF-8 character between two emits.
    while (keep < held.size() && keep > 0 &&
           (static_cast<unsigned char>(held[held.size() - keep]) & 0xC0) == 0x80)
      ++keep;
    const std::string out = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    if (!out.empty()) {
      r.text += out;
      emit(out);
    }
    return cut != std::string::npos;
  };
  const auto t0 = clock::now();
  r.stop_reason = "length";
  for (int i = 0; i < limits.max_new_tokens; ++i) {
    if (g_interrupted) {
      r.stop_reason = "interrupted";
      break;
    }
    const int tok = i == 0 ? gen.start(prompt) : gen.next();
    if (i == 0) r.ttft_s = std::chrono::duration<double>(clock::now() - t0).count();
    r.tokens.push_back(tok);
    if (std::find(limits.eos_ids.begin(), limits.eos_ids.end(), tok) != limits.eos_ids.end()) {
      r.stop_reason = "eos";
      break;
    }
    held += decoder.push(tok);
    if (release(false)) {
      r.stop_reason = "stop string";
      break;
    }
  }
  if (r.stop_reason != "stop string") {
    held += decoder.finish();
    release(true);
  }
  r.total_s = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
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
