// The tensor-parallel partition (graph/tensor_parallel.h) and the CPU oracle that runs it
// (reference/model.h with tp > 1): shards cover every row and column exactly once, bad splits
// get one-line errors, and a TP forward over 2 and 4 ranks gives the logits of the whole model
// (up to fp32 summation order) through prefill and decode, tied and untied embeddings, with and
// without Qwen3's q/k norms, and an LM head whose rows do not divide evenly.
#include "graph/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "models/checkpoint.h"
#include "models/model_config.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/ref_weights.h"
#include "test_util.h"

namespace megaops {
namespace {

// tiny presets have 2 kv heads; this one splits 4 ways and has an uneven vocabulary.
ModelConfig four_way(const std::string& preset) {
  ModelConfig c = preset_config(preset);
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 16;
  c.intermediate_size = 192;
  c.vocab_size = 250;  // 63, 63, 63, 61 rows per rank
  return c;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(TensorParallel, ShardsCoverEveryWeightOnce) {
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"})
    for (int tp : {1, 2, 4}) {
      const ModelConfig cfg = tp == 4 ? four_way(preset) : preset_config(preset);
      for (const WeightSpec& spec : expected_weights(cfg)) {
        const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
        std::vector<int> covered(static_cast<size_t>(rows * cols), 0);
        for (int r = 0; r < tp; ++r) {
          const TpShape s = tp_shape(cfg, tp, r);
          const TpSlice sl = tp_slice(cfg, s, spec.name);
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
              const bool mine = sl.split == TpSplit::Replicated ||
                                (sl.split == TpSplit::Rows && i >= sl.begin && i < sl.end) ||
                                (sl.split == TpSplit::Cols && j >= sl.begin && j < sl.end);
              covered[static_cast<size_t>(i * cols + j)] += mine;
            }
        }
        const TpSlice s0 = tp_slice(cfg, tp_shape(cfg, tp, 0), spec.name);
        const int want = s0.split == TpSplit::Replicated ? tp : 1;
        EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [&](int c) { return c == want; }))
            << preset << " tp " << tp << " " << spec.name;
      }
      // Tied: the embedding table as LM head is cut by vocabulary rows.
      int rows = 0;
      for (int r = 0; r < tp; ++r) {
        const TpShape s = tp_shape(cfg, tp, r);
        const TpSlice sl = tp_slice(cfg, s, "model.embed_tokens.weight", true);
        EXPECT_EQ(sl.split, TpSplit::Rows);
        EXPECT_EQ(sl.begin, rows);
        rows = static_cast<int>(sl.end);
      }
      EXPECT_EQ(rows, cfg.vocab_size);
    }
}

TEST(TensorParallel, CutTakesRowsAndColumns) {
  const std::vector<float> m = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // 3 x 4
  EXPECT_EQ(tp_cut(m, 3, 4, {TpSplit::Rows, 1, 3}), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(tp_cut(m, 3, 4, {TpSplit::Cols, 1, 3}), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(tp_cut(m, 3, 4, {}), m);
  EXPECT_THROW(tp_cut(m, 4, 4, {}), Error);
}

TEST(TensorParallel, BadSplitsNameTheField) {
  const ModelConfig cfg = preset_config("tiny-llama3");  // 4 heads, 2 kv heads, 256 features
  testing::expect_input_error([&] { tp_shape(cfg, 0, 0); }, {"tp", "expected >= 1", "0"});
  testing::expect_input_error([&] { tp_shape(cfg, 2, 2); }, {"rank", "expected 0..1", "2"});
  testing::expect_input_error([&] { tp_shape(cfg, 4, 0); },
                              {"config.json", "num_key_value_heads", "multiple of tp = 4", "2"});
  ModelConfig odd = cfg;
  odd.intermediate_size = 255;
  testing::expect_input_error([&] { tp_shape(odd, 2, 0); },
                              {"intermediate_size", "multiple of tp = 2", "255"});
  testing::expect_input_error([&] { tp_slice(cfg, tp_shape(cfg, 2, 0), "model.nope.weight"); },
                              {"model.nope.weight"});
  const ref::Weights w = testing::random_ref_weights(cfg, 1);
  testing::expect_input_error([&] { ref::Model(w, 16, 4); }, {"num_key_value_heads"});
}

// The TP oracle against the whole model: prefill 7 tokens, then 6 decode steps.
TEST(TensorParallel, ReferenceForwardMatchesTheWholeModel) {
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"})
    for (int tp : {2, 4}) {
      const ModelConfig cfg = tp == 4 ? four_way(preset) : preset_config(preset);
      const ref::Weights w = testing::random_ref_weights(cfg, 7 + tp);
      ref::Model whole(w, 32), split(w, 32, tp);
      EXPECT_EQ(split.tp(), tp);
      std::mt19937 rng(tp);
      std::vector<int> tokens(7);
      for (int& t : tokens) t = static_cast<int>(rng() % cfg.vocab_size);
      for (int step = 0; step < 7; ++step) {
        const std::vector<float> a = whole.forward(tokens), b = split.forward(tokens);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_LE(rel_err(b, a), 1e-5) << preset << " tp " << tp << " step " << step;
        const int last = static_cast<int>(tokens.size()) - 1;
        const int next =
            ref::argmax(a.data() + static_cast<size_t>(last) * cfg.vocab_size, cfg.vocab_size);
        EXPECT_EQ(
            ref::argmax(b.data() + static_cast<size_t>(last) * cfg.vocab_size, cfg.vocab_size),
            next)
            << preset << " tp " << tp << " step " << step;
        tokens = {next};
      }
    }
}

}  // namespace
}  // namespace megaops
