// Attention over the bf16 KV cache, fp32 softmax and accumulation, on CUDA cores.
//
// Decode (flash-decoding): a CTA owns one (sequence, kv head, split) and all G = num_heads /
// num_kv_heads query heads of that kv group, so each K/V row is read from memory once per group;
// when every query head of the batch fits one CTA per SM (small batches), a CTA owns one
// (sequence, query head, split) instead, so G times as many SMs share the latency-bound work.
// A context of up to DECODE_UNSPLIT_MAX keys is one chunk; a longer one is cut into at most
// `splits` chunks (a multiple of the key tile, at least DECODE_MIN_CHUNK keys each), decided on
// the device from ctx_len because a captured graph sees the length grow. A sequence that needs one
// chunk writes its output directly; otherwise every chunk writes an unnormalised partial output
// with its running max and sum to the workspace, and either the last CTA of the group merges them
// (done_counters set) or a small combine kernel does. When the host-side split count is 1 (large
// batches) no merge happens at all. For G <= 8 the split kernel is warp-parallel over keys
// (decode_attention_fast: no block barrier per key tile, several K/V rows in flight per lane);
// above, a tiled kernel stages K/V tiles in shared memory. The per-query-head kernel can fold
// qkv_rope into its prologue (kernels/rope_fold.cuh, DecodeAttentionParams::rope).
//
// Prefill: a CTA owns a block of PREFILL_BQ consecutive query tokens and one query head, and
// streams K/V tiles of PREFILL_TK keys through shared memory with an online softmax. Tokens of one
// sequence are contiguous, but a block may straddle sequences: the block is processed as runs of
// equal slot, each run against keys [0, max position of the run] of its slot, masking rows outside
// the run and keys after each row's own position.
//
// Both use the log2 domain (q pre-scaled by scale * log2(e), exp2f). Limits: head_dim % 8 == 0 and
// head_dim <= 256 (16-byte rows); decode also needs G <= 64 and G * head_dim <= 8192 (registers).
#include <algorithm>
#include <cmath>

#include "kernels/attention.cuh"
#include "kernels/qkv_rope_row.cuh"
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

int decode_splits(int b, int num_kv_heads, int max_seq, int max_ctas = 0) {
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

// Copies keys [key0, key0 + n) of (slot, kv_head) into the K/V tiles, 16 bytes per load.
template <int THREADS>
__device__ __forceinline__ void load_kv_tile(const bf16* k_cache, const bf16* v_cache, int64_t slot,
                                             int key0, int n, int kv_head, int num_kv_heads,
                                             int head_dim, int max_seq, bf16* ks, bf16* vs) {
  const int vecs_per_row = head_dim / 8;
  const int stride = kv_stride(head_dim);
#pragma unroll 4
  for (int v = threadIdx.x; v < n * vecs_per_row; v += THREADS) {
    const int row = v / vecs_per_row;
    const int col = (v - row * vecs_per_row) * 8;
    const int64_t src = ((slot * max_seq + key0 + row) * num_kv_heads + kv_head) * head_dim + col;
    *reinterpret_cast<uint4*>(ks + row * stride + col) =
        *reinterpret_cast<const uint4*>(k_cache + src);
    *reinterpret_cast<uint4*>(vs + row * stride + col) =
        *reinterpret_cast<const uint4*>(v_cache + src);
  }
}

// ---------------------------------------------------------------------------------------------
// Decode

size_t decode_smem_bytes(int group, int head_dim) {
  return 2 * sizeof(bf16) * DECODE_TILE * kv_stride(head_dim) +
         sizeof(float) * (static_cast<size_t>(group) * head_dim + group * DECODE_TILE + 3 * group);
}

__device__ __forceinline__ void decode_merge_if_last(const DecodeAttentionParams& p, int splits,
                                                     int bi, int kv_head, int n_active,
                                                     int arrivals);

// One tile = (sequence bi, kv head, split). Must be called by all DECODE_THREADS threads with
// decode_smem_bytes() of dynamic shared memory at `smem` (16-byte aligned).
__device__ __forceinline__ void decode_attention_split(const DecodeAttentionParams& p, int splits,
                                                       int bi, int kv_head, int split,
                                                       unsigned char* smem) {
  const int tid = threadIdx.x;
  const int hd = p.head_dim, half = hd / 2;
  const int group = p.num_heads / p.num_kv_heads;
  const int stride = kv_stride(hd);
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + DECODE_TILE * stride;
  float* qs = reinterpret_cast<float*>(vs + DECODE_TILE * stride);  // [group][hd]
  float* sc = qs + group * hd;                                      // [group][DECODE_TILE]
  float* row_max = sc + group * DECODE_TILE;                        // [group]
  float* row_sum = row_max + group;
  float* row_alpha = row_sum + group;

  const int ctx = min(p.ctx_lens[bi], p.max_seq);
  const int head0 = kv_head * group;
  bf16* out = p.out + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  DecodeSplitPlan plan;
  int key_begin, key_end;
  if (!decode_chunk(ctx, splits, split, group * hd, out, &plan, &key_begin, &key_end)) return;
  const int64_t slot = p.slots[bi];

  const float q_scale = p.scale * LOG2E;
  const bf16* q = p.q + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  for (int v = tid; v < group * hd / 8; v += DECODE_THREADS) {
    float f[8];
    bf16x8_to_float(*reinterpret_cast<const uint4*>(q + v * 8), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[v * 8 + i] = f[i] * q_scale;
  }
  if (tid < group) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }

  const int npairs = group * half;
  float2 acc[DECODE_MAX_PAIRS];
#pragma unroll
  for (int r = 0; r < DECODE_MAX_PAIRS; ++r) acc[r] = make_float2(0.f, 0.f);

  for (int key0 = key_begin; key0 < key_end; key0 += DECODE_TILE) {
    const int n = min(DECODE_TILE, key_end - key0);
    __syncthreads();  // the previous tile's readers are done with ks, vs and sc
    load_kv_tile<DECODE_THREADS>(p.k_cache, p.v_cache, slot, key0, n, kv_head, p.num_kv_heads, hd,
                                 p.max_seq, ks, vs);
    __syncthreads();

    // Scores: thread -> (head g, key j); a warp shares g, so its q reads are broadcasts.
    for (int idx = tid; idx < group * DECODE_TILE; idx += DECODE_THREADS) {
      const int g = idx / DECODE_TILE, j = idx % DECODE_TILE;
      float s = -INFINITY;
      if (j < n) {
        s = 0.0f;
#pragma unroll 4
        for (int c = 0; c < hd; c += 8) s += dot8(qs + g * hd + c, ks + j * stride + c);
      }
      sc[idx] = s;
    }
    __syncthreads();

    // Online softmax, one warp per head. Key 0 of the tile is always valid, so the new max is
    // finite and exp2f(-inf - m) gives exact zeros for the padding keys.
    for (int g = tid / 32; g < group; g += DECODE_THREADS / 32) {
      const int lane = tid % 32;
      const float s0 = sc[g * DECODE_TILE + lane], s1 = sc[g * DECODE_TILE + lane + 32];
      const float m_old = row_max[g];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
      const float p0 = exp2f(s0 - m_new), p1 = exp2f(s1 - m_new);
      sc[g * DECODE_TILE + lane] = p0;
      sc[g * DECODE_TILE + lane + 32] = p1;
      const float tile_sum = warp_sum(p0 + p1);
      __syncwarp();  // every lane has read row_max[g] before lane 0 overwrites it
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);
        row_alpha[g] = alpha;
        row_max[g] = m_new;
        row_sum[g] = row_sum[g] * alpha + tile_sum;
      }
    }
    __syncthreads();

    // P . V: thread -> output pairs (g, d..d+1).
#pragma unroll
    for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
      const int idx = tid + r * DECODE_THREADS;
      if (idx < npairs) {
        const int g = idx / half, d = (idx - g * half) * 2;
        const float alpha = row_alpha[g];
        float2 a = make_float2(acc[r].x * alpha, acc[r].y * alpha);
        const float* pg = sc + g * DECODE_TILE;
#pragma unroll 8
        for (int j = 0; j < n; ++j) {
          const float pj = pg[j];
          const float2 v =
              __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * stride + d));
          a.x += pj * v.x;
          a.y += pj * v.y;
        }
        acc[r] = a;
      }
    }
  }
  // row_max / row_sum were last written before the final __syncthreads() above: visible here.

  if (plan.n_active == 1) {
#pragma unroll
    for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
      const int idx = tid + r * DECODE_THREADS;
      if (idx < npairs) {
        const int g = idx / half, d = (idx - g * half) * 2;
        const float inv = 1.0f / row_sum[g];
        *reinterpret_cast<__nv_bfloat162*>(out + g * hd + d) =
            __floats2bfloat162_rn(acc[r].x * inv, acc[r].y * inv);
      }
    }
    return;
  }
  // Partials: o [b][num_heads][splits][hd], then (max, sum) [b][num_heads][splits][2].
  const int64_t part0 = (static_cast<int64_t>(bi) * p.num_heads + head0) * splits + split;
  float* ws_o = p.workspace;
  float* ws_ml = p.workspace + static_cast<int64_t>(p.b) * p.num_heads * splits * hd;
