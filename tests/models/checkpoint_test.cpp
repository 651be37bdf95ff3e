// Checkpoint directories: random checkpoints (single file and sharded, tied and untied, every
// dtype) load back with exactly the values random_weight_values defines, and broken directories
// (missing tensor, wrong shape, missing shard, missing config) are InputErrors naming file and
// tensor.
#include "models/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "io/text_file.h"
#include "models/model_config.h"
#include "test_util.h"

namespace megaops {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using megaops::testing::expect_input_error;

// GQA (4 heads, 2 kv heads), untied.
ModelConfig tiny_llama() {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.rope_theta = 500000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// Tied, with q/k norms and head_dim * heads != hidden.
ModelConfig tiny_qwen3() {
  ModelConfig c = tiny_llama();
  c.arch = Arch::Qwen3;
  c.head_dim = 16;
  c.tie_word_embeddings = true;
  c.rms_norm_eps = 1e-6f;
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "megaops_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every loaded weight equals its generated values after rounding through the stored dtype.
  void expect_random_values(const Checkpoint& ckpt, uint64_t seed, DType dtype) {
    const auto specs = expected_weights(ckpt.config());
    for (size_t i = 0; i < specs.size(); ++i) {
      SCOPED_TRACE(specs[i].name);
      const TensorView& t = ckpt.weight(specs[i].name);
      EXPECT_EQ(t.dtype, dtype);
      std::vector<float> want(t.numel());
      random_weight_values(specs[i], static_cast<uint32_t>(i), seed, 0, want.size(), want.data());
      std::vector<uint8_t> stored(want.size() * dtype_size(dtype));
      from_float(dtype, want.data(), stored.data(), want.size());
      to_float(dtype, stored.data(), want.data(), want.size());
      EXPECT_EQ(ckpt.weight_f32(specs[i].name), want);
    }
  }

  // Writes config.json and one model.safetensors with the given tensors (F32, zero-filled).
  void write_manual(const ModelConfig& cfg, const std::vector<WeightSpec>& specs) {
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/config.json") << model_config_to_json(cfg);
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> tensors;
    for (const WeightSpec& s : specs) {
      size_t n = 1;
      for (int64_t d : s.shape) n *= d;
      data.emplace_back(n, 0.5f);
      tensors.push_back({s.name, DType::F32, s.shape, data.back().data(), n * 4});
    }
    write_safetensors(dir_ + "/model.safetensors", tensors);
  }

  std::string dir_;
};

TEST_F(CheckpointTest, SingleFileAllDtypes) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::string dir = dir_ + "/" + dtype_name(dtype);
    write_random_checkpoint(tiny_llama(), dir, 7, dtype, 0, nullptr);
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
    const Checkpoint ckpt = Checkpoint::open(dir);
    EXPECT_EQ(ckpt.dir(), dir);
    EXPECT_EQ(ckpt.config().hidden_size, 32);
    expect_random_values(ckpt, 7, dtype);
    size_t total = 0;
    for (const WeightSpec& s : expected_weights(tiny_llama())) {
      size_t n = 1;
      for (int64_t d : s.shape) n *= d;
      total += n * dtype_size(dtype);
    }
    EXPECT_EQ(ckpt.total_bytes(), total);
  }
}

TEST_F(CheckpointTest, ShardedLoadsWithSameValues) {
  std::vector<std::pair<size_t, size_t>> calls;
  auto progress = [&](size_t done, size_t total) { calls.push_back({done, total}); };
  // The embedding alone is 64*32*2 = 4 KiB in bf16; 5000 bytes forces several shards.
  write_random_checkpoint(tiny_llama(), dir_, 11, DType::BF16, 5000, progress);
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  ASSERT_TRUE(fs::exists(index_path));
  EXPECT_FALSE(fs::exists(dir_ + "/model.safetensors"));
  const json index = json::parse(read_text_file(index_path));
  const auto specs = expected_weights(tiny_llama());
  EXPECT_EQ(index["weight_map"].size(), specs.size());
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items())
    shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  for (size_t i = 1; i <= shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i, shards.size());
    EXPECT_TRUE(shards.count(name)) << name;
  }
  for (const std::string& s : shards) EXPECT_LE(fs::file_size(dir_ + "/" + s), 5000u + 4096u);

  const Checkpoint ckpt = Checkpoint::open(dir_);
  expect_random_values(ckpt, 11, DType::BF16);
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), ckpt.total_bytes());

  ASSERT_FALSE(calls.empty());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, ckpt.total_bytes());
  EXPECT_EQ(calls.back().second, ckpt.total_bytes());

  // Rewriting as a single file removes the index, which would otherwise describe stale shards.
  write_random_checkpoint(tiny_llama(), dir_, 12, DType::BF16, 0, nullptr);
  EXPECT_FALSE(fs::exists(index_path));
  expect_random_values(Checkpoint::open(dir_), 12, DType::BF16);
}

