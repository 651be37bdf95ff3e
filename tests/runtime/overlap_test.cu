// The overlap decode step (docs/overlap-design.md) against the conventional executor on the tiny
// models: same greedy tokens and logits within 1e-3 relative, with and without PDL, eager and
// graph, 10,000 replays without reset, consumers issued before producers, random producer delays,
// and a lost signal that the watchdog must turn into an error naming the waiting op.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>

#include "core/error.h"
#include "gpu_test_util.h"
#include "models/model_config.h"
#include "overlap_test_util.h"
#include "runtime/conventional.h"
#include "test_util.h"

namespace megaops {
namespace {

using testing::rel_error;
using namespace overlap_testing;

// same_arithmetic: ExecutorOptions::overlap_conventional_arithmetic (then logits must agree bit
// for bit when chunks == 1); chunks: overlap_vendor_chunks. Batch 12 puts every matmul of the
// conventional step on cuBLASLt (m > 8), so the overlap step runs them behind gates.
struct Case {
  std::string preset;
  int batch;
  bool same_arithmetic = true;
  int chunks = 1;
};

class OverlapVsConventional : public ::testing::TestWithParam<Case> {};

// (a) + (b): 64 steps, greedy tokens equal and logits within 1e-3, graph and eager, PDL on/off.
TEST_P(OverlapVsConventional, SameTokensAndLogits) {
  MEGAOPS_REQUIRE_GPU();
  const Case c = GetParam();
  const ModelConfig cfg = preset_config(c.preset);
  const uint64_t seed = testing::test_seed();
  std::vector<int> lens(c.batch);
  for (int i = 0; i < c.batch; ++i) lens[i] = 3 + (7 * i + 4) % 11;
  const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
  const int STEPS = testing::test_steps(64);
  ConventionalExecutor conv(cfg, random_filler(seed),
                            options(c.batch, 96, DecodeBackend::Conventional));
  const Trace ref = run_steps(conv, prompts, STEPS, true);
  for (bool pdl : {false, true})
    for (bool debug : {false, true}) {
      ExecutorOptions o = options(c.batch, 96, DecodeBackend::Overlap);
      o.pdl = pdl;
      o.debug_sync = debug;
      o.overlap_conventional_arithmetic = c.same_arithmetic;
      o.overlap_vendor_chunks = c.chunks;
      ConventionalExecutor ovl(cfg, random_filler(seed), o);
      // Two generations on one executor: the counters carry over a prefill without a reset.
      for (int round = 0; round < 2; ++round) {
        if (c.chunks > 1) {
          // Chunked vendor GEMMs are other cuBLASLt calls (other algorithms, other rounding), so
          // a tiny random model's near-tied tokens may flip (they did on the H200) and every
          // later step differs: compare the first step's logits, from identical states.
          const Trace t = run_steps(ovl, prompts, 1, true);
          EXPECT_LE(rel_error(t.logits[0].data(), ref.logits[0].data(), ref.logits[0].size()), 1e-3)
              << "chunks " << c.chunks << " pdl " << pdl << " debug " << debug;
          continue;
        }
        expect_same(ref, run_steps(ovl, prompts, STEPS, true),
                    c.preset + " pdl " + std::to_string(pdl) + " debug " + std::to_string(debug) +
                        " round " + std::to_string(round),
                    c.same_arithmetic);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, OverlapVsConventional,
    ::testing::Values(Case{"tiny-llama3", 1}, Case{"tiny-llama3", 3}, Case{"tiny-qwen3", 1},
                      Case{"tiny-qwen3", 3}, Case{"tiny-llama3", 12}, Case{"tiny-qwen3", 12},
                      Case{"tiny-llama3", 12, true, 3}, Case{"tiny-llama3", 3, false},
                      Case{"tiny-qwen3", 3, false}),
    [](const auto& info) {
      return case_name(
          info.param.preset, info.param.batch,
          std::string(info.param.same_arithmetic ? "" : "_v0") +
              (info.param.chunks > 1 ? "_chunks" + std::to_string(info.param.chunks) : ""));
    });

// Issue 3's correctness figure on the real shapes: the four presets at batch 1 and 32, a
// 32-token prompt and 128 decode steps, the overlap step (default W, graph) against the
// conventional executor in lockstep: identical greedy tokens at every step, logits within 1e-3
// relative (the same arithmetic gives the same bits; the worst error is printed). The tiny models
// above cannot show what only full-size grids do (budgets, vendor GEMMs, attention splits). Each
// also as the PDL chain with its defaults (grid waits, folds) against conventional + PDL.
class OverlapFullSize : public ::testing::TestWithParam<std::tuple<std::string, int, bool>> {};

TEST_P(OverlapFullSize, SameTokensAndLogitsAsConventional) {
  MEGAOPS_REQUIRE_GPU();
  const auto& [preset, batch, chain] = GetParam();
  const ModelConfig cfg = preset_config(preset);
  const uint64_t seed = testing::test_seed();
  constexpr int PROMPT = 32, STEPS = 128;
  const auto prompts = random_prompts(std::vector<int>(batch, PROMPT), cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed),
                            reference_options(batch, PROMPT + STEPS, chain));
  ConventionalExecutor ovl(cfg, random_filler(seed), overlap_options(batch, PROMPT + STEPS, chain));
  ASSERT_EQ(conv.prefill(prompts), ovl.prefill(prompts)) << preset << ": prefill";
  double worst = 0;
  for (int step = 0; step < STEPS; ++step) {
    const std::vector<int> a = conv.decode_step(), b = ovl.decode_step();
    ASSERT_EQ(a, b) << preset << " batch " << batch << " step " << step << ": tokens differ";
    const std::vector<float> la = conv.last_logits(), lb = ovl.last_logits();
    const double err = rel_error(lb.data(), la.data(), la.size());
    worst = std::max(worst, err);
    ASSERT_LE(err, 1e-3) << preset << " batch " << batch << " step " << step;
  }
  std::printf(
      "overlap%s vs conventional: %s batch %d, %d steps: tokens identical, worst logits "
      "relative error %.3e\n",
      chain ? " (PDL chain)" : "", preset.c_str(), batch, STEPS, worst);
}

INSTANTIATE_TEST_SUITE_P(FullSize, OverlapFullSize,
                         ::testing::Combine(::testing::Values("llama3.2-1b", "qwen3-0.6b",
                                                              "llama3.1-8b", "qwen3-8b"),
                                            ::testing::Values(1, 32), ::testing::Bool()),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param), std::get<1>(info.param),
                                            std::get<2>(info.param) ? "_chain" : "");
                         });

