// The static tile schedule of a persistent region (region_schedule.h): dependencies from the
// tiling contracts, semaphores, a list-scheduled issue order, per-CTA lists, the packed form.
#include "graph/region_schedule.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <string>
#include <tuple>

#include "core/error.h"

namespace megaops {

namespace {

constexpr const char* WHERE = "region schedule";

std::string op_label(const OpGraph& g, int i) {
  const Op& op = g.ops[i];
  std::string s = "ops[" + std::to_string(i) + "] (" + op.name;
  if (op.layer >= 0) s += ", layer " + std::to_string(op.layer);
  return s + ")";
}

// A wait before the semaphores have ids: producer op, its row block, the tile (-1: the row-block
// semaphore) and the per-step count.
struct PendingWait {
  int32_t op, row_block, tile, target;
  auto key() const { return std::tie(op, row_block, tile, target); }
  bool operator<(const PendingWait& o) const { return key() < o.key(); }
  bool operator==(const PendingWait& o) const { return key() == o.key(); }
};

void check_request(const OpGraph& g, int first_op, int last_op, int num_ctas, int max_resident_ctas,
                   const RegionScheduleOptions& opt) {
  const int n = static_cast<int>(g.ops.size());
  if (n == 0) throw_input_error(WHERE, "graph", "expected at least one op, found none");
  const std::string range = "0.." + std::to_string(n - 1);
  if (first_op < 0 || first_op >= n)
    throw_input_error(WHERE, "first_op",
                      "expected " + range + ", found " + std::to_string(first_op));
  if (last_op < first_op || last_op >= n)
    throw_input_error(WHERE, "last_op",
                      "expected " + std::to_string(first_op) + ".." + std::to_string(n - 1) +
                          " (first_op.." + std::to_string(n - 1) + "), found " +
                          std::to_string(last_op));
  if (max_resident_ctas < 1)
    throw_input_error(WHERE, "max_resident_ctas",
                      "expected >= 1, found " + std::to_string(max_resident_ctas));
  if (num_ctas < 1)
    throw_input_error(WHERE, "num_ctas", "expected >= 1, found " + std::to_string(num_ctas));
  if (num_ctas > max_resident_ctas)
    throw_input_error(WHERE, "num_ctas",
                      "expected at most " + std::to_string(max_resident_ctas) +
                          " (the CTAs that can be co-resident), found " + std::to_string(num_ctas));
  int64_t tasks = 0;
  for (int i = first_op; i <= last_op; ++i) {
    const Op& op = g.ops[i];
    const bool vendor = opt.is_vendor_gemm ? opt.is_vendor_gemm(op) : is_vendor_gemm(op);
    if (vendor)
      throw_input_error(WHERE, op_label(g, i),
                        "expected an op that runs inside a persistent region, found a vendor "
                        "(cuBLASLt) GEMM: the region must end before it");
    if (op.rows < 1 || op.cols < 1 || op.tile_rows < 1 || op.tile_cols < 1)
      throw_input_error(WHERE, op_label(g, i),
                        "expected an output of at least one tile, found none");
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const int p = op.inputs[k].producer;
      if (p < 0 || p >= i)
        throw_input_error(WHERE, op_label(g, i) + " input " + std::to_string(k),
                          "expected a producer before the op (0.." + std::to_string(i - 1) +
                              "), found " + std::to_string(p));
    }
    tasks += op.num_tiles();
  }
  if (tasks > std::numeric_limits<int32_t>::max() / 4)
    throw_input_error(
        WHERE, "ops",
        "expected a region of fewer tiles, found " + std::to_string(tasks) + " (int32 indices)");
}

// Every task's waits (deduplicated, producers inside the region only), in region-local task order
// (op by op, tile by tile).
struct RegionDeps {
  std::vector<int64_t> op_base;  // local id of tile 0 of each region op, plus the total
  std::vector<int64_t> begin;    // per local task, into waits
  std::vector<PendingWait> waits;
  std::vector<char> op_row_sems, op_tile_sems;  // per region op: which semaphores it owns
};

RegionDeps collect_deps(const OpGraph& g, int first_op, int last_op) {
  RegionDeps d;
  const int count = last_op - first_op + 1;
  d.op_base.assign(count + 1, 0);
  for (int i = 0; i < count; ++i) d.op_base[i + 1] = d.op_base[i] + g.ops[first_op + i].num_tiles();
  d.op_row_sems.assign(count, 0);
  d.op_tile_sems.assign(count, 0);
  d.begin.reserve(d.op_base[count] + 1);
  std::vector<PendingWait> task_waits;
  for (int oi = first_op; oi <= last_op; ++oi) {
    const Op& op = g.ops[oi];
    for (int64_t t = 0; t < op.num_tiles(); ++t) {
      d.begin.push_back(static_cast<int64_t>(d.waits.size()));
      task_waits.clear();
      for (int k = 0; k < static_cast<int>(op.inputs.size()); ++k) {
        const int p = op.inputs[k].producer;
        if (p < first_op) continue;  // written before the region starts
        const Op& prod = g.ops[p];
        const int64_t pct = prod.col_tiles();
        const std::vector<int64_t> tiles = input_tiles(g, oi, k, t);
        // input_tiles is ascending: tiles of one producer row block are adjacent.
        for (size_t a = 0; a < tiles.size();) {
          const int64_t rb = tiles[a] / pct;
          size_t b = a;
          while (b < tiles.size() && tiles[b] / pct == rb) ++b;
          if (static_cast<int64_t>(b - a) == pct) {
            task_waits.push_back({p, static_cast<int32_t>(rb), -1, static_cast<int32_t>(pct)});
            d.op_row_sems[p - first_op] = 1;
          } else {
            for (size_t c = a; c < b; ++c)
              task_waits.push_back(
                  {p, static_cast<int32_t>(rb), static_cast<int32_t>(tiles[c]), 1});
            d.op_tile_sems[p - first_op] = 1;
          }
          a = b;
        }
      }
      std::sort(task_waits.begin(), task_waits.end());
      task_waits.erase(std::unique(task_waits.begin(), task_waits.end()), task_waits.end());
      d.waits.insert(d.waits.end(), task_waits.begin(), task_waits.end());
    }
  }
  d.begin.push_back(static_cast<int64_t>(d.waits.size()));
  return d;
}

// Semaphore ids: per region op, its row-block semaphores then its tile semaphores (when owned).
struct SemaphoreIds {
  std::vector<int32_t> row_base, tile_base;  // per region op, -1 when not owned

