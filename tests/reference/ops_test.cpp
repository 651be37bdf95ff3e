// Tests of the fp32 CPU oracle's ops against expectations derived independently of the code under
// test: closed forms (a constant row normalises to the weight, a single key returns its value),
// invariants (RoPE is a rotation that composes over positions) and distributions (the sampler's
// frequencies follow the softmax). The oracle is what every GPU kernel is judged by, so it has to
// be right on its own terms first.
#include "reference/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/counter_rng.h"

namespace megaops::ref {
namespace {

// Fresh inputs every run unless MEGAOPS_TEST_SEED is set; the seed is part of every failure
// message.
uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("MEGAOPS_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 10) : static_cast<uint64_t>(std::random_device{}());
  }();
  return seed;
}

class OpsTest : public ::testing::Test {
 protected:
  OpsTest() : rng_(test_seed()), trace_(__FILE__, __LINE__, "MEGAOPS_TEST_SEED=" + seed_text()) {}

  static std::string seed_text() { return std::to_string(test_seed()); }

  std::vector<float> random(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(n);
    for (float& v : out) v = dist(rng_);
    return out;
  }

  std::mt19937_64 rng_;
  ::testing::ScopedTrace trace_;
};

double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

TEST_F(OpsTest, EmbeddingCopiesTheRequestedRows) {
  const int vocab = 7, hidden = 5;
  std::vector<float> table = random(vocab * hidden);
  std::vector<int32_t> ids = {3, 0, 6, 3};
  std::vector<float> out(ids.size() * hidden, NAN);
  embedding(table.data(), ids.data(), out.data(), static_cast<int>(ids.size()), hidden);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int i = 0; i < hidden; ++i) EXPECT_EQ(out[r * hidden + i], table[ids[r] * hidden + i]);
  }
}

TEST_F(OpsTest, RmsnormOfAConstantRowIsTheWeight) {
  // x = c everywhere: mean(x^2) = c^2, so out = c / |c| * w = sign(c) * w (eps negligible).
  const int n = 37;
  std::vector<float> w = random(n);
  for (float c : {0.5f, 3.0f, -2.0f}) {
    std::vector<float> x(n, c), out(n, NAN);
    rmsnorm(x.data(), w.data(), out.data(), 1, n, 1e-12f);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], (c > 0 ? 1.0f : -1.0f) * w[i], 1e-6f);
  }
}

TEST_F(OpsTest, RmsnormGivesUnitRmsIsScaleInvariantAndMayWorkInPlace) {
  const int rows = 3, n = 111;
  std::vector<float> x = random(rows * n), ones(n, 1.0f), out(rows * n, NAN);
  rmsnorm(x.data(), ones.data(), out.data(), rows, n, 0.0f);
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0.0;
    for (int i = 0; i < n; ++i) sum_sq += out[r * n + i] * out[r * n + i];
    EXPECT_NEAR(sum_sq / n, 1.0, 1e-5);
  }
  std::vector<float> scaled(x);
  for (float& v : scaled) v *= 40.0f;
  rmsnorm(scaled.data(), ones.data(), scaled.data(), rows, n, 0.0f);
  EXPECT_LT(rel_error(scaled, out), 1e-6);
}

TEST_F(OpsTest, RmsnormEpsDampsSmallRows) {
  // A row of zeros except one entry a: out = a / sqrt(a^2 / n + eps).
  const int n = 4;
  const float a = 0.01f, eps = 1e-3f;
  std::vector<float> x = {a, 0, 0, 0}, w(n, 1.0f), out(n, NAN);
  rmsnorm(x.data(), w.data(), out.data(), 1, n, eps);
  EXPECT_NEAR(out[0], a / std::sqrt(a * a / n + eps), 1e-6);
  EXPECT_EQ(out[1], 0.0f);
}