#pragma unroll
  for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
    const int idx = tid + r * DECODE_THREADS;
    if (idx < npairs) {
      const int g = idx / half, d = (idx - g * half) * 2;
      *reinterpret_cast<float2*>(ws_o + (part0 + static_cast<int64_t>(g) * splits) * hd + d) =
          acc[r];
    }
  }
  if (tid < group) {
    const int64_t part = part0 + static_cast<int64_t>(tid) * splits;
    ws_ml[2 * part] = row_max[tid];
    ws_ml[2 * part + 1] = row_sum[tid];
  }
  if (p.done_counters != nullptr)
    decode_merge_if_last(p, splits, bi, kv_head, plan.n_active, plan.n_active);
}

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

// One tile = (sequence bi, query head h): merges the partials of the active splits.
__device__ __forceinline__ void decode_attention_combine(const DecodeAttentionParams& p, int splits,
                                                         int bi, int head) {
  const int ctx = min(p.ctx_lens[bi], p.max_seq);
  const DecodeSplitPlan plan = decode_split_plan(ctx, splits);
  if (plan.n_active <= 1) return;  // written directly by the split kernel
  decode_combine_heads(p, splits, bi, head, 1, plan.n_active);
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

// The rope fold's shared memory (kernels/rope_fold.cuh): bf16 rows of ROPE_FOLD_MAX_HEAD_DIM, the
// CTA's q row first, then the k rows, then the v rows of the launch's rows. Static, so only the
// kernels that fold (the callers of this function) have it.
constexpr int ROPE_FOLD_SMEM_ROWS = 1 + 2 * ROPE_FOLD_MAX_ROWS;

__device__ __forceinline__ bf16* rope_fold_rows() {
  __shared__ __align__(16) unsigned char rows[ROPE_FOLD_SMEM_ROWS * ROPE_FOLD_MAX_HEAD_DIM * 2];
  return reinterpret_cast<bf16*>(rows);
}

// Offsets (bf16 elements) in rope_fold_rows() of row r's k and v.
__device__ __forceinline__ int rope_fold_k_row(int r) {
  return (1 + r) * ROPE_FOLD_MAX_HEAD_DIM;
}
__device__ __forceinline__ int rope_fold_v_row(int r) {
  return (1 + ROPE_FOLD_MAX_ROWS + r) * ROPE_FOLD_MAX_HEAD_DIM;
}

// The launch's row whose key `key` is (sub_pos[r] == key; the first one), or -1: a cached key.
__device__ __forceinline__ int rope_fold_row_of(int key, const int (&sub_pos)[ROPE_FOLD_MAX_ROWS]) {
  int row = -1;
#pragma unroll
  for (int r = ROPE_FOLD_MAX_ROWS - 1; r >= 0; --r)
    if (key == sub_pos[r]) row = r;
  return row;
}

// A warp's part in the rope fold's prologue (rope_fold_prologue) of a per-query-head CTA serving
// query head `head` of row bi (kv head kv_head): warp 0 forms q when need_q, warps 1 + 2r and
// 2 + 2r the k and v of row r when its key is in the CTA's chunk (bit r of sub_mask) or when r is
// bi and the CTA writes row bi's k / v to the cache (`writes`). kind (warp-uniform): 0 q, 1 k,
// 2 v, -1 none; r its row; norm whether its head has a norm (Qwen3's q / k); c its lane's
// constants. Reads only weights and step inputs: may run before the wait (so their loads overlap
// the predecessor).
struct RopeFoldWarp {
  int kind = -1, r = 0, qkv_head = 0;
  bool norm = false;
  QkvRopeConsts c;
};

__device__ __forceinline__ RopeFoldWarp rope_fold_warp(const DecodeAttentionParams& p, int bi,
                                                       int head, int kv_head, bool need_q,
                                                       unsigned sub_mask, bool writes) {
  static_assert(1 + 2 * ROPE_FOLD_MAX_ROWS <= DECODE_THREADS / 32, "a warp per head");
  const int warp = threadIdx.x / 32;
  RopeFoldWarp w;
  w.r = bi;
  if (warp == 0) {
    w.kind = need_q ? 0 : -1;
  } else if (warp <= 2 * ROPE_FOLD_MAX_ROWS) {
    w.r = (warp - 1) / 2;
    const bool need = w.r < p.b && (((sub_mask >> w.r) & 1u) != 0 || (w.r == bi && writes));
    w.kind = need ? 1 + (warp - 1) % 2 : -1;
  }
  if (w.kind >= 0) {
    w.qkv_head = w.kind == 0   ? head
                 : w.kind == 1 ? p.num_heads + kv_head
                               : p.num_heads + p.num_kv_heads + kv_head;
    const bf16* norm_w = w.kind == 0 ? p.rope.q_norm : w.kind == 1 ? p.rope.k_norm : nullptr;
    w.norm = norm_w != nullptr;
    w.c = qkv_rope_row_consts(p.rope.inv_freq, norm_w, p.head_dim, w.kind != 2);
  }
  return w;
}

// The rope fold's prologue, each warp's part w (rope_fold_warp): with qkv_rope's arithmetic
// (kernels/qkv_rope_row.cuh, a warp per head on qkv_rope's lane mapping) the warp forms its q, k or
// v row, rounded to bf16 into rope_fold_rows() as qkv_rope writes q_out and the cache, and a k / v
// warp of row bi in a CTA that `writes` also stores it into the cache at pos_self of `slot`. Reads
// the predecessor's qkv: after the wait. Called by all DECODE_THREADS threads; ends with a barrier.
__device__ __forceinline__ void rope_fold_prologue(const DecodeAttentionParams& p,
                                                   const RopeFoldWarp& w, int bi, int kv_head,
                                                   bool writes, int pos_self, int64_t slot) {
  const RopeFold& f = p.rope;
  const int hd = p.head_dim;
  if (w.kind >= 0) {
    const bool rope = w.kind != 2;
    const int heads_per_token = p.num_heads + 2 * p.num_kv_heads;
    const float* src = f.qkv + (static_cast<int64_t>(w.r) * heads_per_token + w.qkv_head) * hd;
    const int pos = f.positions[w.r];
    float2 lo[QKV_ROPE_GROUPS], hi[QKV_ROPE_GROUPS];
    qkv_rope_row<float>(src, hd, w.c, w.norm, rope, f.eps, pos, lo, hi);
    bf16* rows = rope_fold_rows();
    qkv_rope_row_store(rows + (w.kind == 0   ? 0
                               : w.kind == 1 ? rope_fold_k_row(w.r)
                                             : rope_fold_v_row(w.r)),
                       hd, lo, hi);
    if (w.kind != 0 && w.r == bi && writes) {
      const int64_t at = ((slot * p.max_seq + pos_self) * p.num_kv_heads + kv_head) * hd;
      qkv_rope_row_store((w.kind == 1 ? f.k_cache : f.v_cache) + at, hd, lo, hi);
    }
  }
  __syncthreads();
}

// Warp-parallel decode for G <= GMAX query heads per kv head and head_dim <= 8 * LPK. A warp's
// lanes form 32 / LPK key slots of LPK lanes; a slot holds one key at a time, each lane 8 of its
// dims (one 16-byte K load and one V load), so the CTA has 8 * 32 / LPK keys in flight per step
// and U steps' loads (a round) are issued before the first is used. Within a
// round the U scores are independent (dot products and their xor-shuffle reductions interleave),
// the slot's running max moves once per round, and the U exponentials are independent too: the
// only serial chain is the accumulation itself, not an online-softmax update per key. Each slot
// keeps its own (max, sum, 8 output dims per head) in registers, with no block barrier in the key
// loop; slots merge through shuffles, warps through shared memory at the end. The shuffles are
// executed by every lane (the round bounds are warp-uniform; a lane past the chunk end contributes
// zeros and skips the update). The context length and the cache slot are read before the wait
// (written by the previous step's step_advance or the host, never inside a step); q and the
// cache after it. PER_HEAD (GMAX = 1): the CTA at y serves query head y alone (more CTAs, a
// G-th of the work each, where a small grid leaves most SMs idle); otherwise kv head y and its G
// query heads. FOLD (PER_HEAD only): qkv_rope folded in (kernels/rope_fold.cuh): before the wait
// the CTA reads the rows' positions (like the context), issues its first round's loads of cached
// keys and loads its q / k norm and RoPE constants; after it, it forms q and the keys of this
// launch's rows from the fp32 qkv rows (rope_fold_prologue), and takes those keys from shared
// memory instead of the cache.
template <int GMAX, int LPK, int UNROLL, bool PER_HEAD, bool FOLD>
__device__ __forceinline__ void decode_attention_fast(const DecodeAttentionParams& p, int splits,
                                                      int bi, int y, int split, uint32_t step,
                                                      unsigned char* smem) {
  static_assert(!PER_HEAD || GMAX == 1, "a per-head CTA serves one query head");
  static_assert(!FOLD || PER_HEAD, "the rope fold runs on the per-query-head kernel only");
  constexpr int NWARPS = DECODE_THREADS / 32;
  constexpr int SLOTS = 32 / LPK;
  constexpr int STEP = NWARPS * SLOTS;  // keys per CTA step
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int sub = lane % LPK, kslot = lane / LPK;
  const int hd = p.head_dim, group = p.num_heads / p.num_kv_heads;
  const int kv_head = PER_HEAD ? y / group : y;
  const int nh = PER_HEAD ? 1 : group;  // query heads of this CTA
  const int head0 = PER_HEAD ? y : kv_head * group;
  const int dim0 = sub * 8;
  const bool has_dims = dim0 < hd;

  const int ctx_raw = p.ctx_lens[bi];
  const int64_t slot = p.slots[bi];
  // FOLD: every row's slot and position (the keys this launch writes), this row's position.
  [[maybe_unused]] int64_t fold_slot[ROPE_FOLD_MAX_ROWS];
  [[maybe_unused]] int fold_pos[ROPE_FOLD_MAX_ROWS];
  [[maybe_unused]] int pos_self = -1;
  if constexpr (FOLD) {
#pragma unroll
    for (int r = 0; r < ROPE_FOLD_MAX_ROWS; ++r) {
      fold_slot[r] = r < p.b ? p.slots[r] : -1;
      fold_pos[r] = r < p.b ? p.rope.positions[r] : -1;
    }
    pos_self = p.rope.positions[bi];
  }
  const int ctx = min(ctx_raw, p.max_seq);
  bf16* out = p.out + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * hd;  // between positions
  const int64_t off0 = (slot * p.max_seq * p.num_kv_heads + kv_head) * hd + dim0;
  const bf16* kp = p.k_cache + off0;
  const bf16* vp = p.v_cache + off0;

  // A round's K / V rows. Declared outside the key loop for FOLD, whose first round is loaded
  // before the wait; every other round assigns them all before reading them.
  uint4 kr[UNROLL], vr[UNROLL];
  // FOLD: the keys of this launch's rows in this CTA's chunk [kb, ke) (sub_pos[r]: row r's key,
  // or -1), and the first round of cached keys (round base0), loaded before the wait so that
  // their round trip overlaps the predecessor. Every cached key this CTA reads is settled before
  // the wait: the keys this launch writes are exactly its rows' (slot, position) pairs, which it
  // takes from the prologue instead (sub_pos; the pairs are step inputs, read before the wait),
  // and every other row of the cache was written by an earlier step (a chain kernel starts only
  // once the one before it has passed its own wait, so every grid before that one has completed).
  [[maybe_unused]] int sub_pos[ROPE_FOLD_MAX_ROWS];
  [[maybe_unused]] int base0 = 0, ke = 0;
  [[maybe_unused]] bool has_keys = false, writes = false;
  [[maybe_unused]] RopeFoldWarp fold_warp;
  if constexpr (FOLD) {
    const DecodeSplitPlan fp = decode_split_plan(ctx, splits);
    has_keys = split < fp.n_active;
    const int kb = split * fp.chunk;
    ke = has_keys ? min(ctx, kb + fp.chunk) : kb;
    unsigned sub_mask = 0;
#pragma unroll
    for (int r = 0; r < ROPE_FOLD_MAX_ROWS; ++r) {
      const bool in = fold_slot[r] == slot && fold_pos[r] >= kb && fold_pos[r] < ke;
      sub_pos[r] = in ? fold_pos[r] : -1;
      sub_mask |= in ? 1u << r : 0u;
    }
    // The one CTA of (row, kv head) that writes the row's k / v to the cache: the group's first
    // query head, in the split that attends the position (split 0 when none does).
    const int owner = pos_self >= 0 && pos_self < ctx ? pos_self / fp.chunk : 0;
    writes = y % group == 0 && split == owner && pos_self >= 0 && pos_self < p.max_seq;
    base0 = kb + warp * SLOTS;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int key = base0 + kslot + u * STEP;
      kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
      if (has_dims && key < ke && rope_fold_row_of(key, sub_pos) < 0) {
        kr[u] = *reinterpret_cast<const uint4*>(kp + key * row);
        vr[u] = *reinterpret_cast<const uint4*>(vp + key * row);
      }
    }
    fold_warp = rope_fold_warp(p, bi, head0, kv_head, has_keys, sub_mask, writes);
  }
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  uint4 qraw[GMAX];
  if constexpr (!FOLD) {
    const bf16* qp = p.q + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd + dim0;
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      qraw[g] = make_uint4(0u, 0u, 0u, 0u);
      if (g < nh && has_dims) qraw[g] = *reinterpret_cast<const uint4*>(qp + g * hd);
    }
  } else {
    rope_fold_prologue(p, fold_warp, bi, kv_head, writes, pos_self, slot);
    const bf16* rows = rope_fold_rows();
    qraw[0] = make_uint4(0u, 0u, 0u, 0u);
    if (has_keys && has_dims) qraw[0] = *reinterpret_cast<const uint4*>(rows + dim0);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int key = base0 + kslot + u * STEP;
      const int r = rope_fold_row_of(key, sub_pos);
      if (has_dims && key < ke && r >= 0) {
        kr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_k_row(r) + dim0);
        vr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_v_row(r) + dim0);
      }
    }
  }
  DecodeSplitPlan plan;
  int key_begin, key_end;
  if (!decode_chunk(ctx, splits, split, nh * hd, out, &plan, &key_begin, &key_end)) return;

  float q[GMAX][8];
  const float q_scale = p.scale * LOG2E;
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    bf16x8_to_float(qraw[g], q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= q_scale;
  }
  float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  for (int base = key_begin + warp * SLOTS; base < key_end; base += STEP * UNROLL) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int key = base + kslot + u * STEP;
      if constexpr (FOLD) {
        if (base == base0) continue;  // loaded before the wait
        kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
        if (has_dims && key < key_end) {
          // A key of this launch's rows from shared memory, any other from the cache.
          const int r = rope_fold_row_of(key, sub_pos);
          if (r >= 0) {
            const bf16* rows = rope_fold_rows();
            kr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_k_row(r) + dim0);
            vr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_v_row(r) + dim0);
          } else {
            kr[u] = *reinterpret_cast<const uint4*>(kp + key * row);
            vr[u] = *reinterpret_cast<const uint4*>(vp + key * row);
          }
        }
      } else {
        kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
        if (has_dims && key < key_end) {
          kr[u] = *reinterpret_cast<const uint4*>(kp + key * row);
          vr[u] = *reinterpret_cast<const uint4*>(vp + key * row);
        }
      }
    }
    // Steps of this round with a key for some slot of the warp (warp-uniform).
    const int steps = min(UNROLL, (key_end - base + STEP - 1) / STEP);
    float s[UNROLL][GMAX];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float kf[8];
      bf16x8_to_float(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        s[u][g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s[u][g] += q[g][i] * kf[i];
      }
    }
