// See overlap_ops.h: the op list of one overlap decode step.
#include <algorithm>
#include <memory>

#include "kernels/rope_fold.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/tile_gate.cuh"
#include "runtime/overlap_ops.h"

namespace megaops {

OverlapOpBuilder::OverlapOpBuilder(ExecutorCore& core_, int b_)
    : core(core_),
      st(*core_.ovl),
      b(b_),
      h(core_.cfg.hidden_size),
      qd(core_.cfg.q_dim()),
      kvd(core_.cfg.kv_dim()),
      inter(core_.cfg.intermediate_size),
      mm_ctx(core_.mm.get()),
      same_arithmetic(core_.opt.overlap_conventional_arithmetic),
      vendor_chunks(core_.opt.overlap_vendor_chunks),
      chain(core_.opt.overlap_pdl_chain),
      resid(st.resid) {}

template <typename P, typename F, typename L>
void OverlapOpBuilder::add(bool cappable, P params, F footprint, L launch) {
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
  op.region = region_op_of(params, &op.region_refusal);
  ops.push_back(std::move(op));
}

// An op whose grid follows its CTA cap (params.max_ctas), and one whose grid its shape fixes:
// footprint(params, f) and launch(params) as the kernels declare them.
template <typename P, typename F, typename L>
void OverlapOpBuilder::add_capped(P params, F footprint, L launch) {
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
}

template <typename P, typename F, typename L>
void OverlapOpBuilder::add_fixed(P params, F footprint, L launch) {
  add(
      false, params, [footprint](auto q, int, KernelFootprint* f) { return footprint(q, f); },
      [launch](auto q, int) { return launch(q); });
}

void OverlapOpBuilder::matmul_op(const bf16* x, const bf16* w, float* y, int n, int k,
                                 const NormFold& fold, const SiluMulFold& silu_fold,
                                 const SiluMulEpilogue& silu_out, unsigned long long* argmax) {
  // Locals: the launch closures below copy them.
  MatmulContext* const mmc = mm_ctx;
  const int chunks = vendor_chunks;
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
    op.region_refusal = "a cuBLASLt GEMM (a vendor kernel is a launch of its own)";
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
        p, [mmc](const MatmulParams& q, KernelFootprint* f) { return mmc->stream_footprint(q, f); },
        [mmc](const MatmulParams& q) { return mmc->run_stream(q); });
    // A persistent region's task runs the bulk kernel's rows with the same arguments.
    OverlapOp& op = ops.back();
    const cudaError_t err = mmc->stream_region_args(p, &op.region.mm);
    op.region.kind = err == cudaSuccess ? RegionTaskKind::Matmul : RegionTaskKind::None;
    op.region_refusal = err == cudaSuccess
                            ? ""
                            : std::string(
                                  "a matmul on the streaming kernel's cp.async ring (a "
                                  "region needs its bulk version, sm_90): ") +
                                  cudaGetErrorString(err);
    return;
  }
  add_capped(p, MatmulContext::small_m_footprint,
             [mmc](const MatmulParams& q) { return mmc->run_small_m(q); });
}

// The op of a producer folded into the matmul after it: it keeps its name and counter id,
// occupies nothing and launches nothing.
void OverlapOpBuilder::add_folded() {
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
}

void OverlapOpBuilder::norm_op(const float* delta_in, const bf16* w, bf16* out) {
  const AddRmsNormParams p = core.add_rmsnorm_params(resid, delta_in, w, out, b);
  add_fixed(p, add_rmsnorm_footprint, launch_add_rmsnorm);
}

// A norm and the matmul that reads its output: in the PDL chain with
// ExecutorOptions::overlap_fold_norms, where the matmul runs on the bulk streaming kernel
// (the only one that folds, kernels/norm_fold.cuh), the norm becomes a placeholder op that
// launches nothing and the matmul computes it in its prologue, bit for bit.
// `silu_out`: the SwiGLU in the matmul's epilogue (silu_gate_up below decides).
// `argmax`: greedy sampling in the matmul's epilogue (the LM head; greedy_epilogue decides).
void OverlapOpBuilder::norm_matmul_op(const float* delta_in, const bf16* ln, bf16* normed,
                                      const bf16* w, float* y, int n, bool may_fold,
                                      const SiluMulEpilogue& silu_out, unsigned long long* argmax) {
  // resid_alt exists exactly when the chain folds norms (setup_overlap).
  if (!may_fold || st.resid_alt == nullptr || !folds_into(normed, w, y, n, h)) {
    norm_op(delta_in, ln, normed);
    matmul_op(normed, w, y, n, h, NormFold{}, SiluMulFold{}, silu_out, argmax);
    return;
  }
  add_folded();
  float* next = resid == st.resid ? st.resid_alt : st.resid;
  matmul_op(nullptr, w, y, n, h,
            norm_fold(core.add_rmsnorm_params(resid, delta_in, ln, nullptr, b), next),
            SiluMulFold{}, silu_out, argmax);
  resid = next;
}