// The sequence that hung a candidate shared-memory split (one split per overlap step; see
// docs/perf-notes.md, "One shared-memory split per overlap step"): a full-size model decodes ~500
// overlap steps at batch 1, then batch 8 and 32 on the same executor. Every step must finish (a
// hang is the watchdog's DeviceError) with the tokens of a conventional executor that ran the same
// prompts.
TEST(Overlap, BatchSwitchAfterFiveHundredStepsFullSize) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const uint64_t seed = testing::test_seed();
  constexpr int PROMPT = 32, STEPS = 128;
  ConventionalExecutor conv(cfg, random_filler(seed),
                            options(32, PROMPT + STEPS, DecodeBackend::Conventional));
  ConventionalExecutor ovl(cfg, random_filler(seed),
                           options(32, PROMPT + STEPS, DecodeBackend::Overlap));
  int steps = 0;
  for (int round = 0; round < 4; ++round) {  // batch 1: 4 x 128 steps
    const auto prompts = random_prompts({PROMPT}, cfg.vocab_size, seed + round);
    ovl.prefill(prompts);
    for (int i = 0; i < STEPS; ++i, ++steps) ASSERT_NO_THROW(ovl.decode_step()) << "step " << steps;
  }
  for (int b : {8, 32}) {
    const auto prompts = random_prompts(std::vector<int>(b, PROMPT), cfg.vocab_size, seed + b);
    ASSERT_EQ(conv.prefill(prompts), ovl.prefill(prompts)) << "batch " << b;
    for (int i = 0; i < 16; ++i) {
      std::vector<int> got;
      ASSERT_NO_THROW(got = ovl.decode_step()) << "batch " << b << " step " << i;
      ASSERT_EQ(conv.decode_step(), got) << "batch " << b << " step " << i;
    }
  }
}

