// The named presets of real models (sizes from their public Hugging Face configs) that init-random
// and the benchmarks use.
#include "models/model_config.h"

#include <map>

#include "core/error.h"

namespace megaops {

namespace {

ModelConfig llama(int vocab, int hidden, int inter, int layers, int heads, int kv_heads,
                  int max_pos, float factor, int orig_max, bool tied) {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {true, factor, 1.0f, 4.0f, orig_max};
  c.tie_word_embeddings = tied;
  c.torch_dtype = DType::BF16;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  return c;
}

ModelConfig qwen3(int vocab, int hidden, int inter, int layers, int heads, int kv_heads,
                  int head_dim, int max_pos, bool tied) {
  ModelConfig c;
  c.arch = Arch::Qwen3;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.tie_word_embeddings = tied;
  c.torch_dtype = DType::BF16;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    t["llama3.2-1b"] = llama(128256, 2048, 8192, 16, 32, 8, 131072, 32.0f, 8192, true);
    t["llama3.1-8b"] = llama(128256, 4096, 14336, 32, 32, 8, 131072, 8.0f, 8192, false);
    t["qwen3-0.6b"] = qwen3(151936, 1024, 3072, 28, 16, 8, 128, 40960, true);
    t["qwen3-8b"] = qwen3(151936, 4096, 12288, 36, 32, 8, 128, 40960, false);
    // Tiny models of the same architectures for CPU demos and tests: GQA, llama3 scaling that
    // changes some frequencies (small original context), Qwen3 head_dim != hidden / heads.
    ModelConfig tl = llama(512, 128, 256, 2, 4, 2, 1024, 8.0f, 64, false);
    tl.bos_token_id = 1;
    tl.eos_token_ids = {2};
    t["tiny-llama3"] = tl;
    ModelConfig tq = qwen3(512, 128, 256, 2, 4, 2, 64, 1024, true);
    tq.bos_token_id = 1;
    tq.eos_token_ids = {2};
    t["tiny-qwen3"] = tq;
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, cfg] : presets()) names.push_back(name);
  return names;
}

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw_input_error("--preset", "", "unknown preset '" + name + "'; expected one of: " + known);
  }
  return it->second;
}

}  // namespace megaops
