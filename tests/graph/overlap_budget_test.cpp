// The overlap step's CTA budgets and barriers (graph/overlap_budget.h) on synthetic op lists:
// the analytic cases, and a randomized property test that every window of every plan meets the
// deadlock-freedom condition (A) or (B), with barriers after opaque ops and where no cap can help.
#include "graph/overlap_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
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

// A random overlap step for the property tests: n ops (cappable, fixed, opaque in the given
// proportions out of 10; occupancies 1..8), new regions now and then, a quarter of them serial,
// step_advance last; opaque ops stream-ordered half the time when `stream_ordered`. `serial`
// receives the regions' flags.
std::vector<BudgetOp> random_step(std::mt19937_64& rng, int n, int cappable_of_10, int fixed_of_10,
                                  int max_cappable_full, int max_fixed_ctas, bool stream_ordered,
                                  std::vector<char>& serial) {
  std::vector<BudgetOp> ops;
  serial.assign(1, rng() % 4 == 0);
  int region = 0;
  for (int k = 0; k < n; ++k) {
    if (k > 0 && rng() % 25 == 0) {
      ++region;
      serial.push_back(rng() % 4 == 0);
    }
    const int occ = 1 + static_cast<int>(rng() % 8);
    const int kind = static_cast<int>(rng() % 10);
    BudgetOp op = kind < cappable_of_10
                      ? cappable(occ, 1 + static_cast<int>(rng() % max_cappable_full))
                  : kind < cappable_of_10 + fixed_of_10
                      ? fixed(occ, 1 + static_cast<int>(rng() % max_fixed_ctas))
                      : fixed(1, 1, /*opaque=*/true);
    op.stream_ordered = stream_ordered && op.opaque && rng() % 2 == 0;
    op.region = region;
    ops.push_back(op);
  }
  BudgetOp last = step_advance();
  last.region = region;
  ops.push_back(last);
  return ops;
}

// A random step of up to 121 ops on 1..8 streams, its budgets chosen and its sync plan made:
// what the sync-plan property tests draw each trial.
struct PlannedStep {
  int W;
  std::vector<char> serial;
  std::vector<BudgetOp> ops;
  std::vector<OverlapSyncOp> plan;
};
PlannedStep random_planned_step(std::mt19937_64& rng) {
  PlannedStep st;
  const int n = 2 + static_cast<int>(rng() % 120);
  st.W = 1 + static_cast<int>(rng() % 8);
  st.ops = random_step(rng, n, 6, 2, 400, 300, true, st.serial);
  choose_overlap_budgets(st.ops, st.serial, st.W, SMS);
  st.plan = overlap_sync_plan(st.ops, st.serial, st.W);
  return st;
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
    std::vector<char> serial;
    std::vector<BudgetOp> ops = random_step(rng, n, 6, 3, 4 * SMS, 3 * SMS, false, serial);
    choose_overlap_budgets(ops, serial, W, SMS);
    const std::string what = "trial " + std::to_string(trial);
    for (size_t o = 0; o + 1 < ops.size(); ++o) {
      ASSERT_TRUE(overlap_window_holds(ops, serial, W, SMS, o)) << what << " op " << o;
      if (o > 0) {
        ASSERT_GE(ops[o].segment, ops[o - 1].segment) << what;
      }
      if (ops[o].opaque) {
        ASSERT_LT(ops[o].segment, ops[o + 1].segment) << what << " op " << o;
      }
      if (o > 0 && ops[o].region != ops[o - 1].region) {
        ASSERT_LT(ops[o - 1].segment, ops[o].segment) << what;
      }
      if (ops[o].cappable) {
        ASSERT_GE(ops[o].cap, 1) << what;
      } else {
        ASSERT_EQ(ops[o].cap, 0) << what;
      }
    }
  }
}

