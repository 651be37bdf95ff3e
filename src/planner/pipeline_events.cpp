// See pipeline_events.h. The work of a stream, in the order the host issues it:
//   step 1: the prefill P (frame 0), then frames_per_step - 1 producer decode steps B;
//   step s > 1: frames_per_step producer decode steps B(s);
//   every step: the local transformer over its frames, L(s) (codebooks - 1 of its steps a frame);
//   after step s: the codec window of every chunk whose frames are then in the buffer, C(k).
// Dependencies: B(s) after the producer work before it (its input is the code it emitted), L(s)
// after B(s), C(k) after L(ready step of k). One launch is a maximal run of consecutive work of
// one region within one step (a fused region runs its groups' work of a step in one launch,
// saving a region entry per group boundary); a launch holds its pool's CTAs from start to end.
// Serial: one pool of every CTA. Fixed split x: the producer side (the regions holding P or B)
// on x CTAs, the consumer side on the rest, so a chunk decodes beside the next producer steps.
// Dynamic split x: as fixed, but a producer-side launch that overlaps no consumer launch runs at
// the whole GPU's speed (a second pass), every run paying the work queue's per-tile cost.
#include "planner/pipeline_events.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megaops {

namespace {

struct Item {
  int group = 0;
  int graph = 0;
  double mult = 1;  // runs of the graph
  int step = 0;
  std::vector<int> deps;  // earlier items
};

std::vector<Item> stream_items(const PipelineConfig& p, int* step_h_item, int* first_chunk_item,
                               int* last_chunk_item) {
  const PipelineSchedule& s = p.schedule;
  const int steps = producer_steps(s), f = s.frames_per_step, q = p.local.codebooks;
  const int h = publication_step(p);
  const std::vector<StreamChunk> chunks = stream_chunks(p);
  std::vector<Item> items;
  int last_producer = -1;
  size_t next_chunk = 0;
  auto add = [&](Item it) {
    items.push_back(std::move(it));
    return static_cast<int>(items.size()) - 1;
  };
  for (int st = 1; st <= steps; ++st) {
    if (st == 1) {
      last_producer = add({0, 0, 1.0, st, {}});
      if (f > 1) last_producer = add({1, 1, f - 1.0, st, {last_producer}});
    } else {
      last_producer = add({1, 1, static_cast<double>(f), st, {last_producer}});
    }
    if (st == h) *step_h_item = last_producer;
    const int local = add({2, 2, static_cast<double>(f) * (q - 1), st, {last_producer}});
    for (; next_chunk < chunks.size() && chunks[next_chunk].ready_step <= st; ++next_chunk) {
      const int c = add({3, next_chunk == 0 ? 3 : 4, 1.0, st, {local}});
      if (next_chunk == 0) *first_chunk_item = c;
      *last_chunk_item = c;
    }
  }
  return items;
}

double region_entry_us(Backend b, const PipelineEventCosts& k) {
  return b == Backend::Persistent ? k.persistent_region_us : k.launch_us;
}

struct Layout {
  std::vector<int> launch_of;              // per item
  std::vector<int> region_of;              // per launch
  std::vector<std::vector<int>> items_of;  // per launch
};

Layout group_launches(const std::vector<Item>& items, const std::vector<int>& region_of_group) {
  Layout l;
  for (size_t i = 0; i < items.size(); ++i) {
    const int r = region_of_group[items[i].group];
    const bool merge = i > 0 && l.region_of.back() == r && items[i - 1].step == items[i].step;
    if (!merge) {
      l.region_of.push_back(r);
      l.items_of.emplace_back();
    }
    l.launch_of.push_back(static_cast<int>(l.region_of.size()) - 1);
    l.items_of.back().push_back(static_cast<int>(i));
  }
  return l;
}

}  // namespace

