// The engine (include/megaops/engine.h): request lifecycle around the scheduler
// (engine/scheduler.h) and the runner (engine/model_runner.h). Each step() schedules, runs the
// step's rows, and turns each sampled token into an output: stop conditions in vLLM's order (EOS
// and stop tokens, then stop strings, then max_tokens), text through the request's TextStream,
// timings into the TTFT and inter-token histograms. A finished, aborted or failed request gives
// its blocks back at once.
#include "megaops/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/tokens.h"
#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "io/tokenizer_files.h"
#include "reference/ops.h"

namespace megaops {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Abort:
      return "abort";
    case FinishReason::Error:
      return "error";
    case FinishReason::None:
      break;
  }
  return "";
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++counts[i];
  sum += value;
  ++count;
}

namespace {

// vLLM's bucket bounds, with finer ones below 10 ms for the GPU's decode steps.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> step_buckets() {
  return {0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
          0.02,    0.05,   0.1,     0.25,  0.5,    1.0,   2.5,   5.0,   10.0};
}
std::vector<double> inter_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2, 0.3,
          0.4,   0.5,    0.75,  1.0,    2.5,  5.0,   7.5,  10.0,  20.0, 40.0, 80.0};
}

// Whether the request's next token is drawn on the host (RequestParams: penalties, biases, a
// min_tokens that still holds back a stop id).
bool host_sampled(const Request& r, const std::vector<int>& eos) {
  const RequestParams& p = r.params;
  if (p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1 ||
      !p.logit_bias.empty() || (p.min_p > 0 && p.sampling.temperature > 0))
    return true;
  return static_cast<int>(r.output.size()) < p.min_tokens &&
         ((!p.ignore_eos && !eos.empty()) || !p.stop_token_ids.empty());
}

// The request's next token from its row's raw logits: logit_bias, the repetition, frequency and
// presence penalties, min_tokens' mask, min_p after temperature (vLLM's definitions), then
// ref::sample with the request's own random stream (what the runners' samplers draw with).
int host_sample(Request& r, const float* raw, int vocab, const std::vector<int>& eos) {
  for (int i = 0; i < vocab; ++i)
    if (!std::isfinite(raw[i])) return NONFINITE_LOGITS_TOKEN;
  const RequestParams& p = r.params;
  std::vector<float> x(raw, raw + vocab);
  for (const auto& [id, bias] : p.logit_bias) x[id] += bias;
  if (p.repetition_penalty != 1) {
    if (r.prompt_ids.empty()) r.prompt_ids.insert(r.prompt.begin(), r.prompt.end());
    const auto penalise = [&](int id) {
      x[id] = x[id] > 0 ? x[id] / p.repetition_penalty : x[id] * p.repetition_penalty;
    };
    for (int id : r.prompt_ids) penalise(id);
    for (const auto& [id, count] : r.output_counts)
      if (!r.prompt_ids.count(id)) penalise(id);
  }
  for (const auto& [id, count] : r.output_counts)
    x[id] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
  // Lowest, not -inf: ref::sample reads a non-finite logit as a broken row. Masks go after the
  // penalties, which would scale the lowest float past it (vLLM's -inf is the same mask).
  const float never = std::numeric_limits<float>::lowest();
  if (static_cast<int>(r.output.size()) < p.min_tokens) {
    if (!p.ignore_eos)
      for (int id : eos)
        if (id >= 0 && id < vocab) x[id] = never;
    for (int id : p.stop_token_ids)
      if (id < vocab) x[id] = never;
  }
  if (p.min_p > 0 && p.sampling.temperature > 0) {
    // p_i < min_p * p_max  <=>  x_i < x_max + T * ln(min_p), in the tempered distribution.
    const float cut = x[ref::argmax(x.data(), vocab)] +
                      p.sampling.temperature * std::log(std::max(p.min_p, 1e-30f));
    for (float& v : x)
      if (v < cut) v = never;
  }
  const float u = ref::sampling_uniform(p.sampling.seed, 0, static_cast<uint32_t>(r.output.size()));
  return ref::sample(x.data(), vocab, p.sampling, u);
}