#pragma unroll
    for (int off = LPK / 2; off > 0; off /= 2)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (u < steps)
#pragma unroll
          for (int g = 0; g < GMAX; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
    // This slot's keys of the round: steps u < mine (keys are consecutive per step).
    const int mine = min(UNROLL, max(0, (key_end - base - kslot + STEP - 1) / STEP));
    if (mine == 0) continue;
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (u < mine) m_new = fmaxf(m_new, s[u][g]);
      const float alpha = exp2f(m[g] - m_new);  // 0 for the slot's first round (m = -inf)
      l[g] *= alpha;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
      m[g] = m_new;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) s[u][g] = u < mine ? exp2f(s[u][g] - m_new) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (u >= mine) break;
      float vf[8];
      bf16x8_to_float(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        l[g] += s[u][g];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] += s[u][g] * vf[i];
      }
    }
  }

  // Merge the warp's key slots (lanes that differ in the bits above the slot's lanes). A slot that
  // saw no key has m = -inf and weighs zero.
#pragma unroll
  for (int off = LPK; off < 32; off *= 2) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mn = fmaxf(m[g], mo);
      const float a = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mn);
      const float b = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[g] = l[g] * a + lo * b;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        acc[g][i] = acc[g][i] * a + __shfl_xor_sync(0xffffffffu, acc[g][i], off) * b;
      m[g] = mn;
    }
  }

  // Merge the warps: slot 0 of each warp publishes, then threads stride over (head, dim).
  float* s_acc = reinterpret_cast<float*>(smem);  // [NWARPS][nh][hd]
  float* s_m = s_acc + NWARPS * nh * hd;          // [NWARPS][nh]
  float* s_l = s_m + NWARPS * nh;
  if (kslot == 0) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      if (g >= nh) break;
      if (has_dims) {
        float* dst = s_acc + (warp * nh + g) * hd + dim0;
        *reinterpret_cast<float4*>(dst) = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
        *reinterpret_cast<float4*>(dst + 4) =
            make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
      }
      if (sub == 0) {
        s_m[warp * nh + g] = m[g];
        s_l[warp * nh + g] = l[g];
      }
    }
  }
  __syncthreads();
  const int64_t part0 = (static_cast<int64_t>(bi) * p.num_heads + head0) * splits + split;
  float* ws_o = p.workspace;
  float* ws_ml = p.workspace + static_cast<int64_t>(p.b) * p.num_heads * splits * hd;
  for (int idx = tid; idx < nh * hd; idx += DECODE_THREADS) {
    const int g = idx / hd, d = idx - g * hd;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) mx = fmaxf(mx, s_m[w * nh + g]);
    float den = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) {
      const float mw = s_m[w * nh + g];
      const float sc = mw == -INFINITY ? 0.0f : exp2f(mw - mx);
      den += s_l[w * nh + g] * sc;
      o += s_acc[(w * nh + g) * hd + d] * sc;
    }
    if (plan.n_active == 1) {
      out[g * hd + d] = __float2bfloat16(o / den);
    } else {
      const int64_t part = part0 + static_cast<int64_t>(g) * splits;
      ws_o[part * hd + d] = o;
      if (d == 0) {
        ws_ml[2 * part] = mx;
        ws_ml[2 * part + 1] = den;
      }
    }
  }
  if (plan.n_active > 1 && p.done_counters != nullptr)
    decode_merge_if_last(p, splits, bi, kv_head, plan.n_active, plan.n_active * group / nh);
}