// The batch may change between prefills: counters stay consistent (constant sum per step).
TEST(Overlap, BatchChangesAcrossPrefills) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const uint64_t seed = testing::test_seed();
  ConventionalExecutor conv(cfg, random_filler(seed), options(3, 64, DecodeBackend::Conventional));
  ConventionalExecutor ovl(cfg, random_filler(seed), options(3, 64, DecodeBackend::Overlap));
  for (int b : {1, 3, 2, 1}) {
    std::vector<int> lens = {5, 9, 2};
    lens.resize(b);
    const auto prompts = random_prompts(lens, cfg.vocab_size, seed + b);
    expect_same(run_steps(conv, prompts, 16, true), run_steps(ovl, prompts, 16, true),
                "batch " + std::to_string(b), true);
  }
}

// PrefillPath::DecodeGraph on the overlap step: the prompt rows go through the overlap step,
// which computes what the conventional step without PDL computes, so the prefill's tokens and
// logits and every decode step after it equal the conventional step's decode-graph prefill bit
// for bit. 18 prompt rows in replays of at most 3 (sequences straddle replays), twice on one
// executor (the counters carry on).
TEST(Overlap, DecodeGraphPrefillMatchesConventional) {
  MEGAOPS_REQUIRE_GPU();
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"}) {
    const ModelConfig cfg = preset_config(preset);
    const uint64_t seed = testing::test_seed();
    const auto prompts = random_prompts({5, 9, 4}, cfg.vocab_size, seed);
    auto run = [&](ConventionalExecutor& ex) {
      Trace t;
      t.tokens = ex.prefill(prompts);
      t.logits.push_back(ex.last_logits());
      for (int i = 0; i < 16; ++i) {
        const std::vector<int> s = ex.decode_step();
        t.tokens.insert(t.tokens.end(), s.begin(), s.end());
        t.logits.push_back(ex.last_logits());
      }
      return t;
    };
    ExecutorOptions co = options(3, 64, DecodeBackend::Conventional);
    co.prefill_path = PrefillPath::DecodeGraph;
    ConventionalExecutor conv(cfg, random_filler(seed), co);
    const Trace ref = run(conv);
    ExecutorOptions oo = options(3, 64, DecodeBackend::Overlap);
    oo.prefill_path = PrefillPath::DecodeGraph;
    ConventionalExecutor ovl(cfg, random_filler(seed), oo);
    for (int round = 0; round < 2; ++round)
      expect_same(ref, run(ovl), preset + " round " + std::to_string(round), true);
  }
}

// Switching backends on one executor: conventional steps touch neither counters nor the overlap
// step, so overlap steps after them still find consistent targets.
TEST(Overlap, SwitchBackendsMidGeneration) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const uint64_t seed = testing::test_seed();
  const auto prompts = random_prompts({6, 4}, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), options(2, 64, DecodeBackend::Conventional));
  const Trace ref = run_steps(conv, prompts, 30, false);
  ConventionalExecutor ex(cfg, random_filler(seed), options(2, 64, DecodeBackend::Conventional));
  std::vector<int> toks = ex.prefill(prompts);
  for (int i = 0; i < 30; ++i) {
    ex.set_backend(i % 3 == 0 ? DecodeBackend::Conventional : DecodeBackend::Overlap);
    const std::vector<int> s = ex.decode_step();
    toks.insert(toks.end(), s.begin(), s.end());
  }
  EXPECT_EQ(ref.tokens, toks);
}