int pick(int asked, int runner_cap, const char* name) {
  if (asked < 0)
    throw InputError(std::string(name) + ": expected >= 0, found " + std::to_string(asked));
  return asked == 0 ? runner_cap : std::min(asked, runner_cap);
}

}  // namespace

struct Engine::Impl {
  std::unique_ptr<ModelRunner> runner;
  const CheckpointText* text = nullptr;
  EngineOptions options;
  int max_context = 0, vocab = 0;
  BlockManager blocks;
  Scheduler scheduler;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests;
  std::vector<RequestOutput> pending;  // outputs of aborts, returned by the next step()
  uint64_t next_id = 1;
  EngineStats stats;

  Impl(std::unique_ptr<ModelRunner> r, const CheckpointText* t, EngineOptions o)
      : runner(std::move(r)),
        text(t),
        options(std::move(o)),
        blocks(runner->kv_geometry().num_blocks, runner->kv_geometry().block_size,
               options.prefix_caching && runner->shares_kv_blocks()),
        scheduler(blocks, pick(options.max_running, runner->max_decode_rows(), "max_running"),
                  pick(options.max_step_tokens, runner->max_step_tokens(), "max_step_tokens"),
                  options.max_prefill_chunk) {
    max_context = runner->max_context();
    vocab = runner->config().vocab_size;
    if (options.max_prefill_chunk < 0)
      throw InputError("max_prefill_chunk: expected >= 0, found " +
                       std::to_string(options.max_prefill_chunk));
    stats.ttft_s = Histogram(ttft_buckets());
    stats.inter_token_s = Histogram(inter_token_buckets());
    stats.model_step_s = Histogram(step_buckets());
    stats.engine_iteration_s = Histogram(step_buckets());
    stats.kv_blocks_total = blocks.num_blocks();
    stats.kv_block_size = blocks.block_size();
  }

  RequestOutput finish(Request& r, FinishReason reason, std::string detail);
  void on_token(Request& r, int token, RequestOutput& out, SampledLogprobs* logprobs);
  std::vector<RunnerSeq> runner_seqs(const Schedule& s) const;
};

RequestOutput Engine::Impl::finish(Request& r, FinishReason reason, std::string detail) {
  RequestOutput out;
  out.id = r.id;
  out.finished = true;
  out.finish_reason = reason;
  out.stop_reason = std::move(detail);
  if (r.text) out.text = r.text->finish();
  out.prompt_tokens = static_cast<int>(r.prompt.size());
  out.cached_tokens = r.cached_tokens;
  out.completion_tokens = static_cast<int>(r.output.size());
  out.ttft_s = r.ttft_s;
  scheduler.remove(&r);
  r.state = Request::State::Finished;
  ++stats.finished_total[finish_reason_name(reason)];
  return out;
}

