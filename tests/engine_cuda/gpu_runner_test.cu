// The engine over the GPU runner factory (engine/gpu_runner.h). make_gpu_runner gives the paged
// runner: its tokens are the executor's own where the two run the same kernels (one request,
// conventional plan), several requests decode together, the KV cache is sized from the options or
// the device's memory, and what it cannot run (a persistent region) goes to the executor adapter.
// The adapter (make_gpu_executor_adapter): a request's tokens are the executor's own, queued
// requests run one after the other with the same tokens, a request sampled with other parameters
// than the executor's (sampled on the host from the step's logits) gets the tokens of an executor
// built with them, and what the adapter cannot run is an Error, not undefined behaviour.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/error.h"
#include "engine/gpu_runner.h"
#include "gpu_test_util.h"
#include "graph/plan.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "runtime/executor.h"
#include "runtime/plan_options.h"

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

// The plan of the executor below, for bucket `batch`: conventional, no PDL.
Plan conventional_plan(int batch) {
  Plan p;
  p.batch = batch;
  return p;
}

// The executor's greedy tokens for PROMPT on conventional_plan(1).
std::vector<int> executor_tokens(const Checkpoint& ckpt) {
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  eo.max_batch = 1;
  eo.max_seq = 64;
  apply_plan(conventional_plan(1), eo);
  std::vector<int> want;
  std::unique_ptr<Executor> ex = make_executor(ckpt.config(), checkpoint_filler(ckpt), eo);
  want.push_back(ex->prefill({PROMPT})[0]);
  while (static_cast<int>(want.size()) < NEW_TOKENS) want.push_back(ex->decode_step()[0]);
  return want;
}

TEST(GpuRunner, FactoryGivesThePagedRunnerWithTheExecutorsTokens) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  const std::vector<int> want = executor_tokens(ckpt);
  GpuRunnerOptions g;
  g.max_context = 64;
  g.max_batch = 1;
  g.plans = {conventional_plan(1)};
  Engine e(make_gpu_runner(ckpt, g), nullptr, {});
  EXPECT_FALSE(is_executor_adapter(e.runner())) << e.runner().backend();
  RequestParams p;
  p.max_tokens = NEW_TOKENS;
  p.ignore_eos = true;
  const uint64_t a = e.add_request(PROMPT, p);
  const uint64_t b = e.add_request(PROMPT, p);  // max_batch 1: queued behind a
  const auto got = run_all(e);
  // One request in bucket 1 on the executor's plan, its prompt in one packed pass of the same
  // rows: the same kernels on the same shapes, so the same tokens.
  EXPECT_EQ(got.at(a), want);
  EXPECT_EQ(got.at(b), want);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// Four requests decode together (buckets 1-4, default plans); each one's greedy tokens equal what
// it gets alone in the same runner only in batch-invariant mode (paged_runner_test.cu), so here:
// every request finishes with its tokens and no block stays held.
TEST(GpuRunner, PagedRunnerBatchesRequests) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  GpuRunnerOptions g;
  g.max_context = 64;
  g.max_batch = 4;
  Engine e(make_gpu_runner(ckpt, g), nullptr, {});
  EXPECT_EQ(e.runner().max_decode_rows(), 4);
  RequestParams p;
  p.max_tokens = NEW_TOKENS;
  p.ignore_eos = true;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    std::vector<int> prompt(PROMPT.begin(), PROMPT.begin() + 1 + i);
    ids.push_back(e.add_request(prompt, p));
  }
  int most_running = 0;
  std::map<uint64_t, std::vector<int>> got;
  while (e.has_work()) {
    for (const RequestOutput& o : e.step()) {
      EXPECT_NE(o.finish_reason, FinishReason::Error) << o.stop_reason;
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    most_running = std::max(most_running, e.stats().running);
  }
  EXPECT_EQ(most_running, 4);  // max_batch requests at once, the others queued
  for (uint64_t id : ids) EXPECT_EQ(static_cast<int>(got[id].size()), NEW_TOKENS) << id;
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// kv_blocks as given; 0: what fits, capped at max_batch requests of max_context (far below the
// device's memory for the tiny model); a fraction that leaves no room is an InputError naming it.
TEST(GpuRunner, KvCacheSizedFromOptionsOrMemory) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  GpuRunnerOptions g;
  g.max_context = 100;  // 7 blocks of 16
  g.max_batch = 4;
  g.kv_blocks = 5;
  EXPECT_EQ(make_gpu_runner(ckpt, g)->kv_geometry().num_blocks, 5);
  g.kv_blocks = 0;
  std::unique_ptr<ModelRunner> r = make_gpu_runner(ckpt, g);
  EXPECT_EQ(r->kv_geometry().num_blocks, 4 * 7);
  EXPECT_EQ(r->kv_geometry().block_size, 16);
  EXPECT_EQ(r->max_step_tokens(), 400);  // 2048 capped at max_batch x max_context
  g.gpu_memory_utilization = 1e-6;
  try {
    make_gpu_runner(ckpt, g);
    ADD_FAILURE() << "a cache in 1e-6 of the device's memory";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_memory_utilization"), std::string::npos) << e.what();
  }
}