size_t decode_fast_smem_bytes(int group, int head_dim) {
  return sizeof(float) * (DECODE_THREADS / 32) * group * (head_dim + 2);
}

__global__ void __launch_bounds__(DECODE_THREADS)
    decode_attention_split_kernel(DecodeAttentionParams p, int splits) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  // q, the cache and ctx_lens are all written by predecessors. q and the cache (which the overlap
  // step's qkv_rope writes while this kernel may already be resident) are read with ordinary
  // loads, coherent after the acquire in tile_sync_wait.
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  decode_attention_split(p, splits, blockIdx.z, blockIdx.y, blockIdx.x, decode_smem);
  // Reached by every CTA, also those whose split is empty for this context length.
  tile_sync_signal(p.sync, step);
}

template <int GMAX, int LPK, int U, bool PER_HEAD, bool FOLD = false>
__global__ void __launch_bounds__(DECODE_THREADS)
    decode_attention_fast_kernel(DecodeAttentionParams p, int splits) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  // As decode_attention_split_kernel; the wait is inside, after the context length's loads.
  const uint32_t step = tile_sync_step(p.sync);
  decode_attention_fast<GMAX, LPK, U, PER_HEAD, FOLD>(p, splits, blockIdx.z, blockIdx.y, blockIdx.x,
                                                      step, decode_smem);
  tile_sync_signal(p.sync, step);
}

