// Reading, validating and writing Hugging Face config.json for the architectures megaops runs
// (LlamaForCausalLM, Qwen3ForCausalLM). Anything the kernels do not implement (biases, sliding
// windows, other RoPE scalings) is rejected here with the field named, rather than producing wrong
// numbers later. Written output loads in HF transformers (legacy rope_theta / rope_scaling keys,
// which both 4.x and 5.x accept).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_describe.h"
#include "io/text_file.h"
#include "models/model_config.h"

namespace megaops {
namespace {

using nlohmann::json;

// Largest head dimension the attention kernels are built for.
constexpr int MAX_HEAD_DIM = 256;

std::string describe(const json& v) {
  if (v.is_object()) return "object " + describe_json(v);
  if (v.is_array()) return "array " + describe_json(v);
  return describe_json(v);
}

// Reads an optional field; null counts as absent, as HF writes null for unset options.
const json* find_field(const json& root, const char* field) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) return nullptr;
  return &*it;
}

int as_int(const json& v, const std::string& origin, const std::string& field) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      throw_input_error(origin, field, "expected integer that fits in 32 bits, found " + v.dump());
    }
    return static_cast<int>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) {
      throw_input_error(origin, field, "expected integer that fits in 32 bits, found " + v.dump());
    }
    return static_cast<int>(i);
  }
  throw_input_error(origin, field, "expected integer, found " + describe(v));
}

int required_int(const json& root, const char* field, const std::string& origin) {
  const json* v = find_field(root, field);
  if (!v) throw_input_error(origin, field, "missing (expected integer)");
  return as_int(*v, origin, field);
}

float as_float(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_number()) throw_input_error(origin, field, "expected number, found " + describe(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
    throw_input_error(origin, field,
                      "expected finite number within float range, found " + v.dump());
  }
  return static_cast<float>(d);
}

bool optional_bool(const json& root, const char* field, bool fallback, const std::string& origin) {
  const json* v = find_field(root, field);
  if (!v) return fallback;
  if (!v->is_boolean())
    throw_input_error(origin, field, "expected true or false, found " + describe(*v));
  return v->get<bool>();
}

std::string as_string(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_string()) throw_input_error(origin, field, "expected string, found " + describe(v));
  return v.get<std::string>();
}

Arch parse_arch(const json& root, const std::string& origin) {
  const json* archs = find_field(root, "architectures");
  if (!archs)
    throw_input_error(origin, "architectures", "missing (expected [\"LlamaForCausalLM\"])");
  if (!archs->is_array() || archs->empty()) {
    throw_input_error(origin, "architectures",
                      "expected non-empty array, found " + describe(*archs));
  }
  const std::string name = as_string((*archs)[0], origin, "architectures[0]");
  if (name == "LlamaForCausalLM") return Arch::Llama;
  if (name == "Qwen3ForCausalLM") return Arch::Qwen3;
  throw_input_error(origin, "architectures[0]",
                    "unsupported architecture " + describe((*archs)[0]) +
                        " (supported: LlamaForCausalLM, Qwen3ForCausalLM)");
}

DType parse_torch_dtype(const std::string& s, const std::string& origin, const char* field) {
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16") return DType::F16;
  if (s == "float32") return DType::F32;
  throw_input_error(
      origin, field,
      "expected \"bfloat16\", \"float16\" or \"float32\", found " + describe(json(s)));
}

const char* torch_dtype_string(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
  }
  return "bfloat16";
}

