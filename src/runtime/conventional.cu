// See conventional.h. Per decode step, with B sequences:
//   embedding → per layer [add+rmsnorm → QKV matmul → q/k norm + RoPE + cache write → attention →
//   O matmul → add+rmsnorm → gate|up matmul → SiLU·mul → down matmul] → add+final norm → LM head →
//   sample → advance positions.
// The residual add of each block is fused into the next norm, so the layer is 9 kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tokens.h"
#include "graph/overlap_budget.h"
#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/matmul.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_fold.cuh"
#include "kernels/sampling.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/tile_gate.cuh"
#include "kernels/tp_reduce.cuh"
#include "models/checkpoint.h"
#include "models/tensor_parallel.h"
#include "runtime/conventional.h"
#include "runtime/device_memory.h"
#include "runtime/step_state.cuh"
#include "runtime/tp_comm.h"
#include "sync/error_record.h"

namespace megaops {

WeightFiller checkpoint_filler(const Checkpoint& ckpt) {
  return [&ckpt](const WeightSpec& spec, size_t, float* out) {
    ckpt.weight_to_f32(spec.name, out);  // rejects NaN / Inf as it converts
  };
}

WeightFiller random_filler(uint64_t seed) {
  return [seed](const WeightSpec& spec, size_t index, float* out) {
    size_t numel = 1;
    for (int64_t d : spec.shape) numel *= static_cast<size_t>(d);
    parallel_for(numel, 1 << 20, [&](size_t b, size_t e) {
      random_weight_values(spec, static_cast<uint32_t>(index), seed, b, e - b, out + b);
    });
  };
}

namespace {

struct LayerWeights {
  bf16* ln1 = nullptr;
  bf16* wqkv = nullptr;  // [q + 2 kv, h]: q rows, then k, then v
  bf16* q_norm = nullptr;
  bf16* k_norm = nullptr;
  bf16* wo = nullptr;
  bf16* ln2 = nullptr;
  bf16* wgu = nullptr;  // [2 i, h]: gate rows, then up
  bf16* wdown = nullptr;
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
};

// Per-layer activations of the overlap step: one output buffer per op instance
// (docs/overlap-design.md decision 2), sized for max_batch rows.
struct OverlapLayer {
  bf16* n1 = nullptr;     // input_layernorm output
  float* qkv = nullptr;   // qkv_proj output
  bf16* q = nullptr;      // qkv_rope's q (k and v go to the layer's cache)
  float* ws = nullptr;    // attention split partials
  bf16* attn = nullptr;   // attention output
  float* o = nullptr;     // o_proj output
  bf16* n2 = nullptr;     // post_attention_layernorm output
  float* gu = nullptr;    // gate_up_proj output
  bf16* act = nullptr;    // silu_mul output
  float* down = nullptr;  // down_proj output
};

// One op of the overlap step. footprint/launch take the op's CTA cap (0 = the kernel's default
// grid; ignored by kernels whose grid is fixed by their shape).
struct OverlapOp {
  std::string name;
  bool cappable = false;
  std::function<cudaError_t(int cap, KernelFootprint*)> footprint;
  // pdl: launched as a programmatic dependent of the kernel before it on the stream (the chain).
  std::function<cudaError_t(int cap, const TileSync&, bool pdl, cudaStream_t)> launch;
  int cap = 0;   // chosen budget (launch argument)
  int ctas = 0;  // CTAs launched with that budget
  // A vendor (cuBLASLt) kernel: stream-ordered below, or with chunks behind a gate
  // (kernels/tile_gate.cuh) whose one CTA, while it waits, is its footprint; a barrier follows it
  // (graph/overlap_budget.h).
  bool opaque = false;
  int segment = 0;  // ops of one segment may be live together (graph/overlap_budget.h)
  // An opaque op ordered by its stream instead of a gate: it is issued last in its segment, on
  // the stream of the op before it (its producer), so the stream's order is the wait; it signals
  // nothing, because the barrier after it is what the next op waits for.
  bool stream_ordered = false;
  // How it is issued and ordered (graph/overlap_budget.h, overlap_sync_plan): its stream (-1: the
  // executor's, after the join), whether it waits for op k - 1's counter and whether it signals.
  int stream = 0;
  bool waits = false;
  bool signals = false;
  // The O projection: its weight bytes, for the early-trigger rule (build_overlap_ops); 0
  // elsewhere.
  int64_t o_proj_weight_bytes = 0;
  // Its kernel triggers the next PDL kernel at the top of its wait (TileSync::early_trigger).
  bool early_trigger = false;
  // A norm or SiLU·mul folded into the matmul after it, or qkv_rope into the attention after it
  // (ExecutorOptions::overlap_fold_norms, overlap_fold_silu, overlap_fold_rope): it keeps its
  // name and counter id but launches nothing; its consumer waits where it would have.
  bool folded = false;
};

// Everything the overlap backend owns, set up on first use (so a conventional executor allocates
// and loads nothing more than before).
struct OverlapState {
  std::vector<cudaStream_t> streams;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // One monotonic counter per op id, zeroed once here and never again (DESIGN rule 3).
  uint32_t* counters = nullptr;
  // Overlap steps, 1-based for the running step: set to 1 once, advanced only by the overlap
  // step's step_advance. Separate from the sampler's step (which prefill resets), so counters and
  // targets stay consistent across prefills and conventional steps, which touch neither.
  uint32_t* step = nullptr;
  std::unique_ptr<WatchdogRecord> watchdog;
  std::vector<std::string> op_names;
  // Region of each op (ExecutorOptions::overlap_regions; all 0 without regions) and whether it is
  // serial; step_advance (the last op) runs after the join, outside every region.
  std::vector<int> region_of;
  std::vector<char> region_serial;
  float* resid = nullptr;  // residual stream [max_batch, h], updated in place by the norms
  // With norms folded into their matmuls: the second residual buffer. A folded norm's matmul
  // reads one and its CTA 0 writes the sum into the other (its other CTAs still read the first).
  float* resid_alt = nullptr;
  std::vector<OverlapLayer> layers;
  bf16* final_normed = nullptr;
  int sms = 0;
  // Ops with budgets, per batch size (budgets depend on the grids, which depend on b).
  std::map<int, std::vector<OverlapOp>> plans;
  // Timeline tracing (ExecutorOptions::overlap_trace_capacity > 0).
  TileTraceRecord* trace_records = nullptr;
  uint32_t* trace_cursor = nullptr;
};

}  // namespace

struct OpTimeKey {
  std::string op;
  int layer;
};

struct ConventionalExecutor::Impl {
  ~Impl();
  ModelConfig cfg;
  ExecutorOptions opt;
  DeviceMemory mem;
  cudaStream_t stream = nullptr;
  std::unique_ptr<MatmulContext> mm;

  // Tensor parallelism (ExecutorOptions::tp): `cfg` above is this rank's configuration (its heads,
  // kv heads and intermediate features), `full_cfg` the model's; vocab_part = the LM head rows this
  // rank holds, vocab_pad = the rows every rank's gathered block is padded to.
  ModelConfig full_cfg;
  ncclComm_t comm = nullptr;
  int vocab0 = 0, vocab_part = 0, vocab_pad = 0;
  float* logits_part = nullptr;  // [max_batch, vocab_pad]
  float* logits_all = nullptr;   // [tp, max_batch, vocab_pad]
  // TpReduce::Peer (kernels/tp_reduce.cuh): one allocation with this rank's partial slots
  // ([2 x layers][max_batch x hidden] floats, O then down of each layer) and their counters, which
  // the other ranks map; their mappings; the decode step counter; a watchdog for the waits.
  struct PeerReduce {
    void* base = nullptr;
    size_t slot_floats = 0, counters_offset = 0;
    std::vector<char*> rank_base;  // every rank's allocation as seen here (own = base)
    uint32_t* step = nullptr;
    std::unique_ptr<WatchdogRecord> watchdog;
    std::vector<std::string> site_names;
    bool ready = false;  // set up on every rank: only then may the destructor wait for the peers
  };
  std::unique_ptr<PeerReduce> peer;

  bf16* embed = nullptr;
  bf16* final_norm = nullptr;
  bf16* lm_head = nullptr;
  std::vector<LayerWeights> layers;
  float* inv_freq = nullptr;
  size_t weight_bytes = 0;

  // Activations, sized for max(prefill_chunk, max_batch) tokens.
  int max_tokens = 0;
  float* residual = nullptr;
  bf16* normed = nullptr;
  float* qkv = nullptr;  // matmul outputs stay fp32: one bf16 rounding fewer per projection
  bf16* q = nullptr;
  bf16* attn = nullptr;
  float* delta = nullptr;  // O and down projections' output, added by the next norm
  float* gu = nullptr;
  bf16* act = nullptr;
  bf16* lm_in = nullptr;  // [max_batch, h]: the rows the LM head reads
  float* logits = nullptr;
  // Greedy sampling in the LM head (ExecutorOptions::greedy_in_lm_head): a packed argmax a row,
  // zero between steps (the sampler zeroes what the LM head filled).
  unsigned long long* greedy_argmax = nullptr;
  float* attn_ws = nullptr;
  uint32_t* attn_done = nullptr;  // decode attention's merge counters (zero between launches)
  int32_t* tok_ids = nullptr;     // prefill inputs [max_tokens]
  int32_t* tok_pos = nullptr;
  int32_t* tok_slot = nullptr;

  // Decode state (device), see step_state.cuh.
  int32_t* dec_tokens = nullptr;
  int32_t* dec_pos = nullptr;
  int32_t* dec_ctx = nullptr;
  int32_t* dec_slots = nullptr;
  uint32_t* step = nullptr;
  // Pinned and mapped, 3 x max_batch: the tokens decode_step returns (and forced tokens), then
  // the two halves step_advance writes each decode step's tokens into (StepAdvanceParams::
  // host_tokens: half host_pos[0] % 2 of the step, ring_half).
  int32_t* host_tokens = nullptr;
  int32_t* ring_half(int parity) const {
    return host_tokens + static_cast<size_t>(1 + parity) * opt.max_batch;
  }
  // decode_steps: recorded after each half's step (created on first use).
  cudaEvent_t ring_done[2] = {nullptr, nullptr};
  // PrefillPath::DecodeGraph: each sequence's last-row logits until the last replay has run
  // ([max_batch, vocab] fp32, allocated on first use).
  std::unique_ptr<CudaMemory> prefill_logits;

  int batch = 0;
  std::vector<int> host_pos;  // mirror of dec_pos, for limit checks
  // Decode graphs per (batch, PDL, backend).
  std::map<std::tuple<int, bool, DecodeBackend>, cudaGraphExec_t> graphs;
  bool capturing = false;
  std::unique_ptr<OverlapState> ovl;

  // Profiling (see profile_decode_steps): an event recorded after every op.
  bool profiling = false;
  int current_layer = -1;
  std::vector<cudaEvent_t> prof_events;
  std::vector<OpTimeKey> prof_ops;

