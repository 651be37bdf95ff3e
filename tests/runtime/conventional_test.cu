// The conventional executor against the fp32 CPU oracle on tiny models of both architectures:
// prefill and decode logits per step, batches of sequences with different prompt lengths, chunked
// prefill, graph replay vs eager, PDL on vs off, and the executor's input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "core/error.h"
#include "gpu_test_util.h"
#include "graph/plan.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "reference/model.h"
#include "reference/ref_weights.h"
#include "runtime/conventional.h"

namespace megaops {
namespace {

using testing::rel_error;

// Reference weights equal to what the executor holds: the random preset values rounded to bf16.
ref::Weights bf16_reference_weights(const ModelConfig& cfg, uint64_t seed) {
  return testing::bf16_reference_weights(cfg, random_filler(seed));
}

using testing::random_prompt;

class ConventionalVsOracle : public ::testing::TestWithParam<std::string> {};

// bf16 weights and activations vs the fp32 oracle on the same bf16 weights: DESIGN.md's 2e-2.
// Three sequences of 5, 17 and 1 prompt tokens, prefill then 12 decode steps, every sequence's
// logits checked at every step. `opt` sets the path; the batch and context are fixed here.
void expect_logits_match_oracle(const std::string& preset, ExecutorOptions opt) {
  const ModelConfig cfg = preset_config(preset);
  const uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  const ref::Weights w = bf16_reference_weights(cfg, seed);
  const std::vector<int> lens = {5, 17, 1};
  std::vector<std::vector<int>> prompts;
  for (int len : lens) prompts.push_back(random_prompt(len, cfg.vocab_size, rng));
  opt.max_batch = 3;
  opt.max_seq = 64;
  ConventionalExecutor ex(cfg, random_filler(seed), opt);
  std::vector<std::unique_ptr<ref::Model>> models;
  std::vector<std::vector<float>> ref_logits;
  for (size_t b = 0; b < prompts.size(); ++b) {
    models.push_back(std::make_unique<ref::Model>(w, opt.max_seq));
    std::vector<float> all = models[b]->forward(prompts[b]);
    ref_logits.emplace_back(all.end() - cfg.vocab_size, all.end());
  }
  std::vector<int> toks = ex.prefill(prompts);
  const int V = cfg.vocab_size;
  for (int step = 0; step < 12; ++step) {
    const std::vector<float> got = ex.last_logits();
    for (size_t b = 0; b < prompts.size(); ++b) {
      const double err = rel_error(got.data() + b * V, ref_logits[b].data(), V);
      EXPECT_LE(err, 2e-2) << "sequence " << b << " step " << step;
      // Feed our token to both so the sequences stay identical.
      ref_logits[b] = models[b]->forward({toks[b]});
    }
    toks = ex.decode_step();
  }
}

TEST_P(ConventionalVsOracle, LogitsMatchPerStepForABatch) {
  MEGAOPS_REQUIRE_GPU();
  ExecutorOptions opt;
  opt.step_graph = build_step_graph;
  opt.prefill_chunk = 7;  // forces chunks that split sequences
  expect_logits_match_oracle(GetParam(), opt);
}

// PrefillPath::DecodeGraph: the 23 prompt tokens as rows of decode steps of at most 3 rows (8
// replays; sequences straddle replays, the 1-token one shares a replay with another's tail), on
// the conventional step with PDL off and on, then decoding goes on from the cache it wrote.
TEST_P(ConventionalVsOracle, DecodeGraphPrefillLogitsMatchPerStep) {
  MEGAOPS_REQUIRE_GPU();
  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "PDL on" : "PDL off");
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.prefill_path = PrefillPath::DecodeGraph;
    opt.pdl = pdl;
    expect_logits_match_oracle(GetParam(), opt);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, ConventionalVsOracle,
                         ::testing::Values("tiny-llama3", "tiny-qwen3"));

// At batch 1 with PDL the 8B-class QKV and O projections run on the streaming kernel, whose CTAs
// start beside the norm and attention before them (kernels/matmul_dispatch.h, LaunchOptions::
// carveout): models with the 8B's layer widths (hidden 4096, 32 query and 8 KV heads of 128; two
// layers, a small MLP and vocabulary) of both architectures against the oracle, PDL on and off.
TEST(Conventional, EightBWidthLayersMatchOracleWithAndWithoutPdl) {
  MEGAOPS_REQUIRE_GPU();
  for (const char* base : {"tiny-llama3", "tiny-qwen3"}) {
    ModelConfig cfg = preset_config(base);
    cfg.hidden_size = 4096;
    cfg.num_heads = 32;
    cfg.num_kv_heads = 8;
    cfg.head_dim = 128;
    cfg.intermediate_size = 512;
    cfg.num_layers = 2;
    const uint64_t seed = testing::test_seed();
    std::mt19937_64 rng(seed);
    const ref::Weights w = bf16_reference_weights(cfg, seed);
    const std::vector<int> prompt = random_prompt(6, cfg.vocab_size, rng);
    constexpr int STEPS = 8;
    // The oracle's logits after the prompt and after each of its own greedy tokens.
    ref::Model model(w, 32);
    std::vector<std::vector<float>> want;
    std::vector<float> all = model.forward(prompt);
    want.emplace_back(all.end() - cfg.vocab_size, all.end());
    for (int s = 0; s < STEPS; ++s) {
      const std::vector<float>& l = want.back();
      const int tok = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
      want.push_back(model.forward({tok}));
    }
    for (bool pdl : {false, true}) {
      ExecutorOptions opt;
      opt.step_graph = build_step_graph;
      opt.max_batch = 1;
      opt.max_seq = 32;
      opt.pdl = pdl;
      ConventionalExecutor ex(cfg, random_filler(seed), opt);
      ex.prefill({prompt});
      for (int s = 0; s <= STEPS; ++s) {
        const std::vector<float> got = ex.last_logits();
        EXPECT_LE(rel_error(got.data(), want[s].data(), cfg.vocab_size), 2e-2)
            << base << " pdl " << pdl << " step " << s;
        if (s == STEPS) break;
        // Feed the oracle's token, so a near-tie cannot make the two sequences part.
        const std::vector<float>& l = want[s];
        const int tok = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
        const std::vector<int> forced = {tok};
        ex.decode_step(&forced);
      }
    }
  }
}

// Graph replay, eager (debug) launches and PDL must produce the same greedy tokens.
TEST(Conventional, GraphEagerAndPdlAgree) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-qwen3");
  std::mt19937_64 rng(testing::test_seed());
  const std::vector<std::vector<int>> prompts = {random_prompt(9, cfg.vocab_size, rng),
                                                 random_prompt(4, cfg.vocab_size, rng)};
  auto run = [&](bool debug, bool pdl) {
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.max_batch = 2;
    opt.max_seq = 80;
    opt.debug_sync = debug;
    opt.pdl = pdl;
    ConventionalExecutor ex(cfg, random_filler(7), opt);
    std::vector<int> all = ex.prefill(prompts);
    for (int i = 0; i < 40; ++i) {
      const std::vector<int> t = ex.decode_step();
      all.insert(all.end(), t.begin(), t.end());
    }
    return all;
  };
  const std::vector<int> graph = run(false, false);
  EXPECT_EQ(graph, run(true, false));
  EXPECT_EQ(graph, run(false, true));
}

