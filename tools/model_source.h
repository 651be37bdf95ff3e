// What `bench` and `profile` share: a model from a checkpoint directory or from a named preset
// with deterministic random weights, and deterministic prompts.
#pragma once

#ifdef MEGAOPS_HAVE_CUDA

#include <memory>
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "runtime/conventional.h"

namespace megaops::cli {

struct ModelSource {
  std::unique_ptr<Checkpoint> ckpt;  // null for a preset
  ModelConfig cfg;
  WeightFiller weights;
  std::string name;
};

// Exactly one of `model` (a directory) and `preset` must be non-empty.
ModelSource open_model_source(const std::string& model, const std::string& preset, uint64_t seed);

// `batch` prompts of `len` ids each, a function of (seed, sequence, index) only.
std::vector<std::vector<int>> make_prompts(const ModelConfig& cfg, int batch, int len,
                                           uint64_t seed);

double median(std::vector<double> v);

// A decode step as `bench` times it: prefill `prompts`, then `steps` decode steps timed on the
// host (graph replays, each waited for), per step; one warm-up round (it also captures), then
// the median of `repeats` rounds, in microseconds. Uses the executor's current backend and PDL.
double time_decode_step_us(ConventionalExecutor& ex, const std::vector<std::vector<int>>& prompts,
                           int steps, int repeats);

}  // namespace megaops::cli

#endif
