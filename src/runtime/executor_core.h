// The state every decode backend shares, and the functions over it: the step resources (weights
// and their upload, KV cache, activation buffers, decode state, the stream, the matmul context,
// the graph cache) and, declared here and defined in one file per backend, how each backend
// records a step: conventional_step.cu (one stream, barriers, optional PDL), overlap.cu and
// overlap_ops.cu (multi-stream tile overlap), pdl_chain.cu (the chain's rules), tp.cu (tensor
// parallelism), graph_cache.cu (capture and replay), profiler.cu (per-op times) and
// step_resources.cu (allocation, upload, teardown). Internal to runtime/: the public API is
// runtime/executor.h.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "graph/op_graph.h"
#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/matmul.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/sampling.cuh"
#include "runtime/device_memory.h"
#include "runtime/executor.h"
#include "runtime/step_state.cuh"

namespace megaops {

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

struct OverlapState;
struct OverlapOp;
struct PeerReduce;
class CudnnAttention;

struct OpTimeKey {
  std::string op;
  int layer;
};

// The rows one walk of the step graph runs over (ExecutorCore::run_ops): t rows whose token ids,
// positions, cache slots and (decode) context lengths are at ids / pos / slots / ctx, and the
// head_rows rows at head_in the LM head and sampler read.
struct StepWalk {
  int rows = 0;
  const int32_t* ids = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* ctx = nullptr;
  // Prefill chunks: host copies of pos and slots (the layer prefill's rows), from which the
  // cuDNN attention path finds each sequence's rows; null in decode steps.
  const int32_t* host_pos = nullptr;
  const int32_t* host_slots = nullptr;
  bool decode = false;  // decode step (the peer reduction applies) or prefill chunk
  bool pdl = false;
  const bf16* head_in = nullptr;
  int head_rows = 0;
  // false: row b draws as sequence b (the layer prefill, whose dec_slots are not set yet when it
  // samples).
  bool rng_by_slot = true;
  // Filled by the LM head for the sampler: its argmax epilogue's buffer, or null.
  unsigned long long* argmax = nullptr;
};

// The step-graph op codes the conventional step launches (conventional_step.cu).
const std::vector<OpCode>& conventional_op_codes();

struct ExecutorCore {
  // Defined where OverlapState and PeerReduce are complete (step_resources.cu).
  ExecutorCore();
  // Validates the options, allocates every buffer and uploads the weights (step_resources.cu).
  // A member function rather than the constructor: when it throws part-way, the owner's
  // unique_ptr is complete and ~ExecutorCore releases what was made so far.
  void setup(const ModelConfig& model, const WeightFiller& weights, const ExecutorOptions& options,
             const std::function<void(size_t, size_t)>& progress);
  ~ExecutorCore();
  ExecutorCore(const ExecutorCore&) = delete;
  ExecutorCore& operator=(const ExecutorCore&) = delete;

  ModelConfig cfg;
  ExecutorOptions opt;
  // The step graphs the executor runs, from ExecutorOptions::step_graph for this rank's
  // configuration (with the all-reduce ops under tensor parallelism): their ops, codes and folds;
  // the shapes of a step come from its rows at run time.
  OpGraph decode_graph;
  OpGraph prefill_graph;
  DeviceMemory mem;
  cudaStream_t stream = nullptr;
  std::unique_ptr<MatmulContext> mm;
  std::string device_name;  // cudaDeviceProp::name of the device set up on

  // Tensor parallelism (ExecutorOptions::tp): `cfg` above is this rank's configuration (its heads,
  // kv heads and intermediate features), `full_cfg` the model's; vocab_part = the LM head rows this
  // rank holds, vocab_pad = the rows every rank's gathered block is padded to.
  ModelConfig full_cfg;
  ncclComm_t comm = nullptr;
  int vocab0 = 0, vocab_part = 0, vocab_pad = 0;
  float* logits_part = nullptr;  // [max_batch, vocab_pad]
  float* logits_all = nullptr;   // [tp, max_batch, vocab_pad]
  // TpReduce::Peer (runtime/tp.h): the partial slots this rank and its peers map.
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