// transformers 5.x moved RoPE settings into "rope_parameters" (with rope_theta inside); older files
// use top-level rope_theta and "rope_scaling". Both describe the same thing, so accept either.
void parse_rope(const json& root, ModelConfig* cfg, const std::string& origin) {
  if (const json* theta = find_field(root, "rope_theta")) {
    cfg->rope_theta = as_float(*theta, origin, "rope_theta");
  }
  const char* field = "rope_scaling";
  const json* scaling = find_field(root, "rope_scaling");
  if (const json* params = find_field(root, "rope_parameters")) {
    if (scaling) {
      throw_input_error(origin, "rope_parameters",
                        "expected only one of rope_parameters and "
                        "rope_scaling, found both");
    }
    scaling = params;
    field = "rope_parameters";
  }
  if (!scaling) return;
  const std::string f = field;
  if (!scaling->is_object())
    throw_input_error(origin, f, "expected object or null, found " + describe(*scaling));
  if (const json* theta = find_field(*scaling, "rope_theta")) {
    cfg->rope_theta = as_float(*theta, origin, f + ".rope_theta");
  }
  const json* type = find_field(*scaling, "rope_type");
  std::string type_field = f + ".rope_type";
  if (!type) {
    type = find_field(*scaling, "type");
    type_field = f + ".type";
  }
  if (!type) throw_input_error(origin, f + ".rope_type", "missing");
  const std::string type_name = as_string(*type, origin, type_field);
  if (type_name == "default") return;
  if (type_name != "llama3") {
    throw_input_error(origin, type_field,
                      "unsupported RoPE scaling type " + describe(*type) +
                          " (supported: \"llama3\", \"default\")");
  }
  RopeScaling& rs = cfg->rope_scaling;
  rs.llama3 = true;
  auto need = [&](const char* name) -> const json& {
    const json* v = find_field(*scaling, name);
    if (!v) throw_input_error(origin, f + "." + name, "missing (required for rope_type llama3)");
    return *v;
  };
  rs.factor = as_float(need("factor"), origin, f + ".factor");
  rs.low_freq_factor = as_float(need("low_freq_factor"), origin, f + ".low_freq_factor");
  rs.high_freq_factor = as_float(need("high_freq_factor"), origin, f + ".high_freq_factor");
  rs.original_max_position_embeddings = as_int(need("original_max_position_embeddings"), origin,
                                               f + ".original_max_position_embeddings");
}

void parse_token_ids(const json& root, ModelConfig* cfg, const std::string& origin) {
  if (const json* bos = find_field(root, "bos_token_id")) {
    cfg->bos_token_id = as_int(*bos, origin, "bos_token_id");
    if (cfg->bos_token_id < 0) {
      throw_input_error(
          origin, "bos_token_id",
          "expected non-negative integer, found " + std::to_string(cfg->bos_token_id));
    }
  }
  const json* eos = find_field(root, "eos_token_id");
  if (!eos) return;
  std::vector<const json*> items;
  if (eos->is_array()) {
    for (const json& e : *eos) items.push_back(&e);
  } else {
    items.push_back(eos);
  }
  for (const json* e : items) {
    const int id = as_int(*e, origin, "eos_token_id");
    if (id < 0) {
      throw_input_error(origin, "eos_token_id",
                        "expected non-negative integer, found " + std::to_string(id));
    }
    cfg->eos_token_ids.push_back(id);
  }
}

// Features HF configs can switch on that megaops' kernels do not implement.
void reject_unsupported(const json& root, const std::string& origin) {
  for (const char* field : {"attention_bias", "mlp_bias"}) {
    if (optional_bool(root, field, false, origin)) {
      throw_input_error(origin, field, "unsupported: megaops has no bias terms (expected false)");
    }
  }
  if (optional_bool(root, "use_sliding_window", false, origin)) {
    throw_input_error(origin, "use_sliding_window",
                      "unsupported: megaops implements full attention only (expected false)");
  }
  if (const json* types = find_field(root, "layer_types")) {
    if (!types->is_array()) {
      throw_input_error(origin, "layer_types", "expected array, found " + describe(*types));
    }
    for (const json& t : *types) {
      if (t != "full_attention") {
        throw_input_error(
            origin, "layer_types",
            "unsupported layer type " + describe(t) + " (expected \"full_attention\")");
      }
    }
  }
  if (const json* act = find_field(root, "hidden_act")) {
    if (as_string(*act, origin, "hidden_act") != "silu") {
      throw_input_error(origin, "hidden_act",
                        "unsupported activation " + describe(*act) + " (expected \"silu\")");
    }
  }
}

// Returns v as a JSON number whose decimal form is the shortest one that reads back as the same
// float, so 1e-5f is written as 1e-05 rather than 9.999999747378752e-06.
json float_json(float v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  *res.ptr = '\0';
  return json(std::strtod(buf, nullptr));
}

