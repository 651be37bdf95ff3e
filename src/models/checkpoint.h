// A Hugging Face checkpoint directory: config.json plus one model.safetensors or several shards
// listed by model.safetensors.index.json, memory-mapped and validated against the architecture:
// every expected tensor present exactly once with the shape the config implies. Any mismatch is an
// InputError naming the file and the tensor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/model_config.h"
#include "io/safetensors.h"

namespace megaops {

class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }

  // A validated expected weight; throws InputError if the name is not one of expected_weights().
  const TensorView& weight(const std::string& name) const;

  // The weight converted to fp32 into `out` (numel floats), on all cores. Every value is checked
  // as it converts: a NaN or Inf is an InputError naming the file, the tensor and the first bad
  // index (with its row and column), so a broken checkpoint never reaches a kernel.
  void weight_to_f32(const std::string& name, float* out) const;
  std::vector<float> weight_f32(const std::string& name) const;

  // Total bytes of the expected weights as stored on disk.
  size_t total_bytes() const;

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, const TensorView*>> weights_;  // sorted by name
};

// A filler that converts `ckpt`'s weights to fp32 (NaN / Inf rejected as they convert), for
// make_executor; `ckpt` must outlive it.
WeightFiller checkpoint_filler(const Checkpoint& ckpt);

// Writes a complete HF-format checkpoint for `cfg` with random weights (see random_weight_values
// in graph/model_config.h): config.json plus safetensors in `dtype`, sharded with an index file
// when larger than max_shard_bytes. `progress` (may be empty) is called with bytes written so far
// and total.
void write_random_checkpoint(const ModelConfig& cfg, const std::string& dir, uint64_t seed,
                             DType dtype, size_t max_shard_bytes,
                             const std::function<void(size_t, size_t)>& progress);

}  // namespace megaops
