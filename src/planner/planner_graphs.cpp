// The planner's graphs (see planner.h): the default region graph (groups of one layer's ops) and
// the tile graph a cover of regions runs as under a policy, which tile_sim.cpp simulates.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/matmul_dispatch.h"
#include "planner/planner.h"

namespace megaops {

RegionGraph default_region_graph(const OpGraph& g) {
  const int n = static_cast<int>(g.ops.size());
  int layers = 0;
  for (const Op& o : g.ops) layers = std::max(layers, o.layer + 1);
  const int per = 9;
  if (n < 1 + per * layers + 1 || g.ops[0].name != "embedding" || g.ops[1].layer != 0)
    throw_input_error(
        "region graph", "ops",
        "expected embedding, 9 ops per layer and a head, found " + std::to_string(n) + " ops");
  RegionGraph rg;
  rg.groups.push_back({0, 0});
  rg.prefix = 1;
  rg.period = 3;
  rg.repeats = layers;
  for (int l = 0; l < layers; ++l) {
    const int b = 1 + l * per;
    if (g.ops[b].name != "input_layernorm" || g.ops[b + 8].name != "down_proj")
      throw_input_error("region graph", "layer " + std::to_string(l),
                        "expected input_layernorm .. down_proj");
    rg.groups.push_back({b, b + 1});
    rg.groups.push_back({b + 2, b + 4});
    rg.groups.push_back({b + 5, b + 8});
  }
  rg.groups.push_back({1 + layers * per, n - 1});
  return rg;
}

RegionGraph single_op_groups(const OpGraph& g) {
  RegionGraph rg;
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) rg.groups.push_back({i, i});
  rg.prefix = static_cast<int>(rg.groups.size());
  return rg;
}

namespace {

// Whether op i is a matmul on the streaming kernel under PDL (the only kernel the chain folds
// norms and SiLU·mul into).
bool streams(const OpGraph& g, int i) {
  if (i < 0 || i >= static_cast<int>(g.ops.size())) return false;
  const Op& op = g.ops[i];
  return op.kind == OpKind::Matmul &&
         matmul_dispatch_path(op.m, op.n, op.k, /*pdl=*/true) == MatmulPath::Stream;
}

// Rows the decode attention folds RoPE for (kernels/rope_fold.cuh, ROPE_FOLD_MAX_ROWS: the
// per-query-head kernel runs batches 1-2).
constexpr int CHAIN_ROPE_FOLD_MAX_ROWS = 2;

}  // namespace

std::vector<char> chain_folded_ops(const OpGraph& g, uint32_t folds, const CostModel& cost) {
  const int n = static_cast<int>(g.ops.size());
  std::vector<char> out(n, 0);
  if (g.step != StepKind::Decode) return out;  // the chain runs decode steps only
  for (int i = 0; i < n; ++i) {
    const Op& op = g.ops[i];
    const bool prologue = (op.folds & FOLD_INTO_CONSUMER_PROLOGUE) != 0;
    const bool epilogue = (op.folds & FOLD_INTO_PRODUCER_EPILOGUE) != 0;
    switch (op.code) {
      case OpCode::InputNorm:
      case OpCode::PostNorm:
      case OpCode::FinalNorm:
        if (prologue && (folds & CHAIN_FOLD_NORMS) && streams(g, i + 1))
          out[i] = FOLD_INTO_CONSUMER_PROLOGUE;
        break;
      case OpCode::SiluMul:
        if (epilogue && cost.silu_epilogue_min_inter >= 0 &&
            op.cols >= cost.silu_epilogue_min_inter && op.cols % 4 == 0 && streams(g, i - 1))
          out[i] = FOLD_INTO_PRODUCER_EPILOGUE;
        else if (prologue && (folds & CHAIN_FOLD_SILU) && streams(g, i + 1))
          out[i] = FOLD_INTO_CONSUMER_PROLOGUE;
        break;
      case OpCode::QkvRope:
        if (prologue && (folds & CHAIN_FOLD_ROPE) && i + 1 < n &&
            g.ops[i + 1].code == OpCode::DecodeAttention && g.batch <= CHAIN_ROPE_FOLD_MAX_ROWS)
          out[i] = FOLD_INTO_CONSUMER_PROLOGUE;
        break;
      default:
        break;
    }
  }
  return out;
}