  void check(cudaError_t err, const char* op) {
    if (err != cudaSuccess) throw DeviceError(std::string(op) + ": " + cudaGetErrorString(err));
    if (profiling) {
      const size_t i = prof_ops.size();
      if (i + 1 >= prof_events.size()) throw Error("internal: profiling event pool exhausted");
      // External: inside capture a plain record is only a dependency marker, not a timing node.
      MEGAOPS_CUDA_CHECK(
          cudaEventRecordWithFlags(prof_events[i + 1], stream, cudaEventRecordExternal));
      prof_ops.push_back({op, current_layer});
    }
    if (opt.debug_sync && !capturing) {
      const cudaError_t s = cudaStreamSynchronize(stream);
      if (s != cudaSuccess)
        throw DeviceError(std::string(op) + " (debug sync): " + cudaGetErrorString(s));
    }
  }

  LaunchOptions launch(bool pdl) const { return LaunchOptions{stream, pdl}; }

  // The PDL chain waits on the grid before it (griddepcontrol.wait: the kernel launched before it
  // on the stream, and through it every earlier one) unless told to wait on counters; then no op
  // signals a counter.
  bool chain_grid_waits() const {
    return opt.overlap_pdl_chain && !opt.overlap_chain_counter_waits;
  }

  // As matmul_params, with output rows ldy apart (0 = n), launched on the step's stream.
  void matmul(const bf16* x, const bf16* w, void* y, DType y_dtype, int m, int n, int k, bool pdl,
              const char* op, int64_t ldy = 0) {
    MatmulParams p = matmul_params(x, w, y, y_dtype, m, n, k);
    if (ldy > 0) p.ldy = ldy;
    p.launch = launch(pdl);
    check(mm->run(p), op);
  }

  // The embedding of n tokens into `out`; launch options and hooks left to the caller.
  EmbeddingParams embedding_params(const int32_t* ids, float* out, int n) const {
    EmbeddingParams ep;
    ep.ids = ids;
    ep.table = embed;
    ep.out = out;
    ep.n = n;
    ep.hidden = cfg.hidden_size;
    ep.vocab = cfg.vocab_size;
    return ep;
  }

  // residual += delta_in (none when null), out = RMSNorm(residual) * w, for `rows` rows.
  AddRmsNormParams add_rmsnorm_params(float* resid, const float* delta_in, const bf16* w, bf16* out,
                                      int rows) const {
    AddRmsNormParams p;
    p.residual = resid;
    p.delta_f32 = delta_in;
    p.weight = w;
    p.out = out;
    p.rows = rows;
    p.n = cfg.hidden_size;
    p.eps = cfg.rms_norm_eps;
    return p;
  }

  // What decode and prefill attention params share: layer L's cache, q, out, slots and shapes.
  template <typename P>
  P attention_params(const LayerWeights& L, const bf16* q_in, bf16* out,
                     const int32_t* slot_of) const {
    P ap;
    ap.q = q_in;
    ap.k_cache = L.k_cache;
    ap.v_cache = L.v_cache;
    ap.slots = slot_of;
    ap.out = out;
    ap.num_heads = cfg.num_heads;
    ap.num_kv_heads = cfg.num_kv_heads;
    ap.head_dim = cfg.head_dim;
    ap.max_seq = opt.max_seq;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
    return ap;
  }

  // The QKV post-processing of layer L for t tokens (both decode steps and prefill); launch
  // options and overlap hooks are left to the caller.
  QkvRopeParams qkv_rope_params(const LayerWeights& L, const float* qkv_in, bf16* q_out,
                                const int32_t* positions, const int32_t* slot_of, int t) const {
    QkvRopeParams rp;
    rp.qkv_f32 = qkv_in;
    rp.positions = positions;
    rp.slots = slot_of;
    rp.q_norm = L.q_norm;
    rp.k_norm = L.k_norm;
    rp.inv_freq = inv_freq;
    rp.q_out = q_out;
    rp.k_cache = L.k_cache;
    rp.v_cache = L.v_cache;
    rp.t = t;
    rp.num_heads = cfg.num_heads;
    rp.num_kv_heads = cfg.num_kv_heads;
    rp.head_dim = cfg.head_dim;
    rp.max_seq = opt.max_seq;
    rp.eps = cfg.rms_norm_eps;
    return rp;
  }

  // Decode attention of layer L over b sequences; merge counters, launch options and overlap
  // hooks are left to the caller.
  DecodeAttentionParams decode_attention_params(const LayerWeights& L, const bf16* q_in, bf16* out,
                                                float* workspace, const int32_t* slot_of,
                                                const int32_t* ctx_lens, int b) const {
    DecodeAttentionParams ap = attention_params<DecodeAttentionParams>(L, q_in, out, slot_of);
    ap.ctx_lens = ctx_lens;
    ap.workspace = workspace;
    ap.b = b;
    return ap;
  }

  void add_rmsnorm(const float* delta_in, const bf16* w, bf16* out, int rows, bool pdl,
                   const char* op, int carveout = -1) {
    AddRmsNormParams p = add_rmsnorm_params(residual, delta_in, w, out, rows);
    p.launch = launch(pdl);
    p.launch.carveout = carveout;
    check(launch_add_rmsnorm(p), op);
  }

  // The carveout for the kernel launched just before the matmul [m, k] x [n, k]^T: under PDL, the
  // streaming kernel's (the largest shared split) when that matmul runs on it, so the streaming
  // kernel's CTAs can start beside the kernel's own and issue their first weight stages
  // (LaunchOptions::carveout in kernels/common.cuh; docs/perf-notes.md item 20); else -1, the
  // kernel's own split.
  int carveout_before_matmul(bool pdl, int m, int n, int k) const {
    if (!pdl) return -1;
    MatmulParams next = matmul_params(nullptr, nullptr, nullptr, DType::F32, m, n, k);
    next.launch = launch(pdl);
    return mm->path(next) == MatmulPath::Stream ? int{cudaSharedmemCarveoutMaxShared} : -1;
  }

  // Everything from the embedding to the last layer's down projection, for `t` tokens whose ids,
  // positions and slots are at ids/pos/slots. `decode` selects the attention kernel.
  void run_layers(int t, const int32_t* ids, const int32_t* pos, const int32_t* slots,
                  const int32_t* ctx, bool decode, bool pdl) {
    const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
              inter = cfg.intermediate_size;
    EmbeddingParams ep = embedding_params(ids, residual, t);
    ep.launch = launch(pdl);
    check(launch_embedding(ep), "embedding");
    for (int l = 0; l < cfg.num_layers; ++l) {
      current_layer = l;
      const LayerWeights& L = layers[l];
      add_rmsnorm(l == 0 ? nullptr : delta, L.ln1, normed, t, pdl, "input_layernorm",
                  carveout_before_matmul(pdl, t, qd + 2 * kvd, h));
      matmul(normed, L.wqkv, qkv, DType::F32, t, qd + 2 * kvd, h, pdl, "qkv_proj");
      QkvRopeParams rp = qkv_rope_params(L, qkv, q, pos, slots, t);
      rp.launch = launch(pdl);
      check(launch_qkv_rope(rp), "qkv_rope");
      if (decode) {
        DecodeAttentionParams ap = decode_attention_params(L, q, attn, attn_ws, slots, ctx, t);
        ap.done_counters = attn_done;
        ap.launch = launch(pdl);
        ap.launch.carveout = carveout_before_matmul(pdl, t, h, qd);
        check(launch_decode_attention(ap), "decode_attention");
      } else {
        PrefillAttentionParams ap = attention_params<PrefillAttentionParams>(L, q, attn, slots);
        ap.positions = pos;
        ap.t = t;
        ap.launch = launch(pdl);
        check(launch_prefill_attention(ap), "prefill_attention");
      }
      const bool by_peer = decode && peer != nullptr;
      matmul(attn, L.wo, by_peer ? peer_slot(opt.tp_rank, 2 * l) : delta, DType::F32, t, h, qd, pdl,
             "o_proj");
      if (by_peer)
        peer_reduce_delta(2 * l, t, pdl);
      else
        all_reduce_delta(t, "o_proj all-reduce");
      add_rmsnorm(delta, L.ln2, normed, t, pdl, "post_attention_layernorm",
                  carveout_before_matmul(pdl, t, 2 * inter, h));
      matmul(normed, L.wgu, gu, DType::F32, t, 2 * inter, h, pdl, "gate_up_proj");
      SiluMulParams sp;
      sp.gate_up_f32 = gu;
      sp.out = act;
      sp.m = t;
      sp.inter = inter;
      sp.launch = launch(pdl);
      sp.launch.carveout = carveout_before_matmul(pdl, t, h, inter);
      check(launch_silu_mul(sp), "silu_mul");
      matmul(act, L.wdown, by_peer ? peer_slot(opt.tp_rank, 2 * l + 1) : delta, DType::F32, t, h,
             inter, pdl, "down_proj");
      if (by_peer)
        peer_reduce_delta(2 * l + 1, t, pdl);
      else
        all_reduce_delta(t, "down_proj all-reduce");
    }
    current_layer = -1;
  }

  // Tensor parallelism: the row-parallel projections' partial sums, added over the ranks in place.
  void all_reduce_delta(int t, const char* op) {
    if (comm == nullptr) return;
    nccl_check(nccl_api().all_reduce(delta, delta, static_cast<size_t>(t) * cfg.hidden_size,
                                     ncclFloat32, ncclSum, comm, stream),
               op);
    check(cudaGetLastError(), op);
  }

  // TpReduce::Peer: rank r's partial slot `site` (2 x layer, + 1 for down_proj) and counter, as
  // mapped in this process.
  float* peer_slot(int r, int site) const {
    return reinterpret_cast<float*>(peer->rank_base[r]) +
           static_cast<size_t>(site) * peer->slot_floats;
  }
  uint32_t* peer_counter(int r, int site) const {
    return reinterpret_cast<uint32_t*>(peer->rank_base[r] + peer->counters_offset) + site;
  }
  void peer_reduce_delta(int site, int t, bool pdl) {
    PeerReduceParams p;
    for (int r = 0; r < opt.tp; ++r) {
      p.parts[r] = peer_slot(r, site);
      p.counters[r] = peer_counter(r, site);
    }
    p.own_counter = peer_counter(opt.tp_rank, site);
    p.step = peer->step;
    p.out = delta;
    p.ranks = opt.tp;
    p.count = static_cast<int64_t>(t) * cfg.hidden_size;
    p.watchdog = peer->watchdog->params();
    p.site = static_cast<uint32_t>(site);
    p.launch = launch(pdl);
    check(launch_tp_peer_reduce(p), site % 2 == 0 ? "o_proj peer reduce" : "down_proj peer reduce");
  }
  void setup_peer_reduce();

  // The LM head: the whole vocabulary, or under tensor parallelism this rank's rows, gathered
  // from every rank ([tp, b, vocab_pad]) and copied into logits [b, vocab] rank by rank.
  // Returns the packed argmax buffer the LM head's epilogue filled (greedy_epilogue), or null.
  unsigned long long* lm_head_logits(const bf16* rows, int b, bool pdl) {
    if (comm == nullptr) {
      MatmulParams p =
          matmul_params(rows, lm_head, logits, DType::F32, b, cfg.vocab_size, cfg.hidden_size);
      p.launch = launch(pdl);
      p.argmax_out = greedy_epilogue(p);
      check(mm->run(p), "lm_head");
      return p.argmax_out;
    }
    matmul(rows, lm_head, logits_part, DType::F32, b, vocab_part, cfg.hidden_size, pdl, "lm_head",
           vocab_pad);
    const size_t block = static_cast<size_t>(b) * vocab_pad;
    nccl_check(nccl_api().all_gather(logits_part, logits_all, block, ncclFloat32, comm, stream),
               "lm_head all-gather");
    for (int r = 0; r < opt.tp; ++r) {
      const TpShape sh = tp_shape(full_cfg, opt.tp, r);
      if (sh.vocab == 0) continue;
      MEGAOPS_CUDA_CHECK(cudaMemcpy2DAsync(
          logits + sh.vocab0, static_cast<size_t>(cfg.vocab_size) * sizeof(float),
          logits_all + r * block, static_cast<size_t>(vocab_pad) * sizeof(float),
          static_cast<size_t>(sh.vocab) * sizeof(float), b, cudaMemcpyDeviceToDevice, stream));
    }
    check(cudaGetLastError(), "lm_head gather");
    return nullptr;
  }

