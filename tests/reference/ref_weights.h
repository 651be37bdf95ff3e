// Deterministic random fp32 weights of a whole model for the CPU oracle (reference/model.h), from
// the same per-tensor generator as the GPU executors' random presets (random_weight_values).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/model_config.h"
#include "reference/model.h"

namespace megaops::testing {

inline ref::Weights random_ref_weights(const ModelConfig& cfg, uint64_t seed) {
  ref::Weights w;
  w.cfg = cfg;
  const std::vector<WeightSpec> specs = expected_weights(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t n = 1;
    for (int64_t d : specs[i].shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    random_weight_values(specs[i], static_cast<uint32_t>(i), seed, 0, n, v.data());
    w.tensors.emplace(specs[i].name, std::move(v));
  }
  return w;
}

}  // namespace megaops::testing