void OverlapOpBuilder::silu_op(const float* gu, bf16* act) {
  SiluMulParams sp;
  sp.gate_up_f32 = gu;
  sp.out = act;
  sp.m = b;
  sp.inter = inter;
  add_capped(sp, silu_mul_footprint, launch_silu_mul);
}

// SiLU·mul and the down projection: in the PDL chain with ExecutorOptions::overlap_fold_silu,
// where down runs on the bulk streaming kernel, SiLU·mul becomes a placeholder and down
// computes the activation from the gate|up rows in its prologue (kernels/act_fold.cuh), bit
// for bit.
// `in_epilogue`: gate_up's epilogue wrote act (silu_gate_up): SiLU·mul's op launches nothing.
void OverlapOpBuilder::silu_down_op(const float* gu, bf16* act, const bf16* w, float* y,
                                    bool may_fold, bool in_epilogue) {
  if (in_epilogue) {
    add_folded();
    matmul_op(act, w, y, h, inter);
    return;
  }
  if (!may_fold || !core.opt.overlap_fold_silu || !folds_into(act, w, y, h, inter)) {
    silu_op(gu, act);
    matmul_op(act, w, y, h, inter);
    return;
  }
  add_folded();
  SiluMulFold f;
  f.gate_up = gu;
  matmul_op(nullptr, w, y, h, inter, NormFold{}, f);
}

// qkv_rope and the attention after it, as the conventional step launches attention (default
// split count, the last CTA of a group merges; its signal comes after the merge, so the consumer
// sees merged rows; the merge counters are shared with the conventional step: the two never run
// at once, and the attention ops of two layers are never live together, ten ops apart, W <= 8).
// In the PDL chain with ExecutorOptions::overlap_fold_rope, where attention takes the
// per-query-head kernel (decode_attention_can_fold_rope: batches 1-2), qkv_rope becomes a
// placeholder and attention computes q and the newest k / v rows from the qkv rows in its
// prologue and writes those rows to the cache (kernels/rope_fold.cuh), bit for bit.
void OverlapOpBuilder::rope_attention_op(const LayerWeights& W, const OverlapLayer& A,
                                         bool may_fold) {
  const QkvRopeParams rp = core.qkv_rope_params(W, A.qkv, A.q, core.dec_pos, core.dec_slots, b);
  DecodeAttentionParams ap =
      core.decode_attention_params(W, A.q, A.attn, A.ws, core.dec_slots, core.dec_ctx, b);
  ap.done_counters = core.attn_done;
  const bool fold =
      may_fold && chain && core.opt.overlap_fold_rope && decode_attention_can_fold_rope(ap);
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
std::vector<OverlapOp> OverlapOpBuilder::build() {
  const OpGraph& g = core.decode_graph;
  // A fused pair (or the head's four ops) takes its ops from the graph: each must be the code the
  // pair expects.
  auto expect = [&](size_t i, OpCode code) {
    if (i >= g.ops.size() || g.ops[i].code != code)
      throw_input_error("overlap step", "op graph",
                        std::string("expected ") + op_code_name(code) + " after " +
                            g.ops[i - 1].name + ", found " +
                            (i < g.ops.size() ? g.ops[i].name : std::string("the end")));
  };
  bool silu_in_epilogue = false;  // the layer's gate_up writes act (silu_gate_up)
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    const bool may_fold = (op.folds & FOLD_INTO_CONSUMER_PROLOGUE) != 0;
    const int l = op.layer;
    switch (op.code) {
      case OpCode::Embedding:
        add_fixed(core.embedding_params(core.dec_tokens, st.resid, b), embedding_footprint,
                  launch_embedding);
        break;
      case OpCode::InputNorm:
        expect(++i, OpCode::QkvProj);
        norm_matmul_op(l == 0 ? nullptr : st.layers[l - 1].down, core.layers[l].ln1,
                       st.layers[l].n1, core.layers[l].wqkv, st.layers[l].qkv, qd + 2 * kvd,
                       may_fold);
        break;
      case OpCode::QkvRope:
        expect(++i, OpCode::DecodeAttention);
        if (same_arithmetic)
          rope_attention_op(core.layers[l], st.layers[l], may_fold);
        else
          v0_attention(core.layers[l], st.layers[l]);
        break;
      case OpCode::OProj:
        matmul_op(st.layers[l].attn, core.layers[l].wo, st.layers[l].o, h, qd);
        ops.back().o_proj_weight_bytes = int64_t{h} * qd * 2;
        break;
      case OpCode::PostNorm: {
        expect(++i, OpCode::GateUpProj);
        const LayerWeights& W = core.layers[l];
        const OverlapLayer& A = st.layers[l];
        if (!same_arithmetic) {
          norm_op(A.o, W.ln2, A.n2);
          matmul_op(A.n2, W.wgu, A.gu, 2 * inter, h);
          break;
        }
        // SiLU-mul (two ops on) may go into gate_up's epilogue.
        const bool silu_may_fold = i + 1 < g.ops.size() && g.ops[i + 1].code == OpCode::SiluMul &&
                                   (g.ops[i + 1].folds & FOLD_INTO_PRODUCER_EPILOGUE) != 0;
        const SiluMulEpilogue silu_out =
            silu_may_fold ? silu_gate_up(A.n2, W.wgu, A.gu, A.act) : SiluMulEpilogue{};
        silu_in_epilogue = silu_out.on();
        norm_matmul_op(A.o, W.ln2, A.n2, W.wgu, A.gu, 2 * inter, may_fold, silu_out);
        break;
      }
      case OpCode::SiluMul: {
        expect(++i, OpCode::DownProj);
        const LayerWeights& W = core.layers[l];
        const OverlapLayer& A = st.layers[l];
        if (!same_arithmetic) {
          silu_op(A.gu, A.act);
          matmul_op(A.act, W.wdown, A.down, h, inter);
          break;
        }
        silu_down_op(A.gu, A.act, W.wdown, A.down, may_fold, silu_in_epilogue);
        silu_in_epilogue = false;
        break;
      }
      case OpCode::FinalNorm:
        expect(i + 1, OpCode::LmHead);
        expect(i + 2, OpCode::Sample);
        expect(i + 3, OpCode::StepAdvance);
        lm_head_to_step_advance(may_fold, (g.ops[i + 2].folds & FOLD_INTO_PRODUCER_EPILOGUE) != 0);
        i += 3;
        break;
      default:
        throw_input_error("overlap step", "op graph",
                          "expected ops the overlap backend runs, found " + op.name +
                              (l >= 0 ? " (layer " + std::to_string(l) + ")" : ""));
    }
  }
  if (ops.size() != st.op_names.size()) throw Error("internal: overlap op list mismatch");
  core.choose_overlap_budgets(ops);
  core.apply_chain_early_trigger(ops);
  core.build_persistent_regions(ops);
  return std::move(ops);
}