  // The paged KV cache (ExecutorOptions::kv_block_size > 0; kernels/kv_pages.cuh). `kv` is what
  // every cache access takes: contiguous (a null table) unless paged. Paged, the step inputs a
  // decode step reads are one device region, so that a single copy at the head of a captured
  // step refreshes them all: dec_tokens, dec_pos, dec_ctx, dec_slots and dec_sample
  // ([max_batch] each, step_inputs_head bytes with their padding), then the block table kv_table
  // [kv_table_rows, kv.table_stride] (decode row i reads table row dec_slots[i]; the rows past
  // max_batch are free for a prefill's sequences).
  KvPages kv;
  int32_t* kv_table = nullptr;
  SampleRow* dec_sample = nullptr;  // each decode row's own sampling (SampleParams::rows), or null
  uint8_t* step_inputs = nullptr;
  size_t step_inputs_head = 0;

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

  // PrefillAttention::Cudnn (created on first use; conventional_step.cu): cuDNN's SDPA, and why
  // it could not run some attention (the first reason; prefill_attention_note hands it out once).
  std::unique_ptr<CudnnAttention> cudnn;
  std::string cudnn_fallback;
  bool cudnn_fallback_told = false;

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
  // signals a counter (pdl_chain.cu).
  bool chain_grid_waits() const;

  // ---- step resources (step_resources.cu) ----

  void validate_options(const ModelConfig& model);
  void validate_kv_options();
  int kv_blocks_addressable() const;
  void build_step_graphs();
  void allocate_weights(const ModelConfig& model);
  void count_weight_bytes(const ModelConfig& model, const std::vector<WeightSpec>& specs);
  void upload_weights(const ModelConfig& model, const WeightFiller& weights,
                      const std::function<void(size_t, size_t)>& progress);
  void allocate_activations(const ModelConfig& model);
  void allocate_decode_state();
  void allocate_paged_step_inputs();
  // Each layer's K and V cache, last: with kv_num_blocks 0 it takes what the other buffers left
  // (ExecutorOptions::kv_memory_utilization) and sets opt.kv_num_blocks.
  void allocate_kv_cache(const ModelConfig& model);
  // Rows [c0, c0 + t) of a host vector into dst[0, t) on the executor's stream (asynchronous: the
  // vector must outlive the copy, i.e. until the next synchronisation).
  void upload_rows(int32_t* dst, const std::vector<int32_t>& src, int c0, int t) {
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(dst, src.data() + c0, static_cast<size_t>(t) * 4,
                                       cudaMemcpyHostToDevice, stream));
  }

  // ---- op adapters: graph op -> kernel params (op_adapters.h) ----

  EmbeddingParams embedding_params(const int32_t* ids, float* out, int n) const;
  AddRmsNormParams add_rmsnorm_params(float* resid, const float* delta_in, const bf16* w, bf16* out,
                                      int rows) const;
  template <typename P>
  P attention_params(const LayerWeights& L, const bf16* q_in, bf16* out,
                     const int32_t* slot_of) const;
  QkvRopeParams qkv_rope_params(const LayerWeights& L, const float* qkv_in, bf16* q_out,
                                const int32_t* positions, const int32_t* slot_of, int t) const;
  DecodeAttentionParams decode_attention_params(const LayerWeights& L, const bf16* q_in, bf16* out,
                                                float* workspace, const int32_t* slot_of,
                                                const int32_t* ctx_lens, int b) const;
  SampleParams sample_params(int b) const;
  StepAdvanceParams step_advance_params(int b) const;

  // ---- the conventional step (conventional_step.cu) ----

