// The engine over the CPU runner (fp32 oracle, paged KV cache): a request's tokens are the same
// alone, beside others joining and leaving at every step, and whatever its prompt's chunking;
// seeded sampling too; KV blocks are freed on finish and abort, requests queue when blocks run
// out (and are preempted and recomputed without changing their tokens), what can never fit is
// refused naming the field, and stop strings are never emitted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/cpu_runner.h"
#include "engine/engine_test_util.h"
#include "reference/ops.h"
#include "test_util.h"

namespace megaops {
namespace {

using testing::Finished;
using testing::prompt_ids;
using testing::run_to_end;
using testing::tiny_engine;

// Adds one request and runs the engine until it has no work.
template <typename Prompt>
Finished run_one(Engine& e, const Prompt& prompt, const RequestParams& params) {
  const uint64_t id = e.add_request(prompt, params);
  return run_to_end(e)[id];
}

// Awkward prompt lengths: one token, shorter than a block, across several blocks.
const std::vector<int> LENGTHS = {1, 7, 16, 17, 33, 50};

RequestParams greedy(int max_tokens) {
  RequestParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Each prompt alone in an engine of its own.
std::vector<std::vector<int>> alone(const std::vector<RequestParams>& params) {
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < LENGTHS.size(); ++i) {
    auto e = tiny_engine();
    const uint64_t id = e->add_request(prompt_ids(LENGTHS[i], static_cast<int>(i)), params[i]);
    out.push_back(run_to_end(*e)[id].tokens);
  }
  return out;
}

// The same prompts in one engine, request i joining after `i * stagger` steps, under a small
// token budget and prefill chunk, so prompt chunks and decode rows of others share steps.
std::vector<std::vector<int>> together(const std::vector<RequestParams>& params, int chunk,
                                       int budget, int stagger) {
  CpuRunnerOptions ro;
  ro.max_decode_rows = 4;
  EngineOptions eo;
  eo.max_step_tokens = budget;
  eo.max_prefill_chunk = chunk;
  auto e = tiny_engine(ro, eo);
  std::vector<uint64_t> ids;
  std::map<uint64_t, Finished> got;
  size_t next = 0;
  for (int step = 0; next < LENGTHS.size() || e->has_work(); ++step) {
    while (next < LENGTHS.size() && step >= static_cast<int>(next) * stagger) {
      ids.push_back(
          e->add_request(prompt_ids(LENGTHS[next], static_cast<int>(next)), params[next]));
      ++next;
    }
    for (const RequestOutput& o : e->step())
      got[o.id].tokens.insert(got[o.id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  std::vector<std::vector<int>> out;
  for (uint64_t id : ids) out.push_back(got[id].tokens);
  return out;
}

TEST(Engine, PagedOracleMatchesTheContiguousOne) {
  // Greedy tokens of the paged runner equal those of ref::Model with its contiguous cache.
  const auto w = testing::tiny_weights();
  for (size_t i = 0; i < LENGTHS.size(); ++i) {
    const std::vector<int> prompt = prompt_ids(LENGTHS[i], static_cast<int>(i));
    ref::Model m(*w, 256);
    std::vector<float> logits = m.forward(prompt);
    std::vector<int> want;
    for (int t = 0; t < 8; ++t) {
      const int vocab = w->cfg.vocab_size;
      want.push_back(ref::argmax(logits.data() + logits.size() - vocab, vocab));
      logits = m.forward({want.back()});
    }
    auto e = tiny_engine();
    const uint64_t id = e->add_request(prompt, greedy(8));
    EXPECT_EQ(run_to_end(*e)[id].tokens, want) << "prompt of " << LENGTHS[i];
  }
}

TEST(Engine, GreedyTokensAreTheSameAloneBatchedAndChunked) {
  std::vector<RequestParams> params;
  for (size_t i = 0; i < LENGTHS.size(); ++i) params.push_back(greedy(5 + static_cast<int>(i)));
  const auto want = alone(params);
  for (const auto& [chunk, budget, stagger] :
       std::vector<std::tuple<int, int, int>>{{0, 64, 0}, {1, 8, 1}, {5, 13, 2}, {16, 40, 3}}) {
    EXPECT_EQ(together(params, chunk, budget, stagger), want)
        << "chunk " << chunk << ", budget " << budget << ", stagger " << stagger;
  }
}

TEST(Engine, SeededSamplingIsTheSameAloneAndBatched) {
  std::vector<RequestParams> params;
  for (size_t i = 0; i < LENGTHS.size(); ++i) {
    RequestParams p = greedy(9);
    p.sampling = {0.9f, i % 2 ? 40 : 0, i % 3 ? 0.95f : 1.0f, 1000 + i};
    params.push_back(p);
  }
  const auto want = alone(params);
  EXPECT_EQ(together(params, 4, 12, 1), want);
  // Different seeds give different draws (the tokens above are not all greedy's).
  std::vector<RequestParams> greedy_params;
  for (size_t i = 0; i < LENGTHS.size(); ++i) greedy_params.push_back(greedy(9));
  EXPECT_NE(alone(greedy_params), want);
}

TEST(Engine, RequestsJoinAndLeaveEveryStep) {
  CpuRunnerOptions ro;
  ro.max_decode_rows = 8;
  auto e = tiny_engine(ro);
  std::map<uint64_t, int> want_len;
  std::map<uint64_t, int> got_len;
  int finished_total = 0;
  for (int step = 0; step < 40 && (step < 12 || e->has_work()); ++step) {
    if (step < 12) {
      const int n = 1 + step % 5;
      want_len[e->add_request(prompt_ids(3 + step, step), greedy(n))] = n;
    }
    int finished = 0;
    for (const RequestOutput& o : e->step()) {
      got_len[o.id] += static_cast<int>(o.new_tokens.size());
      if (o.finished) {
        ++finished;
        EXPECT_EQ(o.finish_reason, FinishReason::Length);
        EXPECT_EQ(o.completion_tokens, want_len[o.id]);
      }
    }
    finished_total += finished;
    const EngineStats s = e->stats();
    EXPECT_LE(s.running, 8);
    EXPECT_EQ(s.kv_blocks_used + s.kv_blocks_free, s.kv_blocks_total);
  }
  EXPECT_EQ(got_len, want_len);
  EXPECT_EQ(finished_total, 12);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.finished_total.at("length"), 12u);
  EXPECT_EQ(s.ttft_s.count, 12u);
  EXPECT_GT(s.generation_tokens_total, 12u);
}

TEST(Engine, AbortFreesBlocksAtOnce) {
  auto e = tiny_engine();
  const uint64_t a = e->add_request(prompt_ids(40, 1), greedy(50));
  const uint64_t b = e->add_request(prompt_ids(20, 2), greedy(6));
  std::vector<int> b_tokens;
  for (int i = 0; i < 3; ++i)
    for (const RequestOutput& o : e->step())
      if (o.id == b) b_tokens.insert(b_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
  const int used = e->stats().kv_blocks_used;
  ASSERT_GE(used, 4);  // 40 + 20 positions in blocks of 16
  EXPECT_TRUE(e->abort(a));
  EXPECT_FALSE(e->abort(a));
  EXPECT_FALSE(e->abort(12345));
  EXPECT_EQ(e->stats().kv_blocks_used, 2);  // b's 22 positions
  const auto got = run_to_end(*e);
  EXPECT_EQ(got.at(a).reason, FinishReason::Abort);
  EXPECT_EQ(got.at(b).reason, FinishReason::Length);
  EXPECT_EQ(b_tokens.size() + got.at(b).tokens.size(), 6u);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().finished_total.at("abort"), 1u);
  // A request aborted while still queued never runs.
  const uint64_t c = e->add_request(prompt_ids(5, 3), greedy(4));
  EXPECT_TRUE(e->abort(c));
  const auto queued = run_to_end(*e);
  EXPECT_TRUE(queued.at(c).tokens.empty());
  EXPECT_EQ(queued.at(c).reason, FinishReason::Abort);
}

TEST(Engine, RequestsQueueWhenBlocksRunOutAndKeepTheirTokens) {
  std::vector<RequestParams> params;
  for (size_t i = 0; i < LENGTHS.size(); ++i) params.push_back(greedy(12));
  const auto want = alone(params);
  // 8 blocks of 8 positions: the longest request (50 + 12) needs all of them, so the others wait
  // for it or are preempted by the older ones as their contexts grow.
  CpuRunnerOptions ro;
  ro.block_size = 8;
  ro.kv_blocks = 8;
  ro.max_decode_rows = 6;
  auto e = tiny_engine(ro);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < LENGTHS.size(); ++i)
    ids.push_back(e->add_request(prompt_ids(LENGTHS[i], static_cast<int>(i)), params[i]));
  int max_waiting = 0;
  std::map<uint64_t, std::vector<int>> got;
  while (e->has_work()) {
    for (const RequestOutput& o : e->step())
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    max_waiting = std::max(max_waiting, e->stats().waiting);
    EXPECT_LE(e->stats().kv_blocks_used, 8);
  }
  EXPECT_GT(max_waiting, 0);
  EXPECT_GT(e->stats().preemptions_total, 0u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[ids[i]], want[i]) << "request " << i;
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(Engine, RefusesWhatCanNeverFit) {
  CpuRunnerOptions ro;
  ro.max_context = 64;
  ro.block_size = 8;
  ro.kv_blocks = 4;
  auto e = tiny_engine(ro);
  testing::expect_input_error([&] { e->add_request(prompt_ids(60, 0), greedy(5)); },
                              {"max_tokens", "context is 64", "60 prompt tokens + 5"});
  testing::expect_input_error([&] { e->add_request(prompt_ids(30, 0), greedy(5)); },
                              {"max_tokens", "need 5 KV blocks, the cache has 4"});
  testing::expect_input_error([&] { e->add_request(std::vector<int>{}, greedy(5)); }, {"prompt"});
  testing::expect_input_error(
      [&] {
        e->add_request(std::vector<int>{1, 512}, greedy(5));
      },
      {"prompt", "512", "vocabulary"});
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), greedy(0)); },
                              {"max_tokens: expected >= 1"});
  RequestParams p = greedy(3);
  p.sampling.temperature = -1;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), p); }, {"temperature"});
  p = greedy(3);
  p.sampling.top_p = 0;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), p); }, {"top_p"});
  p = greedy(3);
  p.stop = {""};
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), p); }, {"stop"});
  EXPECT_FALSE(e->has_work());
  // What fits exactly runs.
  const uint64_t id = e->add_request(prompt_ids(27, 0), greedy(5));
  EXPECT_EQ(run_to_end(*e)[id].tokens.size(), 5u);
}