// The v0 step's attention (ExecutorOptions::overlap_conventional_arithmetic off, where every
// matmul runs on the small-m kernel): qkv_rope, then attention splits capped by the CTA budget
// and merged by a combine op.
void OverlapOpBuilder::v0_attention(const LayerWeights& W, const OverlapLayer& A) {
  add_capped(core.qkv_rope_params(W, A.qkv, A.q, core.dec_pos, core.dec_slots, b),
             qkv_rope_footprint, launch_qkv_rope);
  const DecodeAttentionParams ap =
      core.decode_attention_params(W, A.q, A.attn, A.ws, core.dec_slots, core.dec_ctx, b);
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
}

void OverlapOpBuilder::lm_head_to_step_advance(bool norm_may_fold, bool sample_may_fold) {
  // The final norm folds into the LM head as the layers' norms fold into QKV and gate_up, where
  // the LM head runs on the bulk streaming kernel (batch 1 since bd933ec). Traced
  // (bench/results/2026-12-01-s22-call5, llama3.1-8b): the one-CTA final norm's 7.2 us and its
  // handoff leave the chain, the LM head's span grows 4.7 us (its CTAs' prologue); the step -3 us
  // in rows alternated, llama3.2-1b level (its final norm took 1.6 us). perf-notes item 43.
  // Greedy sampling in the LM head's epilogue where it streams on the bulk kernel: always with the
  // final norm folded into it, else where the rule puts it (greedy_epilogue).
  MatmulParams lm = matmul_params(st.final_normed, core.lm_head, core.logits, DType::F32, b,
                                  core.cfg.vocab_size, h);
  lm.launch.pdl = chain;
  const bool lm_folds =
      norm_may_fold && st.resid_alt != nullptr &&
      folds_into(st.final_normed, core.lm_head, core.logits, core.cfg.vocab_size, h);
  unsigned long long* argmax = nullptr;
  if (same_arithmetic && sample_may_fold)
    argmax = lm_folds ? (core.greedy_epilogue_allowed() ? core.greedy_argmax : nullptr)
                      : core.greedy_epilogue(lm);
  norm_matmul_op(st.layers.back().down, core.final_norm, st.final_normed, core.lm_head, core.logits,
                 core.cfg.vocab_size, norm_may_fold, SiluMulEpilogue{}, argmax);
  SampleParams sp = core.sample_params(b);
  sp.argmax = argmax;
  add_fixed(sp, sample_footprint, launch_sample);
  StepAdvanceParams sa = core.step_advance_params(b);
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
}

std::vector<OverlapOp> ExecutorCore::build_overlap_ops(int b) {
  return OverlapOpBuilder(*this, b).build();
}

}  // namespace megaops
