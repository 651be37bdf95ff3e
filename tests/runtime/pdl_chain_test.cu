// The PDL chain (ExecutorOptions::overlap_pdl_chain, runtime/pdl_chain.cu) against the conventional
// executor with PDL on the tiny models: the same bits with every fold and wait mode, eagerly and
// captured, with random producer delays; the folds seen in the trace; greedy sampling in the LM
// head's epilogue; the chain's input errors.
#include <gtest/gtest.h>

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

// The PDL chain (ExecutorOptions::overlap_pdl_chain): every own kernel launched with PDL on the
// one stream, each waiting on the grid before it (the default) or on its producer's counter,
// with the norms and SiLU·mul folded into their streaming matmuls (the default; batch 1 runs the
// bulk streaming kernel) and qkv_rope into attention (the default; batches 1 and 2 run the
// per-query-head kernel) or not, and SiLU·mul in gate_up's epilogue with either wait. Bit-equal
// to the conventional step with PDL, eagerly and captured, with random producer delays (a
// consumer whose CTAs start early must still wait), at batch 1, 2, 3 (small-m / streaming matmuls)
// and 12 (cuBLASLt, stream-ordered, the op after it waiting for its completion), one test case per
// preset and batch (so a sanitizer run can take one: racecheck did not get past the start of all
// eight in one test in 280 s), 16 steps or MEGAOPS_TEST_STEPS.
class OverlapPdlChain : public ::testing::TestWithParam<std::pair<const char*, int>> {};

TEST_P(OverlapPdlChain, MatchesConventional) {
  MEGAOPS_REQUIRE_GPU();
  const auto [preset, batch] = GetParam();
  const uint64_t seed = testing::test_seed();
  const int steps = testing::test_steps(16);
  const ModelConfig cfg = preset_config(preset);
  std::vector<int> lens(batch);
  for (int i = 0; i < batch; ++i) lens[i] = 2 + (5 * i + 1) % 9;
  const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), reference_options(batch, 64, true));
  const Trace ref = run_steps(conv, prompts, steps, true);
  struct Mode {
    bool counter_waits, fold, silu_epilogue;
  };
  for (const Mode& md :
       {Mode{false, true, false}, Mode{false, false, false}, Mode{true, true, false},
        Mode{true, false, false}, Mode{false, true, true}, Mode{true, true, true}})
    for (bool debug : {false, true})
      for (uint32_t delay : {0u, 20000u}) {
        const auto [counter_waits, fold, silu_epilogue] = md;
        // The defaults (grid waits, folded norms) in every mode, the others captured only.
        if ((counter_waits || !fold) && debug) continue;
        ExecutorOptions o = overlap_options(batch, 64, true);
        o.overlap_chain_counter_waits = counter_waits;
        o.overlap_fold_norms = fold;
        o.overlap_fold_silu = fold;
        o.overlap_fold_rope = fold;
        o.overlap_silu_epilogue_min_inter = silu_epilogue ? 0 : -1;
        o.debug_sync = debug;
        ConventionalExecutor chain(cfg, random_filler(seed), o);
        if (delay > 0) chain.set_overlap_delay(delay, seed ^ 0xc4a1ull);
        expect_same(ref, run_steps(chain, prompts, steps, true),
                    std::string(preset) + " batch " + std::to_string(batch) + " counter waits " +
                        std::to_string(counter_waits) + " fold " + std::to_string(fold) +
                        " SiLU epilogue " + std::to_string(silu_epilogue) + " debug " +
                        std::to_string(debug) + " delay " + std::to_string(delay),
                    true);
      }
}

INSTANTIATE_TEST_SUITE_P(Chain, OverlapPdlChain,
                         ::testing::Values(std::pair<const char*, int>{"tiny-llama3", 1},
                                           std::pair{"tiny-llama3", 2}, std::pair{"tiny-llama3", 3},
                                           std::pair{"tiny-llama3", 12}, std::pair{"tiny-qwen3", 1},
                                           std::pair{"tiny-qwen3", 2}, std::pair{"tiny-qwen3", 3},
                                           std::pair{"tiny-qwen3", 12}),
                         [](const auto& info) {
                           return case_name(info.param.first, info.param.second);
                         });