// (c) 10,000 graph replays without any reset of the counters: ten prompts of 1,000 steps each
// (the tiny model's context is 1,024 positions), every token equal to the conventional executor's.
TEST(Overlap, TenThousandReplays) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const uint64_t seed = testing::test_seed();
  constexpr int ROUNDS = 10, STEPS = 1000, PROMPT = 5;
  ASSERT_LE(PROMPT + STEPS, cfg.max_position_embeddings);
  ConventionalExecutor conv(cfg, random_filler(seed),
                            options(1, PROMPT + STEPS, DecodeBackend::Conventional));
  ConventionalExecutor ovl(cfg, random_filler(seed),
                           options(1, PROMPT + STEPS, DecodeBackend::Overlap));
  for (int r = 0; r < ROUNDS; ++r) {
    const auto prompts = random_prompts({PROMPT}, cfg.vocab_size, seed + r);
    ASSERT_EQ(run_steps(conv, prompts, STEPS, false).tokens,
              run_steps(ovl, prompts, STEPS, false).tokens)
        << "round " << r << " (replays " << r * STEPS << " to " << (r + 1) * STEPS << ")";
  }
}

// (d) consumers issued before their producers, eagerly (real issue order) and in a graph, with
// W = 2, 3 and 4.
TEST(Overlap, ConsumerFirstIssueOrder) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const uint64_t seed = testing::test_seed();
  // Batch 3: every matmul on the small-m kernel; batch 12: on cuBLASLt behind gates.
  for (int batch : {3, 12}) {
    std::vector<int> lens(batch);
    for (int i = 0; i < batch; ++i) lens[i] = 1 + (5 * i + 3) % 9;
    const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
    ConventionalExecutor conv(cfg, random_filler(seed),
                              options(batch, 64, DecodeBackend::Conventional));
    const Trace ref = run_steps(conv, prompts, 24, true);
    for (int w : {2, 3, 4})
      for (bool debug : {true, false}) {
        ExecutorOptions o = options(batch, 64, DecodeBackend::Overlap);
        o.overlap_streams = w;
        o.overlap_reverse_issue_order = true;
        o.debug_sync = debug;
        ConventionalExecutor ovl(cfg, random_filler(seed), o);
        expect_same(ref, run_steps(ovl, prompts, 24, true),
                    "batch " + std::to_string(batch) + " W " + std::to_string(w) + " debug " +
                        std::to_string(debug),
                    true);
      }
  }
}

// (e) random producer delays, fresh seed per trial, forward and reverse issue order: 1,000 trials,
// a quarter each on tiny-qwen3 batch 2 (small-m matmuls) and tiny-llama3 batch 12 (cuBLASLt
// matmuls behind gates, whose signal kernels take the delays).
TEST(Overlap, RandomDelays) {
  MEGAOPS_REQUIRE_GPU();
  constexpr int TRIALS = 1000, STEPS = 6;  // at least 1,000 randomized trials
  const uint64_t seed = testing::test_seed();
  for (const auto& [preset, batch] : {std::pair<const char*, int>{"tiny-qwen3", 2},
                                      std::pair<const char*, int>{"tiny-llama3", 12}}) {
    const ModelConfig cfg = preset_config(preset);
    std::vector<int> lens(batch);
    for (int i = 0; i < batch; ++i) lens[i] = 3 + (3 * i) % 7;
    const auto prompts = random_prompts(lens, cfg.vocab_size, seed);
    ConventionalExecutor conv(cfg, random_filler(seed),
                              options(batch, 32, DecodeBackend::Conventional));
    const Trace ref = run_steps(conv, prompts, STEPS, false);
    for (bool reverse : {false, true}) {
      ExecutorOptions o = options(batch, 32, DecodeBackend::Overlap);
      o.overlap_reverse_issue_order = reverse;
      ConventionalExecutor ovl(cfg, random_filler(seed), o);
      std::mt19937_64 rng(seed ^ (reverse ? 0x5eedull : 0ull) ^ static_cast<uint64_t>(batch));
      for (int t = 0; t < TRIALS / 4; ++t) {
        ovl.set_overlap_delay(20000, rng());
        ASSERT_EQ(ref.tokens, run_steps(ovl, prompts, STEPS, false).tokens)
            << preset << " batch " << batch << " trial " << t << " reverse " << reverse;
      }
    }
  }
}

