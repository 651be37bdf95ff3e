// The fp32 CPU oracle against Hugging Face transformers: tiny random Llama 3 and Qwen 3 checkpoints
// saved by transformers, with the logits transformers computed for a 12-token prompt and 6 greedy
// decode steps (tests/fixtures, made by scripts/make_fixtures.py). This is what anchors the whole
// test pyramid to the real architectures: GPU kernels are judged against the oracle, and the
// oracle is judged here. A missing fixture is a failure, never a skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "reference/model.h"
#include "reference/ops.h"

namespace megaops::ref {
namespace {

// DESIGN.md: fp32 vs fp32 reference within 1e-4 relative, per logits row.
constexpr double TOLERANCE = 1e-4;

std::string fixture_dir(const std::string& name) {
  return std::string(MEGAOPS_SOURCE_DIR) + "/tests/fixtures/" + name;
}

struct Expected {
  std::vector<int> prompt_ids;
  std::vector<float> prefill_logits;  // [prompt, vocab]
  std::vector<int> decode_ids;
  std::vector<float> decode_logits;  // [decode, vocab]
};

std::vector<float> read_f32(const SafetensorsFile& file, const std::string& name) {
  const TensorView* t = file.find(name);
  if (t == nullptr) throw InputError(file.path() + ": tensor '" + name + "' missing");
  std::vector<float> out(t->numel());
  to_float(t->dtype, t->data, out.data(), out.size());
  return out;
}

std::vector<int> to_ids(const std::vector<float>& values) {
  // Ids are stored as F32 (the reader has no integer dtypes); all are small, hence exact.
  return std::vector<int>(values.begin(), values.end());
}

Expected read_expected(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/expected.safetensors");
  Expected e;
  e.prompt_ids = to_ids(read_f32(*file, "prompt_ids"));
  e.prefill_logits = read_f32(*file, "prefill_logits");
  e.decode_ids = to_ids(read_f32(*file, "decode_ids"));
  e.decode_logits = read_f32(*file, "decode_logits");
  return e;
}

// ||out - ref|| / ||ref|| over one row of `vocab` values.
double row_rel_error(const float* out, const float* ref, int vocab) {
  double num = 0.0, den = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// The largest per-row relative error of `out` against `ref`, both [rows, vocab].
double max_row_error(const std::vector<float>& out, const std::vector<float>& ref, int vocab) {
  double worst = 0.0;
  for (size_t r = 0; r * vocab < ref.size(); ++r) {
    worst = std::max(worst, row_rel_error(out.data() + r * vocab, ref.data() + r * vocab, vocab));
  }
  return worst;
}

// The gap between the two largest logits: where it is tiny, the argmax may flip within tolerance.
float top2_gap(const float* logits, int vocab) {
  float first = -INFINITY, second = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    if (logits[i] > first) {
      second = first;
      first = logits[i];
    } else if (logits[i] > second) {
      second = logits[i];
    }
  }
  return first - second;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

class HfFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixture_dir(GetParam());
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/config.json") &&
                std::filesystem::exists(dir_ + "/expected.safetensors"))
        << "fixture " << dir_ << " is missing: run scripts/make_fixtures.py";
    ASSERT_NO_THROW(ckpt_ = std::make_unique<Checkpoint>(Checkpoint::open(dir_)));
    ASSERT_NO_THROW(weights_ = std::make_unique<Weights>(load_weights(*ckpt_)));
    ASSERT_NO_THROW(expected_ = read_expected(dir_));
    vocab_ = weights_->cfg.vocab_size;
    ASSERT_EQ(expected_.prompt_ids.size(), 12u);
    ASSERT_EQ(expected_.prefill_logits.size(), expected_.prompt_ids.size() * vocab_);
    ASSERT_EQ(expected_.decode_logits.size(), expected_.decode_ids.size() * vocab_);
  }