// Which ops wait and signal: op k waits for op k - 1 only when they are on different streams of
// one segment; an op signals exactly when its successor waits; serial regions and W = 1 run in
// stream order without any; a stream-ordered vendor op goes on its producer's stream and the op
// after it (behind the barrier) waits on nothing.
TEST(OverlapSyncPlan, WaitsOnlyWhereNothingElseOrders) {
  std::vector<BudgetOp> ops(7, cappable(3, 8));
  ops.push_back(step_advance());
  choose_overlap_budgets(ops, {0}, 3, SMS);
  std::vector<OverlapSyncOp> p = overlap_sync_plan(ops, {0}, 3);
  for (size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(p[k].stream, static_cast<int>(k % 3)) << k;
    EXPECT_EQ(p[k].waits, k > 0) << k;
    EXPECT_EQ(p[k].signals, k < 6) << k;  // op 6's successor is step_advance
  }
  EXPECT_EQ(p[7].stream, -1);
  EXPECT_FALSE(p[7].waits);
  EXPECT_FALSE(p[7].signals);
  // W = 1 and a serial region: stream order alone.
  for (const auto& [serial, W] : {std::pair<char, int>{0, 1}, std::pair<char, int>{1, 3}}) {
    choose_overlap_budgets(ops, {serial}, W, SMS);
    p = overlap_sync_plan(ops, {serial}, W);
    for (size_t k = 0; k < 7; ++k) {
      EXPECT_EQ(p[k].stream, 0) << k;
      EXPECT_FALSE(p[k].waits) << k;
      EXPECT_FALSE(p[k].signals) << k;
    }
  }
  // A stream-ordered vendor GEMM as op 3: on op 2's stream, no wait; op 4 starts a segment.
  ops[3] = fixed(1, 1, /*opaque=*/true);
  ops[3].stream_ordered = true;
  choose_overlap_budgets(ops, {0}, 3, SMS);
  p = overlap_sync_plan(ops, {0}, 3);
  EXPECT_EQ(p[3].stream, p[2].stream);
  EXPECT_FALSE(p[3].waits);
  EXPECT_FALSE(p[2].signals);
  EXPECT_FALSE(p[4].waits);
  EXPECT_EQ(p[4].stream, 0);
  EXPECT_TRUE(p[5].waits);
  EXPECT_TRUE(p[4].signals);
}

// The PDL chain at W = 1: one stream, and still a wait (with its producer's signal) between two own
// kernels, because the consumer's launch is programmatic and the stream no longer orders it; none
// at the segment's first op, none for a stream-ordered vendor op, none after it.
TEST(OverlapSyncPlan, PdlChainWaitsBetweenOwnKernelsOnOneStream) {
  std::vector<BudgetOp> ops(7, cappable(3, 8));
  ops.push_back(step_advance());
  ops[3] = fixed(1, 1, /*opaque=*/true);
  ops[3].stream_ordered = true;
  choose_overlap_budgets(ops, {0}, 1, SMS);
  const std::vector<OverlapSyncOp> p = overlap_sync_plan(ops, {0}, 1, /*chain=*/true);
  for (size_t k = 0; k < 7; ++k) EXPECT_EQ(p[k].stream, 0) << k;
  const bool waits[7] = {false, true, true, false, false, true, true};
  for (size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(p[k].waits, waits[k]) << k;
    EXPECT_EQ(p[k].signals, k + 1 < 7 && waits[k + 1]) << k;
  }
  EXPECT_FALSE(p[7].waits);
  // Without the chain the same step has no wait at all (stream order).
  for (const OverlapSyncOp& o : overlap_sync_plan(ops, {0}, 1)) EXPECT_FALSE(o.waits);
}