  // The argmax buffer for LM head launch p (its argmax_out unset) where greedy sampling goes into
  // its epilogue (ExecutorOptions::greedy_in_lm_head: greedy, one GPU, p on the bulk streaming
  // kernel), else null.
  unsigned long long* greedy_epilogue(const MatmulParams& p) const {
    if (!greedy_epilogue_allowed()) return nullptr;
    return mm->stream_bulk() && mm->path(p) == MatmulPath::Stream ? greedy_argmax : nullptr;
  }
  bool greedy_epilogue_allowed() const {
    return opt.greedy_in_lm_head && opt.sampling.temperature <= 0.0f && comm == nullptr;
  }

  // The next token of b sequences from the logits, into dec_tokens; launch options left default.
  SampleParams sample_params(int b) const {
    SampleParams sp;
    sp.logits = logits;
    sp.ld = cfg.vocab_size;
    sp.b = b;
    sp.vocab = cfg.vocab_size;
    sp.temperature = opt.sampling.temperature;
    sp.top_k = opt.sampling.top_k;
    sp.top_p = opt.sampling.top_p;
    sp.seed = opt.sampling.seed;
    sp.step = step;
    sp.tokens = dec_tokens;
    // Row r draws with its sequence's slot: the same stream as row r in a decode step (slot r),
    // and a sequence's first token in a decode-graph prefill draws as the layer path's row b.
    sp.rng_rows = dec_slots;
    return sp;
  }

  // Positions, context lengths and the sampler's step advanced after a decode step of b.
  StepAdvanceParams step_advance_params(int b) const {
    StepAdvanceParams ap;
    ap.positions = dec_pos;
    ap.ctx_lens = dec_ctx;
    ap.step = step;
    ap.b = b;
    ap.tokens = dec_tokens;
    ap.host_tokens = ring_half(0);
    ap.tokens_ld = opt.max_batch;
    return ap;
  }

  // rng_by_slot false: row b draws as sequence b (the layer prefill, whose dec_slots are not set
  // yet when it samples).
  void lm_head_and_sample(const bf16* rows, int b, bool pdl, bool rng_by_slot = true) {
    unsigned long long* argmax = lm_head_logits(rows, b, pdl);
    SampleParams sp = sample_params(b);
    sp.argmax = argmax;
    if (!rng_by_slot) sp.rng_rows = nullptr;
    sp.launch = launch(pdl);
    check(launch_sample(sp), "sample");
  }

  void record_decode_step(int b, bool pdl) {
    if (peer) check(launch_tp_step_advance(peer->step, launch(pdl)), "tp step advance");
    run_layers(b, dec_tokens, dec_pos, dec_slots, dec_ctx, /*decode=*/true, pdl);
    add_rmsnorm(
        delta, final_norm, normed, b, pdl, "final_norm",
        comm == nullptr ? carveout_before_matmul(pdl, b, cfg.vocab_size, cfg.hidden_size) : -1);
    lm_head_and_sample(normed, b, pdl);
    StepAdvanceParams ap = step_advance_params(b);
    ap.launch = launch(pdl);
    check(launch_step_advance(ap), "step_advance");
  }

