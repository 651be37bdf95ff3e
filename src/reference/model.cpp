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

Model::Model(const Weights& weights, int max_seq_len, const PagedKvShape& paged, int tp)
    : Model(weights, max_seq_len, tp) {
  if (paged.block_size <= 0 || paged.num_blocks <= 0)
    throw InputError("paged KV cache: expected block_size and num_blocks >= 1, found " +
                     std::to_string(paged.block_size) + " and " + std::to_string(paged.num_blocks));
  paged_ = paged;
  const size_t positions = static_cast<size_t>(paged.block_size) * paged.num_blocks;
  for (Rank& r : ranks_) {
    // new[] without value-initialisation: the pages are touched only where blocks are written,
    // so a large pool costs memory as the engine fills it.
    for (int l = 0; l < w_.cfg.num_layers; ++l) {
      r.k_pool.emplace_back(new float[positions * r.cfg.kv_dim()]);
      r.v_pool.emplace_back(new float[positions * r.cfg.kv_dim()]);
    }
  }
}

const float* Model::weight(const Rank& r, const std::string& name) const {
  auto it = r.shards.find(name);
  return it != r.shards.end() ? it->second.data() : w_.get(name).data();
}

std::vector<float> Model::forward(const std::vector<int>& tokens) {
  if (paged_.num_blocks > 0) throw Error("ref::Model: forward on a paged model (forward_paged)");
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
  Step step;
  step.ids.assign(tokens.begin(), tokens.end());
  for (int t = 0; t < n; ++t) {
    step.pos.push_back(pos_ + t);
    step.head_rows.push_back(t);
  }
  step.seq_row0 = {0};
  step.seq_rows = {n};
  std::vector<float> logits = run(step);
  pos_ = static_cast<int>(new_len);
  return logits;
}

void Model::check_paged(const std::vector<PagedSeq>& seqs) const {
  const ModelConfig& c = w_.cfg;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const PagedSeq& s = seqs[i];
    const std::string at = "seqs[" + std::to_string(i) + "]";
    if (s.tokens.empty()) throw InputError(at + ".tokens: expected at least one token");
    for (int id : s.tokens)
      if (id < 0 || id >= c.vocab_size)
        throw InputError(at + ".tokens: id " + std::to_string(id) + " outside the vocabulary [0, " +
                         std::to_string(c.vocab_size) + ")");
    const int64_t end = static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size());
    if (s.start_pos < 0 || end > max_seq_len_)
      throw InputError(at + ".start_pos: positions [" + std::to_string(s.start_pos) + ", " +
                       std::to_string(end) + ") outside the context [0, " +
                       std::to_string(max_seq_len_) + ")");
    const int64_t blocks = (end + paged_.block_size - 1) / paged_.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < blocks)
      throw InputError(at + ".block_table: " + std::to_string(s.block_table.size()) +
                       " blocks cover fewer than the " + std::to_string(end) + " positions");
    for (int64_t b = 0; b < blocks; ++b)
      if (s.block_table[b] < 0 || s.block_table[b] >= paged_.num_blocks)
        throw InputError(at + ".block_table[" + std::to_string(b) + "]: block " +
                         std::to_string(s.block_table[b]) + " outside the pool [0, " +
                         std::to_string(paged_.num_blocks) + ")");
  }
}

std::vector<float> Model::forward_paged(const std::vector<PagedSeq>& seqs) {
  if (paged_.num_blocks == 0) throw Error("ref::Model: forward_paged on a model without a pool");
  check_paged(seqs);
  if (seqs.empty()) return {};
  Step step;
  step.paged = &seqs;
  for (const PagedSeq& s : seqs) {
    step.seq_row0.push_back(static_cast<int>(step.ids.size()));
    step.seq_rows.push_back(static_cast<int>(s.tokens.size()));
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      step.ids.push_back(s.tokens[t]);
      step.pos.push_back(s.start_pos + static_cast<int>(t));
    }
    step.head_rows.push_back(static_cast<int>(step.ids.size()) - 1);
  }
  return run(step);
}

