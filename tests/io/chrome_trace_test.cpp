// The Chrome-trace writer of `megaops trace`: lanes per SM, slices, microseconds, bad input.
#include "io/chrome_trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megaops {
namespace {

TraceEvent ev(const std::string& op, uint32_t sm, uint64_t ws, uint64_t we, uint64_t end,
              uint32_t block = 0) {
  TraceEvent e;
  e.op = op;
  e.smid = sm;
  e.block = block;
  e.wait_start_ns = ws;
  e.wait_end_ns = we;
  e.work_end_ns = end;
  return e;
}

TEST(ChromeTrace, LanesPackConcurrentCtasPerSm) {
  // SM 0: a [100, 300), b [150, 250) overlaps a, c [300, 400) reuses a's lane; SM 1 independent.
  const std::vector<TraceEvent> events = {ev("a", 0, 100, 120, 300), ev("b", 0, 150, 150, 250),
                                          ev("c", 0, 300, 310, 400), ev("d", 1, 100, 100, 900)};
  EXPECT_EQ(trace_lanes(events), (std::vector<int>{0, 1, 0, 0}));
}

TEST(ChromeTrace, SlicesInMicrosecondsFromTheFirstWait) {
  TraceMeta meta;
  meta.model = "tiny";
  meta.batch = 2;
  const auto j = nlohmann::json::parse(chrome_trace_json(
      {ev("qkv_proj", 3, 2000, 3000, 7000, 5), ev("o_proj", 3, 1000, 1000, 1500)}, meta));
  const auto& te = j.at("traceEvents");
  int waits = 0, works = 0;
  for (const auto& e : te) {
    if (e.at("ph") != "X") continue;
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("cat") == "wait") {
      ++waits;
      EXPECT_EQ(e.at("name"), "qkv_proj");  // o_proj has no wait (start == end): no wait slice
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 1.0);
      EXPECT_EQ(e.at("args").at("cta"), 5);
    } else {
      ++works;
    }
  }
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(works, 2);
  EXPECT_EQ(j.at("otherData").at("batch"), 2);
  EXPECT_EQ(j.at("otherData").at("ctas"), 2);
}

TEST(ChromeTrace, TimesGoingBackwardsAreRejected) {
  EXPECT_THROW(chrome_trace_json({ev("x", 0, 500, 400, 600)}, {}), InputError);
  EXPECT_THROW(chrome_trace_json({ev("x", 0, 100, 400, 300)}, {}), InputError);
}

}  // namespace
}  // namespace megaops
