// Persistent regions of the overlap step (runtime/persistent.h, kernels/persistent_region_ops.cuh)
// against the conventional step: the same tokens and bit-equal logits with regions of one op, a
// layer, several layers, the whole step, and several regions between chain or overlap ones; with
// random delays before every task's waits and signals, tasks dealt round robin instead of by the
// cost model, eagerly and captured; in the PDL chain (held to conventional + PDL) and the
// multi-stream overlap step (held to conventional without PDL). Ops a region cannot run are
// refused naming the region and the op; a lost signal inside a region trips the watchdog, which
// names the region, the op and the tile.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "models/model_config.h"
#include "overlap_test_util.h"
#include "runtime/conventional.h"
#include "test_util.h"

namespace megaops {
namespace {

using namespace overlap_testing;
using Regions = std::vector<ExecutorOptions::OverlapRegion>;

bool bulk_gpu() {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
         major == 9;
}

#define MEGAOPS_REQUIRE_SM90()                                                                    \
  do {                                                                                            \
    MEGAOPS_REQUIRE_GPU();                                                                        \
    if (!bulk_gpu()) GTEST_SKIP() << "persistent regions need the bulk streaming kernel (sm_90)"; \
  } while (0)

ExecutorOptions::OverlapRegion persistent(const std::string& first_op, int ctas = 0) {
  return {first_op, false, true, ctas};
}
ExecutorOptions::OverlapRegion plain(const std::string& first_op) {
  return {first_op, false, false, 0};
}

// Region covers of the step of a two-layer model, named for the failure messages. At batch 1 every
// op but step_advance can run in a region; above it the matmuls run on the small-m kernel or
// cuBLASLt (which a region cannot hold) and the sampler over the logits, so the covers there hold
// the ops between them.
std::vector<std::pair<std::string, Regions>> covers(int batch) {
  if (batch > 1)
    return {
        {"embedding", {persistent("embedding"), plain("layer 0 input_layernorm")}},
        {"attention block",
         {plain("embedding"), persistent("layer 0 qkv_rope"), plain("layer 0 o_proj")}},
        {"two attention blocks",
         {plain("embedding"), persistent("layer 0 qkv_rope"), plain("layer 0 o_proj"),
          persistent("layer 1 qkv_rope"), plain("layer 1 o_proj")}},
        {"norm and silu",
         {plain("embedding"), persistent("layer 1 post_attention_layernorm"),
          plain("layer 1 gate_up_proj"), persistent("layer 1 silu_mul"), plain("layer 1 down_proj"),
          persistent("final_norm"), plain("lm_head")}},
    };
  return {
      {"whole step", {persistent("embedding")}},
      {"one op",
       {plain("embedding"), persistent("layer 0 o_proj"),
        plain("layer 0 post_attention_layernorm")}},
      {"one layer", {plain("embedding"), persistent("layer 1 input_layernorm")}},
      {"attention block",
       {plain("embedding"), persistent("layer 0 qkv_rope"),
        plain("layer 0 post_attention_layernorm")}},
      {"mlp to next qkv",
       {plain("embedding"), persistent("layer 0 post_attention_layernorm"),
        plain("layer 1 qkv_rope")}},
      {"four regions",
       {persistent("embedding"), plain("layer 0 o_proj"), persistent("layer 0 gate_up_proj"),
        plain("layer 1 qkv_proj"), persistent("layer 1 silu_mul")}},
      {"whole step on 3 CTAs", {persistent("embedding", 3)}},
  };
}

class PersistentRegions : public ::testing::TestWithParam<std::pair<const char*, int>> {};

// In the PDL chain (its folds on: regions run folded norms, the SwiGLU and rope folds), against
// the conventional step with PDL.
TEST_P(PersistentRegions, ChainMatchesConventional) {
  MEGAOPS_REQUIRE_SM90();
  const auto [preset, batch] = GetParam();
  const uint64_t seed = testing::test_seed();
  const int steps = testing::test_steps(12);
  const ModelConfig cfg = preset_config(preset);
  std::vector<int> lens(batch);
  for (int i = 0; i < batch; ++i) lens[i] = 2 + (7 * i + 3) % 11;
  const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), reference_options(batch, 64, true));
  const Trace ref = run_steps(conv, prompts, steps, true);
  for (const auto& [name, regions] : covers(batch))
    for (int mode = 0; mode < 4; ++mode) {
      // 0: captured; 1: eager (debug sync); 2: random delays; 3: round robin, unfolded.
      ExecutorOptions o = overlap_options(batch, 64, true);
      o.overlap_regions = regions;
      o.debug_sync = mode == 1;
      o.persistent_round_robin = mode == 3;
      if (mode == 3) o.overlap_fold_norms = o.overlap_fold_silu = o.overlap_fold_rope = false;
      ConventionalExecutor ex(cfg, random_filler(seed), o);
      if (mode == 2) ex.set_overlap_delay(20000, seed ^ 0x9e51ull);
      expect_same(ref, run_steps(ex, prompts, steps, true),
                  std::string(preset) + " batch " + std::to_string(batch) + " " + name + " mode " +
                      std::to_string(mode),
                  true);
    }
}