void Engine::Impl::on_token(Request& r, int token, RequestOutput& out, SampledLogprobs* logprobs) {
  if (token == NONFINITE_LOGITS_TOKEN || token < 0 || token >= vocab) {
    const std::string at = r.output.empty() ? std::string("prefill")
                                            : "decode step " + std::to_string(r.output.size());
    out = finish(r, FinishReason::Error, at + ": the logits hold NaN or Inf; no token was sampled");
    return;
  }
  const EngineClock::time_point now = EngineClock::now();
  if (r.output.empty()) {
    r.ttft_s = std::chrono::duration<double>(now - r.arrival).count();
    stats.ttft_s.observe(r.ttft_s);
    stats.prompt_tokens_total += r.prompt.size();
  } else {
    stats.inter_token_s.observe(std::chrono::duration<double>(now - r.last_token).count());
  }
  r.last_token = now;
  r.output.push_back(token);
  ++r.output_counts[token];
  ++stats.generation_tokens_total;

  const RequestParams& p = r.params;
  const auto has = [token](const std::vector<int>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  FinishReason reason = FinishReason::None;
  std::string detail, delta;
  if (!p.ignore_eos && has(options.eos_token_ids)) {
    reason = FinishReason::Stop;
    detail = "eos";
  } else if (has(p.stop_token_ids)) {
    reason = FinishReason::Stop;
    detail = "stop token";
  } else {
    bool stopped = false;
    if (r.text) delta = r.text->push(token, &stopped);
    if (stopped) {
      reason = FinishReason::Stop;
      detail = "stop string";
    } else if (static_cast<int>(r.output.size()) >= p.max_tokens) {
      reason = FinishReason::Length;
      detail = "length";
    }
  }
  if (reason != FinishReason::None) {
    out = finish(r, reason, detail);
    out.text = delta + out.text;
  } else {
    out.id = r.id;
    out.text = std::move(delta);
    out.prompt_tokens = static_cast<int>(r.prompt.size());
    out.cached_tokens = r.cached_tokens;
    out.completion_tokens = static_cast<int>(r.output.size());
    out.ttft_s = r.ttft_s;
  }
  out.new_tokens = {token};
  if (logprobs) out.logprobs = {std::move(*logprobs)};
}

std::vector<RunnerSeq> Engine::Impl::runner_seqs(const Schedule& s) const {
  std::vector<RunnerSeq> seqs;
  seqs.reserve(s.seqs.size());
  for (const ScheduledSeq& ss : s.seqs) {
    const Request& r = *ss.request;
    RunnerSeq q;
    q.request_id = r.id;
    for (int i = 0; i < ss.num_tokens; ++i) q.tokens.push_back(r.token_at(r.num_computed + i));
    q.start_pos = r.num_computed;
    q.block_table = r.blocks;
    q.sample = r.num_computed + ss.num_tokens == r.num_tokens();
    q.sampling = r.params.sampling;
    q.sample_index = static_cast<int>(r.output.size());
    q.want_logits = q.sample && (r.params.logprobs >= 0 || host_sampled(r, options.eos_token_ids));
    seqs.push_back(std::move(q));
  }
  return seqs;
}

Engine::Engine(std::unique_ptr<ModelRunner> runner, const CheckpointText* text,
               EngineOptions options) {
  if (!runner) throw Error("Engine: no model runner");
  impl_ = std::make_unique<Impl>(std::move(runner), text, std::move(options));
}

Engine::~Engine() = default;

void Engine::check_request(const std::vector<int>& prompt, const RequestParams& params) const {
  const Impl& m = *impl_;
  if (prompt.empty()) throw InputError("prompt: expected at least one token");
  for (int id : prompt)
    if (id < 0 || id >= m.vocab)
      throw InputError("prompt: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                       std::to_string(m.vocab) + ")");
  if (params.max_tokens < 1)
    throw InputError("max_tokens: expected >= 1, found " + std::to_string(params.max_tokens));
  check_sampling(params.sampling);
  const int64_t context = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (context > m.max_context)
    throw InputError("max_tokens: the context is " + std::to_string(m.max_context) +
                     " tokens, but " + std::to_string(prompt.size()) + " prompt tokens + " +
                     std::to_string(params.max_tokens) +
                     " max_tokens = " + std::to_string(context) + " were asked for");
  if (m.blocks.blocks_for(context) > m.blocks.num_blocks())
    throw InputError("max_tokens: " + std::to_string(context) + " tokens need " +
                     std::to_string(m.blocks.blocks_for(context)) + " KV blocks, the cache has " +
                     std::to_string(m.blocks.num_blocks()) + " (of " +
                     std::to_string(m.blocks.block_size()) + " positions)");
  for (const std::string& s : params.stop) {
    if (s.empty()) throw InputError("stop: expected non-empty strings, found \"\"");
    if (!m.text) throw InputError("stop: stop strings need the checkpoint's tokenizer");
  }
  for (int id : params.stop_token_ids)
    if (id < 0) throw InputError("stop_token_ids: expected ids >= 0, found " + std::to_string(id));
  const auto check_penalty = [](float v, const char* name) {
    if (!(std::isfinite(v) && v >= -2 && v <= 2))
      throw InputError(std::string(name) + ": expected -2..2, found " + std::to_string(v));
  };
  check_penalty(params.presence_penalty, "presence_penalty");
  check_penalty(params.frequency_penalty, "frequency_penalty");
  if (!(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0))
    throw InputError("repetition_penalty: expected a number > 0 (1: off), found " +
                     std::to_string(params.repetition_penalty));
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || id >= m.vocab)
      throw InputError("logit_bias: token id " + std::to_string(id) +
                       " outside the vocabulary [0, " + std::to_string(m.vocab) + ")");
    if (!(std::isfinite(bias) && bias >= -100 && bias <= 100))
      throw InputError("logit_bias: expected values in -100..100, found " + std::to_string(bias) +
                       " for token " + std::to_string(id));
  }
  if (!(params.min_p >= 0 && params.min_p <= 1))
    throw InputError("min_p: expected 0..1 (0: off), found " + std::to_string(params.min_p));
  if (params.min_tokens < 0 || params.min_tokens > params.max_tokens)
    throw InputError("min_tokens: expected 0..max_tokens (" + std::to_string(params.max_tokens) +
                     "), found " + std::to_string(params.min_tokens));
  if (params.logprobs < -1 || params.logprobs > MAX_LOGPROBS)
    throw InputError("logprobs: expected -1 (off) or 0.." + std::to_string(MAX_LOGPROBS) +
                     ", found " + std::to_string(params.logprobs));
}

