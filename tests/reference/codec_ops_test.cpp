// The pipeline's CPU oracles (reference/codec_ops.h) against independent formulations: the causal
// conv1d against a correlation over an explicitly zero-padded input, the transposed conv against
// scattering every input sample into a full-length output and trimming it, the activations at
// known points, the codebook ops against table rows and the plain matmul / argmax oracles. And
// causality: a window holding all inputs of its last samples reproduces them bit for bit.
#include "reference/codec_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference/ops.h"

namespace megaops {
namespace {

std::vector<float> rnd(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Correlation over [(kernel - 1) * dilation zeros | x].
std::vector<float> conv1d_padded(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, int cin, int cout, int t, int k,
                                 int d) {
  const int pad = (k - 1) * d;
  std::vector<float> y(static_cast<size_t>(cout) * t);
  for (int o = 0; o < cout; ++o)
    for (int n = 0; n < t; ++n) {
      double acc = b[o];
      for (int i = 0; i < cin; ++i) {
        std::vector<double> xp(pad + t, 0.0);
        for (int s = 0; s < t; ++s) xp[pad + s] = x[i * t + s];
        for (int j = 0; j < k; ++j) acc += w[(o * cin + i) * k + j] * xp[n + j * d];
      }
      y[o * t + n] = static_cast<float>(acc);
    }
  return y;
}

// Scatter every input sample into the (t - 1) * s + k long output, keep the first t * s.
std::vector<float> conv_transpose1d_scatter(const std::vector<float>& x,
                                            const std::vector<float>& w,
                                            const std::vector<float>& b, int cin, int cout, int t,
                                            int k, int s) {
  const int full = (t - 1) * s + k;
  std::vector<double> z(static_cast<size_t>(cout) * full, 0.0);
  for (int i = 0; i < cin; ++i)
    for (int j = 0; j < t; ++j)
      for (int o = 0; o < cout; ++o)
        for (int q = 0; q < k; ++q)
          z[o * full + j * s + q] += w[(i * cout + o) * k + q] * x[i * t + j];
  std::vector<float> y(static_cast<size_t>(cout) * t * s);
  for (int o = 0; o < cout; ++o)
    for (int n = 0; n < t * s; ++n) y[o * t * s + n] = static_cast<float>(z[o * full + n] + b[o]);
  return y;
}

TEST(CodecOps, Conv1dMatchesPaddedCorrelation) {
  std::mt19937 g(7);
  for (auto [cin, cout, t, k, d] :
       {std::tuple{3, 5, 17, 3, 1}, {4, 2, 9, 7, 2}, {1, 1, 5, 1, 1}, {6, 3, 11, 5, 3}}) {
    const auto x = rnd(size_t(cin) * t, g), w = rnd(size_t(cout) * cin * k, g), b = rnd(cout, g);
    std::vector<float> y(size_t(cout) * t, NAN);
    ref::conv1d(x.data(), w.data(), b.data(), y.data(), cin, cout, t, k, d);
    EXPECT_LT(max_abs_diff(y, conv1d_padded(x, w, b, cin, cout, t, k, d)), 1e-5)
        << cin << " " << cout << " " << t << " " << k << " " << d;
  }
}

TEST(CodecOps, ConvTranspose1dMatchesScatterAndTrim) {
  std::mt19937 g(8);
  for (auto [cin, cout, t, k, s] :
       {std::tuple{3, 5, 7, 4, 2}, {2, 3, 5, 16, 8}, {4, 1, 6, 6, 3}, {1, 2, 3, 5, 5}}) {
    const auto x = rnd(size_t(cin) * t, g), w = rnd(size_t(cin) * cout * k, g), b = rnd(cout, g);
    std::vector<float> y(size_t(cout) * t * s, NAN);
    ref::conv_transpose1d(x.data(), w.data(), b.data(), y.data(), cin, cout, t, k, s);
    EXPECT_LT(max_abs_diff(y, conv_transpose1d_scatter(x, w, b, cin, cout, t, k, s)), 1e-5)
        << cin << " " << cout << " " << t << " " << k << " " << s;
  }
}

// The last samples of a window that holds their inputs equal the whole signal's, bit for bit.
TEST(CodecOps, ConvolutionsAreCausalAndWindowExact) {
  std::mt19937 g(9);
  const int cin = 3, cout = 2, t = 20, k = 5, d = 2, win = 14;  // reach (k - 1) d = 8 < 14 - 4
  const auto x = rnd(size_t(cin) * t, g), w = rnd(size_t(cout) * cin * k, g), b = rnd(cout, g);
  std::vector<float> full(size_t(cout) * t), part(size_t(cout) * win);
  ref::conv1d(x.data(), w.data(), b.data(), full.data(), cin, cout, t, k, d);
  std::vector<float> xw(size_t(cin) * win);
  for (int i = 0; i < cin; ++i)
    for (int s = 0; s < win; ++s) xw[i * win + s] = x[i * t + (t - win) + s];
  ref::conv1d(xw.data(), w.data(), b.data(), part.data(), cin, cout, win, k, d);
  for (int o = 0; o < cout; ++o)
    for (int s = (k - 1) * d; s < win; ++s)
      EXPECT_EQ(part[o * win + s], full[o * t + (t - win) + s]) << o << " " << s;
  // Transposed: output sample n reads inputs (n - k + 1) / s .. n / s.
  const int ks = 6, st = 3;
  const auto wt = rnd(size_t(cin) * cout * ks, g);
  std::vector<float> tfull(size_t(cout) * t * st), tpart(size_t(cout) * win * st);
  ref::conv_transpose1d(x.data(), wt.data(), b.data(), tfull.data(), cin, cout, t, ks, st);
  ref::conv_transpose1d(xw.data(), wt.data(), b.data(), tpart.data(), cin, cout, win, ks, st);
  for (int o = 0; o < cout; ++o)
    for (int n = ks - 1; n < win * st; ++n)
      EXPECT_EQ(tpart[o * win * st + n], tfull[o * t * st + (t - win) * st + n]) << o << " " << n;
}

TEST(CodecOps, ActivationsAtKnownPoints) {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.75f, 3.0f, -1e-3f};
  std::vector<float> y(x.size(), NAN);
  ref::elu(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], x[i] > 0 ? x[i] : std::expm1(static_cast<double>(x[i])), 1e-7) << i;
  // Two channels of three samples: alpha 2, beta 0.5 and alpha 1, beta 4.
  const std::vector<float> alpha = {2.0f, 1.0f}, beta = {0.5f, 4.0f};
  std::vector<float> s(x.size(), NAN);
  ref::snake(x.data(), alpha.data(), beta.data(), s.data(), 2, 3);
  for (int c = 0; c < 2; ++c)
    for (int t = 0; t < 3; ++t) {
      const float v = x[c * 3 + t], sn = std::sin(alpha[c] * v);
      EXPECT_NEAR(s[c * 3 + t], v + sn * sn / beta[c], 1e-6) << c << " " << t;
    }
  EXPECT_EQ(s[2], 0.0f);  // snake(0) = 0
}

TEST(CodecOps, CodebookOpsReadTheirRows) {
  std::mt19937 g(10);
  const int q = 3, c = 5, dim = 4, t = 6, hidden = 7;
  const auto tables = rnd(size_t(q) * c * dim, g);
  std::vector<int32_t> codes(size_t(t) * q);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int32_t>((i * 7 + 3) % c);
  std::vector<float> out(size_t(dim) * t, NAN);
  ref::codebook_embed(codes.data(), tables.data(), out.data(), t, q, c, dim);
  for (int s = 0; s < t; ++s)
    for (int d = 0; d < dim; ++d) {
      double want = 0;
      for (int k = 0; k < q; ++k) want += tables[(k * c + codes[s * q + k]) * dim + d];
      EXPECT_NEAR(out[d * t + s], want, 1e-6);
    }
  // The local transformer's embedding and head of codebook 2 of a [q * c, hidden] table.
  const auto table = rnd(size_t(q) * c * hidden, g), h = rnd(hidden, g);
  const std::vector<int32_t> ids = {4, 0, 2};
  std::vector<float> e(ids.size() * hidden, NAN);
  ref::codebook_embedding(table.data(), 2, c, ids.data(), e.data(), 3, hidden);
  for (size_t r = 0; r < ids.size(); ++r)
    for (int k = 0; k < hidden; ++k)
      EXPECT_EQ(e[r * hidden + k], table[(2 * c + ids[r]) * hidden + k]);
  std::vector<float> logits(c, NAN), all(size_t(q) * c);
  ref::codebook_head(h.data(), table.data(), logits.data(), hidden, 2, c);
  ref::matmul(h.data(), table.data(), all.data(), 1, hidden, q * c);
  for (int j = 0; j < c; ++j) EXPECT_NEAR(logits[j], all[2 * c + j], 1e-6);
  EXPECT_EQ(ref::codebook_argmax(all.data(), 2, c), ref::argmax(all.data() + 2 * c, c));
  // The slice decides, not the whole row: a huge logit in another codebook's slice is ignored.
  all[0] = 1e9f;
  EXPECT_EQ(ref::codebook_argmax(all.data(), 2, c), ref::argmax(all.data() + 2 * c, c));
  std::vector<float> nan_slice(size_t(q) * c, NAN);
  EXPECT_EQ(ref::codebook_argmax(nan_slice.data(), 1, c), 0);
}

}  // namespace
}  // namespace megaops