// The chain takes one stream: overlap_pdl_chain with W > 1 is rejected, naming the option.
TEST(Overlap, PdlChainRejectsSeveralStreams) {
  MEGAOPS_REQUIRE_GPU();
  ExecutorOptions bad = options(1, 32, DecodeBackend::Overlap);
  bad.overlap_streams = 2;
  bad.overlap_pdl_chain = true;
  try {
    ConventionalExecutor ex(preset_config("tiny-llama3"), random_filler(1), bad);
    FAIL() << "overlap_pdl_chain with overlap_streams 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap_pdl_chain"), std::string::npos) << e.what();
  }
}

// The chain's defaults, seen from the trace: at batch 1 on the bulk streaming kernel (sm_90) every
// norm and SiLU·mul before a streaming matmul is folded into it and records no CTA (its matmul
// does the work), the final norm too (the tiny LM head streams); every qkv_rope is folded into
// its attention (the per-query-head kernel) and records no CTA; with the folds off all run; with
// the SwiGLU epilogue (and the down fold off) SiLU·mul records no CTA either (gate_up computed
// it). The bit-equality of all is Chain/OverlapPdlChain.MatchesConventional; this test makes sure
// the folds happened there.
TEST(Overlap, PdlChainFoldsIntoStreamingMatmuls) {
  MEGAOPS_REQUIRE_GPU();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major != 9) GTEST_SKIP() << "the fold needs the bulk streaming kernel (sm_90)";
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const uint64_t seed = testing::test_seed();
  const auto prompts = random_prompts({5}, cfg.vocab_size, seed);
  // epilogue: SiLU·mul in gate_up's epilogue with the down fold off, so its op records no CTA
  // only where the epilogue ran.
  for (const auto& [fold, epilogue] :
       {std::pair<bool, bool>{true, false}, {false, false}, {true, true}}) {
    ExecutorOptions o = overlap_options(1, 32, true);
    o.overlap_fold_norms = fold;
    o.overlap_fold_silu = fold && !epilogue;
    o.overlap_silu_epilogue_min_inter = epilogue ? 0 : -1;
    o.overlap_fold_rope = fold;
    o.overlap_trace_capacity = 1u << 16;
    ConventionalExecutor ex(cfg, random_filler(seed), o);
    run_steps(ex, prompts, 2, false);
    uint64_t dropped = 0;
    ex.take_overlap_trace(&dropped);
    ex.decode_step();
    const std::vector<std::string> names = ex.overlap_op_names();
    std::vector<int> ctas(names.size(), 0);
    for (const TraceEvent& e : ex.take_overlap_trace(&dropped)) ++ctas[e.op_index];
    EXPECT_EQ(dropped, 0u);
    int folds_run = 0, folds = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      const bool foldable = names[k].find("layernorm") != std::string::npos ||
                            names[k].find("silu_mul") != std::string::npos ||
                            names[k].find("qkv_rope") != std::string::npos ||
                            names[k] == "final_norm";
      folds += foldable;
      folds_run += foldable && ctas[k] > 0;
      if (!foldable) EXPECT_GT(ctas[k], 0) << names[k] << " fold " << fold;
    }
    EXPECT_EQ(folds, 4 * cfg.num_layers + 1);
    EXPECT_EQ(folds_run, fold ? 0 : folds) << "fold " << fold;
  }
}

