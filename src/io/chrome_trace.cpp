#include "io/chrome_trace.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace megaops {

std::vector<int> trace_lanes(const std::vector<TraceEvent>& events) {
  std::vector<size_t> order(events.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return events[a].wait_start_ns < events[b].wait_start_ns;
  });
  std::map<uint32_t, std::vector<uint64_t>> lane_end;  // per SM: end time of each lane's last CTA
  std::vector<int> lanes(events.size(), 0);
  for (size_t i : order) {
    std::vector<uint64_t>& ends = lane_end[events[i].smid];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > events[i].wait_start_ns) ++lane;
    if (lane == ends.size()) ends.push_back(0);
    ends[lane] = events[i].work_end_ns;
    lanes[i] = static_cast<int>(lane);
  }
  return lanes;
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  uint64_t t0 = UINT64_MAX;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.wait_end_ns < e.wait_start_ns || e.work_end_ns < e.wait_end_ns)
      throw_input_error(
          "trace", "event " + std::to_string(i),
          "times go backwards (op " + e.op + ", CTA " + std::to_string(e.block) + ")");
    t0 = std::min(t0, e.wait_start_ns);
  }
  const std::vector<int> lanes = trace_lanes(events);
  auto us = [&](uint64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };
  nlohmann::json out = nlohmann::json::array();
  std::map<uint32_t, int> sm_lanes;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    sm_lanes[e.smid] = std::max(sm_lanes[e.smid], lanes[i] + 1);
    // One complete ("X") slice of this CTA's lane.
    auto slice = [&](const char* cat, uint64_t from, uint64_t to) {
      nlohmann::json args = {{"op_index", e.op_index}, {"cta", e.block}};
      if (e.tile >= 0) args["tile"] = e.tile;
      out.push_back({{"name", e.op},
                     {"cat", cat},
                     {"ph", "X"},
                     {"ts", us(from)},
                     {"dur", us(to) - us(from)},
                     {"pid", e.smid},
                     {"tid", lanes[i]},
                     {"args", std::move(args)}});
    };
    if (e.wait_end_ns > e.wait_start_ns) slice("wait", e.wait_start_ns, e.wait_end_ns);
    slice("work", e.wait_end_ns, e.work_end_ns);
  }
  for (const auto& [sm, n] : sm_lanes) {
    out.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", sm},
                   {"args", {{"name", "SM " + std::to_string(sm)}}}});
    out.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", sm}, {"args", {{"sort_index", sm}}}});
  }
  const nlohmann::json j = {{"traceEvents", out},
                            {"displayTimeUnit", "ns"},
                            {"otherData",
                             {{"model", meta.model},
                              {"gpu", meta.gpu},
                              {"backend", meta.backend},
                              {"batch", meta.batch},
                              {"ctas", events.size()},
                              {"dropped", meta.dropped}}}};
  return j.dump(1);
}

}  // namespace megaops
