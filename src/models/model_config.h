// A model's description (graph/model_config.h) read from a Hugging Face config.json and validated,
// written back as one, or taken from the named presets of real architectures.
#pragma once

#include <string>
#include <vector>

#include "graph/model_config.h"

namespace megaops {

// Reads and validates config.json. Throws InputError "PATH: FIELD: expected ..., found ..." on
// anything malformed, missing or unsupported.
ModelConfig read_model_config(const std::string& path);

// Parses config.json text; `origin` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// Serialises to HF config.json text (what init-random writes and HF transformers reads).
std::string model_config_to_json(const ModelConfig& cfg);

// Checks sizes and divisibility; throws InputError naming the field. Called by the parser.
void validate_model_config(const ModelConfig& cfg, const std::string& origin);

// Named configurations of real architectures (llama3.2-1b, llama3.1-8b, qwen3-0.6b, qwen3-8b,
// tiny-llama3, tiny-qwen3). Throws InputError listing the known names for an unknown one.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace megaops