// Counts the rows a CPU runner computes (prompt chunks and decode rows).
class CountingRunner final : public ModelRunner {
 public:
  CountingRunner(CpuRunnerOptions ro, int* rows)
      : inner_(testing::tiny_weights(), ro), rows_(rows) {}
  const ModelConfig& config() const override { return inner_.config(); }
  KvCacheGeometry kv_geometry() const override { return inner_.kv_geometry(); }
  int max_decode_rows() const override { return inner_.max_decode_rows(); }
  int max_step_tokens() const override { return inner_.max_step_tokens(); }
  int max_context() const override { return inner_.max_context(); }
  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override {
    for (const RunnerSeq& q : seqs) *rows_ += static_cast<int>(q.tokens.size());
    return inner_.run(seqs);
  }
  std::vector<float> last_logits() const override { return inner_.last_logits(); }
  const char* backend() const override { return "cpu (counted)"; }
  bool shares_kv_blocks() const override { return shares_; }
  bool shares_ = true;

 private:
  CpuModelRunner inner_;
  int* rows_;
};

// Prefix caching: requests that start with the same tokens (a system prompt, an earlier turn)
// take its K/V from the cache and compute only what follows, with the same greedy tokens as
// without the cache, while requests join, leave, are aborted and the pool runs short.
TEST(Engine, PrefixCachingComputesOnlyWhatFollowsWithTheSameTokens) {
  const std::vector<int> system = prompt_ids(40, 9);  // 2 whole blocks of 16, and 8 positions
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int> p = system;
    const std::vector<int> tail = prompt_ids(3 + 5 * i, 20 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  prompts.push_back(prompts[2]);  // the same prompt again: all but its last block's remainder
  const auto run = [&](bool caching, int kv_blocks, int* rows, EngineStats* stats) {
    CpuRunnerOptions ro;
    ro.max_decode_rows = 3;
    ro.kv_blocks = kv_blocks;
    ro.max_context = 256;
    EngineOptions eo;
    eo.prefix_caching = caching;
    Engine e(std::make_unique<CountingRunner>(ro, rows), nullptr, eo);
    std::map<uint64_t, std::vector<int>> got;
    std::vector<uint64_t> ids;
    // The first request alone (so its blocks are cached), then the rest two at a time.
    ids.push_back(e.add_request(prompts[0], greedy(6)));
    for (const auto& [id, f] : run_to_end(e)) got[id] = f.tokens;
    for (size_t i = 1; i < prompts.size(); i += 2) {
      ids.push_back(e.add_request(prompts[i], greedy(6)));
      if (i + 1 < prompts.size()) ids.push_back(e.add_request(prompts[i + 1], greedy(6)));
      for (const auto& [id, f] : run_to_end(e)) got[id] = f.tokens;
    }
    *stats = e.stats();
    EXPECT_EQ(stats->kv_blocks_used, 0);
    std::vector<std::vector<int>> out;
    for (uint64_t id : ids) out.push_back(got[id]);
    return out;
  };
  int rows_off = 0, rows_on = 0, rows_tight = 0;
  EngineStats off, on, tight;
  const auto want = run(false, 0, &rows_off, &off);
  EXPECT_FALSE(off.prefix_caching);
  EXPECT_EQ(off.prefix_cache_hits_total, 0u);
  EXPECT_EQ(run(true, 0, &rows_on, &on), want);
  EXPECT_TRUE(on.prefix_caching);
  // Requests 1..5 find the system prompt's 2 whole blocks; the repeat finds what request 2 had
  // filled: its 40 + 13 prompt positions and first generated tokens make 3 whole blocks.
  const uint64_t hits = 5 * 32 + 48;
  EXPECT_EQ(on.prefix_cache_hits_total, hits);
  EXPECT_EQ(rows_off - rows_on, static_cast<int>(hits));
  uint64_t queried = 0;
  for (const auto& p : prompts) queried += p.size() - 1;
  EXPECT_EQ(on.prefix_cache_queries_total, queried);
  EXPECT_GT(on.kv_blocks_cached, 0);
  // A pool of 8 blocks: two requests of 4 blocks each fill it, so cached blocks are forgotten
  // to make room; the tokens stay the same.
  EXPECT_EQ(run(true, 8, &rows_tight, &tight), want);
  EXPECT_LT(tight.prefix_cache_hits_total, hits);
  // A runner with a cache of its own (the executor adapter) gets no prefix caching.
  CpuRunnerOptions ro;
  ro.max_context = 256;
  int rows = 0;
  auto own = std::make_unique<CountingRunner>(ro, &rows);
  own->shares_ = false;
  EXPECT_FALSE(Engine(std::move(own), nullptr, {}).stats().prefix_caching);
}

// An aborted request that shares cached blocks with a running one leaves them to it.
TEST(Engine, AbortingASharerKeepsTheSharedBlocks) {
  const std::vector<int> prompt = prompt_ids(48, 4);
  auto e = tiny_engine();
  const Finished first = run_one(*e, prompt, greedy(8));
  const uint64_t a = e->add_request(prompt, greedy(8));
  const uint64_t b = e->add_request(prompt, greedy(8));
  std::map<uint64_t, std::vector<int>> got;
  for (const RequestOutput& o : e->step())
    got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  EXPECT_TRUE(e->abort(a));
  for (const auto& [id, f] : run_to_end(*e))
    got[id].insert(got[id].end(), f.tokens.begin(), f.tokens.end());
  EXPECT_EQ(got[b], first.tokens);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_GE(e->stats().prefix_cache_hits_total, 2u * 32);
}

// What a request's tokens are under penalties and biases, computed here from ref::Model's logits
// the plain way: every id's bias, then for each id of the prompt or output the repetition
// penalty, for each generated id its count's frequency penalty and the presence penalty, then
// min_tokens' mask and min_p, then ref::sample with the request's own stream.
std::vector<int> penalised_reference(const std::vector<int>& prompt, const RequestParams& p,
                                     const std::vector<int>& eos) {
  const auto w = testing::tiny_weights();
  const int vocab = w->cfg.vocab_size;
  ref::Model m(*w, 256);
  std::vector<float> logits = m.forward(prompt);
  std::vector<int> out;
  while (static_cast<int>(out.size()) < p.max_tokens) {
    std::vector<float> x(logits.end() - vocab, logits.end());
    for (int id = 0; id < vocab; ++id) {
      const auto bias = p.logit_bias.find(id);
      if (bias != p.logit_bias.end()) x[id] += bias->second;
      const int count = static_cast<int>(std::count(out.begin(), out.end(), id));
      const bool seen = count > 0 || std::count(prompt.begin(), prompt.end(), id) > 0;
      if (seen) x[id] = x[id] > 0 ? x[id] / p.repetition_penalty : x[id] * p.repetition_penalty;
      if (count > 0) x[id] -= p.frequency_penalty * count + p.presence_penalty;
      const bool stops = std::count(eos.begin(), eos.end(), id) > 0 ||
                         std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), id) > 0;
      if (stops && static_cast<int>(out.size()) < p.min_tokens) x[id] = -3e38f;
    }
    if (p.min_p > 0 && p.sampling.temperature > 0) {  // probabilities after temperature
      const double top = *std::max_element(x.begin(), x.end());
      for (float& v : x)
        if (std::exp((v - top) / p.sampling.temperature) < p.min_p) v = -3e38f;
    }
    const int t =
        ref::sample(x.data(), vocab, p.sampling,
                    ref::sampling_uniform(p.sampling.seed, 0, static_cast<uint32_t>(out.size())));
    out.push_back(t);
    if (std::count(eos.begin(), eos.end(), t) > 0 ||
        std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) > 0)
      break;
    logits = m.forward({t});
  }
  return out;
}