// Greedy sampling in the LM head's epilogue in the overlap step (ExecutorOptions::
// greedy_in_lm_head), seen from the trace at batch 2, where the sampler's launch tells the two
// apart: one CTA reading the packs, or one CTA a row reading the logits. Every matmul on the
// streaming kernel (MatmulSettings::forced_path Stream: the tiny LM head at batch 2 would otherwise
// run on the small-m kernel and keep the sampler's argmax), in the chain (the final norm folded
// into the LM head) and the multi-stream step. Tokens and logits against the conventional step on
// the same paths that samples from the logits: bit for bit.
TEST(Overlap, GreedyInLmHeadSameTokens) {
  MEGAOPS_REQUIRE_GPU();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major != 9) GTEST_SKIP() << "the epilogue needs the bulk streaming kernel (sm_90)";
  const ModelConfig cfg = preset_config("tiny-llama3");
  const uint64_t seed = testing::test_seed();
  const auto prompts = random_prompts({4, 7}, cfg.vocab_size, seed);
  for (bool chain : {true, false}) {
    ExecutorOptions r = reference_options(2, 48, chain);
    r.greedy_in_lm_head = false;
    r.matmul.forced_path = MatmulPath::Stream;
    ConventionalExecutor conv(cfg, random_filler(seed), r);
    const Trace ref = run_steps(conv, prompts, 12, true);
    for (bool in_lm_head : {true, false}) {
      const std::string what = std::string(chain ? "chain" : "multi-stream") +
                               " greedy in LM head " + std::to_string(in_lm_head);
      ExecutorOptions o = overlap_options(2, 48, chain);
      o.greedy_in_lm_head = in_lm_head;
      o.matmul.forced_path = MatmulPath::Stream;
      o.overlap_trace_capacity = 1u << 16;
      ConventionalExecutor ex(cfg, random_filler(seed), o);
      expect_same(ref, run_steps(ex, prompts, 12, true), what, true);
      uint64_t dropped = 0;
      ex.take_overlap_trace(&dropped);
      ex.decode_step();
      const std::vector<std::string> names = ex.overlap_op_names();
      int sample_ctas = 0;
      for (const TraceEvent& e : ex.take_overlap_trace(&dropped))
        sample_ctas += names[e.op_index] == "sample";
      EXPECT_EQ(dropped, 0u);
      EXPECT_EQ(sample_ctas, in_lm_head ? 1 : 2) << what;
    }
  }
}

// The chain with qkv_rope folded into attention, prompts run as rows of the decode step
// (PrefillPath::DecodeGraph): replays of two rows hold consecutive positions of one sequence, so
// an attention CTA attends a key that the other row of its launch writes (kernels/rope_fold.cuh
// computes it from that row's qkv instead of reading the cache). Bit-equal to the conventional
// step with PDL on the same path, with the fold on and off, twice on one executor.
TEST(Overlap, PdlChainRopeFoldOverDecodeGraphPrefill) {
  MEGAOPS_REQUIRE_GPU();
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"}) {
    const ModelConfig cfg = preset_config(preset);
    const uint64_t seed = testing::test_seed();
    const auto prompts = random_prompts({5, 8}, cfg.vocab_size, seed);
    auto run = [&](ConventionalExecutor& ex) {
      Trace t;
      t.tokens = ex.prefill(prompts);
      t.logits.push_back(ex.last_logits());
      for (int i = 0; i < 8; ++i) {
        const std::vector<int> s = ex.decode_step();
        t.tokens.insert(t.tokens.end(), s.begin(), s.end());
        t.logits.push_back(ex.last_logits());
      }
      return t;
    };
    ExecutorOptions co = reference_options(2, 64, true);
    co.prefill_path = PrefillPath::DecodeGraph;
    ConventionalExecutor conv(cfg, random_filler(seed), co);
    const Trace ref = run(conv);
    for (bool fold : {true, false}) {
      ExecutorOptions o = overlap_options(2, 64, true);
      o.prefill_path = PrefillPath::DecodeGraph;
      o.overlap_fold_rope = fold;
      ConventionalExecutor chain(cfg, random_filler(seed), o);
      for (int round = 0; round < 2; ++round)
        expect_same(ref, run(chain),
                    preset + " fold " + std::to_string(fold) + " round " + std::to_string(round),
                    true);
    }
  }
}

// In the chain that waits on grids no op signals a counter, so dropping a signal is an input
// error there (the watchdog bounds counter waits only: OverlapDeathTest.PdlChainWatchdogNames
// WaitingOp runs the chain with counter waits).
TEST(Overlap, PdlChainGridWaitsSignalNothing) {
  MEGAOPS_REQUIRE_GPU();
  ExecutorOptions o = overlap_options(1, 32, true);
  o.overlap_drop_signal_op = "lm_head";
  ConventionalExecutor ex(preset_config("tiny-llama3"), random_filler(1), o);
  ex.prefill({{1, 2, 3}});
  try {
    ex.decode_step();
    FAIL() << "a dropped signal in the grid-waiting chain was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("signals nothing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megaops
