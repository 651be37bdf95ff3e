// See model_source.h.
#include "model_source.h"

#ifdef MEGAOPS_HAVE_CUDA

#include <algorithm>
#include <chrono>

#include "core/counter_rng.h"
#include "core/error.h"
#include "models/model_config.h"

namespace megaops::cli {

ModelSource open_model_source(const std::string& model, const std::string& preset, uint64_t seed) {
  if (model.empty() == preset.empty())
    throw_input_error("--model/--preset", "", "give exactly one of --model DIR or --preset NAME");
  ModelSource src;
  if (!model.empty()) {
    src.ckpt = std::make_unique<Checkpoint>(Checkpoint::open(model));
    src.cfg = src.ckpt->config();
    src.weights = checkpoint_filler(*src.ckpt);
    src.name = model;
  } else {
    src.cfg = preset_config(preset);
    src.weights = random_filler(seed);
    src.name = preset;
  }
  return src;
}

std::vector<std::vector<int>> make_prompts(const ModelConfig& cfg, int batch, int len,
                                           uint64_t seed) {
  std::vector<std::vector<int>> prompts(batch, std::vector<int>(len));
  for (int s = 0; s < batch; ++s)
    for (int i = 0; i < len; ++i)
      prompts[s][i] = static_cast<int>(counter_random(seed, s, i) % cfg.vocab_size);
  return prompts;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_decode_step_us(ConventionalExecutor& ex, const std::vector<std::vector<int>>& prompts,
                           int steps, int repeats) {
  std::vector<double> per_step;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up and captures
    ex.prefill(prompts);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) ex.decode_step();
    const auto t1 = std::chrono::steady_clock::now();
    if (r > 0)
      per_step.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / steps);
  }
  return median(per_step);
}

}  // namespace megaops::cli

#endif
