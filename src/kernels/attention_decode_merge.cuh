// Private to the decode attention (attention_decode.cu, attention_decode_fast.cuh, and a persistent
// region's attention task): merging the partial outputs of a (sequence, kv head) group's context
// splits, by the CTA that finishes the group last (DecodeAttentionParams::done_counters) or by the
// combine kernel.
#pragma once

#include "kernels/attention_impl.cuh"

namespace megaops {
namespace {

// Merges the partials of the active splits for query heads [head0, head0 + nheads) of sequence
// bi; the calling CTA's threads stride over (head, dim). Partials are read with ordinary loads:
// in the fused path another CTA wrote them during this launch (see decode_merge_if_last).
__device__ __forceinline__ void decode_combine_heads(const DecodeAttentionParams& p, int splits,
                                                     int bi, int head0, int nheads, int n_active) {
  const int hd = p.head_dim;
  const float* ws_o = p.workspace;
  const float* ws_ml = p.workspace + static_cast<int64_t>(p.b) * p.num_heads * splits * hd;
  for (int idx = threadIdx.x; idx < nheads * hd; idx += blockDim.x) {
    const int h = head0 + idx / hd, d = idx % hd;
    const int64_t part0 = (static_cast<int64_t>(bi) * p.num_heads + h) * splits;
    float m = -INFINITY;
    for (int s = 0; s < n_active; ++s) m = fmaxf(m, ws_ml[2 * (part0 + s)]);
    float den = 0.0f, o = 0.0f;
    for (int s = 0; s < n_active; ++s) {
      const float w = exp2f(ws_ml[2 * (part0 + s)] - m);
      den += ws_ml[2 * (part0 + s) + 1] * w;
      o += ws_o[(part0 + s) * hd + d] * w;
    }
    p.out[(static_cast<int64_t>(bi) * p.num_heads + h) * hd + d] = __float2bfloat16(o / den);
  }
}

// Fused combine (p.done_counters set): called by every thread of an active split CTA after its
// partial writes. The CTA that completes a (sequence, kv head) group last merges the group's
// partials and puts the group's counter back to zero for the next launch. Ordering: the barrier
// orders the CTA's partial writes before thread 0's acq_rel add (cumulativity publishes them);
// the last adder's acquire reads the release sequence of every earlier add, and the second
// barrier extends that to the CTA's other threads.
// `arrivals`: the group's active CTAs (n_active, or n_active x G when a CTA serves one query head).
__device__ __forceinline__ void decode_merge_if_last(const DecodeAttentionParams& p, int splits,
                                                     int bi, int kv_head, int n_active,
                                                     int arrivals) {
  __shared__ int is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* counter = p.done_counters + static_cast<int64_t>(bi) * p.num_kv_heads + kv_head;
    const uint32_t before = atom_add_acq_rel_gpu(counter, 1u);
    is_last = before + 1 == static_cast<uint32_t>(arrivals);
    if (is_last) st_relaxed_gpu(counter, 0u);  // every active CTA of the group has added
  }
  __syncthreads();
  if (!is_last) return;
  const int group = p.num_heads / p.num_kv_heads;
  decode_combine_heads(p, splits, bi, kv_head * group, group, n_active);
}

}  // namespace
}  // namespace megaops
