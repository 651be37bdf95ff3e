// Private to the attention kernels (attention_decode.cu, attention.cu): the limits and tile
// sizes both decode and prefill are written against, the decode split plan, and the small device
// helpers (dot products, warp reductions, K/V tile loads) and launch checks they share. See
// attention_decode.cu and attention.cu for what the kernels do.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/attention.cuh"
#include "sync/atomics.cuh"

namespace megaops {
namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr int ATTN_MAX_HEAD_DIM = 256;

constexpr int DECODE_THREADS = 256;
constexpr int DECODE_TILE = 64;  // keys per shared-memory tile
// Keys of a split chunk, at least. The warp-parallel kernel (group <= 8) has 16-64 keys in flight
// per CTA step and a round of several steps' loads issued at once, so a chunk of 128 keys costs
// about one memory round trip; shorter chunks would only add splits to merge.
constexpr int DECODE_MIN_CHUNK = 128;
// Contexts up to this many keys are never split: a second round of loads (one more memory round
// trip) costs less than the merge of two splits (a release / acquire and the partials' round
// trip: +2.5 us a layer on llama3.1-8b at 129 keys, docs/perf-notes.md item 33).
constexpr int DECODE_UNSPLIT_MAX = 256;
constexpr int DECODE_TARGET_CTAS = 264;  // about two CTAs per SM on an H200 (132 SMs)
constexpr int DECODE_MAX_SPLITS = 64;
constexpr int DECODE_MAX_GROUP = 64;
constexpr int DECODE_MAX_PAIRS = 16;      // output pairs per thread: G * head_dim / 2 <= 16 * 256
constexpr int DECODE_FAST_MAX_GROUP = 8;  // the warp-parallel kernel keeps G queries in registers
// K/V rows each lane loads per round (keys a slot handles at once): 4 when a CTA serves a kv
// head's G query heads; when it serves one query head, whose q and accumulators leave the
// registers for it, 8 at head_dim 128 and 256 (128 and 64 keys a round; head_dim 64 has 128 keys
// a round at 4).
constexpr int DECODE_FAST_UNROLL = 4;
constexpr int DECODE_FAST_UNROLL_HEAD = 8;

constexpr int PREFILL_THREADS = 256;
constexpr int PREFILL_BQ = 32;  // query rows per CTA
constexpr int PREFILL_TK = 32;  // keys per tile (one per lane in the softmax step)
constexpr int PREFILL_MAX_PAIRS = PREFILL_BQ * ATTN_MAX_HEAD_DIM / 2 / PREFILL_THREADS;

inline int decode_splits(int b, int num_kv_heads, int max_seq, int max_ctas = 0) {
  const int by_len = static_cast<int>(ceil_div(static_cast<unsigned>(max_seq), DECODE_MIN_CHUNK));
  const int64_t groups = static_cast<int64_t>(b) * num_kv_heads;
  const int want = static_cast<int>(std::min<int64_t>((DECODE_TARGET_CTAS + groups - 1) / groups,
                                                      static_cast<int64_t>(DECODE_MAX_SPLITS)));
  int splits = std::max(1, std::min(want, by_len));
  // A CTA budget lowers the split count (fewer, longer chunks), never below one per group.
  if (max_ctas > 0)
    splits = std::max<int>(1, std::min<int64_t>(splits, max_ctas / std::max<int64_t>(groups, 1)));
  return splits;
}

// How a context of ctx keys is cut: n_active chunks of chunk keys (the last one shorter). Shared
// by the split and the combine kernels so they agree.
struct DecodeSplitPlan {
  int n_active, chunk;
};

__device__ __forceinline__ DecodeSplitPlan decode_split_plan(int ctx, int splits) {
  if (ctx <= 0) return {0, 0};
  const int want =
      ctx <= DECODE_UNSPLIT_MAX ? 1 : min(splits, (ctx + DECODE_MIN_CHUNK - 1) / DECODE_MIN_CHUNK);
  int chunk = (ctx + want - 1) / want;
  chunk = (chunk + DECODE_TILE - 1) / DECODE_TILE * DECODE_TILE;
  return {(ctx + chunk - 1) / chunk, chunk};
}

// The keys [*key_begin, *key_end) of split `split` of a ctx-key context. false: nothing for this
// CTA (a split past the context's chunks, or an empty context, whose output — out_elems values
// at `out`, zero by definition — split 0 writes). Called by all DECODE_THREADS threads.
__device__ __forceinline__ bool decode_chunk(int ctx, int splits, int split, int out_elems,
                                             bf16* out, DecodeSplitPlan* plan, int* key_begin,
                                             int* key_end) {
  *plan = decode_split_plan(ctx, splits);
  if (plan->n_active == 0) {
    if (split == 0)
      for (int i = threadIdx.x; i < out_elems; i += DECODE_THREADS) out[i] = __float2bfloat16(0.0f);
    return false;
  }
  if (split >= plan->n_active) return false;
  *key_begin = split * plan->chunk;
  *key_end = min(ctx, *key_begin + plan->chunk);
  return true;
}

// q (8 floats in shared memory) . k (8 bf16 in shared memory).
__device__ __forceinline__ float dot8(const float* q, const bf16* k) {
  const float4 qa = *reinterpret_cast<const float4*>(q);
  const float4 qb = *reinterpret_cast<const float4*>(q + 4);
  float kf[8];
  bf16x8_to_float(*reinterpret_cast<const uint4*>(k), kf);
  return qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
         qb.z * kf[6] + qb.w * kf[7];
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Shared-memory row stride of K/V tiles in bf16: the 16-byte pad makes the 16-byte row reads of
// eight consecutive rows (one quarter-warp phase) hit distinct banks.
__host__ __device__ constexpr int kv_stride(int head_dim) {
  return head_dim + 8;
}

// Copies keys [key0, key0 + n) of (slot, kv_head) into the K/V tiles, 16 bytes per load, each
// key's row through the cache's paging (kernels/kv_pages.cuh).
template <int THREADS>
__device__ __forceinline__ void load_kv_tile(const bf16* k_cache, const bf16* v_cache,
                                             const KvPages& kv, int64_t slot, int key0, int n,
                                             int kv_head, int num_kv_heads, int head_dim,
                                             int max_seq, bf16* ks, bf16* vs) {
  const int vecs_per_row = head_dim / 8;
  const int stride = kv_stride(head_dim);
#pragma unroll 4
  for (int v = threadIdx.x; v < n * vecs_per_row; v += THREADS) {
    const int row = v / vecs_per_row;
    const int col = (v - row * vecs_per_row) * 8;
    const int64_t src =
        (kv_row(kv, slot, key0 + row, max_seq) * num_kv_heads + kv_head) * head_dim + col;
    *reinterpret_cast<uint4*>(ks + row * stride + col) =
        *reinterpret_cast<const uint4*>(k_cache + src);
    *reinterpret_cast<uint4*>(vs + row * stride + col) =
        *reinterpret_cast<const uint4*>(v_cache + src);
  }
}

inline bool aligned(const void* ptr, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
}

inline bool aligned16(const void* ptr) {
  return aligned(ptr, 16);
}

// Kernels needing more than the default 48 KiB of dynamic shared memory must opt in. This is a
// function attribute, not a stream operation, so it is allowed while a stream is being captured.
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

}  // namespace

// The prefill kernel's preload (attention.cu), for preload_attention_kernels (attention_decode.cu).
cudaError_t preload_prefill_attention_kernel();

}  // namespace megaops