// Greedy sampling in the LM head's epilogue (ExecutorOptions::greedy_in_lm_head; at batch 1 the
// tiny LM head streams on the bulk kernel, so it takes the epilogue on sm_90) against the
// sampler's own argmax over the logits: the same tokens, captured and eager, PDL on and off, and
// the same logits bit for bit (the epilogue leaves them as they were).
TEST(Conventional, GreedyInLmHeadSameTokens) {
  MEGAOPS_REQUIRE_GPU();
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"}) {
    const ModelConfig cfg = preset_config(preset);
    std::mt19937_64 rng(testing::test_seed());
    const std::vector<std::vector<int>> prompts = {random_prompt(6, cfg.vocab_size, rng)};
    auto run = [&](bool in_lm_head, bool debug, bool pdl, std::vector<float>* logits) {
      ExecutorOptions opt;
      opt.step_graph = build_step_graph;
      opt.max_batch = 1;
      opt.max_seq = 80;
      opt.debug_sync = debug;
      opt.pdl = pdl;
      opt.greedy_in_lm_head = in_lm_head;
      ConventionalExecutor ex(cfg, random_filler(5), opt);
      std::vector<int> all = ex.prefill(prompts);
      for (int i = 0; i < 48; ++i) {
        all.push_back(ex.decode_step()[0]);
        if (logits) {
          const std::vector<float> l = ex.last_logits();
          logits->insert(logits->end(), l.begin(), l.end());
        }
      }
      return all;
    };
    for (bool pdl : {false, true}) {
      SCOPED_TRACE(preset + (pdl ? " pdl" : " no pdl"));
      std::vector<float> want_logits, got_logits;
      const std::vector<int> want = run(false, false, pdl, &want_logits);
      EXPECT_EQ(run(true, false, pdl, &got_logits), want);
      EXPECT_EQ(run(true, true, pdl, nullptr), want);
      ASSERT_EQ(got_logits.size(), want_logits.size());
      EXPECT_EQ(std::memcmp(got_logits.data(), want_logits.data(), got_logits.size() * 4), 0)
          << "logits differ";
    }
  }
}