using DecodeSplitKernel = void (*)(DecodeAttentionParams, int);

struct DecodeSplitChoice {
  DecodeSplitKernel kernel;
  size_t smem;
  dim3 grid;
};

// The SMs of the current device (the first call's), which the per-query-head choice compares
// the grid with.
int decode_sm_count() {
  static const int sms = [] {
    int n = 0;
    return current_device_attribute(cudaDevAttrMultiProcessorCount, &n) == cudaSuccess ? n : 0;
  }();
  return sms;
}

// Whether the warp-parallel kernel (G <= 8) serves one query head a CTA: when every query head of
// the batch fits one CTA per SM (and within an overlap CTA budget); at batch 1 a CTA per kv head
// leaves 124 of 132 SMs idle while each runs G heads' work.
bool decode_per_head_by_grid(const DecodeAttentionParams& p, int splits) {
  const int group = p.num_heads / p.num_kv_heads;
  const int64_t heads = static_cast<int64_t>(p.b) * p.num_heads;
  return group > 1 && heads <= decode_sm_count() &&
         (p.max_split_ctas <= 0 || heads * splits <= p.max_split_ctas);
}

// The split kernel of a launch with `splits`: the warp-parallel one for G <= 8 (every Llama 3 /
// Qwen 3 shape), the tiled one above; the warp-parallel one per query head by the grid
// (decode_per_head_by_grid), or per kv head. per_head forces the choice either way (-1: by the
// grid). With p.rope on (decode_attention_check admitted it: per query head by the grid,
// head_dim <= 128) the per-query-head kernel that folds qkv_rope.
DecodeSplitChoice decode_split_kernel(const DecodeAttentionParams& p, int splits,
                                      int per_head = -1) {
  const int group = p.num_heads / p.num_kv_heads, head_dim = p.head_dim;
  if (group > DECODE_FAST_MAX_GROUP)
    return {decode_attention_split_kernel, decode_smem_bytes(group, head_dim),
            dim3(splits, p.num_kv_heads, p.b)};
  const int gmax = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  const int li = head_dim <= 64 ? 0 : head_dim <= 128 ? 1 : 2;
  constexpr int U = DECODE_FAST_UNROLL, H = DECODE_FAST_UNROLL_HEAD;
  static const DecodeSplitKernel table[4][3] = {
      {decode_attention_fast_kernel<1, 8, U, false>, decode_attention_fast_kernel<1, 16, U, false>,
       decode_attention_fast_kernel<1, 32, U, false>},
      {decode_attention_fast_kernel<2, 8, U, false>, decode_attention_fast_kernel<2, 16, U, false>,
       decode_attention_fast_kernel<2, 32, U, false>},
      {decode_attention_fast_kernel<4, 8, U, false>, decode_attention_fast_kernel<4, 16, U, false>,
       decode_attention_fast_kernel<4, 32, U, false>},
      {decode_attention_fast_kernel<8, 8, U, false>, decode_attention_fast_kernel<8, 16, U, false>,
       decode_attention_fast_kernel<8, 32, U, false>}};
  static const DecodeSplitKernel per_head_table[3] = {decode_attention_fast_kernel<1, 8, U, true>,
                                                      decode_attention_fast_kernel<1, 16, H, true>,
                                                      decode_attention_fast_kernel<1, 32, H, true>};
  static const DecodeSplitKernel fold_table[2] = {
      decode_attention_fast_kernel<1, 8, U, true, true>,
      decode_attention_fast_kernel<1, 16, H, true, true>};
  if (p.rope.on())
    return {fold_table[li], decode_fast_smem_bytes(1, head_dim), dim3(splits, p.num_heads, p.b)};
  if (per_head == 1 || (per_head < 0 && decode_per_head_by_grid(p, splits)))
    return {per_head_table[li], decode_fast_smem_bytes(1, head_dim),
            dim3(splits, p.num_heads, p.b)};
  const int gi = gmax == 1 ? 0 : gmax == 2 ? 1 : gmax == 4 ? 2 : 3;
  return {table[gi][li], decode_fast_smem_bytes(group, head_dim),
          dim3(splits, p.num_kv_heads, p.b)};
}

