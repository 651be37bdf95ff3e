// Private to attention_decode.cu: the warp-parallel decode attention (decode_attention_fast, for
// G <= 8 query heads per kv head) and the qkv_rope fold of its per-query-head form
// (kernels/rope_fold.cuh). See attention_decode.cu for the decode scheme.
#pragma once

#include "kernels/attention_decode_merge.cuh"
#include "kernels/attention_impl.cuh"
#include "kernels/qkv_rope_row.cuh"

namespace megaops {
namespace {

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
// warp of row bi in a CTA that `writes` also stores it into the cache at pos_self of row bi's
// sequence (`seq`: its rows, contiguous or through its block table). Reads
// the predecessor's qkv: after the wait. Called by all DECODE_THREADS threads; ends with a barrier.
template <bool PAGED>
__device__ __forceinline__ void rope_fold_prologue(const DecodeAttentionParams& p,
                                                   const RopeFoldWarp& w, int bi, int kv_head,
                                                   bool writes, int pos_self,
                                                   const KvSeqRows<PAGED>& seq) {
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
      const int64_t at = (seq.row(pos_self) * p.num_kv_heads + kv_head) * hd;
      qkv_rope_row_store((w.kind == 1 ? f.k_cache : f.v_cache) + at, hd, lo, hi);
    }
  }
  __syncthreads();
}

// The scale-folded q of a CTA's heads (log2 domain) and the empty running (max, sum, output).
template <int GMAX>
__device__ __forceinline__ void decode_fast_init(const DecodeAttentionParams& p,
                                                 const uint4 (&qraw)[GMAX], float (&q)[GMAX][8],
                                                 float (&m)[GMAX], float (&l)[GMAX],
                                                 float (&acc)[GMAX][8]) {
  const float q_scale = p.scale * LOG2E;
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    bf16x8_to_float(qraw[g], q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= q_scale;
  }
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
}

