// The time-to-first-token ranking (planner.h: ttft_replays, rank_ttft): the layer prefill against
// the decode-graph prefill replaying each step candidate.
#include <algorithm>

#include "core/error.h"
#include "planner/planner.h"

namespace megaops {

TtftReplays ttft_replays(int rows, int max_rows) {
  if (rows < 1 || max_rows < 1)
    throw_input_error("plan", "rows",
                      "expected at least one prompt row and one row per replay, found " +
                          std::to_string(rows) + " and " + std::to_string(max_rows));
  TtftReplays r;
  r.replay_rows = std::min(rows, max_rows);
  r.replays = (rows + r.replay_rows - 1) / r.replay_rows;
  return r;
}

TtftPlan rank_ttft(const PlanResult& step, double layers_us, TtftReplays replays,
                   double replay_overhead_us) {
  TtftPlan t;
  t.replays = replays;
  std::vector<TtftCandidate> all;
  all.push_back({-1, layers_us, layers_us, layers_us, true});
  const double n = replays.replays, overhead = n * replay_overhead_us;
  for (size_t i = 0; i < step.ranked.size(); ++i) {
    const Candidate& c = step.ranked[i];
    all.push_back({static_cast<int>(i), n * c.predicted_us + overhead, n * c.additive_us + overhead,
                   n * c.no_overlap_us + overhead, c.executor_supports});
  }
  // Stable: the layer prefill (first) wins a tie, then the step plan's own order.
  std::stable_sort(all.begin(), all.end(), [](const TtftCandidate& a, const TtftCandidate& b) {
    return a.predicted_us < b.predicted_us;
  });
  t.ranked = std::move(all);
  auto best_by = [&](double TtftCandidate::*key) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(t.ranked.size()); ++i)
      if (t.ranked[i].executor_supports && (best < 0 || t.ranked[i].*key < t.ranked[best].*key))
        best = i;
    return best;
  };
  t.pick = best_by(&TtftCandidate::predicted_us);
  t.additive_pick = best_by(&TtftCandidate::additive_us);
  t.no_overlap_pick = best_by(&TtftCandidate::no_overlap_us);
  for (int i = 0; i < static_cast<int>(t.ranked.size()); ++i)
    if (t.ranked[i].step_index < 0) t.baseline_rank = i;
  return t;
}

}  // namespace megaops