TEST(Engine, PenaltiesAndBiasesFollowVllmsDefinitionAloneAndBatched) {
  const int eos = 2;
  std::vector<RequestParams> cases;
  RequestParams rep = greedy(12);
  rep.repetition_penalty = 1.3f;
  rep.frequency_penalty = 0.7f;
  rep.presence_penalty = 0.4f;
  cases.push_back(rep);
  RequestParams sampled = greedy(12);
  sampled.sampling = {0.8f, 50, 0.95f, 5};
  sampled.frequency_penalty = -0.5f;
  sampled.logit_bias = {{17, 4.0f}, {100, -100.0f}, {101, 1.5f}};
  cases.push_back(sampled);
  RequestParams hot = greedy(16);  // a flat distribution, cut by min_p
  hot.sampling = {1.0f, 0, 1.0f, 9};
  hot.min_p = 0.9f;
  cases.push_back(hot);
  RequestParams early = greedy(12);  // EOS pushed to the top, held back for 4 tokens
  early.ignore_eos = false;
  early.logit_bias = {{eos, 100.0f}};
  early.min_tokens = 4;
  cases.push_back(early);
  RequestParams stop_token = early;  // the same with a stop token instead
  stop_token.logit_bias = {{33, 100.0f}};
  stop_token.stop_token_ids = {33};
  cases.push_back(stop_token);
  // min_tokens beside a repetition penalty, the EOS id in the prompt: the mask stays a mask (the
  // penalty scaling it would overflow to -inf, a broken row).
  RequestParams masked = early;
  masked.repetition_penalty = 1.5f;
  cases.push_back(masked);
  EngineOptions eo;
  eo.eos_token_ids = {eos};
  const auto prompt_of = [&](size_t i) {
    std::vector<int> p = prompt_ids(9 + 7 * static_cast<int>(i), static_cast<int>(i));
    if (cases[i].repetition_penalty != 1 && cases[i].min_tokens > 0) p[3] = eos;
    return p;
  };
  std::vector<std::vector<int>> want;
  for (size_t i = 0; i < cases.size(); ++i) {
    want.push_back(penalised_reference(prompt_of(i), cases[i], eo.eos_token_ids));
    auto e = tiny_engine({}, eo);
    const Finished f = run_one(*e, prompt_of(i), cases[i]);
    EXPECT_EQ(f.tokens, want.back()) << "case " << i;
  }
  // The greedy case's penalties change its tokens; the min_tokens cases end right after.
  auto plain = tiny_engine({}, eo);
  EXPECT_NE(run_one(*plain, prompt_ids(9, 0), greedy(12)).tokens, want[0]);
  RequestParams no_min_p = hot;
  no_min_p.min_p = 0;
  EXPECT_NE(run_one(*plain, prompt_ids(23, 2), no_min_p).tokens, want[2]);
  EXPECT_EQ(want[3].size(), 5u);
  EXPECT_EQ(want[3].back(), eos);
  EXPECT_EQ(want[4].size(), 5u);
  EXPECT_EQ(want[4].back(), 33);
  EXPECT_EQ(want[5].size(), 5u);
  EXPECT_EQ(want[5].back(), eos);
  // Together, beside plain requests, in small chunks: the same tokens.
  CpuRunnerOptions ro;
  ro.max_decode_rows = 6;
  EngineOptions small = eo;
  small.max_step_tokens = 10;
  auto e = tiny_engine(ro, small);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < cases.size(); ++i) {
    ids.push_back(e->add_request(prompt_of(i), cases[i]));
    e->add_request(prompt_ids(12, 40 + static_cast<int>(i)), greedy(6));
  }
  const auto got = run_to_end(*e);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got.at(ids[i]).tokens, want[i]) << i;
  // Out of range: named.
  RequestParams bad = greedy(4);
  bad.presence_penalty = 3;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), bad); }, {"presence_penalty"});
  bad = greedy(4);
  bad.logit_bias = {{512, 1.0f}};
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), bad); },
                              {"logit_bias", "512"});
  bad = greedy(4);
  bad.min_tokens = 5;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), bad); }, {"min_tokens"});
  bad = greedy(4);
  bad.min_p = 1.5f;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), bad); }, {"min_p"});
  bad = greedy(4);
  bad.repetition_penalty = 0;
  testing::expect_input_error([&] { e->add_request(prompt_ids(3, 0), bad); },
                              {"repetition_penalty"});
}