namespace {

// What a fold adds to each tile of the kernel that computes the folded op: a prologue fold of a
// norm or SiLU·mul reads (and computes) the whole row in every tile, RoPE only the tile's own
// head; a SiLU·mul in the epilogue writes the activation instead of gate|up.
struct FoldLoad {
  double bytes = 0, flops = 0, out_bytes = 0;
};
FoldLoad fold_load(const OpGraph& g, const Region& r, const std::vector<char>& folded, int oi,
                   double frac) {
  FoldLoad f;
  f.out_bytes = static_cast<double>(g.ops[oi].act_out_bytes);
  if (oi > r.first_op && folded[oi - 1] == FOLD_INTO_CONSUMER_PROLOGUE) {
    const Op& p = g.ops[oi - 1];
    const double share = p.code == OpCode::QkvRope ? frac : 1.0;
    f.bytes = static_cast<double>(p.act_in_bytes + p.weight_bytes) * share;
    f.flops = p.flops * share;
  }
  if (oi < r.last_op && folded[oi + 1] == FOLD_INTO_PRODUCER_EPILOGUE)
    f.out_bytes = static_cast<double>(g.ops[oi + 1].act_out_bytes);
  return f;
}

// Tile k of op oi waits for the producer tiles it reads (a whole row block through its row join,
// the whole output, or the tiles input_tiles names), or, under per-tensor waits, for each
// in-region producer's `tensor_ready` join.
void add_data_deps(const OpGraph& g, const TileGraph& t,
                   const std::vector<std::vector<int>>& row_join,
                   const std::map<int, int>* tensor_ready, int region_first, int oi, int64_t k,
                   TileTask& task) {
  const Op& op = g.ops[oi];
  const int64_t rb = k / op.col_tiles();
  for (int ii = 0; ii < static_cast<int>(op.inputs.size()); ++ii) {
    const OpInput& in = op.inputs[ii];
    if (t.op_first_tile[in.producer] < 0) continue;  // produced before this graph
    if (tensor_ready && in.producer >= region_first) {
      task.data_deps.push_back(tensor_ready->at(in.producer));
      continue;
    }
    switch (in.pattern) {
      case ReadPattern::AllFoldable:
      case ReadPattern::AllRow:
        task.data_deps.push_back(row_join[in.producer][producer_row_block(g, oi, ii, rb)]);
        break;
      case ReadPattern::Whole:
        task.data_deps.push_back(t.op_done[in.producer]);
        break;
      default:
        for (int64_t pt : input_tiles(g, oi, ii, k))
          task.data_deps.push_back(t.op_first_tile[in.producer] + static_cast<int>(pt));
    }
  }
}

}  // namespace

