// fp32 CPU forward pass of a Llama 3 / Qwen 3 decoder (see model.h), built only from the ops in
// ops.h so that a full-model mismatch against HF transformers points at either one op or the
// wiring here. Follows HF's modeling_llama.py / modeling_qwen3.py step by step: pre-norm blocks,
// GQA attention with rotate-half RoPE, Qwen3's per-head q/k RMSNorm before RoPE, SwiGLU MLP.
#include "reference/model.h"

#include <cmath>
#include <string>

#include "core/error.h"
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

Model::Model(const Weights& weights, int max_seq_len)
    : w_(weights),
      max_seq_len_(max_seq_len),
      inv_freq_(rope_inv_freq(weights.cfg)),
      k_cache_(weights.cfg.num_layers),
      v_cache_(weights.cfg.num_layers) {
  if (max_seq_len <= 0) {
    throw InputError("maximum context must be positive, found " + std::to_string(max_seq_len));
  }
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
  const int inter = c.intermediate_size;
  const int q_dim = c.q_dim();
  const int kv_dim = c.kv_dim();
  const size_t rows = static_cast<size_t>(n);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));

  std::vector<float> x(rows * hidden), h(rows * hidden), proj(rows * hidden);
  std::vector<float> q(rows * q_dim), k(rows * kv_dim), v(rows * kv_dim), attn(rows * q_dim);
  std::vector<float> gate(rows * inter), up(rows * inter);

  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  embedding(w_.get("model.embed_tokens.weight").data(), ids.data(), x.data(), n, hidden);

  for (int l = 0; l < c.num_layers; ++l) {
    auto lw = [&](const char* suffix) -> const float* {
      return w_.get(layer_weight_name(l, suffix)).data();
    };

    rmsnorm(x.data(), lw("input_layernorm.weight"), h.data(), n, hidden, c.rms_norm_eps);
    matmul(h.data(), lw("self_attn.q_proj.weight"), q.data(), n, hidden, q_dim);
    matmul(h.data(), lw("self_attn.k_proj.weight"), k.data(), n, hidden, kv_dim);
    matmul(h.data(), lw("self_attn.v_proj.weight"), v.data(), n, hidden, kv_dim);
    if (c.has_qk_norm()) {
      rmsnorm(q.data(), lw("self_attn.q_norm.weight"), q.data(), n * c.num_heads, c.head_dim,
              c.rms_norm_eps);
      rmsnorm(k.data(), lw("self_attn.k_norm.weight"), k.data(), n * c.num_kv_heads, c.head_dim,
              c.rms_norm_eps);
    }
    for (int t = 0; t < n; ++t) {
      rope(q.data() + t * static_cast<size_t>(q_dim), c.num_heads, c.head_dim, pos_ + t,
           inv_freq_.data());
      rope(k.data() + t * static_cast<size_t>(kv_dim), c.num_kv_heads, c.head_dim, pos_ + t,
           inv_freq_.data());
    }

    // The cache grows with the context rather than being sized to max_seq_len up front: the CLI
    // falls back to this model for real checkpoints, where a full-length cache would be gigabytes.
    std::vector<float>& kc = k_cache_[l];
    std::vector<float>& vc = v_cache_[l];
    kc.resize(new_len * kv_dim);
    vc.resize(new_len * kv_dim);
    std::copy(k.begin(), k.end(), kc.begin() + static_cast<size_t>(pos_) * kv_dim);
    std::copy(v.begin(), v.end(), vc.begin() + static_cast<size_t>(pos_) * kv_dim);

    attention_prefill(q.data(), kc.data(), vc.data(), n, pos_, c.num_heads, c.num_kv_heads,
                      c.head_dim, scale, attn.data());
    matmul(attn.data(), lw("self_attn.o_proj.weight"), proj.data(), n, q_dim, hidden);
    add(x.data(), proj.data(), x.data(), x.size());

    rmsnorm(x.data(), lw("post_attention_layernorm.weight"), h.data(), n, hidden, c.rms_norm_eps);
    matmul(h.data(), lw("mlp.gate_proj.weight"), gate.data(), n, hidden, inter);
    matmul(h.data(), lw("mlp.up_proj.weight"), up.data(), n, hidden, inter);
    silu_mul(gate.data(), up.data(), gate.data(), gate.size());
    matmul(gate.data(), lw("mlp.down_proj.weight"), proj.data(), n, inter, hidden);
    add(x.data(), proj.data(), x.data(), x.size());
  }

  rmsnorm(x.data(), w_.get("model.norm.weight").data(), h.data(), n, hidden, c.rms_norm_eps);
  const char* head_name = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  std::vector<float> logits(rows * c.vocab_size);
  matmul(h.data(), w_.get(head_name).data(), logits.data(), n, hidden, c.vocab_size);
  pos_ = static_cast<int>(new_len);
  return logits;
}

}  // namespace megaops::ref