TEST(Engine, StopStringsAreNeverEmitted) {
  auto e = tiny_engine();
  RequestParams p = greedy(40);
  p.sampling = {0.9f, 0, 1.0f, 5};
  const std::string full = run_one(*e, std::string("The model writes"), p).text;
  ASSERT_GE(full.size(), 8u) << full;
  // Stop strings of 1 to 4 printable ASCII characters from the second half of the text (the
  // random model's text holds stray bytes, shown as U+FFFD, which make poor stop strings).
  int tried = 0;
  for (size_t len = 1; len <= 4; ++len) {
    size_t at = full.size() / 2;
    const auto plain = [&](size_t i) {
      for (size_t j = i; j < i + len; ++j)
        if (j >= full.size() || full[j] < 0x20 || full[j] > 0x7e) return false;
      return true;
    };
    while (at < full.size() && !plain(at)) ++at;
    if (at >= full.size()) continue;
    const std::string stop = full.substr(at, len);
    RequestParams ps = p;
    ps.stop = {"never-in-the-text", stop};
    const uint64_t id = e->add_request(std::string("The model writes"), ps);
    std::string streamed;
    bool finished = false;
    while (e->has_work())
      for (const RequestOutput& o : e->step()) {
        streamed += o.text;
        EXPECT_EQ(o.text.find(stop), std::string::npos) << "a delta holds the stop string";
        if (o.finished) {
          EXPECT_EQ(o.finish_reason, FinishReason::Stop);
          EXPECT_EQ(o.stop_reason, "stop string");
          finished = o.id == id;
        }
      }
    EXPECT_TRUE(finished);
    EXPECT_EQ(streamed, full.substr(0, full.find(stop))) << "stop '" << stop << "'";
    ++tried;
  }
  EXPECT_GT(tried, 0);
}

