// What `generate --prompt` and `chat` share: a token generator over the GPU executor or the CPU
// oracle, and the loop that turns its tokens into streamed text with stop strings, EOS ids from
// generation_config.json and the summary line (prompt tokens, new tokens, TTFT, tok/s, stop
// reason) that llama.cpp and vLLM users expect.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/plan.h"
#include "io/tokenizer_files.h"
#include "models/checkpoint.h"

namespace megaops::cli {

struct SamplingOptions {
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
};

// Throws InputError naming the option unless temperature is finite and >= 0 (0 = greedy),
// top_k >= 0 (0 = off) and 0 < top_p <= 1 (1 = off).
void check_sampling_options(float temperature, int top_k, float top_p);

// Sampling as vLLM chooses it: an option given on the command line (-1: not given), else
// generation_config.json's value when it samples (do_sample), else greedy. Throws InputError
// naming the option on any other value out of range (NaN, -2, top-p 0 ...), never a default.
SamplingOptions resolve_sampling(const GenerationConfig& g, float temperature, int top_k,
                                 float top_p, uint64_t seed);

// Generates one sequence's tokens. start() runs a prompt and returns the first new token; next()
// the one after the last. A prompt that extends the previous context reuses its cache where the
// backend can (the CPU oracle).
class TokenGenerator {
 public:
  virtual ~TokenGenerator() = default;
  virtual int start(const std::vector<int>& prompt) = 0;
  virtual int next() = 0;
  virtual const char* backend() const = 0;
};

// The GPU executor running `plan` (graph/plan.h; its regions are checked against the executor's
// ops, errors naming `plan_origin`) when a GPU is there and `cpu` is false, else the CPU oracle.
// `max_context` bounds prompt + new tokens of every start().
std::unique_ptr<TokenGenerator> make_token_generator(const Checkpoint& ckpt, bool cpu,
                                                     const SamplingOptions& sampling,
                                                     int max_context, const Plan& plan,
                                                     const std::string& plan_origin);

struct StreamLimits {
  int max_new_tokens = 256;
  std::vector<std::string> stop;  // stop strings: generation ends before the first occurrence
  std::vector<int> eos_ids;       // empty: never stop on a token
};

struct StreamResult {
  std::vector<int> tokens;  // new tokens, the EOS one included when it ended the run
  std::string text;         // what was streamed (cut before a stop string)
  int prompt_tokens = 0;
  double ttft_s = 0, total_s = 0;
  std::string stop_reason;  // "eos", "stop string", "length" or "interrupted"
};

// Turns generated tokens into streamed text one token at a time, for loops that own their
// generation (`generate` on any backend): UTF-8 characters split across tokens are held until
// complete, text that could still turn into a stop string is held until it cannot (a stop string
// is never printed), special tokens are not printed.
class TextStreamer {
 public:
  TextStreamer(const CheckpointText& text, const StreamLimits& limits,
               std::function<void(const std::string&)> emit);
  // Starts the TTFT clock (call just before the prompt runs).
  void start_clock();
  // Takes the next token; true when generation must stop (EOS, stop string, max_new_tokens).
  bool push(int token);
  // Flushes what is held and returns the totals; `interrupted` names the stop reason.
  StreamResult finish(int prompt_tokens, bool interrupted = false);

 private:
  bool release(bool final);
  const StreamLimits& limits_;
  std::function<void(const std::string&)> emit_;
  StreamDecoder decoder_;
  std::string held_;
  size_t longest_stop_ = 0;
  StreamResult result_;
  std::chrono::steady_clock::time_point t0_;
  bool done_ = false;
};

// Runs `prompt` and streams text to `emit` as it becomes final: UTF-8 characters split across
// tokens are held until complete, and text that could still turn into a stop string is held until
// it cannot (so a stop string is never printed). Special tokens are not printed.
StreamResult stream_text(TokenGenerator& gen, const CheckpointText& text,
                         const std::vector<int>& prompt, const StreamLimits& limits,
                         const std::function<void(const std::string&)>& emit);

// "prompt 12 tokens, 32 new tokens, TTFT 45.1 ms, 21.3 tok/s, stop: eos" for stderr.
std::string stream_summary(const StreamResult& r);

}  // namespace megaops::cli
