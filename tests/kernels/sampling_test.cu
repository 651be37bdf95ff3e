// GPU sampler against ref::argmax / ref::sample with the same uniform numbers
// (ref::sampling_uniform(seed, row, step)); the packed greedy argmax (kernels/greedy_key.cuh)
// against ref::argmax on the CPU, and the sampler's reading of packs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/sampling.h"
#include "gpu_test_util.h"
#include "kernels/greedy_key.cuh"
#include "kernels/sampling.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

std::vector<float> random_logits(size_t n, float stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Runs the sampler on [b, vocab] logits stored with row stride ld; returns the tokens.
std::vector<int32_t> run_sampler(const std::vector<float>& logits, int b, int vocab, int64_t ld,
                                 float temperature, int top_k, float top_p, uint64_t seed,
                                 uint32_t step, bool pdl,
                                 const std::vector<int32_t>* rng_rows = nullptr) {
  DeviceBuffer<float> d_logits(logits.size());
  DeviceBuffer<int32_t> d_rng_rows(rng_rows ? rng_rows->size() : 1);
  if (rng_rows) d_rng_rows.upload(*rng_rows);
  DeviceBuffer<uint32_t> d_step(1);
  DeviceBuffer<int32_t> d_tokens(b);
  d_logits.upload(logits);
  d_step.upload({step});
  d_tokens.poison();
  SampleParams p;
  p.logits = d_logits.ptr;
  p.ld = ld;
  p.b = b;
  p.vocab = vocab;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  p.step = d_step.ptr;
  p.tokens = d_tokens.ptr;
  if (rng_rows) p.rng_rows = d_rng_rows.ptr;
  p.launch.pdl = pdl;
  EXPECT_EQ(launch_sample(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_tokens.download();
}

TEST(Sample, GreedyIsArgmax) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int vocab : {1, 7, 1000, 32000, 151936})
    for (bool pdl : {false, true}) {
      SCOPED_TRACE("vocab=" + std::to_string(vocab));
      const int b = 9;
      const int64_t ld = vocab + 5;  // a row stride larger than the row
      auto logits = random_logits(b * ld, 3.0f, rng);
      // Planted ties: row 1 has its maximum twice, row 2 everywhere (lowest index must win).
      if (vocab > 1) {
        float* r1 = logits.data() + ld;
        const int at = static_cast<int>(std::max_element(r1, r1 + vocab) - r1);
        r1[vocab - 1] = r1[at];
        r1[0] = r1[at];
        std::fill(logits.data() + 2 * ld, logits.data() + 2 * ld + vocab, 0.5f);
      }
      const auto tokens = run_sampler(logits, b, vocab, ld, 0.0f, 0, 1.0f, 1, 0, pdl);
      for (int r = 0; r < b; ++r)
        EXPECT_EQ(tokens[r], ref::argmax(logits.data() + r * ld, vocab)) << "row " << r;
    }
}

struct SampledConfig {
  float temperature;
  int top_k;
  float top_p;
};

TEST(Sample, SampledMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  const SampledConfig configs[] = {{1.0f, 0, 1.0f},  {0.7f, 50, 1.0f},   {1.0f, 0, 0.9f},
                                   {1.3f, 40, 0.8f}, {0.6f, 1000, 0.5f}, {2.0f, 5, 0.95f},
                                   {1.0f, 1, 1.0f},  {0.8f, 1, 0.3f}};
  const int b = 64, vocab = 32000;
  int rows = 0, matches = 0;
  for (const auto& c : configs)
    for (uint32_t step : {0u, 1u, 77u}) {
      SCOPED_TRACE("T=" + std::to_string(c.temperature) + " k=" + std::to_string(c.top_k) +
                   " p=" + std::to_string(c.top_p) + " step=" + std::to_string(step));
      const uint64_t seed = rng();
      const auto logits = random_logits(static_cast<size_t>(b) * vocab, 2.5f, rng);
      const auto tokens = run_sampler(logits, b, vocab, vocab, c.temperature, c.top_k, c.top_p,
                                      seed, step, step % 2 == 1);
      for (int r = 0; r < b; ++r) {
        const float* row = logits.data() + static_cast<size_t>(r) * vocab;
        ASSERT_GE(tokens[r], 0);
        ASSERT_LT(tokens[r], vocab);
        // Hard guarantees, whatever the rounding: top-k membership, and top_k = 1 is greedy.
        if (c.top_k == 1) ASSERT_EQ(tokens[r], ref::argmax(row, vocab));
        if (c.top_k > 0) {
          std::vector<float> sorted(row, row + vocab);
          std::nth_element(sorted.begin(), sorted.begin() + (c.top_k - 1), sorted.end(),
                           std::greater<float>());
          ASSERT_GE(row[tokens[r]], sorted[c.top_k - 1]);
        }
        SamplingParams params;
        params.temperature = c.temperature;
        params.top_k = c.top_k;
        params.top_p = c.top_p;
        params.seed = seed;
        const float u = ref::sampling_uniform(seed, static_cast<uint32_t>(r), step);
        ++rows;
        matches += tokens[r] == ref::sample(row, vocab, params, u);
      }
    }
  // Not 100%: the kernel sums p in fp32 in a block-wide order, the reference in double in index
  // order. When u * sum lands within rounding of a running-sum boundary (or top_p * mass of a
  // tie-group boundary), the two can pick neighbouring tokens. That needs a coincidence of order
  // 1e-6 per row, so 99% leaves a wide margin while still catching any systematic error.
  EXPECT_GE(matches, rows * 99 / 100) << matches << " of " << rows;
}

TEST(Sample, FullVocabTopP) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 2);
  const int b = 8, vocab = 151936;
  int rows = 0, matches = 0;
  for (float top_p : {0.9f, 1.0f}) {
    const uint64_t seed = rng();
    const auto logits = random_logits(static_cast<size_t>(b) * vocab, 4.0f, rng);
    const auto tokens = run_sampler(logits, b, vocab, vocab, 0.9f, 0, top_p, seed, 3, true);
    SamplingParams params;
    params.temperature = 0.9f;
    params.top_p = top_p;
    params.seed = seed;
    for (int r = 0; r < b; ++r) {
      ++rows;
      matches += tokens[r] == ref::sample(logits.data() + static_cast<size_t>(r) * vocab, vocab,
                                          params, ref::sampling_uniform(seed, r, 3));
    }
  }
  // Same boundary argument as above; with 16 rows, one mismatch at most.
  EXPECT_GE(matches, rows - 1) << matches << " of " << rows;
}