uint64_t Engine::add_request(std::vector<int> prompt, const RequestParams& params) {
  check_request(prompt, params);
  Impl& m = *impl_;
  auto r = std::make_unique<Request>();
  r->id = m.next_id++;
  r->prompt = std::move(prompt);
  r->params = params;
  if (m.text) r->text = std::make_unique<TextStream>(m.text->tokenizer(), params.stop);
  r->arrival = EngineClock::now();
  m.scheduler.add(r.get());
  const uint64_t id = r->id;
  m.requests.emplace(id, std::move(r));
  return id;
}

uint64_t Engine::add_request(const std::string& prompt, const RequestParams& params) {
  if (!impl_->text) throw InputError("prompt: a text prompt needs the checkpoint's tokenizer");
  return add_request(impl_->text->tokenizer().encode(prompt, true), params);
}

std::vector<RequestOutput> Engine::step() {
  Impl& m = *impl_;
  std::vector<RequestOutput> outputs = std::move(m.pending);
  m.pending.clear();
  const Schedule schedule = m.scheduler.schedule();
  m.stats.preemptions_total += schedule.preempted;
  m.stats.prefix_cache_queries_total += schedule.prefix_queried;
  m.stats.prefix_cache_hits_total += schedule.prefix_hit;
  if (!schedule.seqs.empty()) {
    const std::vector<RunnerSeq> seqs = m.runner_seqs(schedule);
    std::vector<int> tokens;
    std::vector<float> logits;  // the rows of the seqs that want logits, in order
    size_t wanted = 0;
    for (const RunnerSeq& q : seqs) wanted += q.want_logits;
    std::string failure;
    try {
      const auto run_start = std::chrono::steady_clock::now();
      tokens = m.runner->run(seqs);
      m.stats.model_step_s.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count());
      if (tokens.size() != seqs.size())
        failure = "the runner returned " + std::to_string(tokens.size()) + " tokens for " +
                  std::to_string(seqs.size()) + " sequences";
      if (wanted > 0) logits = m.runner->last_logits();
      if (failure.empty() && logits.size() != wanted * static_cast<size_t>(m.vocab))
        failure = "the runner returned " + std::to_string(logits.size()) +
                  " logits for logprobs, expected " + std::to_string(wanted) + " rows of " +
                  std::to_string(m.vocab);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    size_t logits_row = 0;
    ++m.stats.steps_total;
    for (size_t i = 0; i < schedule.seqs.size(); ++i) {
      Request& r = *schedule.seqs[i].request;
      if (!failure.empty()) {
        outputs.push_back(m.finish(r, FinishReason::Error, failure));
        continue;
      }
      r.num_computed += schedule.seqs[i].num_tokens;
      m.blocks.register_full([&r](int t) { return r.token_at(t); }, r.num_computed, r.blocks,
                             r.prefix);
      if (!seqs[i].sample) continue;
      RequestOutput out;
      SampledLogprobs lp;
      const float* row = logits.data() + logits_row * static_cast<size_t>(m.vocab);
      if (seqs[i].want_logits && host_sampled(r, m.options.eos_token_ids))
        tokens[i] = host_sample(r, row, m.vocab, m.options.eos_token_ids);
      const bool with_logprobs =
          seqs[i].want_logits && r.params.logprobs >= 0 && tokens[i] >= 0 && tokens[i] < m.vocab;
      if (with_logprobs) lp = token_logprobs(row, m.vocab, tokens[i], r.params.logprobs);
      logits_row += seqs[i].want_logits;
      m.on_token(r, tokens[i], out, with_logprobs ? &lp : nullptr);
      outputs.push_back(std::move(out));
    }
  }
  for (const RequestOutput& o : outputs)
    if (o.finished) m.requests.erase(o.id);
  return outputs;
}

