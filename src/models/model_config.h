// The architecture description of a dense decoder model (Llama 3.x or Qwen 3), read from a Hugging
// Face config.json and validated. Every size is a field: any config of these architectures works,
// not only named sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace megaops {

enum class Arch { Llama, Qwen3 };

// "LlamaForCausalLM" / "Qwen3ForCausalLM".
const char* arch_name(Arch a);

// rope_scaling with rope_type "llama3" (Llama 3.1 / 3.2). Disabled: plain RoPE.
struct RopeScaling {
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // Llama: hidden_size / num_heads unless config says otherwise; Qwen3: explicit
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  DType torch_dtype = DType::BF16;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  bool has_qk_norm() const { return arch == Arch::Qwen3; }
};

// Reads and validates config.json. Throws InputError "PATH: FIELD: expected ..., found ..." on
// anything malformed, missing or unsupported.
ModelConfig read_model_config(const std::string& path);

// Parses config.json text; `origin` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// Serialises to HF config.json text (what init-random writes and HF transformers reads).
std::string model_config_to_json(const ModelConfig& cfg);

// Checks sizes and divisibility; throws InputError naming the field. Called by the parser.
void validate_model_config(const ModelConfig& cfg, const std::string& origin);

// One weight tensor the architecture expects: HF name and shape.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every tensor a checkpoint of this config must hold, in a stable order (embedding, layers, final
// norm, lm_head unless tied).
std::vector<WeightSpec> expected_weights(const ModelConfig& cfg);

// Per-layer weight names, e.g. layer_weight_name(3, "self_attn.q_proj.weight").
std::string layer_weight_name(int layer, const char* suffix);

// RoPE inverse frequencies (head_dim/2 of them), llama3 scaling applied when configured. Shared by
// the CPU oracle and the GPU executor so both rotate identically.
std::vector<float> rope_inv_freq(const ModelConfig& cfg);

// Named configurations of real architectures (llama3.2-1b, llama3.1-8b, qwen3-0.6b, qwen3-8b,
// tiny-llama3, tiny-qwen3). Throws InputError listing the known names for an unknown one.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace megaops
