// The CPU executor and checker of a persistent region's schedule (region_schedule_check.h).
#include "graph/region_schedule_check.h"

#include <algorithm>
#include <queue>
#include <random>
#include <tuple>

namespace megaops {

const char* region_fault_kind_name(RegionFaultKind k) {
  switch (k) {
    case RegionFaultKind::Malformed:
      return "malformed";
    case RegionFaultKind::OrderViolation:
      return "order violation";
    case RegionFaultKind::Deadlock:
      return "deadlock";
    case RegionFaultKind::ReadBeforeWritten:
      return "read before written";
    case RegionFaultKind::RunTwice:
      return "run twice";
    case RegionFaultKind::NeverRun:
      return "never run";
    case RegionFaultKind::BufferReuse:
      return "buffer reuse";
  }
  return "?";
}

bool RegionCheckReport::has(RegionFaultKind k) const {
  return std::any_of(faults.begin(), faults.end(),
                     [k](const RegionFault& f) { return f.kind == k; });
}

std::string RegionCheckReport::summary() const {
  if (faults.empty()) return "ok";
  std::string out;
  for (const RegionFault& f : faults)
    out += std::string(region_fault_kind_name(f.kind)) + ": " + f.message + "\n";
  return out;
}

namespace {

// Keeps at most `limit` faults of each kind and counts the rest.
class FaultSink {
 public:
  FaultSink(std::vector<RegionFault>& out, int limit) : out_(out), limit_(limit) {}
  void add(RegionFaultKind k, std::string message) {
    if (kept_[static_cast<int>(k)]++ < limit_)
      out_.push_back({k, std::move(message)});
    else
      ++dropped_[static_cast<int>(k)];
  }
  // Appends one line per kind that had faults dropped.
  void finish() {
    for (int k = 0; k < KINDS; ++k)
      if (dropped_[k] > 0)
        out_.push_back({static_cast<RegionFaultKind>(k),
                        "and " + std::to_string(dropped_[k]) + " more of this kind"});
  }

