// The planner on synthetic graphs whose best answer is known analytically (overlap saves exactly
// the consumer's weight-load time; the best fixed CTA split balances per-CTA throughputs; a barrier
// wins when overlap starves a bandwidth-bound op), then on real configurations: determinism, the
// measured Llama-3.2-1B profile, and the bounded work of planning a Llama-3.1-8B decode step.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/text_file.h"
#include "models/step_graph.h"
#include "planner/event_graph.h"

namespace megaops {
namespace {

// One row, `tiles` column tiles of one column each.
Op synthetic(const std::string& name, int64_t tiles, double compute_us_per_tile,
             double weight_bytes_per_tile, const MachineModel& m) {
  Op o;
  o.name = name;
  o.kind = OpKind::Matmul;
  o.m = 1;
  o.n = tiles;
  o.rows = 1;
  o.cols = tiles;
  o.tile_rows = 1;
  o.tile_cols = 1;
  o.flops = compute_us_per_tile * tiles * m.worker_flops_per_us;
  o.weight_bytes = static_cast<int64_t>(weight_bytes_per_tile * tiles);
  return o;
}

OpGraph two_ops(Op a, Op b, bool dependent) {
  OpGraph g;
  g.model = "synthetic";
  g.batch = 1;
  if (dependent) b.inputs = {{0, ReadPattern::AllFoldable}};
  g.ops = {std::move(a), std::move(b)};
  return g;
}

const Candidate* find(const PlanResult& r, Backend first, Backend second, bool one_region,
                      Policy policy) {
  for (const Candidate& c : r.ranked) {
    if (c.policy != policy || (c.regions.size() == 1) != one_region) continue;
    if (c.regions.front().backend == first && c.regions.back().backend == second) return &c;
  }
  return nullptr;
}

// The two-op chain tests' machine: 1,000 bytes/us, unlimited staging, no fixed costs.
CostModel chain_cost() {
  CostModel cost;
  cost.machine.bytes_per_us = 1000;
  cost.machine.staging_bytes = 1e12;
  cost.launch_us = 0;
  cost.overlap_region_us = 0;
  cost.overlap_tile_us = 0;
  return cost;
}

TEST(Planner, OverlapSavesExactlyTheConsumerWeightLoad) {
  CostModel cost = chain_cost();
  // Producer: 4 tiles of 10 us compute, no bytes. Consumer: 8 tiles of 500 bytes (4 us through
  // the queue, less than the producer's 10 us) and 1 us compute.
  const OpGraph g = two_ops(synthetic("producer", 4, 10, 0, cost.machine),
                            synthetic("consumer", 8, 1, 500, cost.machine), true);
  const RegionGraph rg = single_op_groups(g);
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  const double weight_load_us = 8 * 500 / 1000.0;
  EXPECT_NEAR(r.baseline_us, 10 + 4 + 1, 1e-9);
  const Candidate* overlap = find(r, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(overlap, nullptr);
  EXPECT_NEAR(overlap->predicted_us, r.baseline_us - weight_load_us, 1e-9);
  EXPECT_EQ(r.ranked[r.pick].regions.size(), 1u);
  EXPECT_EQ(r.ranked[r.pick].regions[0].backend, Backend::Overlap);
  EXPECT_NE(r.ranked[r.pick].reason.find("overlap[producer..consumer] saves 4.0 us"),
            std::string::npos)
      << r.ranked[r.pick].reason;
  // "Overlap removed" keeps the barrier: it sees no gain.
  EXPECT_NEAR(overlap->no_overlap_us, r.baseline_us, 1e-9);

  // With the measured 1.8 us boundary on both sides, overlap also saves the one boundary it
  // removes: conventional pays two launches, the overlap region one.
  cost.launch_us = cost.overlap_region_us = 1.8;
  const PlanResult r2 = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  EXPECT_NEAR(r2.baseline_us, 1.8 + 10 + 1.8 + 4 + 1, 1e-9);
  const Candidate* o2 = find(r2, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(o2, nullptr);
  EXPECT_NEAR(o2->predicted_us, r2.baseline_us - weight_load_us - 1.8, 1e-9);
}

// Calibration where the first-principles model is slower than the evidence: the tile's compute
// partly overlaps its loads, so the occupancy goes negative and the evidence is still reproduced;
// only below the loads alone is the model left slower (and all compute taken off).
TEST(Planner, CalibrationOverlapsComputeWhereTheModelIsSlower) {
  const CostModel cost = chain_cost();
  // 8 tiles of 500 bytes (4 us through the queue) and 1 us compute each: 5 us alone.
  OpGraph g;
  g.model = "synthetic";
  g.batch = 1;
  g.ops = {synthetic("consumer", 8, 1, 500, cost.machine)};
  const RegionGraph rg = single_op_groups(g);
  auto calibrated = [&](double measured) {
    ServiceTable t;
    t.add({"consumer", shape_signature(g.ops[0], g.context), cost.dtype, "conventional",
           cost.machine.workers, cost.gpu},
          measured, 1, "synthetic");
    return plan(g, t, PlanOptions(), cost, &rg);
  };
  const PlanResult slower = calibrated(4.5);
  ASSERT_EQ(slower.calibration.size(), 1u);
  EXPECT_NEAR(slower.calibration[0].model_us, 5.0, 1e-9);
  EXPECT_FALSE(slower.calibration[0].model_slower);
  EXPECT_LT(slower.calibration[0].extra_tile_us, 0);
  EXPECT_NEAR(slower.baseline_us, 4.5, 1e-6);
  const PlanResult faster = calibrated(6.0);  // the usual case: occupancy added
  EXPECT_GT(faster.calibration[0].extra_tile_us, 0);
  EXPECT_NEAR(faster.baseline_us, 6.0, 1e-6);
  const PlanResult below_loads = calibrated(3.0);  // faster than its own loads: not reproducible
  EXPECT_TRUE(below_loads.calibration[0].model_slower);
  EXPECT_NEAR(below_loads.calibration[0].extra_tile_us, -1.0, 1e-9);
  EXPECT_NEAR(below_loads.baseline_us, 4.0, 1e-6);
}

// The overlap executor as it is (CostModel::overlap_tensor_waits): the consumer waits for the
// producer's whole output plus the handoff, and still streams its weights while it waits. Same
// chain as above: it saves the weight load and pays the handoff.
TEST(Planner, TensorWaitsPayTheHandoffAndKeepThePrefetch) {
  CostModel cost = chain_cost();
  cost.overlap_tensor_waits = true;
  cost.overlap_handoff_us = 2.5;
  const OpGraph g = two_ops(synthetic("producer", 4, 10, 0, cost.machine),
                            synthetic("consumer", 8, 1, 500, cost.machine), true);
  const RegionGraph rg = single_op_groups(g);
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  EXPECT_NEAR(r.baseline_us, 10 + 4 + 1, 1e-9);
  const Candidate* overlap = find(r, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(overlap, nullptr);
  // Producer 10 us; the consumer's 4 us of weights landed meanwhile; handoff 2.5; compute 1.
  EXPECT_NEAR(overlap->predicted_us, 10 + 2.5 + 1, 1e-9);
  // A handoff longer than the weight load makes overlap lose: the barrier is the better plan.
  cost.overlap_handoff_us = 6;
  const PlanResult slow = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  const Candidate* o2 = find(slow, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(o2, nullptr);
  EXPECT_NEAR(o2->predicted_us, 10 + 6 + 1, 1e-9);
  EXPECT_EQ(slow.ranked[slow.pick].regions[0].backend, Backend::Conventional);
}

// Vendor GEMMs in the overlap step (CostModel::overlap_vendor_gemms): a consumer the executor
// runs on cuBLASLt (here m = 16, above the small-m dispatch) starts on its producer's stream once
// the producer completed, without streaming weights before; an op after it starts only after a
// barrier, which is also its wait.
TEST(Planner, VendorGemmsWaitWithoutPrefetchAndBarrierAfter) {
  CostModel cost = chain_cost();
  cost.overlap_tensor_waits = true;
  cost.overlap_handoff_us = 2.5;
  cost.launch_us = 0.5;
  Op producer = synthetic("producer", 4, 10, 0, cost.machine);
  Op consumer = synthetic("consumer", 8, 1, 500, cost.machine);
  consumer.m = 16;
  ASSERT_TRUE(is_vendor_gemm(consumer));
  ASSERT_FALSE(is_vendor_gemm(producer));
  const OpGraph g = two_ops(producer, consumer, true);
  const RegionGraph rg = single_op_groups(g);
  {
    // Without the vendor model the consumer's 4 us of weights land while the producer runs.
    const PlanResult r = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
    const Candidate* small = find(r, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
    ASSERT_NE(small, nullptr);
    EXPECT_NEAR(small->predicted_us, 10 + 2.5 + 1, 1e-9);
  }
  cost.overlap_vendor_gemms = true;
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  const Candidate* vendor = find(r, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(vendor, nullptr);
  // Producer 10, a boundary 0.5, then the consumer's weights 4 and compute 1: no prefetch.
  EXPECT_NEAR(vendor->predicted_us, 10 + 0.5 + 4 + 1, 1e-9);
  // Conventional: the same plus the first launch.
  EXPECT_NEAR(r.baseline_us, 0.5 + 10 + 0.5 + 4 + 1, 1e-9);

  // A third op (small-m, 2 tiles of 500 bytes: 1 us of weights, 1 us compute) after the vendor
  // GEMM, reading its output: issued after the barrier (0.5 after the GEMM), so its weights do
  // not stream during the GEMM; its data is ready at the barrier (no handoff).
  OpGraph g3 = g;
  Op third = synthetic("third", 2, 1, 500, cost.machine);
  third.inputs = {{1, ReadPattern::AllFoldable}};
  g3.ops.push_back(third);
  const RegionGraph rg3 = single_op_groups(g3);
  const PlanResult r3 = plan(g3, ServiceTable(), PlanOptions(), cost, &rg3);
  const Candidate* all = find(r3, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(all, nullptr);
  EXPECT_NEAR(all->predicted_us, 10 + 0.5 + 4 + 1 + 0.5 + 1 + 1, 1e-9);
}

TEST(Planner, BestFixedSplitBalancesPerCtaThroughput) {
  CostModel cost;
  cost.launch_us = 0;
  // Producer: P = 1760 units at a = 2 units/us per CTA; consumer: C = 440 units at c = 1 per CTA,
  // independent of this step's producer (it consumes an earlier step). Balance:
  // P / (a x) = C / (c (132 - x))  ->  x = 132 (P/a) / (P/a + C/c) = 88, both done at 10 us.
  const double P = 1760, a = 2, C = 440, c = 1;
  const OpGraph g = two_ops(synthetic("producer", 1760, 1 / a, 0, cost.machine),
                            synthetic("consumer", 440, 1 / c, 0, cost.machine), false);
  const double x = 132 * (P / a) / (P / a + C / c);
  ASSERT_DOUBLE_EQ(x, 88);
  PlanOptions opt;
  opt.splits = {44, 66, 80, 88, 100, 110};
  const RegionGraph rg = single_op_groups(g);
  const PlanResult r = plan(g, ServiceTable(), opt, cost, &rg);
  const Candidate& best = r.ranked[r.pick];
  EXPECT_EQ(best.policy, Policy::FixedSplit);
  EXPECT_EQ(best.split, 88);
  EXPECT_NEAR(best.predicted_us, P / (a * x), 1e-9);
  // Every other offered split is predicted as its slower side: max(ceil(P/x)/a, ceil(C/(132-x))/c).
  for (const Candidate& cand : r.ranked) {
    if (cand.policy != Policy::FixedSplit || cand.regions[0].backend != Backend::Conventional ||
        cand.regions[1].backend != Backend::Conventional)
      continue;
    const int s = cand.split;
    const double expect = std::max(std::ceil(P / s) / a, std::ceil(C / (132 - s)) / c);
    EXPECT_NEAR(cand.predicted_us, expect, 1e-9) << s;
  }
  // Serially: ceil(1760/132) = 14 waves of 0.5 us, then ceil(440/132) = 4 waves of 1 us.
  EXPECT_NEAR(r.baseline_us, 7 + 4, 1e-9);
  EXPECT_NE(best.reason.find("fixed_split 88/44 sharing saves 1.0 us"), std::string::npos)
      << best.reason;
}

TEST(Planner, BarrierWinsWhenOverlapStarvesABandwidthBoundOp) {
  CostModel cost;  // H200 defaults: 4.4 TB/s, 1.8 us boundary, 0.3 us per overlapped tile
  // Every CTA must stream to reach the bandwidth: per-CTA rate = bandwidth / 132.
  cost.machine.worker_bytes_per_us = cost.machine.bytes_per_us / 132;
  const double w = 10 * cost.machine.worker_bytes_per_us;  // 10 us per tile per CTA
  const OpGraph g = two_ops(synthetic("a", 528, 0, w, cost.machine),
                            synthetic("b", 528, 0, w, cost.machine), true);
  PlanOptions opt;
  opt.splits = {66, 88};
  opt.step_backends = {};  // the compositions only (PDL: WholeStepBackends* below)
  opt.backends = {Backend::Conventional, Backend::Overlap};  // the overlap question alone
  const RegionGraph rg = single_op_groups(g);
  const PlanResult r = plan(g, ServiceTable(), opt, cost, &rg);
  // Conventional: each op streams at the full bandwidth: 4 waves of 10 us, plus its boundary.
  EXPECT_NEAR(r.baseline_us, 2 * 1.8 + 80, 1e-6);
  // Overlap saves one boundary but each of the 8 waves also holds its CTAs 0.3 us longer, time
  // the bandwidth-bound op needed: 1.8 + 8 * 10.3.
  const Candidate* overlap = find(r, Backend::Overlap, Backend::Overlap, true, Policy::Serial);
  ASSERT_NE(overlap, nullptr);
  EXPECT_NEAR(overlap->predicted_us, 1.8 + 8 * 10.3, 1e-6);
  // Splitting the CTAs starves both sides outright.
  for (const Candidate& c : r.ranked)
    if (c.policy == Policy::FixedSplit) {
      EXPECT_GT(c.predicted_us, r.baseline_us + 10);
    }
  const Candidate& best = r.ranked[r.pick];
  EXPECT_EQ(best.policy, Policy::Serial);
  for (const Region& reg : best.regions) EXPECT_EQ(reg.backend, Backend::Conventional);
  EXPECT_NEAR(best.predicted_us, r.baseline_us, 1e-9);
}

// A plan with an overlap region runs every op on the overlap executor: each op, in conventional
// and overlap regions alike, costs CostModel::overlap_serial_op_us more; the all-conventional plan
// pays nothing. And the baseline's rank is reported (the validation pool always measures it).
TEST(Planner, EveryOpOfAnOverlapPlanPaysTheSerialCost) {
  CostModel cost = chain_cost();
  const OpGraph g = two_ops(synthetic("producer", 10, 1.0, 2000, cost.machine),
                            synthetic("consumer", 10, 1.0, 3000, cost.machine), true);
  const RegionGraph rg = single_op_groups(g);
  PlanOptions opt;
  opt.backends = {Backend::Conventional, Backend::Overlap};
  opt.step_backends = {};  // the chain pays it per launched op: ChainLaunchesNoKernelForAFold
  const PlanResult base = plan(g, ServiceTable(), opt, cost, &rg);
  cost.overlap_serial_op_us = 5.0;
  const PlanResult with = plan(g, ServiceTable(), opt, cost, &rg);
  ASSERT_EQ(base.ranked.size(), with.ranked.size());
  int checked_mixed = 0, checked_all_overlap = 0;
  for (const Candidate& c : with.ranked) {
    const auto same = std::find_if(base.ranked.begin(), base.ranked.end(),
                                   [&](const Candidate& b) { return b.label == c.label; });
    ASSERT_NE(same, base.ranked.end()) << c.label;
    int ops = 0, conventional_ops = 0;
    bool other = false;
    for (const Region& r : c.regions) {
      ops += r.last_op - r.first_op + 1;
      if (r.backend == Backend::Conventional)
        conventional_ops += r.last_op - r.first_op + 1;
      else
        other = true;
    }
    EXPECT_EQ(ops, static_cast<int>(g.ops.size())) << c.label;
    EXPECT_NEAR(c.predicted_us - same->predicted_us, other ? 5.0 * ops : 0.0, 1e-9) << c.label;
    checked_mixed += other && conventional_ops > 0;
    checked_all_overlap += other && conventional_ops == 0;
  }
  EXPECT_GT(checked_mixed, 0);
  EXPECT_GT(checked_all_overlap, 0);
  for (const PlanResult* r : {&base, &with}) {
    ASSERT_GE(r->baseline_rank, 0);
    const Candidate& b = r->ranked[r->baseline_rank];
    EXPECT_EQ(b.regions.size(), 1u);
    EXPECT_EQ(b.regions[0].backend, Backend::Conventional);
    EXPECT_EQ(b.policy, Policy::Serial);
    EXPECT_NEAR(b.predicted_us, r->baseline_us, 1e-9);
  }
}

TEST(Planner, DeterministicRankingAndJson) {
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 8, 64);
  const PlanResult a = plan(g, ServiceTable(), PlanOptions(), CostModel());
  const PlanResult b = plan(g, ServiceTable(), PlanOptions(), CostModel());
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  ASSERT_GT(a.ranked.size(), 8u);
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(a.ranked[i].label, b.ranked[i].label);
    EXPECT_EQ(plan_json(a, g, static_cast<int>(i)), plan_json(b, g, static_cast<int>(i)));
  }
  // Ranked best first; every candidate explained against the baseline.
  for (size_t i = 1; i < a.ranked.size(); ++i)
    EXPECT_LE(a.ranked[i - 1].predicted_us, a.ranked[i].predicted_us);
  for (const Candidate& c : a.ranked)
    EXPECT_NE(c.reason.find("vs all-conventional"), std::string::npos);
}

TEST(Planner, MismatchedEvidenceIsNeverUsed) {
  const std::string path = std::string(MEGAOPS_SOURCE_DIR) +
                           "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";
  ServiceTable t;
  t.load_profile_json(read_text_file(path), path, 132, build_step_graph);
  const ModelConfig cfg = preset_config("llama3.2-1b");
  CostModel other_gpu;
  other_gpu.gpu = "NVIDIA H100 NVL";
  const PlanResult r = plan(build_decode_graph(cfg, "m", 1, 32), t, PlanOptions(), other_gpu);
  for (const OpCalibration& c : r.calibration) EXPECT_LT(c.measured_us, 0) << c.key;
  // Batch 8: no shape of the batch-1 profile matches (m differs), so nothing is calibrated.
  const PlanResult r8 = plan(build_decode_graph(cfg, "m", 8, 32), t, PlanOptions(), CostModel());
  for (const OpCalibration& c : r8.calibration) EXPECT_LT(c.measured_us, 0) << c.key;
  // Context 64: the matmuls match (their time does not depend on context), attention does not.
  const PlanResult r64 = plan(build_decode_graph(cfg, "m", 1, 64), t, PlanOptions(), CostModel());
  for (const OpCalibration& c : r64.calibration)
    EXPECT_EQ(c.measured_us >= 0, c.key.find("decode_attention") == std::string::npos) << c.key;
}

TEST(Planner, Llama1bBaselineMatchesTheMeasuredProfile) {
  const std::string path = std::string(MEGAOPS_SOURCE_DIR) +
                           "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";
  ServiceTable t;
  t.load_profile_json(read_text_file(path), path, 132, build_step_graph);
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 1, 32);
  const PlanResult r = plan(g, t, PlanOptions(), CostModel());
  const double measured = 1585.267;
  // Calibrated on the same profile, so this checks the calibration and the composition, not the
  // first-principles model (printed below; see docs/planner.md).
  EXPECT_NEAR(r.baseline_us, measured, 0.15 * measured);
  // Each op is bisected to 1e-9 us of occupancy; 149 launches sum to within 0.1 us.
  EXPECT_NEAR(r.baseline_us, measured, 0.1);
  for (const OpCalibration& c : r.calibration) {
    EXPECT_GE(c.measured_us, 0) << c.key;
    EXPECT_FALSE(c.model_slower) << c.key;
  }
  std::printf(
      "llama3.2-1b b1: baseline %.1f us (measured %.1f), first-principles %.1f us, "
      "best %s %.1f us\n  %s\n",
      r.baseline_us, measured, r.uncalibrated_baseline_us, r.ranked[r.pick].label.c_str(),
      r.ranked[r.pick].predicted_us, r.ranked[r.pick].reason.c_str());
  std::printf("  additive pick: %s (%.1f us by the planner); no-overlap pick: %s (%.1f us)\n",
              r.ranked[r.additive_pick].label.c_str(), r.ranked[r.additive_pick].predicted_us,
              r.ranked[r.no_overlap_pick].label.c_str(), r.ranked[r.no_overlap_pick].predicted_us);
}

TEST(Planner, Llama8bDecodePlanDoesBoundedWork) {
  const ModelConfig cfg = preset_config("llama3.1-8b");
  const OpGraph g = build_decode_graph(cfg, "llama3.1-8b", 1, 32);
  const auto t0 = std::chrono::steady_clock::now();
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), CostModel());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Not a timed test: the work is bounded by the simulated events (a few per task), which does
  // not depend on the machine.
  EXPECT_LT(r.sim_events, 10'000'000);
  EXPECT_LE(r.sim_events, 4 * r.sim_tasks);
  EXPECT_GT(r.candidates, 8);
  std::printf(
      "llama3.1-8b b1 decode: %lld candidates, %lld tasks, %lld events, %.0f ms; "
      "baseline %.1f us, best %s %.1f us\n",
      static_cast<long long>(r.candidates), static_cast<long long>(r.sim_tasks),
      static_cast<long long>(r.sim_events), ms, r.baseline_us, r.ranked[r.pick].label.c_str(),
      r.ranked[r.pick].predicted_us);
}

TEST(Planner, CapAndDumps) {
  const ModelConfig cfg = preset_config("tiny-llama3");
  const OpGraph g = build_decode_graph(cfg, "tiny", 1, 8);
  PlanOptions tight;
  tight.max_candidates = 3;
  EXPECT_THROW(plan(g, ServiceTable(), tight, CostModel()), InputError);
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), CostModel());
  const Candidate& c = r.ranked[r.pick];
  const RegionGraph rg = default_region_graph(g);
  EXPECT_NE(region_graph_dot(g, rg, c).find("digraph regions"), std::string::npos);
  EXPECT_NE(region_graph_json(g, rg, c).find("\"regions\""), std::string::npos);
  std::vector<double> extra(g.ops.size(), 0.0);
  const TileGraph t = build_tile_graph(g, c.regions, c.policy, c.split, CostModel(), extra, false);
  const TileSimResult s = simulate_tiles(t.tasks, t.pool_workers, CostModel().machine);
  EXPECT_NE(tile_graph_dot(g, t, s).find("qkv_proj L0 t0"), std::string::npos);
  EXPECT_NE(tile_graph_json(g, t, s).find("\"makespan_us\""), std::string::npos);
  EXPECT_THROW(tile_graph_dot(g, t, s, 10), InputError);
  const std::string j = plan_json(r, g, r.pick);
  EXPECT_NE(j.find("\"baseline_us\""), std::string::npos);
  EXPECT_NE(j.find("\"cta_budget\""), std::string::npos);
}

// PDL between two own kernels, analytically (1,000 bytes/us, one tile each, 1 us of weights and
// 5 us of compute each, plain boundary 1.8 us, PDL launch 1 us, PDL wait 0.65 us). Conventional:
// 1.8 + 1 + 5 + 1.8 + 1 + 5 = 15.6. With PDL the first kernel still pays a plain launch (the
// step's first), its tile loads until 2.8 and is done at 7.8; the second kernel's CTA starts at
// 1.8 + 1 = 2.8, streams its weights until 3.8 behind the first's, is released at 7.8 + 0.65 and
// done at 13.45. Without the early launch (the no-overlap selector) it loads after its release:
// 14.45. A vendor GEMM has no PDL prologue: plain boundaries around it, 15.6 again.
TEST(Planner, PdlBoundaryPrefetchesWeightsAndWaitsForTheGrid) {
  CostModel cost = chain_cost();
  cost.launch_us = 1.8;
  cost.pdl_launch_us = 1.0;
  cost.pdl_wait_us = 0.65;
  const OpGraph g = two_ops(synthetic("a", 1, 5.0, 1000, cost.machine),
                            synthetic("b", 1, 5.0, 1000, cost.machine), true);
  auto run = [&](const OpGraph& graph, Backend b, bool keep_barriers) {
    const std::vector<double> extra(graph.ops.size(), 0.0);
    const TileGraph t = build_tile_graph(graph, {{0, 1, b, cost.machine.workers}}, Policy::Serial,
                                         0, cost, extra, keep_barriers);
    return simulate_tiles(t.tasks, t.pool_workers, cost.machine).makespan_us;
  };
  EXPECT_NEAR(run(g, Backend::Conventional, false), 15.6, 1e-9);
  EXPECT_NEAR(run(g, Backend::ConventionalPdl, false), 13.45, 1e-9);
  EXPECT_NEAR(run(g, Backend::ConventionalPdl, true), 14.45, 1e-9);
  // The synthetic ops carry no fold bits: the chain launches both, like conventional + PDL.
  EXPECT_NEAR(run(g, Backend::PdlChain, false), 13.45, 1e-9);
  OpGraph vendor = g;
  vendor.ops[1].m = 64;  // a batch of 64 on the 8B's gate_up: cuBLASLt with PDL or without
  vendor.ops[1].n = 28672;
  vendor.ops[1].k = 4096;
  ASSERT_TRUE(is_vendor_gemm(vendor.ops[1], true));
  EXPECT_NEAR(run(vendor, Backend::ConventionalPdl, false), 15.6, 1e-9);

  // Both whole-step backends are ranked beside the compositions, runnable, with the PDL boundary
  // in the additive selector too (one boundary: 1.8 - 0.65 off the standalone sum).
  const RegionGraph rg = single_op_groups(g);
  const PlanResult r = plan(g, ServiceTable(), PlanOptions(), cost, &rg);
  const Candidate* pdl = nullptr;
  for (const Candidate& c : r.ranked)
    if (c.label == "step conventional_pdl serial") pdl = &c;
  ASSERT_NE(pdl, nullptr);
  EXPECT_TRUE(pdl->executor_supports);
  EXPECT_NEAR(pdl->predicted_us, 13.45, 1e-9);
  EXPECT_NEAR(pdl->no_overlap_us, 14.45, 1e-9);
  EXPECT_NEAR(pdl->additive_us, 2 * 7.8 - (1.8 - 0.65), 1e-9);
  EXPECT_LT(pdl->predicted_us, r.baseline_us);
  PlanOptions wrong;
  wrong.backends = {Backend::Conventional, Backend::PdlChain};
  EXPECT_THROW(plan(g, ServiceTable(), wrong, cost, &rg), InputError);
}

int count_folded(const std::vector<char>& f, OpCode code, const OpGraph& g, char how) {
  int n = 0;
  for (size_t i = 0; i < f.size(); ++i) n += g.ops[i].code == code && f[i] == how;
  return n;
}

// Where the chain folds, as the executor decides: norms before the streaming matmuls, SiLU·mul in
// a streaming gate_up's epilogue from an intermediate size of 8192 (else into a streaming down
// with the silu fold), RoPE into decode attention of at most two rows. Nothing at batch 8 (no
// matmul streams there but at m = 1) or in prefill.
TEST(Planner, ChainFoldsWhereTheExecutorFolds) {
  const CostModel cost;
  const ModelConfig l1b = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(l1b, "llama3.2-1b", 1, 32);
  const int layers = l1b.num_layers;
  const std::vector<char> all = chain_folded_ops(g, CHAIN_FOLD_ALL, cost);
  const char pro = FOLD_INTO_CONSUMER_PROLOGUE, epi = FOLD_INTO_PRODUCER_EPILOGUE;
  EXPECT_EQ(count_folded(all, OpCode::InputNorm, g, pro), layers);
  EXPECT_EQ(count_folded(all, OpCode::PostNorm, g, pro), layers);
  EXPECT_EQ(count_folded(all, OpCode::FinalNorm, g, pro), 1);
  EXPECT_EQ(count_folded(all, OpCode::SiluMul, g, epi), layers);  // inter 8192
  EXPECT_EQ(count_folded(all, OpCode::QkvRope, g, pro), layers);
  EXPECT_EQ(std::count(all.begin(), all.end(), 0),
            static_cast<long>(g.ops.size()) - 4 * layers - 1);
  // The epilogue does not depend on the silu flag; the others follow theirs.
  const std::vector<char> none = chain_folded_ops(g, 0, cost);
  EXPECT_EQ(count_folded(none, OpCode::SiluMul, g, epi), layers);
  EXPECT_EQ(std::count(none.begin(), none.end(), 0), static_cast<long>(g.ops.size()) - layers);
  CostModel no_epilogue = cost;
  no_epilogue.silu_epilogue_min_inter = -1;
  EXPECT_EQ(
      count_folded(chain_folded_ops(g, CHAIN_FOLD_SILU, no_epilogue), OpCode::SiluMul, g, pro),
      layers);

  const ModelConfig q06 = preset_config("qwen3-0.6b");  // inter 3072: into down, with the flag
  const OpGraph q = build_decode_graph(q06, "qwen3-0.6b", 1, 32);
  EXPECT_EQ(count_folded(chain_folded_ops(q, CHAIN_FOLD_SILU, cost), OpCode::SiluMul, q, pro),
            q06.num_layers);
  EXPECT_EQ(count_folded(chain_folded_ops(q, CHAIN_FOLD_NORMS, cost), OpCode::SiluMul, q, pro), 0);

  for (const OpGraph& other : {build_decode_graph(l1b, "llama3.2-1b", 8, 32),
                               build_prefill_graph(l1b, "llama3.2-1b", 64, 0)}) {
    const std::vector<char> f = chain_folded_ops(other, CHAIN_FOLD_ALL, cost);
    EXPECT_EQ(std::count(f.begin(), f.end(), 0), static_cast<long>(other.ops.size()));
  }
  // Batch 2 still folds RoPE (the per-query-head kernel), not the norms (m = 2 does not stream).
  const OpGraph b2 = build_decode_graph(l1b, "llama3.2-1b", 2, 32);
  const std::vector<char> f2 = chain_folded_ops(b2, CHAIN_FOLD_ALL, cost);
  EXPECT_EQ(count_folded(f2, OpCode::QkvRope, b2, pro), layers);
  EXPECT_EQ(count_folded(f2, OpCode::InputNorm, b2, pro), 0);
}

// The chain launches no kernel for a folded op (its tile graph has no task of it) and pays
// CostModel::overlap_serial_op_us per kernel it launches; one chain candidate per distinct set
// of folded ops (four at llama3.2-1b batch 1: norms and RoPE each on or off, the SwiGLU always in
// the epilogue; one at batch 8, where nothing folds).
TEST(Planner, ChainLaunchesNoKernelForAFold) {
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 1, 32);
  CostModel cost;
  const std::vector<double> extra(g.ops.size(), 0.0);
  const int last = static_cast<int>(g.ops.size()) - 1;
  const TileGraph t = build_tile_graph(g, {{0, last, Backend::PdlChain, 132, CHAIN_FOLD_ALL}},
                                       Policy::Serial, 0, cost, extra, false);
  const std::vector<char> folded = chain_folded_ops(g, CHAIN_FOLD_ALL, cost);
  std::vector<int> tasks(g.ops.size(), 0);
  for (const TileTask& k : t.tasks)
    if (!k.join) ++tasks[k.op];
  for (size_t i = 0; i < g.ops.size(); ++i)
    EXPECT_EQ(tasks[i] == 0, folded[i] != 0) << g.ops[i].name << " " << g.ops[i].layer;

