// The pipeline planner (planner/pipeline_plan.h): its event graph against timelines worked out by
// hand (serial, a fixed split, a fused region), and the ranking: every cover, backend and policy
// is ranked once, the runnable ones are exactly the executors' serial compositions, the baseline
// and the monolith are found, evidence moves the prediction, and the result is deterministic.
#include "planner/pipeline_plan.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "models/codec_graph.h"
#include "models/pipeline_json.h"
#include "planner/pipeline_events.h"

namespace megaops {
namespace {

PipelineConfig tiny() {
  return read_pipeline(std::string(MEGAOPS_SOURCE_DIR) + "/tests/fixtures/pipelines/tiny.json");
}

PipelineCandidate candidate(std::vector<PipelineRegion> regions, Policy policy = Policy::Serial,
                            int split = 0) {
  PipelineCandidate c;
  c.regions = std::move(regions);
  c.policy = policy;
  c.split = split;
  return c;
}

// Budget-independent service times: P 10, B 1, L 2 a run (3 runs a frame), first chunk 5, later 7.
double fixed_service(int graph, Backend, int) {
  const double us[] = {10, 1, 2, 5, 7};
  return us[graph];
}

PipelineEventCosts no_fixed_costs() {
  PipelineEventCosts k;
  k.persistent_region_us = 0;
  k.launch_us = 0;
  k.dynamic_tile_us = 0;
  k.graph_tiles = {1, 1, 1, 1, 1};
  return k;
}

TEST(PipelineEvents, SerialTimelineByHand) {
  // tiny: delay 1, chunk 1 = frames 0..2 ready after step 4, h = 5. Step 1: P 10 + L 6 = 16;
  // steps 2-4: B 1 + L 6 each -> 37; chunk 1: 5 -> 42; step 5: B -> 43.
  const PipelineConfig p = tiny();
  const auto c = candidate({{0, 0, Backend::Conventional},
                            {1, 1, Backend::Conventional},
                            {2, 2, Backend::Conventional},
                            {3, 3, Backend::Conventional}});
  const PipelineEvents e = simulate_pipeline_events(p, c, fixed_service, no_fixed_costs());
  EXPECT_DOUBLE_EQ(e.first_chunk_us, 42);
  EXPECT_DOUBLE_EQ(e.step_h_us, 43);
  EXPECT_DOUBLE_EQ(e.t_pub_us, 43);
  // 12 steps of B + L (P instead of B at step 1) and 4 chunks (5 + 7 * 3).
  EXPECT_DOUBLE_EQ(e.last_chunk_us, 10 + 11 * 1 + 12 * 6 + 5 + 21);
}

TEST(PipelineEvents, FixedSplitDecodesBesideTheProducer) {
  // B+L on the producer side (88 CTAs), the codec on the rest: chunk 1 starts when L(4) is done
  // (10 + 6 + 3 * 7 = 37) and ends at 42, while step 5's B ends at 38: T_pub 42. Chunk 2 (ready
  // after step 8, 65) ends at 72; chunks 3 and 4 (both after step 12, 93) at 100 and 107.
  const PipelineConfig p = tiny();
  const auto c = candidate(
      {{0, 0, Backend::Conventional}, {1, 2, Backend::Persistent}, {3, 3, Backend::Persistent}},
      Policy::FixedSplit, 88);
  const PipelineEvents e = simulate_pipeline_events(p, c, fixed_service, no_fixed_costs());
  EXPECT_DOUBLE_EQ(e.step_h_us, 38);
  EXPECT_DOUBLE_EQ(e.first_chunk_us, 42);
  EXPECT_DOUBLE_EQ(e.t_pub_us, 42);
  EXPECT_DOUBLE_EQ(e.last_chunk_us, 107);
  EXPECT_EQ(e.graph.pool_ctas, (std::vector<int>{88, 44}));
  // With the local transformer a region of its own it is on the consumer side: the producer
  // runs ahead (B(s) every 1 us) and L(s) follows on the consumer pool: L(4) ends at 34, chunk 1
  // at 39, which is T_pub (step 5 ended at 14).
  const auto d = candidate({{0, 0, Backend::Conventional},
                            {1, 1, Backend::Conventional},
                            {2, 2, Backend::Conventional},
                            {3, 3, Backend::Persistent}},
                           Policy::FixedSplit, 88);
  const PipelineEvents f = simulate_pipeline_events(p, d, fixed_service, no_fixed_costs());
  EXPECT_DOUBLE_EQ(f.step_h_us, 14);
  EXPECT_DOUBLE_EQ(f.first_chunk_us, 39);
  EXPECT_DOUBLE_EQ(f.t_pub_us, 39);
}

TEST(PipelineEvents, FusedRegionSavesAnEntryPerBoundary) {
  // B+L persistent: one launch a step, 1 + 6 - 1.8 (the local transformer's region entry).
  const PipelineConfig p = tiny();
  PipelineEventCosts k = no_fixed_costs();
  k.persistent_region_us = 1.8;
  const auto c = candidate(
      {{0, 0, Backend::Conventional}, {1, 2, Backend::Persistent}, {3, 3, Backend::Conventional}});
  const PipelineEvents e = simulate_pipeline_events(p, c, fixed_service, k);
  // Step 1: P (own region) 10, then L alone 6; steps 2-4: 5.2 each; chunk 5; step 5's B: 1.
  EXPECT_NEAR(e.first_chunk_us, 10 + 6 + 3 * 5.2 + 5, 1e-9);
  EXPECT_NEAR(e.step_h_us, e.first_chunk_us + 1, 1e-9);
}

TEST(PipelinePlan, RanksEveryCompositionOnce) {
  const PipelineConfig p = tiny();
  const PipelineGraphs g = build_pipeline_graphs(p, 2);
  const PipelinePlanResult r = plan_pipeline(p, g, 2, ServiceTable{}, default_pipeline_costs());
  ASSERT_EQ(r.candidates, static_cast<int64_t>(r.ranked.size()));
  std::set<std::string> labels;
  int runnable = 0, serial = 0;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const PipelineCandidate& c = r.ranked[i];
    EXPECT_TRUE(labels.insert(c.label).second) << c.label;
    EXPECT_GT(c.t_pub_us, 0);
    EXPECT_GE(c.t_pub_us, c.first_chunk_us);
    EXPECT_GE(c.t_pub_us, c.step_h_us);
    EXPECT_GT(c.rtfx, 0);
    EXPECT_GT(c.steady_rtfx, 0) << c.label;
    if (i > 0) EXPECT_LE(r.ranked[i - 1].t_pub_us, c.t_pub_us);
    runnable += c.executor_supports;
    serial += c.policy == Policy::Serial;
  }
  // Serial covers: 64 (P|B|L|C) + 8 + 8 + 8 + 2 + 1 + 2 + 1 = 94.
  EXPECT_EQ(serial, 94);
  // Runnable: P and C conventional, B and L each conventional, conventional + PDL or the chain.
  EXPECT_EQ(runnable, 9);
  ASSERT_GE(r.pick, 0);
  EXPECT_TRUE(r.ranked[r.pick].executor_supports);
  ASSERT_GE(r.baseline_rank, 0);
  EXPECT_EQ(r.ranked[r.baseline_rank].label, "P:conv | B:conv | L:conv | C:conv serial");
  ASSERT_GE(r.monolith_rank, 0);
  EXPECT_EQ(r.ranked[r.monolith_rank].label, "P+B+L+C:pers serial");
  // Deterministic.
  const PipelinePlanResult again = plan_pipeline(p, g, 2, ServiceTable{}, default_pipeline_costs());
  ASSERT_EQ(again.ranked.size(), r.ranked.size());
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    EXPECT_EQ(again.ranked[i].label, r.ranked[i].label);
    EXPECT_EQ(again.ranked[i].t_pub_us, r.ranked[i].t_pub_us);
  }
}