TEST_F(OpsTest, MatmulPicksColumnsAndMatchesAHandExample) {
  // x = unit vector e_c: y[j] = w[j, c].
  const int k = 13, n_out = 9;
  std::vector<float> w = random(n_out * k);
  for (int c : {0, 5, k - 1}) {
    std::vector<float> x(k, 0.0f), y(n_out, NAN);
    x[c] = 1.0f;
    matmul(x.data(), w.data(), y.data(), 1, k, n_out);
    for (int j = 0; j < n_out; ++j) EXPECT_EQ(y[j], w[j * k + c]);
  }
  // [[1, 2], [3, 4]] times w = [[1, 0], [1, 1], [2, -1]] (rows are outputs).
  std::vector<float> x = {1, 2, 3, 4}, w2 = {1, 0, 1, 1, 2, -1}, y(6, NAN);
  matmul(x.data(), w2.data(), y.data(), 2, 2, 3);
  std::vector<float> expected = {1, 3, 0, 3, 7, 2};
  EXPECT_EQ(y, expected);
}

TEST_F(OpsTest, RopeAtPositionZeroIsIdentity) {
  const int heads = 3, head_dim = 8;
  std::vector<float> x = random(heads * head_dim), inv_freq = random(head_dim / 2, 0.01f, 1.0f);
  std::vector<float> y(x);
  rope(y.data(), heads, head_dim, 0, inv_freq.data());
  EXPECT_EQ(y, x);
}

TEST_F(OpsTest, RopeRotatesHalfPairsByPositionTimesFrequency) {
  // head_dim 4: pairs (x0, x2) and (x1, x3). A quarter turn maps (a, b) to (-b, a); a zero
  // frequency leaves the pair alone.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> inv_freq = {static_cast<float>(std::numbers::pi / 2.0), 0.0f};
  rope(x.data(), 1, 4, 1, inv_freq.data());
  EXPECT_NEAR(x[0], -3.0f, 1e-6f);
  EXPECT_NEAR(x[2], 1.0f, 1e-6f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[3], 4.0f);
}

TEST_F(OpsTest, RopePreservesPairNormsAndComposes) {
  const int heads = 2, head_dim = 16, half = head_dim / 2;
  std::vector<float> x = random(heads * head_dim), inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  for (auto [a, b] : {std::pair{3, 5}, std::pair{17, 100}, std::pair{1000, 2345}}) {
    std::vector<float> two_steps(x), one_step(x);
    rope(two_steps.data(), heads, head_dim, a, inv_freq.data());
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const float* p = x.data() + h * head_dim;
        const float* q = two_steps.data() + h * head_dim;
        EXPECT_NEAR(std::hypot(q[i], q[i + half]), std::hypot(p[i], p[i + half]), 1e-6f);
      }
    }
    rope(two_steps.data(), heads, head_dim, b, inv_freq.data());
    rope(one_step.data(), heads, head_dim, a + b, inv_freq.data());
    // Only float rounding of the rotated values separates the two (the angles themselves add up
    // exactly), hence a tight tolerance.
    EXPECT_LT(rel_error(two_steps, one_step), 1e-5) << "positions " << a << " + " << b;
  }
}

TEST_F(OpsTest, SiluMulMatchesItsClosedForm) {
  std::vector<float> gate = {0.0f, 1.0f, -1.0f, 30.0f, -30.0f}, up = {5.0f, 2.0f, 2.0f, 0.5f, 1.0f};
  std::vector<float> out(gate.size(), NAN);
  silu_mul(gate.data(), up.data(), out.data(), gate.size());
  const double s1 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 * s1, 1e-6);
  EXPECT_NEAR(out[2], -2.0 * (1.0 - s1), 1e-6);  // silu(-x) = -x * sigmoid(-x)
  EXPECT_NEAR(out[3], 15.0f, 1e-5f);             // sigmoid(30) = 1 - 9e-14
  EXPECT_NEAR(out[4], 0.0f, 1e-10f);
}

TEST_F(OpsTest, AddSumsAndMayWorkInPlace) {
  std::vector<float> a = random(33), b = random(33), out(33, NAN);
  add(a.data(), b.data(), out.data(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  add(a.data(), b.data(), a.data(), a.size());
  EXPECT_EQ(a, out);
}

// Cache layout [ctx, kv_heads, head_dim]; see ops.h.
struct Cache {
  int ctx, kv_heads, head_dim;
  std::vector<float> k, v;
  float* k_at(int t, int h) { return k.data() + (t * kv_heads + h) * head_dim; }
  float* v_at(int t, int h) { return v.data() + (t * kv_heads + h) * head_dim; }
};

TEST_F(OpsTest, AttentionOverOneKeyReturnsItsValueWithGqaMapping) {
  // 6 query heads over 2 kv heads: heads 0-2 read kv head 0, heads 3-5 kv head 1. With one key the
  // softmax is 1 whatever the score, so the output is exactly that kv head's value.
  const int heads = 6, kv_heads = 2, head_dim = 5;
  Cache c{1, kv_heads, head_dim, random(kv_heads * head_dim), random(kv_heads * head_dim)};
  std::vector<float> q = random(heads * head_dim, -5.0f, 5.0f), out(heads * head_dim, NAN);
  attention_decode(q.data(), c.k.data(), c.v.data(), 1, heads, kv_heads, head_dim, 0.7f,
                   out.data());
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < head_dim; ++d) {
      EXPECT_NEAR(out[h * head_dim + d], c.v_at(0, h / 3)[d], 1e-6f) << "head " << h;
    }
  }
}