  PlanOptions chain_only;
  chain_only.backends = {Backend::Conventional};
  chain_only.step_backends = {Backend::PdlChain};
  auto chains = [&](const OpGraph& graph, const CostModel& c) {
    std::vector<Candidate> out;
    for (const Candidate& cand : plan(graph, ServiceTable(), chain_only, c).ranked)
      if (cand.regions.size() == 1 && cand.regions[0].backend == Backend::PdlChain)
        out.push_back(cand);
    return out;
  };
  const std::vector<Candidate> c1 = chains(g, cost);
  ASSERT_EQ(c1.size(), 4u);
  for (const Candidate& c : c1) EXPECT_TRUE(c.regions[0].folds & CHAIN_FOLD_SILU) << c.label;
  // Every fold removes a boundary: the most folds predict the fastest chain.
  EXPECT_EQ(c1.front().regions[0].folds, static_cast<uint32_t>(CHAIN_FOLD_ALL));
  const std::vector<Candidate> c8 = chains(build_decode_graph(cfg, "llama3.2-1b", 8, 32), cost);
  ASSERT_EQ(c8.size(), 1u);
  EXPECT_EQ(c8[0].label, "step pdl_chain folds norms+silu+rope serial");

  CostModel serial = cost;
  serial.overlap_serial_op_us = 2.0;
  const std::vector<Candidate> cs = chains(g, serial);
  ASSERT_EQ(cs.size(), c1.size());
  for (const Candidate& c : cs) {
    const auto same =
        std::find_if(c1.begin(), c1.end(), [&](const Candidate& b) { return b.label == c.label; });
    ASSERT_NE(same, c1.end());
    const std::vector<char> f = chain_folded_ops(g, c.regions[0].folds, cost);
    EXPECT_NEAR(c.predicted_us - same->predicted_us,
                2.0 * static_cast<double>(std::count(f.begin(), f.end(), 0)), 1e-6)
        << c.label;
  }
}

// A persistent region is one resident launch: it cannot hold a vendor GEMM, so no cover puts one
// in it. llama3.2-1b batch 1 has none (its whole step may be one region); at batch 8 the
// cuBLASLt GEMMs leave persistent regions only between them.
// Persistent regions hold only what the executors run in one (persistent_refusal): at batch 1 of
// the 1B every op but step_advance, so the chain with persistent regions offers the whole step
// but step_advance as one region; at batch 8 (small-m and cuBLASLt matmuls, attention by kv head
// group on 132 SMs) only the embedding is left.
TEST(Planner, PersistentRegionsHoldOnlyWhatTheExecutorsRun) {
  const ModelConfig cfg = preset_config("llama3.2-1b");
  PlanOptions opt;
  opt.include_unsupported = true;
  for (int batch : {1, 8}) {
    const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", batch, 32);
    const PlanResult r = plan(g, ServiceTable(), opt, CostModel());
    const int last = static_cast<int>(g.ops.size()) - 1;
    int persistent = 0, all_but_advance = 0, chain_persistent = 0;
    for (const Candidate& c : r.ranked) {
      chain_persistent += c.label.rfind("chain+persistent", 0) == 0;
      for (const Region& reg : c.regions) {
        if (reg.backend != Backend::Persistent) continue;
        ++persistent;
        all_but_advance += reg.first_op == 0 && reg.last_op == last - 1;
        for (int i = reg.first_op; i <= reg.last_op; ++i) {
          EXPECT_FALSE(is_vendor_gemm(g.ops[i])) << c.label << ": " << g.ops[i].name;
          EXPECT_EQ(
              persistent_refusal(g, i, c.label.rfind("chain", 0) == 0, CostModel().machine.workers),
              "")
              << c.label << ": " << g.ops[i].name;
        }
      }
    }
    EXPECT_GT(persistent, 0) << "batch " << batch;
    EXPECT_EQ(all_but_advance > 0, batch == 1) << "batch " << batch;
    // Batch 1: every non-empty set of the five template groups; batch 8: the embedding alone.
    EXPECT_EQ(chain_persistent, batch == 1 ? 31 : 1) << "batch " << batch;
  }
}

// The decode-graph prefill against the layer prefill, analytically: a step plan whose candidates
// take 1,000 and 1,100 us (additive 900 / 1,300, without overlap 1,000 / 1,100; the second not
// runnable) and a layer prefill measured at 1,500 us. One replay of 32 rows: the graph prefill
// wins at 1,000 + 30 us. Four replays (256 rows of 64): 4 x 1,030 = 4,120 us, the layer prefill
// wins, for every selector. Rows past a multiple of the replay count as a full replay.
TEST(Planner, TtftPicksTheGraphPrefillOnlyWhereOneReplayBeatsTheLayers) {
  PlanResult step;
  Candidate a, b;
  a.predicted_us = 1000;
  a.additive_us = 900;
  a.no_overlap_us = 1000;
  b.predicted_us = 1100;
  b.additive_us = 1300;
  b.no_overlap_us = 1100;
  b.executor_supports = false;
  step.ranked = {a, b};
  EXPECT_EQ(ttft_replays(32).replay_rows, 32);
  EXPECT_EQ(ttft_replays(32).replays, 1);
  EXPECT_EQ(ttft_replays(256).replay_rows, 64);
  EXPECT_EQ(ttft_replays(256).replays, 4);
  EXPECT_EQ(ttft_replays(65).replays, 2);
  EXPECT_THROW(ttft_replays(0), InputError);

  const TtftPlan one = rank_ttft(step, 1500, ttft_replays(32), 30);
  ASSERT_EQ(one.ranked.size(), 3u);
  EXPECT_EQ(one.ranked[one.pick].step_index, 0);
  EXPECT_DOUBLE_EQ(one.ranked[one.pick].predicted_us, 1030);
  EXPECT_EQ(one.ranked[one.additive_pick].step_index, 0);  // 930 vs 1,500 (b not runnable)
  EXPECT_EQ(one.ranked[one.baseline_rank].step_index, -1);
  EXPECT_DOUBLE_EQ(one.ranked[one.baseline_rank].predicted_us, 1500);
  EXPECT_EQ(one.ranked.back().step_index, -1);  // 1,130 (b) < 1,500

  const TtftPlan four = rank_ttft(step, 1500, ttft_replays(256), 30);
  EXPECT_EQ(four.ranked[four.pick].step_index, -1);
  EXPECT_EQ(four.pick, four.baseline_rank);
  EXPECT_DOUBLE_EQ(four.ranked[1].predicted_us, 4120);
  EXPECT_EQ(four.ranked[four.no_overlap_pick].step_index, -1);
  // A tie keeps the layer prefill first (the executors' default).
  const TtftPlan tie = rank_ttft(step, 1030, ttft_replays(32), 30);
  EXPECT_EQ(tie.ranked[tie.pick].step_index, -1);
}

}  // namespace
}  // namespace megaops
