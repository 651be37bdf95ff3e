// See codec_ops.h.
#include "reference/codec_ops.h"

#include <cmath>

#include "reference/ops.h"

namespace megaops::ref {

void conv1d(const float* x, const float* w, const float* b, float* y, int cin, int cout, int t_len,
            int kernel, int dilation) {
  for (int o = 0; o < cout; ++o) {
    for (int t = 0; t < t_len; ++t) {
      double acc = b ? b[o] : 0.0;
      for (int i = 0; i < cin; ++i) {
        const float* wi = w + (static_cast<size_t>(o) * cin + i) * kernel;
        const float* xi = x + static_cast<size_t>(i) * t_len;
        for (int k = 0; k < kernel; ++k) {
          const int src = t - (kernel - 1 - k) * dilation;
          if (src >= 0) acc += static_cast<double>(wi[k]) * xi[src];
        }
      }
      y[static_cast<size_t>(o) * t_len + t] = static_cast<float>(acc);
    }
  }
}

void conv_transpose1d(const float* x, const float* w, const float* b, float* y, int cin, int cout,
                      int t_len, int kernel, int stride) {
  const int n_len = t_len * stride;
  for (int o = 0; o < cout; ++o) {
    for (int n = 0; n < n_len; ++n) {
      double acc = b ? b[o] : 0.0;
      for (int i = 0; i < cin; ++i) {
        const float* wi = w + (static_cast<size_t>(i) * cout + o) * kernel;
        const float* xi = x + static_cast<size_t>(i) * t_len;
        // Taps k = n - j * stride in [0, kernel), j >= 0 (j <= n / stride < t_len: causal).
        for (int k = n % stride; k < kernel && k <= n; k += stride)
          acc += static_cast<double>(wi[k]) * xi[(n - k) / stride];
      }
      y[static_cast<size_t>(o) * n_len + n] = static_cast<float>(acc);
    }
  }
}

void elu(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
}

void snake(const float* x, const float* alpha, const float* beta, float* y, int channels,
           int t_len) {
  for (int c = 0; c < channels; ++c) {
    const double a = alpha[c], inv_b = 1.0 / beta[c];
    for (int t = 0; t < t_len; ++t) {
      const size_t i = static_cast<size_t>(c) * t_len + t;
      const double s = std::sin(a * x[i]);
      y[i] = static_cast<float>(x[i] + s * s * inv_b);
    }
  }
}

void codebook_embed(const int32_t* codes, const float* tables, float* out, int t_len, int codebooks,
                    int codebook_size, int dim) {
  for (int t = 0; t < t_len; ++t) {
    for (int d = 0; d < dim; ++d) {
      double acc = 0.0;
      for (int q = 0; q < codebooks; ++q) {
        const size_t row = static_cast<size_t>(q) * codebook_size + codes[t * codebooks + q];
        acc += tables[row * dim + d];
      }
      out[static_cast<size_t>(d) * t_len + t] = static_cast<float>(acc);
    }
  }
}

void codebook_embedding(const float* table, int codebook, int codebook_size, const int32_t* codes,
                        float* out, int n, int hidden) {
  for (int r = 0; r < n; ++r) {
    const float* row = table + (static_cast<size_t>(codebook) * codebook_size + codes[r]) * hidden;
    for (int k = 0; k < hidden; ++k) out[static_cast<size_t>(r) * hidden + k] = row[k];
  }
}

void codebook_head(const float* hidden, const float* head, float* logits, int hidden_size,
                   int codebook, int codebook_size) {
  matmul(hidden, head + static_cast<size_t>(codebook) * codebook_size * hidden_size, logits, 1,
         hidden_size, codebook_size);
}

int codebook_argmax(const float* logits, int codebook, int codebook_size) {
  return argmax(logits + static_cast<size_t>(codebook) * codebook_size, codebook_size);
}

}  // namespace megaops::ref