// One round of a key slot: the U scores of the round's K rows (reduced over the slot's lanes), one
// move of the running max, and the accumulation of the V rows of the slot's keys.
template <int GMAX, int LPK, int UNROLL, int STEP>
__device__ __forceinline__ void decode_fast_round_update(const float (&q)[GMAX][8],
                                                         const uint4 (&kr)[UNROLL],
                                                         const uint4 (&vr)[UNROLL], int key_end,
                                                         int base, int kslot, float (&m)[GMAX],
                                                         float (&l)[GMAX], float (&acc)[GMAX][8]) {
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
  if (mine == 0) return;
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

// Merges the warp's key slots (lanes that differ in the bits above the slot's lanes). A slot that
// saw no key has m = -inf and weighs zero.
template <int GMAX, int LPK>
__device__ __forceinline__ void decode_fast_merge_slots(float (&m)[GMAX], float (&l)[GMAX],
                                                        float (&acc)[GMAX][8]) {
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
}

// Merges the warps: slot 0 of each warp publishes, then threads stride over (head, dim) and write
// the output (one active split) or the split's partial to the workspace.
template <int GMAX, int NWARPS>
__device__ __forceinline__ void decode_fast_merge_warps(
    const DecodeAttentionParams& p, int splits, int bi, int head0, int split, int nh, int kslot,
    int sub, int warp, int dim0, bool has_dims, int n_active, bf16* out, const float (&m)[GMAX],
    const float (&l)[GMAX], const float (&acc)[GMAX][8], unsigned char* smem) {
  const int tid = threadIdx.x, hd = p.head_dim;
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
    if (n_active == 1) {
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
}

// Where decode_fast_load_round takes the keys of this launch's own rows (FOLD: the keys
// rope_fold_row_of finds in sub_pos): from the cache like any other (no fold), not at all (left
// zero: before the prologue has formed them), or from the prologue's rows in shared memory.
enum class OwnKeys { Cache, Skip, Shared };

// A round's K / V rows of one key slot of LPK lanes: keys base + kslot + u * STEP (u < UNROLL)
// below key_end, zeros past it. PAGED: lane u of the slot holds key u's block in `blk` (loaded a
// round ahead, decode_fast_fetch_block; LPK >= UNROLL), which every lane of the slot takes by a
// shuffle, so a lane keeps one block id instead of UNROLL; kp / vp point at the kv head's and
// lane's dims of row 0 of the cache. Contiguous: of the slot's first row, `blk` unused. Called by
// whole warps (the shuffles); the round bounds are warp-uniform.
template <int LPK, int UNROLL, int STEP, bool PAGED, OwnKeys OWN>
__device__ __forceinline__ void decode_fast_load_round(const bf16* kp, const bf16* vp, int64_t row,
                                                       const KvSeqRows<PAGED>& seq, int32_t blk,
                                                       int base, int kslot, int key_end,
                                                       bool has_dims, int dim0,
                                                       const int (&sub_pos)[ROPE_FOLD_MAX_ROWS],
                                                       uint4 (&kr)[UNROLL], uint4 (&vr)[UNROLL]) {
  static_assert(!PAGED || LPK >= UNROLL, "a slot's lanes hold its round's blocks");
  [[maybe_unused]] const int slot_lane0 = (threadIdx.x % 32) & ~(LPK - 1);
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int key = base + kslot + u * STEP;
    [[maybe_unused]] int32_t block = 0;
    if constexpr (PAGED) block = __shfl_sync(0xffffffffu, blk, slot_lane0 + u);
    kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
    if (!has_dims || key >= key_end) continue;
    if constexpr (OWN != OwnKeys::Cache) {
      const int r = rope_fold_row_of(key, sub_pos);
      if (r >= 0) {
        if constexpr (OWN == OwnKeys::Shared) {
          const bf16* rows = rope_fold_rows();
          kr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_k_row(r) + dim0);
          vr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_v_row(r) + dim0);
        }
        continue;
      }
    }
    if constexpr (PAGED) {
      // A 32-bit byte offset from a CTA-uniform base (kp / vp without the lane's dims): the load
      // can take the base from a uniform register and only the offset from the lane's, which
      // keeps the round's addresses out of the registers the loads' results need. A paged
      // layer's cache is below 4 GiB (KvPages).
      const uint32_t at = (seq.row_in32(block, key) * static_cast<uint32_t>(row) + dim0) * 2u;
      kr[u] = *reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(kp) + at);
      vr[u] = *reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(vp) + at);
    } else {
      const int64_t at = key * row;
      kr[u] = *reinterpret_cast<const uint4*>(kp + at);
      vr[u] = *reinterpret_cast<const uint4*>(vp + at);
    }
  }
}

// PAGED: lane u of each key slot loads the block of the slot's key u of the round at `base` (0
// past key_end and for lanes past UNROLL; never used).
template <int LPK, int UNROLL, int STEP, bool PAGED>
__device__ __forceinline__ int32_t decode_fast_fetch_block(const KvSeqRows<PAGED>& seq, int base,
                                                           int kslot, int key_end) {
  if constexpr (PAGED) {
    const int u = (threadIdx.x % 32) & (LPK - 1);
    const int key = base + kslot + u * STEP;
    if (u < UNROLL && key < key_end) return seq.block_of(key);
  }
  return 0;
}

// The rope fold's state of one CTA (decode_attention_fast, FOLD): the keys of this launch's rows
// in its chunk [kb, ke) (sub_pos[r]: row r's key, or -1), whether it attends any key and whether it
// writes row bi's k / v to the cache (at pos_self), its first round (base0) and its warp's part
// of the prologue.
struct RopeFoldCta {
  int sub_pos[ROPE_FOLD_MAX_ROWS];
  int pos_self = -1, base0 = 0, ke = 0;
  unsigned sub_mask = 0;  // bit r: row r's key is in the chunk
  bool has_keys = false, writes = false;
  RopeFoldWarp warp;  // set by the caller (rope_fold_warp), after the first round's loads
};