bool Engine::abort(uint64_t id) {
  Impl& m = *impl_;
  auto it = m.requests.find(id);
  if (it == m.requests.end() || it->second->state == Request::State::Finished) return false;
  m.pending.push_back(m.finish(*it->second, FinishReason::Abort, "abort"));
  return true;
}

bool Engine::has_work() const {
  return !impl_->requests.empty() || !impl_->pending.empty();
}

EngineStats Engine::stats() const {
  EngineStats s = impl_->stats;
  s.waiting = impl_->scheduler.num_waiting();
  s.running = impl_->scheduler.num_running();
  s.kv_blocks_used = impl_->blocks.num_used();
  s.kv_blocks_free = impl_->blocks.num_free();
  s.kv_blocks_cached = impl_->blocks.num_cached();
  s.prefix_caching = impl_->blocks.prefix_caching();
  return s;
}

const ModelRunner& Engine::runner() const {
  return *impl_->runner;
}
ModelRunner& Engine::runner() {
  return *impl_->runner;
}
const CheckpointText* Engine::text() const {
  return impl_->text;
}

void check_sampling(const SamplingParams& s, const SamplingFieldNames& names) {
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    throw_input_error(
        names.temperature, "",
        "expected a finite value >= 0 (0 = greedy), found " + std::to_string(s.temperature));
  if (s.top_k < 0)
    throw_input_error(names.top_k, "", "expected >= 0 (0 = off), found " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1))
    throw_input_error(names.top_p, "",
                      "expected a value in (0, 1] (1 = off), found " + std::to_string(s.top_p));
}

SamplingParams resolve_sampling(const GenerationConfig& g, float temperature, int top_k,
                                float top_p, uint64_t seed, const SamplingFieldNames& names) {
  SamplingParams s;
  const bool sample_by_default = g.do_sample.value_or(false);
  // Only the sentinel means "not given": NaN or another negative value is checked and refused.
  s.temperature = temperature != -1.0f ? temperature
                  : sample_by_default  ? g.temperature.value_or(1.0f)
                                       : 0.0f;
  s.top_k = top_k != -1 ? top_k : sample_by_default ? g.top_k.value_or(0) : 0;
  s.top_p = top_p != -1.0f ? top_p : sample_by_default ? g.top_p.value_or(1.0f) : 1.0f;
  s.seed = seed;
  check_sampling(s, names);
  return s;
}

}  // namespace megaops