TEST(Engine, EndsAtEosAndStopTokens) {
  auto e = tiny_engine({}, EngineOptions{});
  const auto first = run_one(*e, prompt_ids(5, 9), greedy(6)).tokens;
  ASSERT_EQ(first.size(), 6u);
  RequestParams p = greedy(6);
  p.stop_token_ids = {first[2]};
  const auto stopped = run_one(*e, prompt_ids(5, 9), p);
  EXPECT_EQ(stopped.reason, FinishReason::Stop);
  EXPECT_EQ(stopped.stop_reason, "stop token");
  EXPECT_EQ(stopped.tokens,
            std::vector<int>(first.begin(), std::find(first.begin(), first.end(), first[2]) + 1));
  // The engine's EOS ids end a request unless it ignores EOS.
  EngineOptions eo;
  eo.eos_token_ids = {first[1]};
  auto eos = tiny_engine({}, eo);
  RequestParams q = greedy(6);
  q.ignore_eos = false;
  const auto ended = run_one(*eos, prompt_ids(5, 9), q);
  EXPECT_EQ(ended.stop_reason, "eos");
  EXPECT_EQ(ended.tokens.back(), first[1]);
  EXPECT_EQ(run_one(*eos, prompt_ids(5, 9), greedy(6)).tokens, first);
}

