// See plan_options.h.
#include "runtime/plan_options.h"

#include "core/run_options.h"

namespace megaops {

void apply_plan(const Plan& plan, ExecutorOptions& eo) {
  const PlanDecode& d = plan.decode;
  switch (d.backend) {
    case PlanBackend::Conventional:
      eo.backend = DecodeBackend::Conventional;
      eo.pdl = d.pdl;
      eo.overlap_streams = d.overlap_streams;
      eo.overlap_pdl_chain = false;
      break;
    case PlanBackend::PdlChain:
      eo.backend = DecodeBackend::Overlap;
      eo.pdl = false;  // the chain sets PDL on its own launches; the executor ignores this
      eo.overlap_streams = 1;
      eo.overlap_pdl_chain = true;
      break;
    case PlanBackend::Overlap:
      eo.backend = DecodeBackend::Overlap;
      eo.pdl = false;
      eo.overlap_streams = d.overlap_streams;
      eo.overlap_pdl_chain = false;
      break;
  }
  // Co-running regions have no executor yet.
  check_plan_runnable(plan, "plan");
  eo.overlap_regions.clear();
  eo.overlap_fold_norms = d.folds.norms;
  eo.overlap_fold_silu = d.folds.silu;
  eo.overlap_silu_epilogue_min_inter = d.folds.silu_epilogue_min_inter;
  eo.overlap_fold_rope = d.folds.rope;
  eo.overlap_chain_counter_waits = d.chain_counter_waits;
  eo.overlap_early_trigger_o_proj = d.early_trigger_o_proj;
  eo.greedy_in_lm_head = d.greedy_in_lm_head;
  eo.overlap_conventional_arithmetic = d.conventional_arithmetic;
  eo.overlap_vendor_chunks = d.vendor_chunks;
  eo.persistent_stages = d.persistent_stages;
  eo.persistent_ctas_per_sm = d.persistent_ctas_per_sm;
  MatmulSettings& m = eo.matmul;
  parse_matmul_path(d.matmul.path, &m, "plan: decode.matmul.path");
  m.stream_shapes = d.matmul.stream_shapes;
  m.stream_stages = d.matmul.stream_stages;
  m.stream_bulk.reset();
  if (d.matmul.stream_kernel != "auto")
    m.stream_bulk =
        parse_stream_kernel(d.matmul.stream_kernel, "plan: decode.matmul.stream_kernel");
  m.stream_l2_evict_first = d.matmul.l2_evict_first;
  m.tune = d.matmul.tune;
  eo.prefill_path = parse_prefill_path(plan.prefill.path, "plan", "prefill.path");
  eo.prefill_chunk = plan.prefill.chunk > 0 ? plan.prefill.chunk : ExecutorOptions{}.prefill_chunk;
  eo.prefill_attention =
      parse_prefill_attention(plan.prefill.attention, "plan", "prefill.attention");
}

Plan plan_from_options(const ExecutorOptions& eo) {
  Plan p;
  p.source = "flags";
  PlanDecode& d = p.decode;
  if (eo.backend == DecodeBackend::Conventional) {
    d.backend = PlanBackend::Conventional;
    d.pdl = eo.pdl;
    d.overlap_streams = eo.overlap_streams;
  } else if (eo.overlap_pdl_chain) {
    d.backend = PlanBackend::PdlChain;
    d.overlap_streams = 1;
  } else {
    d.backend = PlanBackend::Overlap;
    d.overlap_streams = eo.overlap_streams;
  }
  if (eo.backend == DecodeBackend::Overlap)
    for (const ExecutorOptions::OverlapRegion& r : eo.overlap_regions)
      d.regions.push_back({r.first_op,
                           r.persistent           ? RegionBackend::Persistent
                           : r.serial             ? RegionBackend::Conventional
                           : eo.overlap_pdl_chain ? RegionBackend::PdlChain
                                                  : RegionBackend::Overlap,
                           r.cta_budget});
  d.folds = {eo.overlap_fold_norms, eo.overlap_fold_silu, eo.overlap_silu_epilogue_min_inter,
             eo.overlap_fold_rope};
  d.chain_counter_waits = eo.overlap_chain_counter_waits;
  d.early_trigger_o_proj = eo.overlap_early_trigger_o_proj;
  d.greedy_in_lm_head = eo.greedy_in_lm_head;
  d.conventional_arithmetic = eo.overlap_conventional_arithmetic;
  d.vendor_chunks = eo.overlap_vendor_chunks;
  d.persistent_stages = eo.persistent_stages;
  d.persistent_ctas_per_sm = eo.persistent_ctas_per_sm;
  const MatmulSettings& m = eo.matmul;
  if (m.stream_for_small) {
    d.matmul.path = "stream-for-small";
  } else if (m.forced_path) {
    d.matmul.path = *m.forced_path == MatmulPath::SmallM   ? "small"
                    : *m.forced_path == MatmulPath::Stream ? "stream"
                                                           : "cublaslt";
  }
  d.matmul.stream_shapes = m.stream_shapes;
  d.matmul.stream_stages = m.stream_stages;
  d.matmul.stream_kernel = !m.stream_bulk ? "auto" : *m.stream_bulk ? "bulk" : "ring";
  d.matmul.l2_evict_first = m.stream_l2_evict_first;
  d.matmul.tune = m.tune;
  p.prefill.path = prefill_path_name(eo.prefill_path);
  // The executor's default chunk is the plan's unset one.
  p.prefill.chunk = eo.prefill_chunk == ExecutorOptions{}.prefill_chunk ? 0 : eo.prefill_chunk;
  p.prefill.attention = prefill_attention_name(eo.prefill_attention);
  return p;
}

void set_plan_regions(const Plan& plan, const std::string& origin, Executor& ex) {
  if (plan.decode.regions.empty()) return;
  check_plan_regions(plan, origin, ex.overlap_op_names());
  std::vector<ExecutorOptions::OverlapRegion> regions;
  for (const PlanRegion& r : plan.decode.regions)
    regions.push_back({r.first_op, r.backend == RegionBackend::Conventional,
                       r.backend == RegionBackend::Persistent, r.cta_budget});
  ex.set_overlap_regions(regions);
}

}  // namespace megaops