void require_positive(int value, const char* field, const std::string& origin) {
  if (value <= 0) {
    throw_input_error(origin, field, "expected positive integer, found " + std::to_string(value));
  }
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
    if (auto pos = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    throw_input_error(origin, "", "malformed JSON: " + what);
  }
  if (!root.is_object()) {
    throw_input_error(origin, "", "expected a JSON object, found " + describe(root));
  }

  ModelConfig cfg;
  cfg.arch = parse_arch(root, origin);
  if (const json* mt = find_field(root, "model_type")) {
    const std::string expected = cfg.arch == Arch::Llama ? "llama" : "qwen3";
    if (as_string(*mt, origin, "model_type") != expected) {
      throw_input_error(
          origin, "model_type",
          "expected \"" + expected + "\" for " + arch_name(cfg.arch) + ", found " + describe(*mt));
    }
  }
  reject_unsupported(root, origin);

  cfg.vocab_size = required_int(root, "vocab_size", origin);
  cfg.hidden_size = required_int(root, "hidden_size", origin);
  cfg.intermediate_size = required_int(root, "intermediate_size", origin);
  cfg.num_layers = required_int(root, "num_hidden_layers", origin);
  cfg.num_heads = required_int(root, "num_attention_heads", origin);
  cfg.max_position_embeddings = required_int(root, "max_position_embeddings", origin);
  const json* kv = find_field(root, "num_key_value_heads");
  cfg.num_kv_heads = kv ? as_int(*kv, origin, "num_key_value_heads") : cfg.num_heads;

  if (const json* hd = find_field(root, "head_dim")) {
    cfg.head_dim = as_int(*hd, origin, "head_dim");
  } else {
    // Without an explicit head_dim, HF derives it as hidden_size / num_attention_heads.
    require_positive(cfg.hidden_size, "hidden_size", origin);
    require_positive(cfg.num_heads, "num_attention_heads", origin);
    if (cfg.hidden_size % cfg.num_heads != 0) {
      throw_input_error(origin, "num_attention_heads",
                        "expected a divisor of hidden_size " + std::to_string(cfg.hidden_size) +
                            " (head_dim is not given), found " + std::to_string(cfg.num_heads));
    }
    cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  }

  if (const json* eps = find_field(root, "rms_norm_eps")) {
    cfg.rms_norm_eps = as_float(*eps, origin, "rms_norm_eps");
  } else {
    throw_input_error(origin, "rms_norm_eps", "missing (expected number)");
  }
  parse_rope(root, &cfg, origin);
  cfg.tie_word_embeddings = optional_bool(root, "tie_word_embeddings", false, origin);

  const json* dt = find_field(root, "dtype");
  const json* tdt = find_field(root, "torch_dtype");
  if (dt) cfg.torch_dtype = parse_torch_dtype(as_string(*dt, origin, "dtype"), origin, "dtype");
  if (tdt) {
    const DType t =
        parse_torch_dtype(as_string(*tdt, origin, "torch_dtype"), origin, "torch_dtype");
    if (dt && t != cfg.torch_dtype) {
      throw_input_error(origin, "torch_dtype",
                        "expected the same as dtype " + dt->dump() + ", found " + tdt->dump());
    }
    cfg.torch_dtype = t;
  }
  parse_token_ids(root, &cfg, origin);

  validate_model_config(cfg, origin);
  return cfg;
}

ModelConfig read_model_config(const std::string& path) {
  return parse_model_config(read_text_file(path), path);
}

