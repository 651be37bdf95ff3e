// See persistent.h: the region ops of the overlap step's launches, and the set-up and launch of
// its persistent regions.
#include <algorithm>

#include "graph/region_schedule.h"
#include "runtime/executor_core.h"
#include "runtime/overlap.h"
#include "runtime/persistent.h"

namespace megaops {

namespace {

RegionOp region_op(RegionTaskKind kind) {
  RegionOp r;
  r.kind = kind;
  return r;
}

RegionOp refused(std::string* refusal, const std::string& why) {
  *refusal = why;
  return region_op(RegionTaskKind::None);
}

}  // namespace

RegionOp region_op_of(const EmbeddingParams& p, std::string* refusal) {
  refusal->clear();
  RegionOp r = region_op(RegionTaskKind::Embedding);
  r.emb = p;
  return r;
}

RegionOp region_op_of(const AddRmsNormParams& p, std::string* refusal) {
  // The region's norm task runs add_rmsnorm's fp32-delta row (the step's deltas are fp32).
  if (p.delta != nullptr) return refused(refusal, "a norm of a bf16 delta");
  refusal->clear();
  RegionOp r = region_op(RegionTaskKind::Norm);
  r.norm = p;
  return r;
}

RegionOp region_op_of(const QkvRopeParams& p, std::string* refusal) {
  if (p.qkv_f32 == nullptr) return refused(refusal, "qkv_rope over bf16 qkv rows");
  refusal->clear();
  RegionOp r = region_op(RegionTaskKind::QkvRope);
  r.rope = p;
  return r;
}

RegionOp region_op_of(const DecodeAttentionParams& p, std::string* refusal) {
  RegionOp r = region_op(RegionTaskKind::Attention);
  r.attn = p;
  const cudaError_t err = decode_attention_region_variant(p, &r.attn_variant, &r.attn_splits);
  if (err == cudaErrorNotSupported)
    return refused(refusal,
                   "decode attention with a CTA per kv head group (this batch's query heads "
                   "outnumber the SMs); a region runs the per-query-head kernel only");
  if (err != cudaSuccess)
    return refused(refusal, std::string("decode attention: ") + cudaGetErrorString(err));
  refusal->clear();
  return r;
}

RegionOp region_op_of(const SiluMulParams& p, std::string* refusal) {
  if (p.gate_up_f32 == nullptr) return refused(refusal, "silu_mul over bf16 gate|up rows");
  refusal->clear();
  RegionOp r = region_op(RegionTaskKind::SiluMul);
  r.silu = p;
  return r;
}

RegionOp region_op_of(const SampleParams& p, std::string* refusal) {
  if (p.argmax == nullptr)
    return refused(refusal,
                   "the sampler over the logits (a region samples only from the LM head's greedy "
                   "argmax epilogue)");
  refusal->clear();
  RegionOp r = region_op(RegionTaskKind::SampleArgmax);
  r.sample = p;
  return r;
}

RegionOp region_op_of(const StepAdvanceParams&, std::string* refusal) {
  return refused(refusal, "step_advance (it advances the step the region's CTAs read)");
}

RegionOp region_op_of(const MatmulParams&, std::string* refusal) {
  return refused(refusal,
                 "a matmul on the small-m kernel (a region runs the streaming kernel's matmuls, "
                 "batch 1-2)");
}

namespace {

// The region's graph as its schedule sees it: the ops before the region as they are (their
// outputs are ready when it starts), then the region's ops but those folded into a neighbour
// (kind None: they compute nothing, so a task of theirs would only add a hop between producer
// and consumer); a consumer of a folded op reads the folded op's producer instead, every column
// of its row block unless both read columns (same columns, or attention's head through
// same-columns qkv_rope). Tiles for `ctas` CTAs: a matmul's or silu_mul's columns in at most
// `ctas` tiles of whole 8-column blocks (the streaming kernel's row blocks), so every CTA has a
// share of each; attention and qkv_rope by head, as the graph has them; an op whose task covers
// every column (the norms, which update the residual in place; the embedding and the sampler)
// one tile per row block.
struct RegionGraph {
  OpGraph g;
  int first = 0, last = 0;     // the region's range in g
  std::vector<int32_t> op_of;  // per op of g: its index in the step graph
};

ReadPattern composed(ReadPattern consumer, ReadPattern producer) {
  const bool columns = producer == ReadPattern::SameColumns;
  if (columns && (consumer == ReadPattern::SameColumns || consumer == ReadPattern::AttentionHead))
    return consumer;
  return ReadPattern::AllFoldable;
}

RegionGraph region_graph(const OpGraph& step, int first, int last, int ctas,
                         std::vector<OverlapOp>& ops) {
  RegionGraph r;
  r.g = step;
  r.g.ops.assign(step.ops.begin(), step.ops.begin() + first);
  for (int k = 0; k < first; ++k) r.op_of.push_back(k);
  std::vector<int> index_of(step.ops.size(), -1);
  for (int k = 0; k < first; ++k) index_of[static_cast<size_t>(k)] = k;
  // What a consumer reads through op k: k itself, or for a folded op its producer.
  std::vector<OpInput> through(step.ops.size());
  for (int k = first; k <= last; ++k) {
    const Op& src = step.ops[static_cast<size_t>(k)];
    RegionOp& op = ops[static_cast<size_t>(k)].region;
    std::vector<OpInput> inputs;
    for (const OpInput& in : src.inputs) {
      if (in.producer >= first &&
          ops[static_cast<size_t>(in.producer)].region.kind == RegionTaskKind::None) {
        const OpInput& via = through[static_cast<size_t>(in.producer)];
        if (via.producer >= 0) inputs.push_back({via.producer, composed(in.pattern, via.pattern)});
        continue;
      }
      inputs.push_back({index_of[static_cast<size_t>(in.producer)], in.pattern});
    }
    if (op.kind == RegionTaskKind::None) {
      // A folded op has one input (its producer); its consumers read that instead.
      if (inputs.size() == 1) through[static_cast<size_t>(k)] = inputs[0];
      continue;
    }
    Op o = src;
    o.inputs = std::move(inputs);
    switch (op.kind) {
      case RegionTaskKind::Matmul:
      case RegionTaskKind::SiluMul: {
        const int64_t blocks = (o.cols + 7) / 8;
        o.tile_cols = 8 * ((blocks + ctas - 1) / ctas);
        break;
      }
      case RegionTaskKind::QkvRope:
      case RegionTaskKind::Attention:
        break;
      default:
        o.tile_cols = o.cols;
    }
    op.tile_cols = static_cast<int32_t>(o.tile_cols);
    index_of[static_cast<size_t>(k)] = static_cast<int>(r.g.ops.size());
    r.g.ops.push_back(std::move(o));
    r.op_of.push_back(k);
  }
  r.first = first;
  r.last = static_cast<int>(r.g.ops.size()) - 1;
  return r;
}

}  // namespace

// Sets up every persistent region of the plan for batch b over its op list (after budgets):
// checks each op can run in a region (InputError naming the region and the op otherwise), builds
// the schedule for the CTAs that fit, uploads schedule and op table, and marks the ops. Not
// inside a stream capture (it allocates and copies).
void ExecutorCore::build_persistent_regions(std::vector<OverlapOp>& ops) {
  OverlapState& st = *ovl;
  const int n = static_cast<int>(ops.size());
  for (int region = 0; region < static_cast<int>(st.region_persistent.size()); ++region) {
    if (!st.region_persistent[static_cast<size_t>(region)]) continue;
    int first = 0;
    while (first < n && st.region_of[static_cast<size_t>(first)] != region) ++first;
    int last = first;
    while (last + 1 < n - 1 && st.region_of[static_cast<size_t>(last + 1)] == region) ++last;
    const std::string field = "overlap_regions[" + std::to_string(region) + "]";
    const std::string where = field + " (persistent, from '" + ops[first].name + "')";
    if (!opt.overlap_conventional_arithmetic)
      throw_input_error("executor", where,
                        "a persistent region runs the conventional step's arithmetic; the v0 "
                        "overlap arithmetic (conventional_arithmetic false) has none");
    for (int k = first; k <= last; ++k)
      if (!ops[k].region_refusal.empty())
        throw_input_error(
            "executor", where,
            "op '" + ops[k].name + "' cannot run in a persistent region: " + ops[k].region_refusal);
    auto run = std::make_shared<PersistentRegionRun>();
    run->region = region;
    run->first_op = first;
    run->last_op = last;
    PersistentRegionParams& p = run->params;
    std::vector<RegionOp> kinds;
    for (int k = first; k <= last; ++k) kinds.push_back(ops[k].region);
    const int per_sm =
        opt.persistent_ctas_per_sm > 0 ? opt.persistent_ctas_per_sm : REGION_DEFAULT_CTAS_PER_SM;
    MEGAOPS_CUDA_CHECK(region_smem_layout(kinds.data(), static_cast<int>(kinds.size()),
                                          opt.persistent_stages, per_sm, &p.smem));
    MEGAOPS_CUDA_CHECK(persistent_region_max_resident_ctas(p.smem, &run->resident));
    const int budget = opt.overlap_regions[static_cast<size_t>(region)].cta_budget;
    if (budget > run->resident)
      throw_input_error("executor", field + ".cta_budget",
                        "expected at most " + std::to_string(run->resident) +
                            " (the region kernel's CTAs that fit on this GPU at once), found " +
                            std::to_string(budget));
    p.num_ctas = budget > 0 ? budget : run->resident;
    const RegionGraph rg = region_graph(decode_graph, first, last, p.num_ctas, ops);
    if (rg.last < rg.first) continue;  // only folded ops: nothing to launch
    std::vector<RegionOp> table;
    for (int i = rg.first; i <= rg.last; ++i) table.push_back(ops[rg.op_of[i]].region);
    RegionScheduleOptions so;
    so.is_vendor_gemm = [](const Op&) { return false; };  // refused above, by the launch's path
    so.assign = opt.persistent_round_robin ? RegionAssign::RoundRobin : RegionAssign::EarliestFree;
    const RegionSchedule sched =
        build_region_schedule(rg.g, rg.first, rg.last, p.num_ctas, run->resident, so);
    run->tasks = sched.num_tasks();
    const std::vector<int32_t> words = pack_region_schedule(sched);
    const std::string name = "persistent region " + std::to_string(region) + " ";
    int32_t* dev_words = mem.alloc_array<int32_t>(name + "schedule", words.size());
    int32_t* dev_op_of = mem.alloc_array<int32_t>(name + "op ids", rg.op_of.size());
    RegionOp* dev_ops = mem.alloc_array<RegionOp>(name + "op table", table.size());
    uint32_t* sems = mem.alloc_array<uint32_t>(name + "semaphores",
                                               static_cast<size_t>(sched.num_semaphores) + 2);
    MEGAOPS_CUDA_CHECK(cudaMemcpy(dev_words, words.data(), words.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(cudaMemcpy(dev_op_of, rg.op_of.data(), rg.op_of.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(
        cudaMemcpy(dev_ops, table.data(), table.size() * sizeof(RegionOp), cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(
        cudaMemset(sems, 0, (static_cast<size_t>(sched.num_semaphores) + 2) * sizeof(uint32_t)));
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
    p.sync.step_op = dev_op_of;
    p.first_op = rg.first;
    p.sync.schedule = dev_words;
    p.sync.semaphores = sems + 2;
    p.launches = sems;
    p.ops = dev_ops;
    for (int k = first; k <= last; ++k) {
      ops[k].in_persistent = true;
      // The region orders its ops itself; the op after it starts once it completed (stream order
      // or the barrier after the region), so nothing waits on or signals a counter across it.
      ops[k].waits = false;
      ops[k].signals = false;
    }
    if (last + 1 < n) ops[last + 1].waits = false;
    ops[first].persistent = std::move(run);
  }
}

// Launches the persistent region whose first op is `op` on stream s, with the executor's current
// watchdog, injected delays and dropped signal (an op id, -1: none).
cudaError_t ExecutorCore::launch_persistent(const OverlapOp& op, cudaStream_t s,
                                            int drop_signal_op) const {
  PersistentRegionParams p = op.persistent->params;
  p.sync.drop_signal_op = drop_signal_op;
  p.sync.trace = TraceParams{ovl->trace_records, ovl->trace_cursor, opt.overlap_trace_capacity};
  p.sync.watchdog = ovl->watchdog->params();
  p.sync.delay = DelayParams{opt.overlap_delay_max_ns, opt.overlap_delay_seed};
  return launch_persistent_region(p, LaunchOptions{s, false});
}

}  // namespace megaops