 private:
  static constexpr int KINDS = 7;
  std::vector<RegionFault>& out_;
  int limit_;
  int64_t kept_[KINDS] = {}, dropped_[KINDS] = {};
};

bool has(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool valid_ranges(const std::vector<int32_t>& begin, size_t entries, size_t items) {
  if (begin.size() != entries + 1 || begin.front() != 0 ||
      begin.back() != static_cast<int64_t>(items))
    return false;
  for (size_t i = 0; i + 1 < begin.size(); ++i)
    if (begin[i] > begin[i + 1]) return false;
  return true;
}

}  // namespace

RegionScheduleChecker::RegionScheduleChecker(const OpGraph& g, const RegionSchedule& s)
    : g_(g), s_(s) {
  check_structure();
  if (!malformed_) build_oracle();
}

void RegionScheduleChecker::check_structure() {
  auto fail = [&](const std::string& what) {
    static_faults_.push_back({RegionFaultKind::Malformed, what});
    malformed_ = true;
  };
  const int n = static_cast<int>(g_.ops.size());
  if (s_.first_op < 0 || s_.last_op < s_.first_op || s_.last_op >= n)
    return fail("op range [" + std::to_string(s_.first_op) + ", " + std::to_string(s_.last_op) +
                "] outside the graph's " + std::to_string(n) + " ops");
  if (s_.num_ctas < 1 || s_.num_semaphores < 0) return fail("num_ctas < 1 or num_semaphores < 0");
  const size_t tasks = s_.task_op.size();
  if (s_.task_tile.size() != tasks) return fail("task_tile and task_op differ in length");
  if (!valid_ranges(s_.wait_begin, tasks, s_.wait_sem.size()) ||
      s_.wait_target.size() != s_.wait_sem.size())
    return fail("wait ranges inconsistent with wait_sem / wait_target");
  if (!valid_ranges(s_.signal_begin, tasks, s_.signal_sem.size()))
    return fail("signal ranges inconsistent with signal_sem");
  if (!valid_ranges(s_.cta_begin, s_.num_ctas, s_.cta_task.size()))
    return fail("cta ranges inconsistent with cta_task");
  auto sem_ok = [&](int32_t id) { return id >= 0 && id < s_.num_semaphores; };
  if (!std::all_of(s_.wait_sem.begin(), s_.wait_sem.end(), sem_ok) ||
      !std::all_of(s_.signal_sem.begin(), s_.signal_sem.end(), sem_ok))
    return fail("semaphore id outside 0.." + std::to_string(s_.num_semaphores - 1));
  for (size_t i = 0; i < tasks; ++i) {
    const int32_t op = s_.task_op[i];
    if (op < s_.first_op || op > s_.last_op || s_.task_tile[i] < 0 ||
        s_.task_tile[i] >= g_.ops[op].num_tiles())
      return fail("task " + std::to_string(i) + " names op " + std::to_string(op) + " tile " +
                  std::to_string(s_.task_tile[i]) + ", not a tile of the region");
  }
  for (int c = 0; c < s_.num_ctas; ++c)
    for (int32_t k = s_.cta_begin[c]; k < s_.cta_begin[c + 1]; ++k) {
      const int32_t t = s_.cta_task[k];
      if (t < 0 || t >= static_cast<int32_t>(tasks))
        return fail("CTA " + std::to_string(c) + " lists task " + std::to_string(t));
      if (k > s_.cta_begin[c] && s_.cta_task[k - 1] >= t)
        return fail("CTA " + std::to_string(c) + "'s tasks are not in increasing order at " +
                    std::to_string(t));
    }
}

void RegionScheduleChecker::build_oracle() {
  const int count = s_.last_op - s_.first_op + 1;
  op_base_.assign(count + 1, 0);
  for (int i = 0; i < count; ++i)
    op_base_[i + 1] = op_base_[i] + g_.ops[s_.first_op + i].num_tiles();
  std::vector<int32_t> index_of(op_base_[count], -1);
  const int32_t tasks = s_.num_tasks();
  local_.assign(tasks, -1);
  for (int32_t i = 0; i < tasks; ++i) {
    local_[i] = static_cast<int32_t>(op_base_[s_.task_op[i] - s_.first_op] + s_.task_tile[i]);
    if (index_of[local_[i]] < 0) index_of[local_[i]] = i;
  }
  FaultSink sink(static_faults_, 16);
  read_begin_.assign(1, 0);
  for (int32_t i = 0; i < tasks; ++i) {
    const int op = s_.task_op[i];
    const Op& c = g_.ops[op];
    for (int k = 0; k < static_cast<int>(c.inputs.size()); ++k) {
      const int p = c.inputs[k].producer;
      if (p < s_.first_op) continue;  // ready when the region starts
      for (int64_t pt : input_tiles(g_, op, k, s_.task_tile[i])) {
        const int64_t r = op_base_[p - s_.first_op] + pt;
        reads_.push_back(r);
        if (index_of[r] > i)
          sink.add(RegionFaultKind::OrderViolation, task_label(i) + " is issued before " +
                                                        task_label(index_of[r]) +
                                                        ", a producer tile it reads");
      }
    }
    read_begin_.push_back(static_cast<int64_t>(reads_.size()));
  }
  sink.finish();
  // Buffer reuse: for each tensor an op writes, the earlier region ops that read it since its
  // last writer, and that writer (earlier accesses are then covered by the writer's own check).
  hazards_.assign(count, {});
  rb_base_.assign(count + 1, 0);
  for (int i = 0; i < count; ++i) {
    const Op& w = g_.ops[s_.first_op + i];
    rb_base_[i + 1] = rb_base_[i] + w.row_blocks();
    for (int tensor : w.io.writes)
      for (int r = i - 1; r >= 0; --r) {
        const Op& prev = g_.ops[s_.first_op + r];
        const bool writes = has(prev.io.writes, tensor);
        if (!writes && !has(prev.io.reads, tensor)) continue;
        hazards_[i].push_back({r, prev.rows == w.rows && prev.tile_rows == w.tile_rows});
        if (writes) break;
      }
  }
}

std::string RegionScheduleChecker::task_label(int32_t task) const {
  const int op = s_.task_op[task];
  std::string s = "task " + std::to_string(task) + " (" + g_.ops[op].name;
  if (g_.ops[op].layer >= 0) s += " layer " + std::to_string(g_.ops[op].layer);
  return s + " tile " + std::to_string(s_.task_tile[task]) + ")";
}

RegionCheckReport RegionScheduleChecker::run(const RegionCheckOptions& opt) const {
  RegionCheckReport rep;
  rep.faults = static_faults_;
  if (malformed_) return rep;
  FaultSink sink(rep.faults, opt.max_faults);
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> duration(opt.min_task_us, opt.max_task_us);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<double> factor(opt.min_cost_factor, opt.max_cost_factor);
  std::vector<double> cost;
  if (opt.cost_durations)
    for (int op = s_.first_op; op <= s_.last_op; ++op)
      cost.push_back(region_tile_cost_us(g_.ops[op], RegionScheduleOptions{}));

  const int32_t ctas = s_.num_ctas;
  std::vector<int64_t> count(s_.num_semaphores, 0);
  std::vector<int32_t> pos(s_.cta_begin.begin(), s_.cta_begin.end() - 1);
  std::vector<int32_t> running(ctas, -1);
  std::vector<int32_t> runs(op_base_.back(), 0);
  std::vector<char> done(op_base_.back(), 0);
  std::vector<int64_t> rb_done(rb_base_.back(), 0), op_done(op_base_.size() - 1, 0);
  auto next_task = [&](int32_t c) {
    return pos[c] < s_.cta_begin[c + 1] ? s_.cta_task[pos[c]] : -1;
  };
  auto first_unmet = [&](int32_t task) {
    for (int32_t k = s_.wait_begin[task]; k < s_.wait_begin[task + 1]; ++k)
      if (count[s_.wait_sem[k]] < s_.wait_target[k]) return k;
    return -1;
  };
  using Event = std::tuple<double, uint64_t, int32_t>;  // (finish time, random tie-break, CTA)
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  std::vector<int32_t> ready;
  double now = 0;

  auto start = [&](int32_t c) {
    const int32_t task = s_.cta_task[pos[c]];
    const int32_t local = local_[task];
    if (runs[local]++ > 0)
      sink.add(RegionFaultKind::RunTwice, task_label(task) + " run again by CTA " +
                                              std::to_string(c) + ": the tile ran before");
    for (int64_t r = read_begin_[task]; r < read_begin_[task + 1]; ++r)
      if (!done[reads_[r]]) {
        const auto it = std::upper_bound(op_base_.begin(), op_base_.end(), reads_[r]) - 1;
        const int pop = s_.first_op + static_cast<int>(it - op_base_.begin());
        sink.add(RegionFaultKind::ReadBeforeWritten,
                 task_label(task) + " started on CTA " + std::to_string(c) + " at " +
                     std::to_string(now) + " us before tile " + std::to_string(reads_[r] - *it) +
                     " of " + g_.ops[pop].name + " (ops[" + std::to_string(pop) + "]) finished");
        break;
      }
    const int wi = s_.task_op[task] - s_.first_op;
    const int64_t rb = s_.task_tile[task] / g_.ops[s_.task_op[task]].col_tiles();
    for (const auto& [r, same_rows] : hazards_[wi]) {
      const Op& prev = g_.ops[s_.first_op + r];
      if (same_rows ? rb_done[rb_base_[r] + rb] >= prev.col_tiles()
                    : op_done[r] >= prev.num_tiles())
        continue;
      sink.add(RegionFaultKind::BufferReuse,
               task_label(task) + " started on CTA " + std::to_string(c) + " at " +
                   std::to_string(now) + " us writing a tensor " + prev.name + " (ops[" +
                   std::to_string(s_.first_op + r) + "]) still accesses" +
                   (same_rows ? " in row block " + std::to_string(rb) : ""));
      break;
    }
    double d = opt.cost_durations ? cost[wi] * factor(rng) : duration(rng);
    if (unit(rng) < opt.stall_probability) d += opt.stall_us;
    running[c] = task;
    events.push({now + d, rng(), c});
  };

  for (;;) {
    ready.clear();
    for (int32_t c = 0; c < ctas; ++c) {
      const int32_t t = running[c] < 0 ? next_task(c) : -1;
      if (t >= 0 && first_unmet(t) < 0) ready.push_back(c);
    }
    std::shuffle(ready.begin(), ready.end(), rng);
    for (int32_t c : ready) start(c);
    if (events.empty()) break;
    const auto [t, tie, c] = events.top();
    events.pop();
    (void)tie;
    now = t;
    const int32_t task = running[c];
    running[c] = -1;
    ++pos[c];
    ++rep.tasks_run;
    done[local_[task]] = 1;
    const int fi = s_.task_op[task] - s_.first_op;
    ++op_done[fi];
    ++rb_done[rb_base_[fi] + s_.task_tile[task] / g_.ops[s_.task_op[task]].col_tiles()];
    for (int32_t k = s_.signal_begin[task]; k < s_.signal_begin[task + 1]; ++k)
      ++count[s_.signal_sem[k]];
  }
  rep.makespan_us = now;

  int blocked = 0;
  std::string why;
  for (int32_t c = 0; c < ctas; ++c) {
    const int32_t t = next_task(c);
    if (t < 0) continue;
    if (++blocked > 3) continue;
    const int32_t k = first_unmet(t);
    const int32_t sem = s_.wait_sem[k];
    why += "; CTA " + std::to_string(c) + " at " + task_label(t) + " waits for semaphore " +
           std::to_string(sem) + " to reach " + std::to_string(s_.wait_target[k]) + ", it holds " +
           std::to_string(count[sem]);
  }
  if (blocked > 0)
    sink.add(RegionFaultKind::Deadlock, std::to_string(blocked) + " CTAs blocked at " +
                                            std::to_string(now) + " us with nothing running" + why);
  for (size_t l = 0; l < runs.size(); ++l)
    if (runs[l] == 0) {
      const auto it = std::upper_bound(op_base_.begin(), op_base_.end(), l) - 1;
      const int op = s_.first_op + static_cast<int>(it - op_base_.begin());
      sink.add(RegionFaultKind::NeverRun, "tile " + std::to_string(l - *it) + " of " +
                                              g_.ops[op].name + " (ops[" + std::to_string(op) +
                                              "]) never ran");
    }
  sink.finish();
  return rep;
}

RegionCheckReport check_region_schedule(const OpGraph& g, const RegionSchedule& s,
                                        const RegionCheckOptions& opt) {
  return RegionScheduleChecker(g, s).run(opt);
}

}  // namespace megaops
