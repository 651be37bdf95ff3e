// Builds the op list of one overlap decode step (runtime/overlap.h's OverlapOp) by walking the
// executor's decode step graph: each op with its kernel params (op adapters), footprint and
// launch, in the graph's order, with the folds the graph allows and the PDL chain makes
// (pdl_chain.cu decides where). Internal to the overlap backend.
#pragma once

#include <vector>

#include "runtime/executor_core.h"
#include "runtime/overlap.h"

namespace megaops {

class OverlapOpBuilder {
 public:
  // The ops for batch b over core's resources and its overlap state (set up).
  OverlapOpBuilder(ExecutorCore& core, int b);
  // The op list, budgets chosen (ExecutorCore::choose_overlap_budgets); call once.
  std::vector<OverlapOp> build();

 private:
  // An op from its params, footprint(params, cap, f) and launch(params, cap).
  template <typename P, typename F, typename L>
  void add(bool cappable, P params, F footprint, L launch);
  // An op whose grid follows its CTA cap (params.max_ctas), and one whose grid its shape fixes:
  // footprint(params, f) and launch(params) as the kernels declare them.
  template <typename P, typename F, typename L>
  void add_capped(P params, F footprint, L launch);
  template <typename P, typename F, typename L>
  void add_fixed(P params, F footprint, L launch);
  void matmul_op(const bf16* x, const bf16* w, float* y, int n, int k,
                 const NormFold& fold = NormFold{}, const SiluMulFold& silu_fold = SiluMulFold{},
                 const SiluMulEpilogue& silu_out = SiluMulEpilogue{},
                 unsigned long long* argmax = nullptr);
  void add_folded();
  // The chain's fold rules (pdl_chain.cu).
  bool folds_into(const bf16* x, const bf16* w, float* y, int n, int k) const;
  SiluMulEpilogue silu_gate_up(const bf16* normed, const bf16* w, float* gu, bf16* act) const;
  void norm_op(const float* delta_in, const bf16* w, bf16* out);
  // may_fold: the step graph lets the norm fold into the matmul (FOLD_INTO_CONSUMER_PROLOGUE);
  // the chain's rules decide whether it does.
  void norm_matmul_op(const float* delta_in, const bf16* ln, bf16* normed, const bf16* w, float* y,
                      int n, bool may_fold, const SiluMulEpilogue& silu_out = SiluMulEpilogue{},
                      unsigned long long* argmax = nullptr);
  void silu_op(const float* gu, bf16* act);
  void silu_down_op(const float* gu, bf16* act, const bf16* w, float* y, bool may_fold,
                    bool in_epilogue);
  void rope_attention_op(const LayerWeights& W, const OverlapLayer& A, bool may_fold);
  void v0_attention(const LayerWeights& W, const OverlapLayer& A);
  // The final norm, LM head, sampler and step_advance; the graph's fold permissions of the final
  // norm (into the LM head) and the sampler (into its epilogue).
  void lm_head_to_step_advance(bool norm_may_fold, bool sample_may_fold);

  ExecutorCore& core;
  OverlapState& st;
  const int b;
  const int h, qd, kvd, inter;
  std::vector<OverlapOp> ops;
  MatmulContext* const mm_ctx;
  const bool same_arithmetic;
  const int vendor_chunks;
  const bool chain;
  // The residual stream: the norms update it in place; a folded norm's matmul reads it and
  // writes the sum into the other buffer, which becomes the stream.
  float* resid;
};

}  // namespace megaops