  int32_t of(const PendingWait& w, int first_op) const {
    const int i = w.op - first_op;
    return w.tile < 0 ? row_base[i] + w.row_block : tile_base[i] + w.tile;
  }
};

SemaphoreIds assign_semaphores(const OpGraph& g, int first_op, const RegionDeps& d,
                               RegionSchedule& s) {
  SemaphoreIds ids;
  const int count = static_cast<int>(d.op_row_sems.size());
  ids.row_base.assign(count, -1);
  ids.tile_base.assign(count, -1);
  for (int i = 0; i < count; ++i) {
    const Op& op = g.ops[first_op + i];
    if (d.op_row_sems[i]) {
      ids.row_base[i] = static_cast<int32_t>(s.sem_op.size());
      for (int64_t rb = 0; rb < op.row_blocks(); ++rb) {
        s.sem_op.push_back(first_op + i);
        s.sem_row_block.push_back(static_cast<int32_t>(rb));
        s.sem_tile.push_back(-1);
      }
    }
    if (d.op_tile_sems[i]) {
      ids.tile_base[i] = static_cast<int32_t>(s.sem_op.size());
      for (int64_t t = 0; t < op.num_tiles(); ++t) {
        s.sem_op.push_back(first_op + i);
        s.sem_row_block.push_back(static_cast<int32_t>(t / op.col_tiles()));
        s.sem_tile.push_back(static_cast<int32_t>(t));
      }
    }
  }
  s.num_semaphores = static_cast<int32_t>(s.sem_op.size());
  return ids;
}

// The semaphores a task of region op `i` adds 1 to.
void task_signals(const Op& op, int i, int64_t tile, const SemaphoreIds& ids,
                  std::vector<int32_t>& out) {
  if (ids.row_base[i] >= 0)
    out.push_back(ids.row_base[i] + static_cast<int32_t>(tile / op.col_tiles()));
  if (ids.tile_base[i] >= 0) out.push_back(ids.tile_base[i] + static_cast<int32_t>(tile));
}

// The list schedule: returns the region-local task ids in global issue order and each one's CTA.
void order_tasks(const OpGraph& g, int first_op, int num_ctas, const RegionDeps& d,
                 const SemaphoreIds& ids, int32_t sems, const RegionScheduleOptions& opt,
                 std::vector<int64_t>& order, std::vector<int32_t>& cta_of) {
  const int count = static_cast<int>(d.op_row_sems.size());
  const int64_t total = d.op_base[count];
  std::vector<double> cost(count);
  for (int i = 0; i < count; ++i) cost[i] = region_tile_cost_us(g.ops[first_op + i], opt);
  // Per semaphore: tasks waiting on it, signals ordered so far, latest estimated finish.
  std::vector<std::vector<std::pair<int64_t, int32_t>>> waiting(sems);
  std::vector<int32_t> ordered(sems, 0);
  std::vector<double> sem_finish(sems, 0.0);
  std::vector<int32_t> unmet(total, 0);
  std::vector<int> op_of(total);
  for (int i = 0; i < count; ++i)
    for (int64_t t = d.op_base[i]; t < d.op_base[i + 1]; ++t) op_of[t] = i;
  using Ready = std::tuple<double, int64_t>;  // (estimated ready time, local id: op, then tile)
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  for (int64_t t = 0; t < total; ++t) {
    for (int64_t w = d.begin[t]; w < d.begin[t + 1]; ++w)
      waiting[ids.of(d.waits[w], first_op)].push_back({t, d.waits[w].target});
    unmet[t] = static_cast<int32_t>(d.begin[t + 1] - d.begin[t]);
    if (unmet[t] == 0) ready.push({0.0, t});
  }
  using Free = std::pair<double, int32_t>;  // (estimated free time, CTA)
  std::priority_queue<Free, std::vector<Free>, std::greater<Free>> free_ctas;
  std::vector<double> cta_free(num_ctas, 0.0);
  for (int32_t c = 0; c < num_ctas; ++c) free_ctas.push({0.0, c});
  std::vector<int32_t> signals;
  order.clear();
  cta_of.clear();
  while (!ready.empty()) {
    const auto [at, t] = ready.top();
    ready.pop();
    int32_t cta;
    if (opt.assign == RegionAssign::RoundRobin) {
      cta = static_cast<int32_t>(order.size() % num_ctas);
    } else {
      cta = free_ctas.top().second;
      free_ctas.pop();
    }
    const int i = op_of[t];
    const double finish = std::max(at, cta_free[cta]) + cost[i];
    cta_free[cta] = finish;
    if (opt.assign == RegionAssign::EarliestFree) free_ctas.push({finish, cta});
    order.push_back(t);
    cta_of.push_back(cta);
    signals.clear();
    task_signals(g.ops[first_op + i], i, t - d.op_base[i], ids, signals);
    for (int32_t sem : signals) {
      ++ordered[sem];
      sem_finish[sem] = std::max(sem_finish[sem], finish);
      // Every wait on a semaphore is for all its signals of the step (a row block's col_tiles(),
      // or a tile's 1): its waiters are released together by the last one.
      if (waiting[sem].empty() || ordered[sem] != waiting[sem].front().second) continue;
      for (const auto& [waiter, target] : waiting[sem]) {
        if (--unmet[waiter] > 0) continue;
        double when = 0.0;
        for (int64_t w = d.begin[waiter]; w < d.begin[waiter + 1]; ++w)
          when = std::max(when, sem_finish[ids.of(d.waits[w], first_op)]);
        ready.push({when, waiter});
      }
    }
  }
  if (static_cast<int64_t>(order.size()) != total)
    throw Error(std::string(WHERE) + ": internal: " + std::to_string(total - order.size()) +
                " tasks never became ready (a wait no task can satisfy)");
}

}  // namespace

