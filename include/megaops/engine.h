// The megaops engine: requests in, tokens and streamed text out, over any ModelRunner (the GPU
// executor or the fp32 CPU oracle, engine/model_runner.h). Requests are added, stepped and aborted
// independently, each with its own sampling parameters and stop conditions; every step()
// continuously batches the running requests (vLLM's scheduler: decode rows and chunks of arriving
// prompts under one token budget, on-demand KV blocks, preemption by recomputation when blocks run
// out). `generate`, `chat`, the Python module and `megaops serve` are its clients.
//
// Not thread-safe: one thread calls everything (AsyncEngine, engine/async_engine.h, puts a
// thread-safe queue in front of it for the server).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/sampling.h"

namespace megaops {

class ModelRunner;
class CheckpointText;
struct GenerationConfig;

struct EngineOptions {
  int max_running = 0;      // most requests in the running batch; 0: the runner's max_decode_rows
  int max_step_tokens = 0;  // rows per step (the token budget); 0: the runner's max_step_tokens
  // Most prompt tokens one request runs in a step (vLLM's long_prefill_token_threshold), so one
  // long prompt cannot hold the others' decode back for a whole step; 0: the budget.
  int max_prefill_chunk = 0;
  std::vector<int> eos_token_ids;  // end a request unless it sets ignore_eos
  // Automatic prefix caching (vLLM's, on by default): a request whose tokens start as an earlier
  // one's did takes that prefix's K/V blocks from the cache instead of computing them
  // (engine/block_manager.h). Only where the runner shares blocks (ModelRunner::shares_kv_blocks).
  bool prefix_caching = true;
};

// Why a request ended: "stop" (EOS, a stop token or string), "length" (max_tokens), "abort"
// (abort() or the front end), "error" (the step failed or the logits held NaN / Inf).
enum class FinishReason { None, Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason reason);

struct RequestParams {
  SamplingParams sampling{0.0f, 0, 1.0f, 0};  // greedy unless set
  int max_tokens = 16;                        // new tokens at most (>= 1)
  std::vector<std::string> stop;              // stop strings: the text ends before the first
  std::vector<int> stop_token_ids;            // ids that end the request besides EOS
  bool ignore_eos = false;
  // Log-probabilities of each generated token and of the `logprobs` most likely tokens at its
  // position (0..MAX_LOGPROBS; -1: off): the log-softmax of the model's raw logits, before
  // temperature, top-k and top-p (vLLM's default "raw" logprobs).
  int logprobs = -1;
  // Penalties and biases (OpenAI's and vLLM's), applied to the row's logits as vLLM defines them
  // (logit_bias, then the penalties, then min_tokens' mask) before temperature, top-k and top-p. A
  // request that sets any is sampled on the engine's thread from its row's fp32 logits (the same
  // definition and random stream as the runners' samplers, ref::sample), so it gets them on every
  // runner and plan; the others keep the runner's sampler.
  float presence_penalty = 0;   // -2..2: subtracted from each token generated at least once
  float frequency_penalty = 0;  // -2..2: subtracted once per time a token was generated
  // > 0, 1 = off: the logit of a token in the prompt or the output is divided by it where
  // positive, multiplied where not.
  float repetition_penalty = 1;
  std::map<int, float> logit_bias;  // token id -> added to its logit (-100..100)
  // EOS (unless ignore_eos) and stop_token_ids cannot be drawn before this many tokens
  // (0..max_tokens).
  int min_tokens = 0;
  // 0..1, 0 = off: after temperature, tokens less likely than min_p times the most likely one
  // are not drawn (vLLM's and llama.cpp's min_p); applied after the penalties, before top-k/p.
  float min_p = 0;
};

// Most alternatives RequestParams::logprobs may ask for (OpenAI's chat top_logprobs limit).
constexpr int MAX_LOGPROBS = 20;

struct TokenLogprob {
  int token = 0;
  float logprob = 0;
};
// One generated token's log-probability and the `logprobs` most likely tokens at its position,
// most likely first (the lower id first on ties).
struct SampledLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;
};
// The log-softmax of `logits` [vocab] at `token`, and its `top_n` largest entries (computed in
// double: a max-shifted sum of exponentials).
SampledLogprobs token_logprobs(const float* logits, int vocab, int token, int top_n);