  // As matmul_params, with output rows ldy apart (0 = n), launched on the step's stream.
  void matmul(const bf16* x, const bf16* w, void* y, DType y_dtype, int m, int n, int k, bool pdl,
              const char* op, int64_t ldy = 0);
  void add_rmsnorm(const float* delta_in, const bf16* w, bf16* out, int rows, bool pdl,
                   const char* op, int carveout = -1);
  int carveout_before_matmul(bool pdl, int m, int n, int k) const;
  // Op i of step graph g for the rows of w, launched on the step's stream; run_ops: ops [first,
  // end) in order.
  void run_op(const OpGraph& g, size_t i, StepWalk& w);
  void run_ops(const OpGraph& g, size_t first, size_t end, StepWalk& w);
  bool reduces_by_peer(const OpGraph& g, size_t i, const StepWalk& w) const;
  // The LM head: the whole vocabulary, or under tensor parallelism this rank's rows, gathered
  // from every rank (tp_gather_logits). Returns the packed argmax buffer the LM head's epilogue
  // filled (greedy_epilogue), or null.
  unsigned long long* lm_head_logits(const bf16* rows, int b, bool pdl);
  unsigned long long* greedy_epilogue(const MatmulParams& p) const;
  bool greedy_epilogue_allowed() const;
  void record_decode_step(int b, bool pdl);
  // A prefill chunk's attention (ap: the whole chunk) on cuDNN's SDPA, one call per sequence
  // (rows of one slot at consecutive positions, from w's host copies); what cuDNN cannot run goes
  // to the tensor-core kernel, and the first reason into cudnn_fallback.
  void prefill_attention_cudnn(const PrefillAttentionParams& ap, const StepWalk& w, const char* op);
  // PrefillPath::Layers: the flattened prompts (ids, pos, slot of B sequences) through the
  // prefill kernels in chunks of prefill_chunk rows, then the LM head and sampler on each
  // sequence's last row. Leaves each sequence's first token in dec_tokens[b] and its logits in
  // logits row b.
  void prefill_layers(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                      const std::vector<int32_t>& slot, int B);

  // ---- tensor parallelism (tp.cu) ----

  // Validates the TP options and takes this rank's configuration (cfg, vocab rows).
  void setup_tp(const ModelConfig& model);
  size_t tp_weight_bytes(const ModelConfig& model, const std::vector<WeightSpec>& specs) const;
  // Tensor parallelism: the row-parallel projections' partial sums, added over the ranks in place.
  void all_reduce_delta(int t, const char* op);
  float* peer_slot(int r, int site) const;
  uint32_t* peer_counter(int r, int site) const;
  void peer_reduce_delta(int site, int t, bool pdl);
  void setup_peer_reduce();
  void teardown_peer_reduce();
  // This rank's LM head rows into logits_part, gathered from every rank ([tp, b, vocab_pad]) and
  // copied into logits [b, vocab] rank by rank.
  void tp_lm_head_logits(const bf16* rows, int b, bool pdl);

  // ---- graph cache (graph_cache.cu) ----

  // Captures what `record` enqueues on `stream` into a graph (the caller owns it). When the
  // capture met cuBLASLt problems without a tuned algorithm, they are tuned on the GPU now and the
  // step is captured again with the tuned algorithms (kernels/matmul.cuh, tune_pending).
  cudaGraph_t capture_step(const std::function<void()>& record);
  cudaGraphExec_t graph_for(int b, bool pdl);
  void drop_overlap_graphs();

  // ---- overlap backend (overlap.cu, overlap_ops.cu; docs/overlap-design.md) ----

  void setup_overlap();
  void apply_overlap_regions(OverlapState& st) const;
  std::vector<OverlapOp> build_overlap_ops(int b);
  void choose_overlap_budgets(std::vector<OverlapOp>& ops) const;
  // The chain's rules on a chosen op list (pdl_chain.cu): folded ops hand their waits on, grid
  // waits signal nothing.
  void apply_chain_sync(std::vector<OverlapOp>& ops) const;
  // The O projection's early trigger where its weights fit its rings (pdl_chain.cu).
  void apply_chain_early_trigger(std::vector<OverlapOp>& ops) const;
  void record_overlap_step(int b);
  // The op list of the overlap step for batch b, built (budgets, persistent regions) on first use;
  // call outside stream capture the first time (graph_for does).
  std::vector<OverlapOp>& overlap_plan(int b);
  void build_persistent_regions(std::vector<OverlapOp>& ops);
  cudaError_t launch_persistent(const OverlapOp& op, cudaStream_t s, int drop_signal_op) const;
  // Throws the watchdog's description when it tripped, else a DeviceError for a failed status.
  void overlap_check(cudaError_t err) const;
  std::vector<TraceEvent> take_overlap_trace(uint64_t* dropped);

  // ---- running steps (executor.cu) ----

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
  // PrefillPath::DecodeGraph (see executor_options.h): the flattened prompts (ids, pos, slot of B
  // sequences) in replays of at most max_batch rows. Leaves each sequence's first token in
  // host_tokens[b] and dec_tokens[b] and its logits in logits row b.
  void prefill_via_decode_graph(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                                const std::vector<int32_t>& slot, int B);

  // ---- profiling (profiler.cu) ----

  std::vector<Executor::OpTime> profile_decode_steps(int steps);
};

}  // namespace megaops

#include "runtime/op_adapters.h"
