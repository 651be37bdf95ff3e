// The engine behind its thread-safe queue: requests submitted from many threads get the tokens
// they get on a plain engine, aborts end queued and running requests (blocks freed), a closed
// admission refuses, drain waits for the running requests (or its deadline), and a request that
// can never run is refused at submit, naming the field.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/engine_test_util.h"
#include "test_util.h"

namespace megaops {
namespace {

using testing::prompt_ids;
using testing::tiny_engine;

RequestParams greedy(int max_tokens) {
  RequestParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// The channel's outputs until the finished one.
std::vector<RequestOutput> collect(RequestChannel& ch) {
  std::vector<RequestOutput> all;
  for (;;)
    for (RequestOutput& o : ch.wait(std::chrono::milliseconds(100))) {
      all.push_back(std::move(o));
      if (all.back().finished) return all;
    }
}

std::vector<int> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<int> t;
  for (const RequestOutput& o : outs) t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
  return t;
}

CpuRunnerOptions batch_of(int rows) {
  CpuRunnerOptions ro;
  ro.max_decode_rows = rows;
  return ro;
}

TEST(AsyncEngine, ThreadsGetThePlainEnginesTokens) {
  std::vector<std::vector<int>> want;
  for (int i = 0; i < 8; ++i) {
    auto e = tiny_engine();
    const uint64_t id = e->add_request(prompt_ids(3 + 5 * i, i), greedy(6 + i));
    want.push_back(testing::run_to_end(*e)[id].tokens);
  }
  AsyncEngine engine(tiny_engine(batch_of(4)));
  std::vector<std::vector<int>> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      const AsyncEngine::Ticket t = engine.submit(prompt_ids(3 + 5 * i, i), greedy(6 + i));
      const auto outs = collect(*t.channel);
      for (const RequestOutput& o : outs) EXPECT_EQ(o.id, t.id);
      EXPECT_EQ(outs.back().finish_reason, FinishReason::Length);
      got[i] = tokens_of(outs);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(got, want);
  EXPECT_TRUE(engine.drain(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.finished_total.at("length"), 8u);
  // Every step ran the model once, inside a loop iteration that took at least as long.
  EXPECT_EQ(s.model_step_s.count, s.steps_total);
  EXPECT_GE(s.engine_iteration_s.count, s.model_step_s.count);
  EXPECT_GE(s.engine_iteration_s.sum, s.model_step_s.sum);
  EXPECT_GT(s.model_step_s.sum, 0.0);
}

TEST(AsyncEngine, AbortEndsQueuedAndRunningRequests) {
  AsyncEngine engine(tiny_engine(batch_of(1)));
  const AsyncEngine::Ticket running = engine.submit(prompt_ids(10, 1), greedy(200));
  const AsyncEngine::Ticket queued = engine.submit(prompt_ids(10, 2), greedy(200));
  // Wait for the first token of the running one.
  std::vector<RequestOutput> first;
  while (first.empty()) first = running.channel->wait(std::chrono::milliseconds(100));
  engine.abort(queued.id);
  engine.abort(running.id);
  engine.abort(12345);  // unknown: ignored
  EXPECT_EQ(collect(*queued.channel).back().finish_reason, FinishReason::Abort);
  const auto rest = collect(*running.channel);
  EXPECT_EQ(rest.back().finish_reason, FinishReason::Abort);
  EXPECT_LT(first.size() + rest.size(), 200u);
  EXPECT_TRUE(engine.drain(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, ClosedAdmissionDrainAndAbortAll) {
  AsyncEngine engine(tiny_engine(batch_of(2)));
  const AsyncEngine::Ticket a = engine.submit(prompt_ids(10, 1), greedy(150));
  const AsyncEngine::Ticket b = engine.submit(prompt_ids(10, 2), greedy(4));
  engine.close_admission();
  EXPECT_FALSE(engine.admitting());
  EXPECT_THROW(engine.submit(prompt_ids(3, 3), greedy(2)), Unavailable);
  EXPECT_EQ(collect(*b.channel).back().finish_reason, FinishReason::Length);
  // A deadline that has passed: not drained while `a` runs.
  EXPECT_FALSE(engine.drain(std::chrono::steady_clock::now()));
  engine.abort_all();
  EXPECT_EQ(collect(*a.channel).back().finish_reason, FinishReason::Abort);
  EXPECT_TRUE(engine.drain(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.kv_blocks_used + s.running + s.waiting, 0);
}

TEST(AsyncEngine, RefusesAtSubmitWhatCanNeverRun) {
  AsyncEngine engine(tiny_engine());
  testing::expect_input_error([&] { engine.submit(prompt_ids(250, 0), greedy(10)); },
                              {"max_tokens", "context is 256"});
  testing::expect_input_error([&] { engine.submit({}, greedy(10)); }, {"prompt"});
  const AsyncEngine::Ticket t = engine.submit(prompt_ids(5, 0), greedy(3));
  EXPECT_EQ(tokens_of(collect(*t.channel)).size(), 3u);
}

TEST(AsyncEngine, DestructionAbortsWhatIsLeft) {
  std::shared_ptr<RequestChannel> ch;
  {
    AsyncEngine engine(tiny_engine());
    ch = engine.submit(prompt_ids(5, 0), greedy(200)).channel;
  }
  EXPECT_TRUE(collect(*ch).back().finished);
}

}  // namespace
}  // namespace megaops
