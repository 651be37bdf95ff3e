// fp32 CPU forward pass of a Llama 3 / Qwen 3 decoder (see model.h), built only from the ops in
// ops.h so that a full-model mismatch against HF transformers points at either one op or the
// wiring here. Follows HF's modeling_llama.py / modeling_qwen3.py step by step: pre-norm blocks,
// GQA attention with rotate-half RoPE, Qwen3's per-head q/k RMSNorm before RoPE, SwiGLU MLP.
#include "reference/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "graph/tensor_parallel.h"
#include "models/checkpoint.h"
#include "reference/ops.h"

namespace megaops::ref {

const std::vector<float>& Weights::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw InputError("weight '" + name + "' is not loaded");
  return it->second;
}

Weights load_weights(const Checkpoint& ckpt) {
  Weights w;
  w.cfg = ckpt.config();
  for (const WeightSpec& spec : expected_weights(w.cfg)) {
    w.tensors.emplace(spec.name, ckpt.weight_f32(spec.name));
  }
  return w;
}

Model::Model(const Weights& weights, int max_seq_len, int tp)
    : w_(weights), max_seq_len_(max_seq_len), inv_freq_(rope_inv_freq(weights.cfg)) {
  if (max_seq_len <= 0) {
    throw InputError("maximum context must be positive, found " + std::to_string(max_seq_len));
  }
  const ModelConfig& c = weights.cfg;
  for (int r = 0; r < tp; ++r) {
    const TpShape s = tp_shape(c, tp, r);
    Rank rank;
    rank.cfg = tp_rank_config(c, s);
    rank.vocab0 = s.vocab0;
    rank.vocab = s.vocab;
    rank.k_cache.resize(c.num_layers);
    rank.v_cache.resize(c.num_layers);
    if (tp > 1) {
      for (const WeightSpec& spec : expected_weights(c)) {
        const TpSlice slice = tp_slice(c, s, spec.name);
        if (slice.split == TpSplit::Replicated) continue;  // read from w_
        const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
        rank.shards.emplace(spec.name, tp_cut(weights.get(spec.name), rows, cols, slice));
      }
      if (c.tie_word_embeddings) {
        const std::string table = "model.embed_tokens.weight";
        rank.shards.emplace("lm_head.weight",
                            tp_cut(weights.get(table), c.vocab_size, c.hidden_size,
                                   tp_slice(c, s, table, /*as_lm_head=*/true)));
      }
    }
    ranks_.push_back(std::move(rank));
  }
}

const float* Model::weight(const Rank& r, const std::string& name) const {
  auto it = r.shards.find(name);
  return it != r.shards.end() ? it->second.data() : w_.get(name).data();
}