// A plan with a persistent region runs on the executor adapter (the paged runner runs none), and
// says so in its backend.
TEST(GpuRunner, PersistentPlanGoesToTheAdapter) {
  MEGAOPS_REQUIRE_GPU();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major != 9) GTEST_SKIP() << "persistent regions need the bulk streaming kernel (sm_90)";
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  GpuRunnerOptions g;
  g.max_context = 64;
  Plan plan = conventional_plan(1);
  plan.decode.backend = PlanBackend::PdlChain;
  plan.decode.overlap_streams = 1;
  plan.decode.regions = {{"embedding", RegionBackend::Persistent, 0}};
  g.plans = {plan};
  Engine e(make_gpu_runner(ckpt, g), nullptr, {});
  EXPECT_TRUE(is_executor_adapter(e.runner()));
  EXPECT_NE(std::string(e.runner().backend()).find("persistent"), std::string::npos)
      << e.runner().backend();
  RequestParams p;
  p.max_tokens = NEW_TOKENS;
  p.ignore_eos = true;
  const uint64_t a = e.add_request(PROMPT, p);
  EXPECT_EQ(static_cast<int>(run_all(e).at(a).size()), NEW_TOKENS);
}

TEST(GpuRunner, AdapterGivesTheExecutorsTokens) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  const std::vector<int> want = executor_tokens(ckpt);
  GpuRunnerOptions g;
  g.max_context = 64;
  Engine e(make_gpu_executor_adapter(ckpt, g), nullptr, {});
  EXPECT_TRUE(is_executor_adapter(e.runner()));
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

TEST(GpuRunner, AdapterHostSamplingMatchesTheExecutorsSampler) {
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
  Engine host(make_gpu_executor_adapter(ckpt, greedy), nullptr, {});
  Engine device(make_gpu_executor_adapter(ckpt, sampled), nullptr, {});
  GpuRunnerOptions paged_options = greedy;
  paged_options.plans = {conventional_plan(1)};                     // the adapter's executor's step
  Engine paged(make_gpu_runner(ckpt, paged_options), nullptr, {});  // rows sample on their own
  const uint64_t h = host.add_request(PROMPT, p);
  const uint64_t d = device.add_request(PROMPT, p);
  const uint64_t q = paged.add_request(PROMPT, p);
  // The GPU sampler sums probabilities in fp32 and ref::sample in double: they pick the same token
  // unless a draw lands within rounding of a boundary (about 1e-6 a token, sampling_test.cu). The
  // paged runner draws from the request's own counter (seed, stream 0, token index) as the
  // executor's sampler does for its one row, from the logits of the same step.
  const std::vector<int> on_device = run_all(device).at(d);
  EXPECT_EQ(run_all(host).at(h), on_device);
  EXPECT_EQ(run_all(paged).at(q), on_device);
}

TEST(GpuRunner, WhatTheAdapterCannotRunIsAnError) {
  MEGAOPS_REQUIRE_GPU();
  const Checkpoint ckpt = Checkpoint::open(tiny_checkpoint());
  GpuRunnerOptions g;
  g.max_context = 64;
  std::unique_ptr<ModelRunner> r = make_gpu_executor_adapter(ckpt, g);
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
  EXPECT_THROW(make_gpu_executor_adapter(ckpt, too_long), InputError);
  EXPECT_THROW(make_gpu_runner(ckpt, too_long), InputError);
}

}  // namespace
}  // namespace megaops