TEST(Engine, WithoutATokenizerRunsIdsOnly) {
  auto e = tiny_engine({}, {}, /*with_text=*/false);
  const auto got = run_one(*e, prompt_ids(4, 0), greedy(3));
  EXPECT_EQ(got.tokens.size(), 3u);
  EXPECT_TRUE(got.text.empty());
  RequestParams p = greedy(3);
  p.stop = {"x"};
  testing::expect_input_error([&] { e->add_request(prompt_ids(4, 0), p); }, {"stop", "tokenizer"});
  testing::expect_input_error([&] { e->add_request(std::string("hi"), greedy(3)); }, {"prompt"});
}

// The runner refuses a malformed step naming the field; the engine turns a failed step into
// "error" endings for the step's requests and frees their blocks.
TEST(Engine, MalformedStepsAreErrorsNotUndefinedBehaviour) {
  CpuRunnerOptions ro;
  ro.max_context = 64;
  ro.kv_blocks = 4;
  CpuModelRunner runner(testing::tiny_weights(), ro);
  RunnerSeq s;
  s.tokens = {1, 2, 3};
  s.block_table = {7};
  testing::expect_input_error([&] { runner.run({s}); }, {"seqs[0].block_table[0]", "block 7"});
  s.block_table = {};
  testing::expect_input_error([&] { runner.run({s}); }, {"seqs[0].block_table", "cover"});
  s.block_table = {0};
  s.start_pos = 62;
  testing::expect_input_error([&] { runner.run({s}); }, {"seqs[0].start_pos", "[62, 65)"});
  s.start_pos = 0;
  s.tokens = {1, 9999};
  testing::expect_input_error([&] { runner.run({s}); }, {"seqs[0].tokens", "9999"});
  s.tokens = {1};
  testing::expect_input_error([&] { runner.run({s, s}); }, {"seqs[1].request_id", "twice"});
  s.sample = true;
  EXPECT_EQ(runner.run({s}).size(), 1u);
}

}  // namespace
}  // namespace megaops