std::vector<float> Model::forward(const std::vector<int>& tokens) {
  const ModelConfig& c = w_.cfg;
  for (int id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      throw InputError("prompt id " + std::to_string(id) + " outside the vocabulary [0, " +
                       std::to_string(c.vocab_size) + ")");
    }
  }
  const size_t new_len = static_cast<size_t>(pos_) + tokens.size();
  if (new_len > static_cast<size_t>(max_seq_len_)) {
    throw InputError("context of " + std::to_string(new_len) +
                     " tokens exceeds the configured maximum " + std::to_string(max_seq_len_));
  }
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return {};

  const int hidden = c.hidden_size;
  const size_t rows = static_cast<size_t>(n);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));

  std::vector<float> x(rows * hidden), h(rows * hidden), proj(rows * hidden), sum(rows * hidden);
  auto record = [&](OpCode code, int layer, int64_t cols, const float* out) {
    if (observer_) observer_({code, layer, static_cast<int64_t>(rows), cols, out});
  };
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  embedding(w_.get("model.embed_tokens.weight").data(), ids.data(), x.data(), n, hidden);
  record(OpCode::Embedding, -1, hidden, x.data());

  // Every rank's partial output of a row-parallel block, added in rank order into x (at tp = 1
  // the one partial is added directly: the same arithmetic as a model without TP). The partials'
  // ops record themselves on rank 0 only.
  int layer = -1;
  auto all_reduce_into_x = [&](auto&& partial) {
    if (ranks_.size() == 1) {
      partial(ranks_[0], proj.data());
      add(x.data(), proj.data(), x.data(), x.size());
      return;
    }
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (Rank& r : ranks_) {
      partial(r, proj.data());
      add(sum.data(), proj.data(), sum.data(), sum.size());
    }
    add(x.data(), sum.data(), x.data(), x.size());
    record(OpCode::AllReduce, layer, hidden, x.data());
  };
  auto record_rank = [&](const Rank& r, OpCode code, int64_t cols, const float* out) {
    if (&r == &ranks_[0]) record(code, layer, cols, out);
  };
  const OpCode attention_code =
      n == 1 && pos_ > 0 ? OpCode::DecodeAttention : OpCode::PrefillAttention;

  // Scratch of one rank's blocks, reused by every rank and layer (tp divides heads, kv heads and
  // features evenly, so all ranks have rank 0's shapes).
  const ModelConfig& rc0 = ranks_[0].cfg;
  std::vector<float> q(rows * rc0.q_dim()), k(rows * rc0.kv_dim()), v(rows * rc0.kv_dim()),
      attn(rows * rc0.q_dim()), gate(rows * rc0.intermediate_size),
      up(rows * rc0.intermediate_size);

  for (int l = 0; l < c.num_layers; ++l) {
    layer = l;
    auto lw = [&](const Rank& r, const char* suffix) {
      return weight(r, layer_weight_name(l, suffix));
    };

    rmsnorm(x.data(), lw(ranks_[0], "input_layernorm.weight"), h.data(), n, hidden, c.rms_norm_eps);
    record(OpCode::InputNorm, l, hidden, h.data());
    all_reduce_into_x([&](Rank& r, float* out) {
      const ModelConfig& rc = r.cfg;
      const int q_dim = rc.q_dim(), kv_dim = rc.kv_dim();
      matmul(h.data(), lw(r, "self_attn.q_proj.weight"), q.data(), n, hidden, q_dim);
      matmul(h.data(), lw(r, "self_attn.k_proj.weight"), k.data(), n, hidden, kv_dim);
      matmul(h.data(), lw(r, "self_attn.v_proj.weight"), v.data(), n, hidden, kv_dim);
      // q, k and v as the step graph's one fused projection (its output holds all three).
      record_rank(r, OpCode::QkvProj, q_dim + 2 * kv_dim, nullptr);
      if (rc.has_qk_norm()) {
        rmsnorm(q.data(), lw(r, "self_attn.q_norm.weight"), q.data(), n * rc.num_heads, rc.head_dim,
                rc.rms_norm_eps);
        rmsnorm(k.data(), lw(r, "self_attn.k_norm.weight"), k.data(), n * rc.num_kv_heads,
                rc.head_dim, rc.rms_norm_eps);
      }
      for (int t = 0; t < n; ++t) {
        rope(q.data() + t * static_cast<size_t>(q_dim), rc.num_heads, rc.head_dim, pos_ + t,
             inv_freq_.data());
        rope(k.data() + t * static_cast<size_t>(kv_dim), rc.num_kv_heads, rc.head_dim, pos_ + t,
             inv_freq_.data());
      }
      std::vector<float>& kc = r.k_cache[l];
      std::vector<float>& vc = r.v_cache[l];
      kc.resize(new_len * kv_dim);
      vc.resize(new_len * kv_dim);
      std::copy(k.begin(), k.end(), kc.begin() + static_cast<size_t>(pos_) * kv_dim);
      std::copy(v.begin(), v.end(), vc.begin() + static_cast<size_t>(pos_) * kv_dim);
      record_rank(r, OpCode::QkvRope, q_dim + 2 * kv_dim, nullptr);
      attention_prefill(q.data(), kc.data(), vc.data(), n, pos_, rc.num_heads, rc.num_kv_heads,
                        rc.head_dim, scale, attn.data());
      record_rank(r, attention_code, q_dim, attn.data());
      matmul(attn.data(), lw(r, "self_attn.o_proj.weight"), out, n, q_dim, hidden);
      record_rank(r, OpCode::OProj, hidden, out);
    });

    rmsnorm(x.data(), lw(ranks_[0], "post_attention_layernorm.weight"), h.data(), n, hidden,
            c.rms_norm_eps);
    record(OpCode::PostNorm, l, hidden, h.data());
    all_reduce_into_x([&](Rank& r, float* out) {
      const int inter = r.cfg.intermediate_size;
      matmul(h.data(), lw(r, "mlp.gate_proj.weight"), gate.data(), n, hidden, inter);
      matmul(h.data(), lw(r, "mlp.up_proj.weight"), up.data(), n, hidden, inter);
      // gate and up as the step graph's one fused projection.
      record_rank(r, OpCode::GateUpProj, 2 * inter, nullptr);
      silu_mul(gate.data(), up.data(), gate.data(), gate.size());
      record_rank(r, OpCode::SiluMul, inter, gate.data());
      matmul(gate.data(), lw(r, "mlp.down_proj.weight"), out, n, inter, hidden);
      record_rank(r, OpCode::DownProj, hidden, out);
    });
  }
  layer = -1;

  rmsnorm(x.data(), w_.get("model.norm.weight").data(), h.data(), n, hidden, c.rms_norm_eps);
  record(OpCode::FinalNorm, -1, hidden, h.data());
  std::vector<float> logits(rows * c.vocab_size);
  if (ranks_.size() == 1) {
    const char* head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    matmul(h.data(), w_.get(head).data(), logits.data(), n, hidden, c.vocab_size);
  } else {
    // Vocab-parallel LM head: each rank's logits columns, gathered.
    for (const Rank& r : ranks_) {
      std::vector<float> part(rows * r.vocab);
      matmul(h.data(), weight(r, "lm_head.weight"), part.data(), n, hidden, r.vocab);
      for (size_t t = 0; t < rows; ++t)
        std::copy(part.begin() + t * r.vocab, part.begin() + (t + 1) * r.vocab,
                  logits.begin() + t * c.vocab_size + r.vocab0);
    }
  }
  record(OpCode::LmHead, -1, c.vocab_size, logits.data());
  pos_ = static_cast<int>(new_len);
  return logits;
}

}  // namespace megaops::ref