TEST_F(OpsTest, AttentionWithEqualScoresAveragesValues) {
  // q = 0 makes every score 0: the output is the plain mean of the values of its kv head.
  const int ctx = 7, heads = 4, kv_heads = 2, head_dim = 3;
  Cache c{ctx, kv_heads, head_dim, random(ctx * kv_heads * head_dim),
          random(ctx * kv_heads * head_dim)};
  std::vector<float> q(heads * head_dim, 0.0f), out(heads * head_dim, NAN);
  attention_decode(q.data(), c.k.data(), c.v.data(), ctx, heads, kv_heads, head_dim, 1.0f,
                   out.data());
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < head_dim; ++d) {
      double mean = 0.0;
      for (int t = 0; t < ctx; ++t) mean += c.v_at(t, h / 2)[d];
      EXPECT_NEAR(out[h * head_dim + d], mean / ctx, 1e-6);
    }
  }
}

TEST_F(OpsTest, AttentionMatchesTwoKeySoftmaxClosedForm) {
  // Two keys with scores s0, s1: weight of key 1 is sigmoid(s1 - s0). Scores are chosen far apart
  // and large to check the max-subtraction keeps the softmax finite.
  const int head_dim = 2;
  std::vector<float> q = {10.0f, 0.0f};
  Cache c{2, 1, head_dim, {50.0f, 1.0f, 49.0f, 2.0f}, {1.0f, -1.0f, 3.0f, 5.0f}};
  std::vector<float> out(head_dim, NAN);
  const float scale = 2.0f;
  attention_decode(q.data(), c.k.data(), c.v.data(), 2, 1, 1, head_dim, scale, out.data());
  const double s0 = 500.0 * scale, s1 = 490.0 * scale;
  const double w1 = 1.0 / (1.0 + std::exp(s0 - s1));
  EXPECT_NEAR(out[0], (1.0 - w1) * 1.0 + w1 * 3.0, 1e-6);
  EXPECT_NEAR(out[1], (1.0 - w1) * -1.0 + w1 * 5.0, 1e-6);
}

TEST_F(OpsTest, PrefillAttentionEqualsDecodeAttentionPerToken) {
  // Causality: the token at position p sees exactly the prefix [0, p], as in a decode step.
  const int pos0 = 5, n_q = 6, ctx = pos0 + n_q, heads = 4, kv_heads = 1, head_dim = 8;
  Cache c{ctx, kv_heads, head_dim, random(ctx * kv_heads * head_dim),
          random(ctx * kv_heads * head_dim)};
  const size_t stride = heads * head_dim;
  std::vector<float> q = random(n_q * stride, -2.0f, 2.0f), out(n_q * stride, NAN);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  attention_prefill(q.data(), c.k.data(), c.v.data(), n_q, pos0, heads, kv_heads, head_dim, scale,
                    out.data());
  for (int t = 0; t < n_q; ++t) {
    std::vector<float> one(stride, NAN);
    attention_decode(q.data() + t * stride, c.k.data(), c.v.data(), pos0 + t + 1, heads, kv_heads,
                     head_dim, scale, one.data());
    for (size_t i = 0; i < stride; ++i) EXPECT_EQ(out[t * stride + i], one[i]) << "token " << t;
  }
  // And the future really is masked: changing the last key and value leaves earlier tokens alone.
  std::vector<float> before(out);
  for (int d = 0; d < head_dim; ++d) c.k_at(ctx - 1, 0)[d] += 1.0f;
  for (int d = 0; d < head_dim; ++d) c.v_at(ctx - 1, 0)[d] += 1.0f;
  attention_prefill(q.data(), c.k.data(), c.v.data(), n_q, pos0, heads, kv_heads, head_dim, scale,
                    out.data());
  for (size_t i = 0; i < (n_q - 1) * stride; ++i) EXPECT_EQ(out[i], before[i]);
  EXPECT_NE(out.back(), before.back());
}

