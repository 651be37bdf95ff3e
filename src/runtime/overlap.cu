// The multi-stream tile-overlap backend (ExecutorOptions::backend Overlap, docs/overlap-design.md):
// a kernel per op on W streams, each consumer waiting on its producer's tile counter instead of a
// barrier; set-up (streams, counters, watchdog, buffers, preloaded kernels), regions, CTA budgets
// and the recording of one step. The op list is built in overlap_ops.cu; the PDL chain's rules
// (the same step on one stream with PDL) are in pdl_chain.cu.
#include <algorithm>

#include "graph/overlap_budget.h"
#include "kernels/silu_mul.cuh"
#include "kernels/tile_gate.cuh"
#include "runtime/executor_core.h"
#include "runtime/overlap.h"

namespace megaops {

void ExecutorCore::setup_overlap() {
  if (ovl) return;
  auto st = std::make_unique<OverlapState>();
  // DESIGN rule 1: load every kernel's module now. With lazy loading a producer's first launch
  // could need a module load while a consumer already spins on the GPU, which deadlocked on the
  // H200 here. Prefill kernels are included: they are loaded anyway and cost nothing more.
  for (cudaError_t err :
       {MatmulContext::preload_kernels(), preload_rmsnorm_kernels(), preload_qkv_rope_kernels(),
        preload_attention_kernels(), preload_silu_mul_kernels(), preload_embedding_kernels(),
        preload_sampling_kernels(), preload_step_state_kernels(), preload_tile_gate_kernels(),
        preload_persistent_region_kernels()})
    MEGAOPS_CUDA_CHECK(err);
  int device = 0;
  MEGAOPS_CUDA_CHECK(cudaGetDevice(&device));
  MEGAOPS_CUDA_CHECK(cudaDeviceGetAttribute(&st->sms, cudaDevAttrMultiProcessorCount, device));
  st->streams.resize(opt.overlap_streams);
  for (cudaStream_t& x : st->streams)
    MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  MEGAOPS_CUDA_CHECK(cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming));
  st->joins.resize(opt.overlap_streams);
  for (cudaEvent_t& e : st->joins)
    MEGAOPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  // Op names, indexed by op id = counter index: the decode graph's ops ("layer L NAME" inside the
  // layers; the attention op is "attention", followed by "attention_combine" where the v0
  // arithmetic merges the splits in a separate kernel). The same list for every batch size (the
  // combine kernel is launched even when it has nothing to merge), so a counter always belongs to
  // the same op instance and holds k * TILE_SYNC_STEP_SUM after k overlap steps.
  for (const Op& op : decode_graph.ops) {
    const bool attention = op.code == OpCode::DecodeAttention;
    const std::string name = attention ? "attention" : op.name;
    st->op_names.push_back(op.layer >= 0 ? "layer " + std::to_string(op.layer) + " " + name : name);
    if (attention && !opt.overlap_conventional_arithmetic)
      st->op_names.push_back("layer " + std::to_string(op.layer) + " attention_combine");
  }

  apply_overlap_regions(*st);

  const size_t n_ops = st->op_names.size();
  st->counters = mem.alloc_array<uint32_t>("overlap tile counters", n_ops);
  st->step = mem.alloc_array<uint32_t>("overlap step counter", 1);
  const uint32_t one = 1;
  // Synchronous: kernels on the non-blocking streams never see the counters before they are zero.
  MEGAOPS_CUDA_CHECK(cudaMemset(st->counters, 0, n_ops * sizeof(uint32_t)));
  MEGAOPS_CUDA_CHECK(cudaMemcpy(st->step, &one, sizeof(one), cudaMemcpyHostToDevice));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  st->watchdog = std::make_unique<WatchdogRecord>(
      opt.overlap_watchdog_ms < 0 ? DEFAULT_WATCHDOG_MS
                                  : static_cast<uint64_t>(opt.overlap_watchdog_ms),
      opt.wait_sleep_max_ns);