TEST(Sample, StepChangesTheDraw) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 3);
  // Flat logits: every step's draw is a near-uniform pick over 1000 tokens, so 8 steps giving the
  // same token for all 4 rows would mean the step is ignored.
  const int b = 4, vocab = 1000;
  const auto logits = random_logits(static_cast<size_t>(b) * vocab, 0.01f, rng);
  std::vector<std::vector<int32_t>> draws;
  for (uint32_t step = 0; step < 8; ++step)
    draws.push_back(run_sampler(logits, b, vocab, vocab, 1.0f, 0, 1.0f, 42, step, false));
  EXPECT_FALSE(
      std::all_of(draws.begin(), draws.end(), [&](const auto& d) { return d == draws[0]; }));
}

TEST(Sample, RejectsBadParams) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<float> logits(16);
  DeviceBuffer<int32_t> tokens(1);
  SampleParams p;
  p.logits = logits.ptr;
  p.ld = 16;
  p.b = 1;
  p.vocab = 16;
  p.tokens = tokens.ptr;
  p.temperature = 1.0f;  // sampled, but no step counter
  EXPECT_EQ(launch_sample(p), cudaErrorInvalidValue);
  p.temperature = 0.0f;
  p.ld = 8;  // row stride shorter than the row
  EXPECT_EQ(launch_sample(p), cudaErrorInvalidValue);
}

