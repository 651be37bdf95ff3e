// The layer prefill's packing and chunking against one-prompt prefill, on the conventional
// executor: several prompts of awkward lengths prefilled together (packed into chunks, sequences
// split across chunk boundaries by small chunk sizes) must give each sequence the logits it gets
// when prefilled alone in one chunk, at its last prompt position and over the decode steps that
// read the KV cache the prefill wrote. With the own tensor-core attention and with cuDNN's SDPA
// (skipped, saying why, where cuDNN cannot be loaded; MEGAOPS_TEST_CUDNN_LIB names the library).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention_cudnn.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "runtime/conventional.h"

namespace megaops {
namespace {

using testing::rel_error;

constexpr int DECODE_STEPS = 4;

// Logits of every sequence [sequence][step][vocab]: after the prefill (step 0), then after each of
// DECODE_STEPS decode steps fed `forced` (the same tokens in every run, so every run's decode
// reads the same sequences).
using RunLogits = std::vector<std::vector<std::vector<float>>>;

RunLogits run_prefill(const ModelConfig& cfg, ExecutorOptions opt,
                      const std::vector<std::vector<int>>& prompts,
                      const std::vector<std::vector<int>>& forced, std::string* note) {
  const int B = static_cast<int>(prompts.size()), V = cfg.vocab_size;
  opt.step_graph = build_step_graph;
  opt.max_seq = 96;
  opt.max_batch = B;
  ConventionalExecutor ex(cfg, random_filler(testing::test_seed()), opt);
  RunLogits out(B);
  ex.prefill(prompts);
  for (int step = 0;; ++step) {
    const std::vector<float> all = ex.last_logits();
    for (int b = 0; b < B; ++b) out[b].emplace_back(all.begin() + b * V, all.begin() + (b + 1) * V);
    if (step == DECODE_STEPS) break;
    std::vector<int> feed(B);
    for (int b = 0; b < B; ++b) feed[b] = forced[b][step];
    ex.decode_step(&feed);
  }
  *note += ex.take_prefill_attention_note();
  return out;
}

// Packed runs at several chunk sizes against each prompt alone in one chunk. Tolerance: the same
// arithmetic per row except that cuBLASLt may pick another algorithm for another number of rows
// (a different summation order, then a bf16 rounding that flips by one unit here and there): 5e-3
// relative per sequence and step, a tenth of the 2e-2 bf16 bound against the fp32 oracle.
void expect_packing_matches_alone(const std::string& preset, PrefillAttention attention) {
  const ModelConfig cfg = preset_config(preset);
  std::mt19937_64 rng(testing::test_seed() + 41);
  std::uniform_int_distribution<int> id(3, cfg.vocab_size - 1);
  const std::vector<int> lens = {5, 17, 1, 40, 64};
  std::vector<std::vector<int>> prompts, forced;
  for (int len : lens) {
    prompts.emplace_back(len);
    for (int& t : prompts.back()) t = id(rng);
    forced.emplace_back(DECODE_STEPS);
    for (int& t : forced.back()) t = id(rng);
  }
  ExecutorOptions opt;
  opt.prefill_attention = attention;
  opt.cudnn_lib =
      std::getenv("MEGAOPS_TEST_CUDNN_LIB") ? std::getenv("MEGAOPS_TEST_CUDNN_LIB") : "";
  std::string note;
  std::vector<std::vector<std::vector<float>>> alone;
  opt.prefill_chunk = 2048;
  for (size_t b = 0; b < prompts.size(); ++b)
    alone.push_back(run_prefill(cfg, opt, {prompts[b]}, {forced[b]}, &note)[0]);
  // 7 and 13 split sequences across chunks (a chunk may hold the tail of one and the head of the
  // next); 64 holds several whole sequences; 2048 all of them.
  double worst = 0;
  for (int chunk : {7, 13, 64, 2048}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    opt.prefill_chunk = chunk;
    const RunLogits packed = run_prefill(cfg, opt, prompts, forced, &note);
    for (size_t b = 0; b < prompts.size(); ++b)
      for (int step = 0; step <= DECODE_STEPS; ++step) {
        const std::vector<float>& got = packed[b][step];
        const double err = rel_error(got.data(), alone[b][step].data(), got.size());
        worst = std::max(worst, err);
        EXPECT_LE(err, 5e-3) << "sequence " << b << " (" << lens[b] << " tokens), "
                             << (step == 0 ? std::string("prefill")
                                           : "decode step " + std::to_string(step));
      }
  }
  std::printf("%s, %s attention: packed vs alone, worst relative logits difference %.3g\n",
              preset.c_str(), prefill_attention_name(attention), worst);
  // With cuDNN asked for, every attention must have run on it.
  EXPECT_EQ(note, "");
}

class PrefillPacking : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefillPacking, PackedAndChunkedMatchOnePromptFlash) {
  MEGAOPS_REQUIRE_GPU();
  expect_packing_matches_alone(GetParam(), PrefillAttention::Flash);
}

TEST_P(PrefillPacking, PackedAndChunkedMatchOnePromptCudnn) {
  MEGAOPS_REQUIRE_GPU();
  const char* lib = std::getenv("MEGAOPS_TEST_CUDNN_LIB");
  CudnnAttention probe(lib ? lib : "");
  if (!probe.available()) GTEST_SKIP() << "cuDNN unavailable: " << probe.unavailable_reason();
  expect_packing_matches_alone(GetParam(), PrefillAttention::Cudnn);
}

INSTANTIATE_TEST_SUITE_P(Presets, PrefillPacking, ::testing::Values("tiny-llama3", "tiny-qwen3"));

// cuDNN asked for but not loadable: the prefill runs on the own kernel (the same logits as asking
// for it), and the executor says why, once.
TEST(PrefillPackingFallback, UnloadableCudnnFallsBackAndSaysSoOnce) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const std::vector<std::vector<int>> prompts = {{5, 6, 7, 8, 9}, {10, 11, 12}};
  const std::vector<std::vector<int>> forced = {{3, 4, 5, 6}, {7, 8, 9, 10}};
  ExecutorOptions opt;
  opt.prefill_chunk = 4;
  std::string note;
  const RunLogits flash = run_prefill(cfg, opt, prompts, forced, &note);
  EXPECT_EQ(note, "");
  opt.prefill_attention = PrefillAttention::Cudnn;
  opt.cudnn_lib = "/nonexistent/libcudnn.so.9";
  opt.step_graph = build_step_graph;
  opt.max_seq = 96;
  opt.max_batch = 2;
  ConventionalExecutor ex(cfg, random_filler(testing::test_seed()), opt);
  ex.prefill(prompts);
  const std::string first = ex.take_prefill_attention_note();
  EXPECT_NE(first.find("/nonexistent/libcudnn.so.9"), std::string::npos) << first;
  EXPECT_NE(first.find("tensor-core kernel ran instead"), std::string::npos) << first;
  const std::vector<float> all = ex.last_logits();
  const size_t V = cfg.vocab_size;
  for (size_t b = 0; b < prompts.size(); ++b)
    for (size_t i = 0; i < V; ++i)
      ASSERT_EQ(all[b * V + i], flash[b][0][i]) << "sequence " << b << " logit " << i;
  ex.prefill(prompts);
  EXPECT_EQ(ex.take_prefill_attention_note(), "");  // said once
}

}  // namespace
}  // namespace megaops
