// The shape description of a dense decoder model (Llama 3.x or Qwen 3): its architecture and sizes
// (ModelConfig), the weight tensors it has (expected_weights), its RoPE frequencies, and what
// fills a weight with values (WeightFiller, random_weight_values). graph/, planner/, runtime/ and
// reference/ all read it; reading config.json and the named presets are models/ (model_config.h).
// Every size is a field: any config of these architectures works, not only named sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

// Fills `out` (numel floats) with the values of weight `spec` (index `tensor_index` in
// expected_weights order); used to upload weights from a checkpoint (models/checkpoint.h,
// checkpoint_filler) or from a deterministic random preset (runtime/executor.h, random_filler)
// without materialising fp32 copies of the whole model.
using WeightFiller = std::function<void(const WeightSpec& spec, size_t tensor_index, float* out)>;

// Fills `out` (numel floats) with the deterministic random values of weight `spec` (index
// `tensor_index` in expected_weights order) for `seed`: counter-based, so any slice can be produced
// independently and in parallel. Norm weights are 1 + small noise; everything else is
// uniform with std 0.02.
void random_weight_values(const WeightSpec& spec, uint32_t tensor_index, uint64_t seed,
                          size_t begin, size_t count, float* out);

}  // namespace megaops
