// Helpers shared by the overlap and PDL-chain executor tests (overlap_test.cu, pdl_chain_test.cu):
// random prompts, a prefill + decode trace, the options each backend runs with and what it is held
// to, and the comparison of two traces.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "models/step_graph.h"
#include "runtime/conventional.h"
#include "test_util.h"

namespace megaops::overlap_testing {

inline std::vector<std::vector<int>> random_prompts(const std::vector<int>& lens, int vocab,
                                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<std::vector<int>> out;
  for (int len : lens) {
    std::vector<int> p(len);
    for (auto& x : p) x = d(rng);
    out.push_back(p);
  }
  return out;
}

struct Trace {
  std::vector<int> tokens;                 // prefill tokens, then every step's
  std::vector<std::vector<float>> logits;  // per decode step
};

// Prefill + `steps` decode steps; logits kept when asked.
inline Trace run_steps(ConventionalExecutor& ex, const std::vector<std::vector<int>>& prompts,
                       int steps, bool keep_logits) {
  Trace t;
  t.tokens = ex.prefill(prompts);
  for (int i = 0; i < steps; ++i) {
    const std::vector<int> s = ex.decode_step();
    t.tokens.insert(t.tokens.end(), s.begin(), s.end());
    if (keep_logits) t.logits.push_back(ex.last_logits());
  }
  return t;
}

inline ExecutorOptions options(int batch, int max_seq, DecodeBackend backend) {
  ExecutorOptions o;
  o.step_graph = build_step_graph;
  o.max_batch = batch;
  o.max_seq = max_seq;
  o.backend = backend;
  return o;
}

// A test case's name: the preset, "_b" and the batch, then `suffix`, with '-' and '.' as '_'.
inline std::string case_name(const std::string& preset, int batch, const std::string& suffix = "") {
  std::string n = preset + "_b" + std::to_string(batch) + suffix;
  for (char& ch : n)
    if (ch == '-' || ch == '.') ch = '_';
  return n;
}

// The overlap step as the PDL chain (W = 1) with its defaults (grid waits, folds), and what it is
// held to: the conventional executor with PDL, whose matmul paths the chain takes. With `chain`
// false, the multi-stream overlap step and the conventional executor without PDL.
inline ExecutorOptions overlap_options(int batch, int max_seq, bool chain) {
  ExecutorOptions o = options(batch, max_seq, DecodeBackend::Overlap);
  if (chain) {
    o.overlap_streams = 1;
    o.overlap_pdl_chain = true;
  }
  return o;
}
inline ExecutorOptions reference_options(int batch, int max_seq, bool chain) {
  ExecutorOptions o = options(batch, max_seq, DecodeBackend::Conventional);
  o.pdl = chain;
  return o;
}

// Same tokens, and logits within 1e-3 relative or (exact) bit for bit.
inline void expect_same(const Trace& conv, const Trace& ovl, const std::string& what,
                        bool exact = false) {
  ASSERT_EQ(conv.tokens, ovl.tokens) << what;
  ASSERT_EQ(conv.logits.size(), ovl.logits.size()) << what;
  for (size_t s = 0; s < conv.logits.size(); ++s) {
    const double err =
        testing::rel_error(ovl.logits[s].data(), conv.logits[s].data(), conv.logits[s].size());
    if (exact)
      EXPECT_EQ(err, 0.0) << what << " step " << s
                          << ": the same arithmetic must give the same bits";
    else
      EXPECT_LE(err, 1e-3) << what << " step " << s;
  }
}

// A death test's child (the watchdog's trap leaves the CUDA context unusable): runs `body`, which
// should throw the watchdog's DeviceError; exits 3 with its message on stderr, 1 if nothing threw.
[[noreturn]] inline void exit_with_error_message(const std::function<void()>& body) {
  try {
    body();
    std::fprintf(stderr, "the dropped signal was not reported\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    _exit(3);
  }
  _exit(1);
}

}  // namespace megaops::overlap_testing
