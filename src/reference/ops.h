// fp32 CPU implementation of every op: the oracle that GPU kernels are tested against. Plain loops,
// double accumulation where a sum is long, no attempt at speed. Never a product path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sampling.h"
#include "core/tokens.h"

namespace megaops::ref {

// out[r, :] = table[ids[r], :]
void embedding(const float* table, const int32_t* ids, float* out, int n_ids, int hidden);

// out[r, i] = x[r, i] / sqrt(mean_i(x[r, :]^2) + eps) * w[i]; rows of length n.
void rmsnorm(const float* x, const float* w, float* out, int rows, int n, float eps);

// y[r, j] = sum_k x[r, k] * w[j, k]: x [rows, k], w [n_out, k] (HF Linear layout), y [rows, n_out].
void matmul(const float* x, const float* w, float* y, int rows, int k, int n_out);

// Rotates one token's heads in place, HF "rotate_half" convention: for i < head_dim/2 the pair is
// (x[i], x[i + head_dim/2]) with angle pos * inv_freq[i]. x is [num_heads, head_dim].
void rope(float* x, int num_heads, int head_dim, int pos, const float* inv_freq);

// out = silu(gate) * up, elementwise.
void silu_mul(const float* gate, const float* up, float* out, size_t n);

// out = a + b, elementwise (out may alias a).
void add(const float* a, const float* b, float* out, size_t n);

// One query token attending to positions [0, ctx_len) of one sequence's cache.
// q: [num_heads, head_dim]; k_cache, v_cache: [ctx_len, num_kv_heads, head_dim]; out like q.
// GQA: query head h reads kv head h / (num_heads / num_kv_heads).
void attention_decode(const float* q, const float* k_cache, const float* v_cache, int ctx_len,
                      int num_heads, int num_kv_heads, int head_dim, float scale, float* out);

// Causal attention of n_q query tokens at positions [pos0, pos0 + n_q) against the cache holding
// positions [0, pos0 + n_q). q, out: [n_q, num_heads, head_dim]; caches as in attention_decode.
void attention_prefill(const float* q, const float* k_cache, const float* v_cache, int n_q,
                       int pos0, int num_heads, int num_kv_heads, int head_dim, float scale,
                       float* out);

// A paged cache ([num_blocks, block_size, row] floats: `row` values a position) read through one
// sequence's block table: positions [0, len) into out [len, row], position p from block
// table[p / block_size], row p % block_size. The paged attention kernels' oracle reads a paged
// cache through this and then attends as attention_decode / attention_prefill do.
void gather_paged(const float* cache, const int32_t* block_table, int block_size, int len,
                  size_t row, float* out);

// attention_decode over a paged cache (gather_paged with row = num_kv_heads * head_dim).
void attention_decode_paged(const float* q, const float* k_cache, const float* v_cache,
                            const int32_t* block_table, int block_size, int ctx_len, int num_heads,
                            int num_kv_heads, int head_dim, float scale, float* out);

// attention_prefill over a paged cache holding positions [0, pos0 + n_q) of the sequence.
void attention_prefill_paged(const float* q, const float* k_cache, const float* v_cache,
                             const int32_t* block_table, int block_size, int n_q, int pos0,
                             int num_heads, int num_kv_heads, int head_dim, float scale,
                             float* out);

// Index of the largest logit; the lowest index wins ties (-0 ties +0), a NaN never wins, and a row
// of NaN gives 0. (sample, not argmax, is the samplers' definition: no token for a row with NaN.)
int argmax(const float* logits, int n);

// A uniform number in [0, 1) for (seed, sequence, step): counter-based, so the GPU sampler draws
// the same number without shared state.
float sampling_uniform(uint64_t seed, uint32_t sequence, uint32_t step);

// Samples one token (SamplingParams: core/sampling.h). Definition shared with the GPU sampler:
//   p_i = exp((x_i - max) / T); kept = tokens whose logit is >= the k-th largest logit (ties kept)
//   and, for top-p, >= the largest threshold v with sum_{x_j >= v} p_j >= top_p * sum_j p_j over
//   kept tokens; then the first kept index (in index order) whose running sum of p exceeds
//   u * sum_{kept} p.
// A row holding NaN or Inf has no next token: NONFINITE_LOGITS_TOKEN (core/tokens.h).
int sample(const float* logits, int n, const SamplingParams& params, float u);

}  // namespace megaops::ref