// On random steps: every consecutive pair is ordered (a wait, one stream, or a barrier), every
// wait has a signal to wait for, no signal goes unread, and within a segment op k stays behind
// op k - W on its stream (what the budget windows assume).
TEST(OverlapSyncPlan, EveryPairOrderedOnRandomSteps) {
  std::mt19937_64 rng(20261130);
  for (int trial = 0; trial < 2000; ++trial) {
    const PlannedStep st = random_planned_step(rng);
    const int W = st.W;
    const std::vector<char>& serial = st.serial;
    const std::vector<BudgetOp>& ops = st.ops;
    const std::vector<OverlapSyncOp>& p = st.plan;
    const std::string what = "trial " + std::to_string(trial);
    const size_t last_op = ops.size() - 1;
    ASSERT_EQ(p[last_op].stream, -1) << what;
    ASSERT_FALSE(p[last_op].waits || p[last_op].signals) << what;
    for (size_t k = 0; k < last_op; ++k) {
      ASSERT_GE(p[k].stream, 0) << what;
      ASSERT_LT(p[k].stream, W) << what;
      if (k + 1 < last_op) {
        ASSERT_EQ(p[k].signals, p[k + 1].waits) << what << " op " << k;
      }
      if (k == 0) {
        ASSERT_FALSE(p[k].waits) << what;
        continue;
      }
      const bool barrier = ops[k].segment != ops[k - 1].segment;
      const bool same_stream = p[k].stream == p[k - 1].stream;
      ASSERT_TRUE(p[k].waits || same_stream || barrier) << what << " op " << k;
      ASSERT_FALSE(p[k].waits && (same_stream || barrier)) << what << " op " << k;
      if (p[k].waits) {
        ASSERT_FALSE(ops[k - 1].stream_ordered) << what << " op " << k;
      }
      if (serial[static_cast<size_t>(ops[k].region)]) {
        ASSERT_EQ(p[k].stream, 0) << what;
      }
      if (!serial[static_cast<size_t>(ops[k].region)] && !ops[k].stream_ordered &&
          k >= static_cast<size_t>(W) && ops[k - W].segment == ops[k].segment) {
        ASSERT_EQ(p[k].stream, p[k - W].stream) << what << " op " << k;
      }
    }
  }
}

// The minimal barriers (overlap_barrier_edges) keep what the full W x W barrier guaranteed: on
// random steps, every op starts after every op of every earlier segment has completed, through
// stream order and the barrier edges alone (counter waits order a signal, not a completion, and
// are left out). And no edge is spent where stream order suffices.
TEST(OverlapSyncPlan, MinimalBarriersOrderEveryEarlierSegment) {
  std::mt19937_64 rng(20261129);
  int edges_full = 0, edges_min = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const PlannedStep st = random_planned_step(rng);
    const int W = st.W;
    const std::vector<BudgetOp>& ops = st.ops;
    const std::vector<OverlapSyncOp>& p = st.plan;
    const std::string what = "trial " + std::to_string(trial);
    const size_t m = ops.size() - 1;  // step_advance runs after the final join
    // after[t]: the ops complete before the next op issued on stream t may start.
    std::vector<std::vector<char>> after(static_cast<size_t>(W), std::vector<char>(m, 0));
    std::vector<std::vector<char>> before(m);
    for (size_t begin = 0, prev_begin = 0; begin < m;) {
      size_t end = begin;
      while (end < m && ops[end].segment == ops[begin].segment) ++end;
      if (begin > 0) {
        const std::vector<BarrierEdge> edges = overlap_barrier_edges(p, prev_begin, begin, end);
        std::vector<std::vector<char>> recorded = after;  // events record every stream's state
        for (const BarrierEdge& e : edges) {
          ASSERT_NE(e.waiter, e.recorded) << what;
          for (size_t a = 0; a < m; ++a)
            after[static_cast<size_t>(e.waiter)][a] |= recorded[static_cast<size_t>(e.recorded)][a];
        }
        std::set<int> prev_streams, next_streams;
        for (size_t k = prev_begin; k < begin; ++k) prev_streams.insert(p[k].stream);
        for (size_t k = begin; k < end; ++k) next_streams.insert(p[k].stream);
        if (prev_streams.size() == 1 && prev_streams == next_streams) {
          EXPECT_TRUE(edges.empty()) << what << " segment at op " << begin;
        }
        edges_min += static_cast<int>(edges.size());
        edges_full += W * W;
      }
      for (size_t k = begin; k < end; ++k) {
        const size_t t = static_cast<size_t>(p[k].stream);
        before[k] = after[t];
        after[t][k] = 1;
      }
      // Every op of this segment after every op of every earlier segment.
      for (size_t b = begin; b < end; ++b)
        for (size_t a = 0; a < begin; ++a)
          ASSERT_TRUE(before[b][a]) << what << ": op " << b << " may start before op " << a
                                    << " (segment " << ops[a].segment << ") completed";
      prev_begin = begin;
      begin = end;
    }
  }
  // Not a correctness property: the point of the change, printed for the record.
  EXPECT_LT(edges_min, edges_full);
  std::printf("barrier edges over 1000 random steps: %d minimal vs %d for full W x W barriers\n",
              edges_min, edges_full);
}

}  // namespace
}  // namespace megaops