// Runs in the death test's child: lm_head never signals, so the sampler (the only op left live)
// must trip the watchdog; exits 3 with the message on stderr.
// chain: the PDL chain at W = 1 (ExecutorOptions::overlap_pdl_chain) with counter waits, where
// the sampler waits on the LM head's counter although both are on one stream.
[[noreturn]] void run_dropped_signal(bool chain = false) {
  exit_with_error_message([chain] {
    const ModelConfig cfg = preset_config("tiny-llama3");
    ExecutorOptions o = overlap_options(1, 32, chain);
    o.overlap_watchdog_ms = 500;
    o.overlap_chain_counter_waits = chain;
    o.overlap_drop_signal_op = "lm_head";
    ConventionalExecutor ex(cfg, random_filler(1), o);
    ex.prefill({{1, 2, 3}});
    ex.decode_step();
  });
}

// (f) a lost signal becomes a DeviceError naming the waiting op within 5 s.
TEST(OverlapDeathTest, WatchdogNamesWaitingOp) {
  MEGAOPS_REQUIRE_GPU();
  // The trap leaves the CUDA context unusable: run in a re-executed child process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(run_dropped_signal(), ::testing::ExitedWithCode(3),
              "watchdog: op 'sample' tile 0 waited for count >= ");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
}

// The PDL chain with counter waits keeps real waits on one stream: the same lost signal is caught
// by the watchdog (at W = 1 without the chain, or in the chain waiting on grids, the LM head
// signals nothing, and dropping it is an InputError: Overlap.PdlChainGridWaitsSignalNothing).
TEST(OverlapDeathTest, PdlChainWatchdogNamesWaitingOp) {
  MEGAOPS_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_dropped_signal(true), ::testing::ExitedWithCode(3),
              "watchdog: op 'sample' tile 0 waited for count >= ");
}