void assert_region_waits_precede(const RegionSchedule& s) {
  auto fail = [](const std::string& what) {
    throw Error(std::string(WHERE) + ": internal: " + what);
  };
  const int32_t tasks = s.num_tasks();
  if (s.wait_begin.size() != static_cast<size_t>(tasks) + 1 ||
      s.signal_begin.size() != static_cast<size_t>(tasks) + 1 ||
      s.wait_target.size() != s.wait_sem.size() || s.wait_begin.back() != s.num_waits() ||
      s.signal_begin.back() != s.num_signals())
    fail("wait or signal ranges inconsistent with the task list");
  auto sem_ok = [&](int32_t id) { return id >= 0 && id < s.num_semaphores; };
  if (!std::all_of(s.wait_sem.begin(), s.wait_sem.end(), sem_ok) ||
      !std::all_of(s.signal_sem.begin(), s.signal_sem.end(), sem_ok))
    fail("a semaphore id outside 0.." + std::to_string(s.num_semaphores - 1));
  std::vector<int32_t> last(s.num_semaphores, -1), signals(s.num_semaphores, 0);
  for (int32_t i = 0; i < tasks; ++i)
    for (int32_t k = s.signal_begin[i]; k < s.signal_begin[i + 1]; ++k) {
      last[s.signal_sem[k]] = i;
      ++signals[s.signal_sem[k]];
    }
  for (int32_t i = 0; i < tasks; ++i)
    for (int32_t k = s.wait_begin[i]; k < s.wait_begin[i + 1]; ++k) {
      const int32_t sem = s.wait_sem[k];
      if (last[sem] >= i || signals[sem] < s.wait_target[k])
        fail("task " + std::to_string(i) + " waits for semaphore " + std::to_string(sem) +
             " to reach " + std::to_string(s.wait_target[k]) + ", signalled " +
             std::to_string(signals[sem]) + " times, last by task " + std::to_string(last[sem]));
    }
}

