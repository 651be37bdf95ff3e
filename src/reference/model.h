// fp32 CPU forward pass of a whole Llama 3 / Qwen 3 model with a KV cache: the oracle for
// full-model tests and the backend `megaops generate` falls back to without a GPU.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "models/model_config.h"

namespace megaops {
class Checkpoint;
}

namespace megaops::ref {

// All weights of a model as fp32, by HF name.
struct Weights {
  ModelConfig cfg;
  std::unordered_map<std::string, std::vector<float>> tensors;

  // Throws InputError naming the tensor if absent.
  const std::vector<float>& get(const std::string& name) const;
};

// Converts every expected weight of a checkpoint to fp32.
Weights load_weights(const Checkpoint& ckpt);

// One sequence's state: its KV cache and position. Several Models may share one Weights.
class Model {
 public:
  Model(const Weights& weights, int max_seq_len);

  // Runs tokens at positions [pos(), pos() + n), appending to the KV cache. Returns logits
  // [n, vocab_size], row-major. Throws InputError on ids outside the vocabulary or on running past
  // max_seq_len.
  std::vector<float> forward(const std::vector<int>& tokens);

  int pos() const { return pos_; }
  void reset() { pos_ = 0; }

 private:
  const Weights& w_;
  int max_seq_len_;
  int pos_ = 0;
  std::vector<float> inv_freq_;
  // Per layer: [pos, num_kv_heads, head_dim], grown as the context grows (a real checkpoint on the
  // CPU fallback must not allocate max_seq_len up front).
  std::vector<std::vector<float>> k_cache_, v_cache_;
};

}  // namespace megaops::ref