// The maximum of greedy_pack over a row is ref::sample's greedy pick, on rows built to break it:
// ties (the lowest index wins), -0 against +0 (a tie), and rows with NaN or +-Inf anywhere, which
// must pack to GREEDY_PACK_NONFINITE and read as NONFINITE_LOGITS_TOKEN, never as a token. Host
// code: runs without a GPU.
TEST(Sample, GreedyPackMaximumIsArgmax) {
  std::mt19937_64 rng(testing::test_seed() + 9);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<std::vector<float>> rows = {
      {1.0f, 3.0f, 3.0f, 2.0f}, {-0.0f, 0.0f, -1.0f}, {0.0f, -0.0f},     {-inf, -inf},
      {nan, -5.0f, nan},        {nan, nan},           {inf, 1e30f, inf}, {-3.0f, -2.0f, -2.0f},
      {nan, inf, -inf, inf},    {-3e38f, -3.4e38f},   {2.0f, -inf},      {3e38f, 1.0f, 3e38f}};
  std::uniform_int_distribution<int> pick(0, 4);
  const float values[] = {-1.5f, -0.0f, 0.0f, 2.25f, 2.25f};
  for (int r = 0; r < 200; ++r) {  // random rows over a few values: many ties
    std::vector<float> row(1 + r % 37);
    for (float& v : row) v = values[pick(rng)];
    if (r % 3 == 0)  // a third of them with one NaN or -Inf somewhere
      row[std::uniform_int_distribution<size_t>(0, row.size() - 1)(rng)] = r % 2 ? nan : -inf;
    rows.push_back(row);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int broken_rows = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    unsigned long long best = 0;
    for (size_t i = 0; i < rows[r].size(); ++i)
      best = std::max(best, greedy_pack(rows[r][i], static_cast<int>(i)));
    const int want = ref::sample(rows[r].data(), static_cast<int>(rows[r].size()), greedy, 0.5f);
    EXPECT_EQ(greedy_unpack_token(best), want) << "row " << r;
    const bool broken =
        std::any_of(rows[r].begin(), rows[r].end(), [](float v) { return !std::isfinite(v); });
    broken_rows += broken;
    EXPECT_EQ(best == GREEDY_PACK_NONFINITE, broken) << "row " << r;
    EXPECT_EQ(want == NONFINITE_LOGITS_TOKEN, broken) << "row " << r;
    EXPECT_NE(best, 0ull) << "row " << r;
  }
  EXPECT_EQ(broken_rows, 67 + 6);  // the random rows' third, and six of the planted ones
}

// A row holding one NaN, +Inf or -Inf anywhere gets NONFINITE_LOGITS_TOKEN from the sampler, greedy
// and sampled, while the finite rows around it get ref::sample's token; the tokens start poisoned.
TEST(Sample, NonFiniteRowGetsNoToken) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 11);
  const float bad_values[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  const int b = 12;
  for (int vocab : {1, 777, 32000, 128256})
    for (float temperature : {0.0f, 0.8f}) {
      SCOPED_TRACE("vocab=" + std::to_string(vocab) + " T=" + std::to_string(temperature));
      auto logits = random_logits(static_cast<size_t>(b) * vocab, 2.0f, rng);
      std::vector<bool> broken(b, false);
      for (int r = 0; r < b; r += 2) {  // every other row: one bad value at a random index
        const int at = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
        logits[static_cast<size_t>(r) * vocab + at] = bad_values[(r / 2) % 3];
        broken[r] = true;
      }
      const uint64_t seed = rng();
      const auto tokens =
          run_sampler(logits, b, vocab, vocab, temperature, 0, 1.0f, seed, 2, temperature > 0);
      SamplingParams params;
      params.temperature = temperature;
      params.seed = seed;
      for (int r = 0; r < b; ++r) {
        const float* row = logits.data() + static_cast<size_t>(r) * vocab;
        if (broken[r]) {
          EXPECT_EQ(tokens[r], NONFINITE_LOGITS_TOKEN) << "row " << r;
        } else {
          EXPECT_GE(tokens[r], 0) << "row " << r;
          if (temperature == 0.0f || vocab == 1)
            EXPECT_EQ(tokens[r], ref::sample(row, vocab, params, 0.5f)) << "row " << r;
        }
      }
    }
}

