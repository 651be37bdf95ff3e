// fp32 CPU oracles of the streaming pipeline's own ops (graph/pipeline.h): the codec decoder's
// residual VQ decode, causal 1-D convolution and transposed convolution, ELU and SnakeBeta, and
// the local transformer's per-codebook embeddings and heads. Plain loops, double accumulation,
// no attempt at speed. Signals are channel-major per stream: x[c * t_len + t].
//
// The convolutions skip the terms that fall into the causal padding instead of adding zeros, and
// sum the rest in a fixed order, so an output sample computed from a window holding all its
// inputs is bit for bit the one computed over the whole signal (streamed == non-streamed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megaops::ref {

// y[o, t] = b[o] + sum_{i, k} w[o, i, k] * x[i, t - (kernel - 1 - k) * dilation], inputs before
// t = 0 being zero (causal). x [cin, t_len], w [cout, cin, kernel], b [cout] (or null),
// y [cout, t_len].
void conv1d(const float* x, const float* w, const float* b, float* y, int cin, int cout, int t_len,
            int kernel, int dilation);

// The causal transposed convolution: of the full output z[o, n] = b[o] + sum over (i, j, k) with
// n = j * stride + k of w[i, o, k] * x[i, j] (length (t_len - 1) * stride + kernel), the first
// t_len * stride samples. x [cin, t_len], w [cin, cout, kernel] (PyTorch's ConvTranspose1d
// layout), b [cout] (or null), y [cout, t_len * stride].
void conv_transpose1d(const float* x, const float* w, const float* b, float* y, int cin, int cout,
                      int t_len, int kernel, int stride);

// y = x for x > 0, exp(x) - 1 otherwise (alpha 1), elementwise (y may alias x).
void elu(const float* x, float* y, size_t n);

// SnakeBeta per channel c: y = x + sin(alpha[c] x)^2 / beta[c]. x, y [channels, t_len] (y may
// alias x).
void snake(const float* x, const float* alpha, const float* beta, float* y, int channels,
           int t_len);

// Residual VQ decode: out[d, t] = sum_q tables[q, codes[t, q], d]. codes [t_len, codebooks] (each
// in [0, codebook_size)), tables [codebooks, codebook_size, dim], out [dim, t_len].
void codebook_embed(const int32_t* codes, const float* tables, float* out, int t_len, int codebooks,
                    int codebook_size, int dim);

// The local transformer's embedding of codebook q's codes: out[r, :] = table[q * codebook_size +
// codes[r], :]. table [codebooks * codebook_size, hidden], out [n, hidden].
void codebook_embedding(const float* table, int codebook, int codebook_size, const int32_t* codes,
                        float* out, int n, int hidden);

// The local transformer's head of codebook q: logits[j] = sum_k hidden[k] * head[(q *
// codebook_size + j), k]. head [codebooks * codebook_size, hidden_size], logits [codebook_size].
void codebook_head(const float* hidden, const float* head, float* logits, int hidden_size,
                   int codebook, int codebook_size);

// Codebook q's code from the logits of every codebook's head ([codebooks * codebook_size]): the
// argmax over its slice (the lowest index wins ties; NaN never wins; a slice of NaN gives 0).
int codebook_argmax(const float* logits, int codebook, int codebook_size);

}  // namespace megaops::ref