// Sampling with a fixed seed is reproducible, and a different seed changes the tokens.
TEST(Conventional, SampledTokensReproducible) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  auto run = [&](uint64_t seed) {
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.max_batch = 1;
    opt.max_seq = 64;
    opt.sampling = {1.0f, 50, 0.9f, seed};
    ConventionalExecutor ex(cfg, random_filler(3), opt);
    std::vector<int> all = ex.prefill({{1, 2, 3}});
    for (int i = 0; i < 30; ++i) all.push_back(ex.decode_step()[0]);
    return all;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

// A sampled first token draws with its sequence's numbers on either prefill path (the sampler
// maps a decode-graph row to its sequence's slot, SampleParams::rng_rows): 8 seeds x 3 sequences
// of a tiny model, first tokens compared. The two paths' logits differ by rounding, which can
// move a draw across a token boundary, so one mismatch is allowed; drawing with the row index
// instead (rows 4, 21 and 22 here) would change most of them.
TEST(Conventional, DecodeGraphPrefillSamplesAsTheLayerPath) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  std::mt19937_64 rng(testing::test_seed());
  std::vector<std::vector<int>> prompts;
  for (int len : {5, 17, 1}) prompts.push_back(random_prompt(len, cfg.vocab_size, rng));
  int same = 0, total = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.max_batch = 3;
    opt.max_seq = 64;
    opt.sampling = {1.0f, 0, 1.0f, seed};
    ConventionalExecutor ex(cfg, random_filler(5), opt);
    const std::vector<int> layers = ex.prefill(prompts);
    ex.set_prefill_path(PrefillPath::DecodeGraph);
    const std::vector<int> graph = ex.prefill(prompts);
    for (size_t b = 0; b < prompts.size(); ++b, ++total) same += layers[b] == graph[b];
  }
  EXPECT_GE(same, total - 1) << same << " of " << total;
}