TileGraph build_tile_graph(const OpGraph& g, const std::vector<Region>& regions, Policy policy,
                           int split, const CostModel& cost, const std::vector<double>& extra,
                           bool keep_barriers) {
  const int workers = cost.machine.workers;
  TileGraph t;
  t.pool_workers = policy == Policy::FixedSplit ? std::vector<int>{split, workers - split}
                                                : std::vector<int>{workers};
  const int nops = static_cast<int>(g.ops.size());
  size_t expect = 2 * regions.size() + 1;  // tiles, row joins, op joins, launch joins, region joins
  for (const Region& r : regions)
    for (int oi = r.first_op; oi <= r.last_op; ++oi)
      expect += static_cast<size_t>(g.ops[oi].num_tiles() + g.ops[oi].row_blocks() + 4);
  t.tasks.reserve(expect);
  t.op_first_tile.assign(nops, -1);
  t.op_done.assign(nops, -1);
  std::vector<std::vector<int>> row_join(nops);
  auto join = [&](std::vector<int> deps, double delay) {
    TileTask j;
    j.join = true;
    j.delay_us = delay;
    j.launch_deps = std::move(deps);
    t.tasks.push_back(std::move(j));
    return static_cast<int>(t.tasks.size()) - 1;
  };
  int prev_start = -1, prev_end = -1;
  for (size_t ri = 0; ri < regions.size(); ++ri) {
    const Region& r = regions[ri];
    const Backend b = r.backend;
    const double start_cost = b == Backend::Overlap      ? cost.overlap_region_us
                              : b == Backend::Persistent ? cost.persistent_region_us
                                                         : 0.0;
    std::vector<int> start_deps;
    if (policy == Policy::Serial && prev_end >= 0) start_deps.push_back(prev_end);
    if (policy != Policy::Serial && prev_start >= 0) start_deps.push_back(prev_start);
    const int start = join(start_deps, start_cost);
    const int pool = policy == Policy::FixedSplit ? static_cast<int>(ri % 2) : 0;
    double tile_extra = b == Backend::Overlap      ? cost.overlap_tile_us
                        : b == Backend::Persistent ? cost.persistent_tile_us
                                                   : 0.0;
    if (policy == Policy::Dynamic) tile_extra += cost.dynamic_tile_us;
    // PDL backends: every op behind the kernel before it (PDL boundaries between own kernels,
    // plain ones around vendor GEMMs); the chain launches nothing for its folded ops.
    const bool pdl = b == Backend::ConventionalPdl || b == Backend::PdlChain;
    // The chain's folds (and a persistent region's inside a chain step: its tasks run the same
    // folds).
    const std::vector<char> folded = b == Backend::PdlChain || (b == Backend::Persistent && r.folds)
                                         ? chain_folded_ops(g, r.folds, cost)
                                         : std::vector<char>(g.ops.size(), 0);
    int prev_wait = start;  // PDL: the join that released the previous kernel's tiles
    bool prev_own = false;  // PDL: the previous kernel is an own kernel (it triggers early)
    const bool barriers = b == Backend::Conventional || pdl || keep_barriers;
    // Per-tensor waits (CostModel::overlap_tensor_waits) in an overlap region: a consumer tile
    // waits for its producers' whole outputs plus the handoff latency; its weights still stream
    // into staging while it waits.
    const bool tensor_waits = b == Backend::Overlap && !barriers && cost.overlap_tensor_waits;
    std::map<int, int> tensor_ready;  // producer op -> join "whole output ready + handoff"
    int prev_done = -1;
    bool prev_vendor = false;
    std::vector<int> dones;
    for (int oi = r.first_op; oi <= r.last_op; ++oi) {
      const Op& op = g.ops[oi];
      if (folded[oi]) {  // computed by its neighbour: no tiles, done when the one before is
        t.op_done[oi] = prev_done >= 0 ? prev_done : start;
        row_join[oi].assign(op.row_blocks(), t.op_done[oi]);
        continue;
      }
      const bool vendor = tensor_waits && cost.overlap_vendor_gemms && is_vendor_op(op);
      int launch = start;
      int wait = -1;  // PDL: the join every tile of this kernel waits on
      if (pdl) {
        const bool own = !is_vendor_op(op, /*pdl=*/true);
        const int before = prev_done >= 0 ? prev_done : start;
        if (own && prev_own && prev_done >= 0) {
          // Without overlap (keep_barriers) the boundary stays a PDL one, with no early start.
          wait = join({before}, cost.pdl_wait_us);
          launch = keep_barriers ? wait : join({prev_wait}, cost.pdl_launch_us);
        } else {
          // The region's first kernel, or one next to a vendor GEMM (which neither triggers
          // early nor waits on a grid): a plain boundary.
          wait = join({before}, cost.launch_us);
          launch = wait;
        }
        prev_wait = wait;
        prev_own = own;
      } else if (barriers) {
        launch = join({prev_done >= 0 ? prev_done : start},
                      b == Backend::Conventional ? cost.launch_us : 0.0);
      } else if (prev_vendor) {  // the barrier after a vendor GEMM: its output is ready then
        launch = join({prev_done}, cost.launch_us);
        tensor_ready.emplace(oi - 1, launch);
      }
      const int64_t tiles = op.num_tiles();
      const double frac = 1.0 / static_cast<double>(tiles);
      // The handoff joins go before the op's tiles: tile k of op oi is task op_first_tile + k.
      if (tensor_waits)
        for (const OpInput& in : op.inputs)
          if (in.producer >= r.first_op && t.op_first_tile[in.producer] >= 0 &&
              !tensor_ready.count(in.producer))
            tensor_ready.emplace(in.producer,
                                 join({t.op_done[in.producer]}, cost.overlap_handoff_us));
      if (vendor) {
        // Stream order: no tile of a vendor GEMM takes a worker (or streams a byte) before its
        // producers completed, plus one kernel boundary.
        std::vector<int> after = {launch};
        for (const OpInput& in : op.inputs)
          if (in.producer >= r.first_op && t.op_first_tile[in.producer] >= 0)
            after.push_back(t.op_done[in.producer]);
        launch = join(std::move(after), cost.launch_us);
      }
      const FoldLoad fold = fold_load(g, r, folded, oi, frac);
      t.op_first_tile[oi] = static_cast<int>(t.tasks.size());
      for (int64_t k = 0; k < tiles; ++k) {
        TileTask task;
        task.op = oi;
        task.pool = pool;
        // Partial last tiles are charged like full ones: the tile count is what matters here.
        task.compute_us = (op.flops * frac + fold.flops) / cost.machine.worker_flops_per_us +
                          extra[oi] + (vendor ? 0.0 : tile_extra);
        task.weight_bytes = static_cast<double>(op.weight_bytes + op.kv_bytes) * frac;
        task.input_bytes = static_cast<double>(op.act_in_bytes) * frac + fold.bytes;
        task.output_bytes = fold.out_bytes * frac;
        // A persistent region's CTA streams at most persistent_worker_bytes_per_us.
        if (b == Backend::Persistent && cost.persistent_worker_bytes_per_us > 0)
          task.compute_us = std::max(task.compute_us, (task.weight_bytes + task.input_bytes) /
                                                          cost.persistent_worker_bytes_per_us);
        task.launch_deps = {launch};
        if (wait >= 0)  // PDL: griddepcontrol.wait covers every input (the chain of grids)
          task.data_deps = {wait};
        else
          add_data_deps(g, t, row_join, tensor_waits ? &tensor_ready : nullptr, r.first_op, oi, k,
                        task);
        t.tasks.push_back(std::move(task));
      }
      const int first = t.op_first_tile[oi];
      for (int64_t rbi = 0; rbi < op.row_blocks(); ++rbi) {
        std::vector<int> deps;
        for (int64_t c = 0; c < op.col_tiles(); ++c)
          deps.push_back(first + static_cast<int>(rbi * op.col_tiles() + c));
        row_join[oi].push_back(join(std::move(deps), 0));
      }
      t.op_done[oi] = op.row_blocks() == 1 ? row_join[oi][0] : join(row_join[oi], 0);
      prev_done = t.op_done[oi];
      prev_vendor = vendor;
      dones.push_back(prev_done);
    }
    prev_end = join(dones, 0);
    prev_start = start;
  }
  return t;
}

}  // namespace megaops