// In the multi-stream overlap step (W = 3), against the conventional step without PDL.
TEST_P(PersistentRegions, OverlapMatchesConventional) {
  MEGAOPS_REQUIRE_SM90();
  const auto [preset, batch] = GetParam();
  const uint64_t seed = testing::test_seed() ^ 0x77ull;
  const int steps = testing::test_steps(8);
  const ModelConfig cfg = preset_config(preset);
  std::vector<int> lens(batch, 5);
  const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), reference_options(batch, 64, false));
  const Trace ref = run_steps(conv, prompts, steps, true);
  for (const auto& [name, regions] : covers(batch)) {
    ExecutorOptions o = overlap_options(batch, 64, false);
    o.overlap_regions = regions;
    ConventionalExecutor ex(cfg, random_filler(seed), o);
    ex.set_overlap_delay(5000, seed);
    expect_same(ref, run_steps(ex, prompts, steps, true),
                std::string(preset) + " batch " + std::to_string(batch) + " " + name, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, PersistentRegions,
                         ::testing::Values(std::pair<const char*, int>{"tiny-llama3", 1},
                                           std::pair{"tiny-llama3", 2}, std::pair{"tiny-llama3", 3},
                                           std::pair{"tiny-qwen3", 1}, std::pair{"tiny-qwen3", 2},
                                           std::pair{"tiny-qwen3", 5}),
                         [](const auto& info) {
                           return case_name(info.param.first, info.param.second);
                         });

// The real presets at batch 1, the whole step (but step_advance) as one region and as one region
// per layer, bit-equal to conventional + PDL (MEGAOPS_TEST_STEPS steps, 16 by default).
class PersistentRegionsFullSize : public ::testing::TestWithParam<const char*> {};

TEST_P(PersistentRegionsFullSize, ChainMatchesConventional) {
  MEGAOPS_REQUIRE_SM90();
  const char* preset = GetParam();
  const uint64_t seed = testing::test_seed();
  const int steps = testing::test_steps(16);
  const ModelConfig cfg = preset_config(preset);
  const auto prompts = random_prompts({9}, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), reference_options(1, 64, true));
  const Trace ref = run_steps(conv, prompts, steps, true);
  Regions per_layer{plain("embedding")};
  for (int l = 0; l < cfg.num_layers; ++l)
    per_layer.push_back(persistent("layer " + std::to_string(l) + " input_layernorm"));
  for (const Regions& regions : {Regions{persistent("embedding")}, per_layer}) {
    ExecutorOptions o = overlap_options(1, 64, true);
    o.overlap_regions = regions;
    ConventionalExecutor ex(cfg, random_filler(seed), o);
    expect_same(ref, run_steps(ex, prompts, steps, true),
                std::string(preset) + " " + std::to_string(regions.size()) + " regions", true);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PersistentRegionsFullSize,
                         ::testing::Values("llama3.2-1b", "qwen3-0.6b", "llama3.1-8b", "qwen3-8b"),
                         [](const auto& info) { return case_name(info.param, 1); });

// An op a region cannot run is refused before anything runs, naming the region and the op: at
// batch 12 the tiny models' matmuls run on the small-m kernel.
TEST(PersistentRegionsErrors, RefusedOpNamesRegionAndOp) {
  MEGAOPS_REQUIRE_SM90();
  const ModelConfig cfg = preset_config("tiny-llama3");
  ExecutorOptions o = overlap_options(12, 32, true);
  o.overlap_regions = {plain("embedding"), persistent("layer 0 qkv_proj"),
                       plain("layer 0 qkv_rope")};
  ConventionalExecutor ex(cfg, random_filler(1), o);
  ex.prefill(random_prompts(std::vector<int>(12, 3), cfg.vocab_size, 1));
  try {
    ex.decode_step();
    FAIL() << "a small-m matmul in a persistent region was accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("overlap_regions[1] (persistent, from 'layer 0 qkv_proj')"), std::string::npos)
        << m;
    EXPECT_NE(m.find("op 'layer 0 qkv_proj' cannot run in a persistent region"), std::string::npos)
        << m;
  }
  // A CTA budget on a region that is not persistent, and one above what fits.
  ExecutorOptions bad = overlap_options(1, 32, true);
  bad.overlap_regions = {{"embedding", false, false, 4}};
  EXPECT_THROW(ConventionalExecutor(cfg, random_filler(1), bad), InputError);
  ExecutorOptions big = overlap_options(1, 32, true);
  big.overlap_regions = {persistent("embedding", 1 << 20)};
  ConventionalExecutor ex2(cfg, random_filler(1), big);
  ex2.prefill({{1, 2, 3}});
  try {
    ex2.decode_step();
    FAIL() << "a CTA budget above the resident CTAs was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap_regions[0].cta_budget"), std::string::npos)
        << e.what();
  }
}

// Runs in the death test's child: layer 0's qkv_proj tasks never signal inside the region, so an
// attention task waiting for them (qkv_rope is folded into attention at batch 1, and a region
// leaves folded ops out), or one of a later layer's waiting behind it (whichever wait started
// first), trips the watchdog; exits 3 with the message on stderr.
[[noreturn]] void run_region_dropped_signal() {
  exit_with_error_message([] {
    const ModelConfig cfg = preset_config("tiny-llama3");
    ExecutorOptions o = overlap_options(1, 32, true);
    o.overlap_watchdog_ms = 300;
    o.overlap_regions = {persistent("embedding")};
    o.overlap_drop_signal_op = "layer 0 qkv_proj";
    ConventionalExecutor ex(cfg, random_filler(1), o);
    ex.prefill({{1, 2, 3}});
    ex.decode_step();
  });
}

TEST(PersistentRegionsDeathTest, WatchdogNamesRegionOpAndTile) {
  MEGAOPS_REQUIRE_SM90();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(
      run_region_dropped_signal(), ::testing::ExitedWithCode(3),
      "watchdog: op 'layer [0-9]+ attention' tile [0-9]+ waited for count >= .* in persistent "
      "region 0 \\(from 'embedding'\\)");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace megaops
