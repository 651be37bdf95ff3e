// The event graph: resource holding, first publication of a streaming consumer
// (T_pub = max(first chunk done, producer step h done)) and time to first token.
#include "planner/event_graph.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace megaops {
namespace {

TEST(EventGraph, HeldCtasDelayLaunchesThatDoNotFit) {
  EventGraph g;
  g.pool_ctas = {132};
  g.launches = {{"persistent a", 10, {}, 0, 100}, {"b", 3, {}, 0, 40}, {"c", 2, {}, 0, 32}};
  const EventResult r = simulate_events(g);
  // b needs 40 CTAs beside a's 100: it waits for a; c (32) fits beside a but is issued after b.
  EXPECT_DOUBLE_EQ(r.start_us[1], 10);
  EXPECT_DOUBLE_EQ(r.start_us[2], 10);
  EXPECT_DOUBLE_EQ(r.makespan_us, 13);
  g.launches.push_back({"too big", 1, {}, 0, 200});
  EXPECT_THROW(simulate_events(g), InputError);
}

TEST(EventGraph, PublicationIsTheLaterOfChunkAndProducerStep) {
  // Serial: steps of 5 us, chunk needs step 2 and takes 4 us: chunk done at 14, step 2 at 10.
  const StreamingPair serial = streaming_pair(4, 2, 5, 4, 132, 132);
  const EventResult rs = simulate_events(serial.graph);
  EXPECT_DOUBLE_EQ(publication_time(rs, serial.first_chunk, serial.step_h), 14);
  // Split 88/44, producer steps 6 us, chunk 7 us beside them: chunk done at 12 + 7 = 19.
  const StreamingPair split = streaming_pair(4, 2, 6, 7, 132, 88);
  const EventResult rp = simulate_events(split.graph);
  EXPECT_DOUBLE_EQ(publication_time(rp, split.first_chunk, split.step_h), 19);
  // The producer keeps going beside the consumer: 4 steps end at 24, not 24 + 7.
  EXPECT_DOUBLE_EQ(rp.makespan_us, 24);
  // Publication is bounded below by the producer step even when the chunk is instant.
  const StreamingPair instant = streaming_pair(4, 3, 6, 0, 132, 88);
  const EventResult ri = simulate_events(instant.graph);
  EXPECT_DOUBLE_EQ(publication_time(ri, instant.first_chunk, instant.step_h), 18);
}

TEST(EventGraph, TimeToFirstTokenIsThePrefill) {
  const RequestTimes t = request_times(1500, 400, 3);
  EXPECT_DOUBLE_EQ(t.ttft_us, 1500);
  EXPECT_DOUBLE_EQ(t.last_token_us, 2700);
}

TEST(EventGraph, DumpsNameEveryLaunch) {
  const StreamingPair s = streaming_pair(2, 1, 1, 1, 132, 66);
  const EventResult r = simulate_events(s.graph);
  EXPECT_NE(event_graph_dot(s.graph, r).find("consumer chunk 1"), std::string::npos);
  EXPECT_NE(event_graph_json(s.graph, r).find("\"finish_us\""), std::string::npos);
}

}  // namespace
}  // namespace megaops
