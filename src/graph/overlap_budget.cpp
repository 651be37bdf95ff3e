// See overlap_budget.h.
#include "graph/overlap_budget.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"

namespace megaops {

namespace {

// End (exclusive) of op o's window: at most W ops, never across a barrier (segment change); in a
// serial region only o itself. n = ops.size() - 1 (step_advance excluded).
size_t window_end(const std::vector<BudgetOp>& ops, const std::vector<char>& region_serial,
                  size_t W, size_t o) {
  const size_t n = ops.size() - 1;
  if (region_serial[static_cast<size_t>(ops[o].region)]) return o + 1;
  const size_t end = std::min(n, o + W);
  for (size_t k = o + 1; k < end; ++k)
    if (ops[k].segment != ops[o].segment) return k;
  return end;
}

}  // namespace

bool overlap_window_holds(const std::vector<BudgetOp>& ops, const std::vector<char>& region_serial,
                          int W, int sms, size_t o) {
  double count = 0, load = 0;
  const size_t end = window_end(ops, region_serial, static_cast<size_t>(W), o);
  for (size_t k = o + 1; k < end; ++k) {
    count += ops[k].ctas;
    load += static_cast<double>(ops[k].ctas) / ops[k].blocks_per_sm;
  }
  const bool by_count = count <= sms - 1;
  // An opaque op's running CTAs may need a whole SM: only (A) guarantees it one.
  const bool by_load = !ops[o].opaque && load <= sms * (1.0 - 1.0 / ops[o].blocks_per_sm);
  return by_count || by_load;
}

void choose_overlap_budgets(std::vector<BudgetOp>& ops, const std::vector<char>& region_serial,
                            int W, int sms) {
  if (ops.empty()) return;
  const size_t n = ops.size() - 1;  // step_advance runs alone, after the join
  const size_t w = static_cast<size_t>(W);
  ops[0].segment = 0;
  for (size_t k = 1; k < ops.size(); ++k)
    ops[k].segment =
        ops[k - 1].segment + (ops[k].region != ops[k - 1].region || ops[k - 1].opaque ? 1 : 0);
  std::vector<double> frac(n, 1.0);
  auto assign = [&]() {
    for (size_t k = 0; k < n; ++k) {
      BudgetOp& op = ops[k];
      op.cap = op.cappable
                   ? std::max(1, static_cast<int>(std::floor(frac[k] * op.blocks_per_sm * sms)))
                   : 0;
      op.ctas = op.ctas_at(op.cap);
    }
  };
  auto violated = [&](size_t o) { return !overlap_window_holds(ops, region_serial, W, sms, o); };
  assign();
  for (int pass = 0;; ++pass) {
    std::vector<char> shrink(n, 0);
    bool any = false, can = false;
    for (size_t o = 0; o < n; ++o) {
      if (!violated(o)) continue;
      any = true;
      for (size_t k = o + 1; k < window_end(ops, region_serial, w, o); ++k)
        if (ops[k].cappable && ops[k].cap > 1) shrink[k] = 1, can = true;
    }
    if (!any) break;
    if (!can) {
      // A barrier before the first violating window's last op, which shortens it by one. A
      // window of one op holds trivially, so this ends.
      size_t o = 0;
      while (!violated(o)) ++o;
      const size_t cut = window_end(ops, region_serial, w, o) - 1;
      for (size_t k = cut; k <= n; ++k) ++ops[k].segment;
      continue;
    }
    if (pass > 4000) throw Error("internal: overlap budgets do not converge");
    for (size_t k = 0; k < n; ++k)
      if (shrink[k]) frac[k] *= 0.8;
    assign();
  }
  ops[n].cap = 0;
  ops[n].ctas = 1;
}

std::vector<OverlapSyncOp> overlap_sync_plan(const std::vector<BudgetOp>& ops,
                                             const std::vector<char>& region_serial, int W,
                                             bool chain) {
  std::vector<OverlapSyncOp> out(ops.size());
  if (ops.empty()) return out;
  const size_t n = ops.size() - 1;
  const size_t w = static_cast<size_t>(std::max(1, W));
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    while (end < n && ops[end].segment == ops[begin].segment) ++end;
    const bool serial = region_serial[static_cast<size_t>(ops[begin].region)] != 0;
    for (size_t k = begin; k < end; ++k) {
      if (serial)
        out[k].stream = 0;
      else if (ops[k].stream_ordered && k > begin)
        out[k].stream = out[k - 1].stream;
      else
        out[k].stream = static_cast<int>((k - begin) % w);
      out[k].waits = k > begin && !ops[k - 1].stream_ordered &&
                     (out[k].stream != out[k - 1].stream || (chain && !ops[k].stream_ordered));
    }
    begin = end;
  }
  out[n].stream = -1;
  for (size_t k = 0; k + 1 < n; ++k) out[k].signals = out[k + 1].waits;
  return out;
}

std::vector<BarrierEdge> overlap_barrier_edges(const std::vector<OverlapSyncOp>& plan,
                                               size_t prev_begin, size_t prev_end,
                                               size_t next_end) {
  std::set<int> recorded, waiters;
  for (size_t k = prev_begin; k < prev_end; ++k) recorded.insert(plan[k].stream);
  for (size_t k = prev_end; k < next_end; ++k) waiters.insert(plan[k].stream);
  std::vector<BarrierEdge> edges;
  for (int w : waiters)
    for (int r : recorded)
      if (w != r) edges.push_back({w, r});
  return edges;
}

}  // namespace megaops
