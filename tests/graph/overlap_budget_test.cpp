// The overlap step's CTA budgets and barriers (graph/overlap_budget.h) on synthetic op lists:
// the analytic cases, and a randomized property test that every window of every plan meets the
// deadlock-freedom condition (A) or (B), with barriers after opaque ops and where no cap can help.
#include "graph/overlap_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace megaops {
namespace {

constexpr int SMS = 132;

// A cappable kernel whose grid is min(cap, full) (cap 0 = full grid).
BudgetOp cappable(int blocks_per_sm, int full) {
  BudgetOp op;
  op.cappable = true;
  op.blocks_per_sm = blocks_per_sm;
  op.ctas_at = [full](int cap) { return cap == 0 ? full : std::min(cap, full); };
  return op;
}

BudgetOp fixed(int blocks_per_sm, int ctas, bool opaque = false) {
  BudgetOp op;
  op.opaque = opaque;
  op.blocks_per_sm = blocks_per_sm;
  op.ctas_at = [ctas](int) { return ctas; };
  return op;
}

BudgetOp step_advance() {
  return fixed(1, 1);
}

// Two matmul-like kernels of occupancy 3 at W = 2: the first's window holds the second, whose
// load must stay within SMs x (1 - 1/3) = 88 SMs' worth, i.e. at most 264 CTAs. Its cap shrinks
// by 20% per pass from 396: 316, then 253. The second's window is empty: the first keeps 396.
TEST(OverlapBudget, ConsumerCappedToLeaveTheProducerRoom) {
  std::vector<BudgetOp> ops = {cappable(3, 10000), cappable(3, 10000), step_advance()};
  choose_overlap_budgets(ops, {0}, 2, SMS);
  EXPECT_EQ(ops[0].cap, 396);
  EXPECT_EQ(ops[1].cap, 253);
  EXPECT_EQ(ops[1].ctas, 253);
  EXPECT_EQ(ops[2].ctas, 1);
  for (size_t o = 0; o + 1 < ops.size(); ++o)
    EXPECT_TRUE(overlap_window_holds(ops, {0}, 2, SMS, o)) << o;
}

// An opaque (vendor) op ends its segment: nothing after it is live with it, and its own window is
// empty; ops before it may still be live with its gate.
TEST(OverlapBudget, OpaqueOpsEndTheirSegment) {
  std::vector<BudgetOp> ops = {cappable(3, 500), fixed(1, 1, /*opaque=*/true), cappable(3, 500),
                               cappable(3, 500), step_advance()};
  choose_overlap_budgets(ops, {0}, 3, SMS);
  EXPECT_EQ(ops[0].segment, ops[1].segment);
  EXPECT_LT(ops[1].segment, ops[2].segment);
  EXPECT_EQ(ops[2].segment, ops[3].segment);
}

// A fixed grid no cap can make room for (attention at batch 32: 1,024 CTAs of occupancy 2 behind
// a cappable op): a barrier goes before it instead of refusing the step.
TEST(OverlapBudget, BarrierWhereNoCapHelps) {
  std::vector<BudgetOp> ops = {cappable(2, 300), fixed(2, 1024), cappable(3, 500), step_advance()};
  choose_overlap_budgets(ops, {0}, 3, SMS);
  EXPECT_LT(ops[0].segment, ops[1].segment) << "expected a barrier before the fixed grid";
  for (size_t o = 0; o + 1 < ops.size(); ++o)
    EXPECT_TRUE(overlap_window_holds(ops, {0}, 3, SMS, o)) << o;
}

// Regions: a barrier at each region start; a serial region's ops have empty windows, so they
// keep their full grids.
TEST(OverlapBudget, RegionsAndSerialRegions) {
  std::vector<BudgetOp> ops = {cappable(3, 2000), cappable(3, 2000), cappable(3, 2000),
                               cappable(3, 2000), step_advance()};
  ops[2].region = ops[3].region = ops[4].region = 1;
  choose_overlap_budgets(ops, {0, 1}, 4, SMS);
  EXPECT_LT(ops[1].segment, ops[2].segment);
  EXPECT_EQ(ops[2].cap, 396);  // serial
  EXPECT_EQ(ops[3].cap, 396);
  EXPECT_LT(ops[1].cap, 396);  // behind op 0 in an overlapped region
}

// Random op lists (cappable, fixed, opaque; occupancies 1..8; regions, some serial; W 1..8): after
// planning, every window holds, opaque ops end their segments, segments never decrease, caps are
// at least 1 where cappable and 0 where not.
TEST(OverlapBudget, EveryWindowHoldsOnRandomSteps) {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 120);
    const int W = 1 + static_cast<int>(rng() % 8);
    std::vector<BudgetOp> ops;
    std::vector<char> serial;
    int region = 0;
    serial.push_back(rng() % 4 == 0);
    for (int k = 0; k < n; ++k) {
      if (k > 0 && rng() % 25 == 0) {
        ++region;
        serial.push_back(rng() % 4 == 0);
      }
      const int occ = 1 + static_cast<int>(rng() % 8);
      const int kind = static_cast<int>(rng() % 10);
      BudgetOp op = kind < 6   ? cappable(occ, 1 + static_cast<int>(rng() % (4 * SMS)))
                    : kind < 9 ? fixed(occ, 1 + static_cast<int>(rng() % (3 * SMS)))
                               : fixed(1, 1, /*opaque=*/true);
      op.region = region;
      ops.push_back(op);
    }
    BudgetOp last = step_advance();
    last.region = region;
    ops.push_back(last);
    choose_overlap_budgets(ops, serial, W, SMS);
    const std::string what = "trial " + std::to_string(trial);
    for (size_t o = 0; o + 1 < ops.size(); ++o) {
      ASSERT_TRUE(overlap_window_holds(ops, serial, W, SMS, o)) << what << " op " << o;
      if (o > 0) ASSERT_GE(ops[o].segment, ops[o - 1].segment) << what;
      if (ops[o].opaque) ASSERT_LT(ops[o].segment, ops[o + 1].segment) << what << " op " << o;
      if (o > 0 && ops[o].region != ops[o - 1].region)
        ASSERT_LT(ops[o - 1].segment, ops[o].segment) << what;
      if (ops[o].cappable)
        ASSERT_GE(ops[o].cap, 1) << what;
      else
        ASSERT_EQ(ops[o].cap, 0) << what;
    }
  }
}

}  // namespace
}  // namespace megaops
