// fp32 CPU oracle for every op (see ops.h). Written for obviousness, not speed: plain loops, and
// every sum over a long axis (dot products, sums of squares, softmax denominators) accumulated in
// double so the oracle's own rounding stays far below the 1e-4 tolerance GPU kernels are held to.
#include "reference/ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/counter_rng.h"

namespace megaops::ref {

void embedding(const float* table, const int32_t* ids, float* out, int n_ids, int hidden) {
  for (int r = 0; r < n_ids; ++r) {
    const float* row = table + static_cast<size_t>(ids[r]) * hidden;
    std::copy(row, row + hidden, out + static_cast<size_t>(r) * hidden);
  }
}

void rmsnorm(const float* x, const float* w, float* out, int rows, int n, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * n;
    float* outr = out + static_cast<size_t>(r) * n;
    double sum_sq = 0.0;
    for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    // The scale is computed completely before any write, so out may alias x (Qwen3 normalises
    // q and k in place).
    const double scale = 1.0 / std::sqrt(sum_sq / n + static_cast<double>(eps));
    for (int i = 0; i < n; ++i) outr[i] = static_cast<float>(xr[i] * scale) * w[i];
  }
}

void matmul(const float* x, const float* w, float* y, int rows, int k, int n_out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * k;
    for (int j = 0; j < n_out; ++j) {
      const float* wj = w + static_cast<size_t>(j) * k;
      double acc = 0.0;
      for (int i = 0; i < k; ++i) acc += static_cast<double>(xr[i]) * wj[i];
      y[static_cast<size_t>(r) * n_out + j] = static_cast<float>(acc);
    }
  }
}

void rope(float* x, int num_heads, int head_dim, int pos, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // The angle in double: at long contexts pos * inv_freq reaches 1e5 rad, where a float angle
    // would already be off by ~1e-2.
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle);
    const double s = std::sin(angle);
    for (int h = 0; h < num_heads; ++h) {
      float* xh = x + static_cast<size_t>(h) * head_dim;
      const double a = xh[i];
      const double b = xh[i + half];
      xh[i] = static_cast<float>(a * c - b * s);
      xh[i + half] = static_cast<float>(b * c + a * s);
    }
  }
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add(const float* a, const float* b, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void attention_decode(const float* q, const float* k_cache, const float* v_cache, int ctx_len,
                      int num_heads, int num_kv_heads, int head_dim, float scale, float* out) {
  const int group = num_heads / num_kv_heads;
  const size_t kv_stride = static_cast<size_t>(num_kv_heads) * head_dim;
  std::vector<double> scores(ctx_len);
  std::vector<double> acc(head_dim);
  for (int h = 0; h < num_heads; ++h) {
    const int kvh = h / group;
    const float* qh = q + static_cast<size_t>(h) * head_dim;
    double max_score = -std::numeric_limits<double>::infinity();
    for (int t = 0; t < ctx_len; ++t) {
      const float* kt = k_cache + t * kv_stride + static_cast<size_t>(kvh) * head_dim;
      double dot = 0.0;
      for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * kt[d];
      scores[t] = dot * scale;
      max_score = std::max(max_score, scores[t]);
    }
    double denom = 0.0;
    for (int t = 0; t < ctx_len; ++t) {
      scores[t] = std::exp(scores[t] - max_score);
      denom += scores[t];
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int t = 0; t < ctx_len; ++t) {
      const float* vt = v_cache + t * kv_stride + static_cast<size_t>(kvh) * head_dim;
      for (int d = 0; d < head_dim; ++d) acc[d] += scores[t] * vt[d];
    }
    float* oh = out + static_cast<size_t>(h) * head_dim;
    for (int d = 0; d < head_dim; ++d) oh[d] = static_cast<float>(acc[d] / denom);
  }
}

void attention_prefill(const float* q, const float* k_cache, const float* v_cache, int n_q,
                       int pos0, int num_heads, int num_kv_heads, int head_dim, float scale,
                       float* out) {
  // Causal masking is exactly "token at position p sees the cache prefix [0, p]", so each query
  // token is one decode-attention call over its own prefix.
  const size_t token_stride = static_cast<size_t>(num_heads) * head_dim;
  for (int t = 0; t < n_q; ++t) {
    attention_decode(q + t * token_stride, k_cache, v_cache, pos0 + t + 1, num_heads, num_kv_heads,
                     head_dim, scale, out + t * token_stride);
  }
}

void gather_paged(const float* cache, const int32_t* block_table, int block_size, int len,
                  size_t row, float* out) {
  for (int p = 0; p < len; ++p) {
    const size_t at = (static_cast<size_t>(block_table[p / block_size]) * block_size +
                       static_cast<size_t>(p % block_size)) *
                      row;
    std::copy(cache + at, cache + at + row, out + static_cast<size_t>(p) * row);
  }
}

void attention_decode_paged(const float* q, const float* k_cache, const float* v_cache,
                            const int32_t* block_table, int block_size, int ctx_len, int num_heads,
                            int num_kv_heads, int head_dim, float scale, float* out) {
  const size_t row = static_cast<size_t>(num_kv_heads) * head_dim;
  std::vector<float> k(static_cast<size_t>(ctx_len) * row), v(k.size());
  gather_paged(k_cache, block_table, block_size, ctx_len, row, k.data());
  gather_paged(v_cache, block_table, block_size, ctx_len, row, v.data());
  attention_decode(q, k.data(), v.data(), ctx_len, num_heads, num_kv_heads, head_dim, scale, out);
}

void attention_prefill_paged(const float* q, const float* k_cache, const float* v_cache,
                             const int32_t* block_table, int block_size, int n_q, int pos0,
                             int num_heads, int num_kv_heads, int head_dim, float scale,
                             float* out) {
  const int len = pos0 + n_q;
  const size_t row = static_cast<size_t>(num_kv_heads) * head_dim;
  std::vector<float> k(static_cast<size_t>(len) * row), v(k.size());
  gather_paged(k_cache, block_table, block_size, len, row, k.data());
  gather_paged(v_cache, block_table, block_size, len, row, v.data());
  attention_prefill(q, k.data(), v.data(), n_q, pos0, num_heads, num_kv_heads, head_dim, scale,
                    out);
}

int argmax(const float* logits, int n) {
  // NaN never wins, so a NaN first logit does not hide the others (check-logits compares the
  // argmax of rows that may hold NaN; the samplers give no token for such rows, see sample).
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  }
  return best < 0 ? 0 : best;
}