  // Captures what `record` enqueues on `stream` into a graph (the caller owns it). When the
  // capture met cuBLASLt problems without a tuned algorithm, they are tuned on the GPU now and the
  // step is captured again with the tuned algorithms (kernels/matmul.cuh, tune_pending).
  template <typename Record>
  cudaGraph_t capture_step(Record&& record) {
    for (int pass = 0;; ++pass) {
      cudaGraph_t graph = nullptr;
      MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      capturing = true;
      try {
        record();
      } catch (...) {
        capturing = false;
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      capturing = false;
      MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      if (pass > 0 || mm->pending_tuning() == 0) return graph;
      cudaGraphDestroy(graph);
      mm->tune_pending(stream);
    }
  }

  cudaGraphExec_t graph_for(int b, bool pdl) {
    const DecodeBackend backend = opt.backend;
    auto it = graphs.find({b, pdl, backend});
    if (it != graphs.end()) return it->second;
    cudaGraph_t graph = capture_step([&] {
      if (backend == DecodeBackend::Overlap)
        record_overlap_step(b);
      else
        record_decode_step(b, pdl);
    });
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    MEGAOPS_CUDA_CHECK(err);
    graphs[{b, pdl, backend}] = exec;
    return exec;
  }

  // ---- overlap backend (docs/overlap-design.md) ----

  void setup_overlap();
  void apply_overlap_regions(OverlapState& st) const;
  std::vector<OverlapOp> build_overlap_ops(int b);
  void choose_overlap_budgets(std::vector<OverlapOp>& ops) const;
  void record_overlap_step(int b);
  // One decode step of b rows on the executor's stream (the backend's graph, or eagerly with
  // debug_sync), then its b sampled tokens into host_tokens; returns when they are there. Errors
  // go through the overlap or TP watchdog, so a hung wait is reported by name. parity: that of
  // the position row 0 feeds (dec_pos[0] % 2), the ring's half step_advance writes.
  void run_step(int b, int parity);
  // What run_step enqueues (the step, whose step_advance writes its tokens into ring_half(dec_pos
  // [0] % 2)); returns without waiting, and without advancing host_pos.
  void enqueue_step(int b);
  // Throws on err, through the overlap or TP watchdog where the backend has one (a tripped record
  // names the op and tile that hung instead of the bare error).
  void check_step(cudaError_t err);
  // Rows [c0, c0 + t) of a host vector into dst[0, t) on the executor's stream (asynchronous: the
  // vector must outlive the copy, i.e. until the next synchronisation).
  void upload_rows(int32_t* dst, const std::vector<int32_t>& src, int c0, int t) {
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(dst, src.data() + c0, static_cast<size_t>(t) * 4,
                                       cudaMemcpyHostToDevice, stream));
  }
  // PrefillPath::Layers: the flattened prompts (ids, pos, slot of B sequences) through the
  // prefill kernels in chunks of prefill_chunk rows, then the LM head and sampler on each
  // sequence's last row. Leaves each sequence's first token in dec_tokens[b] and its logits in
  // logits row b.
  void prefill_layers(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                      const std::vector<int32_t>& slot, int B);
  // PrefillPath::DecodeGraph (see conventional.h): the flattened prompts (ids, pos, slot of B
  // sequences) in replays of at most max_batch rows. Leaves each sequence's first token in
  // host_tokens[b] and dec_tokens[b] and its logits in logits row b.
  void prefill_via_decode_graph(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                                const std::vector<int32_t>& slot, int B);
  // Throws the watchdog's description when it tripped, else a DeviceError for a failed status.
  void overlap_check(cudaError_t err) const {
    if (err == cudaSuccess) return;
    if (ovl && ovl->watchdog) ovl->watchdog->check(err, ovl->op_names);
    throw DeviceError(std::string("overlap decode step: ") + cudaGetErrorString(err));
  }
  void drop_overlap_graphs() {
    for (auto it = graphs.begin(); it != graphs.end();) {
      if (std::get<2>(it->first) == DecodeBackend::Overlap) {
        cudaGraphExecDestroy(it->second);
        it = graphs.erase(it);
      } else {
        ++it;
      }
    }
  }
};

void ConventionalExecutor::Impl::setup_overlap() {
  if (ovl) return;
  auto st = std::make_unique<OverlapState>();
  // DESIGN rule 1: load every kernel's module now. With lazy loading a producer's first launch
  // could need a module load while a consumer already spins on the GPU, which deadlocked on the
  // H200 here. Prefill kernels are included: they are loaded anyway and cost nothing more.
  for (cudaError_t err :
       {MatmulContext::preload_kernels(), preload_rmsnorm_kernels(), preload_qkv_rope_kernels(),
        preload_attention_kernels(), preload_silu_mul_kernels(), preload_embedding_kernels(),
        preload_sampling_kernels(), preload_step_state_kernels(), preload_tile_gate_kernels()})
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

  // Op names, indexed by op id = counter index; the same list for every batch size (the combine
  // kernel is launched even when it has nothing to merge), so a counter always belongs to the
  // same op instance and holds k * TILE_SYNC_STEP_SUM after k overlap steps.
  st->op_names.push_back("embedding");
  for (int l = 0; l < cfg.num_layers; ++l)
    for (const char* op :
         {"input_layernorm", "qkv_proj", "qkv_rope", "attention", "attention_combine", "o_proj",
          "post_attention_layernorm", "gate_up_proj", "silu_mul", "down_proj"})
      // With the conventional arithmetic the attention kernel merges its own splits.
      if (!opt.overlap_conventional_arithmetic || std::string(op) != "attention_combine")
        st->op_names.push_back("layer " + std::to_string(l) + " " + op);
  for (const char* op : {"final_norm", "lm_head", "sample", "step_advance"})
    st->op_names.push_back(op);

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
  const size_t ws =
      decode_attention_workspace_floats(opt.max_batch, cfg.num_heads, cfg.head_dim, opt.max_seq);
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
void ConventionalExecutor::Impl::apply_overlap_regions(OverlapState& st) const {
  std::vector<int> region_of(st.op_names.size(), 0);
  std::vector<char> region_serial(1, 0);
  if (!opt.overlap_regions.empty()) {
    region_serial.clear();
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
      region_serial.push_back(opt.overlap_regions[r].serial ? 1 : 0);
      prev = k;
    }
  }
  st.region_of = std::move(region_of);
  st.region_serial = std::move(region_serial);
}

// The ops of one overlap decode step for batch b, in dependency order. The step is a chain: op k
// reads the output of op k - 1 (and data of earlier ops, which op k - 1 transitively waited for:
// acquire/release happens-before is transitive). So op k waits only on counter k - 1.
//
// Write-after-read: every op writes its own buffer, except the residual (each norm adds into it in
// place) and the KV cache rows of the step's position. Both are safe: the norm of block j + 1 is
// later in the chain than every reader of the residual written by block j, and it starts only
// after they completed (transitively); the cache rows qkv_rope writes are read only by the
// attention after it (with qkv_rope folded into attention, by no CTA of it: each computes them).
std::vector<OverlapOp> ConventionalExecutor::Impl::build_overlap_ops(int b) {
  OverlapState& st = *ovl;
  const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  std::vector<OverlapOp> ops;
  auto add = [&](bool cappable, auto params, auto footprint, auto launch) {
    OverlapOp op;
    op.name = st.op_names[ops.size()];
    op.cappable = cappable;
    op.footprint = [params, footprint](int cap, KernelFootprint* f) {
      return footprint(params, cap, f);
    };
    // Never PDL (ExecutorOptions), except in the PDL chain, and there only for an op that waits
    // on its producer (record_overlap_step says which): the others (after a vendor GEMM, a
    // region's barrier or the fork) keep a plain launch, which starts after everything before it
    // on the stream has completed.
    op.launch = [params, launch](int cap, const TileSync& sync, bool pdl, cudaStream_t s) {
      auto q = params;
      q.sync = sync;
      q.launch = LaunchOptions{s, pdl};
      return launch(q, cap);
    };
    ops.push_back(std::move(op));
  };
  // An op whose grid follows its CTA cap (params.max_ctas), and one whose grid its shape fixes:
  // footprint(params, f) and launch(params) as the kernels declare them.
  auto add_capped = [&](auto params, auto footprint, auto launch) {
    add(
        true, params,
        [footprint](auto q, int cap, KernelFootprint* f) {
          q.max_ctas = cap;
          return footprint(q, f);
        },
        [launch](auto q, int cap) {
          q.max_ctas = cap;
          return launch(q);
        });
  };
  auto add_fixed = [&](auto params, auto footprint, auto launch) {
    add(
        false, params, [footprint](auto q, int, KernelFootprint* f) { return footprint(q, f); },
        [launch](auto q, int) { return launch(q); });
  };
  MatmulContext* mmc = mm.get();
  const bool same_arithmetic = opt.overlap_conventional_arithmetic;
  const int chunks = opt.overlap_vendor_chunks;
  const bool chain = opt.overlap_pdl_chain;
  auto matmul_op = [&](const bf16* x, const bf16* w, float* y, int n, int k,
                       const NormFold& fold = NormFold{},
                       const SiluMulFold& silu_fold = SiluMulFold{},
                       const SiluMulEpilogue& silu_out = SiluMulEpilogue{},
                       unsigned long long* argmax = nullptr) {
    MatmulParams p = matmul_params(x, w, y, DType::F32, b, n, k);
    p.fold = fold;
    p.silu_fold = silu_fold;
    p.silu_out = silu_out;
    p.argmax_out = argmax;
    // The conventional step's path (the chain's launches are PDL ones: the path of the
    // conventional step with PDL), or with the v0 arithmetic always the small-m kernel.
    p.launch.pdl = chain;
    const MatmulPath path = same_arithmetic ? mmc->path(p) : MatmulPath::SmallM;
    if (path == MatmulPath::CublasLt) {
      // The conventional step's cuBLASLt call, unmodified: one launch in stream order, or with
      // chunks > 1 behind a gate (kernels/tile_gate.cuh), one call per N range, each signalling
      // its share.
      OverlapOp op;
      op.name = st.op_names[ops.size()];
      op.opaque = true;
      // One launch needs no gate and no signal: stream order and the barrier after the op do
      // their work, two kernel launches fewer per vendor GEMM. Chunks keep the gate and a signal
      // per chunk (issue 3 item 5: a vendor GEMM taking part at chunk granularity).
      op.stream_ordered = chunks == 1;
      op.footprint = [](int, KernelFootprint* f) { return tile_gate_footprint(f); };
      if (op.stream_ordered) {
        op.launch = [p, mmc](int, const TileSync&, bool, cudaStream_t s) {
          MatmulParams q = p;
          q.launch = LaunchOptions{s, false};
          return mmc->run_cublaslt(q);
        };
        ops.push_back(std::move(op));
        return;
      }
      op.launch = [p, mmc, chunks](int, const TileSync& sync, bool, cudaStream_t s) {
        // No wait: stream order or the barrier before it already ordered the producer.
        if (sync.wait_counter[0] != nullptr)
          if (const cudaError_t err = launch_tile_gate(sync, s); err != cudaSuccess) return err;
        const int c = std::min(chunks, p.n);
        for (int i = 0; i < c; ++i) {
          const int n0 = static_cast<int>(static_cast<int64_t>(p.n) * i / c);
          const int n1 = static_cast<int>(static_cast<int64_t>(p.n) * (i + 1) / c);
          MatmulParams q = p;
          q.w = p.w + static_cast<int64_t>(n0) * p.k;
          q.y = static_cast<float*>(p.y) + n0;
          q.n = n1 - n0;
          q.launch = LaunchOptions{s, false};
          if (const cudaError_t err = mmc->run_cublaslt(q); err != cudaSuccess) return err;
          if (sync.signal_counter == nullptr) continue;  // a dropped signal (watchdog test)
          if (const cudaError_t err = launch_tile_signal(sync, tile_gate_chunk_share(i, c), s);
              err != cudaSuccess)
            return err;
        }
        return cudaSuccess;
      };
      ops.push_back(std::move(op));
      return;
    }
    // megaops' own kernels: the matmul paths with hooks, the one the conventional step runs.
    if (path == MatmulPath::Stream) {
      add_capped(
          p,
          [mmc](const MatmulParams& q, KernelFootprint* f) { return mmc->stream_footprint(q, f); },
          [mmc](const MatmulParams& q) { return mmc->run_stream(q); });
      return;
    }
    add_capped(p, MatmulContext::small_m_footprint,
               [mmc](const MatmulParams& q) { return mmc->run_small_m(q); });
  };
  // The op of a producer folded into the matmul after it: it keeps its name and counter id,
  // occupies nothing and launches nothing.
  auto add_folded = [&] {
    OverlapOp op;
    op.name = st.op_names[ops.size()];
    op.folded = true;
    op.footprint = [](int, KernelFootprint* f) {
      f->ctas = 0;
      f->blocks_per_sm = 1;
      return cudaSuccess;
    };
    op.launch = [](int, const TileSync&, bool, cudaStream_t) { return cudaSuccess; };
    ops.push_back(std::move(op));
  };
  // Whether the chain folds the producer of x into the matmul y [b, n] = x . w^T (k = x's width):
  // where that matmul runs on the bulk streaming kernel, the only one that folds.
  auto folds_into = [&](const bf16* x, const bf16* w, float* y, int n, int k) {
    MatmulParams q = matmul_params(x, w, y, DType::F32, b, n, k);
    q.launch.pdl = chain;
    return chain && same_arithmetic && mmc->path(q) == MatmulPath::Stream && mmc->stream_bulk();
  };
  // The residual stream: the norms update it in place; a folded norm's matmul reads it and
  // writes the sum into the other buffer, which becomes the stream.
  float* resid = st.resid;
  auto norm_op = [&](const float* delta_in, const bf16* w, bf16* out) {
    const AddRmsNormParams p = add_rmsnorm_params(resid, delta_in, w, out, b);
    add_fixed(p, add_rmsnorm_footprint, launch_add_rmsnorm);
  };
  // A norm and the matmul that reads its output: in the PDL chain with
  // ExecutorOptions::overlap_fold_norms, where the matmul runs on the bulk streaming kernel
  // (the only one that folds, kernels/norm_fold.cuh), the norm becomes a placeholder op that
  // launches nothing and the matmul computes it in its prologue, bit for bit.
  // `silu_out`: the SwiGLU in the matmul's epilogue (silu_gate_up below decides).
  // `argmax`: greedy sampling in the matmul's epilogue (the LM head; greedy_epilogue decides).
  auto norm_matmul_op = [&](const float* delta_in, const bf16* ln, bf16* normed, const bf16* w,
                            float* y, int n, const SiluMulEpilogue& silu_out = SiluMulEpilogue{},
                            unsigned long long* argmax = nullptr) {
    // resid_alt exists exactly when the chain folds norms (setup_overlap).
    if (st.resid_alt == nullptr || !folds_into(normed, w, y, n, h)) {
      norm_op(delta_in, ln, normed);
      matmul_op(normed, w, y, n, h, NormFold{}, SiluMulFold{}, silu_out, argmax);
      return;
    }
    add_folded();
    float* next = resid == st.resid ? st.resid_alt : st.resid;
    matmul_op(nullptr, w, y, n, h,
              norm_fold(add_rmsnorm_params(resid, delta_in, ln, nullptr, b), next), SiluMulFold{},
              silu_out, argmax);
    resid = next;
  };
  // In the chain with ExecutorOptions::overlap_silu_epilogue_min_inter, where gate_up runs on the
  // bulk streaming kernel: the SwiGLU in its epilogue, writing act (kernels/act_fold.cuh); else
  // off.
  auto silu_gate_up = [&](const bf16* normed, const bf16* w, float* gu, bf16* act) {
    SiluMulEpilogue e;
    const int min_inter = opt.overlap_silu_epilogue_min_inter;
    if (min_inter >= 0 && inter >= min_inter && inter % 4 == 0 &&
        folds_into(normed, w, gu, 2 * inter, h)) {
      e.out = act;
      e.ld = inter;
      e.inter = inter;
    }
    return e;
  };

  auto silu_op = [&](const float* gu, bf16* act) {
    SiluMulParams sp;
    sp.gate_up_f32 = gu;
    sp.out = act;
    sp.m = b;
    sp.inter = inter;
    add_capped(sp, silu_mul_footprint, launch_silu_mul);
  };
  // SiLU·mul and the down projection: in the PDL chain with ExecutorOptions::overlap_fold_silu,
  // where down runs on the bulk streaming kernel, SiLU·mul becomes a placeholder and down
  // computes the activation from the gate|up rows in its prologue (kernels/act_fold.cuh), bit
  // for bit.
  // `in_epilogue`: gate_up's epilogue wrote act (silu_gate_up): SiLU·mul's op launches nothing.
  auto silu_down_op = [&](const float* gu, bf16* act, const bf16* w, float* y,
                          bool in_epilogue = false) {
    if (in_epilogue) {
      add_folded();
      matmul_op(act, w, y, h, inter);
      return;
    }
    if (!opt.overlap_fold_silu || !folds_into(act, w, y, h, inter)) {
      silu_op(gu, act);
      matmul_op(act, w, y, h, inter);
      return;
    }
    add_folded();
    SiluMulFold f;
    f.gate_up = gu;
    matmul_op(nullptr, w, y, h, inter, NormFold{}, f);
  };

  // qkv_rope and the attention after it, as the conventional step launches attention (default
  // split count, the last CTA of a group merges; its signal comes after the merge, so the consumer
  // sees merged rows; the merge counters are shared with the conventional step: the two never run
  // at once, and the attention ops of two layers are never live together, ten ops apart, W <= 8).
  // In the PDL chain with ExecutorOptions::overlap_fold_rope, where attention takes the
  // per-query-head kernel (decode_attention_can_fold_rope: batches 1-2), qkv_rope becomes a
  // placeholder and attention computes q and the newest k / v rows from the qkv rows in its
  // prologue and writes those rows to the cache (kernels/rope_fold.cuh), bit for bit.
  auto rope_attention_op = [&](const LayerWeights& W, const OverlapLayer& A) {
    const QkvRopeParams rp = qkv_rope_params(W, A.qkv, A.q, dec_pos, dec_slots, b);
    DecodeAttentionParams ap = decode_attention_params(W, A.q, A.attn, A.ws, dec_slots, dec_ctx, b);
    ap.done_counters = attn_done;
    const bool fold = chain && opt.overlap_fold_rope && decode_attention_can_fold_rope(ap);
    if (fold) {
      add_folded();
      ap.rope = rope_fold(rp);
    } else {
      add_capped(rp, qkv_rope_footprint, launch_qkv_rope);
    }
    add_fixed(
        ap,
        [](const DecodeAttentionParams& q, KernelFootprint* f) {
          KernelFootprint unused;
          return decode_attention_footprint(q, f, &unused);
        },
        launch_decode_attention_split);
  };

  const EmbeddingParams ep = embedding_params(dec_tokens, st.resid, b);
  add_fixed(ep, embedding_footprint, launch_embedding);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const LayerWeights& W = layers[l];
    const OverlapLayer& A = st.layers[l];
    norm_matmul_op(l == 0 ? nullptr : st.layers[l - 1].down, W.ln1, A.n1, W.wqkv, A.qkv,
                   qd + 2 * kvd);
    if (same_arithmetic) {
      // The conventional step's launches (rope_attention_op).
      rope_attention_op(W, A);
      matmul_op(A.attn, W.wo, A.o, h, qd);
      ops.back().o_proj_weight_bytes = int64_t{h} * qd * 2;
      const SiluMulEpilogue silu_out = silu_gate_up(A.n2, W.wgu, A.gu, A.act);
      norm_matmul_op(A.o, W.ln2, A.n2, W.wgu, A.gu, 2 * inter, silu_out);
      silu_down_op(A.gu, A.act, W.wdown, A.down, silu_out.on());
      continue;
    }
    add_capped(qkv_rope_params(W, A.qkv, A.q, dec_pos, dec_slots, b), qkv_rope_footprint,
               launch_qkv_rope);
    const DecodeAttentionParams ap =
        decode_attention_params(W, A.q, A.attn, A.ws, dec_slots, dec_ctx, b);
    // The split count fixes the workspace layout, so the combine launch must see the split's
    // max_split_ctas: the split op publishes its chosen budget into a cell both ops share.
    auto split_cap = std::make_shared<int>(0);
    add(
        true, ap,
        [split_cap](DecodeAttentionParams q, int cap, KernelFootprint* f) {
          q.max_split_ctas = cap;
          *split_cap = cap;
          KernelFootprint unused;
          return decode_attention_footprint(q, f, &unused);
        },
        [](DecodeAttentionParams q, int cap) {
          q.max_split_ctas = cap;
          return launch_decode_attention_split(q);
        });
    add(
        true, ap,
        [split_cap](DecodeAttentionParams q, int cap, KernelFootprint* f) {
          q.max_split_ctas = *split_cap;
          q.max_combine_ctas = cap;
          KernelFootprint unused;
          return decode_attention_footprint(q, &unused, f);
        },
        [split_cap](DecodeAttentionParams q, int cap) {
          q.max_split_ctas = *split_cap;
          q.max_combine_ctas = cap;
          return launch_decode_attention_combine(q);
        });
    matmul_op(A.attn, W.wo, A.o, h, qd);
    ops.back().o_proj_weight_bytes = int64_t{h} * qd * 2;
    norm_op(A.o, W.ln2, A.n2);
    matmul_op(A.n2, W.wgu, A.gu, 2 * inter, h);
    silu_op(A.gu, A.act);
    matmul_op(A.act, W.wdown, A.down, h, inter);
  }
  // The final norm folds into the LM head as the layers' norms fold into QKV and gate_up, where
  // the LM head runs on the bulk streaming kernel (batch 1 since bd933ec). Traced
  // (bench/results/2026-12-01-s22-call5, llama3.1-8b): the one-CTA final norm's 7.2 us and its
  // handoff leave the chain, the LM head's span grows 4.7 us (its CTAs' prologue); the step -3 us
  // in rows alternated, llama3.2-1b level (its final norm took 1.6 us). perf-notes item 43.
  // Greedy sampling in the LM head's epilogue where it streams on the bulk kernel: always with the
  // final norm folded into it, else where the rule puts it (greedy_epilogue).
  MatmulParams lm =
      matmul_params(st.final_normed, lm_head, logits, DType::F32, b, cfg.vocab_size, h);
  lm.launch.pdl = chain;
  const bool lm_folds =
      st.resid_alt != nullptr && folds_into(st.final_normed, lm_head, logits, cfg.vocab_size, h);
  unsigned long long* argmax = nullptr;
  if (same_arithmetic)
    argmax = lm_folds ? (greedy_epilogue_allowed() ? greedy_argmax : nullptr) : greedy_epilogue(lm);
  norm_matmul_op(st.layers.back().down, final_norm, st.final_normed, lm_head, logits,
                 cfg.vocab_size, SiluMulEpilogue{}, argmax);
  SampleParams sp = sample_params(b);
  sp.argmax = argmax;
  add_fixed(sp, sample_footprint, launch_sample);
  StepAdvanceParams sa = step_advance_params(b);
  sa.overlap_step = st.step;
  // Brings every counter to this step's target: ops whose successor is ordered by stream or
  // barrier do not signal, and another plan or batch may wait on their counters later.
  sa.counters = st.counters;
  sa.counters_n = static_cast<int>(st.op_names.size());
  add_fixed(
      sa,
      [](const StepAdvanceParams&, KernelFootprint* f) {
        f->ctas = 1;
        f->blocks_per_sm = 1;
        return cudaSuccess;
      },
      launch_step_advance);
  if (ops.size() != st.op_names.size()) throw Error("internal: overlap op list mismatch");
  choose_overlap_budgets(ops);
  // In the chain, the O projection triggers gate_up at the top of its wait where all of its
  // weights fit in its launch's rings (ExecutorOptions::overlap_early_trigger_o_proj): they are
  // then in flight before attention ends, and HBM would idle while attention runs; gate_up's CTAs
  // start streaming instead.
  if (chain && opt.overlap_early_trigger_o_proj)
    for (OverlapOp& op : ops) {
      if (op.o_proj_weight_bytes == 0 || op.opaque) continue;
      KernelFootprint f;
      MEGAOPS_CUDA_CHECK(op.footprint(op.cap, &f));
      op.early_trigger = f.ring_bytes * f.ctas >= op.o_proj_weight_bytes;
    }
  return ops;
}

