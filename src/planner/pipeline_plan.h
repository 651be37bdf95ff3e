// The cut planner for a streaming pipeline (graph/pipeline.h), objective first publication: its
// four ordered groups (prefill P, producer decode step B, local transformer L, codec decoder C)
// form the region graph; a candidate is a cover of the groups by contiguous regions, a backend per
// region (conventional, conventional + PDL, the PDL chain, a persistent region) and a GPU-sharing
// policy between the producer side (the regions holding P or B) and the consumer side (the
// others): serial, a fixed CTA split, or a dynamic split. Each candidate is scored without running
// it:
//   - service table: the time of every group's graph (PipelineGraphs) under every backend and CTA
//     budget it can get, by the tile simulation of plan() (planner.h) on per-op costs calibrated
//     against the measured evidence (calibrate_op); layered graphs are simulated with one and two
//     layers and extrapolated, as plan() does for co-running candidates;
//   - event graph: the stream's launches (the prefill, each producer step, each frame's local
//     transformer, each chunk's codec window; consecutive work of one fused region is one launch)
//     with those durations, their dependencies (B(s) after B(s - 1), L(s) after B(s), a chunk after
//     the L(s) that completes its frames) and the CTAs they hold, simulated by simulate_events;
//   - objective: T_pub = max(F(first chunk decoded), F(producer step h)); also the real-time
//     factor RTFx = audio seconds / the time the last chunk is decoded, and its steady state (the
//     audio after the first chunk over the time between the first and the last chunk).
// Ranking: T_pub, ties by label. Candidates the executors cannot run are ranked too and marked
// (executor_supports = false). Pure C++; docs/pipeline.md has the model and its approximations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/pipeline.h"
#include "planner/planner.h"
#include "planner/service_table.h"

namespace megaops {

enum class PipelineGroup { Prefill = 0, Producer = 1, Local = 2, Codec = 3 };
constexpr int PIPELINE_GROUPS = 4;
const char* pipeline_group_name(int group);  // "prefill", "producer", "local", "codec"

// A contiguous run of groups [first_group, last_group] under one backend.
struct PipelineRegion {
  int first_group = 0, last_group = 0;
  Backend backend = Backend::Conventional;
};

struct PipelineCandidate {
  std::vector<PipelineRegion> regions;
  Policy policy = Policy::Serial;
  int split = 0;        // fixed / dynamic: CTAs of the producer side (the consumer gets the rest)
  double t_pub_us = 0;  // the objective
  double first_chunk_us = 0;  // F(first chunk decoded)
  double step_h_us = 0;       // F(producer step h)
  double last_chunk_us = 0;   // the whole stream decoded
  double rtfx = 0;            // audio seconds / last_chunk_us
  // Steady state: the audio after the first chunk over the time from the first chunk's decode to
  // the last one's (rtfx when there is one chunk).
  double steady_rtfx = 0;
  bool executor_supports = false;
  std::string label;   // "P:c | B:pdl_chain | L:c | C:c serial"
  std::string reason;  // against the all-conventional baseline
};

struct PipelinePlanOptions {
  std::vector<int> splits = {44, 66, 88};  // producer-side CTAs offered to fixed and dynamic splits
  bool include_unsupported = true;         // rank what the executors cannot run yet
  bool dynamic = true;                     // offer dynamic splits (eligible regions: persistent)
};

// Evidence and fixed costs: `cost` for the producer, local transformer and prefill (bf16
// decoders), `codec_cost` for the codec (its dtype, fp32, keys its evidence; its compute rate is
// cuDNN's). The executors run: the serial policy with every group its own region, the prefill and
// the codec conventional, the producer and local transformer conventional, conventional + PDL or
// the PDL chain (cost.pdl_supported / chain_supported).
struct PipelineCosts {
  CostModel cost;
  CostModel codec_cost;
};
// The defaults above with the codec's: dtype fp32, 2.0e6 FLOP/us a CTA (TF32 tensor cores at
// about half their peak: an assumption until its convolutions are measured).
PipelineCosts default_pipeline_costs();

// One group's graph under one backend and CTA budget, as the service table holds it.
struct PipelineService {
  int graph = 0;  // index into PipelineGraphs order: prefill, producer_step, local_step,
                  // codec_first, codec_chunk
  Backend backend = Backend::Conventional;
  int budget = 0;
  double us = 0;
};

// Fixed per-run costs the event graph adds: what a fused region saves per group boundary inside
// one launch, and what a dynamic split adds per run of a graph (its tiles' work-queue atomics).
struct PipelineEventCosts {
  int workers = 132;
  double persistent_region_us = 1.8;
  double launch_us = 1.8;
  double dynamic_tile_us = 0.1;
  std::vector<int64_t> graph_tiles;  // per graph, for the dynamic split's cost
};

struct PipelinePlanResult {
  std::string pipeline;
  int batch = 0;
  int step_h = 0;
  std::vector<PipelineCandidate> ranked;  // best first
  int pick = -1;                          // best candidate the executors run
  int baseline_rank = -1;                 // every group conventional, serial
  int monolith_rank = -1;                 // one persistent region over all four groups, serial
  int64_t candidates = 0;
  int64_t sim_events = 0;
  std::vector<PipelineService> services;
  std::vector<OpCalibration> calibration;
  PipelineEventCosts event_costs;
};

// Plans `p` at `batch` streams over its groups' graphs `g` (build_pipeline_graphs). Deterministic.
// Throws InputError on splits outside 1..workers - 1.
PipelinePlanResult plan_pipeline(const PipelineConfig& p, const PipelineGraphs& g, int batch,
                                 const ServiceTable& table, const PipelineCosts& costs,
                                 const PipelinePlanOptions& opt = {});

// A composition file (docs/pipeline.md): {"schema": "megaops-pipeline-composition/1", pipeline,
// batch, label, regions: [{groups: [...], backend}], policy, split, executor_supports, predicted:
// {t_pub_us, first_chunk_us, step_h_us, last_chunk_us, rtfx, steady_rtfx}, reason}.
std::string pipeline_candidate_json(const PipelinePlanResult& r, int index);

// The event graph of ranked candidate `index`, with its simulated times, as JSON (event_graph.h),
// for inspection.
std::string pipeline_event_graph_json(const PipelineConfig& p, const PipelinePlanResult& r,
                                      int index);

}  // namespace megaops