// (h) Soak, run by `gpu_run.sh soak` (skipped unless MEGAOPS_SOAK_SECONDS is set): the overlap and
// the conventional executor decode the same random prompts in lockstep for that long, round after
// round (prefill, then decode to the end of the context), every token compared. Preset and batch
// from MEGAOPS_SOAK_PRESET (default llama3.2-1b) and MEGAOPS_SOAK_BATCH (default 8);
// MEGAOPS_SOAK_PDL_CHAIN=1 soaks the PDL chain with its defaults (grid waits, folds) against the
// conventional executor with PDL. A hang is caught by the watchdog (an error naming the op), not
// by this test.
// Near-ties: the two executors sum in different orders (cuBLASLt vs the small-m kernel, attention
// split counts), and on the real presets their bf16 logits differ by up to ~1e-2 relative (8e-3
// measured on llama3.2-1b batch 8), so over millions of tokens a greedy pick flips wherever the
// top two logits are closer than that. A differing token counts as a near-tie when that
// sequence's logits agree within SOAK_TOLERANCE (2e-2, the tolerance of the HF comparison, which
// also compares two bf16 pipelines); both executors then continue from the conventional token
// (decode_step's forced tokens). Any other difference is a mismatch. Every 64th step the logits of
// the whole batch are compared as well, and the largest error is reported (and must stay within
// the tolerance). With ExecutorOptions::overlap_conventional_arithmetic (the default) the two
// compute the same bits, so there must be no near-tie at all and the sampled error must be 0.
TEST(Overlap, Soak) {
  MEGAOPS_REQUIRE_GPU();
  const char* secs_env = std::getenv("MEGAOPS_SOAK_SECONDS");
  if (secs_env == nullptr) GTEST_SKIP() << "MEGAOPS_SOAK_SECONDS not set";
  const double seconds = std::atof(secs_env);
  ASSERT_GT(seconds, 0) << "MEGAOPS_SOAK_SECONDS: expected a positive number, found " << secs_env;
  const char* preset_env = std::getenv("MEGAOPS_SOAK_PRESET");
  const char* batch_env = std::getenv("MEGAOPS_SOAK_BATCH");
  const std::string preset = preset_env ? preset_env : "llama3.2-1b";
  const int batch = batch_env ? std::atoi(batch_env) : 8;
  ASSERT_TRUE(batch >= 1 && batch <= 64) << "MEGAOPS_SOAK_BATCH: expected 1..64";
  const ModelConfig cfg = preset_config(preset);
  const uint64_t seed = testing::test_seed();
  constexpr int PROMPT = 32, MAX_SEQ = 512;
  const char* chain_env = std::getenv("MEGAOPS_SOAK_PDL_CHAIN");
  const bool chain = chain_env != nullptr && std::string(chain_env) == "1";
  ConventionalExecutor conv(cfg, random_filler(seed), reference_options(batch, MAX_SEQ, chain));
  ConventionalExecutor ovl(cfg, random_filler(seed), overlap_options(batch, MAX_SEQ, chain));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  constexpr double SOAK_TOLERANCE = 2e-2;
  int64_t rounds = 0, steps = 0, mismatches = 0, near_ties = 0;
  double worst_sampled = 0;
  std::vector<int> forced;
  const size_t v = static_cast<size_t>(cfg.vocab_size);
  // Largest relative logits error over the batch of the last step.
  auto sample = [&] {
    const std::vector<float> lc = conv.last_logits(), lo = ovl.last_logits();
    double worst = 0;
    for (size_t r = 0; r * v < lc.size(); ++r)
      worst = std::max(worst, rel_error(lo.data() + r * v, lc.data() + r * v, v));
    return worst;
  };
  // Classifies the sequences whose tokens differ after a step (or prefill) and sets `forced`.
  auto compare = [&](const std::vector<int>& a, const std::vector<int>& b, int64_t step) {
    forced.clear();
    if (a == b) return;
    const std::vector<float> lc = conv.last_logits(), lo = ovl.last_logits();
    for (size_t r = 0; r < a.size(); ++r) {
      if (a[r] == b[r]) continue;
      const double err = rel_error(lo.data() + r * v, lc.data() + r * v, v);
      if (err <= SOAK_TOLERANCE) {
        ++near_ties;
      } else {
        ++mismatches;
        ADD_FAILURE() << "round " << rounds << " step " << step << " sequence " << r << ": tokens "
                      << a[r] << " vs " << b[r] << ", logits differ by " << err;
      }
    }
    forced = a;
  };
  while (elapsed() < seconds && mismatches <= 10) {
    const auto prompts =
        random_prompts(std::vector<int>(batch, PROMPT), cfg.vocab_size, seed + rounds);
    compare(conv.prefill(prompts), ovl.prefill(prompts), -1);
    for (int s = 0; s + PROMPT + 1 < MAX_SEQ && elapsed() < seconds && mismatches <= 10;
         ++s, ++steps) {
      const std::vector<int>* f = forced.empty() ? nullptr : &forced;
      const std::vector<int> a = conv.decode_step(f);
      const std::vector<int> b = ovl.decode_step(f);
      compare(a, b, s);
      if (steps % 64 == 0) worst_sampled = std::max(worst_sampled, sample());
    }
    ++rounds;
  }
  std::printf(
      "soak: %s batch %d%s, %.0f s, %lld rounds, %lld overlap steps (%lld tokens), "
      "%lld mismatches, %lld near-ties, worst sampled logits error %.3e\n",
      preset.c_str(), batch, chain ? " (PDL chain)" : "", elapsed(), static_cast<long long>(rounds),
      static_cast<long long>(steps), static_cast<long long>(steps * batch),
      static_cast<long long>(mismatches), static_cast<long long>(near_ties), worst_sampled);
  RecordProperty("soak_seconds", static_cast<int>(elapsed()));
  RecordProperty("soak_steps", static_cast<int>(steps));
  RecordProperty("soak_mismatches", static_cast<int>(mismatches));
  RecordProperty("soak_near_ties", static_cast<int>(near_ties));
  EXPECT_LE(worst_sampled, SOAK_TOLERANCE);
  if (ovl.options().overlap_conventional_arithmetic && ovl.options().overlap_vendor_chunks == 1) {
    EXPECT_EQ(near_ties, 0) << "the same arithmetic must give the same tokens";
    EXPECT_EQ(worst_sampled, 0.0) << "the same arithmetic must give the same logits";
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(steps, 0);
}

// (g) timeline tracing: a traced step records every op's CTAs with ordered timestamps and leaves
// the tokens unchanged; a full buffer drops records (and says how many); an executor without
// tracing refuses to hand out a trace.
TEST(Overlap, TraceRecordsEveryOpOfTheStep) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const uint64_t seed = testing::test_seed();
  const auto prompts = random_prompts({4, 7}, cfg.vocab_size, seed);
  ExecutorOptions traced_opt = options(2, 32, DecodeBackend::Overlap);
  traced_opt.overlap_trace_capacity = 1u << 16;
  ConventionalExecutor plain(cfg, random_filler(seed), options(2, 32, DecodeBackend::Overlap));
  ConventionalExecutor traced(cfg, random_filler(seed), traced_opt);
  EXPECT_EQ(run_steps(plain, prompts, 3, false).tokens,
            run_steps(traced, prompts, 3, false).tokens);
  uint64_t dropped = 1;
  traced.take_overlap_trace(&dropped);  // the steps above
  traced.decode_step();
  const std::vector<TraceEvent> events = traced.take_overlap_trace(&dropped);
  EXPECT_EQ(dropped, 0u);
  const size_t n_ops = traced.overlap_op_names().size();
  std::vector<int> ctas(n_ops, 0);
  for (const TraceEvent& e : events) {
    ASSERT_LT(e.op_index, n_ops);
    EXPECT_EQ(e.op, traced.overlap_op_names()[e.op_index]);
    EXPECT_LE(e.wait_start_ns, e.wait_end_ns) << e.op;
    EXPECT_LE(e.wait_end_ns, e.work_end_ns) << e.op;
    ++ctas[e.op_index];
  }
  for (size_t k = 0; k < n_ops; ++k)
    EXPECT_GT(ctas[k], 0) << "no CTA recorded for " << traced.overlap_op_names()[k];

  ExecutorOptions small_opt = traced_opt;
  small_opt.overlap_trace_capacity = 4;
  ConventionalExecutor small(cfg, random_filler(seed), small_opt);
  run_steps(small, prompts, 1, false);
  EXPECT_EQ(small.take_overlap_trace(&dropped).size(), 4u);
  EXPECT_GT(dropped, 0u);
  EXPECT_THROW(plain.take_overlap_trace(&dropped), InputError);
}