// CTA budgets and barriers: graph/overlap_budget.h (the conditions, the argument, the rule), fed
// with this GPU's occupancy of each op's kernel. A stream-ordered vendor GEMM runs behind op k - 1
// instead of op k - W, which only narrows what is live.
void ConventionalExecutor::Impl::choose_overlap_budgets(std::vector<OverlapOp>& ops) const {
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
  // A folded op (the chain only, W = 1: its consumer follows it on the one stream) hands its wait
  // to its consumer, which waits for the folded op's producer (record_overlap_step's sync_for);
  // that producer signals exactly when the folded op waited for it.
  for (size_t k = 1; k + 1 < ops.size(); ++k)
    if (ops[k].folded) {
      ops[k + 1].waits = ops[k].waits;
      ops[k].waits = false;
      ops[k].signals = false;
    }
  // The chain's waits on the grid before (the default, ExecutorOptions::
  // overlap_chain_counter_waits off): no op waits on a counter, so none signals; step_advance
  // still brings every counter to the step's target.
  if (chain_grid_waits())
    for (OverlapOp& op : ops) op.signals = false;
  for (const OverlapOp& op : ops)
    if (op.ctas < 0 || static_cast<uint32_t>(op.ctas) > TILE_SYNC_STEP_SUM)
      throw Error("overlap: op '" + op.name + "' launches more CTAs than a counter step holds");
}