TEST_F(CheckpointTest, LargeTensorSplitsAcrossThreads) {
  // 2^20 + 3 embedding rows' worth of elements: more than one generation block.
  ModelConfig c = tiny_llama();
  c.vocab_size = 32771;
  c.num_layers = 1;
  write_random_checkpoint(c, dir_, 5, DType::F32, 0, nullptr);
  expect_random_values(Checkpoint::open(dir_), 5, DType::F32);
}

// A NaN or Inf anywhere in a weight is an InputError naming the file, the tensor and the first
// bad index, in every dtype, also when the tensor converts in several slices at once (the first
// index wins whichever slice finds its value first); checked by weight_f32 and weight_to_f32 alike.
TEST_F(CheckpointTest, NonFiniteWeightsNameTheFirstBadIndex) {
  ModelConfig c = tiny_llama();
  c.vocab_size = 70001;  // the embedding: 2.24M values, several conversion slices
  c.num_layers = 1;
  const std::string embed = "model.embed_tokens.weight";
  struct Case {
    DType dtype;
    std::vector<size_t> at;
    float value;
    std::string found;
  };
  const float nan = std::nanf(""), inf = INFINITY;
  const Case cases[] = {
      {DType::BF16, {2100000, 600001}, nan, "found NaN at index 600001 (row 18750, column 1)"},
      {DType::F16, {2100000}, -inf, "found -Inf at index 2100000 (row 65625, column 0)"},
      {DType::F32, {0, 5}, inf, "found +Inf at index 0 (row 0, column 0)"},
      {DType::F16, {3}, 70000.0f, "found +Inf at index 3"},  // overflows f16 on writing
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.found);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/config.json") << model_config_to_json(c);
    const auto specs = expected_weights(c);
    std::vector<std::vector<float>> data;
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<TensorToWrite> tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
      size_t n = 1;
      for (int64_t d : specs[i].shape) n *= d;
      data.emplace_back(n);
      random_weight_values(specs[i], static_cast<uint32_t>(i), 1, 0, n, data.back().data());
      if (specs[i].name == embed)
        for (size_t a : k.at) data.back()[a] = k.value;
      bytes.emplace_back(n * dtype_size(k.dtype));
      from_float(k.dtype, data.back().data(), bytes.back().data(), n);
      tensors.push_back(
          {specs[i].name, k.dtype, specs[i].shape, bytes.back().data(), bytes.back().size()});
    }
    write_safetensors(dir_ + "/model.safetensors", tensors);
    const Checkpoint ckpt = Checkpoint::open(dir_);  // opening reads headers only
    const std::vector<std::string> parts = {dir_ + "/model.safetensors", "tensor " + embed,
                                            "expected finite values, " + k.found};
    expect_input_error([&] { ckpt.weight_f32(embed); }, parts);
    std::vector<float> out(ckpt.weight(embed).numel());
    expect_input_error([&] { ckpt.weight_to_f32(embed, out.data()); }, parts);
    EXPECT_NO_THROW(ckpt.weight_f32("model.norm.weight"));  // the other tensors are fine
  }
}

TEST_F(CheckpointTest, TiedHasNoLmHead) {
  write_random_checkpoint(tiny_qwen3(), dir_, 3, DType::F16, 0, nullptr);
  const Checkpoint ckpt = Checkpoint::open(dir_);
  EXPECT_TRUE(ckpt.config().tie_word_embeddings);
  expect_random_values(ckpt, 3, DType::F16);
  EXPECT_EQ(ckpt.weight("model.layers.1.self_attn.q_norm.weight").shape, std::vector<int64_t>{16});
  EXPECT_EQ(ckpt.weight("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{64, 32}));
  expect_input_error([&] { ckpt.weight("lm_head.weight"); }, {dir_, "tensor lm_head.weight"});
}

TEST_F(CheckpointTest, TiedIgnoresSavedLmHeadAndUnknownTensors) {
  auto specs = expected_weights(tiny_qwen3());
  specs.push_back({"lm_head.weight", {64, 32}});
  specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {8}});
  write_manual(tiny_qwen3(), specs);
  const Checkpoint ckpt = Checkpoint::open(dir_);
  EXPECT_EQ(ckpt.weight_f32("model.norm.weight"), std::vector<float>(32, 0.5f));
}

TEST_F(CheckpointTest, UntiedMissingLmHead) {
  auto specs = expected_weights(tiny_llama());
  ASSERT_EQ(specs.back().name, "lm_head.weight");
  specs.pop_back();
  write_manual(tiny_llama(), specs);
  expect_input_error([&] { Checkpoint::open(dir_); }, {dir_, "tensor lm_head.weight: missing"});
}

TEST_F(CheckpointTest, MissingTensor) {
  auto specs = expected_weights(tiny_llama());
  specs.erase(specs.begin() + 3);
  const std::string name = expected_weights(tiny_llama())[3].name;
  write_manual(tiny_llama(), specs);
  expect_input_error([&] { Checkpoint::open(dir_); }, {dir_, "tensor " + name + ": missing"});
}