constexpr int COMBINE_THREADS = 128;

__global__ void __launch_bounds__(COMBINE_THREADS)
    decode_attention_combine_kernel(DecodeAttentionParams p, int splits) {
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);  // the partials of the split kernel
  pdl_launch_dependents();
  // (sequence, head) pairs; the default grid (num_heads, b) has one CTA per pair, a capped 1-D
  // grid strides.
  const int pairs = p.num_heads * p.b;
  for (int pair = blockIdx.x + gridDim.x * blockIdx.y; pair < pairs; pair += gridDim.x * gridDim.y)
    decode_attention_combine(p, splits, pair / p.num_heads, pair % p.num_heads);
  tile_sync_signal(p.sync, step);
}

// ---------------------------------------------------------------------------------------------
// Prefill

__host__ __device__ constexpr int prefill_q_stride(int head_dim) {
  return head_dim + 4;
}

size_t prefill_smem_bytes(int head_dim) {
  return sizeof(float) * PREFILL_BQ * prefill_q_stride(head_dim) +
         2 * sizeof(bf16) * PREFILL_TK * kv_stride(head_dim) +
         sizeof(float) * PREFILL_BQ * (PREFILL_TK + 1) + sizeof(float) * 3 * PREFILL_BQ +
         sizeof(int) * 2 * PREFILL_BQ;
}