// Records (inside capture) or runs (debug: eagerly) one overlap decode step on the executor's
// stream: fork the W streams from it with an event, launch op k on stream k % W, join all streams
// back, then step_advance on the executor's stream. The join is what guarantees that no kernel of
// this step reads the overlap step counter after step_advance incremented it; step_advance also
// waits on the sampler's counter (redundant with the join, and cheap).
void ConventionalExecutor::Impl::record_overlap_step(int b) {
  setup_overlap();
  OverlapState& st = *ovl;
  auto it = st.plans.find(b);
  if (it == st.plans.end()) it = st.plans.emplace(b, build_overlap_ops(b)).first;
  std::vector<OverlapOp>& ops = it->second;
  const size_t n = ops.size() - 1;
  const size_t W = st.streams.size();
  size_t drop = ops.size();
  if (!opt.overlap_drop_signal_op.empty()) {
    for (size_t k = 0; k < ops.size(); ++k)
      if (ops[k].name == opt.overlap_drop_signal_op) drop = k;
    if (drop == ops.size())
      throw_input_error("executor", "overlap_drop_signal_op",
                        "no overlap op named '" + opt.overlap_drop_signal_op + "'");
    if (!ops[drop].signals)
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

ConventionalExecutor::ConventionalExecutor(const ModelConfig& cfg, const WeightFiller& weights,
                                           ExecutorOptions opt,
                                           const std::function<void(size_t, size_t)>& progress)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.full_cfg = cfg;
  s.cfg = cfg;
  s.opt = opt;
  // Tensor parallelism: validate, then compute with this rank's configuration.
  if (opt.tp > 1 && opt.tp_comm == nullptr)
    throw_input_error(
        "executor", "tp_comm",
        "tp = " + std::to_string(opt.tp) + " needs a communicator (runtime/tp_comm.h)");
  const TpShape tp_part = tp_shape(cfg, opt.tp, opt.tp_rank);
  if (opt.tp_comm != nullptr) {
    if (opt.backend == DecodeBackend::Overlap)
      throw_input_error("executor", "backend",
                        "the overlap backend does not run with tensor parallelism yet");
    if (opt.prefill_path == PrefillPath::DecodeGraph)
      throw_input_error("executor", "prefill_path",
                        "the decode-graph prefill does not run with tensor parallelism yet");
    s.comm = static_cast<ncclComm_t>(opt.tp_comm);
    s.cfg = tp_rank_config(cfg, tp_part);
    s.vocab0 = tp_part.vocab0;
    s.vocab_part = tp_part.vocab;
    s.vocab_pad = (cfg.vocab_size + opt.tp - 1) / opt.tp;
  }
  if (opt.max_batch < 1 || opt.max_batch > MATMUL_SMALL_M_MAX)
    throw_input_error("executor", "max_batch",
                      "expected 1.." + std::to_string(MATMUL_SMALL_M_MAX) + ", found " +
                          std::to_string(opt.max_batch));
  if (opt.max_seq < 1 || opt.max_seq > cfg.max_position_embeddings)
    throw_input_error("executor", "max_seq",
                      "expected 1.." + std::to_string(cfg.max_position_embeddings) +
                          " (max_position_embeddings), found " + std::to_string(opt.max_seq));
  if (opt.prefill_chunk < 1) throw_input_error("executor", "prefill_chunk", "expected >= 1");
  // A prefill never holds more than max_batch * max_seq tokens, so no chunk needs to be larger:
  // short-context executors do not pay for 2048-token activation buffers.
  s.opt.prefill_chunk = static_cast<int>(
      std::min<int64_t>(opt.prefill_chunk, static_cast<int64_t>(opt.max_batch) * opt.max_seq));

  if (opt.overlap_streams < 1 || opt.overlap_streams > 8)
    throw_input_error("executor", "overlap_streams",
                      "expected 1..8, found " + std::to_string(opt.overlap_streams));
  if (s.opt.overlap_pdl_chain && s.opt.overlap_streams != 1)
    throw_input_error("executor", "overlap_pdl_chain",
                      "needs overlap_streams 1 (one stream carries the chain), found " +
                          std::to_string(s.opt.overlap_streams));
  if (opt.overlap_vendor_chunks < 1 || opt.overlap_vendor_chunks > 64)
    throw_input_error("executor", "overlap_vendor_chunks",
                      "expected 1..64, found " + std::to_string(opt.overlap_vendor_chunks));
  if (opt.tp_peer_watchdog_ms < 0)
    throw_input_error("executor", "tp_peer_watchdog_ms",
                      "expected >= 0, found " + std::to_string(opt.tp_peer_watchdog_ms));
  if (opt.wait_sleep_max_ns > MAX_WAIT_SLEEP_MAX_NS)
    throw_input_error("executor", "wait_sleep_max_ns",
                      "expected 0.." + std::to_string(MAX_WAIT_SLEEP_MAX_NS) + ", found " +
                          std::to_string(opt.wait_sleep_max_ns));

  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  s.mm = std::make_unique<MatmulContext>(opt.matmul);

  const ModelConfig& rc = s.cfg;  // this rank's shapes (the model's without tensor parallelism)
  const int h = rc.hidden_size, qd = rc.q_dim(), kvd = rc.kv_dim(), inter = rc.intermediate_size;
  auto alloc_bf16 = [&](const std::string& what, size_t n) {
    return s.mem.alloc_array<bf16>(what, n);
  };
  s.embed = alloc_bf16("embed_tokens", static_cast<size_t>(cfg.vocab_size) * h);
  s.final_norm = alloc_bf16("model.norm", h);
  // Under tensor parallelism the LM head is this rank's rows, also when the embedding is tied.
  s.lm_head =
      cfg.tie_word_embeddings && s.comm == nullptr
          ? s.embed
          : alloc_bf16("lm_head", static_cast<size_t>(s.comm ? s.vocab_part : cfg.vocab_size) * h);
  s.layers.resize(cfg.num_layers);
  const size_t kv_elems = static_cast<size_t>(opt.max_batch) * opt.max_seq * kvd;
  for (int l = 0; l < cfg.num_layers; ++l) {
    LayerWeights& L = s.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    L.ln1 = alloc_bf16(p + "input_layernorm", h);
    L.wqkv = alloc_bf16(p + "qkv_proj", static_cast<size_t>(qd + 2 * kvd) * h);
    if (cfg.has_qk_norm()) {
      L.q_norm = alloc_bf16(p + "q_norm", cfg.head_dim);
      L.k_norm = alloc_bf16(p + "k_norm", cfg.head_dim);
    }
    L.wo = alloc_bf16(p + "o_proj", static_cast<size_t>(h) * qd);
    L.ln2 = alloc_bf16(p + "post_attention_layernorm", h);
    L.wgu = alloc_bf16(p + "gate_up_proj", static_cast<size_t>(2 * inter) * h);
    L.wdown = alloc_bf16(p + "down_proj", static_cast<size_t>(h) * inter);
    L.k_cache = alloc_bf16(p + "k_cache", kv_elems);
    L.v_cache = alloc_bf16(p + "v_cache", kv_elems);
  }

  // Upload: each HF tensor goes to its place (q/k/v and gate/up are concatenated row blocks).
  const std::vector<WeightSpec> specs = expected_weights(cfg);
  size_t total = 0;
  for (const auto& spec : specs) {
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    total += n * 2;
  }
  // A decode step reads one embedding row, so an untied embedding table is not streamed.
  s.weight_bytes =
      total - (cfg.tie_word_embeddings ? 0 : static_cast<size_t>(cfg.vocab_size) * h * 2);
  if (s.comm != nullptr) {
    // What this rank streams: its shards, the replicated norms, its LM head rows.
    size_t mine = 0;
    for (const auto& spec : specs) {
      const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
      const TpSlice sl = tp_slice(cfg, tp_part, spec.name);
      if (spec.name == "model.embed_tokens.weight") continue;  // one row per step
      mine += static_cast<size_t>(sl.split == TpSplit::Replicated ? rows * cols
                                  : sl.split == TpSplit::Rows     ? (sl.end - sl.begin) * cols
                                                                  : rows * (sl.end - sl.begin)) *
              2;
    }
    if (cfg.tie_word_embeddings) mine += static_cast<size_t>(s.vocab_part) * h * 2;
    s.weight_bytes = mine;
  }
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  size_t done = 0;
  // Converts `src` to bf16 and copies it to `to`.
  auto upload = [&](const std::vector<float>& src, bf16* to) {
    b16.resize(src.size());
    parallel_for(src.size(), 1 << 20, [&](size_t b, size_t e) {
      from_float(DType::BF16, src.data() + b, b16.data() + b, e - b);
    });
    MEGAOPS_CUDA_CHECK(cudaMemcpy(to, b16.data(), src.size() * 2, cudaMemcpyHostToDevice));
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& spec = specs[i];
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    f32.resize(n);
    weights(spec, i, f32.data());
    const std::string& name = spec.name;
    const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    if (s.comm != nullptr) {
      // This rank's shard (models/tensor_parallel.h); a tied table also gives the LM head rows.
      if (name == "model.embed_tokens.weight" && cfg.tie_word_embeddings)
        upload(tp_cut(f32, rows, cols, tp_slice(cfg, tp_part, name, /*as_lm_head=*/true)),
               s.lm_head);
      f32 = tp_cut(f32, rows, cols, tp_slice(cfg, tp_part, name));
      n = f32.size();
    }
    bf16* dst = nullptr;
    if (name == "model.embed_tokens.weight") {
      dst = s.embed;
    } else if (name == "model.norm.weight") {
      dst = s.final_norm;
    } else if (name == "lm_head.weight") {
      dst = s.lm_head;
    } else {
      const size_t dot = name.find('.', 13);  // "model.layers.N."
      const int l = std::stoi(name.substr(13, dot - 13));
      const std::string suffix = name.substr(dot + 1);
      LayerWeights& L = s.layers[l];
      if (suffix == "input_layernorm.weight") dst = L.ln1;
      if (suffix == "post_attention_layernorm.weight") dst = L.ln2;
      if (suffix == "self_attn.q_proj.weight") dst = L.wqkv;
      if (suffix == "self_attn.k_proj.weight") dst = L.wqkv + static_cast<size_t>(qd) * h;
      if (suffix == "self_attn.v_proj.weight") dst = L.wqkv + static_cast<size_t>(qd + kvd) * h;
      if (suffix == "self_attn.q_norm.weight") dst = L.q_norm;
      if (suffix == "self_attn.k_norm.weight") dst = L.k_norm;
      if (suffix == "self_attn.o_proj.weight") dst = L.wo;
      if (suffix == "mlp.gate_proj.weight") dst = L.wgu;
      if (suffix == "mlp.up_proj.weight") dst = L.wgu + static_cast<size_t>(inter) * h;
      if (suffix == "mlp.down_proj.weight") dst = L.wdown;
    }
    if (!dst) throw Error("internal: no device placement for weight " + name);
    upload(f32, dst);
    done += n * 2;
    if (progress) progress(done, total);
  }

  const std::vector<float> inv = rope_inv_freq(cfg);
  s.inv_freq = s.mem.alloc_array<float>("rope inv_freq", inv.size());
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(s.inv_freq, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));

  const int T = std::max(s.opt.prefill_chunk, opt.max_batch);
  s.max_tokens = T;
  s.residual = s.mem.alloc_array<float>("residual", static_cast<size_t>(T) * h);
  s.normed = alloc_bf16("normed", static_cast<size_t>(T) * h);
  s.qkv = s.mem.alloc_array<float>("qkv", static_cast<size_t>(T) * (qd + 2 * kvd));
  s.q = alloc_bf16("q", static_cast<size_t>(T) * qd);
  s.attn = alloc_bf16("attention output", static_cast<size_t>(T) * qd);
  s.delta = s.mem.alloc_array<float>("projection output", static_cast<size_t>(T) * h);
  s.gu = s.mem.alloc_array<float>("gate_up", static_cast<size_t>(T) * 2 * inter);
  s.act = alloc_bf16("silu_mul", static_cast<size_t>(T) * inter);
  s.lm_in = alloc_bf16("lm_head input", static_cast<size_t>(opt.max_batch) * h);
  s.logits =
      s.mem.alloc_array<float>("logits", static_cast<size_t>(opt.max_batch) * cfg.vocab_size);
  if (s.comm != nullptr) {
    const size_t block = static_cast<size_t>(opt.max_batch) * s.vocab_pad;
    s.logits_part = s.mem.alloc_array<float>("logits, this rank's rows", block);
    s.logits_all = s.mem.alloc_array<float>("logits, every rank's rows", block * opt.tp);
  }
  s.attn_ws = s.mem.alloc_array<float>(
      "attention workspace",
      decode_attention_workspace_floats(opt.max_batch, cfg.num_heads, cfg.head_dim, opt.max_seq));
  const size_t n_done = static_cast<size_t>(opt.max_batch) * cfg.num_kv_heads;
  s.attn_done = s.mem.alloc_array<uint32_t>("attention merge counters", n_done);
  MEGAOPS_CUDA_CHECK(cudaMemset(s.attn_done, 0, n_done * sizeof(uint32_t)));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the executor's stream does not wait for memsets
  s.tok_ids = s.mem.alloc_array<int32_t>("prefill ids", T);
  s.tok_pos = s.mem.alloc_array<int32_t>("prefill positions", T);
  s.tok_slot = s.mem.alloc_array<int32_t>("prefill slots", T);
  s.dec_tokens = s.mem.alloc_array<int32_t>("decode tokens", opt.max_batch);
  s.dec_pos = s.mem.alloc_array<int32_t>("decode positions", opt.max_batch);
  s.dec_ctx = s.mem.alloc_array<int32_t>("decode context lengths", opt.max_batch);
  s.dec_slots = s.mem.alloc_array<int32_t>("decode slots", opt.max_batch);
  // The step counter and the greedy argmax packs (zeroed) in one allocation, 64 bytes apart.
  constexpr size_t PACKS_AT = 64;
  uint8_t* step_state = static_cast<uint8_t*>(
      s.mem.alloc("step counter and greedy argmax packs",
                  PACKS_AT + static_cast<size_t>(opt.max_batch) * sizeof(unsigned long long)));
  s.step = reinterpret_cast<uint32_t*>(step_state);
  s.greedy_argmax = reinterpret_cast<unsigned long long*>(step_state + PACKS_AT);
  MEGAOPS_CUDA_CHECK(cudaMemset(s.greedy_argmax, 0,
                                static_cast<size_t>(opt.max_batch) * sizeof(unsigned long long)));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the executor's stream does not wait for memsets
  // Mapped: step_advance writes each step's tokens straight into it (the toolkit's unified
  // addressing makes the host pointer the device's).
  MEGAOPS_CUDA_CHECK(
      cudaHostAlloc(&s.host_tokens, 3 * opt.max_batch * sizeof(int32_t), cudaHostAllocMapped));
  // The overlap backend's state (streams, counters, watchdog, buffers, preloaded kernels) exists
  // from construction when it is the configured backend, so the first step cannot hit a lazy
  // module load (DESIGN rule 1); a conventional executor sets it up only if switched later.
  if (opt.backend == DecodeBackend::Overlap) s.setup_overlap();
  if (opt.tp_reduce == TpReduce::Peer) s.setup_peer_reduce();
}