  const size_t B = static_cast<size_t>(opt.max_batch);
  const size_t h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
               inter = cfg.intermediate_size;
  const size_t ws = decode_attention_workspace_floats(opt.max_batch, cfg.num_heads, cfg.head_dim,
                                                      opt.max_seq, opt.decode_attention_splits);
  st->resid = mem.alloc_array<float>("overlap residual", B * h);
  if (opt.overlap_pdl_chain && opt.overlap_fold_norms)
    st->resid_alt = mem.alloc_array<float>("overlap residual (second buffer)", B * h);
  st->layers.resize(cfg.num_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    OverlapLayer& L = st->layers[l];
    const std::string p = "overlap layer " + std::to_string(l) + " ";
    L.n1 = mem.alloc_array<bf16>(p + "input_layernorm", B * h);
    L.qkv = mem.alloc_array<float>(p + "qkv", B * (qd + 2 * kvd));
    L.q = mem.alloc_array<bf16>(p + "q", B * qd);
    L.ws = ws ? mem.alloc_array<float>(p + "attention workspace", ws) : nullptr;
    L.attn = mem.alloc_array<bf16>(p + "attention", B * qd);
    L.o = mem.alloc_array<float>(p + "o_proj", B * h);
    L.n2 = mem.alloc_array<bf16>(p + "post_attention_layernorm", B * h);
    L.gu = mem.alloc_array<float>(p + "gate_up", B * 2 * inter);
    L.act = mem.alloc_array<bf16>(p + "silu_mul", B * inter);
    L.down = mem.alloc_array<float>(p + "down_proj", B * h);
  }
  st->final_normed = mem.alloc_array<bf16>("overlap final norm", B * h);
  if (opt.overlap_trace_capacity > 0) {
    st->trace_records =
        mem.alloc_array<TileTraceRecord>("overlap trace records", opt.overlap_trace_capacity);
    st->trace_cursor = mem.alloc_array<uint32_t>("overlap trace cursor", 1);
    MEGAOPS_CUDA_CHECK(cudaMemset(st->trace_cursor, 0, sizeof(uint32_t)));
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ovl = std::move(st);
}

// ExecutorOptions::overlap_regions onto the op names: region_of and region_serial, validated
// against the names (one error line naming the field) before anything changes.
void ExecutorCore::apply_overlap_regions(OverlapState& st) const {
  std::vector<int> region_of(st.op_names.size(), 0);
  std::vector<char> region_serial(1, 0), region_persistent(1, 0);
  if (!opt.overlap_regions.empty()) {
    region_serial.clear();
    region_persistent.clear();
    size_t prev = 0;
    for (size_t r = 0; r < opt.overlap_regions.size(); ++r) {
      const std::string field = "overlap_regions[" + std::to_string(r) + "].first_op";
      const std::string& name = opt.overlap_regions[r].first_op;
      const auto at = std::find(st.op_names.begin(), st.op_names.end() - 1, name);
      if (at == st.op_names.end() - 1)
        throw_input_error("executor", field, "no overlap op named '" + name + "'");
      const size_t k = static_cast<size_t>(at - st.op_names.begin());
      if (r == 0 && k != 0)
        throw_input_error("executor", field,
                          "expected 'embedding' (the first op), found '" + name + "'");
      if (r > 0 && k <= prev)
        throw_input_error("executor", field,
                          "expected an op after '" + st.op_names[prev] + "', found '" + name + "'");
      for (size_t i = k; i < st.op_names.size(); ++i) region_of[i] = static_cast<int>(r);
      const ExecutorOptions::OverlapRegion& region = opt.overlap_regions[r];
      if (region.cta_budget < 0 || (region.cta_budget > 0 && !region.persistent))
        throw_input_error("executor", "overlap_regions[" + std::to_string(r) + "].cta_budget",
                          "expected 0 (the executor chooses the budgets of a non-persistent "
                          "region), or >= 1 for a persistent one, found " +
                              std::to_string(region.cta_budget));
      // A persistent region is one launch: for the budgets and barriers, a serial region.
      region_serial.push_back(region.serial || region.persistent ? 1 : 0);
      region_persistent.push_back(region.persistent ? 1 : 0);
      prev = k;
    }
  }
  st.region_of = std::move(region_of);
  st.region_serial = std::move(region_serial);
  st.region_persistent = std::move(region_persistent);
}

// Throws the watchdog's description when it tripped, else a DeviceError for a failed status.
void ExecutorCore::overlap_check(cudaError_t err) const {
  if (err == cudaSuccess) return;
  if (ovl && ovl->watchdog && ovl->watchdog->tripped()) {
    // A wait inside a persistent region names the region too.
    const uint32_t op = ovl->watchdog->tripped_op();
    std::string where;
    if (op < ovl->region_of.size()) {
      const int r = ovl->region_of[op];
      if (ovl->region_persistent[static_cast<size_t>(r)])
        where = " in persistent region " + std::to_string(r) + " (from '" +
                opt.overlap_regions[static_cast<size_t>(r)].first_op + "')";
    }
    throw DeviceError(ovl->watchdog->describe(ovl->op_names) + where);
  }
  if (ovl && ovl->watchdog) ovl->watchdog->check(err, ovl->op_names);
  throw DeviceError(std::string("overlap decode step: ") + cudaGetErrorString(err));
}

// CTA budgets and barriers: graph/overlap_budget.h (the conditions, the argument, the rule), fed
// with this GPU's occupancy of each op's kernel. A stream-ordered vendor GEMM runs behind op k - 1
// instead of op k - W, which only narrows what is live.
void ExecutorCore::choose_overlap_budgets(std::vector<OverlapOp>& ops) const {
  std::vector<BudgetOp> b(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    OverlapOp& op = ops[k];
    KernelFootprint f;
    MEGAOPS_CUDA_CHECK(op.footprint(0, &f));
    if (f.blocks_per_sm < 1)
      throw DeviceError("overlap: a CTA of op '" + op.name + "' does not fit on an SM");
    b[k].cappable = op.cappable;
    b[k].opaque = op.opaque;
    b[k].stream_ordered = op.stream_ordered;
    b[k].blocks_per_sm = f.blocks_per_sm;
    b[k].region = ovl->region_of[k];
    // In op order: the v0 attention combine's footprint reads the split's budget set before it.
    b[k].ctas_at = [&op](int cap) {
      KernelFootprint g;
      MEGAOPS_CUDA_CHECK(op.footprint(cap, &g));
      return g.ctas;
    };
  }
  ::megaops::choose_overlap_budgets(b, ovl->region_serial, opt.overlap_streams, ovl->sms);
  const std::vector<OverlapSyncOp> sync =
      overlap_sync_plan(b, ovl->region_serial, opt.overlap_streams, opt.overlap_pdl_chain);
  for (size_t k = 0; k < ops.size(); ++k) {
    ops[k].cap = b[k].cap;
    ops[k].ctas = b[k].ctas;
    ops[k].segment = b[k].segment;
    ops[k].stream = sync[k].stream;
    ops[k].waits = sync[k].waits;
    ops[k].signals = sync[k].signals;
  }
  apply_chain_sync(ops);
  for (const OverlapOp& op : ops)
    if (op.ctas < 0 || static_cast<uint32_t>(op.ctas) > TILE_SYNC_STEP_SUM)
      throw Error("overlap: op '" + op.name + "' launches more CTAs than a counter step holds");
}

std::vector<OverlapOp>& ExecutorCore::overlap_plan(int b) {
  setup_overlap();
  OverlapState& st = *ovl;
  auto it = st.plans.find(b);
  if (it == st.plans.end()) it = st.plans.emplace(b, build_overlap_ops(b)).first;
  return it->second;
}

// Records (inside capture) or runs (debug: eagerly) one overlap decode step on the executor's
// stream: fork the W streams from it with an event, launch op k on stream k % W, join all streams
// back, then step_advance on the executor's stream. The join is what guarantees that no kernel of
// this step reads the overlap step counter after step_advance incremented it; step_advance also
// waits on the sampler's counter (redundant with the join, and cheap).
void ExecutorCore::record_overlap_step(int b) {
  std::vector<OverlapOp>& ops = overlap_plan(b);
  OverlapState& st = *ovl;
  const size_t n = ops.size() - 1;
  const size_t W = st.streams.size();
  size_t drop = ops.size();
  if (!opt.overlap_drop_signal_op.empty()) {
    for (size_t k = 0; k < ops.size(); ++k)
      if (ops[k].name == opt.overlap_drop_signal_op) drop = k;
    if (drop == ops.size())
      throw_input_error("executor", "overlap_drop_signal_op",
                        "no overlap op named '" + opt.overlap_drop_signal_op + "'");
    if (!ops[drop].signals && !ops[drop].in_persistent)
      throw_input_error("executor", "overlap_drop_signal_op",
                        "op '" + opt.overlap_drop_signal_op +
                            "' signals nothing: the op after it is ordered by stream or barrier");
  }
  const bool grid_waits = chain_grid_waits();
  auto sync_for = [&](size_t k) {
    TileSync s;
    s.step = st.step;
    if (ops[k].waits && !grid_waits) {
      // The producer: the op before, or before a folded op the op before that.
      const size_t src = ops[k - 1].folded ? k - 2 : k - 1;
      s.wait_counter[0] = st.counters + src;
      s.wait_target_per_step[0] = TILE_SYNC_STEP_SUM;
    }
    s.signal_counter = ops[k].signals && k != drop ? st.counters + k : nullptr;
    s.watchdog = st.watchdog->params();
    s.op_id = static_cast<uint32_t>(k);
    s.early_trigger = opt.overlap_pdl_chain && ops[k].early_trigger;
    s.delay = DelayParams{opt.overlap_delay_max_ns, opt.overlap_delay_seed};
    s.trace = TraceParams{st.trace_records, st.trace_cursor, opt.overlap_trace_capacity};
    return s;
  };
  auto run = [&](size_t k, cudaStream_t s) {
    if (ops[k].persistent) {
      const cudaError_t err =
          launch_persistent(ops[k], s, drop < ops.size() ? static_cast<int>(drop) : -1);
      if (err != cudaSuccess)
        throw DeviceError("persistent region from '" + ops[k].name +
                          "': " + cudaGetErrorString(err));
      return;
    }
    if (ops[k].in_persistent) return;  // the region's launch runs it
    // In the chain an op that waits is a programmatic dependent of the kernel before it.
    const bool pdl = opt.overlap_pdl_chain && ops[k].waits;
    const cudaError_t err = ops[k].launch(ops[k].cap, sync_for(k), pdl, s);
    if (err != cudaSuccess)
      throw DeviceError("overlap op '" + ops[k].name + "': " + cudaGetErrorString(err));
  };
  MEGAOPS_CUDA_CHECK(cudaEventRecord(st.fork, stream));
  for (cudaStream_t s : st.streams) MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(s, st.fork, 0));
  // The barrier between segment [prev_begin, begin) and segment [begin, end): each stream of the
  // next segment waits for each other stream of the previous one (graph/overlap_budget.h,
  // overlap_barrier_edges), no edge where stream order already orders them.
  std::vector<OverlapSyncOp> plan(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) plan[k].stream = ops[k].stream;
  auto barrier = [&](size_t prev_begin, size_t begin, size_t end) {
    const std::vector<BarrierEdge> edges = overlap_barrier_edges(plan, prev_begin, begin, end);
    std::vector<char> recorded(W, 0);
    for (const BarrierEdge& e : edges) {
      const size_t r = static_cast<size_t>(e.recorded);
      if (!recorded[r]) {
        MEGAOPS_CUDA_CHECK(cudaEventRecord(st.joins[r], st.streams[r]));
        recorded[r] = 1;
      }
      MEGAOPS_CUDA_CHECK(
          cudaStreamWaitEvent(st.streams[static_cast<size_t>(e.waiter)], st.joins[r], 0));
    }
  };
  // Segment by segment (OverlapOp::segment: a barrier between regions and after an opaque op),
  // each op on its stream (OverlapOp::stream, graph/overlap_budget.h: round robin, stream 0 in a
  // serial region, a stream-ordered vendor GEMM last in its segment on its producer's stream).
  for (size_t begin = 0, prev_begin = 0; begin < n;) {
    size_t end = begin;
    while (end < n && ops[end].segment == ops[begin].segment) ++end;
    if (begin > 0) barrier(prev_begin, begin, end);
    prev_begin = begin;
    if (opt.overlap_reverse_issue_order) {
      // Consumers first: the last stream's ops are issued before the first stream's. Each stream
      // keeps its own order (op k before op k + W): reversing that would put a consumer ahead of
      // its producer in one FIFO, a deadlock by construction rather than a scheduling question.
      // Eagerly (debug_sync) a stream's launches must all fit the launch queue (about a
      // thousand) before the next stream's are issued; true for every preset.
      for (size_t r = W; r-- > 0;)
        for (size_t k = begin; k < end; ++k)
          if (!ops[k].stream_ordered && ops[k].stream == static_cast<int>(r)) run(k, st.streams[r]);
      if (ops[end - 1].stream_ordered)
        run(end - 1, st.streams[static_cast<size_t>(ops[end - 1].stream)]);
    } else {
      for (size_t k = begin; k < end; ++k) run(k, st.streams[static_cast<size_t>(ops[k].stream)]);
    }
    begin = end;
  }
  for (size_t r = 0; r < W; ++r) {
    MEGAOPS_CUDA_CHECK(cudaEventRecord(st.joins[r], st.streams[r]));
    MEGAOPS_CUDA_CHECK(cudaStreamWaitEvent(stream, st.joins[r], 0));
  }
  run(n, stream);
}