// decode_steps (the host one step behind, the next step enqueued before it reads the tokens)
// against decode_step: the same tokens step by step, delivered in order, the same logits after,
// and the executor's state where decode_step leaves it (decode_step, and decode_steps again,
// carry on from it). Conventional with PDL off and on, and the overlap backend's chain.
TEST(Conventional, DecodeStepsStreamsWhatDecodeStepReturns) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-qwen3");
  std::mt19937_64 rng(testing::test_seed());
  const std::vector<std::vector<int>> prompts = {random_prompt(7, cfg.vocab_size, rng),
                                                 random_prompt(3, cfg.vocab_size, rng)};
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode == 0 ? "conventional" : mode == 1 ? "conventional + pdl" : "overlap chain");
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.max_batch = 2;
    opt.max_seq = 64;
    opt.pdl = mode == 1;
    if (mode == 2) {
      opt.backend = DecodeBackend::Overlap;
      opt.overlap_streams = 1;
      opt.overlap_pdl_chain = true;
    }
    std::vector<float> want_logits;
    std::vector<std::vector<int>> want;
    {
      ConventionalExecutor ex(cfg, random_filler(9), opt);
      ex.prefill(prompts);
      for (int i = 0; i < 40; ++i) want.push_back(ex.decode_step());
      want_logits = ex.last_logits();
    }
    ConventionalExecutor ex(cfg, random_filler(9), opt);
    ex.prefill(prompts);
    std::vector<std::vector<int>> got;
    std::vector<int> order;
    auto take = [&](int i, const std::vector<int>& t) {
      order.push_back(i);
      got.push_back(t);
    };
    EXPECT_EQ(ex.decode_steps(17, take), want[16]);
    got.push_back(ex.decode_step());
    EXPECT_EQ(ex.decode_steps(1, take), want[18]);
    EXPECT_EQ(ex.decode_steps(21, take), want[39]);
    EXPECT_EQ(got, want);
    std::vector<int> want_order;
    for (int n : {17, 1, 21})
      for (int i = 0; i < n; ++i) want_order.push_back(i);
    EXPECT_EQ(order, want_order);
    const std::vector<float> logits = ex.last_logits();
    ASSERT_EQ(logits.size(), want_logits.size());
    EXPECT_EQ(std::memcmp(logits.data(), want_logits.data(), logits.size() * 4), 0);
    EXPECT_EQ(ex.decode_steps(3, {}).size(), 2u);  // no callback
  }
}

// The executor names its device as CUDA does, and a plan made for another GPU gets its warning
// line from that name (a plan for this GPU, or for none, gets none).
TEST(Conventional, DeviceNameIsCudasAndPlansForOtherGpusWarn) {
  MEGAOPS_REQUIRE_GPU();
  ExecutorOptions opt;
  opt.step_graph = build_step_graph;
  opt.max_batch = 1;
  opt.max_seq = 8;
  ConventionalExecutor ex(preset_config("tiny-llama3"), random_filler(1), opt);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  EXPECT_EQ(ex.device_name(), std::string(prop.name));
  Plan p;
  EXPECT_EQ(plan_gpu_warning(p, "p.json", ex.device_name()), "");
  p.gpu = prop.name;
  EXPECT_EQ(plan_gpu_warning(p, "p.json", ex.device_name()), "");
  p.gpu = "NVIDIA Imaginary GPU";
  const std::string w = plan_gpu_warning(p, "p.json", ex.device_name());
  EXPECT_EQ(w.find("p.json: warning: made for NVIDIA Imaginary GPU, running on " +
                   std::string(prop.name)),
            0u)
      << w;
}

TEST(Conventional, InputErrors) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  ExecutorOptions opt;
  opt.step_graph = build_step_graph;
  opt.max_batch = 2;
  opt.max_seq = 8;
  ConventionalExecutor ex(cfg, random_filler(1), opt);
  EXPECT_THROW(ex.decode_step(), InputError);                      // before prefill
  EXPECT_THROW(ex.decode_steps(1, {}), InputError);                // before prefill
  EXPECT_THROW(ex.prefill({{1}, {2}, {3}}), InputError);           // batch > allocated
  EXPECT_THROW(ex.prefill({{cfg.vocab_size}}), InputError);        // id outside vocab
  EXPECT_THROW(ex.prefill({{-1}}), InputError);                    // negative id
  EXPECT_THROW(ex.prefill({{}}), InputError);                      // empty prompt
  EXPECT_THROW(ex.prefill({std::vector<int>(8, 1)}), InputError);  // context too long
  ex.prefill({{1, 2, 3, 4, 5, 6}});
  EXPECT_THROW(ex.decode_steps(0, {}), InputError);  // no steps
  EXPECT_THROW(ex.decode_steps(3, {}), InputError);  // the third would write position 8 of 8
  ex.decode_step();                            // position 6 -> 7 (the refused steps ran nothing)
  ex.decode_step();                            // position 7 -> 8
  EXPECT_THROW(ex.decode_step(), InputError);  // would write position 8 of 8
  opt.max_batch = 65;
  EXPECT_THROW(ConventionalExecutor(cfg, random_filler(1), opt), InputError);
}

}  // namespace
}  // namespace megaops

