// The conventional decode step (ExecutorOptions::backend Conventional): one kernel per op on the
// executor's stream, barriers between them, PDL where ExecutorOptions::pdl asks for it; and the
// layer prefill, which runs the same layers eagerly in chunks. Per decode step, with B sequences:
//   embedding → per layer [add+rmsnorm → QKV matmul → q/k norm + RoPE + cache write → attention →
//   O matmul → add+rmsnorm → gate|up matmul → SiLU·mul → down matmul] → add+final norm → LM head →
//   sample → advance positions.
// The residual add of each block is fused into the next norm, so the layer is 9 kernels. Under
// tensor parallelism the O and down projections' partial sums are reduced over the ranks (tp.cu).
#include <algorithm>

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

// Everything from the embedding to the last layer's down projection, for `t` tokens whose ids,
// positions and slots are at ids/pos/slots. `decode` selects the attention kernel.
void ExecutorCore::run_layers(int t, const int32_t* ids, const int32_t* pos, const int32_t* slots,
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

// rng_by_slot false: row b draws as sequence b (the layer prefill, whose dec_slots are not set
// yet when it samples).
void ExecutorCore::lm_head_and_sample(const bf16* rows, int b, bool pdl, bool rng_by_slot) {
  unsigned long long* argmax = lm_head_logits(rows, b, pdl);
  SampleParams sp = sample_params(b);
  sp.argmax = argmax;
  if (!rng_by_slot) sp.rng_rows = nullptr;
  sp.launch = launch(pdl);
  check(launch_sample(sp), "sample");
}

void ExecutorCore::record_decode_step(int b, bool pdl) {
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

void ExecutorCore::prefill_layers(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
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

}  // namespace megaops
