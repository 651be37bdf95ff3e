// The PDL chain (ExecutorOptions::overlap_pdl_chain, overlap_streams 1): the overlap step's ops on
// one stream, each own kernel launched as a programmatic dependent of the one before, so kernel
// k + 1's CTAs are scheduled once every CTA of kernel k has called pdl_launch_dependents, and then
// wait on k's grid (griddepcontrol.wait, the default) or its tile counter. No budget is needed: a
// kernel is scheduled only after all CTAs of every kernel before it were, so a waiting CTA's
// producers are resident or done. The chain's own rules live here: which producers fold into the
// matmul or attention after them, the waits a folded op hands on, grid waits that signal nothing,
// and the O projection's early trigger.
#include "runtime/overlap_ops.h"

namespace megaops {

bool ExecutorCore::chain_grid_waits() const {
  return opt.overlap_pdl_chain && !opt.overlap_chain_counter_waits;
}

// Whether the chain folds the producer of x into the matmul y [b, n] = x . w^T (k = x's width):
// where that matmul runs on the bulk streaming kernel, the only one that folds.
bool OverlapOpBuilder::folds_into(const bf16* x, const bf16* w, float* y, int n, int k) const {
  MatmulParams q = matmul_params(x, w, y, DType::F32, b, n, k);
  q.launch.pdl = chain;
  return chain && same_arithmetic && mm_ctx->path(q) == MatmulPath::Stream && mm_ctx->stream_bulk();
}

// In the chain with ExecutorOptions::overlap_silu_epilogue_min_inter, where gate_up runs on the
// bulk streaming kernel: the SwiGLU in its epilogue, writing act (kernels/act_fold.cuh); else
// off.
SiluMulEpilogue OverlapOpBuilder::silu_gate_up(const bf16* normed, const bf16* w, float* gu,
                                               bf16* act) const {
  SiluMulEpilogue e;
  const int min_inter = core.opt.overlap_silu_epilogue_min_inter;
  if (min_inter >= 0 && inter >= min_inter && inter % 4 == 0 &&
      folds_into(normed, w, gu, 2 * inter, h)) {
    e.out = act;
    e.ld = inter;
    e.inter = inter;
  }
  return e;
}

void ExecutorCore::apply_chain_sync(std::vector<OverlapOp>& ops) const {
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
}

// In the chain, the O projection triggers gate_up at the top of its wait where all of its
// weights fit in its launch's rings (ExecutorOptions::overlap_early_trigger_o_proj): they are
// then in flight before attention ends, and HBM would idle while attention runs; gate_up's CTAs
// start streaming instead.
void ExecutorCore::apply_chain_early_trigger(std::vector<OverlapOp>& ops) const {
  if (!opt.overlap_pdl_chain || !opt.overlap_early_trigger_o_proj) return;
  for (OverlapOp& op : ops) {
    if (op.o_proj_weight_bytes == 0 || op.opaque) continue;
    KernelFootprint f;
    MEGAOPS_CUDA_CHECK(op.footprint(op.cap, &f));
    op.early_trigger = f.ring_bytes * f.ctas >= op.o_proj_weight_bytes;
  }
}

}  // namespace megaops