double region_tile_cost_us(const Op& op, const RegionScheduleOptions& opt) {
  const double tiles = static_cast<double>(std::max<int64_t>(op.num_tiles(), 1));
  const double bytes =
      static_cast<double>(op.weight_bytes + op.kv_bytes + op.act_in_bytes + op.act_out_bytes) /
      tiles;
  return opt.task_overhead_us +
         std::max(bytes / opt.cta_bytes_per_us, op.flops / tiles / opt.cta_flops_per_us);
}

RegionSchedule build_region_schedule(const OpGraph& g, int first_op, int last_op, int num_ctas,
                                     int max_resident_ctas, const RegionScheduleOptions& opt) {
  check_request(g, first_op, last_op, num_ctas, max_resident_ctas, opt);
  RegionSchedule s;
  s.first_op = first_op;
  s.last_op = last_op;
  s.num_ctas = num_ctas;
  const RegionDeps d = collect_deps(g, first_op, last_op);
  const SemaphoreIds ids = assign_semaphores(g, first_op, d, s);
  std::vector<int64_t> order;
  std::vector<int32_t> cta_of;
  order_tasks(g, first_op, num_ctas, d, ids, s.num_semaphores, opt, order, cta_of);

  const int64_t total = static_cast<int64_t>(order.size());
  if (static_cast<int64_t>(d.waits.size()) > std::numeric_limits<int32_t>::max() / 2)
    throw_input_error(WHERE, "ops",
                      "expected a region of fewer waits, found " + std::to_string(d.waits.size()) +
                          " (int32 indices)");
  std::vector<int32_t> signals;
  s.wait_begin.push_back(0);
  s.signal_begin.push_back(0);
  std::vector<int32_t> per_cta(num_ctas, 0);
  for (int64_t k = 0; k < total; ++k) {
    const int64_t t = order[k];
    const int i = static_cast<int>(std::upper_bound(d.op_base.begin(), d.op_base.end(), t) -
                                   d.op_base.begin() - 1);
    const int64_t tile = t - d.op_base[i];
    s.task_op.push_back(first_op + i);
    s.task_tile.push_back(static_cast<int32_t>(tile));
    for (int64_t w = d.begin[t]; w < d.begin[t + 1]; ++w) {
      s.wait_sem.push_back(ids.of(d.waits[w], first_op));
      s.wait_target.push_back(d.waits[w].target);
    }
    s.wait_begin.push_back(static_cast<int32_t>(s.wait_sem.size()));
    signals.clear();
    task_signals(g.ops[first_op + i], i, tile, ids, signals);
    s.signal_sem.insert(s.signal_sem.end(), signals.begin(), signals.end());
    s.signal_begin.push_back(static_cast<int32_t>(s.signal_sem.size()));
    ++per_cta[cta_of[k]];
  }
  s.cta_begin.assign(num_ctas + 1, 0);
  for (int c = 0; c < num_ctas; ++c) s.cta_begin[c + 1] = s.cta_begin[c] + per_cta[c];
  s.cta_task.assign(total, 0);
  std::vector<int32_t> fill(s.cta_begin.begin(), s.cta_begin.end() - 1);
  for (int64_t k = 0; k < total; ++k) s.cta_task[fill[cta_of[k]]++] = static_cast<int32_t>(k);
  assert_region_waits_precede(s);
  return s;
}

// ---- packed form ----

