// The conventional decode step (ExecutorOptions::backend Conventional): one kernel per op on the
// executor's stream, barriers between them, PDL where ExecutorOptions::pdl asks for it; and the
// layer prefill, which runs the same layers eagerly in chunks. Per decode step, with B sequences:
//   embedding → per layer [add+rmsnorm → QKV matmul → q/k norm + RoPE + cache write → attention →
//   O matmul → add+rmsnorm → gate|up matmul → SiLU·mul → down matmul] → add+final norm → LM head →
//   sample → advance positions.
// The residual add of each block is fused into the next norm, so the layer is 9 kernels. Under
// tensor parallelism the O and down projections' partial sums are reduced over the ranks (tp.cu).
#include <algorithm>

#include "kernels/attention_cudnn.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/tp_reduce.cuh"
#include "runtime/executor_core.h"
#include "runtime/tp.h"

namespace megaops {

// As matmul_params, with output rows ldy apart (0 = n), launched on the step's stream.
void ExecutorCore::matmul(const bf16* x, const bf16* w, void* y, DType y_dtype, int m, int n, int k,
                          bool pdl, const char* op, int64_t ldy) {
  MatmulParams p = matmul_params(x, w, y, y_dtype, m, n, k);
  if (ldy > 0) p.ldy = ldy;
  p.launch = launch(pdl);
  check(mm->run(p), op);
}

void ExecutorCore::add_rmsnorm(const float* delta_in, const bf16* w, bf16* out, int rows, bool pdl,
                               const char* op, int carveout) {
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
int ExecutorCore::carveout_before_matmul(bool pdl, int m, int n, int k) const {
  if (!pdl) return -1;
  MatmulParams next = matmul_params(nullptr, nullptr, nullptr, DType::F32, m, n, k);
  next.launch = launch(pdl);
  return mm->path(next) == MatmulPath::Stream ? int{cudaSharedmemCarveoutMaxShared} : -1;
}

// The ops of the step graph that launch a kernel on the conventional step (every code the step
// graph has): the executor checks the graphs it is handed against this list at setup.
const std::vector<OpCode>& conventional_op_codes() {
  static const std::vector<OpCode> codes = {
      OpCode::Embedding,       OpCode::InputNorm,        OpCode::QkvProj, OpCode::QkvRope,
      OpCode::DecodeAttention, OpCode::PrefillAttention, OpCode::OProj,   OpCode::AllReduce,
      OpCode::PostNorm,        OpCode::GateUpProj,       OpCode::SiluMul, OpCode::DownProj,
      OpCode::FinalNorm,       OpCode::LmHead,           OpCode::Sample,  OpCode::StepAdvance};
  return codes;
}

// The next op of g after op i (the matmul a norm, attention or SiLU-mul hands its output to).
static const Op& next_op(const OpGraph& g, size_t i) {
  if (i + 1 >= g.ops.size()) throw Error("internal: step graph ends after " + g.ops[i].name);
  return g.ops[i + 1];
}

// Whether the row-parallel projection at op i hands its partial sums to the peer reduction
// (TpReduce::Peer, decode) instead of writing delta for an NCCL all-reduce.
bool ExecutorCore::reduces_by_peer(const OpGraph& g, size_t i, const StepWalk& w) const {
  return w.decode && peer != nullptr && i + 1 < g.ops.size() &&
         g.ops[i + 1].code == OpCode::AllReduce;
}

// Op i of g for the rows of `w`, launched on the step's stream: the op's code says which kernel
// and which of the executor's buffers and weights it reads and writes.
void ExecutorCore::run_op(const OpGraph& g, size_t i, StepWalk& w) {
  const Op& op = g.ops[i];
  const char* name = op.name.c_str();
  const int t = w.rows, h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  const bool pdl = w.pdl;
  current_layer = op.layer;
  const LayerWeights* L = op.layer >= 0 ? &layers.at(op.layer) : nullptr;
  // A row-parallel projection's partial output: this rank's peer slot, or delta.
  auto delta_out = [&](int site) -> float* {
    return reduces_by_peer(g, i, w) ? peer_slot(opt.tp_rank, site) : delta;
  };
  switch (op.code) {
    case OpCode::Embedding: {
      EmbeddingParams ep = embedding_params(w.ids, residual, t);
      ep.launch = launch(pdl);
      check(launch_embedding(ep), name);
      return;
    }
    case OpCode::InputNorm:
    case OpCode::PostNorm: {
      const Op& mm_op = next_op(g, i);
      add_rmsnorm(
          op.layer == 0 && op.code == OpCode::InputNorm ? nullptr : delta,
          op.code == OpCode::InputNorm ? L->ln1 : L->ln2, normed, t, pdl, name,
          carveout_before_matmul(pdl, t, static_cast<int>(mm_op.n), static_cast<int>(mm_op.k)));
      return;
    }
    case OpCode::QkvProj:
      matmul(normed, L->wqkv, qkv, DType::F32, t, qd + 2 * kvd, h, pdl, name);
      return;
    case OpCode::QkvRope: {
      QkvRopeParams rp = qkv_rope_params(*L, qkv, q, w.pos, w.slots, t);
      rp.launch = launch(pdl);
      check(launch_qkv_rope(rp), name);
      return;
    }
    case OpCode::DecodeAttention: {
      DecodeAttentionParams ap = decode_attention_params(*L, q, attn, attn_ws, w.slots, w.ctx, t);
      ap.done_counters = attn_done;
      ap.launch = launch(pdl);
      ap.launch.carveout = carveout_before_matmul(pdl, t, h, qd);
      check(launch_decode_attention(ap), name);
      return;
    }
    case OpCode::PrefillAttention: {
      PrefillAttentionParams ap = attention_params<PrefillAttentionParams>(*L, q, attn, w.slots);
      ap.positions = w.pos;
      ap.t = t;
      ap.launch = launch(pdl);
      if (opt.prefill_attention == PrefillAttention::Cudnn && w.host_pos != nullptr) {
        prefill_attention_cudnn(ap, w, name);
        return;
      }
      // The tensor-core kernel (online softmax); head dims it does not take go to the scalar one.
      check(launch_prefill_attention_flash(ap), name);
      return;
    }
    case OpCode::OProj:
      matmul(attn, L->wo, delta_out(2 * op.layer), DType::F32, t, h, qd, pdl, name);
      return;
    case OpCode::AllReduce: {
      const bool after_down = i > 0 && g.ops[i - 1].code == OpCode::DownProj;
      if (reduces_by_peer(g, i - 1, w))
        peer_reduce_delta(2 * op.layer + (after_down ? 1 : 0), t, pdl);
      else
        all_reduce_delta(t, name);
      return;
    }
    case OpCode::GateUpProj:
      matmul(normed, L->wgu, gu, DType::F32, t, 2 * inter, h, pdl, name);
      return;
    case OpCode::SiluMul: {
      SiluMulParams sp;
      sp.gate_up_f32 = gu;
      sp.out = act;
      sp.m = t;
      sp.inter = inter;
      sp.launch = launch(pdl);
      sp.launch.carveout = carveout_before_matmul(pdl, t, h, inter);
      check(launch_silu_mul(sp), name);
      return;
    }
    case OpCode::DownProj:
      matmul(act, L->wdown, delta_out(2 * op.layer + 1), DType::F32, t, h, inter, pdl, name);
      return;
    case OpCode::FinalNorm:
      add_rmsnorm(delta, final_norm, normed, t, pdl, name,
                  comm == nullptr && w.decode
                      ? carveout_before_matmul(pdl, t, cfg.vocab_size, cfg.hidden_size)
                      : -1);
      return;
    case OpCode::LmHead:
      w.argmax = lm_head_logits(w.head_in, w.head_rows, pdl);
      return;
    case OpCode::Sample: {
      SampleParams sp = sample_params(w.head_rows);
      sp.argmax = w.argmax;
      if (!w.rng_by_slot) sp.rng_rows = nullptr;
      sp.launch = launch(pdl);
      check(launch_sample(sp), name);
      return;
    }
    case OpCode::StepAdvance: {
      StepAdvanceParams ap = step_advance_params(w.head_rows);
      ap.launch = launch(pdl);
      check(launch_step_advance(ap), name);
      return;
    }
  }
  throw Error(std::string("internal: the conventional step cannot run op ") + name);
}

void ExecutorCore::prefill_attention_cudnn(const PrefillAttentionParams& ap, const StepWalk& w,
                                           const char* op) {
  if (!cudnn) cudnn = std::make_unique<CudnnAttention>(opt.cudnn_lib);
  auto fall_back = [&](const std::string& why) {
    if (cudnn_fallback.empty()) cudnn_fallback = why;
  };
  if (!cudnn->available()) {
    fall_back(cudnn->unavailable_reason());
    check(launch_prefill_attention_flash(ap), op);
    return;
  }
  const size_t token = static_cast<size_t>(ap.num_heads) * ap.head_dim;
  const size_t kv_row = static_cast<size_t>(ap.num_kv_heads) * ap.head_dim;
  for (int a = 0; a < ap.t;) {
    // Rows [a, b): one sequence's consecutive positions; its keys are its slot's rows [0, last].
    int b = a + 1;
    while (b < ap.t && w.host_slots[b] == w.host_slots[a] && w.host_pos[b] == w.host_pos[b - 1] + 1)
      ++b;
    const size_t slot0 = static_cast<size_t>(w.host_slots[a]) * ap.max_seq * kv_row;
    CudnnAttentionParams cp;
    cp.q = ap.q + a * token;
    cp.k = ap.k_cache + slot0;
    cp.v = ap.v_cache + slot0;
    cp.out = ap.out + a * token;
    cp.t_q = b - a;
    cp.t_kv = w.host_pos[b - 1] + 1;
    cp.num_heads = ap.num_heads;
    cp.num_kv_heads = ap.num_kv_heads;
    cp.head_dim = ap.head_dim;
    cp.scale = ap.scale;
    cp.stream = ap.launch.stream;
    const cudaError_t err = cudnn->run(cp);
    if (err == cudaErrorNotSupported) {
      // This sequence on the tensor-core kernel: the same params, offset to its rows.
      fall_back(cudnn->last_error());
      PrefillAttentionParams seg = ap;
      seg.q += a * token;
      seg.slots += a;
      seg.positions += a;
      seg.out += a * token;
      seg.t = b - a;
      const cudaError_t e = launch_prefill_attention_flash(seg);
      if (e != cudaSuccess) throw DeviceError(std::string(op) + ": " + cudaGetErrorString(e));
    } else if (err != cudaSuccess) {
      throw DeviceError(std::string(op) + ": " + cudnn->last_error());
    }
    a = b;
  }
  check(cudaSuccess, op);  // profiling and debug_sync, once for the op
}

void ExecutorCore::run_ops(const OpGraph& g, size_t first, size_t end, StepWalk& w) {
  for (size_t i = first; i < end; ++i) run_op(g, i, w);
  current_layer = -1;
}

// The LM head: the whole vocabulary, or under tensor parallelism this rank's rows, gathered
// from every rank ([tp, b, vocab_pad]) and copied into logits [b, vocab] rank by rank.
// Returns the packed argmax buffer the LM head's epilogue filled (greedy_epilogue), or null.
unsigned long long* ExecutorCore::lm_head_logits(const bf16* rows, int b, bool pdl) {
  if (comm == nullptr) {
    MatmulParams p =
        matmul_params(rows, lm_head, logits, DType::F32, b, cfg.vocab_size, cfg.hidden_size);
    p.launch = launch(pdl);
    p.argmax_out = greedy_epilogue(p);
    check(mm->run(p), "lm_head");
    return p.argmax_out;
  }
  tp_lm_head_logits(rows, b, pdl);
  return nullptr;
}

// The argmax buffer for LM head launch p (its argmax_out unset) where greedy sampling goes into
// its epilogue (ExecutorOptions::greedy_in_lm_head: greedy, one GPU, p on the bulk streaming
// kernel), else null.
unsigned long long* ExecutorCore::greedy_epilogue(const MatmulParams& p) const {
  if (!greedy_epilogue_allowed()) return nullptr;
  return mm->stream_bulk() && mm->path(p) == MatmulPath::Stream ? greedy_argmax : nullptr;
}
bool ExecutorCore::greedy_epilogue_allowed() const {
  return opt.greedy_in_lm_head && opt.sampling.temperature <= 0.0f && comm == nullptr;
}

// The index of the first op of g with this code (throws when there is none).
static size_t op_index(const OpGraph& g, OpCode code) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].code == code) return i;
  throw Error(std::string("internal: the step graph has no ") + op_code_name(code) + " op");
}