// What one step() did to one request: the tokens it generated (the EOS or stop token included,
// its text not), the text that became final, and, when finished, why.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int> new_tokens;
  // One a new token, when the request asked for logprobs (RequestParams::logprobs >= 0).
  std::vector<SampledLogprobs> logprobs;
  std::string text;  // delta, UTF-8 complete; empty without a tokenizer
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  // Detail: "eos", "stop token", "stop string", "length", "abort", or the error message.
  std::string stop_reason;
  int prompt_tokens = 0, completion_tokens = 0;
  // Prompt tokens whose K/V came from the prefix cache when the request was (last) admitted.
  int cached_tokens = 0;
  double ttft_s = -1;  // arrival to first token; -1 before it
};

// Prometheus-style histogram: counts[i] observations <= bounds[i] (and above the previous bound),
// counts.back() those above every bound.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
};

struct EngineStats {
  int waiting = 0, running = 0;
  int kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_total = 0, kv_block_size = 0;
  uint64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  uint64_t steps_total = 0, preemptions_total = 0;
  // Prefix caching: whether it is on, prompt tokens looked up at admission and those found
  // cached, and blocks registered (held or free: a free one is reused before it is forgotten).
  bool prefix_caching = false;
  uint64_t prefix_cache_queries_total = 0, prefix_cache_hits_total = 0;
  int kv_blocks_cached = 0;
  std::map<std::string, uint64_t> finished_total;  // by finish reason name
  Histogram ttft_s, inter_token_s;
  // Per engine step that ran the model: the runner's step (the batch's forward pass and sampling,
  // host to host). AsyncEngine adds its loop's iterations with work (admission, the step,
  // handing outputs to the requests' channels): what the host adds around the model is
  // iteration - model step.
  Histogram model_step_s, engine_iteration_s;
};

class Engine {
 public:
  // `text` (may be null: ids only, no stop strings) must outlive the engine. Throws InputError
  // naming the option on a value out of range.
  Engine(std::unique_ptr<ModelRunner> runner, const CheckpointText* text,
         EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws InputError naming the field ("prompt", "max_tokens", "temperature", "stop", ...) when
  // the request is malformed or can never run: prompt + max_tokens beyond the runner's context,
  // or more KV blocks than the cache has. Thread-safe (reads only what the constructor set).
  void check_request(const std::vector<int>& prompt, const RequestParams& params) const;
  // Queues a request (check_request first) and returns its id.
  uint64_t add_request(std::vector<int> prompt, const RequestParams& params);
  // The prompt through the checkpoint's tokenizer (special tokens added: Llama 3's BOS).
  uint64_t add_request(const std::string& prompt, const RequestParams& params);

  // Schedules and runs one step; returns an output per request it touched (a token sampled, or
  // finished: stop, length, abort, error). Requests that only ran a prompt chunk return nothing.
  std::vector<RequestOutput> step();
  // Ends a request: its blocks are freed now and the next step() returns its final output
  // (finish "abort"). False for an unknown or finished id.
  bool abort(uint64_t id);
  bool has_work() const;
  EngineStats stats() const;
  const ModelRunner& runner() const;
  ModelRunner& runner();
  const CheckpointText* text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws InputError naming `names` (e.g. {"--temperature", "--top-k", "--top-p"}) unless
// temperature is finite and >= 0 (0 = greedy), top_k >= 0 (0 = off), 0 < top_p <= 1 (1 = off).
struct SamplingFieldNames {
  const char* temperature = "temperature";
  const char* top_k = "top_k";
  const char* top_p = "top_p";
};
void check_sampling(const SamplingParams& s, const SamplingFieldNames& names = {});

// Sampling as vLLM chooses it: a value given (temperature / top_p -1, top_k -1: not given), else
// generation_config.json's when it samples (do_sample), else greedy; checked as check_sampling.
SamplingParams resolve_sampling(const GenerationConfig& g, float temperature, int top_k,
                                float top_p, uint64_t seed, const SamplingFieldNames& names = {});

}  // namespace megaops