// Before the wait: every row's slot and position (the keys this launch writes, step inputs), this
// CTA's chunk of the ctx-key context and the keys of it this launch writes, and the CTA that
// writes row bi's k / v.
__device__ __forceinline__ RopeFoldCta rope_fold_cta(const DecodeAttentionParams& p, int splits,
                                                     int bi, int y, int split, int ctx,
                                                     int64_t slot, int slots_per_warp) {
  const int group = p.num_heads / p.num_kv_heads;
  RopeFoldCta f;
  f.pos_self = p.rope.positions[bi];
  const DecodeSplitPlan fp = decode_split_plan(ctx, splits);
  f.has_keys = split < fp.n_active;
  const int kb = split * fp.chunk;
  f.ke = f.has_keys ? min(ctx, kb + fp.chunk) : kb;
#pragma unroll
  for (int r = 0; r < ROPE_FOLD_MAX_ROWS; ++r) {
    const int64_t fold_slot = r < p.b ? p.slots[r] : -1;
    const int fold_pos = r < p.b ? p.rope.positions[r] : -1;
    const bool in = fold_slot == slot && fold_pos >= kb && fold_pos < f.ke;
    f.sub_pos[r] = in ? fold_pos : -1;
    f.sub_mask |= in ? 1u << r : 0u;
  }
  // The one CTA of (row, kv head) that writes the row's k / v to the cache: the group's first
  // query head, in the split that attends the position (split 0 when none does).
  const int owner = f.pos_self >= 0 && f.pos_self < ctx ? f.pos_self / fp.chunk : 0;
  f.writes = y % group == 0 && split == owner && f.pos_self >= 0 && f.pos_self < p.max_seq;
  f.base0 = kb + (threadIdx.x / 32) * slots_per_warp;
  return f;
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
// memory instead of the cache. PAGED: the cache through a block table (kernels/kv_pages.cuh); each
// round's key blocks are loaded a round ahead (the first round's before the wait: the table is a
// step input like the context), so the table adds no round trip to the key loop.
template <int GMAX, int LPK, int UNROLL, bool PER_HEAD, bool FOLD, bool PAGED>
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

  const int64_t slot = p.slots[bi];
  const int ctx = min(p.ctx_lens[bi], p.max_seq);
  bf16* out = p.out + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * hd;  // between positions
  const KvSeqRows<PAGED> seq(p.kv, slot, p.max_seq);
  // Contiguous: the lane's dims of the slot's first row; paged: the kv head of row 0 (the same
  // for every lane; decode_fast_load_round adds the row and the lane's dims).
  const int64_t off0 =
      PAGED ? static_cast<int64_t>(kv_head) * hd
            : (slot * p.max_seq * p.num_kv_heads + kv_head) * static_cast<int64_t>(hd) + dim0;
  const bf16* kp = p.k_cache + off0;
  const bf16* vp = p.v_cache + off0;

  // The chunk's first round: its key blocks (PAGED), and for FOLD its cached keys, loaded before
  // the wait. Every cached key this CTA reads is settled before the wait: the keys this launch
  // writes are exactly its rows' (slot, position) pairs, which FOLD takes from the prologue
  // instead (sub_pos; the pairs are step inputs, read before the wait), and every other row of
  // the cache was written by an earlier step (a chain kernel starts only once the one before it
  // has passed its own wait, so every grid before that one has completed).
  int32_t blk = 0;  // this lane's block of its slot's round, loaded a round ahead (PAGED)
  if constexpr (PAGED) {
    const DecodeSplitPlan plan0 = decode_split_plan(ctx, splits);
    const int first_end = split < plan0.n_active ? min(ctx, (split + 1) * plan0.chunk) : 0;
    blk = decode_fast_fetch_block<LPK, UNROLL, STEP, PAGED>(seq, split * plan0.chunk + warp * SLOTS,
                                                            kslot, first_end);
  }
  // A round's K / V rows. Declared outside the key loop for FOLD, whose first round is loaded
  // before the wait; every other round assigns them all before reading them.
  uint4 kr[UNROLL], vr[UNROLL];
  [[maybe_unused]] RopeFoldCta fold;
  if constexpr (FOLD) {
    fold = rope_fold_cta(p, splits, bi, y, split, ctx, slot, SLOTS);
    // The cached keys of the first round (this launch's own keys come after the prologue).
    decode_fast_load_round<LPK, UNROLL, STEP, PAGED, OwnKeys::Skip>(
        kp, vp, row, seq, blk, fold.base0, kslot, fold.ke, has_dims, dim0, fold.sub_pos, kr, vr);
    fold.warp = rope_fold_warp(p, bi, y, kv_head, fold.has_keys, fold.sub_mask, fold.writes);
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
    rope_fold_prologue<PAGED>(p, fold.warp, bi, kv_head, fold.writes, fold.pos_self, seq);
    const bf16* rows = rope_fold_rows();
    qraw[0] = make_uint4(0u, 0u, 0u, 0u);
    if (fold.has_keys && has_dims) qraw[0] = *reinterpret_cast<const uint4*>(rows + dim0);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int key = fold.base0 + kslot + u * STEP;
      const int r = rope_fold_row_of(key, fold.sub_pos);
      if (has_dims && key < fold.ke && r >= 0) {
        kr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_k_row(r) + dim0);
        vr[u] = *reinterpret_cast<const uint4*>(rows + rope_fold_v_row(r) + dim0);
      }
    }
  }
  DecodeSplitPlan plan;
  int key_begin, key_end;
  if (!decode_chunk(ctx, splits, split, nh * hd, out, &plan, &key_begin, &key_end)) return;

  float q[GMAX][8];
  float m[GMAX], l[GMAX], acc[GMAX][8];
  decode_fast_init<GMAX>(p, qraw, q, m, l, acc);

  // blk holds this lane's block of the round at `base` when an iteration starts: the round's K / V
  // loads are issued, then the next round's block is loaded into it while they are in flight.
  for (int base = key_begin + warp * SLOTS; base < key_end; base += STEP * UNROLL) {
    // FOLD: the first round was loaded before the wait and completed after the prologue.
    if (!FOLD || base != fold.base0)
      decode_fast_load_round<LPK, UNROLL, STEP, PAGED, FOLD ? OwnKeys::Shared : OwnKeys::Cache>(
          kp, vp, row, seq, blk, base, kslot, key_end, has_dims, dim0, fold.sub_pos, kr, vr);
    blk = decode_fast_fetch_block<LPK, UNROLL, STEP, PAGED>(seq, base + STEP * UNROLL, kslot,
                                                            key_end);
    decode_fast_round_update<GMAX, LPK, UNROLL, STEP>(q, kr, vr, key_end, base, kslot, m, l, acc);
  }

  decode_fast_merge_slots<GMAX, LPK>(m, l, acc);

  decode_fast_merge_warps<GMAX, NWARPS>(p, splits, bi, head0, split, nh, kslot, sub, warp, dim0,
                                        has_dims, plan.n_active, out, m, l, acc, smem);
  if (plan.n_active > 1 && p.done_counters != nullptr)
    decode_merge_if_last(p, splits, bi, kv_head, plan.n_active, plan.n_active * group / nh);
}