// One tile = (block of PREFILL_BQ tokens starting at q_block * PREFILL_BQ, query head). Must be
// called by all PREFILL_THREADS threads with prefill_smem_bytes() of dynamic shared memory.
__device__ void prefill_attention_block(const PrefillAttentionParams& p, int q_block, int head,
                                        unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int hd = p.head_dim, half = hd / 2;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int q_stride = prefill_q_stride(hd), stride = kv_stride(hd);
  constexpr int S_STRIDE = PREFILL_TK + 1;
  float* qs = reinterpret_cast<float*>(smem);                      // [BQ][q_stride]
  bf16* ks = reinterpret_cast<bf16*>(qs + PREFILL_BQ * q_stride);  // [TK][stride]
  bf16* vs = ks + PREFILL_TK * stride;
  float* sc = reinterpret_cast<float*>(vs + PREFILL_TK * stride);  // [BQ][S_STRIDE]
  float* row_max = sc + PREFILL_BQ * S_STRIDE;
  float* row_sum = row_max + PREFILL_BQ;
  float* row_alpha = row_sum + PREFILL_BQ;
  int* row_pos = reinterpret_cast<int*>(row_alpha + PREFILL_BQ);
  int* row_slot = row_pos + PREFILL_BQ;

  const int q0 = q_block * PREFILL_BQ;
  const int rows = min(PREFILL_BQ, p.t - q0);
  if (tid < PREFILL_BQ) {
    const bool valid = tid < rows;
    row_pos[tid] = valid ? p.positions[q0 + tid] : -1;
    row_slot[tid] = valid ? p.slots[q0 + tid] : -1;
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }
  const float q_scale = p.scale * LOG2E;
  for (int v = tid; v < PREFILL_BQ * (hd / 8); v += PREFILL_THREADS) {
    const int r = v / (hd / 8), c = (v - r * (hd / 8)) * 8;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rows) {
      const bf16* src = p.q + (static_cast<int64_t>(q0 + r) * p.num_heads + head) * hd + c;
      bf16x8_to_float(*reinterpret_cast<const uint4*>(src), f);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[r * q_stride + c + i] = f[i] * q_scale;
  }
  __syncthreads();

  const int npairs = PREFILL_BQ * half;
  float2 acc[PREFILL_MAX_PAIRS];
#pragma unroll
  for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) acc[i] = make_float2(0.f, 0.f);

  // Score mapping: thread -> row tid / 8 and keys tid % 8 + 8 * c.
  const int s_row = tid / 8, s_key = tid % 8;

  int seg_begin = 0;
  while (seg_begin < rows) {
    // A run of rows with the same slot; every thread derives the same run from shared memory.
    const int slot = row_slot[seg_begin];
    int seg_end = seg_begin + 1;
    int key_last = row_pos[seg_begin];
    while (seg_end < rows && row_slot[seg_end] == slot)
      key_last = max(key_last, row_pos[seg_end++]);
    key_last = min(key_last, p.max_seq - 1);

    for (int key0 = 0; key0 <= key_last; key0 += PREFILL_TK) {
      const int n = min(PREFILL_TK, key_last + 1 - key0);
      __syncthreads();  // the previous tile's readers are done with ks, vs and sc
      load_kv_tile<PREFILL_THREADS>(p.k_cache, p.v_cache, slot, key0, n, kv_head, p.num_kv_heads,
                                    hd, p.max_seq, ks, vs);
      __syncthreads();

      {
        const bool row_in_seg = s_row >= seg_begin && s_row < seg_end;
        const int pos = row_pos[s_row];
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        if (row_in_seg) {
          for (int c = 0; c < hd; c += 8) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int j = s_key + 8 * k;
              if (j < n) s[k] += dot8(qs + s_row * q_stride + c, ks + j * stride + c);
            }
          }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int j = s_key + 8 * k;
          const bool valid = row_in_seg && j < n && key0 + j <= pos;
          sc[s_row * S_STRIDE + j] = valid ? s[k] : -INFINITY;
        }
      }
      __syncthreads();

      // Online softmax, one warp per 4 rows, one key per lane. A row with no valid key so far
      // (outside the run, or before its first key) keeps max -inf; it must not form -inf - -inf.
      for (int r = warp * (PREFILL_BQ / 8); r < (warp + 1) * (PREFILL_BQ / 8); ++r) {
        const float s = sc[r * S_STRIDE + lane];
        const float m_old = row_max[r];
        const float m_new = fmaxf(m_old, warp_max(s));
        const bool live = m_new != -INFINITY;
        const float pr = live ? exp2f(s - m_new) : 0.0f;
        sc[r * S_STRIDE + lane] = pr;
        const float tile_sum = warp_sum(pr);
        __syncwarp();  // every lane has read row_max[r] before lane 0 overwrites it
        if (lane == 0) {
          const float alpha = live ? exp2f(m_old - m_new) : 1.0f;
          row_alpha[r] = alpha;
          row_max[r] = m_new;
          row_sum[r] = row_sum[r] * alpha + tile_sum;
        }
      }
      __syncthreads();

      // Only the run's rows take this tile's values: the others' p is 0 here, but 0 x a NaN or
      // Inf in this sequence's values is NaN, and one request's broken values must not reach
      // another's output.
#pragma unroll
      for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) {
        const int idx = tid + i * PREFILL_THREADS;
        const int r = idx / half;
        if (idx < npairs && r >= seg_begin && r < seg_end) {
          const int d = (idx - r * half) * 2;
          const float alpha = row_alpha[r];
          float2 a = make_float2(acc[i].x * alpha, acc[i].y * alpha);
          const float* pr = sc + r * S_STRIDE;
          for (int j = 0; j < n; ++j) {
            const float pj = pr[j];
            const float2 v =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * stride + d));
            a.x += pj * v.x;
            a.y += pj * v.y;
          }
          acc[i] = a;
        }
      }
    }
    seg_begin = seg_end;
  }
  __syncthreads();  // row_sum of the last tile, also when no tile ran for some rows

#pragma unroll
  for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) {
    const int idx = tid + i * PREFILL_THREADS;
    if (idx < npairs) {
      const int r = idx / half, d = (idx - r * half) * 2;
      if (r < rows) {
        // A row that saw no key (position outside the cache) is defined as zero.
        const float l = row_sum[r];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16* out = p.out + (static_cast<int64_t>(q0 + r) * p.num_heads + head) * hd + d;
        *reinterpret_cast<__nv_bfloat162*>(out) =
            __floats2bfloat162_rn(acc[i].x * inv, acc[i].y * inv);
      }
    }
  }
}

__global__ void __launch_bounds__(PREFILL_THREADS)
    prefill_attention_kernel(PrefillAttentionParams p) {
  extern __shared__ __align__(16) unsigned char prefill_smem[];
  pdl_wait();
  pdl_launch_dependents();
  prefill_attention_block(p, blockIdx.x, blockIdx.y, prefill_smem);
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
}