// TpReduce::Peer: this rank's slots and counters in one cudaMalloc (an IPC handle covers a whole
// allocation), the handles exchanged over the communicator (an NCCL all-gather of 64 bytes per
// rank), the peers' allocations mapped here. IPC maps memory of GPUs of this host only.
void ConventionalExecutor::Impl::setup_peer_reduce() {
  if (comm == nullptr)
    throw_input_error("executor", "tp_reduce", "peer needs a communicator (tp_comm)");
  if (opt.tp > TP_PEER_MAX)
    throw_input_error("executor", "tp_reduce",
                      "peer reduces over at most " + std::to_string(TP_PEER_MAX) +
                          " ranks of one host, found tp = " + std::to_string(opt.tp));
  auto p = std::make_unique<PeerReduce>();
  const size_t sites = 2 * static_cast<size_t>(cfg.num_layers);
  p->slot_floats = static_cast<size_t>(opt.max_batch) * cfg.hidden_size;
  p->counters_offset = (sites * p->slot_floats * sizeof(float) + 255) / 256 * 256;
  const size_t bytes = p->counters_offset + sites * sizeof(uint32_t);
  if (const cudaError_t err = cudaMalloc(&p->base, bytes); err != cudaSuccess)
    throw DeviceError("tensor parallel peer reduce: cannot allocate " + std::to_string(bytes) +
                      " bytes of partial slots: " + cudaGetErrorString(err));
  peer = std::move(p);  // freed by ~Impl from here on, also if the rest throws
  MEGAOPS_CUDA_CHECK(cudaMemset(peer->base, 0, bytes));
  peer->step = mem.alloc_array<uint32_t>("tp decode step", 1);
  MEGAOPS_CUDA_CHECK(cudaMemset(peer->step, 0, sizeof(uint32_t)));
  // ExecutorOptions::tp_peer_watchdog_ms: 30 s by default, since ranks reach a step at
  // host-dependent times (graph capture, printing); a lost signal is still an error, not a hang.
  peer->watchdog = std::make_unique<WatchdogRecord>(static_cast<uint64_t>(opt.tp_peer_watchdog_ms),
                                                    opt.wait_sleep_max_ns);
  for (int l = 0; l < cfg.num_layers; ++l)
    for (const char* op : {"o_proj", "down_proj"})
      peer->site_names.push_back("layer " + std::to_string(l) + " " + op + " peer reduce");
  peer->rank_base.assign(opt.tp, nullptr);
  peer->rank_base[opt.tp_rank] = static_cast<char*>(peer->base);
  if (opt.tp > 1) {
    cudaIpcMemHandle_t own;
    MEGAOPS_CUDA_CHECK(cudaIpcGetMemHandle(&own, peer->base));
    const size_t hb = sizeof(cudaIpcMemHandle_t);
    char* dev = nullptr;
    MEGAOPS_CUDA_CHECK(cudaMalloc(&dev, hb * (opt.tp + 1)));
    std::vector<char> all(hb * opt.tp);
    const cudaError_t up = cudaMemcpy(dev + hb * opt.tp, &own, hb, cudaMemcpyHostToDevice);
    const ncclResult_t nr = up == cudaSuccess ? nccl_api().all_gather(dev + hb * opt.tp, dev, hb,
                                                                      ncclUint8, comm, stream)
                                              : ncclSuccess;
    const cudaError_t sync = up == cudaSuccess ? cudaStreamSynchronize(stream) : up;
    const cudaError_t down = sync == cudaSuccess
                                 ? cudaMemcpy(all.data(), dev, all.size(), cudaMemcpyDeviceToHost)
                                 : sync;
    cudaFree(dev);
    nccl_check(nr, "peer reduce: exchanging IPC handles");
    MEGAOPS_CUDA_CHECK(down);
    for (int r = 0; r < opt.tp; ++r) {
      if (r == opt.tp_rank) continue;
      cudaIpcMemHandle_t h;
      std::memcpy(&h, all.data() + hb * r, hb);
      void* mapped = nullptr;
      const cudaError_t err = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess)
        throw DeviceError("tensor parallel peer reduce: cannot map rank " + std::to_string(r) +
                          "'s memory (all ranks must be GPUs of one host with peer access; use "
                          "the NCCL reduce otherwise): " +
                          cudaGetErrorString(err));
      peer->rank_base[r] = static_cast<char*>(mapped);
    }
  }
  MEGAOPS_CUDA_CHECK(preload_tp_reduce_kernels());
  peer->ready = true;
}

// Releases what the executor created. In Impl, not in ~ConventionalExecutor: when the constructor
// throws part-way (an out-of-memory buffer, a bad weight), impl_ is already a complete member and
// is destroyed, so the stream, events, graphs and the pinned token buffer made so far are freed
// too (device buffers are freed by `mem` afterwards).
ConventionalExecutor::Impl::~Impl() {
  if (peer) {
    // The peers may still read this rank's slots in their last reduce: an all-reduce of one float
    // completes here only once every rank has reached it, i.e. finished its decode steps.
    if (stream) cudaStreamSynchronize(stream);
    // (Not after a failed set-up: the other ranks may never reach the barrier.)
    if (peer->ready && comm != nullptr && opt.tp > 1 && delta != nullptr) {
      nccl_api().all_reduce(delta, delta, 1, ncclFloat32, ncclSum, comm, stream);
      cudaStreamSynchronize(stream);
    }
    for (int r = 0; r < static_cast<int>(peer->rank_base.size()); ++r)
      if (r != opt.tp_rank && peer->rank_base[r] != nullptr)
        cudaIpcCloseMemHandle(peer->rank_base[r]);
    cudaFree(peer->base);
  }
  for (cudaEvent_t e : prof_events) cudaEventDestroy(e);
  for (cudaEvent_t e : ring_done)
    if (e) cudaEventDestroy(e);
  for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  if (stream) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (OverlapState* o = ovl.get()) {
    for (cudaStream_t x : o->streams) {
      cudaStreamSynchronize(x);
      cudaStreamDestroy(x);
    }
    if (o->fork) cudaEventDestroy(o->fork);
    for (cudaEvent_t e : o->joins) cudaEventDestroy(e);
  }
  if (host_tokens) cudaFreeHost(host_tokens);
}

ConventionalExecutor::~ConventionalExecutor() = default;

const ModelConfig& ConventionalExecutor::config() const {
  return impl_->full_cfg;
}
const ExecutorOptions& ConventionalExecutor::options() const {
  return impl_->opt;
}
cudaStream_t ConventionalExecutor::stream() const {
  return impl_->stream;
}
size_t ConventionalExecutor::weight_bytes() const {
  return impl_->weight_bytes;
}
void ConventionalExecutor::set_pdl(bool pdl) {
  impl_->opt.pdl = pdl;
}
void ConventionalExecutor::set_prefill_path(PrefillPath path) {
  if (path == PrefillPath::DecodeGraph && impl_->comm != nullptr)
    throw_input_error("executor", "prefill_path",
                      "the decode-graph prefill does not run with tensor parallelism yet");
  impl_->opt.prefill_path = path;
}
void ConventionalExecutor::set_backend(DecodeBackend backend) {
  if (backend == DecodeBackend::Overlap) impl_->setup_overlap();
  impl_->opt.backend = backend;
}
void ConventionalExecutor::set_overlap_delay(uint32_t max_ns, uint64_t seed) {
  impl_->opt.overlap_delay_max_ns = max_ns;
  impl_->opt.overlap_delay_seed = seed;
  // Delays are baked into the captured kernel parameters.
  impl_->drop_overlap_graphs();
}
void ConventionalExecutor::set_overlap_regions(
    const std::vector<ExecutorOptions::OverlapRegion>& regions) {
  Impl& s = *impl_;
  const std::vector<ExecutorOptions::OverlapRegion> before = s.opt.overlap_regions;
  s.opt.overlap_regions = regions;
  if (!s.ovl) return;  // applied (and validated) when the overlap state is set up
  try {
    s.apply_overlap_regions(*s.ovl);
  } catch (...) {
    s.opt.overlap_regions = before;
    throw;
  }
  // The op lists (budgets, segments) and the captured steps follow the regions.
  s.ovl->plans.clear();
  s.drop_overlap_graphs();
}
std::vector<std::string> ConventionalExecutor::overlap_op_names() const {
  impl_->setup_overlap();
  return impl_->ovl->op_names;
}

std::vector<TraceEvent> ConventionalExecutor::take_overlap_trace(uint64_t* dropped) {
  Impl& s = *impl_;
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
    e.smid = r.smid;
    e.wait_start_ns = r.wait_start_ns;
    e.wait_end_ns = r.wait_end_ns;
    e.work_end_ns = r.work_end_ns;
    out.push_back(std::move(e));
  }
  return out;
}

// KV-cache bytes of one cached position over all layers (k and v, bf16).
static size_t kv_bytes_per_position(const ModelConfig& cfg) {
  return static_cast<size_t>(cfg.kv_dim()) * 2 /*k and v*/ * 2 /*bytes*/ * cfg.num_layers;
}

size_t ConventionalExecutor::kv_bytes_read() const {
  const Impl& s = *impl_;
  size_t positions = 0;
  for (int b = 0; b < s.batch; ++b) positions += static_cast<size_t>(s.host_pos[b]) + 1;
  return positions * kv_bytes_per_position(s.cfg);
}

size_t ConventionalExecutor::kv_bytes_per_step() const {
  const Impl& s = *impl_;
  return static_cast<size_t>(s.batch) * kv_bytes_per_position(s.cfg);
}

// A sampler's NONFINITE_LOGITS_TOKEN (core/tokens.h) is an error of the step that produced it,
// never a token handed on. `where` names the step; `positions` (may be null) each sequence's
// position in it.
static void check_sampled(const int32_t* tokens, int b, const std::string& where,
                          const std::vector<int>* positions) {
  for (int r = 0; r < b; ++r)
    if (tokens[r] == NONFINITE_LOGITS_TOKEN)
      throw Error(where + ": sequence " + std::to_string(r) +
                  (positions ? " at position " + std::to_string((*positions)[r]) : "") +
                  ": the logits hold NaN or Inf; no token was sampled");
}