TEST_F(OpsTest, GatherPagedFollowsTheBlockTable) {
  // Blocks of 2 positions of 3 values; the sequence's blocks in the cache order 3, 0, 2. Every
  // cache value encodes its own (block, row, value) so the gathered order is read off directly.
  const int block_size = 2, len = 5;
  const size_t row = 3;
  std::vector<float> cache(4 * block_size * row);
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<float>(i);
  const std::vector<int32_t> table = {3, 0, 2};
  std::vector<float> out(len * row, NAN);
  gather_paged(cache.data(), table.data(), block_size, len, row, out.data());
  const int expect_rows[len] = {6, 7, 0, 1, 4};  // block * block_size + position % block_size
  for (int p = 0; p < len; ++p)
    for (size_t j = 0; j < row; ++j)
      EXPECT_EQ(out[p * row + j], static_cast<float>(expect_rows[p] * row + j)) << "position " << p;
}

TEST_F(OpsTest, PagedAttentionEqualsContiguousAttentionOverTheGatheredCache) {
  // A shuffled block table over a larger cache of random blocks: the paged oracle attends to
  // exactly the positions the table names, so it equals the contiguous oracle over a cache
  // built position by position from those blocks; the unused blocks hold NaN, which any read of
  // them would carry into the output.
  const int heads = 4, kv_heads = 2, head_dim = 8, block_size = 4, n_blocks = 9;
  const int ctx = 13;  // 4 blocks, the last one partly used
  const size_t row = kv_heads * head_dim;
  std::vector<float> k(n_blocks * block_size * row, NAN), v(k.size(), NAN);
  const std::vector<int32_t> table = {7, 2, 5, 0};
  for (int32_t blk : table)
    for (size_t i = 0; i < block_size * row; ++i) {
      k[blk * block_size * row + i] = random(1)[0];
      v[blk * block_size * row + i] = random(1)[0];
    }
  std::vector<float> kc(ctx * row), vc(ctx * row);
  for (int p = 0; p < ctx; ++p)
    for (size_t j = 0; j < row; ++j) {
      const size_t at = (table[p / block_size] * block_size + p % block_size) * row + j;
      kc[p * row + j] = k[at];
      vc[p * row + j] = v[at];
    }
  const float scale = 0.4f;
  const std::vector<float> q = random(heads * head_dim, -2.0f, 2.0f);
  std::vector<float> paged(heads * head_dim, NAN), flat(heads * head_dim, NAN);
  attention_decode_paged(q.data(), k.data(), v.data(), table.data(), block_size, ctx, heads,
                         kv_heads, head_dim, scale, paged.data());
  attention_decode(q.data(), kc.data(), vc.data(), ctx, heads, kv_heads, head_dim, scale,
                   flat.data());
  EXPECT_EQ(paged, flat);

  const int pos0 = 6, n_q = ctx - pos0;
  const std::vector<float> qs = random(n_q * heads * head_dim, -2.0f, 2.0f);
  std::vector<float> paged_p(qs.size(), NAN), flat_p(qs.size(), NAN);
  attention_prefill_paged(qs.data(), k.data(), v.data(), table.data(), block_size, n_q, pos0, heads,
                          kv_heads, head_dim, scale, paged_p.data());
  attention_prefill(qs.data(), kc.data(), vc.data(), n_q, pos0, heads, kv_heads, head_dim, scale,
                    flat_p.data());
  EXPECT_EQ(paged_p, flat_p);
  for (float x : paged_p) EXPECT_TRUE(std::isfinite(x));
}

TEST_F(OpsTest, ArgmaxPicksTheLowestIndexOnTies) {
  std::vector<float> x = {0.0f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(x.data(), 5), 1);
  std::vector<float> y = {-INFINITY, -5.0f};
  EXPECT_EQ(argmax(y.data(), 2), 1);
}