namespace {

using Field = std::vector<int32_t> RegionSchedule::*;
constexpr Field PACK_FIELDS[] = {
    &RegionSchedule::cta_begin,   &RegionSchedule::cta_task,      &RegionSchedule::task_op,
    &RegionSchedule::task_tile,   &RegionSchedule::wait_begin,    &RegionSchedule::wait_sem,
    &RegionSchedule::wait_target, &RegionSchedule::signal_begin,  &RegionSchedule::signal_sem,
    &RegionSchedule::sem_op,      &RegionSchedule::sem_row_block, &RegionSchedule::sem_tile,
};
static_assert(std::size(PACK_FIELDS) == RP_TOTAL_WORDS - RP_CTA_BEGIN);

// The length each array must have, from the header's counts.
int64_t expected_length(int field, int64_t ctas, int64_t tasks, int64_t waits, int64_t signals,
                        int64_t sems) {
  switch (RP_CTA_BEGIN + field) {
    case RP_CTA_BEGIN:
      return ctas + 1;
    case RP_WAIT_BEGIN:
    case RP_SIGNAL_BEGIN:
      return tasks + 1;
    case RP_WAIT_SEM:
    case RP_WAIT_TARGET:
      return waits;
    case RP_SIGNAL_SEM:
      return signals;
    case RP_SEM_OP:
    case RP_SEM_ROW_BLOCK:
    case RP_SEM_TILE:
      return sems;
    default:
      return tasks;
  }
}

}  // namespace

std::vector<int32_t> pack_region_schedule(const RegionSchedule& s) {
  std::vector<int32_t> out(REGION_PACK_HEADER_WORDS, 0);
  out[RP_MAGIC] = REGION_PACK_MAGIC;
  out[RP_VERSION] = REGION_PACK_VERSION;
  out[RP_FIRST_OP] = s.first_op;
  out[RP_LAST_OP] = s.last_op;
  out[RP_NUM_CTAS] = s.num_ctas;
  out[RP_NUM_TASKS] = s.num_tasks();
  out[RP_NUM_WAITS] = s.num_waits();
  out[RP_NUM_SIGNALS] = s.num_signals();
  out[RP_NUM_SEMAPHORES] = s.num_semaphores;
  int f = 0;
  for (Field field : PACK_FIELDS) {
    const std::vector<int32_t>& v = s.*field;
    out[RP_CTA_BEGIN + f++] = static_cast<int32_t>(out.size());
    out.insert(out.end(), v.begin(), v.end());
  }
  out[RP_TOTAL_WORDS] = static_cast<int32_t>(out.size());
  return out;
}

RegionSchedule unpack_region_schedule(const std::vector<int32_t>& words) {
  const char* where = "packed region schedule";
  if (words.size() < static_cast<size_t>(REGION_PACK_HEADER_WORDS))
    throw_input_error(where, "header",
                      "expected " + std::to_string(REGION_PACK_HEADER_WORDS) + " words, found " +
                          std::to_string(words.size()));
  if (words[RP_MAGIC] != REGION_PACK_MAGIC || words[RP_VERSION] != REGION_PACK_VERSION)
    throw_input_error(where, "magic/version",
                      "expected " + std::to_string(REGION_PACK_MAGIC) + "/" +
                          std::to_string(REGION_PACK_VERSION) + ", found " +
                          std::to_string(words[RP_MAGIC]) + "/" +
                          std::to_string(words[RP_VERSION]));
  if (words[RP_TOTAL_WORDS] != static_cast<int64_t>(words.size()))
    throw_input_error(where, "total words",
                      "expected " + std::to_string(words.size()) + ", found " +
                          std::to_string(words[RP_TOTAL_WORDS]));
  for (int h = RP_NUM_CTAS; h <= RP_NUM_SEMAPHORES; ++h)
    if (words[h] < 0)
      throw_input_error(where, "header word " + std::to_string(h),
                        "expected a count >= 0, found " + std::to_string(words[h]));
  RegionSchedule s;
  s.first_op = words[RP_FIRST_OP];
  s.last_op = words[RP_LAST_OP];
  s.num_ctas = words[RP_NUM_CTAS];
  s.num_semaphores = words[RP_NUM_SEMAPHORES];
  int f = 0;
  for (Field field : PACK_FIELDS) {
    const int64_t at = words[RP_CTA_BEGIN + f];
    const int64_t len =
        expected_length(f, words[RP_NUM_CTAS], words[RP_NUM_TASKS], words[RP_NUM_WAITS],
                        words[RP_NUM_SIGNALS], words[RP_NUM_SEMAPHORES]);
    if (at < REGION_PACK_HEADER_WORDS || at + len > static_cast<int64_t>(words.size()))
      throw_input_error(where, "header word " + std::to_string(RP_CTA_BEGIN + f),
                        "expected an array inside the buffer, found offset " + std::to_string(at) +
                            " of " + std::to_string(len) + " words");
    s.*field = std::vector<int32_t>(words.begin() + at, words.begin() + at + len);
    ++f;
  }
  return s;
}

}  // namespace megaops
