// See event_graph.h. Launches are placed one by one in id order (the order a host issues them),
// so a later launch never overtakes an earlier one of the same pool: that is how the executors
// issue producers before consumers.
#include "planner/event_graph.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace megaops {

EventResult simulate_events(const EventGraph& g) {
  const int n = static_cast<int>(g.launches.size());
  EventResult r;
  r.start_us.assign(n, 0);
  r.finish_us.assign(n, 0);
  std::vector<double> last_start(g.pool_ctas.size(), 0);
  for (int i = 0; i < n; ++i) {
    const Launch& l = g.launches[i];
    if (l.pool < 0 || l.pool >= static_cast<int>(g.pool_ctas.size()) ||
        l.ctas > g.pool_ctas[l.pool] || l.ctas < 0 || l.duration_us < 0)
      throw_input_error("event graph", "launch " + l.name,
                        "expected a pool it fits in and a duration >= 0");
    double t = last_start[l.pool];
    for (int d : l.deps) {
      if (d < 0 || d >= i)
        throw_input_error("event graph", "launch " + l.name + " dep",
                          "expected an earlier launch, found " + std::to_string(d));
      t = std::max(t, r.finish_us[d]);
    }
    // Earliest t at which the CTAs held by overlapping launches of this pool leave room.
    for (;;) {
      int held = 0;
      double next_free = -1;
      for (int j = 0; j < i; ++j) {
        const Launch& o = g.launches[j];
        if (o.pool != l.pool || r.start_us[j] > t || r.finish_us[j] <= t) continue;
        held += o.ctas;
        if (next_free < 0 || r.finish_us[j] < next_free) next_free = r.finish_us[j];
      }
      if (held + l.ctas <= g.pool_ctas[l.pool] || next_free < 0) break;
      t = next_free;
    }
    r.start_us[i] = t;
    r.finish_us[i] = t + l.duration_us;
    last_start[l.pool] = t;
    r.makespan_us = std::max(r.makespan_us, r.finish_us[i]);
  }
  return r;
}

double publication_time(const EventResult& r, int first_chunk_launch, int producer_step_h_launch) {
  return std::max(r.finish_us.at(first_chunk_launch), r.finish_us.at(producer_step_h_launch));
}

StreamingPair streaming_pair(int steps, int h, double producer_step_us, double consumer_chunk_us,
                             int total_ctas, int producer_ctas) {
  if (steps < 1 || h < 1 || h > steps)
    throw_input_error("streaming pair", "h", "expected 1..steps");
  if (producer_ctas < 1 || producer_ctas > total_ctas)
    throw_input_error("streaming pair", "producer_ctas", "expected 1..total_ctas");
  StreamingPair s;
  const bool serial = producer_ctas == total_ctas;
  s.graph.pool_ctas = {total_ctas};
  int prev_step = -1;
  for (int i = 0; i < steps; ++i) {
    Launch l{"producer step " + std::to_string(i + 1), producer_step_us, {}, 0, producer_ctas};
    if (prev_step >= 0) l.deps.push_back(prev_step);
    s.graph.launches.push_back(l);
    prev_step = static_cast<int>(s.graph.launches.size()) - 1;
    // The consumer's first chunk goes right after the producer step it needs; serially it then
    // blocks the next producer step, on a split it runs beside it.
    if (i + 1 == h) {
      s.step_h = static_cast<int>(s.graph.launches.size()) - 1;
      Launch c{"consumer chunk 1",
               consumer_chunk_us,
               {s.step_h},
               0,
               serial ? total_ctas : total_ctas - producer_ctas};
      s.graph.launches.push_back(c);
      s.first_chunk = static_cast<int>(s.graph.launches.size()) - 1;
    }
  }
  return s;
}

RequestTimes request_times(double prefill_us, double decode_step_us, int decode_steps) {
  EventGraph g;
  g.pool_ctas = {1};
  g.launches.push_back({"prefill", prefill_us, {}, 0, 1});
  for (int i = 0; i < decode_steps; ++i)
    g.launches.push_back({"decode " + std::to_string(i + 1), decode_step_us, {i}, 0, 1});
  const EventResult r = simulate_events(g);
  return {r.finish_us[0], r.makespan_us};
}

std::string event_graph_dot(const EventGraph& g, const EventResult& r) {
  std::ostringstream o;
  o << "digraph events {\n  rankdir=LR;\n";
  for (size_t i = 0; i < g.launches.size(); ++i) {
    const Launch& l = g.launches[i];
    o << "  e" << i << " [shape=box,label=\"" << l.name << "\\npool " << l.pool << ", " << l.ctas
      << " CTAs\\n"
      << r.start_us[i] << " .. " << r.finish_us[i] << " us\"];\n";
    for (int d : l.deps) o << "  e" << d << " -> e" << i << ";\n";
  }
  o << "}\n";
  return o.str();
}

std::string event_graph_json(const EventGraph& g, const EventResult& r) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < g.launches.size(); ++i) {
    const Launch& l = g.launches[i];
    j.push_back({{"name", l.name},
                 {"duration_us", l.duration_us},
                 {"deps", l.deps},
                 {"pool", l.pool},
                 {"ctas", l.ctas},
                 {"start_us", r.start_us[i]},
                 {"finish_us", r.finish_us[i]}});
  }
  return nlohmann::json{{"pool_ctas", g.pool_ctas}, {"launches", j}}.dump(1);
}

}  // namespace megaops
