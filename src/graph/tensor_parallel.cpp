// See tensor_parallel.h.
#include "graph/tensor_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace megaops {

TpShape tp_shape(const ModelConfig& cfg, int tp, int rank) {
  if (tp < 1)
    throw_input_error("tensor parallel", "tp", "expected >= 1, found " + std::to_string(tp));
  if (rank < 0 || rank >= tp)
    throw_input_error("tensor parallel", "rank",
                      "expected 0.." + std::to_string(tp - 1) + ", found " + std::to_string(rank));
  auto divides = [&](int n, const char* field) {
    if (n % tp != 0)
      throw_input_error(
          "config.json", field,
          "expected a multiple of tp = " + std::to_string(tp) + ", found " + std::to_string(n));
  };
  divides(cfg.num_kv_heads, "num_key_value_heads");
  divides(cfg.num_heads, "num_attention_heads");
  divides(cfg.intermediate_size, "intermediate_size");
  if (cfg.vocab_size < tp)
    throw_input_error("config.json", "vocab_size",
                      "expected at least tp = " + std::to_string(tp) + ", found " +
                          std::to_string(cfg.vocab_size));
  TpShape s;
  s.tp = tp;
  s.rank = rank;
  s.heads = cfg.num_heads / tp;
  s.head0 = rank * s.heads;
  s.kv_heads = cfg.num_kv_heads / tp;
  s.kv_head0 = rank * s.kv_heads;
  s.inter = cfg.intermediate_size / tp;
  s.inter0 = rank * s.inter;
  const int per = (cfg.vocab_size + tp - 1) / tp;
  s.vocab0 = std::min(cfg.vocab_size, rank * per);
  s.vocab = std::min(cfg.vocab_size, s.vocab0 + per) - s.vocab0;
  return s;
}

ModelConfig tp_rank_config(const ModelConfig& cfg, const TpShape& s) {
  ModelConfig c = cfg;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.intermediate_size = s.inter;
  return c;
}

TpSlice tp_slice(const ModelConfig& cfg, const TpShape& s, const std::string& name,
                 bool as_lm_head) {
  auto ends_with = [&](const char* suffix) {
    const std::string x(suffix);
    return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
  };
  const int64_t hd = cfg.head_dim;
  if (name == "lm_head.weight" || (as_lm_head && name == "model.embed_tokens.weight"))
    return {TpSplit::Rows, s.vocab0, s.vocab0 + s.vocab};
  if (ends_with("self_attn.q_proj.weight"))
    return {TpSplit::Rows, s.head0 * hd, (s.head0 + s.heads) * hd};
  if (ends_with("self_attn.k_proj.weight") || ends_with("self_attn.v_proj.weight"))
    return {TpSplit::Rows, s.kv_head0 * hd, (s.kv_head0 + s.kv_heads) * hd};
  if (ends_with("self_attn.o_proj.weight"))
    return {TpSplit::Cols, s.head0 * hd, (s.head0 + s.heads) * hd};
  if (ends_with("mlp.gate_proj.weight") || ends_with("mlp.up_proj.weight"))
    return {TpSplit::Rows, s.inter0, s.inter0 + s.inter};
  if (ends_with("mlp.down_proj.weight")) return {TpSplit::Cols, s.inter0, s.inter0 + s.inter};
  for (const WeightSpec& w : expected_weights(cfg))
    if (w.name == name) return {};
  throw_input_error("tensor parallel", name, "expected a weight of this model, found none");
}

std::vector<float> tp_cut(const std::vector<float>& full, int64_t rows, int64_t cols,
                          const TpSlice& slice) {
  if (static_cast<int64_t>(full.size()) != rows * cols)
    throw Error("tp_cut: tensor of " + std::to_string(full.size()) + " values is not " +
                std::to_string(rows) + " x " + std::to_string(cols));
  switch (slice.split) {
    case TpSplit::Replicated:
      return full;
    case TpSplit::Rows:
      return std::vector<float>(full.begin() + slice.begin * cols, full.begin() + slice.end * cols);
    case TpSplit::Cols: {
      std::vector<float> out;
      out.reserve(static_cast<size_t>(rows * (slice.end - slice.begin)));
      for (int64_t r = 0; r < rows; ++r)
        out.insert(out.end(), full.begin() + r * cols + slice.begin,
                   full.begin() + r * cols + slice.end);
      return out;
    }
  }
  return {};
}

}  // namespace megaops
