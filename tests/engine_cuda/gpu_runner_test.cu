// The engine over the GPU runner factory (engine/gpu_runner.h; today the step executor's
// adapter): a request's tokens are the executor's own, queued requests run one after the other
// with the same tokens, a request sampled with other parameters than the executor's (sampled on
// the host from the step's logits) gets the tokens of an executor built with them, and what the
// adapter cannot run is an Error, not undefined behaviour.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "engine/gpu_runner.h"
#include "gpu_test_util.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "runtime/executor.h"

namespace megaops {
namespace {

std::string tiny_checkpoint() {
  static const std::string dir = [] {
    const std::string d = (std::filesystem::path(::testing::TempDir()) /
                           ("megaops-gpu-runner-" + std::to_string(getpid())))
                              .string();
    std::filesystem::remove_all(d);
    write_random_checkpoint(preset_config("tiny-llama3"), d, 5, DType::BF16, size_t{1} << 40, {});
    return d;
  }();
  return dir;
}

// Runs every request to its end; their tokens by request id.
std::map<uint64_t, std::vector<int>> run_all(Engine& e) {
  std::map<uint64_t, std::vector<int>> out;
  while (e.has_work())
    for (const RequestOutput& o : e.step()) {
      EXPECT_NE(o.finish_reason, FinishReason::Error) << o.stop_reason;
      out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  return out;
}

const std::vector<int> PROMPT = {1, 17, 33, 250, 7, 9, 400, 3};
constexpr int NEW_TOKENS = 12;

TEST(GpuRunner, EngineGivesTheExecutorsTokens) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  eo.max_batch = 1;
  eo.max_seq = 64;
  std::vector<int> want;
  {
    std::unique_ptr<Executor> ex = make_executor(ckpt.config(), checkpoint_filler(ckpt), eo);
    want.push_back(ex->prefill({PROMPT})[0]);
    while (static_cast<int>(want.size()) < NEW_TOKENS) want.push_back(ex->decode_step()[0]);
  }
  GpuRunnerOptions g;
  g.max_context = 64;
  Engine e(make_gpu_runner(ckpt, g), nullptr, {});
  RequestParams p;
  p.max_tokens = NEW_TOKENS;
  p.ignore_eos = true;
  const uint64_t a = e.add_request(PROMPT, p);
  const uint64_t b = e.add_request(PROMPT, p);  // queued behind a: one request a step
  const auto got = run_all(e);
  EXPECT_EQ(got.at(a), want);
  EXPECT_EQ(got.at(b), want);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST(GpuRunner, HostSamplingMatchesTheExecutorsSampler) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  RequestParams p;
  p.max_tokens = NEW_TOKENS;
  p.ignore_eos = true;
  p.sampling = {0.8f, 40, 0.95f, 11};
  GpuRunnerOptions greedy;  // the executor samples greedily: p is sampled on the host
  greedy.max_context = 64;
  GpuRunnerOptions sampled = greedy;  // the executor's own sampler draws p
  sampled.sampling = p.sampling;
  Engine host(make_gpu_runner(ckpt, greedy), nullptr, {});
  Engine device(make_gpu_runner(ckpt, sampled), nullptr, {});
  const uint64_t h = host.add_request(PROMPT, p);
  const uint64_t d = device.add_request(PROMPT, p);
  // The GPU sampler sums probabilities in fp32 and ref::sample in double: they pick the same token
  // unless a draw lands within rounding of a boundary (about 1e-6 a token, sampling_test.cu).
  EXPECT_EQ(run_all(host).at(h), run_all(device).at(d));
}

TEST(GpuRunner, WhatTheAdapterCannotRunIsAnError) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  GpuRunnerOptions g;
  g.max_context = 64;
  std::unique_ptr<ModelRunner> r = make_gpu_runner(ckpt, g);
  EXPECT_EQ(r->max_decode_rows(), 1);
  RunnerSeq s;
  s.tokens = PROMPT;
  s.block_table = {0};
  s.sample = true;
  EXPECT_THROW(r->run({s, s}), Error);  // two requests in one step
  s.sample = false;
  EXPECT_THROW(r->run({s}), Error);  // a prompt chunk
  s.sample = true;
  s.start_pos = 3;
  EXPECT_THROW(r->run({s}), Error);  // a request it did not prefill
  GpuRunnerOptions too_long = g;
  too_long.max_context = 100000;
  EXPECT_THROW(make_gpu_runner(ckpt, too_long), InputError);
}

}  // namespace
}  // namespace megaops
