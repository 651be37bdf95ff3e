// The event graph of one pipeline candidate (pipeline_plan.h): the stream's work in host issue
// order, grouped into launches by region, with durations from the pipeline's service table, and
// the first publication and last chunk it gives. Internal to the pipeline planner (and its
// tests); separate from pipeline_plan.cpp to keep each file one concern.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/pipeline.h"
#include "planner/event_graph.h"
#include "planner/pipeline_plan.h"

namespace megaops {

// Service time of graph `graph` (PipelineService::graph numbering) under `backend` at `budget`
// CTAs, per run.
using PipelineServiceFn = std::function<double(int graph, Backend backend, int budget)>;

struct PipelineEvents {
  EventGraph graph;
  EventResult result;
  std::vector<std::string> names;
  int first_chunk = -1, step_h = -1, last_chunk = -1;  // launch ids
  double t_pub_us = 0, first_chunk_us = 0, step_h_us = 0, last_chunk_us = 0;
};

// Builds and simulates candidate `c` of pipeline `p` (step h = publication_step(p)).
PipelineEvents simulate_pipeline_events(const PipelineConfig& p, const PipelineCandidate& c,
                                        const PipelineServiceFn& service,
                                        const PipelineEventCosts& costs);

}  // namespace megaops