// Regions with barriers between them (a plan's composition): serial and overlapped regions in
// one step, forward and consumer-first issue order, W = 2 and 3; the same bits as the
// conventional executor.
TEST(Overlap, RegionsMatchConventional) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const uint64_t seed = testing::test_seed();
  const auto prompts = random_prompts({5, 2, 8}, cfg.vocab_size, seed);
  ConventionalExecutor conv(cfg, random_filler(seed), options(3, 64, DecodeBackend::Conventional));
  const Trace ref = run_steps(conv, prompts, 20, true);
  const std::vector<ExecutorOptions::OverlapRegion> regions = {{"embedding", true},
                                                               {"layer 0 qkv_proj", false},
                                                               {"layer 1 input_layernorm", true},
                                                               {"layer 1 o_proj", false},
                                                               {"lm_head", true}};
  for (int w : {2, 3})
    for (bool reverse : {false, true}) {
      ExecutorOptions o = options(3, 64, DecodeBackend::Overlap);
      o.overlap_streams = w;
      o.overlap_reverse_issue_order = reverse;
      o.overlap_regions = regions;
      ConventionalExecutor ovl(cfg, random_filler(seed), o);
      expect_same(ref, run_steps(ovl, prompts, 20, true),
                  "regions W " + std::to_string(w) + " reverse " + std::to_string(reverse), true);
    }
  // Every op its own serial region: a conventional step through the overlap machinery.
  ExecutorOptions o = options(3, 64, DecodeBackend::Overlap);
  ConventionalExecutor probe(cfg, random_filler(seed), o);
  probe.prefill(prompts);
  probe.decode_step();  // sets the overlap state up, so the op names are known
  const std::vector<std::string> names = probe.overlap_op_names();
  for (size_t k = 0; k + 1 < names.size(); ++k) o.overlap_regions.push_back({names[k], true});
  ConventionalExecutor serial(cfg, random_filler(seed), o);
  expect_same(ref, run_steps(serial, prompts, 20, true), "all serial", true);

  // One executor, the regions changed between generations (bench --plan A --plan B): each set
  // gives the conventional bits; a bad set is refused and the one before stays in force.
  ConventionalExecutor one(cfg, random_filler(seed), options(3, 64, DecodeBackend::Overlap));
  expect_same(ref, run_steps(one, prompts, 20, true), "switch: none", true);
  one.set_overlap_regions(regions);
  expect_same(ref, run_steps(one, prompts, 20, true), "switch: regions", true);
  one.set_overlap_regions(o.overlap_regions);
  expect_same(ref, run_steps(one, prompts, 20, true), "switch: all serial", true);
  testing::expect_input_error(
      [&] {
        one.set_overlap_regions({{"no such op", false}});
      },
      {"overlap_regions[0].first_op", "no such op"});
  expect_same(ref, run_steps(one, prompts, 20, true), "switch: after a refused set", true);
  one.set_overlap_regions({});
  expect_same(ref, run_steps(one, prompts, 20, true), "switch: back to none", true);
}