TEST(PipelinePlan, EvidenceOfTheCodecMovesThePrediction) {
  // A codec conv measured 1000x slower than first principles: the serial baseline's first chunk
  // grows by about that much, and splits that decode beside the producer gain on serial.
  const PipelineConfig p = tiny();
  const PipelineGraphs g = build_pipeline_graphs(p, 1);
  const PipelineCosts costs = default_pipeline_costs();
  const PipelinePlanResult before = plan_pipeline(p, g, 1, ServiceTable{}, costs);
  ServiceTable table;
  for (const OpGraph* cg : {&g.codec_first, &g.codec_chunk})
    for (const Op& op : cg->ops)
      if (op.kind == OpKind::Conv)
        table.add({op.name, shape_signature(op, cg->context), "fp32", "conventional",
                   costs.codec_cost.machine.workers, costs.codec_cost.gpu},
                  1000.0, 1, "test");
  const PipelinePlanResult after = plan_pipeline(p, g, 1, table, costs);
  const PipelineCandidate& b0 = before.ranked[before.baseline_rank];
  const PipelineCandidate& b1 = after.ranked[after.baseline_rank];
  EXPECT_GT(b1.first_chunk_us, b0.first_chunk_us + 1000);
  int measured = 0;
  for (const OpCalibration& c : after.calibration) measured += c.measured_us >= 0;
  EXPECT_GT(measured, 0);
  EXPECT_NE(after.ranked[0].policy, Policy::Serial);  // the long codec decodes beside the producer
}

TEST(PipelinePlan, RefusesBadSplitsAndWritesCompositions) {
  const PipelineConfig p = tiny();
  const PipelineGraphs g = build_pipeline_graphs(p, 1);
  PipelinePlanOptions opt;
  opt.splits = {0};
  EXPECT_THROW(plan_pipeline(p, g, 1, ServiceTable{}, default_pipeline_costs(), opt), InputError);
  const PipelinePlanResult r = plan_pipeline(p, g, 1, ServiceTable{}, default_pipeline_costs());
  const std::string j = pipeline_candidate_json(r, r.pick);
  EXPECT_NE(j.find("megaops-pipeline-composition/1"), std::string::npos);
  EXPECT_NE(j.find("\"executor_supports\": true"), std::string::npos);
  const std::string ev = pipeline_event_graph_json(p, r, r.pick);
  EXPECT_NE(ev.find("\"launches\""), std::string::npos);
}

}  // namespace
}  // namespace megaops