// A NaN never wins, wherever it sits (the GPU sampler's rule; the first logit NaN used to make
// the oracle answer 0); -0 ties +0 at the lower index; only NaN logits give 0.
TEST_F(OpsTest, ArgmaxSkipsNaN) {
  std::vector<float> x = {NAN, 1.0f, NAN, 2.0f, 2.0f};
  EXPECT_EQ(argmax(x.data(), 5), 3);
  std::vector<float> z = {NAN, -0.0f, 0.0f};
  EXPECT_EQ(argmax(z.data(), 3), 1);
  std::vector<float> n = {NAN, NAN};
  EXPECT_EQ(argmax(n.data(), 2), 0);
}

TEST_F(OpsTest, SamplingUniformIsTheCounterRngAndInRange) {
  for (uint32_t step = 0; step < 1000; ++step) {
    const float u = sampling_uniform(42, 3, step);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    EXPECT_EQ(u, counter_uniform(42, 3, step));
  }
  EXPECT_NE(sampling_uniform(42, 3, 0), sampling_uniform(42, 4, 0));
  EXPECT_NE(sampling_uniform(42, 3, 0), sampling_uniform(43, 3, 0));
}

std::vector<double> softmax(const std::vector<float>& x, double temperature) {
  double max = x[0];
  for (float v : x) max = std::max<double>(max, v);
  std::vector<double> p(x.size());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += p[i] = std::exp((x[i] - max) / temperature);
  for (double& v : p) v /= sum;
  return p;
}

TEST_F(OpsTest, SampleIsGreedyWhenTemperatureTopKOrTopPSaySo) {
  const int n = 50;
  std::vector<float> x = random(n, -3.0f, 3.0f);
  x[17] = 5.0f;  // a unique maximum
  for (float u : {0.0f, 0.3f, 0.999999f}) {
    EXPECT_EQ(sample(x.data(), n, {0.0f, 0, 1.0f, 0}, u), 17);
    EXPECT_EQ(sample(x.data(), n, {-1.0f, 5, 0.5f, 0}, u), 17);
    EXPECT_EQ(sample(x.data(), n, {1.0f, 1, 1.0f, 0}, u), 17);
    EXPECT_EQ(sample(x.data(), n, {2.0f, 0, 1e-6f, 0}, u), 17);
  }
}

TEST_F(OpsTest, SampleFollowsTheSoftmaxOnAUniformGrid) {
  // sample is the inverse CDF of the (tempered) softmax in index order, so u on a fine uniform grid
  // must land on index i a fraction p_i of the time, up to one grid step per boundary.
  const int n = 12, grid = 200000;
  std::vector<float> x = random(n, -2.0f, 2.0f);
  for (float temperature : {1.0f, 0.5f, 2.5f}) {
    std::vector<double> p = softmax(x, temperature);
    std::vector<int> counts(n, 0);
    for (int g = 0; g < grid; ++g) {
      const float u = (static_cast<float>(g) + 0.5f) / grid;
      ++counts[sample(x.data(), n, {temperature, 0, 1.0f, 0}, u)];
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(static_cast<double>(counts[i]) / grid, p[i], 2e-5) << "T " << temperature;
    }
  }
}

TEST_F(OpsTest, SampleWithCounterUniformsMatchesTheSoftmaxStatistically) {
  const int n = 8, draws = 100000;
  std::vector<float> x = random(n, -1.5f, 1.5f);
  std::vector<double> p = softmax(x, 0.8);
  std::vector<int> counts(n, 0);
  const uint64_t seed = test_seed();
  for (uint32_t s = 0; s < static_cast<uint32_t>(draws); ++s) {
    ++counts[sample(x.data(), n, {0.8f, 0, 1.0f, seed}, sampling_uniform(seed, 0, s))];
  }
  for (int i = 0; i < n; ++i) {
    // 5 binomial standard deviations: a false failure about once in 1e6 runs per index.
    const double sigma = std::sqrt(p[i] * (1.0 - p[i]) / draws);
    EXPECT_NEAR(static_cast<double>(counts[i]) / draws, p[i], 5.0 * sigma) << "index " << i;
  }
}