TEST_F(CheckpointTest, ShapeDisagreesWithConfig) {
  auto specs = expected_weights(tiny_llama());
  for (auto& s : specs) {
    if (s.name == "model.layers.1.self_attn.k_proj.weight") s.shape = {16, 16};
  }
  write_manual(tiny_llama(), specs);
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {dir_ + "/model.safetensors",
                      "tensor model.layers.1.self_attn.k_proj.weight: shape: expected [16, 32], "
                      "found [16, 16]"});
}

TEST_F(CheckpointTest, ShardListedInIndexIsMissing) {
  write_random_checkpoint(tiny_llama(), dir_, 1, DType::BF16, 5000, nullptr);
  const std::string gone = "model-00002-of-";
  std::string removed;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind(gone, 0) == 0) removed = e.path().filename().string();
  }
  ASSERT_FALSE(removed.empty());
  fs::remove(dir_ + "/" + removed);
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {dir_ + "/model.safetensors.index.json", "shard " + removed + " is missing"});
}

TEST_F(CheckpointTest, IndexPointsToWrongShard) {
  write_random_checkpoint(tiny_llama(), dir_, 1, DType::BF16, 5000, nullptr);
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  json index = json::parse(read_text_file(index_path));
  const std::string first = index["weight_map"]["model.embed_tokens.weight"];
  const std::string other = index["weight_map"]["model.norm.weight"];
  ASSERT_NE(first, other);
  index["weight_map"]["model.norm.weight"] = first;
  std::ofstream(index_path) << index.dump();
  expect_input_error(
      [&] { Checkpoint::open(dir_); },
      {dir_ + "/" + first, "tensor model.norm.weight: missing", "model.safetensors.index.json"});
}

TEST_F(CheckpointTest, IndexRejectsPathsOutsideDirectory) {
  write_random_checkpoint(tiny_llama(), dir_, 1, DType::BF16, 5000, nullptr);
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  json index = json::parse(read_text_file(index_path));
  index["weight_map"]["model.norm.weight"] = "../model-00001-of-00009.safetensors";
  std::ofstream(index_path) << index.dump();
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {index_path, "weight_map: model.norm.weight", "inside the checkpoint"});
  std::ofstream(index_path) << "{\"weight_map\": 3}";
  expect_input_error([&] { Checkpoint::open(dir_); }, {index_path, "weight_map"});
}

TEST_F(CheckpointTest, MissingDirectoryConfigOrWeights) {
  expect_input_error([&] { Checkpoint::open(dir_ + "/nope"); }, {dir_ + "/nope", "directory"});
  expect_input_error([&] { Checkpoint::open(dir_); }, {dir_ + "/config.json", "cannot open"});
  std::ofstream(dir_ + "/config.json") << model_config_to_json(tiny_llama());
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {dir_, "model.safetensors or model.safetensors.index.json"});
  std::ofstream(dir_ + "/config.json") << "{";
  expect_input_error([&] { Checkpoint::open(dir_); }, {dir_ + "/config.json", "malformed JSON"});
}

TEST_F(CheckpointTest, CorruptShardIsReportedWithItsPath) {
  write_random_checkpoint(tiny_llama(), dir_, 1, DType::BF16, 0, nullptr);
  fs::resize_file(dir_ + "/model.safetensors", 100);
  expect_input_error([&] { Checkpoint::open(dir_); }, {dir_ + "/model.safetensors"});
}

TEST(RandomWeights, SlicesAgreeAndDistributionsAreRight) {
  const WeightSpec proj{"model.layers.0.mlp.up_proj.weight", {256, 256}};
  const WeightSpec norm{"model.layers.0.input_layernorm.weight", {256}};
  std::vector<float> full(65536), slice(1000);
  random_weight_values(proj, 4, 99, 0, full.size(), full.data());
  random_weight_values(proj, 4, 99, 12345, slice.size(), slice.data());
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), full.begin() + 12345));
  double sum = 0, sq = 0;
  for (float v : full) {
    EXPECT_LE(std::fabs(v), 0.02f * std::sqrt(3.0f));
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / full.size();
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / full.size() - mean * mean), 0.02,
              5e-4);  // std of U(-a, a) = a/sqrt(3)

  std::vector<float> other(1000);
  random_weight_values(proj, 5, 99, 0, other.size(), other.data());
  EXPECT_NE(other, std::vector<float>(full.begin(), full.begin() + 1000));  // index changes values
  random_weight_values(proj, 4, 100, 0, other.size(), other.data());
  EXPECT_NE(other, std::vector<float>(full.begin(), full.begin() + 1000));  // seed changes values

  std::vector<float> n(256);
  random_weight_values(norm, 1, 99, 0, n.size(), n.data());
  for (float v : n) {
    EXPECT_GE(v, 0.9f);
    EXPECT_LE(v, 1.1f);
  }
}

}  // namespace
}  // namespace megaops