TEST(Overlap, InputErrors) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  ExecutorOptions o = options(1, 16, DecodeBackend::Overlap);
  o.overlap_streams = 0;
  EXPECT_THROW(ConventionalExecutor(cfg, random_filler(1), o), InputError);
  o.overlap_streams = 3;
  o.overlap_drop_signal_op = "no such op";
  ConventionalExecutor ex(cfg, random_filler(1), o);
  ex.prefill({{1, 2}});
  EXPECT_THROW(ex.decode_step(), InputError);
  const std::vector<std::string> names = ex.overlap_op_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "embedding");
  EXPECT_EQ(names.back(), "step_advance");
  // Regions: unknown op, not starting at the first op, not in step order, step_advance.
  const std::vector<std::pair<std::vector<ExecutorOptions::OverlapRegion>, std::string>> bad = {
      {{{"embedding", false}, {"layer 9 qkv_proj", true}}, "overlap_regions[1].first_op"},
      {{{"layer 0 qkv_proj", false}}, "overlap_regions[0].first_op"},
      {{{"embedding", false}, {"layer 1 qkv_proj", true}, {"layer 0 o_proj", false}},
       "overlap_regions[2].first_op"},
      {{{"embedding", false}, {"step_advance", true}}, "overlap_regions[1].first_op"},
  };
  for (const auto& [regions, field] : bad) {
    ExecutorOptions ro = options(1, 16, DecodeBackend::Overlap);
    ro.overlap_regions = regions;
    testing::expect_input_error(
        [&] {
          ConventionalExecutor rex(cfg, random_filler(1), ro);
          rex.prefill({{1, 2}});
          rex.decode_step();
        },
        {field}, field);
  }
}

}  // namespace
}  // namespace megaops