std::vector<TraceEvent> ExecutorCore::take_overlap_trace(uint64_t* dropped) {
  ExecutorCore& s = *this;
  const uint32_t capacity = s.opt.overlap_trace_capacity;
  if (capacity == 0)
    throw_input_error("executor", "overlap_trace_capacity", "tracing is off (capacity 0)");
  s.setup_overlap();
  const OverlapState& st = *s.ovl;
  // The overlap streams join the executor's stream at the end of every step.
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  uint32_t appended = 0;
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(&appended, st.trace_cursor, sizeof(appended), cudaMemcpyDeviceToHost));
  const uint32_t kept = std::min(appended, capacity);
  std::vector<TileTraceRecord> records(kept);
  if (kept > 0)
    MEGAOPS_CUDA_CHECK(cudaMemcpy(records.data(), st.trace_records, kept * sizeof(TileTraceRecord),
                                  cudaMemcpyDeviceToHost));
  MEGAOPS_CUDA_CHECK(cudaMemset(st.trace_cursor, 0, sizeof(uint32_t)));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  if (dropped) *dropped = appended - kept;
  std::vector<TraceEvent> out;
  out.reserve(kept);
  for (const TileTraceRecord& r : records) {
    TraceEvent e;
    e.op = r.op < st.op_names.size() ? st.op_names[r.op] : "op " + std::to_string(r.op);
    e.op_index = r.op;
    e.block = r.block;
    // A persistent region's record is a task: its tile travels in the record's spare word.
    if (r.op < st.region_of.size() && st.region_persistent[static_cast<size_t>(st.region_of[r.op])])
      e.tile = static_cast<int32_t>(r.pad);
    e.smid = r.smid;
    e.wait_start_ns = r.wait_start_ns;
    e.wait_end_ns = r.wait_end_ns;
    e.work_end_ns = r.work_end_ns;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace megaops
