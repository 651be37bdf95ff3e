// The persistent region's device loop (kernels/persistent_region.cuh) on real schedules: the probe
// kernel runs the static schedules the host builds (graph/region_schedule.h) for a whole
// llama3.2-1b decode step, one layer at 1, 2, 7 and 132 CTAs (capped at what can be resident), and
// prefill chunks of a few tokens, for three steps on counters never reset, with injected delays
// and several seeds, and with the CTA lists handed to other blocks. The host checks, against the
// tiling contracts (input_tiles) and not the semaphore encoding, that every task ran exactly once
// per step on the CTA whose list holds it, that it started after every producer tile it reads had
// finished, and that it read its producers' payloads of this step (no stale data). A schedule
// whose wait can never be met must trip the watchdog, which names the op and tile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "graph/region_schedule.h"
#include "kernels/persistent_region.cuh"
#include "models/step_graph.h"
#include "sync/error_record.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

constexpr int CTA_COUNTS[] = {1, 2, 7, 132};
constexpr uint32_t STEPS = 3;

OpGraph decode_graph(const std::string& model) {
  return build_decode_graph(preset_config(model), model, 1, 40);
}

// A prefill chunk of `tokens` tokens in `tile_rows`-row blocks: at most 8 tokens keep every
// matmul off cuBLASLt, so the whole chunk can be one region.
OpGraph prefill_graph(const std::string& model, int tokens, int context, int64_t tile_rows) {
  GraphOptions opt;
  opt.prefill_tile_rows = tile_rows;
  return build_prefill_graph(preset_config(model), model, tokens, context, opt);
}

std::pair<int, int> layer_ops(const OpGraph& g, int layer) {
  return {find_op(g, "input_layernorm", layer), find_op(g, "down_proj", layer)};
}

int max_resident_ctas() {
  int n = 0;
  MEGAOPS_CUDA_CHECK(persistent_region_probe_max_resident_ctas(&n));
  return n;
}

// The names the watchdog's record is printed with: one per op of the step graph (the record's op
// is the waiting task's op index), saying which region the op ran in.
std::vector<std::string> region_op_names(const OpGraph& g, const RegionSchedule& s) {
  std::vector<std::string> names;
  const std::string region =
      "region ops " + std::to_string(s.first_op) + " to " + std::to_string(s.last_op) + ": ";
  for (const Op& op : g.ops)
    names.push_back(region + (op.layer >= 0 ? "layer " + std::to_string(op.layer) + " " : "") +
                    op.name);
  return names;
}

// Per task, the tasks it depends on by the tiling contracts: the region's tasks that produce a
// tile it reads (input_tiles), ascending. Producers before the region are ready at launch.
struct TaskDeps {
  std::vector<int32_t> begin, deps;
};

