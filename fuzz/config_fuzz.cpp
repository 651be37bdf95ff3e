// libFuzzer target for config.json parsing: any text must either yield a config that passes
// validation and survives a write/read round trip, or raise InputError. Anything else is a bug.
// Seed corpus: fuzz/corpus/config/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  megaops::ModelConfig cfg;
  try {
    cfg = megaops::parse_model_config(text, "fuzz");
  } catch (const megaops::InputError&) {
    return 0;
  }
  // A config we accepted must serialise and read back to the same sizes; InputError here is a bug.
  const megaops::ModelConfig back =
      megaops::parse_model_config(megaops::model_config_to_json(cfg), "fuzz-roundtrip");
  if (back.hidden_size != cfg.hidden_size || back.head_dim != cfg.head_dim ||
      back.num_kv_heads != cfg.num_kv_heads || back.rope_theta != cfg.rope_theta ||
      back.rms_norm_eps != cfg.rms_norm_eps || back.eos_token_ids != cfg.eos_token_ids ||
      back.rope_scaling.factor != cfg.rope_scaling.factor) {
    __builtin_trap();
  }
  return 0;
}