// The per-query-head kernels over the contiguous cache by variant, as decode_split_kernel
// (attention_decode.cu) picks them (DecodeFastKernels' per_head by head_dim class, 0-2, and its
// fold, 3-4) and
// decode_attention_region_variant names them: the CTA (bi, head, split) of that launch, for a
// persistent region's attention task, which runs a head's CTAs in turn.
__device__ __forceinline__ void decode_attention_per_head_unit(int variant,
                                                               const DecodeAttentionParams& p,
                                                               int splits, int bi, int head,
                                                               int split, unsigned char* smem) {
  constexpr int U = DECODE_FAST_UNROLL, H = DECODE_FAST_UNROLL_HEAD;
  switch (variant) {
    case 0:
      decode_attention_fast<1, 8, U, true, false, false>(p, splits, bi, head, split, 0, smem);
      break;
    case 1:
      decode_attention_fast<1, 16, H, true, false, false>(p, splits, bi, head, split, 0, smem);
      break;
    case 2:
      decode_attention_fast<1, 32, H, true, false, false>(p, splits, bi, head, split, 0, smem);
      break;
    case 3:
      decode_attention_fast<1, 8, U, true, true, false>(p, splits, bi, head, split, 0, smem);
      break;
    case 4:
      decode_attention_fast<1, 16, H, true, true, false>(p, splits, bi, head, split, 0, smem);
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace megaops