PipelineEvents simulate_pipeline_events(const PipelineConfig& p, const PipelineCandidate& c,
                                        const PipelineServiceFn& service,
                                        const PipelineEventCosts& k) {
  int step_h_item = -1, first_item = -1, last_item = -1;
  const std::vector<Item> items = stream_items(p, &step_h_item, &first_item, &last_item);
  std::vector<int> region_of_group(PIPELINE_GROUPS, -1);
  for (size_t r = 0; r < c.regions.size(); ++r)
    for (int g = c.regions[r].first_group; g <= c.regions[r].last_group; ++g)
      region_of_group[g] = static_cast<int>(r);
  for (int g = 0; g < PIPELINE_GROUPS; ++g)
    if (region_of_group[g] < 0)
      throw_input_error("pipeline plan", "regions", "expected a cover of the four groups");
  std::vector<bool> producer_side(c.regions.size(), false);
  for (size_t r = 0; r < c.regions.size(); ++r) producer_side[r] = c.regions[r].first_group <= 1;
  const Layout lay = group_launches(items, region_of_group);
  const bool split = c.policy != Policy::Serial;
  const int nl = static_cast<int>(lay.region_of.size());

  PipelineEvents ev;
  ev.graph.pool_ctas =
      split ? std::vector<int>{c.split, k.workers - c.split} : std::vector<int>{k.workers};
  // Durations per item for a given budget per launch; the item offsets within their launch.
  std::vector<double> item_end(items.size(), 0.0);
  auto build = [&](const std::vector<int>& budget_of_launch) {
    ev.graph.launches.clear();
    ev.names.clear();
    for (int li = 0; li < nl; ++li) {
      const PipelineRegion& reg = c.regions[lay.region_of[li]];
      const int pool = split && !producer_side[lay.region_of[li]] ? 1 : 0;
      Launch launch;
      launch.pool = pool;
      launch.ctas = ev.graph.pool_ctas[pool];
      std::string name;
      double t = 0;
      for (size_t j = 0; j < lay.items_of[li].size(); ++j) {
        const Item& it = items[lay.items_of[li][j]];
        double us = it.mult * service(it.graph, reg.backend, budget_of_launch[li]);
        if (c.policy == Policy::Dynamic)
          us += it.mult * k.dynamic_tile_us *
                std::ceil(static_cast<double>(k.graph_tiles.at(it.graph)) / budget_of_launch[li]);
        if (j > 0) us -= region_entry_us(reg.backend, k);  // one launch: no second entry
        t += std::max(0.0, us);
        item_end[lay.items_of[li][j]] = t;
        name += (j ? "+" : "") + std::string(pipeline_group_name(it.group)) + " " +
                std::to_string(it.step);
        for (int d : it.deps)
          if (lay.launch_of[d] != li) launch.deps.push_back(lay.launch_of[d]);
      }
      std::sort(launch.deps.begin(), launch.deps.end());
      launch.deps.erase(std::unique(launch.deps.begin(), launch.deps.end()), launch.deps.end());
      launch.name = name;
      launch.duration_us = t;
      ev.graph.launches.push_back(std::move(launch));
      ev.names.push_back(name);
    }
    ev.result = simulate_events(ev.graph);
  };
  std::vector<int> budgets(nl);
  for (int li = 0; li < nl; ++li)
    budgets[li] = ev.graph.pool_ctas[split && !producer_side[lay.region_of[li]] ? 1 : 0];
  build(budgets);
  if (c.policy == Policy::Dynamic) {
    // A producer launch that shared the GPU with no consumer launch gets every CTA.
    bool changed = false;
    for (int li = 0; li < nl; ++li) {
      if (!producer_side[lay.region_of[li]]) continue;
      bool overlaps = false;
      for (int lj = 0; lj < nl && !overlaps; ++lj)
        overlaps = !producer_side[lay.region_of[lj]] &&
                   ev.result.start_us[lj] < ev.result.finish_us[li] &&
                   ev.result.start_us[li] < ev.result.finish_us[lj];
      if (!overlaps) {
        budgets[li] = k.workers;
        changed = true;
      }
    }
    if (changed) build(budgets);
  }
  auto finish = [&](int item) { return ev.result.start_us[lay.launch_of[item]] + item_end[item]; };
  ev.first_chunk = lay.launch_of[first_item];
  ev.step_h = lay.launch_of[step_h_item];
  ev.last_chunk = lay.launch_of[last_item];
  ev.first_chunk_us = finish(first_item);
  ev.step_h_us = finish(step_h_item);
  ev.last_chunk_us = finish(last_item);
  ev.t_pub_us = std::max(ev.first_chunk_us, ev.step_h_us);
  return ev;
}

}  // namespace megaops
