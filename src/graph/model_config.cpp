// Architecture facts that do not come from a file: weight names and shapes per architecture, RoPE
// frequencies with llama3 scaling, and the values of a random model's weights.
#include "graph/model_config.h"

#include <cmath>
#include <numbers>
#include <string_view>

#include "core/counter_rng.h"

namespace megaops {

const char* arch_name(Arch a) {
  return a == Arch::Qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
}

std::string layer_weight_name(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<WeightSpec> expected_weights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), i = c.intermediate_size;
  std::vector<WeightSpec> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int l = 0; l < c.num_layers; ++l) {
    out.push_back({layer_weight_name(l, "input_layernorm.weight"), {h}});
    out.push_back({layer_weight_name(l, "self_attn.q_proj.weight"), {q, h}});
    out.push_back({layer_weight_name(l, "self_attn.k_proj.weight"), {kv, h}});
    out.push_back({layer_weight_name(l, "self_attn.v_proj.weight"), {kv, h}});
    if (c.has_qk_norm()) {
      out.push_back({layer_weight_name(l, "self_attn.q_norm.weight"), {c.head_dim}});
      out.push_back({layer_weight_name(l, "self_attn.k_norm.weight"), {c.head_dim}});
    }
    out.push_back({layer_weight_name(l, "self_attn.o_proj.weight"), {h, q}});
    out.push_back({layer_weight_name(l, "post_attention_layernorm.weight"), {h}});
    out.push_back({layer_weight_name(l, "mlp.gate_proj.weight"), {i, h}});
    out.push_back({layer_weight_name(l, "mlp.up_proj.weight"), {i, h}});
    out.push_back({layer_weight_name(l, "mlp.down_proj.weight"), {h, i}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  // Same formula as HF transformers' default and "llama3" rope initialisation.
  const int half = c.head_dim / 2;
  std::vector<float> out(half);
  const RopeScaling& s = c.rope_scaling;
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int i = 0; i < half; ++i) {
    double f =
        1.0 / std::pow(static_cast<double>(c.rope_theta), static_cast<double>(2 * i) / c.head_dim);
    if (s.llama3) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

namespace {

bool is_norm_weight(const std::string& name) {
  constexpr std::string_view SUFFIX = "norm.weight";
  return name.size() >= SUFFIX.size() &&
         name.compare(name.size() - SUFFIX.size(), SUFFIX.size(), SUFFIX) == 0;
}

}  // namespace

void random_weight_values(const WeightSpec& spec, uint32_t tensor_index, uint64_t seed,
                          size_t begin, size_t count, float* out) {
  // Uniform on [-a, a] has std a / sqrt(3); a = 0.02 * sqrt(3) gives the HF initializer's 0.02.
  const bool norm = is_norm_weight(spec.name);
  const float scale = norm ? 0.1f : 0.02f * std::sqrt(3.0f);
  const float offset = norm ? 1.0f : 0.0f;
  for (size_t i = 0; i < count; ++i) {
    const float u = counter_uniform(seed, tensor_index, begin + i);
    out[i] = offset + (u * 2.0f - 1.0f) * scale;
  }
}

}  // namespace megaops
