// See model_source.h.
#include "model_source.h"

#ifdef MEGAOPS_HAVE_CUDA

#include "core/counter_rng.h"
#include "core/error.h"

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

}  // namespace megaops::cli

#endif