bool aligned16(const void* ptr) {
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

bool decode_attention_can_fold_rope(const DecodeAttentionParams& p) {
  if (p.b < 1 || p.b > ROPE_FOLD_MAX_ROWS || p.num_heads <= 0 || p.num_kv_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || p.head_dim <= 0 || p.head_dim % 8 != 0 ||
      p.head_dim > ROPE_FOLD_MAX_HEAD_DIM || p.max_seq <= 0 || p.max_split_ctas < 0)
    return false;
  const int group = p.num_heads / p.num_kv_heads;
  if (group < 2 || group > DECODE_FAST_MAX_GROUP) return false;
  return decode_per_head_by_grid(p,
                                 decode_splits(p.b, p.num_kv_heads, p.max_seq, p.max_split_ctas));
}

size_t decode_attention_workspace_floats(int b, int num_heads, int head_dim, int max_seq) {
  if (b <= 0 || num_heads <= 0 || head_dim <= 0 || max_seq <= 0) return 0;
  // num_kv_heads = 1 gives the most splits the launcher can choose for these shapes.
  const int splits = decode_splits(b, 1, max_seq);
  if (splits == 1) return 0;
  return static_cast<size_t>(b) * num_heads * splits * (head_dim + 2);
}

namespace {

// Validates p; on success returns the split count (0 when b == 0: nothing to launch).
cudaError_t decode_attention_check(const DecodeAttentionParams& p, int* splits) {
  *splits = 0;
  if (p.b < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > ATTN_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.b > 65535 || p.max_split_ctas < 0 || p.max_combine_ctas < 0)
    return cudaErrorInvalidValue;
  const int group = p.num_heads / p.num_kv_heads;
  if (group > DECODE_MAX_GROUP || group * p.head_dim > 2 * DECODE_MAX_PAIRS * DECODE_THREADS)
    return cudaErrorInvalidValue;
  if (p.b == 0) return cudaSuccess;
  const bool fold = p.rope.on();  // then q is not read
  if ((!fold && !p.q) || !p.k_cache || !p.v_cache || !p.slots || !p.ctx_lens || !p.out)
    return cudaErrorInvalidValue;
  if ((!fold && !aligned16(p.q)) || !aligned16(p.k_cache) || !aligned16(p.v_cache) ||
      !aligned16(p.out))
    return cudaErrorInvalidValue;
  if (fold) {
    if (!decode_attention_can_fold_rope(p)) return cudaErrorNotSupported;
    const RopeFold& f = p.rope;
    if (!f.positions || !f.inv_freq || f.k_cache != p.k_cache || f.v_cache != p.v_cache ||
        !aligned(f.qkv, 8) || (f.q_norm && !aligned(f.q_norm, 4)) ||
        (f.k_norm && !aligned(f.k_norm, 4)) || !(f.eps >= 0.0f))
      return cudaErrorInvalidValue;
  }
  const int s = decode_splits(p.b, p.num_kv_heads, p.max_seq, p.max_split_ctas);
  if (s > 1 && (!p.workspace || !aligned16(p.workspace))) return cudaErrorInvalidValue;
  *splits = s;
  return cudaSuccess;
}

dim3 combine_grid(const DecodeAttentionParams& p) {
  if (p.max_combine_ctas <= 0) return dim3(p.num_heads, p.b);
  return dim3(std::min(p.num_heads * p.b, p.max_combine_ctas));
}

}  // namespace

cudaError_t launch_decode_attention_split(const DecodeAttentionParams& p) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  const DecodeSplitChoice k = decode_split_kernel(p, splits);
  err = allow_smem(k.kernel, k.smem);
  if (err != cudaSuccess) return err;
  return launch_kernel(k.kernel, k.grid, dim3(DECODE_THREADS), k.smem, p.launch, p, splits);
}

cudaError_t launch_decode_attention_combine(const DecodeAttentionParams& p) {
  int splits = 0;
  const cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  return launch_kernel(decode_attention_combine_kernel, combine_grid(p), dim3(COMBINE_THREADS), 0,
                       p.launch, p, splits);
}

cudaError_t launch_decode_attention(const DecodeAttentionParams& p) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  err = launch_decode_attention_split(p);
  // With done_counters the split kernel merges its own partials.
  if (err != cudaSuccess || splits == 1 || p.done_counters != nullptr) return err;
  return launch_decode_attention_combine(p);
}

cudaError_t decode_attention_footprint(const DecodeAttentionParams& p, KernelFootprint* split,
                                       KernelFootprint* combine) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess) return err;
  const DecodeSplitChoice k = decode_split_kernel(p, splits);
  // The occupancy query needs the kernel's opt-in for more than 48 KiB of shared memory.
  err = allow_smem(k.kernel, k.smem);
  if (err != cudaSuccess) return err;
  err = kernel_footprint(k.kernel, int(k.grid.x * k.grid.y * k.grid.z), DECODE_THREADS, k.smem,
                         split);
  if (err != cudaSuccess) return err;
  const dim3 cg = combine_grid(p);
  return kernel_footprint(decode_attention_combine_kernel, p.b == 0 ? 0 : int(cg.x * cg.y),
                          COMBINE_THREADS, 0, combine);
}

cudaError_t preload_attention_kernels() {
  for (cudaError_t err :
       {preload_kernel(decode_attention_split_kernel),
        preload_kernel(decode_attention_combine_kernel), preload_kernel(prefill_attention_kernel)})
    if (err != cudaSuccess) return err;
  for (cudaError_t err :
       {preload_kernel(decode_attention_fast_kernel<1, 8, DECODE_FAST_UNROLL, true, true>),
        preload_kernel(decode_attention_fast_kernel<1, 16, DECODE_FAST_UNROLL_HEAD, true, true>)})
    if (err != cudaSuccess) return err;
  for (int group : {1, 2, 4, 8})
    for (int head_dim : {64, 128, 256})
      for (int per_head : {0, 1}) {
        DecodeAttentionParams p;
        p.num_kv_heads = 1;
        p.num_heads = group;
        p.head_dim = head_dim;
        const cudaError_t err = preload_kernel(decode_split_kernel(p, 1, per_head).kernel);
        if (err != cudaSuccess) return err;
      }
  return cudaSuccess;
}

cudaError_t launch_prefill_attention(const PrefillAttentionParams& p) {
  if (p.t < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > ATTN_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.num_heads > 65535)
    return cudaErrorInvalidValue;
  if (p.t == 0) return cudaSuccess;
  if (!p.q || !p.k_cache || !p.v_cache || !p.slots || !p.positions || !p.out)
    return cudaErrorInvalidValue;
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache) || !aligned16(p.out))
    return cudaErrorInvalidValue;
  const size_t smem = prefill_smem_bytes(p.head_dim);
  cudaError_t err = allow_smem(prefill_attention_kernel, smem);
  if (err != cudaSuccess) return err;
  return launch_kernel(prefill_attention_kernel, dim3(ceil_div(p.t, PREFILL_BQ), p.num_heads),
                       dim3(PREFILL_THREADS), smem, p.launch, p);
}

}  // namespace megaops