TEST_F(OpsTest, SampleTopKKeepsTiesAtTheThresholdAndNothingBelow) {
  // The 2nd largest logit is 3, shared by indices 1, 2 and 4: all three are kept, 0 and 3 never.
  std::vector<float> x = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  std::vector<int> counts(5, 0);
  const int grid = 3000;
  for (int g = 0; g < grid; ++g) {
    ++counts[sample(x.data(), 5, {1.0f, 2, 1.0f, 0}, (g + 0.5f) / grid)];
  }
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[3], 0);
  for (int i : {1, 2, 4}) EXPECT_NEAR(counts[i], grid / 3, 2) << "index " << i;
}

TEST_F(OpsTest, SampleTopKNeverLeavesTheTopK) {
  const int n = 100, k = 7;
  std::vector<float> x = random(n, -4.0f, 4.0f);
  std::vector<float> sorted(x);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (uint32_t s = 0; s < 5000; ++s) {
    const int i = sample(x.data(), n, {1.5f, k, 1.0f, 7}, sampling_uniform(7, 1, s));
    EXPECT_GE(x[i], sorted[k - 1]);
  }
}

TEST_F(OpsTest, SampleTopKRenormalisesTheSoftmaxOverTheTopK) {
  // Logits 0, 0.1, ..., 1.1 shuffled: the top 4 are 0.8 .. 1.1, and the 5th (0.7) carries enough
  // mass that keeping it by mistake would show; the kept ones follow their renormalised softmax.
  const int n = 12, k = 4, grid = 100000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.1f * ((i * 5) % n);
  double kept_sum = 0.0;
  for (float v : x) kept_sum += v >= 0.75f ? std::exp(v) : 0.0;
  std::vector<int> counts(n, 0);
  for (int g = 0; g < grid; ++g) {
    ++counts[sample(x.data(), n, {1.0f, k, 1.0f, 0}, (g + 0.5f) / grid)];
  }
  for (int i = 0; i < n; ++i) {
    const double expected = x[i] >= 0.75f ? std::exp(x[i]) / kept_sum : 0.0;
    EXPECT_NEAR(static_cast<double>(counts[i]) / grid, expected, 5e-5) << "index " << i;
  }
}

TEST_F(OpsTest, SampleTopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.2 (T = 1). top_p 0.45 keeps {0}; 0.55 keeps {0, 1} (0.8 >= 0.55),
  // renormalised to 5/8, 3/8; 0.85 keeps all three. Thresholds kept away from exact sums so float
  // rounding of the logs cannot flip them.
  std::vector<float> x = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const int grid = 8000;
  auto freq = [&](float top_p) {
    std::vector<double> f(3, 0.0);
    for (int g = 0; g < grid; ++g) f[sample(x.data(), 3, {1.0f, 0, top_p, 0}, (g + 0.5f) / grid)]++;
    for (double& v : f) v /= grid;
    return f;
  };
  std::vector<double> f = freq(0.45f);
  EXPECT_EQ(f[0], 1.0);
  f = freq(0.55f);
  EXPECT_NEAR(f[0], 5.0 / 8.0, 1e-3);
  EXPECT_NEAR(f[1], 3.0 / 8.0, 1e-3);
  EXPECT_EQ(f[2], 0.0);
  f = freq(0.85f);
  EXPECT_NEAR(f[0], 0.5, 1e-3);
  EXPECT_NEAR(f[1], 0.3, 1e-3);
  EXPECT_NEAR(f[2], 0.2, 1e-3);
}

TEST_F(OpsTest, SampleTopPAppliesAfterTopKOnTheKeptMass) {
  // top_k 2 keeps {0, 1} with mass 0.8. top_p 0.6 of the whole mass (0.6 > 0.5) would keep
  // {0, 1}, but of the kept mass it is 0.48 <= 0.5, so only {0} stays; top_p 0.7 of the kept mass
  // is 0.56 > 0.5, so both stay, and 2 (outside the top k) never comes back.
  std::vector<float> x = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  for (int g = 0; g < 1000; ++g) {
    const float u = (g + 0.5f) / 1000;
    EXPECT_EQ(sample(x.data(), 3, {1.0f, 2, 0.6f, 0}, u), 0);
    EXPECT_NE(sample(x.data(), 3, {1.0f, 2, 0.7f, 0}, u), 2);
  }
  EXPECT_EQ(sample(x.data(), 3, {1.0f, 2, 0.7f, 0}, 0.99f), 1);
}

}  // namespace
}  // namespace megaops::ref