void ExecutorCore::record_decode_step(int b, bool pdl) {
  if (peer) check(launch_tp_step_advance(peer->step, launch(pdl)), "tp step advance");
  StepWalk w;
  w.rows = b;
  w.ids = dec_tokens;
  w.pos = dec_pos;
  w.slots = dec_slots;
  w.ctx = dec_ctx;
  w.decode = true;
  w.pdl = pdl;
  w.head_in = normed;
  w.head_rows = b;
  run_ops(decode_graph, 0, decode_graph.ops.size(), w);
}

void ExecutorCore::prefill_layers(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                                  const std::vector<int32_t>& slot, int B) {
  const int total = static_cast<int>(ids.size());
  const int h = cfg.hidden_size;
  const OpGraph& g = prefill_graph;
  // Per chunk the ops up to the final norm; then the LM head and sampler once, over each
  // sequence's last row (copied to lm_in[slot]).
  const size_t head = op_index(g, OpCode::FinalNorm) + 1;
  for (int c0 = 0; c0 < total; c0 += opt.prefill_chunk) {
    const int t = std::min(opt.prefill_chunk, total - c0);
    upload_rows(tok_ids, ids, c0, t);
    upload_rows(tok_pos, pos, c0, t);
    upload_rows(tok_slot, slot, c0, t);
    StepWalk w;
    w.rows = t;
    w.ids = tok_ids;
    w.pos = tok_pos;
    w.slots = tok_slot;
    w.host_pos = pos.data() + c0;
    w.host_slots = slot.data() + c0;
    run_ops(g, 0, head, w);
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
  // Row b draws as sequence b: dec_slots are not set yet when the prefill samples.
  StepWalk w;
  w.head_in = lm_in;
  w.head_rows = B;
  w.rng_by_slot = false;
  run_ops(g, head, g.ops.size(), w);
}

}  // namespace megaops