  // Runs the prompt then each decode id through `model`; returns the worst row error and, through
  // `check_rows`, asserts each row against the tolerance.
  double run_fixture(Model& model, bool check_rows) {
    std::vector<float> prefill = model.forward(expected_.prompt_ids);
    double worst = 0.0;
    for (size_t r = 0; r < expected_.prompt_ids.size(); ++r) {
      const double err = row_rel_error(prefill.data() + r * vocab_,
                                       expected_.prefill_logits.data() + r * vocab_, vocab_);
      worst = std::max(worst, err);
      if (check_rows) {
        EXPECT_LE(err, TOLERANCE) << "prefill row " << r;
      }
    }
    for (size_t s = 0; s < expected_.decode_ids.size(); ++s) {
      std::vector<float> logits = model.forward({expected_.decode_ids[s]});
      const float* ref = expected_.decode_logits.data() + s * vocab_;
      const double err = row_rel_error(logits.data(), ref, vocab_);
      worst = std::max(worst, err);
      if (!check_rows) continue;
      EXPECT_LE(err, TOLERANCE) << "decode step " << s;
      // Greedy decoding must agree wherever transformers' choice was not a near tie.
      if (s + 1 < expected_.decode_ids.size() && top2_gap(ref, vocab_) > 1e-3f) {
        EXPECT_EQ(argmax(logits.data(), vocab_), expected_.decode_ids[s + 1]) << "step " << s;
      }
    }
    return worst;
  }

  std::string dir_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Weights> weights_;
  Expected expected_;
  int vocab_ = 0;
};

TEST_P(HfFixtureTest, ConfigReadsAsTheScriptWroteIt) {
  const ModelConfig& c = weights_->cfg;
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  if (GetParam() == "tiny-llama3") {
    EXPECT_EQ(c.arch, Arch::Llama);
    EXPECT_EQ(c.num_layers, 3);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
    EXPECT_TRUE(c.rope_scaling.llama3);
    EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  } else {
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FLOAT_EQ(c.rope_theta, 1000000.0f);
    EXPECT_FALSE(c.rope_scaling.llama3);
  }
}

TEST_P(HfFixtureTest, MatchesTransformersOnPrefillAndDecode) {
  Model model(*weights_, 64);
  const double worst = run_fixture(model, true);
  RecordProperty("worst_row_rel_error", sci(worst));
  EXPECT_EQ(model.pos(), 18);
}

TEST_P(HfFixtureTest, ChunkedPrefillMatchesTransformers) {
  // The prompt in two pieces exercises attention of several queries over an existing cache.
  Model model(*weights_, 64);
  const std::vector<int>& ids = expected_.prompt_ids;
  std::vector<float> first = model.forward(std::vector<int>(ids.begin(), ids.begin() + 5));
  std::vector<float> rest = model.forward(std::vector<int>(ids.begin() + 5, ids.end()));
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_LE(max_row_error(first, expected_.prefill_logits, vocab_), TOLERANCE);
}

TEST_P(HfFixtureTest, ResetStartsAFreshSequence) {
  Model model(*weights_, 64);
  run_fixture(model, false);
  model.reset();
  EXPECT_EQ(model.pos(), 0);
  EXPECT_LE(run_fixture(model, true), TOLERANCE);
}

TEST_P(HfFixtureTest, ComparisonIsSensitiveToOneWeightElement) {
  // If the comparison could not fail, passing it would mean nothing: nudge one element of an early
  // weight by a tenth of the weights' std and demand the logits move by 10x the tolerance. Layer
  // 0's k_proj reaches the logits only through attention, RoPE and (for Qwen3) the k norm.
  for (const char* name :
       {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight"}) {
    Weights perturbed = *weights_;
    perturbed.tensors.at(name)[3] += 0.01f;
    Model model(perturbed, 64);
    const double worst = run_fixture(model, false);
    RecordProperty(std::string("perturbed_") + name, sci(worst));
    EXPECT_GT(worst, 10 * TOLERANCE) << name;
  }
}

TEST_P(HfFixtureTest, RejectsIdsOutsideTheVocabulary) {
  Model model(*weights_, 64);
  try {
    model.forward({5, 99999});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "prompt id 99999 outside the vocabulary [0, 256)");
  }
  EXPECT_THROW(model.forward({-1}), InputError);
  EXPECT_THROW(model.forward({256}), InputError);
  EXPECT_EQ(model.pos(), 0);  // a rejected call leaves the sequence untouched
}

TEST_P(HfFixtureTest, RejectsRunningPastTheMaximumContext) {
  Model model(*weights_, 14);
  model.forward(expected_.prompt_ids);
  model.forward({1, 2});
  try {
    model.forward({3});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "context of 15 tokens exceeds the configured maximum 14");
  }
  EXPECT_EQ(model.pos(), 14);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixtureTest, ::testing::Values("tiny-llama3", "tiny-qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace megaops::ref
