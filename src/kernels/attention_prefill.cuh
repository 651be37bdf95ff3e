// Causal prefill attention on tensor cores (FlashAttention-2 style): the same contract as
// launch_prefill_attention (kernels/attention.cuh) so the executor can switch to it. A CTA takes
// 64 or 128 query tokens of one head (four or eight warps, 16 rows each); K and V tiles of 64 keys
// of the matching kv head (GQA) stream through shared memory two deep (cp.async); scores and P·V
// run on
// mma.sync m16n8k16 bf16 with fp32 accumulation, fed by ldmatrix; softmax is online (base 2,
// scale folded into the scores). Packed variable-length sequences: a block of 64 tokens that
// spans several slots runs one pass over the keys per slot, masking the rows of the others; a NaN
// or Inf in one sequence's q, K or V never reaches another sequence's output.
// head_dim 64 and 128 take this kernel; other head dims go to launch_prefill_attention.
#pragma once

#include "kernels/attention.cuh"

namespace megaops {

// Keys per shared-memory tile of the tensor-core kernel.
constexpr int PREFILL_FLASH_BK = 64;

// Whether launch_prefill_attention_flash runs p on the tensor-core kernel (head_dim 64 or 128);
// otherwise it forwards p to launch_prefill_attention.
bool prefill_attention_flash_supported(const PrefillAttentionParams& p);

// The query rows a CTA takes by default: 64. 128 rows load each K / V tile once for twice the rows
// (half the L2 traffic), but half the CTAs fill the GPU worse, and on the H200 128 was slower at
// every length bench-attention timed (1k-16k tokens, head_dim 64 and 128, 1-18%; docs/perf-notes.md
// "Prefill kernels, standalone"). block_q = 128 stays selectable.
int prefill_attention_flash_block_q(const PrefillAttentionParams& p);

// Same params, validation and results (bf16 rounding aside) as launch_prefill_attention.
// block_q: query rows a CTA, 64 or 128 (else cudaErrorInvalidValue); 0 takes
// prefill_attention_flash_block_q(p).
cudaError_t launch_prefill_attention_flash(const PrefillAttentionParams& p, int block_q = 0);

cudaError_t preload_prefill_attention_flash_kernels();

}  // namespace megaops