// SampleParams::argmax: one warp turns each row's pack into its token and zeroes the pack; a
// sampled (temperature > 0) launch with packs is rejected; the footprint is one CTA.
TEST(Sample, GreedyFromArgmaxPacks) {
  MEGAOPS_REQUIRE_GPU();
  const int b = 37;  // more rows than the warp's lanes
  std::vector<unsigned long long> packs(b);
  std::vector<int32_t> want(b);
  for (int r = 0; r < b; ++r) {
    want[r] = r % 5 == 0 ? 0 : 1000 * r + 3;
    packs[r] = r % 5 == 0 ? 0ull : greedy_pack(0.5f * static_cast<float>(r) - 4.0f, want[r]);
  }
  for (bool pdl : {false, true}) {
    DeviceBuffer<float> logits(16);  // not read
    DeviceBuffer<unsigned long long> d_packs(b);
    DeviceBuffer<int32_t> tokens(b);
    d_packs.upload(packs);
    tokens.poison();
    SampleParams p;
    p.logits = logits.ptr;
    p.ld = 16;
    p.b = b;
    p.vocab = 16;
    p.tokens = tokens.ptr;
    p.argmax = d_packs.ptr;
    p.launch.pdl = pdl;
    KernelFootprint f;
    ASSERT_EQ(sample_footprint(p, &f), cudaSuccess);
    EXPECT_EQ(f.ctas, 1);
    ASSERT_EQ(launch_sample(p), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(tokens.download(), want);
    EXPECT_EQ(d_packs.download(), std::vector<unsigned long long>(b, 0ull)) << "packs not zeroed";
    DeviceBuffer<uint32_t> step(1);
    p.temperature = 1.0f;
    p.step = step.ptr;
    EXPECT_EQ(launch_sample(p), cudaErrorInvalidValue);
  }
}

// rng_rows: a row draws the numbers of the row it names (the decode-graph prefill samples a
// sequence's last prompt row as that sequence). Rows 4..7 repeat the logits of rows 0..3 in
// another order and name their originals: each must pick what its original picks, and without
// rng_rows the copies draw their own numbers, which on near-flat logits must differ somewhere.
TEST(Sample, RngRowsDrawAsTheNamedRow) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 4);
  const int vocab = 1000, half = 4;
  const auto base = random_logits(static_cast<size_t>(half) * vocab, 0.01f, rng);
  const int order[half] = {2, 0, 3, 1};
  std::vector<float> logits(base);
  for (int r = 0; r < half; ++r)
    logits.insert(logits.end(), base.begin() + order[r] * vocab,
                  base.begin() + (order[r] + 1) * vocab);
  std::vector<int32_t> rows = {0, 1, 2, 3, order[0], order[1], order[2], order[3]};
  for (uint32_t step : {0u, 5u}) {
    const auto named =
        run_sampler(logits, 2 * half, vocab, vocab, 1.0f, 0, 1.0f, 9, step, step == 5, &rows);
    const auto own = run_sampler(logits, 2 * half, vocab, vocab, 1.0f, 0, 1.0f, 9, step, false);
    for (int r = 0; r < half; ++r) {
      EXPECT_EQ(named[r], own[r]) << "row " << r << " names itself";
      EXPECT_EQ(named[half + r], own[order[r]]) << "row " << half + r << " step " << step;
    }
    bool differs = false;
    for (int r = 0; r < half; ++r) differs |= own[half + r] != own[order[r]];
    EXPECT_TRUE(differs) << "the copies drew the same numbers without rng_rows";
  }
}

// SampleParams::rows: each row's own parameters and stream.
std::vector<int32_t> run_rows(const std::vector<float>& logits, int vocab,
                              const std::vector<SampleRow>& rows,
                              const std::vector<unsigned long long>* packs = nullptr,
                              std::vector<unsigned long long>* packs_after = nullptr) {
  const int b = static_cast<int>(rows.size());
  DeviceBuffer<float> d_logits(logits.size());
  DeviceBuffer<SampleRow> d_rows(rows.size());
  DeviceBuffer<int32_t> d_tokens(b);
  DeviceBuffer<unsigned long long> d_packs(b);
  d_logits.upload(logits);
  d_rows.upload(rows);
  d_tokens.poison();
  if (packs) d_packs.upload(*packs);
  SampleParams p;
  p.logits = d_logits.ptr;
  p.ld = vocab;
  p.b = b;
  p.vocab = vocab;
  p.temperature = 5.0f;  // never read with rows: a row's own parameters apply
  p.top_k = 1;
  p.tokens = d_tokens.ptr;
  p.rows = d_rows.ptr;
  if (packs) p.argmax = d_packs.ptr;
  EXPECT_EQ(launch_sample(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (packs_after) *packs_after = d_packs.download();
  return d_tokens.download();
}

// Every row with the same parameters, each row's stream its index: the launch's parameters'
// tokens (the behaviour before rows is the all-rows-equal case).
TEST(Sample, EqualPerRowParamsMatchTheLaunchParams) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 5);
  const int b = 24, vocab = 5000;
  for (const SampledConfig& c : {SampledConfig{0.0f, 0, 1.0f}, SampledConfig{0.8f, 40, 0.9f},
                                 SampledConfig{1.0f, 0, 1.0f}}) {
    const uint64_t seed = rng();
    const uint32_t step = 7;
    const auto logits = random_logits(static_cast<size_t>(b) * vocab, 2.0f, rng);
    std::vector<SampleRow> rows(b);
    for (int r = 0; r < b; ++r) {
      rows[r].seed = seed;
      rows[r].temperature = c.temperature;
      rows[r].top_k = c.top_k;
      rows[r].top_p = c.top_p;
      rows[r].step = step;
      rows[r].rng_row = static_cast<uint32_t>(r);
    }
    const auto launch =
        run_sampler(logits, b, vocab, vocab, c.temperature, c.top_k, c.top_p, seed, step, false);
    EXPECT_EQ(run_rows(logits, vocab, rows), launch) << "T=" << c.temperature;
  }
}