namespace megaops {
namespace {

// A non-finite logit row is an error naming the step, never a token: token 7's embedding row is
// NaN, so a prompt holding it breaks the prefill's logits, and a decode step fed it (forced) breaks
// that step's; other steps run on. Conventional (graph and eager, PDL on and off, greedy from the
// LM head's epilogue or from the logits, sampled) and the overlap step as a PDL chain.
TEST(Conventional, NonFiniteLogitsAreAnErrorNamingTheStep) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  const int bad = 7;
  const WeightFiller random = random_filler(3);
  const WeightFiller filler = [&](const WeightSpec& spec, size_t index, float* out) {
    random(spec, index, out);
    if (spec.name == "model.embed_tokens.weight")
      std::fill(out + size_t(bad) * cfg.hidden_size, out + size_t(bad + 1) * cfg.hidden_size,
                std::nanf(""));
  };
  auto expect_step_error = [](auto&& fn, const std::string& where) {
    try {
      fn();
      FAIL() << "expected an error naming " << where;
    } catch (const InputError& e) {
      FAIL() << "not an input error: " << e.what();
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(where), std::string::npos) << msg;
      EXPECT_NE(msg.find("NaN or Inf"), std::string::npos) << msg;
    }
  };
  struct Case {
    const char* name;
    DecodeBackend backend;
    bool pdl, debug_sync, chain;
    float temperature;
  };
  const Case cases[] = {{"graph", DecodeBackend::Conventional, false, false, false, 0.0f},
                        {"graph+pdl", DecodeBackend::Conventional, true, false, false, 0.0f},
                        {"eager", DecodeBackend::Conventional, false, true, false, 0.0f},
                        {"sampled", DecodeBackend::Conventional, false, false, false, 0.9f},
                        {"chain", DecodeBackend::Overlap, false, false, true, 0.0f}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExecutorOptions opt;
    opt.step_graph = build_step_graph;
    opt.max_batch = 2;
    opt.max_seq = 32;
    opt.backend = c.backend;
    opt.pdl = c.pdl;
    opt.debug_sync = c.debug_sync;
    opt.sampling.temperature = c.temperature;
    opt.sampling.seed = 5;
    if (c.chain) {
      opt.overlap_streams = 1;
      opt.overlap_pdl_chain = true;
    }
    ConventionalExecutor ex(cfg, filler, opt);
    expect_step_error(
        [&] {
          ex.prefill({{1, 2, 3}, {4, bad, 5}});
        },
        "prefill: sequence 1 at position 3");
    std::vector<int> toks = ex.prefill({{1, 2, 3}, {4, 5}});
    for (int t : toks) EXPECT_GE(t, 0);
    toks = ex.decode_step();  // positions 3 and 2
    for (int t : toks) EXPECT_GE(t, 0);
    const std::vector<int> forced = {2, bad};
    expect_step_error([&] { ex.decode_step(&forced); }, "decode step: sequence 1 at position 3");
  }
}

// Running out of device memory names the buffer, the bytes asked for and the bytes free, and
// leaves the process able to go on (no sticky CUDA error).
TEST(Conventional, OutOfMemoryNamesTheBuffer) {
  MEGAOPS_REQUIRE_GPU();
  ModelConfig cfg = preset_config("tiny-llama3");
  cfg.max_position_embeddings = 1 << 25;
  ExecutorOptions opt;
  opt.step_graph = build_step_graph;
  opt.max_batch = 64;
  opt.max_seq = 1 << 25;  // 64 x 32M positions x 64 values x 2 bytes: 275 GB per cache
  try {
    ConventionalExecutor ex(cfg, random_filler(1), opt);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("k_cache"), std::string::npos) << msg;
    EXPECT_NE(msg.find("274877906944 bytes requested"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bytes free"), std::string::npos) << msg;
  }
  ExecutorOptions small;
  small.step_graph = build_step_graph;
  small.max_seq = 16;
  ConventionalExecutor ok(preset_config("tiny-llama3"), random_filler(1), small);
  EXPECT_EQ(ok.prefill({{1, 2, 3}}).size(), 1u);
}

}  // namespace
}  // namespace megaops
