// config.json parsing and writing: the public configs of real models parse to the known values,
// written configs read back identical, and every malformed or unsupported config is an InputError
// naming the file and the field.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "io/text_file.h"
#include "models/model_config.h"
#include "test_util.h"

namespace megaops {
namespace {

using nlohmann::json;

constexpr const char* ORIGIN = "some/dir/config.json";

std::string corpus(const std::string& name) {
  return std::string(MEGAOPS_SOURCE_DIR) + "/fuzz/corpus/config/" + name;
}

using megaops::testing::expect_input_error;

// A small valid Llama config that each error test breaks in one place.
json tiny_llama_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2
  })");
}

// Parses `j` with a field replaced (or removed when `value` is discarded), expecting an error
// naming ORIGIN, the field and the given fragments.
void expect_field_error(json j, std::initializer_list<std::string> parts) {
  std::vector<std::string> all(parts);
  all.push_back(ORIGIN);
  const std::string text = j.dump();
  testing::expect_input_error([&] { parse_model_config(text, ORIGIN); }, all, text);
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);  // exact: written as the shortest round-trip decimal
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.llama3, b.rope_scaling.llama3);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

TEST(ConfigJson, Llama32_1B) {
  const ModelConfig c = read_model_config(corpus("llama3.2-1b.json"));
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
}

TEST(ConfigJson, Qwen3_06B) {
  const ModelConfig c = read_model_config(corpus("qwen3-0.6b.json"));
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not hidden / heads
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_FALSE(c.rope_scaling.llama3);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
}

TEST(ConfigJson, Transformers5RopeParametersAndDtype) {
  const ModelConfig c = read_model_config(corpus("llama3.1-8b-transformers5.json"));
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.head_dim, 128);  // derived: 4096 / 32
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
}

TEST(ConfigJson, Defaults) {
  json j = tiny_llama_json();
  for (const char* k : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "torch_dtype",
                        "bos_token_id", "eos_token_id", "rope_scaling"}) {
    j.erase(k);
  }
  const ModelConfig c = parse_model_config(j.dump(), ORIGIN);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ConfigJson, RoundTripPresets) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset_config(name);
    expect_same(parse_model_config(model_config_to_json(c), "rt"), c);
  }
}

TEST(ConfigJson, RoundTripOddValues) {
  ModelConfig c = preset_config("tiny-qwen3");
  c.torch_dtype = DType::F16;
  c.rms_norm_eps = 3.3e-7f;
  c.rope_theta = 12345.678f;
  c.bos_token_id = -1;
  c.eos_token_ids = {};
  c.tie_word_embeddings = false;
  expect_same(parse_model_config(model_config_to_json(c), "rt"), c);
  c.eos_token_ids = {3, 4};
  c.torch_dtype = DType::F32;
  expect_same(parse_model_config(model_config_to_json(c), "rt"), c);
}

TEST(ConfigJson, WrittenJsonHasHfFields) {
  const json j = json::parse(model_config_to_json(preset_config("qwen3-0.6b")));
  EXPECT_EQ(j["model_type"], "qwen3");
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(j["head_dim"], 128);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["initializer_range"], 0.02);
  EXPECT_EQ(j["use_cache"], true);
  EXPECT_EQ(j["rms_norm_eps"].dump(), "1e-06");
  const json l = json::parse(model_config_to_json(preset_config("llama3.2-1b")));
  EXPECT_EQ(l["model_type"], "llama");
  EXPECT_EQ(l["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(l["mlp_bias"], false);
}

TEST(ConfigJson, MalformedJson) {
  expect_input_error(
      [] { parse_model_config(read_text_file(corpus("broken-truncated.json")), ORIGIN); },
      {ORIGIN, "malformed JSON"});
  expect_input_error([] { parse_model_config("[1, 2]", ORIGIN); },
                     {ORIGIN, "expected a JSON object"});
}

// Regression: error messages used to dump() the offending value, which recursed once per level.
TEST(ConfigJson, DeeplyNestedValuesAreErrorsNotStackOverflows) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_input_error([&] { parse_model_config(deep, ORIGIN); },
                     {ORIGIN, "expected a JSON object, found array [[[[...]]]]"});
  json j = tiny_llama_json();
  j.erase("hidden_size");
  std::string text = j.dump();
  text.insert(1, "\"hidden_size\": " + deep + ", ");
  expect_input_error([&] { parse_model_config(text, ORIGIN); },
                     {ORIGIN, "hidden_size: expected integer, found array [[[[...]]]]"});
}

TEST(ConfigJson, MissingFile) {
  expect_input_error([] { read_model_config("/nonexistent/config.json"); },
                     {"/nonexistent/config.json", "cannot open"});
}

TEST(ConfigJson, UnsupportedArchitecture) {
  json j = tiny_llama_json();
  j["architectures"] = {"MistralForCausalLM"};
  expect_field_error(j, {"architectures[0]", "unsupported architecture \"MistralForCausalLM\""});
  j["architectures"] = json::array();
  expect_field_error(j, {"architectures", "non-empty array"});
  j.erase("architectures");
  expect_field_error(j, {"architectures", "missing"});
}

TEST(ConfigJson, ModelTypeMismatch) {
  json j = tiny_llama_json();
  j["model_type"] = "qwen3";
  expect_field_error(j, {"model_type", "expected \"llama\""});
}

TEST(ConfigJson, ZeroAndNegativeSizes) {
  for (const char* field :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings"}) {
    json j = tiny_llama_json();
    j["head_dim"] = 16;  // so a bad hidden_size / heads is reported as such, not as a division
    j[field] = -3;
    expect_field_error(j, {std::string(field) + ": expected positive integer, found -3"});
    j[field] = 0;
    expect_field_error(j, {std::string(field) + ": expected positive integer, found 0"});
  }
  json j = tiny_llama_json();
  j["head_dim"] = 0;
  expect_field_error(j, {"head_dim: expected positive integer, found 0"});
}