void validate_model_config(const ModelConfig& cfg, const std::string& origin) {
  require_positive(cfg.vocab_size, "vocab_size", origin);
  require_positive(cfg.hidden_size, "hidden_size", origin);
  require_positive(cfg.intermediate_size, "intermediate_size", origin);
  require_positive(cfg.num_layers, "num_hidden_layers", origin);
  require_positive(cfg.num_heads, "num_attention_heads", origin);
  require_positive(cfg.num_kv_heads, "num_key_value_heads", origin);
  require_positive(cfg.head_dim, "head_dim", origin);
  require_positive(cfg.max_position_embeddings, "max_position_embeddings", origin);

  if (cfg.num_heads % cfg.num_kv_heads != 0) {
    throw_input_error(origin, "num_key_value_heads",
                      "GQA groups don't divide heads: expected a divisor of num_attention_heads " +
                          std::to_string(cfg.num_heads) + ", found " +
                          std::to_string(cfg.num_kv_heads));
  }
  if (cfg.head_dim % 2 != 0 || cfg.head_dim > MAX_HEAD_DIM) {
    throw_input_error(origin, "head_dim",
                      "expected an even number <= " + std::to_string(MAX_HEAD_DIM) +
                          " (RoPE rotates pairs; attention kernels stop at 256), found " +
                          std::to_string(cfg.head_dim));
  }
  // q_dim() and kv_dim() are ints; keep them from overflowing.
  if (static_cast<int64_t>(cfg.num_heads) * cfg.head_dim > std::numeric_limits<int>::max()) {
    throw_input_error(origin, "num_attention_heads",
                      "num_attention_heads * head_dim overflows 32 bits, found " +
                          std::to_string(cfg.num_heads) + " * " + std::to_string(cfg.head_dim));
  }
  for (auto [value, field] : {std::pair{cfg.hidden_size, "hidden_size"},
                              std::pair{cfg.intermediate_size, "intermediate_size"}}) {
    if (value % 8 != 0) {
      throw_input_error(origin, field,
                        "expected a multiple of 8 (kernels read weight rows as 16-byte vectors), "
                        "found " +
                            std::to_string(value));
    }
  }
  if (!(cfg.rms_norm_eps > 0.0f) || !std::isfinite(cfg.rms_norm_eps)) {
    throw_input_error(origin, "rms_norm_eps",
                      "expected positive finite number, found " + std::to_string(cfg.rms_norm_eps));
  }
  if (!(cfg.rope_theta > 0.0f) || !std::isfinite(cfg.rope_theta)) {
    throw_input_error(origin, "rope_theta",
                      "expected positive finite number, found " + std::to_string(cfg.rope_theta));
  }
  if (cfg.rope_scaling.llama3) {
    const RopeScaling& rs = cfg.rope_scaling;
    if (!(rs.factor >= 1.0f) || !std::isfinite(rs.factor)) {
      throw_input_error(origin, "rope_scaling.factor",
                        "expected finite number >= 1, found " + std::to_string(rs.factor));
    }
    if (!(rs.low_freq_factor > 0.0f) || !std::isfinite(rs.high_freq_factor) ||
        !(rs.high_freq_factor > rs.low_freq_factor)) {
      throw_input_error(origin, "rope_scaling.high_freq_factor",
                        "expected 0 < low_freq_factor < high_freq_factor, found " +
                            std::to_string(rs.low_freq_factor) + " and " +
                            std::to_string(rs.high_freq_factor));
    }
    require_positive(rs.original_max_position_embeddings,
                     "rope_scaling.original_max_position_embeddings", origin);
  }
  if (cfg.bos_token_id >= cfg.vocab_size) {
    throw_input_error(origin, "bos_token_id",
                      "expected a token id below vocab_size " + std::to_string(cfg.vocab_size) +
                          ", found " + std::to_string(cfg.bos_token_id));
  }
  for (int id : cfg.eos_token_ids) {
    if (id < 0 || id >= cfg.vocab_size) {
      throw_input_error(origin, "eos_token_id",
                        "expected a token id in [0, " + std::to_string(cfg.vocab_size) +
                            "), found " + std::to_string(id));
    }
  }
}

std::string model_config_to_json(const ModelConfig& cfg) {
  using ojson = nlohmann::ordered_json;
  const bool llama = cfg.arch == Arch::Llama;
  ojson j;
  j["architectures"] = {arch_name(cfg.arch)};
  j["model_type"] = llama ? "llama" : "qwen3";
  j["vocab_size"] = cfg.vocab_size;
  j["hidden_size"] = cfg.hidden_size;
  j["intermediate_size"] = cfg.intermediate_size;
  j["num_hidden_layers"] = cfg.num_layers;
  j["num_attention_heads"] = cfg.num_heads;
  j["num_key_value_heads"] = cfg.num_kv_heads;
  j["head_dim"] = cfg.head_dim;
  j["max_position_embeddings"] = cfg.max_position_embeddings;
  j["rms_norm_eps"] = float_json(cfg.rms_norm_eps);
  j["rope_theta"] = float_json(cfg.rope_theta);
  if (cfg.rope_scaling.llama3) {
    const RopeScaling& rs = cfg.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", float_json(rs.factor)},
                         {"low_freq_factor", float_json(rs.low_freq_factor)},
                         {"high_freq_factor", float_json(rs.high_freq_factor)},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = cfg.tie_word_embeddings;
  j["dtype"] = torch_dtype_string(cfg.torch_dtype);
  j["bos_token_id"] = cfg.bos_token_id >= 0 ? ojson(cfg.bos_token_id) : ojson(nullptr);
  if (cfg.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (cfg.eos_token_ids.size() == 1) {
    j["eos_token_id"] = cfg.eos_token_ids[0];
  } else {
    j["eos_token_id"] = cfg.eos_token_ids;
  }
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (llama) {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = cfg.num_layers;
  }
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace megaops
