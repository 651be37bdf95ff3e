// Attention over the KV cache with GQA (query head h reads kv head h / (num_heads / num_kv_heads)).
// Decode: one query token per sequence against its ctx_len cached positions. Prefill: causal, each
// query token at position p attends to positions [0, p] of its slot; tokens of one sequence are
// contiguous and in position order. The KV cache holds a row [num_kv_heads, head_dim] of bf16 per
// position, contiguous ([max_batch, max_seq, num_kv_heads, head_dim]) or paged through a block
// table (kernels/kv_pages.cuh: `slots` are then the sequences' rows of that table); accumulation
// is fp32. Requires head_dim % 8 == 0, head_dim <= 256 and 16-byte aligned q, caches and out;
// decode also needs G = num_heads / num_kv_heads <= 64 and G * head_dim <= 8192. A decode step
// launches two kernels (split + combine) when it may split the context, one otherwise.
#pragma once

#include "kernels/common.cuh"
#include "kernels/kv_pages.cuh"
#include "kernels/rope_fold.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct DecodeAttentionParams {
  const bf16* q = nullptr;  // [b, num_heads, head_dim]; not read (may be null) with rope.on()
  const bf16* k_cache = nullptr;
  const bf16* v_cache = nullptr;
  const int32_t* slots = nullptr;     // [b]: cache slot, or block-table row when kv is paged
  const int32_t* ctx_lens = nullptr;  // [b]: keys [0, ctx_len) are attended (device memory, so a
                                      // captured graph sees the length grow)
  KvPages kv;                  // the cache's paging (kernels/kv_pages.cuh); default contiguous
  bf16* out = nullptr;         // [b, num_heads * head_dim]
  float* workspace = nullptr;  // decode_attention_workspace_floats() floats
  // Optional, [b * num_kv_heads], zero before the first launch and left zero by every launch that
  // completes. When set, the CTA that finishes a (sequence, kv head) group's splits last merges
  // them, and launch_decode_attention launches no combine kernel (one kernel boundary fewer).
  uint32_t* done_counters = nullptr;
  // qkv_rope folded into this launch (kernels/rope_fold.cuh): with rope.on() the split kernel
  // forms q and the newest k / v rows from rope.qkv itself and writes those rows to the cache;
  // rope.k_cache / v_cache must be k_cache / v_cache, and the rows' slots are `slots`. Only where
  // decode_attention_can_fold_rope(*this) (else cudaErrorNotSupported).
  RopeFold rope;
  int b = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, max_seq = 0;
  float scale = 1.0f;
  // Overlap CTA budgets (0 = defaults). max_split_ctas lowers the number of context splits (never
  // below one split per (sequence, kv head)); max_combine_ctas caps the combine grid, whose CTAs
  // then stride over (sequence, head). Split and combine launches of one step must agree on
  // max_split_ctas (it fixes the workspace layout).
  int max_split_ctas = 0;
  int max_combine_ctas = 0;
  // Batch invariance (0 / -1 = the defaults, chosen from b). splits: the launch's split count
  // (1..decode_attention_max_splits()), instead of one derived from b and max_seq; a sequence's
  // chunks then depend on its context alone. per_head: 1 a CTA per query head, 0 a CTA per kv head
  // (G <= 8: the two kernels sum in different orders), -1 by the grid (b * num_heads against the
  // SMs). With both fixed, a sequence's output bits do not depend on the other rows of the launch.
  int splits = 0;
  int per_head = -1;
  // Overlap hooks (kernels/tile_sync.cuh) of the kernel being launched: the overlap executor
  // launches split and combine separately (launch_decode_attention_split / _combine), each with
  // its own sync; launch_decode_attention launches both and must get a default (unset) sync.
  TileSync sync;
  LaunchOptions launch;
};

// Workspace the decode kernel needs (split over the sequence for long contexts); an upper bound
// valid for any num_kv_heads. 0 means none is needed and workspace may be null. splits: that of
// DecodeAttentionParams::splits (0: the default split counts).
size_t decode_attention_workspace_floats(int b, int num_heads, int head_dim, int max_seq,
                                         int splits = 0);

cudaError_t launch_decode_attention(const DecodeAttentionParams& p);

// The split count a launch of b sequences takes by default (DecodeAttentionParams::splits 0, no
// CTA budget): what a batch-invariant caller fixes for every batch to keep batch 1's chunks.
int decode_attention_default_splits(int b, int num_kv_heads, int max_seq);
// The most splits a launch may have (DecodeAttentionParams::splits at most).
int decode_attention_max_splits();

// Whether the split kernel of p can fold qkv_rope (DecodeAttentionParams::rope): the shapes and
// budget of p take the per-query-head warp-parallel kernel (2-8 query heads per kv head,
// head_dim <= 128, b * num_heads CTAs a split within the SMs and max_split_ctas, or per_head 1)
// and b <= ROPE_FOLD_MAX_ROWS. Reads no pointer of p.
bool decode_attention_can_fold_rope(const DecodeAttentionParams& p);

// The two kernels of a decode step separately (overlap executor). The combine kernel is launched
// even when the context is not split (its CTAs then only signal), so an overlap step has the same
// ops whatever the batch size.
cudaError_t launch_decode_attention_split(const DecodeAttentionParams& p);
cudaError_t launch_decode_attention_combine(const DecodeAttentionParams& p);
// What those two launches occupy (with the CTA budgets applied).
cudaError_t decode_attention_footprint(const DecodeAttentionParams& p, KernelFootprint* split,
                                       KernelFootprint* combine);
cudaError_t preload_attention_kernels();

// The per-query-head kernel a persistent region's attention task runs to compute what
// launch_decode_attention_split(p) computes (kernels/persistent_region_ops.cuh), and the launch's
// split count: cudaErrorNotSupported where that launch takes a CTA per kv head group instead
// (batches whose query heads outnumber the SMs) or the tiled kernel (more than 8 query heads per
// kv head).
cudaError_t decode_attention_region_variant(const DecodeAttentionParams& p, int* variant,
                                            int* splits);

struct PrefillAttentionParams {
  const bf16* q = nullptr;  // [t, num_heads, head_dim]
  const bf16* k_cache = nullptr;
  const bf16* v_cache = nullptr;
  const int32_t* slots = nullptr;      // [t]: cache slot, or block-table row when kv is paged
  const int32_t* positions = nullptr;  // [t]
  KvPages kv;                          // the cache's paging (kernels/kv_pages.cuh)
  bf16* out = nullptr;                 // [t, num_heads * head_dim]
  int t = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, max_seq = 0;
  float scale = 1.0f;
  LaunchOptions launch;
};

cudaError_t launch_prefill_attention(const PrefillAttentionParams& p);

}  // namespace megaops