TaskDeps task_deps(const OpGraph& g, const RegionSchedule& s) {
  std::vector<std::vector<int32_t>> task_of(g.ops.size());
  for (int op = s.first_op; op <= s.last_op; ++op) task_of[op].assign(g.ops[op].num_tiles(), -1);
  for (int32_t t = 0; t < s.num_tasks(); ++t) task_of[s.task_op[t]][s.task_tile[t]] = t;
  TaskDeps d;
  d.begin.push_back(0);
  for (int32_t t = 0; t < s.num_tasks(); ++t) {
    const int op = s.task_op[t];
    std::vector<int32_t> deps;
    for (size_t i = 0; i < g.ops[op].inputs.size(); ++i) {
      const int producer = g.ops[op].inputs[i].producer;
      if (producer < s.first_op || producer > s.last_op) continue;
      for (int64_t pt : input_tiles(g, op, static_cast<int>(i), s.task_tile[t])) {
        const int32_t dep = task_of[producer][pt];
        EXPECT_GE(dep, 0) << "op " << producer << " tile " << pt << " has no task";
        deps.push_back(dep);
      }
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    d.deps.insert(d.deps.end(), deps.begin(), deps.end());
    d.begin.push_back(static_cast<int32_t>(d.deps.size()));
  }
  return d;
}

// The same schedule with its CTA lists handed to other blocks: list c goes to block perm[c]. Any
// such mapping keeps deadlock freedom (each list still runs in increasing global order).
RegionSchedule permute_lists(const RegionSchedule& s, const std::vector<int>& perm) {
  std::vector<int> list_of(s.num_ctas);
  for (int c = 0; c < s.num_ctas; ++c) list_of[perm[c]] = c;
  RegionSchedule out = s;
  out.cta_begin.assign(1, 0);
  out.cta_task.clear();
  for (int b = 0; b < s.num_ctas; ++b) {
    const int c = list_of[b];
    out.cta_task.insert(out.cta_task.end(), s.cta_task.begin() + s.cta_begin[c],
                        s.cta_task.begin() + s.cta_begin[c + 1]);
    out.cta_begin.push_back(static_cast<int32_t>(out.cta_task.size()));
  }
  return out;
}

// What one step of the probe left on the device.
struct ProbeResult {
  std::vector<uint32_t> start, done, runs, semaphores;
  std::vector<int32_t> cta;
  uint32_t sequence = 0, rejected = 0, stale_reads = 0;
  int32_t first_stale = -1;
};

// The device buffers of one schedule. The semaphores are zeroed once here and never again: every
// step's targets grow with the step. The probe's own outputs are cleared before each step.
class ProbeRegion {
 public:
  ProbeRegion(const RegionSchedule& s, const TaskDeps& d)
      : num_tasks_(s.num_tasks()),
        num_ctas_(s.num_ctas),
        schedule_(pack_region_schedule(s).size()),
        semaphores_(s.num_semaphores),
        deps_begin_(d.begin.size()),
        deps_(d.deps.size()),
        payload_(static_cast<size_t>(num_tasks_) * PROBE_PAYLOAD_WORDS),
        start_(num_tasks_),
        done_(num_tasks_),
        runs_(num_tasks_),
        cta_(num_tasks_),
        counters_(4),
        first_stale_(1),
        step_(1) {
    schedule_.upload(pack_region_schedule(s));
    deps_begin_.upload(d.begin);
    if (!d.deps.empty()) deps_.upload(d.deps);
    MEGAOPS_CUDA_CHECK(cudaMemset(semaphores_.ptr, 0, semaphores_.n * sizeof(uint32_t)));
    payload_.poison();
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Runs step `step` with `grid` CTAs (the schedule's count unless a test says otherwise).
  ProbeResult run(uint32_t step, const WatchdogRecord& wd, const std::vector<std::string>& names,
                  DelayParams delay, DelayParams body_delay, uint64_t payload_seed, int grid = 0) {
    step_.upload({step});
    MEGAOPS_CUDA_CHECK(cudaMemset(counters_.ptr, 0, counters_.n * sizeof(uint32_t)));
    MEGAOPS_CUDA_CHECK(cudaMemset(runs_.ptr, 0, runs_.n * sizeof(uint32_t)));
    start_.poison();
    done_.poison();
    cta_.poison();
    first_stale_.upload({-1});
    PersistentRegionProbeParams p;
    p.sync.schedule = schedule_.ptr;
    p.sync.semaphores = semaphores_.ptr;
    p.sync.watchdog = wd.params();
    p.sync.delay = delay;
    p.num_ctas = grid > 0 ? grid : num_ctas_;
    p.step_ptr = step_.ptr;
    p.sequence = counters_.ptr;
    p.rejected = counters_.ptr + 1;
    p.stale_reads = counters_.ptr + 2;
    p.first_stale = first_stale_.ptr;
    p.start_seq = start_.ptr;
    p.done_seq = done_.ptr;
    p.task_cta = cta_.ptr;
    p.task_runs = runs_.ptr;
    p.deps_begin = deps_begin_.ptr;
    p.deps = deps_.ptr;
    p.payload = payload_.ptr;
    p.payload_seed = payload_seed;
    p.body_delay = body_delay;
    EXPECT_EQ(launch_persistent_region_probe(p, nullptr), cudaSuccess);
    wd.check(cudaDeviceSynchronize(), names);
    ProbeResult r;
    r.start = start_.download();
    r.done = done_.download();
    r.runs = runs_.download();
    r.cta = cta_.download();
    if (semaphores_.n > 0) r.semaphores = semaphores_.download();
    const std::vector<uint32_t> counters = counters_.download();
    r.sequence = counters[0];
    r.rejected = counters[1];
    r.stale_reads = counters[2];
    r.first_stale = first_stale_.download()[0];
    return r;
  }

 private:
  int32_t num_tasks_, num_ctas_;
  DeviceBuffer<int32_t> schedule_;
  DeviceBuffer<uint32_t> semaphores_;
  DeviceBuffer<int32_t> deps_begin_, deps_;
  DeviceBuffer<uint32_t> payload_, start_, done_, runs_;
  DeviceBuffer<int32_t> cta_;
  DeviceBuffer<uint32_t> counters_;  // sequence, rejected, stale reads, unused
  DeviceBuffer<int32_t> first_stale_;
  DeviceBuffer<uint32_t> step_;
};

// Everything one step must show, after `step` steps on the same counters.
void expect_step_ok(const OpGraph& g, const RegionSchedule& s, const TaskDeps& d,
                    const ProbeResult& r, uint32_t step, const std::string& what) {
  SCOPED_TRACE(what + ", step " + std::to_string(step));
  ASSERT_EQ(r.rejected, 0u);
  ASSERT_EQ(r.stale_reads, 0u) << "task " << r.first_stale << " ("
                               << g.ops[s.task_op[r.first_stale]].name << " tile "
                               << s.task_tile[r.first_stale] << ") read a stale payload";
  const int32_t n = s.num_tasks();
  ASSERT_EQ(r.sequence, 2u * static_cast<uint32_t>(n));
  std::vector<int32_t> cta_of(n, -1);
  for (int c = 0; c < s.num_ctas; ++c)
    for (int k = s.cta_begin[c]; k < s.cta_begin[c + 1]; ++k) cta_of[s.cta_task[k]] = c;
  // Every sequence number 0 .. 2n-1 taken once: each task's start and end are distinct events.
  std::vector<char> seen(2 * static_cast<size_t>(n), 0);
  for (int32_t t = 0; t < n; ++t) {
    ASSERT_EQ(r.runs[t], 1u) << "task " << t;
    ASSERT_EQ(r.cta[t], cta_of[t]) << "task " << t;
    ASSERT_LT(r.start[t], r.done[t]) << "task " << t;
    ASSERT_LT(r.done[t], 2u * n) << "task " << t;
    ASSERT_FALSE(seen[r.start[t]] || seen[r.done[t]]) << "task " << t;
    seen[r.start[t]] = seen[r.done[t]] = 1;
  }
  for (int32_t t = 0; t < n; ++t)
    for (int32_t i = d.begin[t]; i < d.begin[t + 1]; ++i) {
      const int32_t p = d.deps[i];
      ASSERT_LT(r.done[p], r.start[t])
          << g.ops[s.task_op[t]].name << " layer " << g.ops[s.task_op[t]].layer << " tile "
          << s.task_tile[t] << " started before its producer " << g.ops[s.task_op[p]].name
          << " tile " << s.task_tile[p] << " finished";
    }
  // Counters are never reset: after `step` steps each holds step times its signals per step.
  std::vector<uint32_t> per_step(s.num_semaphores, 0);
  for (int32_t sem : s.signal_sem) ++per_step[sem];
  for (int32_t i = 0; i < s.num_semaphores; ++i)
    ASSERT_EQ(r.semaphores[i], tile_target(step, per_step[i])) << "semaphore " << i;
}

// Runs STEPS steps of `s` on one set of counters: the first without delays, the others with
// injected delays (waits, signals, bodies) from seeds derived from `seed`.
void run_steps(const OpGraph& g, const RegionSchedule& s, uint64_t seed, const std::string& what,
               uint32_t max_delay_ns = 2000) {
  ASSERT_LE(s.num_ctas, max_resident_ctas()) << what;
  const TaskDeps d = task_deps(g, s);
  ProbeRegion region(s, d);
  const WatchdogRecord wd;
  const std::vector<std::string> names = region_op_names(g, s);
  for (uint32_t step = 1; step <= STEPS; ++step) {
    const uint64_t step_seed = seed * 0x9e3779b97f4a7c15ull + step;
    const uint32_t ns = step == 1 ? 0 : max_delay_ns;
    const ProbeResult r = region.run(step, wd, names, DelayParams{ns, step_seed},
                                     DelayParams{ns, step_seed ^ 0xb0d7}, step_seed ^ 0xda7a);
    expect_step_ok(g, s, d, r, step, what);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

int capped(int ctas) {
  return std::min(ctas, max_resident_ctas());
}

TEST(PersistentRegion, WholeDecodeStepLlama1b) {
  MEGAOPS_REQUIRE_GPU();
  const OpGraph g = decode_graph("llama3.2-1b");
  const int last = static_cast<int>(g.ops.size()) - 1;
  const int ctas = capped(132);
  const RegionSchedule s = build_region_schedule(g, 0, last, ctas, max_resident_ctas());
  for (uint64_t k = 0; k < 3; ++k)
    run_steps(g, s, testing::test_seed() + k, "whole step, " + std::to_string(ctas) + " CTAs");
}

TEST(PersistentRegion, OneLayerAtSeveralCtaCounts) {
  MEGAOPS_REQUIRE_GPU();
  const OpGraph g = decode_graph("llama3.2-1b");
  const auto [first, last] = layer_ops(g, 3);
  for (int want : CTA_COUNTS)
    for (RegionAssign assign : {RegionAssign::EarliestFree, RegionAssign::RoundRobin}) {
      RegionScheduleOptions opt;
      opt.assign = assign;
      const int ctas = capped(want);
      const RegionSchedule s =
          build_region_schedule(g, first, last, ctas, max_resident_ctas(), opt);
      const std::string what = "layer 3, " + std::to_string(ctas) + " CTAs" +
                               (assign == RegionAssign::RoundRobin ? ", round robin" : "");
      for (uint64_t k = 0; k < 4; ++k) run_steps(g, s, testing::test_seed() + 31 * k, what);
    }
}

// The maximal runs of ops without a vendor GEMM (a region ends before one): the regions a prefill
// chunk can have.
std::vector<std::pair<int, int>> vendor_free_spans(const OpGraph& g) {
  std::vector<std::pair<int, int>> spans;
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    if (is_vendor_gemm(g.ops[i])) continue;
    if (spans.empty() || spans.back().second != i - 1)
      spans.push_back({i, i});
    else
      spans.back().second = i;
  }
  return spans;
}

// Prefill chunks of a few tokens: llama3.2-1b's gate_up and down projections run on cuBLASLt at 6
// rows, so its regions are the spans between them (the first three are run: embedding to the
// post-attention norm, SiLU-mul alone, a region without semaphores, and the next layer's
// attention half; and the last, final norm to sampling); the tiny presets' chunks are one region
// each.
TEST(PersistentRegion, PrefillChunks) {
  MEGAOPS_REQUIRE_GPU();
  struct Case {
    const char* model;
    int tokens, context;
    int64_t tile_rows;
  };
  for (const Case& c : {Case{"llama3.2-1b", 6, 10, 2}, Case{"tiny-qwen3", 8, 8, 2},
                        Case{"tiny-llama3", 5, 0, 128}}) {
    const OpGraph g = prefill_graph(c.model, c.tokens, c.context, c.tile_rows);
    std::vector<std::pair<int, int>> spans = vendor_free_spans(g);
    if (spans.size() > 4) spans = {spans[0], spans[1], spans[2], spans.back()};
    for (const auto& [first, last] : spans)
      for (int want : {2, 7, 132}) {
        const int ctas = capped(want);
        const RegionSchedule s = build_region_schedule(g, first, last, ctas, max_resident_ctas());
        run_steps(g, s, testing::test_seed() + static_cast<uint64_t>(want),
                  std::string(c.model) + " prefill " + std::to_string(c.tokens) + " tokens, ops " +
                      std::to_string(first) + ".." + std::to_string(last) + ", " +
                      std::to_string(ctas) + " CTAs");
      }
  }
}

// The lists handed to other blocks: rotated by 1 and by half, and shuffled. Which block runs
// which list must not matter.
TEST(PersistentRegion, PermutedCtaLists) {
  MEGAOPS_REQUIRE_GPU();
  const OpGraph g = decode_graph("llama3.2-1b");
  const auto [first, last] = layer_ops(g, 0);
  const int whole_last = static_cast<int>(g.ops.size()) - 1;
  std::mt19937_64 rng(testing::test_seed());
  for (const auto& [a, b, want] :
       {std::tuple{first, last, 7}, std::tuple{first, last, 132}, std::tuple{0, whole_last, 132}}) {
    const int ctas = capped(want);
    const RegionSchedule s = build_region_schedule(g, a, b, ctas, max_resident_ctas());
    std::vector<int> rot1(ctas), half(ctas), shuffled(ctas);
    for (int c = 0; c < ctas; ++c) {
      rot1[c] = (c + 1) % ctas;
      half[c] = (c + ctas / 2) % ctas;
    }
    std::iota(shuffled.begin(), shuffled.end(), 0);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    int variant = 0;
    for (const std::vector<int>& perm : {rot1, half, shuffled}) {
      const std::string what = "ops " + std::to_string(a) + ".." + std::to_string(b) + ", " +
                               std::to_string(ctas) + " CTAs, permutation " +
                               std::to_string(variant++);
      run_steps(g, permute_lists(s, perm), rng(), what);
    }
  }
}

// A grid that does not match the schedule runs nothing: every CTA reports the mismatch.
TEST(PersistentRegion, ScheduleOfAnotherGridIsRejected) {
  MEGAOPS_REQUIRE_GPU();
  const OpGraph g = decode_graph("llama3.2-1b");
  const auto [first, last] = layer_ops(g, 0);
  const RegionSchedule s = build_region_schedule(g, first, last, 2, max_resident_ctas());
  const TaskDeps d = task_deps(g, s);
  ProbeRegion region(s, d);
  const WatchdogRecord wd;
  const ProbeResult r = region.run(1, wd, {}, DelayParams{}, DelayParams{}, 1, 3);
  EXPECT_EQ(r.rejected, 3u);
  EXPECT_EQ(r.sequence, 0u);
  for (uint32_t runs : r.runs) ASSERT_EQ(runs, 0u);
  PersistentRegionProbeParams p;
  EXPECT_EQ(launch_persistent_region_probe(p, nullptr), cudaErrorInvalidValue);
}

// The stuck wait of the death test: the last task in issue order that has a wait, its first wait
// raised by one above what a step ever signals. No task waits on that task's signals (they would
// have larger indices and waits), so only its wait can time out and the record names it.
struct StuckWait {
  OpGraph g;
  RegionSchedule s;
  int32_t task = -1;
  uint32_t target = 0;   // the wait's target before the corruption
  uint32_t signals = 0;  // what its semaphore receives per step
};

StuckWait stuck_wait() {
  StuckWait w;
  w.g = decode_graph("llama3.2-1b");
  const auto [first, last] = layer_ops(w.g, 1);
  w.s = build_region_schedule(w.g, first, last, 7, 132);
  for (int32_t t = w.s.num_tasks() - 1; t >= 0 && w.task < 0; --t)
    if (w.s.wait_begin[t + 1] > w.s.wait_begin[t]) w.task = t;
  const int32_t wait = w.s.wait_begin[w.task];
  w.target = static_cast<uint32_t>(w.s.wait_target[wait]);
  w.signals = static_cast<uint32_t>(
      std::count(w.s.signal_sem.begin(), w.s.signal_sem.end(), w.s.wait_sem[wait]));
  w.s.wait_target[wait] += 1;
  return w;
}

// Runs in the death test's child process (the trap leaves the context unusable): one step of the
// corrupted schedule under a 500 ms watchdog; exits 3 with the host's message on stderr.
[[noreturn]] void run_stuck_region() {
  try {
    const StuckWait w = stuck_wait();
    const WatchdogRecord wd(500);
    ProbeRegion region(w.s, task_deps(w.g, w.s));
    region.run(1, wd, region_op_names(w.g, w.s), DelayParams{}, DelayParams{}, 1);
    std::fprintf(stderr, "the stuck wait was not reported\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    _exit(3);
  }
  _exit(1);
}

TEST(PersistentRegionDeathTest, WatchdogNamesTheStuckTask) {
  MEGAOPS_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const StuckWait w = stuck_wait();
  ASSERT_GE(w.task, 0);
  ASSERT_EQ(w.signals, w.target);  // so the corrupted target is never reached
  const std::string message = "watchdog: op '" + region_op_names(w.g, w.s)[w.s.task_op[w.task]] +
                              "' tile " + std::to_string(w.s.task_tile[w.task]) +
                              " waited for count >= " + std::to_string(w.target + 1) +
                              ", observed " + std::to_string(w.signals);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(run_stuck_region(), ::testing::ExitedWithCode(3), message);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Child start-up (CUDA context, schedule) + the 500 ms bound + reporting.
  EXPECT_LT(seconds, 6.0);
}

}  // namespace
}  // namespace megaops