static void check_ids(const std::vector<int>& ids, int vocab, const char* what) {
  for (int id : ids)
    if (id < 0 || id >= vocab)
      throw_input_error(what, "",
                        "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
}

std::vector<int> ConventionalExecutor::prefill(const std::vector<std::vector<int>>& prompts) {
  Impl& s = *impl_;
  const int B = static_cast<int>(prompts.size());
  if (B < 1 || B > s.opt.max_batch)
    throw_input_error("prefill", "batch",
                      "expected 1.." + std::to_string(s.opt.max_batch) +
                          " sequences (the allocated batch), found " + std::to_string(B));
  for (int b = 0; b < B; ++b) {
    if (prompts[b].empty())
      throw_input_error("prefill", "prompt " + std::to_string(b), "empty prompt");
    check_ids(prompts[b], s.cfg.vocab_size, "prompt");
    if (static_cast<int>(prompts[b].size()) >= s.opt.max_seq)
      throw_input_error("prefill", "prompt " + std::to_string(b),
                        "context of " + std::to_string(prompts[b].size() + 1) +
                            " tokens exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  }
  // Flatten all prompts: token ids, positions and the sequence (slot) of every prompt row.
  std::vector<int32_t> ids, pos, slot;
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      ids.push_back(prompts[b][i]);
      pos.push_back(static_cast<int32_t>(i));
      slot.push_back(b);
    }
  if (s.opt.prefill_path == PrefillPath::DecodeGraph)
    s.prefill_via_decode_graph(ids, pos, slot, B);
  else
    s.prefill_layers(ids, pos, slot, B);
  std::vector<int32_t> dpos(B), dctx(B), dslot(B);
  for (int b = 0; b < B; ++b) {
    dpos[b] = static_cast<int32_t>(prompts[b].size());
    dctx[b] = dpos[b] + 1;
    dslot[b] = b;
  }
  const uint32_t step1 = 1;
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.step, &step1, sizeof(step1), cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_pos, dpos.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_ctx, dctx.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_slots, dslot.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.host_tokens, s.dec_tokens, B * 4, cudaMemcpyDeviceToHost, s.stream));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.batch = B;
  s.host_pos.assign(dpos.begin(), dpos.end());
  check_sampled(s.host_tokens, B, "prefill", &s.host_pos);
  return std::vector<int>(s.host_tokens, s.host_tokens + B);
}

void ConventionalExecutor::Impl::prefill_layers(const std::vector<int32_t>& ids,
                                                const std::vector<int32_t>& pos,
                                                const std::vector<int32_t>& slot, int B) {
  const int total = static_cast<int>(ids.size());
  const int h = cfg.hidden_size;
  // Chunks of prefill_chunk rows; a sequence's last row is copied to lm_in[slot].
  for (int c0 = 0; c0 < total; c0 += opt.prefill_chunk) {
    const int t = std::min(opt.prefill_chunk, total - c0);
    upload_rows(tok_ids, ids, c0, t);
    upload_rows(tok_pos, pos, c0, t);
    upload_rows(tok_slot, slot, c0, t);
    run_layers(t, tok_ids, tok_pos, tok_slot, nullptr, /*decode=*/false, false);
    add_rmsnorm(delta, final_norm, normed, t, false, "final_norm");
    for (int i = c0; i < c0 + t; ++i) {
      const bool last = i + 1 == total || slot[i + 1] != slot[i];
      if (!last) continue;
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(lm_in + static_cast<size_t>(slot[i]) * h,
                                         normed + static_cast<size_t>(i - c0) * h, h * 2,
                                         cudaMemcpyDeviceToDevice, stream));
    }
    // Host vectors must outlive the async copies above.
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const uint32_t step0 = 0;  // the first token's sampler step
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(step, &step0, sizeof(step0), cudaMemcpyHostToDevice, stream));
  lm_head_and_sample(lm_in, B, false, /*rng_by_slot=*/false);
}

void ConventionalExecutor::Impl::check_step(cudaError_t err) {
  if (err == cudaSuccess) return;
  if (opt.backend == DecodeBackend::Overlap) overlap_check(err);  // throws
  if (peer) peer->watchdog->check(err, peer->site_names);
  MEGAOPS_CUDA_CHECK(err);
}

void ConventionalExecutor::Impl::enqueue_step(int b) {
  // Every status goes through the backend's watchdog (check_step). Overlap: after a trap the
  // context is dead and any call may fail first. Conventional under TpReduce::Peer: a hung wait
  // traps, its record names the site.
  if (!opt.debug_sync)
    check_step(cudaGraphLaunch(graph_for(b, opt.pdl), stream));
  else if (opt.backend == DecodeBackend::Overlap)
    // Eager on the W streams, then one synchronisation: per-op synchronisation would wait for a
    // consumer whose producer may not be issued yet (reverse issue order).
    record_overlap_step(b);
  else
    record_decode_step(b, opt.pdl);  // eager, checked op by op
}

void ConventionalExecutor::Impl::run_step(int b, int parity) {
  enqueue_step(b);
  check_step(cudaStreamSynchronize(stream));
  const int32_t* half = ring_half(parity);
  std::copy(half, half + b, host_tokens);
}

void ConventionalExecutor::Impl::prefill_via_decode_graph(const std::vector<int32_t>& ids,
                                                          const std::vector<int32_t>& pos,
                                                          const std::vector<int32_t>& slot, int B) {
  const int total = static_cast<int>(ids.size());
  const size_t V = static_cast<size_t>(cfg.vocab_size);
  if (!prefill_logits)
    prefill_logits = std::make_unique<CudaMemory>(static_cast<size_t>(opt.max_batch) * V * 4);
  float* staged = static_cast<float*>(prefill_logits->ptr);
  std::vector<int32_t> ctx(static_cast<size_t>(total));
  for (int r = 0; r < total; ++r) ctx[r] = pos[r] + 1;
  std::vector<int32_t> first(static_cast<size_t>(B));
  const uint32_t step0 = 0;  // every replay samples as the layer path's prefill does: step 0
  for (int c0 = 0; c0 < total; c0 += opt.max_batch) {
    const int t = std::min(opt.max_batch, total - c0);
    upload_rows(dec_tokens, ids, c0, t);
    upload_rows(dec_pos, pos, c0, t);
    upload_rows(dec_slots, slot, c0, t);
    upload_rows(dec_ctx, ctx, c0, t);
    MEGAOPS_CUDA_CHECK(
        cudaMemcpyAsync(step, &step0, sizeof(step0), cudaMemcpyHostToDevice, stream));
    run_step(t, pos[c0] & 1);  // synchronises: the host vectors above may change after it
    for (int r = c0; r < c0 + t; ++r) {
      if (r + 1 < total && slot[r + 1] == slot[r]) continue;  // not the sequence's last token
      first[slot[r]] = host_tokens[r - c0];
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(staged + slot[r] * V, logits + (r - c0) * V, V * 4,
                                         cudaMemcpyDeviceToDevice, stream));
    }
  }
  std::copy(first.begin(), first.end(), host_tokens);
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(dec_tokens, host_tokens, B * 4, cudaMemcpyHostToDevice, stream));
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(logits, staged, B * V * 4, cudaMemcpyDeviceToDevice, stream));
}

std::vector<int> ConventionalExecutor::decode_step(const std::vector<int>* forced) {
  Impl& s = *impl_;
  if (s.batch == 0) throw_input_error("decode", "", "decode_step before prefill");
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] >= s.opt.max_seq)
      throw_input_error("decode", "sequence " + std::to_string(b),
                        "context of " + std::to_string(s.host_pos[b] + 1) +
                            " tokens exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  if (forced) {
    if (static_cast<int>(forced->size()) != s.batch)
      throw_input_error(
          "decode", "forced tokens",
          "expected " + std::to_string(s.batch) + ", found " + std::to_string(forced->size()));
    check_ids(*forced, s.cfg.vocab_size, "forced tokens");
    std::copy(forced->begin(), forced->end(), s.host_tokens);
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(s.dec_tokens, s.host_tokens, s.batch * 4,
                                       cudaMemcpyHostToDevice, s.stream));
  }
  s.run_step(s.batch, s.host_pos[0] & 1);
  check_sampled(s.host_tokens, s.batch, "decode step", &s.host_pos);
  for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
  return std::vector<int>(s.host_tokens, s.host_tokens + s.batch);
}

std::vector<int> ConventionalExecutor::decode_steps(
    int steps, const std::function<void(int, const std::vector<int>&)>& on_tokens) {
  Impl& s = *impl_;
  if (s.batch == 0) throw_input_error("decode", "", "decode_steps before prefill");
  if (steps < 1)
    throw_input_error("decode", "steps", "expected >= 1, found " + std::to_string(steps));
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] + steps > s.opt.max_seq)
      throw_input_error("decode", "sequence " + std::to_string(b),
                        "context of " + std::to_string(s.host_pos[b] + steps) + " tokens after " +
                            std::to_string(steps) + " steps exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  std::vector<int> tokens;
  if (s.opt.debug_sync) {  // eager steps are checked op by op: nothing to overlap
    for (int i = 0; i < steps; ++i) {
      tokens = decode_step();
      if (on_tokens) on_tokens(i, tokens);
    }
    return tokens;
  }
  for (cudaEvent_t& e : s.ring_done)
    if (e == nullptr) MEGAOPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  // Step i's tokens land in the ring's half of its position's parity (step_advance); step i + 2
  // writes the same half, and is enqueued only after the host has read step i's (the loop
  // below), so no step overwrites a half being read.
  const int parity0 = s.host_pos[0] & 1;
  auto slot = [&s, parity0](int i) { return s.ring_half((parity0 + i) & 1); };
  auto enqueue = [&s](int i) {
    s.enqueue_step(s.batch);
    s.check_step(cudaEventRecord(s.ring_done[i % 2], s.stream));
    for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];  // the device's state once it runs
  };
  enqueue(0);
  for (int i = 0; i < steps; ++i) {
    if (i + 1 < steps) enqueue(i + 1);  // reads step i's tokens on the device
    s.check_step(cudaEventSynchronize(s.ring_done[i % 2]));
    check_sampled(slot(i), s.batch,
                  "decode step " + std::to_string(i + 1) + " of " + std::to_string(steps), nullptr);
    tokens.assign(slot(i), slot(i) + s.batch);
    if (on_tokens) on_tokens(i, tokens);
  }
  std::copy(tokens.begin(), tokens.end(), s.host_tokens);
  return tokens;
}

std::vector<ConventionalExecutor::OpTime> ConventionalExecutor::profile_decode_steps(int steps) {
  Impl& s = *impl_;
  if (s.batch == 0) throw_input_error("profile", "", "profile_decode_steps before prefill");
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] + steps > s.opt.max_seq)
      throw_input_error(
          "profile", "steps",
          "sequence " + std::to_string(b) + " would pass max_seq " + std::to_string(s.opt.max_seq));
  const size_t max_ops = static_cast<size_t>(s.cfg.num_layers) * 16 + 16;
  while (s.prof_events.size() < max_ops + 1) {
    cudaEvent_t e;
    MEGAOPS_CUDA_CHECK(cudaEventCreate(&e));
    s.prof_events.push_back(e);
  }
  s.profiling = true;
  cudaGraph_t graph = nullptr;
  try {
    graph = s.capture_step([&] {
      s.prof_ops.clear();  // a second pass (cuBLASLt tuning) records the step again
      MEGAOPS_CUDA_CHECK(
          cudaEventRecordWithFlags(s.prof_events[0], s.stream, cudaEventRecordExternal));
      s.record_decode_step(s.batch, /*pdl=*/false);
    });
  } catch (...) {
    s.profiling = false;
    throw;
  }
  s.profiling = false;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEGAOPS_CUDA_CHECK(err);
  std::vector<OpTime> out(s.prof_ops.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = {s.prof_ops[i].op, s.prof_ops[i].layer, 0.0};
  try {
    for (int r = 0; r < steps; ++r) {
      MEGAOPS_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
      MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
      for (size_t i = 0; i < out.size(); ++i) {
        float ms = 0;
        MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, s.prof_events[i], s.prof_events[i + 1]));
        out[i].us += 1e3 * ms / steps;
      }
      for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
    }
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return out;
}

std::vector<float> ConventionalExecutor::last_logits() const {
  const Impl& s = *impl_;
  std::vector<float> out(static_cast<size_t>(s.batch) * s.cfg.vocab_size);
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(out.data(), s.logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace megaops
