// The event graph: launches (a region, or one kernel of a conventional region), their durations
// (from the service table or the tile simulation), dependencies and the CTAs each holds while it
// runs. It answers what the tile graph cannot see: steady-state step time across launches that
// share the GPU, time to first token of a prefill + decode request, and the first publication of a
// streaming consumer, T_pub = max(first chunk done, producer step h done).
#pragma once

#include <string>
#include <vector>

namespace megaops {

struct Launch {
  std::string name;
  double duration_us = 0;
  std::vector<int> deps;  // earlier launches that must finish first
  int pool = 0;           // resource pool (the GPU, or one side of a fixed CTA split)
  int ctas = 0;           // CTAs held from start to finish (a persistent region holds its grid)
};

struct EventGraph {
  std::vector<Launch> launches;
  std::vector<int> pool_ctas;  // capacity of each pool
};

struct EventResult {
  std::vector<double> start_us, finish_us;
  double makespan_us = 0;
};

// Starts each launch, in id order per pool, at the earliest time its deps are done and its CTAs
// fit beside the launches still holding theirs. Deterministic. Throws InputError on a launch that
// needs more CTAs than its pool has or a dep that is not an earlier launch.
EventResult simulate_events(const EventGraph& g);

// T_pub = max(F(first consumer chunk), F(producer step h)).
double publication_time(const EventResult& r, int first_chunk_launch, int producer_step_h_launch);

// A streaming pair: `steps` producer steps, and a consumer whose first chunk needs producer step
// `h` (1-based). policy: producer and consumer share the GPU serially (ctas = all), or run side by
// side on a fixed split (producer_ctas / total - producer_ctas) with the given per-launch
// durations at those budgets. Returns the graph; first_chunk / step_h give the launch ids.
struct StreamingPair {
  EventGraph graph;
  int first_chunk = -1;
  int step_h = -1;
};
StreamingPair streaming_pair(int steps, int h, double producer_step_us, double consumer_chunk_us,
                             int total_ctas, int producer_ctas);

// A request: prefill (its last launch samples the first token) then `decode_steps` steps.
// Returns {time to first token, time to last token}.
struct RequestTimes {
  double ttft_us = 0;
  double last_token_us = 0;
};
RequestTimes request_times(double prefill_us, double decode_step_us, int decode_steps);

// Graphviz dot and JSON of an event graph with its simulated times, for inspection.
std::string event_graph_dot(const EventGraph& g, const EventResult& r);
std::string event_graph_json(const EventGraph& g, const EventResult& r);

}  // namespace megaops
