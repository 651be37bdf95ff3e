// Logprobs in the engine over the CPU runner: each generated token's logprob is the log-softmax
// of the oracle's raw logits at its position (whatever the temperature), the top-N are sorted
// with the greedy token first, the values do not change when the request shares its steps with
// others, requests without logprobs get none, and a bad count is refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/engine_test_util.h"
#include "reference/model.h"

namespace megaops {
namespace {

using testing::prompt_ids;
using testing::tiny_engine;
using testing::tiny_weights;

// What one request produced: its tokens and their logprobs.
struct WithLogprobs {
  std::vector<int> tokens;
  std::vector<SampledLogprobs> logprobs;
};

std::map<uint64_t, WithLogprobs> run_all(Engine& e) {
  std::map<uint64_t, WithLogprobs> out;
  for (int i = 0; i < 10000 && e.has_work(); ++i)
    for (const RequestOutput& o : e.step()) {
      WithLogprobs& w = out[o.id];
      w.tokens.insert(w.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      w.logprobs.insert(w.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    }
  EXPECT_FALSE(e.has_work());
  return out;
}

RequestParams params(int logprobs, float temperature = 0.0f, uint64_t seed = 0) {
  RequestParams p;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  p.sampling = SamplingParams{temperature, temperature > 0 ? 20 : 0, 1.0f, seed};
  return p;
}

// The oracle's log-softmax of the last row of logits after feeding prompt + tokens[0..k).
std::vector<std::vector<double>> oracle_logsoftmax(const std::vector<int>& prompt,
                                                   const std::vector<int>& tokens) {
  ref::Model m(*tiny_weights(), 256);
  const int V = tiny_weights()->cfg.vocab_size;
  std::vector<std::vector<double>> out;
  std::vector<float> logits = m.forward(prompt);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const float* row = logits.data() + logits.size() - V;
    double peak = -INFINITY, sum = 0;
    for (int i = 0; i < V; ++i) peak = std::max(peak, static_cast<double>(row[i]));
    for (int i = 0; i < V; ++i) sum += std::exp(row[i] - peak);
    std::vector<double> ls(V);
    for (int i = 0; i < V; ++i) ls[i] = row[i] - peak - std::log(sum);
    out.push_back(std::move(ls));
    logits = m.forward({tokens[k]});
  }
  return out;
}

// The logprobs against the oracle: the sampled token's value and every top entry's, within 1e-4
// (fp32 logits; the oracle's contiguous cache and the runner's paged one differ in summation
// order only), the top-N strictly ordered by logprob (ties by id) and as long as asked.
void expect_matches_oracle(const std::vector<int>& prompt, const WithLogprobs& w, int n) {
  ASSERT_EQ(w.logprobs.size(), w.tokens.size());
  const auto want = oracle_logsoftmax(prompt, w.tokens);
  for (size_t k = 0; k < w.tokens.size(); ++k) {
    const SampledLogprobs& lp = w.logprobs[k];
    EXPECT_EQ(lp.sampled.token, w.tokens[k]);
    EXPECT_NEAR(lp.sampled.logprob, want[k][w.tokens[k]], 1e-4) << "token " << k;
    EXPECT_LE(lp.sampled.logprob, 0.0f);
    ASSERT_EQ(static_cast<int>(lp.top.size()), n) << "token " << k;
    for (size_t j = 0; j < lp.top.size(); ++j) {
      EXPECT_NEAR(lp.top[j].logprob, want[k][lp.top[j].token], 1e-4) << "token " << k;
      if (j > 0) {
        EXPECT_TRUE(
            lp.top[j - 1].logprob > lp.top[j].logprob ||
            (lp.top[j - 1].logprob == lp.top[j].logprob && lp.top[j - 1].token < lp.top[j].token))
            << "token " << k << " top " << j;
      }
    }
    // Nothing outside the top-N is more likely than its last entry.
    if (n == 0) continue;
    std::vector<bool> in_top(want[k].size(), false);
    for (const TokenLogprob& t : lp.top) in_top[t.token] = true;
    for (size_t i = 0; i < want[k].size(); ++i) {
      if (in_top[i]) continue;
      EXPECT_LE(want[k][i], lp.top.back().logprob + 1e-4) << "token " << k << " id " << i;
    }
  }
}

TEST(EngineLogprobs, GreedyMatchesTheOracleAndLeadsTheTop) {
  auto e = tiny_engine();
  const std::vector<int> prompt = prompt_ids(17, 1);
  const uint64_t id = e->add_request(prompt, params(5));
  const WithLogprobs w = run_all(*e)[id];
  ASSERT_EQ(w.tokens.size(), 6u);
  expect_matches_oracle(prompt, w, 5);
  for (const SampledLogprobs& lp : w.logprobs) {
    EXPECT_EQ(lp.top[0].token, lp.sampled.token);  // greedy: the most likely token
    EXPECT_EQ(lp.top[0].logprob, lp.sampled.logprob);
  }
}

// Raw logprobs: of the model's logits, not of the temperature-scaled distribution it sampled.
TEST(EngineLogprobs, SampledRequestsReportRawLogprobs) {
  auto e = tiny_engine();
  const std::vector<int> prompt = prompt_ids(9, 2);
  const uint64_t id = e->add_request(prompt, params(3, 1.7f, 11));
  const WithLogprobs w = run_all(*e)[id];
  expect_matches_oracle(prompt, w, 3);
}

TEST(EngineLogprobs, SameAloneAndBatchedAndOnlyWhereAsked) {
  const std::vector<int> prompt = prompt_ids(33, 3);
  auto alone = tiny_engine();
  const uint64_t a = alone->add_request(prompt, params(4, 0.9f, 5));
  const WithLogprobs want = run_all(*alone)[a];
  ASSERT_EQ(want.logprobs.size(), 6u);

  CpuRunnerOptions ro;
  ro.max_decode_rows = 4;
  EngineOptions eo;
  eo.max_step_tokens = 24;  // the prompt runs in chunks beside the others' decode rows
  auto batched = tiny_engine(ro, eo);
  const uint64_t off = batched->add_request(prompt_ids(7, 4), params(-1));
  const uint64_t zero = batched->add_request(prompt_ids(5, 5), params(0));
  const uint64_t b = batched->add_request(prompt, params(4, 0.9f, 5));
  std::map<uint64_t, WithLogprobs> got = run_all(*batched);
  ASSERT_EQ(got[b].tokens, want.tokens);
  ASSERT_EQ(got[b].logprobs.size(), want.logprobs.size());
  for (size_t k = 0; k < want.logprobs.size(); ++k) {
    EXPECT_NEAR(got[b].logprobs[k].sampled.logprob, want.logprobs[k].sampled.logprob, 1e-5);
    ASSERT_EQ(got[b].logprobs[k].top.size(), 4u);
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(got[b].logprobs[k].top[j].token, want.logprobs[k].top[j].token);
      EXPECT_NEAR(got[b].logprobs[k].top[j].logprob, want.logprobs[k].top[j].logprob, 1e-5);
    }
  }
  EXPECT_TRUE(got[off].logprobs.empty());
  ASSERT_EQ(got[zero].logprobs.size(), got[zero].tokens.size());
  for (const SampledLogprobs& lp : got[zero].logprobs) EXPECT_TRUE(lp.top.empty());
  expect_matches_oracle(prompt_ids(5, 5), got[zero], 0);
}

TEST(EngineLogprobs, ACountOutOfRangeIsRefusedNamingTheField) {
  auto e = tiny_engine();
  for (int n : {-2, MAX_LOGPROBS + 1}) {
    try {
      e->add_request(prompt_ids(4, 0), params(n));
      ADD_FAILURE() << "logprobs " << n << " was accepted";
    } catch (const InputError& err) {
      EXPECT_EQ(std::string(err.what()).rfind("logprobs:", 0), 0u) << err.what();
    }
  }
  EXPECT_NO_THROW(e->add_request(prompt_ids(4, 0), params(MAX_LOGPROBS)));
}

TEST(EngineLogprobs, TokenLogprobsOfARow) {
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, -INFINITY, 0.5f};
  const SampledLogprobs lp = token_logprobs(row.data(), 5, 3, 9);
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(0.5));
  EXPECT_EQ(lp.sampled.logprob, -INFINITY);
  ASSERT_EQ(lp.top.size(), 5u);   // clamped to the vocabulary
  EXPECT_EQ(lp.top[0].token, 1);  // ties: the lower id first
  EXPECT_EQ(lp.top[1].token, 2);
  EXPECT_EQ(lp.top[2].token, 0);
  EXPECT_EQ(lp.top[4].token, 3);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - z, 1e-6);
  EXPECT_NEAR(lp.top[2].logprob, 1.0 - z, 1e-6);
  const SampledLogprobs one = token_logprobs(row.data(), 5, 2, 1);
  ASSERT_EQ(one.top.size(), 1u);
  EXPECT_EQ(one.top[0].token, 1);
  EXPECT_EQ(one.sampled.logprob, one.top[0].logprob);
}

// Against a full sort, on rows with many ties (values from a few levels) and an awkward size.
TEST(EngineLogprobs, TopNIsTheSortedHead) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));  // fresh each run; replay a failure with it
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 777);
    std::vector<float> row(vocab);
    for (float& x : row) x = static_cast<float>(rng() % 9) * 0.5f - 2.0f;
    std::vector<int> ids(vocab);
    for (int i = 0; i < vocab; ++i) ids[i] = i;
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return row[a] > row[b]; });
    const int n = static_cast<int>(rng() % 21);
    const SampledLogprobs lp = token_logprobs(row.data(), vocab, ids[0], n);
    ASSERT_EQ(static_cast<int>(lp.top.size()), std::min(n, vocab));
    for (size_t k = 0; k < lp.top.size(); ++k) EXPECT_EQ(lp.top[k].token, ids[k]) << k;
  }
}

}  // namespace
}  // namespace megaops
