// Op adapters: the kernel params of each op of the step graph, from the step resources
// (ExecutorCore, runtime/executor_core.h). Shared by every backend, so the conventional, overlap
// and chain steps launch the same kernels with the same arguments; launch options and overlap hooks
// are left to the caller. Included at the end of executor_core.h.
#pragma once

#include <cmath>

namespace megaops {

// The embedding of n tokens into `out`; launch options and hooks left to the caller.
inline EmbeddingParams ExecutorCore::embedding_params(const int32_t* ids, float* out, int n) const {
  EmbeddingParams ep;
  ep.ids = ids;
  ep.table = embed;
  ep.out = out;
  ep.n = n;
  ep.hidden = cfg.hidden_size;
  ep.vocab = cfg.vocab_size;
  return ep;
}

// residual += delta_in (none when null), out = RMSNorm(residual) * w, for `rows` rows.
inline AddRmsNormParams ExecutorCore::add_rmsnorm_params(float* resid, const float* delta_in,
                                                         const bf16* w, bf16* out, int rows) const {
  AddRmsNormParams p;
  p.residual = resid;
  p.delta_f32 = delta_in;
  p.weight = w;
  p.out = out;
  p.rows = rows;
  p.n = cfg.hidden_size;
  p.eps = cfg.rms_norm_eps;
  return p;
}

// What decode and prefill attention params share: layer L's cache, q, out, slots and shapes.
template <typename P>
P ExecutorCore::attention_params(const LayerWeights& L, const bf16* q_in, bf16* out,
                                 const int32_t* slot_of) const {
  P ap;
  ap.q = q_in;
  ap.k_cache = L.k_cache;
  ap.v_cache = L.v_cache;
  ap.slots = slot_of;
  ap.kv = kv;
  ap.out = out;
  ap.num_heads = cfg.num_heads;
  ap.num_kv_heads = cfg.num_kv_heads;
  ap.head_dim = cfg.head_dim;
  ap.max_seq = opt.max_seq;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  return ap;
}

// The QKV post-processing of layer L for t tokens (both decode steps and prefill); launch
// options and overlap hooks are left to the caller.
inline QkvRopeParams ExecutorCore::qkv_rope_params(const LayerWeights& L, const float* qkv_in,
                                                   bf16* q_out, const int32_t* positions,
                                                   const int32_t* slot_of, int t) const {
  QkvRopeParams rp;
  rp.qkv_f32 = qkv_in;
  rp.positions = positions;
  rp.slots = slot_of;
  rp.q_norm = L.q_norm;
  rp.k_norm = L.k_norm;
  rp.inv_freq = inv_freq;
  rp.q_out = q_out;
  rp.k_cache = L.k_cache;
  rp.v_cache = L.v_cache;
  rp.kv = kv;
  rp.t = t;
  rp.num_heads = cfg.num_heads;
  rp.num_kv_heads = cfg.num_kv_heads;
  rp.head_dim = cfg.head_dim;
  rp.max_seq = opt.max_seq;
  rp.eps = cfg.rms_norm_eps;
  return rp;
}

// Decode attention of layer L over b sequences; merge counters, launch options and overlap
// hooks are left to the caller.
inline DecodeAttentionParams ExecutorCore::decode_attention_params(
    const LayerWeights& L, const bf16* q_in, bf16* out, float* workspace, const int32_t* slot_of,
    const int32_t* ctx_lens, int b) const {
  DecodeAttentionParams ap = attention_params<DecodeAttentionParams>(L, q_in, out, slot_of);
  ap.ctx_lens = ctx_lens;
  ap.workspace = workspace;
  ap.b = b;
  ap.splits = opt.decode_attention_splits;
  ap.per_head = opt.decode_attention_per_head;
  return ap;
}

// The next token of b sequences from the logits, into dec_tokens; launch options left default.
inline SampleParams ExecutorCore::sample_params(int b) const {
  SampleParams sp;
  sp.logits = logits;
  sp.ld = cfg.vocab_size;
  sp.b = b;
  sp.vocab = cfg.vocab_size;
  sp.temperature = opt.sampling.temperature;
  sp.top_k = opt.sampling.top_k;
  sp.top_p = opt.sampling.top_p;
  sp.seed = opt.sampling.seed;
  sp.step = step;
  sp.tokens = dec_tokens;
  // Row r draws with its sequence's slot: the same stream as row r in a decode step (slot r),
  // and a sequence's first token in a decode-graph prefill draws as the layer path's row b.
  sp.rng_rows = dec_slots;
  // The paged runner's decode rows: each row's own parameters and stream instead.
  sp.rows = dec_sample;
  return sp;
}

// Positions, context lengths and the sampler's step advanced after a decode step of b.
inline StepAdvanceParams ExecutorCore::step_advance_params(int b) const {
  StepAdvanceParams ap;
  ap.positions = dec_pos;
  ap.ctx_lens = dec_ctx;
  ap.step = step;
  ap.b = b;
  ap.tokens = dec_tokens;
  ap.host_tokens = ring_half(0);
  ap.tokens_ld = opt.max_batch;
  return ap;
}

}  // namespace megaops
