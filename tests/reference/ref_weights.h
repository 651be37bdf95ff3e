// Deterministic random fp32 weights of a whole model for the CPU oracle (reference/model.h), from
// the same per-tensor generator as the GPU executors' random presets (ref::random_weights).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "graph/model_config.h"
#include "reference/model.h"
#include "reference/pipeline_oracle.h"

namespace megaops::testing {

inline ref::Weights random_ref_weights(const ModelConfig& cfg, uint64_t seed) {
  return ref::random_weights(cfg, seed);
}

// The weights a GPU executor built with random_filler(seed) holds, as the oracle's fp32: the same
// values rounded to bf16 (GPU tests that compare an executor with the oracle).
template <typename Filler>
ref::Weights bf16_reference_weights(const ModelConfig& cfg, const Filler& fill) {
  ref::Weights w;
  w.cfg = cfg;
  const std::vector<WeightSpec> specs = expected_weights(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t n = 1;
    for (int64_t d : specs[i].shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    fill(specs[i], i, v.data());
    round_to_bf16(v.data(), n);
    w.tensors[specs[i].name] = std::move(v);
  }
  return w;
}

inline std::vector<int> random_prompt(int len, int vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int> p(len);
  for (auto& x : p) x = d(rng);
  return p;
}

}  // namespace megaops::testing