// Rows with different parameters, seeds and steps in one launch, against ref::sample with each
// row's own uniform (ref::sampling_uniform(seed, rng_row, step)); greedy rows are exact, sampled
// ones may flip at a rounding boundary (SampledMatchesReference), so 99% of them must match.
TEST(Sample, PerRowParamsMatchReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 6);
  const SampledConfig configs[] = {{0.0f, 0, 1.0f},  {1.0f, 0, 1.0f},    {0.7f, 50, 1.0f},
                                   {1.3f, 40, 0.8f}, {0.6f, 1000, 0.5f}, {1.0f, 1, 1.0f}};
  const int b = 60, vocab = 32000;
  int sampled = 0, matches = 0;
  for (int round = 0; round < 4; ++round) {
    const auto logits = random_logits(static_cast<size_t>(b) * vocab, 2.5f, rng);
    std::vector<SampleRow> rows(b);
    for (int r = 0; r < b; ++r) {
      const SampledConfig& c = configs[(r + round) % 6];
      rows[r].seed = rng();
      rows[r].temperature = c.temperature;
      rows[r].top_k = c.top_k;
      rows[r].top_p = c.top_p;
      rows[r].step = static_cast<uint32_t>(rng() % 1000);
      rows[r].rng_row = 0;
    }
    const auto tokens = run_rows(logits, vocab, rows);
    for (int r = 0; r < b; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      SamplingParams sp;
      sp.temperature = rows[r].temperature;
      sp.top_k = rows[r].top_k;
      sp.top_p = rows[r].top_p;
      sp.seed = rows[r].seed;
      const int want =
          ref::sample(row, vocab, sp, ref::sampling_uniform(rows[r].seed, 0, rows[r].step));
      if (rows[r].temperature <= 0.0f || rows[r].top_k == 1) {
        EXPECT_EQ(tokens[r], want) << "greedy row " << r;
      } else {
        ++sampled;
        matches += tokens[r] == want;
      }
    }
  }
  EXPECT_GE(matches, sampled * 99 / 100) << matches << " of " << sampled;
}

// Per-row parameters with the LM head's argmax packs: greedy rows take their pack's token, the
// others sample the logits, and every row's pack is zeroed.
TEST(Sample, PerRowParamsWithArgmaxPacks) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 7);
  const int b = 6, vocab = 3000;
  const auto logits = random_logits(static_cast<size_t>(b) * vocab, 2.0f, rng);
  std::vector<SampleRow> rows(b);
  std::vector<unsigned long long> packs(b);
  for (int r = 0; r < b; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const int best = ref::argmax(row, vocab);
    packs[r] = greedy_pack(row[best], best);
    rows[r].seed = 100 + r;
    rows[r].temperature = r % 2 == 0 ? 0.0f : 1.0f;
    rows[r].step = 3;
  }
  std::vector<unsigned long long> after;
  const auto tokens = run_rows(logits, vocab, rows, &packs, &after);
  const auto without = run_rows(logits, vocab, rows);
  for (int r = 0; r < b; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    if (r % 2 == 0) EXPECT_EQ(tokens[r], ref::argmax(row, vocab)) << "greedy row " << r;
    EXPECT_EQ(tokens[r], without[r]) << "row " << r << ": the packs changed a token";
  }
  EXPECT_EQ(after, std::vector<unsigned long long>(b, 0ull)) << "packs not zeroed";
}

}  // namespace
}  // namespace megaops