float sampling_uniform(uint64_t seed, uint32_t sequence, uint32_t step) {
  return counter_uniform(seed, sequence, step);
}

int sample(const float* logits, int n, const SamplingParams& params, float u) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(logits[i])) return NONFINITE_LOGITS_TOKEN;
  if (params.temperature <= 0.0f) return argmax(logits, n);
  const float max_logit = logits[argmax(logits, n)];

  // Top-k: keep every logit >= the k-th largest, so ties at the threshold all survive.
  float threshold = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && params.top_k < n) {
    std::vector<float> sorted(logits, logits + n);
    std::nth_element(sorted.begin(), sorted.begin() + (params.top_k - 1), sorted.end(),
                     std::greater<float>());
    threshold = sorted[params.top_k - 1];
  }

  std::vector<double> p(n, 0.0);
  double kept_sum = 0.0;
  for (int i = 0; i < n; ++i) {
    if (logits[i] >= threshold) {
      p[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / params.temperature);
      kept_sum += p[i];
    }
  }

  // Top-p: walk the distinct kept values from the largest down, adding each value's whole tie group
  // at once; the first value at which the mass reaches top_p of the kept mass is the threshold.
  if (params.top_p < 1.0f) {
    std::vector<int> order;
    for (int i = 0; i < n; ++i) {
      if (logits[i] >= threshold) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const double target = static_cast<double>(params.top_p) * kept_sum;
    double mass = 0.0;
    for (size_t j = 0; j < order.size();) {
      const float value = logits[order[j]];
      while (j < order.size() && logits[order[j]] == value) mass += p[order[j++]];
      if (mass >= target) {
        threshold = value;
        break;
      }
    }
    kept_sum = 0.0;
    for (int i = 0; i < n; ++i) {
      if (logits[i] >= threshold) {
        kept_sum += p[i];
      } else {
        p[i] = 0.0;
      }
    }
  }

  const double target = static_cast<double>(u) * kept_sum;
  double running = 0.0;
  int last_kept = argmax(logits, n);
  for (int i = 0; i < n; ++i) {
    if (logits[i] < threshold || p[i] <= 0.0) continue;
    running += p[i];
    last_kept = i;
    if (running > target) return i;
  }
  // Only reachable when rounding leaves the running sum a hair below u * total with u close to 1.
  return last_kept;
}

}  // namespace megaops::ref