TEST(ConfigJson, WrongTypes) {
  json j = tiny_llama_json();
  j["hidden_size"] = 64.5;
  expect_field_error(j, {"hidden_size: expected integer, found 64.5"});
  j = tiny_llama_json();
  j["hidden_size"] = "64";
  expect_field_error(j, {"hidden_size: expected integer, found \"64\""});
  j = tiny_llama_json();
  j["vocab_size"] = 4294967296;
  expect_field_error(j, {"vocab_size: expected integer that fits in 32 bits"});
  j = tiny_llama_json();
  j["tie_word_embeddings"] = 1;
  expect_field_error(j, {"tie_word_embeddings: expected true or false"});
  j = tiny_llama_json();
  j.erase("num_hidden_layers");
  expect_field_error(j, {"num_hidden_layers: missing"});
  j = tiny_llama_json();
  j["torch_dtype"] = "float8";
  expect_field_error(j, {"torch_dtype", "found \"float8\""});
  j = tiny_llama_json();
  j["dtype"] = "float32";
  expect_field_error(j, {"torch_dtype", "expected the same as dtype"});
}

TEST(ConfigJson, HeadsNotDividingHiddenSize) {
  json j = tiny_llama_json();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 2;
  expect_field_error(j, {"num_attention_heads", "divisor of hidden_size 64", "found 6"});
  j["head_dim"] = 16;  // explicit head_dim: hidden need not be heads * head_dim
  EXPECT_EQ(parse_model_config(j.dump(), ORIGIN).q_dim(), 96);
}

TEST(ConfigJson, GqaGroupsNotDividingHeads) {
  json j = tiny_llama_json();
  j["num_key_value_heads"] = 3;
  expect_field_error(j, {"num_key_value_heads", "GQA groups don't divide heads", "found 3"});
}

TEST(ConfigJson, HeadDimLimits) {
  json j = tiny_llama_json();
  j["head_dim"] = 15;
  expect_field_error(j, {"head_dim", "even", "found 15"});
  j["head_dim"] = 512;
  expect_field_error(j, {"head_dim", "<= 256", "found 512"});
  j["head_dim"] = 1 << 30;
  expect_field_error(j, {"head_dim"});
}

TEST(ConfigJson, SizesMustBeMultiplesOf8) {
  json j = tiny_llama_json();
  j["hidden_size"] = 68;
  j["head_dim"] = 16;
  expect_field_error(j, {"hidden_size", "multiple of 8", "16-byte", "found 68"});
  j = tiny_llama_json();
  j["intermediate_size"] = 100;
  expect_field_error(j, {"intermediate_size", "multiple of 8", "found 100"});
}

TEST(ConfigJson, UnsupportedRopeScaling) {
  json j = tiny_llama_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_field_error(j, {"rope_scaling.rope_type", "unsupported RoPE scaling type \"yarn\""});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  expect_field_error(j, {"rope_scaling.type", "\"linear\""});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_field_error(j, {"rope_scaling.low_freq_factor", "missing"});
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 4.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  expect_field_error(j, {"rope_scaling.high_freq_factor", "low_freq_factor < high_freq_factor"});
  j["rope_scaling"] = "llama3";
  expect_field_error(j, {"rope_scaling", "expected object or null"});
}

TEST(ConfigJson, UnsupportedFeatures) {
  json j = tiny_llama_json();
  j["attention_bias"] = true;
  expect_field_error(j, {"attention_bias", "unsupported"});
  j = tiny_llama_json();
  j["mlp_bias"] = true;
  expect_field_error(j, {"mlp_bias", "unsupported"});
  j = tiny_llama_json();
  j["hidden_act"] = "gelu";
  expect_field_error(j, {"hidden_act", "\"gelu\""});
  expect_input_error(
      [] { parse_model_config(read_text_file(corpus("broken-sliding-window.json")), ORIGIN); },
      {ORIGIN, "use_sliding_window", "unsupported"});
  j = tiny_llama_json();
  j["layer_types"] = {"full_attention", "sliding_attention"};
  expect_field_error(j, {"layer_types", "\"sliding_attention\""});
}

TEST(ConfigJson, TokenIds) {
  json j = tiny_llama_json();
  j["eos_token_id"] = {2, 300};
  expect_field_error(j, {"eos_token_id", "[0, 256)", "found 300"});
  j["eos_token_id"] = -1;
  expect_field_error(j, {"eos_token_id", "non-negative"});
  j["eos_token_id"] = {1, 2};
  EXPECT_EQ(parse_model_config(j.dump(), ORIGIN).eos_token_ids, (std::vector<int>{1, 2}));
  j["bos_token_id"] = 256;
  expect_field_error(j, {"bos_token_id", "below vocab_size 256"});
}

TEST(ConfigJson, BadNumbers) {
  json j = tiny_llama_json();
  j["rms_norm_eps"] = 0.0;
  expect_field_error(j, {"rms_norm_eps", "positive"});
  j["rms_norm_eps"] = 1e300;
  expect_field_error(j, {"rms_norm_eps", "float range"});
  j = tiny_llama_json();
  j["rope_theta"] = -1.0;
  expect_field_error(j, {"rope_theta", "positive"});
}

TEST(ConfigJson, ValidateConstructedConfig) {
  ModelConfig c = preset_config("tiny-llama3");
  validate_model_config(c, "preset");
  c.num_kv_heads = 3;
  expect_input_error([&] { validate_model_config(c, "preset"); },
                     {"preset: num_key_value_heads", "GQA"});
}

}  // namespace
}  // namespace megaops
