// The static schedule of a persistent region on real step graphs: built for one op, one layer,
// several layers and whole steps, then run by the CPU checker under hundreds of seeded
// interleavings with random delays at 1, 2, 7 and 132 CTAs; corrupted schedules must be caught;
// bad requests are refused naming the field.
#include "graph/region_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "graph/region_schedule_check.h"
#include "models/step_graph.h"

namespace megaops {
namespace {

constexpr int CTA_COUNTS[] = {1, 2, 7, 132};
constexpr int RESIDENT = 132;

OpGraph decode(const std::string& model, int batch, int context = 40) {
  return build_decode_graph(preset_config(model), model, batch, context);
}

// A prefill chunk cut into `tile_rows`-row blocks: at most 8 tokens keep every matmul on the
// small-m kernel (no vendor GEMM); small row blocks give several of them.
OpGraph prefill(const std::string& model, int tokens, int context, int64_t tile_rows = 128) {
  GraphOptions opt;
  opt.prefill_tile_rows = tile_rows;
  return build_prefill_graph(preset_config(model), model, tokens, context, opt);
}

std::pair<int, int> layer_ops(const OpGraph& g, int first_layer, int last_layer) {
  const int a = find_op(g, "input_layernorm", first_layer), b = find_op(g, "down_proj", last_layer);
  EXPECT_GE(a, 0);
  EXPECT_GE(b, a);
  return {a, b};
}

// Runs `seeds` seeded interleavings; fails with the first report that is not ok.
void expect_runs_clean(const OpGraph& g, const RegionSchedule& s, int seeds, uint64_t base = 1) {
  const RegionScheduleChecker checker(g, s);
  for (int i = 0; i < seeds; ++i) {
    RegionCheckOptions opt;
    opt.seed = base + static_cast<uint64_t>(i) * 7919;
    const RegionCheckReport r = checker.run(opt);
    ASSERT_TRUE(r.ok()) << "ops " << s.first_op << ".." << s.last_op << ", " << s.num_ctas
                        << " CTAs, seed " << opt.seed << ":\n"
                        << r.summary();
    ASSERT_EQ(r.tasks_run, s.num_tasks());
  }
}

int64_t region_tiles(const OpGraph& g, int first, int last) {
  int64_t n = 0;
  for (int i = first; i <= last; ++i) n += g.ops[i].num_tiles();
  return n;
}

// Builds and checks [first, last] at every CTA count.
void check_region(const OpGraph& g, int first, int last, int seeds,
                  const RegionScheduleOptions& opt = {}) {
  for (int ctas : CTA_COUNTS) {
    SCOPED_TRACE("ops " + std::to_string(first) + ".." + std::to_string(last) + ", " +
                 std::to_string(ctas) + " CTAs");
    const RegionSchedule s = build_region_schedule(g, first, last, ctas, RESIDENT, opt);
    ASSERT_EQ(s.num_tasks(), region_tiles(g, first, last));
    expect_runs_clean(g, s, seeds);
  }
}

TEST(RegionSchedule, VendorGemmRuleMatchesTheDispatch) {
  // Decode at batch 1 streams every matmul through megaops' own kernels; a long prefill runs
  // its matmuls on cuBLASLt; an 8-token one keeps them on the small-m kernel.
  const OpGraph d = decode("llama3.2-1b", 1);
  for (const Op& op : d.ops) EXPECT_FALSE(is_vendor_gemm(op)) << op.name;
  const OpGraph p = prefill("llama3.2-1b", 256, 0);
  EXPECT_TRUE(is_vendor_gemm(p.ops[find_op(p, "qkv_proj", 0)]));
  EXPECT_FALSE(is_vendor_gemm(p.ops[find_op(p, "prefill_attention", 0)]));
  const OpGraph small = prefill("tiny-llama3", 8, 0, 2);
  for (const Op& op : small.ops) EXPECT_FALSE(is_vendor_gemm(op)) << op.name;
}

TEST(RegionSchedule, OneOpRegions) {
  const OpGraph g = decode("llama3.2-1b", 1);
  for (const char* name :
       {"input_layernorm", "qkv_proj", "qkv_rope", "decode_attention", "silu_mul", "down_proj"})
    check_region(g, find_op(g, name, 3), find_op(g, name, 3), 100);
  check_region(g, find_op(g, "lm_head", -1), find_op(g, "lm_head", -1), 100);
  // A one-op region waits for nothing: its producers ran before it.
  const int qkv = find_op(g, "qkv_proj", 0);
  const RegionSchedule s = build_region_schedule(g, qkv, qkv, 7, RESIDENT);
  EXPECT_EQ(s.num_waits(), 0);
  EXPECT_EQ(s.num_semaphores, 0);
  // Earliest-free assignment of equal tiles deals them out evenly.
  for (int c = 0; c < 7; ++c) {
    const int32_t n = s.cta_begin[c + 1] - s.cta_begin[c];
    EXPECT_GE(n, s.num_tasks() / 7);
    EXPECT_LE(n, (s.num_tasks() + 6) / 7);
  }
}

TEST(RegionSchedule, OneLayerOfDecode) {
  const OpGraph g = decode("llama3.2-1b", 1);
  for (int layer : {0, 7}) {
    const auto [a, b] = layer_ops(g, layer, layer);
    check_region(g, a, b, 200);
  }
  const OpGraph q = decode("qwen3-0.6b", 1, 300);
  const auto [a, b] = layer_ops(q, 5, 5);
  check_region(q, a, b, 200);
}

TEST(RegionSchedule, SeveralLayersOfDecode) {
  const OpGraph g = decode("qwen3-0.6b", 1);
  const auto [a, b] = layer_ops(g, 2, 5);
  check_region(g, a, b, 100);
  // Any contiguous range, not only whole layers: from o_proj of one layer to qkv_rope of the next.
  check_region(g, find_op(g, "o_proj", 2), find_op(g, "qkv_rope", 3), 200);
}

TEST(RegionSchedule, WholeDecodeSteps) {
  for (const auto& [model, batch] : std::vector<std::pair<std::string, int>>{
           {"tiny-llama3", 1}, {"tiny-llama3", 4}, {"tiny-qwen3", 1}, {"tiny-qwen3", 8}}) {
    SCOPED_TRACE(model + " batch " + std::to_string(batch));
    const OpGraph g = decode(model, batch);
    check_region(g, 0, static_cast<int>(g.ops.size()) - 1, 300);
  }
  const OpGraph g = decode("llama3.2-1b", 1);
  check_region(g, 0, static_cast<int>(g.ops.size()) - 1, 100);
}

TEST(RegionSchedule, PrefillRegions) {
  // A whole prefill chunk of 8 tokens in 2-row blocks: four row blocks, causal attention across
  // them, the LM head over the last row.
  const OpGraph g = prefill("tiny-llama3", 8, 20, 2);
  ASSERT_EQ(g.ops[find_op(g, "qkv_proj", 0)].row_blocks(), 4);
  check_region(g, 0, static_cast<int>(g.ops.size()) - 1, 300);
  const OpGraph q = prefill("tiny-qwen3", 7, 0, 2);
  check_region(q, 0, static_cast<int>(q.ops.size()) - 1, 300);
  // Longer chunks as if every matmul had a tile kernel that runs in a region (the predicate is
  // the caller's): eight row blocks of 16 rows.
  RegionScheduleOptions any;
  any.is_vendor_gemm = [](const Op&) { return false; };
  const OpGraph big = prefill("tiny-qwen3", 120, 16, 16);
  ASSERT_EQ(big.ops[find_op(big, "qkv_proj", 1)].row_blocks(), 8);
  check_region(big, 0, static_cast<int>(big.ops.size()) - 1, 200, any);
  // A long prefill: the matmuls are vendor GEMMs, but the span between them can be a region.
  const OpGraph p = prefill("llama3.2-1b", 512, 0);
  check_region(p, find_op(p, "qkv_rope", 1), find_op(p, "prefill_attention", 1), 100);
  check_region(p, find_op(p, "silu_mul", 4), find_op(p, "silu_mul", 4), 100);
}

TEST(RegionSchedule, WaitsUseOneSemaphoreAWholeRowBlock) {
  const OpGraph g = decode("llama3.2-1b", 1);
  const auto [a, b] = layer_ops(g, 0, 0);
  const RegionSchedule s = build_region_schedule(g, a, b, 7, RESIDENT);
  std::map<std::string, std::vector<int32_t>> waits;  // op name -> waits of its tile 0
  for (int32_t i = 0; i < s.num_tasks(); ++i)
    if (s.task_tile[i] == 0)
      for (int32_t k = s.wait_begin[i]; k < s.wait_begin[i + 1]; ++k)
        waits[g.ops[s.task_op[i]].name].push_back(k);
  const int norm = find_op(g, "input_layernorm", 0);
  // A matmul tile reads every tile of its row block: one row-block wait for all of them.
  ASSERT_EQ(waits["qkv_proj"].size(), 1u);
  const int32_t w = waits["qkv_proj"][0];
  EXPECT_EQ(s.sem_op[s.wait_sem[w]], norm);
  EXPECT_EQ(s.sem_tile[s.wait_sem[w]], -1);
  EXPECT_EQ(s.wait_target[w], g.ops[norm].col_tiles());
  // Attention reads its q head and its KV head's k and v: three tile waits, target 1 each.
  ASSERT_EQ(waits["decode_attention"].size(), 3u);
  for (int32_t k : waits["decode_attention"]) {
    EXPECT_GE(s.sem_tile[s.wait_sem[k]], 0);
    EXPECT_EQ(s.wait_target[k], 1);
  }
  // The first op's producer (the embedding) ran before the region: nothing to wait for.
  EXPECT_EQ(waits.count("input_layernorm"), 0u);
  // Every task signals one semaphore: a tile semaphore where its consumer reads it in parts, its
  // row-block semaphore where the consumer reads whole row blocks, none where the consumer is
  // outside the region.
  for (int32_t i = 0; i < s.num_tasks(); ++i) {
    const std::string& name = g.ops[s.task_op[i]].name;
    const int32_t n = s.signal_begin[i + 1] - s.signal_begin[i];
    if (name == "down_proj") {
      EXPECT_EQ(n, 0);
      continue;
    }
    ASSERT_EQ(n, 1) << name;
    const int32_t sem = s.signal_sem[s.signal_begin[i]];
    EXPECT_EQ(s.sem_op[sem], s.task_op[i]);
    const bool parts = name == "qkv_proj" || name == "qkv_rope" || name == "gate_up_proj";
    EXPECT_EQ(s.sem_tile[sem], parts ? s.task_tile[i] : -1) << name;
  }
}

TEST(RegionSchedule, IssueOrderIsTopologicalAndCtaListsIncrease) {
  const OpGraph g = prefill("tiny-llama3", 8, 20, 2);
  for (RegionAssign assign : {RegionAssign::EarliestFree, RegionAssign::RoundRobin}) {
    RegionScheduleOptions opt;
    opt.assign = assign;
    const RegionSchedule s = build_region_schedule(g, 0, g.ops.size() - 1, 7, RESIDENT, opt);
    std::map<std::pair<int, int>, int32_t> index;
    for (int32_t i = 0; i < s.num_tasks(); ++i)
      EXPECT_TRUE(index.insert({{s.task_op[i], s.task_tile[i]}, i}).second);
    for (int32_t i = 0; i < s.num_tasks(); ++i) {
      const Op& op = g.ops[s.task_op[i]];
      for (int k = 0; k < static_cast<int>(op.inputs.size()); ++k)
        for (int64_t pt : input_tiles(g, s.task_op[i], k, s.task_tile[i]))
          EXPECT_LT(index.at({op.inputs[k].producer, static_cast<int>(pt)}), i);
    }
    std::vector<int32_t> all(s.cta_task);
    for (int c = 0; c < s.num_ctas; ++c)
      EXPECT_TRUE(std::is_sorted(all.begin() + s.cta_begin[c], all.begin() + s.cta_begin[c + 1]));
    std::sort(all.begin(), all.end());
    std::vector<int32_t> iota(s.num_tasks());
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(all, iota);
    if (assign == RegionAssign::RoundRobin) {
      for (int c = 0; c < s.num_ctas; ++c)
        for (int32_t k = s.cta_begin[c]; k < s.cta_begin[c + 1]; ++k) {
          EXPECT_EQ(s.cta_task[k] % s.num_ctas, c);
        }
    }
    expect_runs_clean(g, s, 100);
  }
}

TEST(RegionSchedule, AssignmentKeepsCtasBusy) {
  // With durations from the cost model (+-25%, no stalls), a layer on 7 CTAs finishes close to
  // its work divided by 7, and the earliest-free assignment is no worse than round-robin.
  const OpGraph g = decode("llama3.2-1b", 1);
  const auto [a, b] = layer_ops(g, 3, 3);
  double work = 0;
  for (int i = a; i <= b; ++i)
    work += g.ops[i].num_tiles() * region_tile_cost_us(g.ops[i], RegionScheduleOptions{});
  std::map<RegionAssign, double> makespan;
  for (RegionAssign assign : {RegionAssign::EarliestFree, RegionAssign::RoundRobin}) {
    RegionScheduleOptions opt;
    opt.assign = assign;
    const RegionSchedule s = build_region_schedule(g, a, b, 7, RESIDENT, opt);
    const RegionScheduleChecker checker(g, s);
    for (int seed = 0; seed < 20; ++seed) {
      RegionCheckOptions run;
      run.seed = seed;
      run.stall_probability = 0;
      run.cost_durations = true;
      const RegionCheckReport r = checker.run(run);
      ASSERT_TRUE(r.ok()) << r.summary();
      makespan[assign] += r.makespan_us / 20;
    }
  }
  const double mean_factor = (0.8 + 1.25) / 2;
  EXPECT_LT(makespan[RegionAssign::EarliestFree], 1.15 * work * mean_factor / 7);
  EXPECT_LE(makespan[RegionAssign::EarliestFree], 1.01 * makespan[RegionAssign::RoundRobin]);
}

// ---- corrupted schedules: the checker must fail them ----

// The schedule with tasks i and j exchanged in the issue order (the CTA lists keep their
// positions, so whichever CTA held i now runs j's tile there).
RegionSchedule swap_tasks(const RegionSchedule& s, int32_t i, int32_t j) {
  std::vector<int32_t> order(s.num_tasks());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[i], order[j]);
  RegionSchedule out = s;
  out.task_op.clear();
  out.task_tile.clear();
  out.wait_sem.clear();
  out.wait_target.clear();
  out.signal_sem.clear();
  out.wait_begin.assign(1, 0);
  out.signal_begin.assign(1, 0);
  for (int32_t t : order) {
    out.task_op.push_back(s.task_op[t]);
    out.task_tile.push_back(s.task_tile[t]);
    for (int32_t k = s.wait_begin[t]; k < s.wait_begin[t + 1]; ++k) {
      out.wait_sem.push_back(s.wait_sem[k]);
      out.wait_target.push_back(s.wait_target[k]);
    }
    out.wait_begin.push_back(out.num_waits());
    for (int32_t k = s.signal_begin[t]; k < s.signal_begin[t + 1]; ++k)
      out.signal_sem.push_back(s.signal_sem[k]);
    out.signal_begin.push_back(out.num_signals());
  }
  return out;
}

// The schedule without wait `k`.
RegionSchedule drop_wait(const RegionSchedule& s, int32_t k) {
  RegionSchedule out = s;
  out.wait_sem.erase(out.wait_sem.begin() + k);
  out.wait_target.erase(out.wait_target.begin() + k);
  for (int32_t& b : out.wait_begin)
    if (b > k) --b;
  return out;
}

int32_t first_task_of(const OpGraph& g, const RegionSchedule& s, const char* name) {
  for (int32_t i = 0; i < s.num_tasks(); ++i)
    if (g.ops[s.task_op[i]].name == name) return i;
  ADD_FAILURE() << name << " not in the region";
  return 0;
}

int seeds_with(const OpGraph& g, const RegionSchedule& s, RegionFaultKind kind, int seeds) {
  const RegionScheduleChecker checker(g, s);
  int n = 0;
  for (int i = 0; i < seeds; ++i) {
    RegionCheckOptions opt;
    opt.seed = 1000 + i;
    n += checker.run(opt).has(kind) ? 1 : 0;
  }
  return n;
}

TEST(RegionSchedule, CheckerCatchesADroppedDependency) {
  const OpGraph g = decode("llama3.2-1b", 1);
  const auto [a, b] = layer_ops(g, 0, 0);
  for (int ctas : {2, 7, 132}) {
    const RegionSchedule s = build_region_schedule(g, a, b, ctas, RESIDENT);
    // The first qkv_proj tile's one wait (for the whole input norm) removed.
    const int32_t t = first_task_of(g, s, "qkv_proj");
    ASSERT_EQ(s.wait_begin[t + 1] - s.wait_begin[t], 1);
    const RegionSchedule bad = drop_wait(s, s.wait_begin[t]);
    EXPECT_FALSE(RegionScheduleChecker(g, bad).run({}).has(RegionFaultKind::OrderViolation));
    const int caught = seeds_with(g, bad, RegionFaultKind::ReadBeforeWritten, 200);
    EXPECT_GT(caught, 0) << ctas << " CTAs";
    EXPECT_EQ(seeds_with(g, s, RegionFaultKind::ReadBeforeWritten, 200), 0);
  }
  // On one CTA the issue order alone serialises the tiles: a dropped wait cannot show.
  const RegionSchedule one = build_region_schedule(g, a, b, 1, RESIDENT);
  const int32_t t = first_task_of(g, one, "qkv_proj");
  EXPECT_EQ(
      seeds_with(g, drop_wait(one, one.wait_begin[t]), RegionFaultKind::ReadBeforeWritten, 50), 0);
}

TEST(RegionSchedule, CheckerCatchesAConsumerIssuedBeforeItsProducer) {
  const OpGraph g = decode("llama3.2-1b", 1);
  const auto [a, b] = layer_ops(g, 0, 0);
  for (int ctas : CTA_COUNTS) {
    const RegionSchedule s = build_region_schedule(g, a, b, ctas, RESIDENT);
    const int32_t consumer = first_task_of(g, s, "qkv_proj");
    const int32_t producer = consumer - 1;  // the last norm tile, issued just before
    ASSERT_EQ(g.ops[s.task_op[producer]].name, "input_layernorm");
    const RegionSchedule bad = swap_tasks(s, producer, consumer);
    EXPECT_NO_THROW(assert_region_waits_precede(s));
    EXPECT_THROW(assert_region_waits_precede(bad), Error);
    const RegionCheckReport r = RegionScheduleChecker(g, bad).run({});
    EXPECT_TRUE(r.has(RegionFaultKind::OrderViolation)) << r.summary();
    // On one CTA the consumer now waits for a tile its own CTA runs later: a deadlock.
    if (ctas == 1) {
      EXPECT_TRUE(r.has(RegionFaultKind::Deadlock)) << r.summary();
    }
  }
}

TEST(RegionSchedule, CheckerCatchesTilesRunTwiceOrNever) {
  const OpGraph g = decode("tiny-llama3", 1);
  const RegionSchedule s = build_region_schedule(g, 0, g.ops.size() - 1, 2, RESIDENT);
  ASSERT_GT(s.cta_begin[1], 0);
  // Task 0 also listed on CTA 1 (at the front: its lists stay increasing).
  RegionSchedule twice = s;
  if (twice.cta_task[twice.cta_begin[1]] != 0) {
    twice.cta_task.insert(twice.cta_task.begin() + twice.cta_begin[1], 0);
    ++twice.cta_begin[2];
    const RegionCheckReport r = RegionScheduleChecker(g, twice).run({});
    EXPECT_TRUE(r.has(RegionFaultKind::RunTwice)) << r.summary();
  } else {
    ADD_FAILURE() << "task 0 expected on CTA 0";
  }
  // The last task of CTA 0 removed from every list.
  RegionSchedule never = s;
  never.cta_task.erase(never.cta_task.begin() + never.cta_begin[1] - 1);
  --never.cta_begin[1];
  --never.cta_begin[2];
  const RegionCheckReport r = RegionScheduleChecker(g, never).run({});
  EXPECT_TRUE(r.has(RegionFaultKind::NeverRun)) << r.summary();
  // A semaphore id outside the table.
  RegionSchedule broken = s;
  ASSERT_GT(broken.num_waits(), 0);
  broken.wait_sem[0] = broken.num_semaphores;
  EXPECT_TRUE(RegionScheduleChecker(g, broken).run({}).has(RegionFaultKind::Malformed));
  EXPECT_TRUE(RegionScheduleChecker(g, s).run({}).ok());
}

// Three elementwise ops over one [1, 256] row in 64-column tiles: `a` writes x, `b` reads it, `c`
// reads it and rewrites it in place. c reads only what a wrote, so nothing in the tiling
// contracts orders c after b: c may rewrite x while b still reads it.
OpGraph rewrite_after_read_graph() {
  OpGraph g;
  g.model = "synthetic";
  g.tensors = {{"x", 1, 256, 4}, {"y", 1, 256, 4}};
  auto op = [&](const char* name, std::vector<OpInput> inputs, OpIo io) {
    Op o;
    o.name = name;
    o.rows = 1;
    o.cols = 256;
    o.tile_rows = 1;
    o.tile_cols = 64;
    o.inputs = std::move(inputs);
    o.io = std::move(io);
    g.ops.push_back(o);
  };
  op("a", {}, {{}, {0}});
  op("b", {{0, ReadPattern::SameColumns}}, {{0}, {1}});
  op("c", {{0, ReadPattern::SameColumns}}, {{0}, {0}});
  return g;
}

TEST(RegionSchedule, CheckerCatchesABufferRewrittenBeforeItsLastRead) {
  // The builder orders what the contracts say a tile reads, so this schedule lets c overtake b.
  const OpGraph g = rewrite_after_read_graph();
  const RegionSchedule s = build_region_schedule(g, 0, 2, 4, RESIDENT);
  EXPECT_FALSE(RegionScheduleChecker(g, s).run({}).has(RegionFaultKind::ReadBeforeWritten));
  EXPECT_GT(seeds_with(g, s, RegionFaultKind::BufferReuse, 200), 0);
  // With c reading all of b's row (as a norm or a matmul reads its producer) the contracts order
  // the rewrite after every read, and the same check passes.
  OpGraph ordered = g;
  ordered.ops[2].inputs.push_back({1, ReadPattern::AllRow});
  for (int ctas : {1, 4}) {
    const RegionSchedule fixed = build_region_schedule(ordered, 0, 2, ctas, RESIDENT);
    EXPECT_EQ(seeds_with(ordered, fixed, RegionFaultKind::BufferReuse, 200), 0) << ctas;
  }
}

// ---- the packed form ----

TEST(RegionSchedule, PackedFormRoundTrips) {
  const OpGraph g = prefill("tiny-qwen3", 8, 8, 2);
  const RegionSchedule s = build_region_schedule(g, 0, g.ops.size() - 1, 7, RESIDENT);
  const std::vector<int32_t> words = pack_region_schedule(s);
  EXPECT_EQ(words[RP_MAGIC], REGION_PACK_MAGIC);
  EXPECT_EQ(words[RP_NUM_TASKS], s.num_tasks());
  EXPECT_EQ(words[RP_TOTAL_WORDS], static_cast<int32_t>(words.size()));
  // The arrays are where the header says.
  EXPECT_EQ(words[words[RP_TASK_OP] + 5], s.task_op[5]);
  EXPECT_EQ(words[words[RP_WAIT_TARGET] + s.num_waits() - 1], s.wait_target.back());
  EXPECT_EQ(words[words[RP_CTA_BEGIN] + 7], s.num_tasks());
  const RegionSchedule back = unpack_region_schedule(words);
  EXPECT_EQ(back.task_op, s.task_op);
  EXPECT_EQ(back.task_tile, s.task_tile);
  EXPECT_EQ(back.wait_begin, s.wait_begin);
  EXPECT_EQ(back.wait_sem, s.wait_sem);
  EXPECT_EQ(back.wait_target, s.wait_target);
  EXPECT_EQ(back.signal_begin, s.signal_begin);
  EXPECT_EQ(back.signal_sem, s.signal_sem);
  EXPECT_EQ(back.cta_begin, s.cta_begin);
  EXPECT_EQ(back.cta_task, s.cta_task);
  EXPECT_EQ(back.sem_op, s.sem_op);
  EXPECT_EQ(back.sem_row_block, s.sem_row_block);
  EXPECT_EQ(back.sem_tile, s.sem_tile);
  EXPECT_EQ(back.num_semaphores, s.num_semaphores);
  EXPECT_EQ(back.num_ctas, 7);
  expect_runs_clean(g, back, 50);

  std::vector<int32_t> bad = words;
  bad[RP_MAGIC] = 0;
  EXPECT_THROW(unpack_region_schedule(bad), InputError);
  bad = words;
  bad.pop_back();
  EXPECT_THROW(unpack_region_schedule(bad), InputError);
  bad = words;
  bad[RP_WAIT_SEM] = static_cast<int32_t>(words.size());
  EXPECT_THROW(unpack_region_schedule(bad), InputError);
}

// ---- refusals ----

void expect_refused(const std::function<void()>& f, const std::string& field) {
  try {
    f();
    ADD_FAILURE() << "expected an InputError naming " << field;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(RegionSchedule, RefusesBadRequests) {
  const OpGraph g = decode("llama3.2-1b", 1);
  const int n = static_cast<int>(g.ops.size());
  expect_refused([&] { build_region_schedule(g, -1, 3, 2, RESIDENT); }, "first_op");
  expect_refused([&] { build_region_schedule(g, n, n, 2, RESIDENT); }, "first_op");
  expect_refused([&] { build_region_schedule(g, 5, 4, 2, RESIDENT); }, "last_op");
  expect_refused([&] { build_region_schedule(g, 5, n, 2, RESIDENT); }, "last_op");
  expect_refused([&] { build_region_schedule(g, 1, 9, 0, RESIDENT); }, "num_ctas");
  expect_refused([&] { build_region_schedule(g, 1, 9, 133, RESIDENT); }, "co-resident");
  expect_refused([&] { build_region_schedule(g, 1, 9, 1, 0); }, "max_resident_ctas");
  expect_refused([&] { build_region_schedule(OpGraph{}, 0, 0, 1, 1); }, "graph");
  // A vendor GEMM in the range: refused naming the op.
  const OpGraph p = prefill("llama3.2-1b", 256, 0);
  const int qkv = find_op(p, "qkv_proj", 0);
  expect_refused([&] { build_region_schedule(p, 0, qkv + 2, 7, RESIDENT); },
                 "ops[" + std::to_string(qkv) + "] (qkv_proj, layer 0)");
  // The predicate is the caller's to choose.
  RegionScheduleOptions opt;
  opt.is_vendor_gemm = [](const Op& op) { return op.name == "qkv_rope"; };
  const int rope = find_op(g, "qkv_rope", 0);
  expect_refused([&] { build_region_schedule(g, 1, 9, 7, RESIDENT, opt); },
                 "ops[" + std::to_string(rope) + "] (qkv_rope, layer 0)");
  EXPECT_NO_THROW(build_region_schedule(g, 1, 2, 7, RESIDENT, opt));
  // An input whose producer does not come before its consumer.
  OpGraph cyc = decode("tiny-llama3", 1);
  cyc.ops[3].inputs[0].producer = 5;
  expect_refused([&] { build_region_schedule(cyc, 0, 8, 2, RESIDENT); }, "ops[3]");
}

}  // namespace
}  // namespace megaops