void Model::attend(Rank& r, int l, const Step& step, const float* q, const float* k, const float* v,
                   float* attn) {
  const ModelConfig& rc = r.cfg;
  const size_t q_dim = rc.q_dim(), kv_dim = rc.kv_dim();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rc.head_dim)));
  if (!step.paged) {
    const int n = static_cast<int>(step.ids.size());
    const size_t new_len = static_cast<size_t>(pos_) + n;
    std::vector<float>& kc = r.k_cache[l];
    std::vector<float>& vc = r.v_cache[l];
    kc.resize(new_len * kv_dim);
    vc.resize(new_len * kv_dim);
    std::copy(k, k + n * kv_dim, kc.begin() + static_cast<size_t>(pos_) * kv_dim);
    std::copy(v, v + n * kv_dim, vc.begin() + static_cast<size_t>(pos_) * kv_dim);
    attention_prefill(q, kc.data(), vc.data(), n, pos_, rc.num_heads, rc.num_kv_heads, rc.head_dim,
                      scale, attn);
    return;
  }
  const int bs = paged_.block_size;
  float* kp = r.k_pool[l].get();
  float* vp = r.v_pool[l].get();
  auto slot = [&](const PagedSeq& s, int pos) {
    return (static_cast<size_t>(s.block_table[pos / bs]) * bs + pos % bs) * kv_dim;
  };
  // Every row's K/V first, then attention: a sequence's rows of this step see each other
  // causally, as in the contiguous cache.
  for (size_t i = 0; i < step.seq_row0.size(); ++i) {
    const PagedSeq& s = (*step.paged)[i];
    for (int t = 0; t < step.seq_rows[i]; ++t) {
      const size_t row = static_cast<size_t>(step.seq_row0[i] + t);
      std::copy(k + row * kv_dim, k + (row + 1) * kv_dim, kp + slot(s, s.start_pos + t));
      std::copy(v + row * kv_dim, v + (row + 1) * kv_dim, vp + slot(s, s.start_pos + t));
    }
  }
  // The sequence's context gathered into one contiguous block: the same attention_prefill call,
  // so the same arithmetic, as the contiguous cache.
  std::vector<float> kc, vc;
  for (size_t i = 0; i < step.seq_row0.size(); ++i) {
    const PagedSeq& s = (*step.paged)[i];
    const int n = step.seq_rows[i], len = s.start_pos + n;
    kc.resize(static_cast<size_t>(len) * kv_dim);
    vc.resize(static_cast<size_t>(len) * kv_dim);
    for (int p = 0; p < len; ++p) {
      std::copy(kp + slot(s, p), kp + slot(s, p) + kv_dim, kc.begin() + p * kv_dim);
      std::copy(vp + slot(s, p), vp + slot(s, p) + kv_dim, vc.begin() + p * kv_dim);
    }
    const size_t row0 = static_cast<size_t>(step.seq_row0[i]);
    attention_prefill(q + row0 * q_dim, kc.data(), vc.data(), n, s.start_pos, rc.num_heads,
                      rc.num_kv_heads, rc.head_dim, scale, attn + row0 * q_dim);
  }
}

std::vector<float> Model::run(const Step& step) {
  const ModelConfig& c = w_.cfg;
  const int n = static_cast<int>(step.ids.size());
  const int hidden = c.hidden_size;
  const size_t rows = static_cast<size_t>(n);

  std::vector<float> x(rows * hidden), h(rows * hidden), proj(rows * hidden), sum(rows * hidden);
  auto record = [&](OpCode code, int layer, int64_t cols, const float* out) {
    if (observer_) observer_({code, layer, static_cast<int64_t>(rows), cols, out});
  };
  embedding(w_.get("model.embed_tokens.weight").data(), step.ids.data(), x.data(), n, hidden);
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
      n == 1 && step.pos[0] > 0 ? OpCode::DecodeAttention : OpCode::PrefillAttention;

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
        rope(q.data() + t * static_cast<size_t>(q_dim), rc.num_heads, rc.head_dim, step.pos[t],
             inv_freq_.data());
        rope(k.data() + t * static_cast<size_t>(kv_dim), rc.num_kv_heads, rc.head_dim, step.pos[t],
             inv_freq_.data());
      }
      record_rank(r, OpCode::QkvRope, q_dim + 2 * kv_dim, nullptr);
      attend(r, l, step, q.data(), k.data(), v.data(), attn.data());
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
  std::vector<float> logits = lm_head(step, h);
  if (observer_)
    observer_({OpCode::LmHead, -1, static_cast<int64_t>(step.head_rows.size()), c.vocab_size,
               logits.data()});
  return logits;
}

std::vector<float> Model::lm_head(const Step& step, const std::vector<float>& h) const {
  const ModelConfig& c = w_.cfg;
  const int hidden = c.hidden_size;
  const int n = static_cast<int>(step.head_rows.size());
  // The head's rows gathered (every row, in order, for forward()).
  std::vector<float> hr(static_cast<size_t>(n) * hidden);
  for (int i = 0; i < n; ++i)
    std::copy(h.begin() + static_cast<size_t>(step.head_rows[i]) * hidden,
              h.begin() + static_cast<size_t>(step.head_rows[i] + 1) * hidden,
              hr.begin() + static_cast<size_t>(i) * hidden);
  std::vector<float> logits(static_cast<size_t>(n) * c.vocab_size);
  if (ranks_.size() == 1) {
    const char* head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    matmul(hr.data(), w_.get(head).data(), logits.data(), n, hidden, c.vocab_size);
    return logits;
  }
  // Vocab-parallel LM head: each rank's logits columns, gathered.
  for (const Rank& r : ranks_) {
    std::vector<float> part(static_cast<size_t>(n) * r.vocab);
    matmul(hr.data(), weight(r, "lm_head.weight"), part.data(), n, hidden, r.vocab);
    for (size_t t = 0; t < static_cast<size_t>(n); ++t)
      std::copy(part.begin() + t * r.vocab, part.begin() + (t + 1) * r.vocab,
                logits.begin() + t * c.vocab_size + r.vocab0);
  }
  return logits;
}

}  // namespace megaops::ref
